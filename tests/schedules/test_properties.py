"""Every registered schedule validates; corrupted schedules are refused, naming what broke."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from simulator.errors import ConfigError, ScheduleError
from simulator.schedules import Schedule, generate, names
from simulator.schedules.validate import validate

GRID = list(itertools.product(range(1, 6), range(1, 9), range(1, 4)))


@pytest.mark.parametrize("name", names())
def test_every_schedule_the_generator_accepts_validates(name):
    built = 0
    for pp, m, v in GRID:
        try:
            sched = generate(name, pp, m, v)
        except ConfigError:
            continue
        validate(sched)
        assert (sched.pp, sched.vpp) == (pp, v)
        built += 1
    assert built, f"{name} accepted nothing on the grid"


def _legal() -> list[tuple[str, int, int, int]]:
    legal = []
    for name in names():
        for pp, m, v in GRID:
            try:
                generate(name, pp, m, v)
            except ConfigError:
                continue
            legal.append((name, pp, m, v))
    return legal


LEGAL = _legal()


def schedules(split_backward: bool = False):
    combos = [c for c in LEGAL if not split_backward or generate(*c).split_backward]
    return st.sampled_from(combos).map(lambda c: generate(*c))


def _with_rank(sched: Schedule, rank: int, acts: list) -> Schedule:
    ranks = list(sched.ranks)
    ranks[rank] = tuple(acts)
    return sched._replace(ranks=tuple(ranks))


def _unpaired(sched: Schedule, data, kinds: str):
    """A (rank, position) of an action of one of ``kinds`` that is not half of a pair."""
    spots = [(r, p) for r, acts in enumerate(sched.ranks) for p, a in enumerate(acts)
             if a.kind in kinds and a.pair is None]
    assume(spots)
    return data.draw(st.sampled_from(spots))


def _refusal(sched: Schedule) -> str:
    with pytest.raises(ScheduleError) as err:
        validate(sched)
    return str(err.value)


@settings(max_examples=150, deadline=None)
@given(schedules(), st.data())
def test_a_backward_swapped_with_its_forward_deadlocks_on_that_rank(sched, data):
    rank, q = _unpaired(sched, data, "BI")
    acts = list(sched.ranks[rank])
    bwd = acts[q]
    p = next(i for i, a in enumerate(acts) if a.key == (bwd.stage, "F", bwd.microbatch))
    assume(acts[p].pair is None)
    acts[p], acts[q] = acts[q], acts[p]
    assert _refusal(_with_rank(sched, rank, acts)).startswith(
        f"rank {rank}, position {p}, action {bwd}: deadlock: waits for "
        f"{bwd.stage}F{bwd.microbatch} (rank {rank} position {q})")


@settings(max_examples=150, deadline=None)
@given(schedules(), st.data())
def test_a_dropped_action_is_named(sched, data):
    rank, p = _unpaired(sched, data, "FBIW")
    acts = list(sched.ranks[rank])
    gone = acts.pop(p)
    message = _refusal(_with_rank(sched, rank, acts))
    s, mb = gone.stage, gone.microbatch
    if gone.kind == "I":  # its W now has no I before it
        w = next(i for i, a in enumerate(acts) if a.key == (s, "W", mb))
        assert message == (f"rank {rank}, position {w}, action {acts[w]}: weight gradient before "
                           f"its input gradient {s}I{mb} (there is none)")
    elif gone.kind == "F" and sched.pipelines and len(sched.pipelines) > 1 and any(
            pipe[0] == s for pipe in sched.pipelines):
        assert message.startswith(f"microbatch {mb} must enter exactly one pipeline")
    else:
        assert message.startswith(f"rank {rank}, action {gone}: not in the schedule")


@settings(max_examples=150, deadline=None)
@given(schedules(), st.data())
def test_a_duplicated_action_is_named_where_it_repeats(sched, data):
    rank, p = _unpaired(sched, data, "FBIW")
    acts = list(sched.ranks[rank])
    at = data.draw(st.integers(p + 1, len(acts)))
    acts.insert(at, acts[p])
    assert _refusal(_with_rank(sched, rank, acts)) == (
        f"rank {rank}, position {at}, action {acts[p]}: duplicate: {acts[p]} already at rank "
        f"{rank} position {p}")


@settings(max_examples=150, deadline=None)
@given(schedules(split_backward=True), st.data())
def test_a_weight_gradient_moved_before_its_input_gradient_is_refused(sched, data):
    rank, w = _unpaired(sched, data, "W")
    acts = list(sched.ranks[rank])
    weight = acts.pop(w)
    i = next(k for k, a in enumerate(acts) if a.key == (weight.stage, "I", weight.microbatch))
    acts.insert(i, weight)
    assert _refusal(_with_rank(sched, rank, acts)) == (
        f"rank {rank}, position {i}, action {weight}: weight gradient before its input gradient "
        f"{weight.stage}I{weight.microbatch} (it is at position {i + 1})")
