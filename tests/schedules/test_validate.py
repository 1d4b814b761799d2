"""The validator: exact messages for each rule, and deadlocks found with the rank to blame."""

from __future__ import annotations

import pytest

from simulator.errors import ScheduleError
from simulator.schedules import Action, Schedule, loop_placement, v_placement
from simulator.schedules.validate import validate


def mk(*rows: str, pp: int = 2, vpp: int = 1, m: int = 2, placement=None, **kw) -> Schedule:
    return Schedule("t", pp, vpp, m, placement or loop_placement(pp, vpp),
                    tuple(tuple(Action.parse(a) for a in r.split()) for r in rows), **kw)


def refused(sched: Schedule) -> str:
    with pytest.raises(ScheduleError) as err:
        validate(sched)
    return str(err.value)


def test_a_correct_1f1b_passes():
    validate(mk("0F0 0F1 0B0 0B1", "1F0 1B0 1F1 1B1"))


def test_an_overlapped_pair_of_independent_halves_passes():
    validate(mk("0F0 0F1@0 0B0@0 0B1", "1F0 1B0 1F1 1B1"))


def test_v_placement_and_split_backward_pass():
    # P=1 holds stages 0 and 1 in a V; stage 1 is the pipeline's last stage
    validate(mk("0F0 1F0 1I0 0I0 1W0 0W0", pp=1, vpp=2, m=1, placement=v_placement(1)))


@pytest.mark.parametrize("rows,message", [
    (("0F0 0F1 0B0 0B1 1F0", "1B0 1F1 1B1"),
     "rank 0, position 4, action 1F0: stage 1 runs on rank 1 (placement), not on rank 0"),
    (("0F0 0F1 0B0 0B1 0F1", "1F0 1B0 1F1 1B1"),
     "rank 0, position 4, action 0F1: duplicate: 0F1 already at rank 0 position 1"),
    (("0F0 0F1 0B0 0B1 2F0", "1F0 1B0 1F1 1B1"),
     "rank 0, position 4, action 2F0: stage 2 does not exist (stages are 0..1)"),
    (("0F0 0F1 0B0 0B1 0F2", "1F0 1B0 1F1 1B1"),
     "rank 0, position 4, action 0F2: microbatch 2 does not exist (microbatches are 0..1)"),
    (("0F0 0F1 0I0 0B0 0B1", "1F0 1B0 1F1 1B1"),
     "rank 0, position 3, action 0B0: full backward mixed with split backward: 0I0 at position "
     "2; expected either B or both I and W per stage and microbatch"),
    (("0F0 0F1 0B0 0W0 0B1", "1F0 1B0 1F1 1B1"),
     "rank 0, position 3, action 0W0: split backward mixed with full backward: 0B0 at position "
     "2; expected either B or both I and W per stage and microbatch"),
    (("0F0 0F1 0W0 0I0 0B1", "1F0 1B0 1F1 1B1"),
     "rank 0, position 2, action 0W0: weight gradient before its input gradient 0I0 (it is at "
     "position 3)"),
    (("0F0 0F1 0W0 0B1", "1F0 1B0 1F1 1B1"),
     "rank 0, position 2, action 0W0: weight gradient before its input gradient 0I0 (there is "
     "none)"),
    (("0F0 0B0 0B1", "1F0 1B0 1F1 1B1"),
     "rank 0, action 0F1: not in the schedule: every stage runs a forward for every microbatch"),
    (("0F0 0F1 0B0", "1F0 1B0 1F1 1B1"),
     "rank 0, action 0B1: not in the schedule, nor 0I1 and 0W1: every stage runs a backward for "
     "every microbatch"),
    (("0F0 0F1 0B0 0I1", "1F0 1B0 1F1 1B1"),
     "rank 0, action 0W1: not in the schedule: a split backward needs both I and W (0I1 is at "
     "position 3)"),
    (("0F0 0F1@0 0B0 0B1@0", "1F0 1B0 1F1 1B1"),
     "rank 0, position 1, action 0F1@0: overlapped pair @0: its other half 0B1@0 is at position "
     "3, expected the next position 2"),
    (("0F0@0 0F1@0 0B0 0B1", "1F0 1B0 1F1 1B1"),
     "rank 0, position 0, action 0F0@0: overlapped pair @0 is 0F0@0 and 0F1@0, expected one F "
     "and one B or I"),
    (("0F0@0 0B0@0 0F1@0 0B1", "1F0 1B0 1F1 1B1"),
     "rank 0, position 0, action 0F0@0: overlapped pair @0 has 3 action(s) on this rank, "
     "expected 2 (one F, one B or I)"),
])
def test_rule_violations_name_rank_position_and_action(rows, message):
    assert refused(mk(*rows)) == message


def test_deadlock_on_a_rank_waiting_for_its_own_later_action_blames_that_rank():
    # rank 0 is blocked only as a consequence; rank 1 runs 1B0 before its own 1F0
    assert refused(mk("0F0 0B0 0F1 0B1", "1B0 1F0 1F1 1B1")) == (
        "rank 1, position 0, action 1B0: deadlock: waits for 1F0 (rank 1 position 1); also "
        "blocked: rank 0 at position 1 (0B0)")


def test_deadlock_between_two_ranks_names_the_lower_rank_on_the_cycle():
    assert refused(mk("0F0 0B0 0F1 0B1", "1F0 1F1 1B0 1B1")) == (
        "rank 0, position 1, action 0B0: deadlock: waits for 1B0 (rank 1 position 2); also "
        "blocked: rank 1 at position 1 (1F1)")


def test_deadlock_blames_the_waiting_rank_not_those_blocked_behind_it():
    sched = mk("0F0 0B0", "1F0 1B0", "2B0 2F0", pp=3, m=1)
    assert refused(sched) == (
        "rank 2, position 0, action 2B0: deadlock: waits for 2F0 (rank 2 position 1); also "
        "blocked: rank 0 at position 1 (0B0); rank 1 at position 1 (1B0)")


def test_deadlock_ignores_ranks_only_downstream_of_a_cycle():
    # ranks 1 and 2 wait on each other; rank 0 merely waits for rank 1's backward
    sched = mk("0F0 0F1 0B0 0B1", "1F0 1B0 1F1 1B1", "2F0 2F1 2B0 2B1", pp=3)
    assert refused(sched) == (
        "rank 1, position 1, action 1B0: deadlock: waits for 2B0 (rank 2 position 2); also "
        "blocked: rank 0 at position 2 (0B0); rank 2 at position 1 (2F1)")


def test_a_pair_cannot_feed_itself():
    assert refused(mk("0F0 0F1@0 0B1@0 0B0", "1F0 1B0 1F1 1B1")) == (
        "rank 0, position 2, action 0B1@0: deadlock: waits for 0F1 (rank 0 position 1) (its own "
        "overlapped half: a pair's halves start together), 1B1 (rank 1 position 3); overlapped "
        "with 0F1@0; also blocked: rank 1 at position 2 (1F1)")


def test_shape_errors():
    one_rank = Schedule("t", 2, 1, 1, (0, 1), ((Action(0, "F", 0),),))
    assert refused(one_rank) == "expected one action list per rank (2 for pp=2), found 1"
    three_stages = Schedule("t", 2, 1, 1, (0, 1, 1), ((), ()))
    assert refused(three_stages) == "placement: expected pp*vpp = 2*1 = 2 stages, found 3"
    bad_rank = Schedule("t", 2, 1, 1, (0, 2), ((), ()))
    assert refused(bad_rank) == "placement: stage 1 on rank 2, expected a rank in 0..1"
    twice = mk("0F0 0B0", "1F0 1B0", m=1, pipelines=((0, 1), (1,)))
    assert refused(twice) == ("pipelines: stage 1 is in pipelines 0 and 1; expected each stage "
                              "in one pipeline")


def _dual(*rows: str) -> Schedule:
    """DualPipe-style: pipelines 0->1 and 2->3; rank 0 holds 0 and 3, rank 1 holds 1 and 2."""
    return mk(*rows, vpp=2, m=2, placement=(0, 1, 1, 0), pipelines=((0, 1), (2, 3)))


def test_two_pipelines_each_carry_the_microbatches_entering_them():
    validate(_dual("0F0 3F1 3B1 0B0", "2F1 1F0 1B0 2B1"))
    assert refused(_dual("3F1 0F0 3B1 0B0", "1F0 2F1 1B0 2B1")) == (
        "rank 0, position 0, action 3F1: deadlock: waits for 2F1 (rank 1 position 1); also "
        "blocked: rank 1 at position 0 (1F0)")


def test_each_microbatch_enters_exactly_one_pipeline():
    assert refused(_dual("0F0 3F1 3B1 0B0 0F1", "2F1 1F0 1B0 2B1")) == (
        "microbatch 1 must enter exactly one pipeline: expected 0F1 or 2F1, found 0F1 and 2F1")
    assert refused(_dual("0F0 0B0", "1F0 1B0")) == (
        "microbatch 1 must enter exactly one pipeline: expected 0F1 or 2F1, found none")
    assert refused(_dual("0F0 0B0", "2F1 1F0 1B0 2B1")) == (
        "rank 0, action 3F1: not in the schedule: every stage runs a forward for every "
        "microbatch of its pipeline")


def test_a_stage_running_a_microbatch_of_the_other_pipeline_is_refused():
    assert refused(_dual("0F0 3F1 3B1 0B0", "2F1 1F0 1B0 2B1 1F1")) == (
        "rank 1, position 4, action 1F1: microbatch 1 does not go through pipeline 0 (stages 0, "
        "1): it enters pipeline 1 at stage 2")
