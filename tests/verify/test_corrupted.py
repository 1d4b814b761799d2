"""Broken schedules: the validator refuses them naming the action, and fed past it, the executor
finds them itself (a clear error, a deadlock, or wrong gradients), never using wrong data."""

from __future__ import annotations


import pytest

from simulator.errors import DeadlockError, ScheduleError, Wait
from simulator.schedules import Action, generate
from simulator.schedules.comm_pass import op_lists
from simulator.schedules.validate import validate
from simulator.verify import ExecutionDeadlock, build_model, execute, make_batch, verify_schedule


def with_rank(sched, rank, actions):
    ranks = list(sched.ranks)
    ranks[rank] = tuple(actions)
    return sched._replace(ranks=tuple(ranks))


def moved(sched, rank, action, to):
    acts = list(sched.ranks[rank])
    acts.remove(action)
    acts.insert(to, action)
    return with_rank(sched, rank, acts)


def dropped(sched, rank, action):
    return with_rank(sched, rank, [a for a in sched.ranks[rank] if a != action])


def executor_error(sched):
    with pytest.raises(ScheduleError) as err:
        verify_schedule(sched, validate=False)
    return str(err.value)


def validator_error(sched):
    with pytest.raises(ScheduleError) as err:
        validate(sched)
    return str(err.value)


def test_w_before_its_i():
    sched = generate("zb-h1", 2, 4)
    assert [str(a) for a in sched.ranks[0][4:7]] == ["0F2", "0I1", "0W1"]
    bad = moved(sched, 0, Action(0, "W", 1), 5)
    assert validator_error(bad).startswith("rank 0, position 5, action 0W1: weight gradient "
                                           "before its input gradient 0I1")
    assert executor_error(bad) == (
        "rank 0, position 5, action 0W1: weight gradient before its input gradient 0I1: nothing "
        "stashed for W of stage 0 microbatch 1 (only the forward's activations, from 0F1)")


def test_backward_before_the_forward_reached_the_last_stage():
    sched = generate("1f1b", 2, 2)
    assert sched.as_strings() == [["0F0", "0F1", "0B0", "0B1"], ["1F0", "1B0", "1F1", "1B1"]]
    bad = moved(sched, 1, Action(1, "B", 0), 0)
    assert validator_error(bad).startswith("rank 1, position 0, action 1B0: deadlock")
    assert executor_error(bad) == ("rank 1, position 0, action 1B0: no activations of stage 1 "
                                   "microbatch 0 on this rank: its forward 1F0 has not run")


def test_backward_before_its_forward_on_a_first_stage_deadlocks_with_waits():
    sched = generate("1f1b", 2, 2)
    bad = moved(sched, 0, Action(0, "B", 0), 0)
    assert validator_error(bad).startswith("rank 0, position 0, action 0B0: deadlock")
    with pytest.raises(DeadlockError) as err:
        verify_schedule(bad, validate=False)
    assert isinstance(err.value, ExecutionDeadlock) and err.value.exit_code == 3
    assert err.value.waits == [Wait(0, "recv 0B0 (1->0)", 1, 0.0),
                               Wait(1, "recv 1F0 (0->1)", 0, 0.0)]
    assert str(err.value) == (
        "deadlock in the numeric executor after 0 ops: rank 0 waits on recv 0B0 (1->0) from "
        "rank 1 (itself blocked on recv 1F0 (0->1)); rank 1 waits on recv 1F0 (0->1) from "
        "rank 0 (itself blocked on recv 0B0 (1->0))")


def test_missing_forward_on_a_later_stage():
    sched = generate("1f1b", 2, 2)
    bad = dropped(sched, 1, Action(1, "F", 1))
    assert "action 1F1" in validator_error(bad)
    assert executor_error(bad) == ("rank 1, position 2, action 1B1: no activations of stage 1 "
                                   "microbatch 1 on this rank: its forward 1F1 has not run")


def test_missing_forward_on_the_first_stage_deadlocks():
    sched = generate("1f1b", 2, 2)
    bad = dropped(sched, 0, Action(0, "F", 1))
    assert "action 0F1" in validator_error(bad)
    with pytest.raises(DeadlockError) as err:
        verify_schedule(bad, validate=False)
    assert str(err.value) == (
        "deadlock in the numeric executor after 8 ops: rank 0 waits on recv 0B1 (1->0) from "
        "rank 1 (itself blocked on recv 1F1 (0->1)); rank 1 waits on recv 1F1 (0->1) from "
        "rank 0 (itself blocked on recv 0B1 (1->0))")


def test_missing_w_leaves_a_stash_behind():
    sched = generate("zb-h1", 2, 4)
    bad = dropped(sched, 0, Action(0, "W", 2))
    assert "action 0W2" in validator_error(bad)
    assert executor_error(bad) == ("rank 0, action 0W2: stage 0 microbatch 2 still holds its "
                                   "stash from 0I2 after the rank's last action: missing 0W2")


def test_a_microbatch_missing_everywhere_leaves_an_incomplete_gradient():
    sched = generate("gpipe", 1, 3)
    bad = with_rank(sched, 0, [a for a in sched.ranks[0] if a.microbatch != 1])
    assert "1" in validator_error(bad)
    assert executor_error(bad) == ("chunk 0 has weight gradients of 2 of 3 microbatches of "
                                   "minibatch 0; missing microbatch 1")


def test_duplicate_action():
    sched = generate("gpipe", 2, 2)
    bad = with_rank(sched, 1, list(sched.ranks[1]) + [Action(1, "B", 0)])
    assert "action 1B0" in validator_error(bad)
    assert executor_error(bad) == "rank 1, position 4, action 1B0: already ran at rank 1 position 2"


def test_action_on_the_wrong_rank():
    sched = generate("1f1b", 2, 2)
    bad = with_rank(sched, 0, list(sched.ranks[0]) + [Action(1, "F", 1)])
    assert executor_error(bad) == ("rank 0, position 4, action 1F1: stage 1 runs on rank 1 "
                                   "(placement), not on rank 0")


def test_local_handoff_out_of_order_on_one_rank():
    sched = generate("looped-bfs", 1, 2, 2)   # stages 0 and 1 both on rank 0
    bad = moved(sched, 0, Action(1, "F", 0), 0)
    assert executor_error(bad) == (
        "rank 0, position 0, action 1F0: needs the activation of 0F0, which has not reached "
        "rank 0 (stage 0 is on this rank and has not run 0F0 yet)")


def _run_programs(sched, programs):
    model = build_model(sched.n_chunks, sched.n_chunks)
    xs, ts = make_batch(model, sched.microbatches, 2)
    return execute(sched, model, xs, ts, programs=programs)


def test_send_of_data_never_computed():
    sched = generate("1f1b", 2, 1)
    programs = [list(p) for p in op_lists(sched)]
    assert [str(op) for op in programs[0]] == ["0F0", "send 1F0 (0->1)", "recv 0B0 (1->0)", "0B0"]
    del programs[0][0]
    with pytest.raises(ScheduleError) as err:
        _run_programs(sched, programs)
    assert str(err.value) == ("rank 0, action send 1F0 (0->1): sends data this rank has not "
                              "computed (0F0 has not run here, or its output was already sent)")


def test_receive_of_something_never_sent():
    sched = generate("1f1b", 2, 1)
    programs = [list(p) for p in op_lists(sched)]
    assert [str(op) for op in programs[1]] == ["recv 1F0 (0->1)", "1F0", "1B0", "send 0B0 (1->0)"]
    del programs[1][3]
    with pytest.raises(DeadlockError) as err:
        _run_programs(sched, programs)
    assert str(err.value) == ("deadlock in the numeric executor after 5 ops: rank 0 waits on "
                              "recv 0B0 (1->0) from rank 1 (finished)")


def test_sent_but_never_received_is_reported():
    sched = generate("1f1b", 2, 1)
    programs = [list(p) for p in op_lists(sched)]
    programs[0] = programs[0][:2]              # rank 0 never receives 0B0 nor runs 0B0
    with pytest.raises(ScheduleError) as err:
        _run_programs(sched, programs)
    assert str(err.value) == ("rank 1, action send 0B0: sent 0B0 to rank 0, which never "
                              "received it")


def test_computed_but_never_sent_is_reported():
    sched = generate("1f1b", 2, 1)
    programs = [list(p) for p in op_lists(sched)]
    programs[0] = programs[0][:2]
    programs[1] = programs[1][:3]              # and rank 1 keeps 0B0's gradient
    with pytest.raises(ScheduleError) as err:
        _run_programs(sched, programs)
    assert str(err.value) == ("rank 1, action send 0B0: computed the gradient for stage 0 "
                              "microbatch 0 but never sent it")


def test_received_but_never_used_is_reported():
    sched = generate("1f1b", 2, 1)
    programs = [list(p) for p in op_lists(sched)]
    programs[0] = programs[0][:3]              # rank 0 receives 0B0 but never runs 0B0
    with pytest.raises(ScheduleError) as err:
        _run_programs(sched, programs)
    assert str(err.value) == ("rank 0, action 0B0: the gradient for 0B0 arrived on this rank "
                              "but no action used it")


def test_wrong_weight_versions_give_wrong_gradients():
    """2BW claiming synchronous weights (all version 0): runs cleanly, numbers are wrong."""
    sched = generate("2bw", 2, 2, iterations=4)
    bad = sched._replace(meta={**sched.meta, "weight_version": (0,) * 8})
    report = verify_schedule(bad)
    assert not report.ok
    assert report.loss_error > 1e-3 and report.max_abs_grad_error > 1e-3
    assert report.activations_agree
    assert report.failure().startswith("2bw (pp 2, vpp 1, 2 microbatches) does not match "
                                       "single-device training: largest error ")


def test_weight_version_not_yet_produced_is_refused():
    sched = generate("2bw", 2, 2, iterations=4)
    bad = sched._replace(meta={**sched.meta,
                                           "weight_version": tuple(m // 2 for m in range(8))})
    assert executor_error(bad) == (
        "rank 0, position 3, action 0F2: needs weight version 1 of chunk 0, but only versions "
        "0..0 exist here: the update of minibatch 0 waits for all its backwards on chunk 0")


def test_a_microbatch_sent_through_both_dualpipe_directions():
    sched = generate("dualpipe", 2, 4)
    assert sched.pipelines == ((0, 1), (2, 3)) and sched.stage_chunk == (0, 1, 0, 1)
    relabel = tuple(tuple(a._replace(microbatch=0)
                          if a.stage >= 2 and a.microbatch == 2 else a for a in acts)
                    for acts in sched.ranks)
    bad = sched._replace(ranks=relabel)
    assert executor_error(bad) == ("rank 0, position 1, action 3F0: microbatch 0 reaches the "
                                   "loss a second time (first at stage 1): it ran through two "
                                   "pipelines")


def test_a_pipeline_that_does_not_run_the_model_in_order():
    sched = generate("dualpipe", 2, 4)._replace(stage_chunk=(0, 1, 1, 0))
    assert executor_error(sched) == ("pipelines[1] (stages [2, 3]) computes chunks [1, 0]; "
                                     "expected chunks 0..1 in order (the whole model)")
