"""Validation's fast first pass (``_rules_hold``: flat flags, or counters for ranks of one
stage whose kinds take microbatches in turn) accepts exactly what the detailed checks accept:
every registered schedule, and seeded random breakages of them (swaps, drops, duplicates,
moves), are judged the same by both."""

from __future__ import annotations

import random

import pytest

from simulator.errors import ScheduleError
from simulator.schedules import generate, names
from simulator.schedules.schedule import Schedule
from simulator.schedules import validate as V

from .cases import cases, one_vpp


def detailed(s: Schedule) -> bool:
    try:
        where = V._check_actions(s)
        V._check_pairs(s)
        V._check_complete(s, where)
        V._check_dataflow(s, where)
    except ScheduleError:
        return False
    return True


def schedules():
    return [s for name in names() for s in cases(name, ((2, 4), (4, 8)), one_vpp(name))]


def broken(s: Schedule, rng: random.Random) -> Schedule:
    ranks = [list(r) for r in s.ranks]
    r = rng.randrange(len(ranks))
    acts = ranks[r]
    i, j = rng.randrange(len(acts)), rng.randrange(len(acts))
    how = rng.choice(("swap", "drop", "dup", "move"))
    if how == "swap":
        acts[i], acts[j] = acts[j], acts[i]
    elif how == "drop":
        del acts[i]
    elif how == "dup":
        acts.insert(j, acts[i])
    else:
        other = ranks[(r + 1) % len(ranks)]
        other.insert(rng.randrange(len(other) + 1), acts.pop(i))
    return Schedule(s.name, s.pp, s.vpp, s.microbatches, s.placement,
                    tuple(tuple(x) for x in ranks), s.pipelines, s.stage_chunk, s.flush, s.meta)


def test_registered_schedules_pass_the_linear_check():
    for s in schedules():
        assert detailed(s), s.name
        if len(s.pipelines) == 1:
            assert V._rules_hold(s), s.name


@pytest.mark.parametrize("seed", range(3))
def test_linear_check_agrees_with_the_detailed_checks_on_broken_schedules(seed):
    rng = random.Random(seed)
    disagreements = []
    for s in schedules():
        for _ in range(15):
            b = broken(s, rng)
            fast = V._rules_hold(b)
            if fast and not detailed(b):        # accepting what the rules reject: a bug
                disagreements.append((b.name, b.as_strings()))
            if not fast and len(b.pipelines) == 1 and detailed(b):
                disagreements.append(("rejected", b.name, b.as_strings()))
    assert disagreements == []


def test_one_stage_ranks_take_the_counters():
    """1F1B and GPipe at v = 1 are judged on counters (each kind in turn), and a swap of two
    forwards on one rank, which breaks the turn, falls back to the flat flags, still valid."""
    for name in ("1f1b", "gpipe"):
        s = generate(name, 4, 8, 1)
        assert V._one_stage_ranks(s) == [0, 1, 2, 3]
        assert V._rules_hold(s)
    s = generate("gpipe", 4, 8, 1)
    ranks = [list(r) for r in s.ranks]
    ranks[3][0], ranks[3][1] = ranks[3][1], ranks[3][0]      # 3F1 before 3F0: still runs
    b = Schedule(s.name, s.pp, s.vpp, s.microbatches, s.placement,
                 tuple(tuple(x) for x in ranks), s.pipelines, s.stage_chunk, s.flush, s.meta)
    assert V._one_stage_ranks(b) is None
    assert V._rules_hold(b) and detailed(b)
    ranks[3][0], ranks[3][8] = ranks[3][8], ranks[3][0]      # a backward first: stuck
    b = Schedule(s.name, s.pp, s.vpp, s.microbatches, s.placement,
                 tuple(tuple(x) for x in ranks), s.pipelines, s.stage_chunk, s.flush, s.meta)
    with pytest.raises(ScheduleError, match="deadlock"):
        V.validate(b)


def test_megatron_order_is_known_to_run_and_only_it_skips_the_counters():
    """1F1B's order is accepted without the counters' walk: on every (P, M) up to 12 x 24 the
    counters accept it too; an order one swap away from it is left to the counters, and the
    fast pass still judges it as the detailed checks do."""
    for P in range(1, 13):
        for M in range(1, 25):
            s = generate("1f1b", P, M)
            simple = V._one_stage_ranks(s)
            assert V._megatron_order(s, simple) and V._runs_in_turn(s, simple)
    s = generate("1f1b", 4, 8)
    for i, j in ((3, 4), (0, 2), (5, 6)):
        ranks = [list(r) for r in s.ranks]
        ranks[2][i], ranks[2][j] = ranks[2][j], ranks[2][i]
        t = Schedule(s.name, s.pp, s.vpp, s.microbatches, s.placement,
                     tuple(tuple(r) for r in ranks))
        simple = V._one_stage_ranks(t)
        assert simple is None or not V._megatron_order(t, simple)
        assert V._rules_hold(t) == detailed(t)
