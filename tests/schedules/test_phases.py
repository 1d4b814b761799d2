"""Phase labels kept as two change points, counts read from the kind string and the in-flight
peak taken in C must equal the per-action walks they replaced, on every registered schedule and
on arbitrary (unvalidated) orders."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simulator.errors import ConfigError
from simulator.schedules import generate, names
from simulator.schedules.action import KINDS, Action, Kind
from simulator.schedules.phases import (COOLDOWN, STEADY, WARMUP, PhaseLabels, kind_string,
                                        peak_inflight, phase_counts, phase_labels)


def _labels_walk(actions):
    n = len(actions)
    grad = [i for i, a in enumerate(actions) if a.kind in (Kind.B, Kind.I)]
    fwd = [i for i, a in enumerate(actions) if a.kind == Kind.F]
    if not grad or not fwd:
        return [WARMUP if a.kind == Kind.F else COOLDOWN for a in actions]
    before = [i for i in fwd if i < grad[0]]
    steady_start = before[-1] if before else grad[0]
    after = [i for i in grad if i > fwd[-1]]
    cooldown_start = after[0] + 1 if after else n
    return [WARMUP if i < steady_start else COOLDOWN if i >= cooldown_start else STEADY
            for i in range(n)]


def _counts_walk(actions, labels):
    return {"warmup": sum(1 for a, p in zip(actions, labels) if p == WARMUP and a.kind == "F"),
            "steady": sum(1 for a, p in zip(actions, labels) if p == STEADY and a.kind == "F"),
            "cooldown": sum(1 for a, p in zip(actions, labels)
                            if p == COOLDOWN and a.kind in ("B", "I"))}


def _peak_walk(actions):
    split = {(a.stage, a.microbatch) for a in actions if a.kind == Kind.W}
    held, per_mb, peak_mb, peak_act = set(), {}, 0, 0
    for a in actions:
        key = (a.stage, a.microbatch)
        if a.kind == Kind.F:
            held.add(key)
            per_mb[a.microbatch] = per_mb.get(a.microbatch, 0) + 1
            peak_act, peak_mb = max(peak_act, len(held)), max(peak_mb, len(per_mb))
        elif (a.kind == Kind.W or (a.kind == Kind.B and key not in split)) and key in held:
            held.remove(key)
            per_mb[a.microbatch] -= 1
            if not per_mb[a.microbatch]:
                del per_mb[a.microbatch]
    return peak_mb, peak_act


def _check(actions):
    want = _labels_walk(actions)
    got = phase_labels(actions)
    assert got == want and list(got) == want and len(got) == len(want)
    assert [got[i] for i in range(-len(want), len(want))] == want + want
    assert got[1:-1] == want[1:-1]
    assert phase_counts(actions, got) == _counts_walk(actions, want)
    assert phase_counts(actions, got, kind_string(actions)) == _counts_walk(actions, want)
    assert peak_inflight(actions) == _peak_walk(actions)


@pytest.mark.parametrize("name", names())
def test_every_schedule_as_the_walks_say(name):
    for pp, m, v in itertools.product(range(1, 6), (1, 2, 3, 5, 8), range(1, 4)):
        try:
            sched = generate(name, pp, m, v)
        except ConfigError:
            continue
        for acts in sched.ranks:
            _check(acts)


def test_1f1b_labels_are_two_change_points():
    acts = generate("1f1b", 4, 8).ranks[1]          # 2 warm-up forwards, 6 steps, 2 cool-down
    labels = phase_labels(acts)
    assert labels == PhaseLabels(16, 2, 14)
    assert labels[:3] == [WARMUP, WARMUP, STEADY] and labels[-3:] == [STEADY, COOLDOWN, COOLDOWN]
    assert phase_counts(acts, labels) == {"warmup": 2, "steady": 6, "cooldown": 2}
    assert peak_inflight(acts) == (3, 3)
    with pytest.raises(IndexError):
        labels[16]


def test_edge_orders():
    f, b, w = Kind.F, Kind.B, Kind.W
    assert phase_labels(()) == []
    assert phase_labels((Action(0, f, 0), Action(0, f, 1))) == [WARMUP, WARMUP]
    assert phase_labels((Action(0, b, 0),)) == [COOLDOWN]
    # forwards and weight gradients only: labelled by kind, not by position
    assert phase_labels((Action(0, f, 0), Action(0, w, 0), Action(0, f, 1))) == [
        WARMUP, COOLDOWN, WARMUP]
    # a backward before its forward frees nothing; a forward twice holds one activation but
    # counts its microbatch twice, so one backward leaves the microbatch held
    assert peak_inflight((Action(0, b, 0), Action(0, f, 0), Action(0, f, 1))) == (2, 2)
    assert peak_inflight((Action(0, f, 0), Action(0, f, 0), Action(0, b, 0),
                          Action(0, f, 1))) == (2, 1)


_action = st.builds(Action, st.integers(0, 2), st.sampled_from(KINDS), st.integers(0, 4))
_in_order = st.lists(st.sampled_from("FB"), max_size=12).map(
    lambda ks: tuple(Action(0, Kind(k), ks[:i].count(k)) for i, k in enumerate(ks)))


@settings(max_examples=300, deadline=None)
@given(st.one_of(st.lists(_action, max_size=12).map(tuple), _in_order,
                 st.lists(st.builds(Action, st.just(1), st.sampled_from([Kind.F, Kind.I,
                                                                         Kind.W]),
                                    st.integers(0, 3)), max_size=10).map(tuple)))
def test_any_order_as_the_walks_say(actions):
    _check(actions)


def test_rank_kinds_and_stages_are_read_once_per_schedule():
    from simulator.schedules.phases import rank_kinds, rank_stages, rank_unpaired

    assert [rank_unpaired(generate("dualpipe-v", 2, 4), r) for r in range(2)] == [False, False]
    sched = generate("zb-v", 2, 4)
    for r, acts in enumerate(sched.ranks):
        assert rank_unpaired(sched, r)
        assert rank_kinds(sched, r) == "".join(str(a.kind) for a in acts)
        assert rank_stages(sched, r) == {a.stage for a in acts} == set(sched.stages_of(r))
        assert rank_kinds(sched, r) is rank_kinds(sched, r)
    assert rank_kinds(sched, 0).startswith("FFF")


def test_kind_string_is_a_letter_per_action():
    acts = (Action(0, Kind.F, 0), Action(0, Kind.SEND_F, 0), Action(0, Kind.B, 0))
    assert kind_string(acts) == "F?B"
    assert peak_inflight(acts) == _peak_walk(acts) == (1, 1)


def test_a_rank_given_as_kind_letters_gets_the_labels_of_its_actions():
    """RankActions are scanned as letters; the labels are those of the same actions one by one
    (every short mix of F, B, I, W, and forward-only, backward-only and W-only ranks)."""
    import random
    from array import array

    from simulator.schedules.phases import phase_labels
    from simulator.schedules.rank_actions import RankActions

    rng = random.Random(3)
    mixes = ["", "FFF", "BBI", "W", "FWFW", "FFBB", "FBIW"]
    mixes += ["".join(rng.choice("FBIW") for _ in range(rng.randint(1, 12))) for _ in range(3000)]
    for kinds in mixes:
        ra = RankActions(0, kinds, array("q", range(len(kinds))))
        by_letters, one_by_one = phase_labels(ra), phase_labels(tuple(ra.actions()))
        assert type(by_letters) is type(one_by_one) and list(by_letters) == list(one_by_one), kinds
        assert list(by_letters) == _labels_walk(ra.actions()), kinds
