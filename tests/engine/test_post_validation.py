"""The zero-bubble fork's optimizer post-validation (``--optimizer-post-validation``, its
``--enable-optimizer-post-validation``; engine/tail.py ``Tail.arrive_alone``): no barrier before
the step, each rank steps once its own work is done and the partial global state has come from
the rank before it, then starts the next iteration.

The hand-worked case: zb-h2 on two ranks, three microbatches, one layer a stage of F = I = W =
1000 ns, no transfer cost (pp_comm 0). Its order, as the heuristic lays it out:

    rank 0: F0 F1 F2 I0 W0 I1 W1 I2 W2    0-1000-2000-3000 | 3000 ... 9000
    rank 1: F0 I0 F1 I1 F2 I2 W0 W1 W2    1000 ... 10000

a parallelogram: each rank busy from its first action to its last (9000 ns), rank 1 starting
and ending 1000 ns after rank 0. Each rank's step: 5,000 parameters x (38 + 4) B over 1000 B a
ns = 210 ns; the pre-step message: 8 B on a 400 Gb/s, 100 ns link, 100.16 ns."""

from __future__ import annotations

import pytest

from simulator.api import simulate
from simulator.engine.evaluator import evaluate
from simulator.engine.options import DDPSettings, EngineOptions
from simulator.engine.runtime import Runtime, _Run
from simulator.errors import ConfigError
from simulator.run_options import RunOptions
from simulator.schedules import generate
from simulator.system.config import CollectiveConfig, LinkConfig, MemoryConfig, SystemConfig
from simulator.workload import Comm, CommGroup, CommType, uniform_workload
from simulator.workload.partition import partition

from .cases import assert_same

LINK = LinkConfig(400.0, 100.0)
SYSTEM = SystemConfig(links=LINK, collectives=CollectiveConfig(tp=LINK, dp=LINK),
                      memory=MemoryConfig(grad_bytes_per_param=4.0, bandwidth_gbs=1000.0))
DP_ROW = Comm(CommType.ALLREDUCE, CommGroup.DP, 20000, "ALLREDUCE")    # 5,000 parameters
STEP = 5000 * (38 + 4) / 1000.0                                        # 210 ns
PRESTEP = 100.0 + 8 * 8 / 400.0                                        # 100.16 ns


def _runtime(name: str, pp: int, m: int, iterations: int, post: bool, *, f=1000, i=1000,
             w=1000, layers: int | None = None, pp_comm: int = 0, dp: int = 1,
             overlap: bool = False, **options) -> Runtime:
    sched = generate(name, pp, m, 1)
    wl = uniform_workload(layers or sched.n_chunks, f, i, w, pp=pp, ga=m, pp_comm=pp_comm,
                          all_gpus=pp * dp, wg_comm=DP_ROW)
    ddp = DDPSettings(overlap_grad_reduce=overlap, post_validation=post)
    return Runtime(sched, partition(wl, sched.n_chunks), wl.header, SYSTEM,
                   iterations=iterations, options=EngineOptions(p2p="async", ddp=ddp,
                                                                **options))


def _three_walks(rt: Runtime):
    """The SimPy engine step by step, its lookahead and the evaluator: one timeline."""
    step_by_step = _Run(rt, look_ahead=False).run()
    assert_same(step_by_step, rt.run())
    assert_same(step_by_step, evaluate(rt))
    return step_by_step


def test_the_parallelogram_tiles_across_iterations():
    rec = _three_walks(_runtime("zb-h2", 2, 3, 2, True))
    # iteration 1: rank 0 ends at 9000 and steps at once; rank 1 ends at 10000, after the
    # pre-step state from rank 0 (9000 + 100.16), and steps
    assert rec.rank_finish[0] == [9000.0, 10000.0]
    # iteration 2 starts on each rank after its own step: rank 0 at 9210, rank 1 at 10210,
    # the same shape shifted by 9210 ns
    assert rec.rank_finish[1] == [18210.0, 19210.0]
    assert rec.iteration_bounds == [(0.0, 10000.0 + STEP), (10000.0 + STEP, 19210.0 + STEP)]
    starts = rec.actions.start
    assert starts[0][9] == 9000.0 + STEP and starts[1][9] == 10000.0 + STEP
    # the steady iteration is a rank's own span and its step, 9210 ns; with the barrier every
    # iteration holds the (P - 1) F it takes the first forward to reach the last rank
    barrier = _three_walks(_runtime("zb-h2", 2, 3, 2, False))
    assert barrier.iteration_bounds == [(0.0, 10210.0), (10210.0, 20420.0)]


def test_the_pre_step_state_is_waited_for():
    # with 2000 ns a message the chain binds: rank 1 ends at 10000 but its state from rank 0
    # (done at 9000) arrives at 11000.16
    slow = SystemConfig(links=LinkConfig(400.0, 2000.0), memory=SYSTEM.memory)
    sched = generate("zb-h2", 2, 3, 1)
    wl = uniform_workload(2, 1000, 1000, 1000, pp=2, ga=3, pp_comm=0, all_gpus=2,
                          wg_comm=DP_ROW)
    rt = Runtime(sched, partition(wl, 2), wl.header, slow, iterations=1,
                 options=EngineOptions(p2p="async", ddp=DDPSettings(post_validation=True)))
    rec = _three_walks(rt)
    assert rec.iteration_bounds == [(0.0, 9000.0 + 2000.16 + STEP)]


def test_1f1b_gains_nothing_its_first_rank_spans_the_iteration():
    one = _three_walks(_runtime("1f1b", 4, 8, 3, True, layers=8, pp_comm=4096))
    flush = _three_walks(_runtime("1f1b", 4, 8, 3, False, layers=8, pp_comm=4096))
    steady = [e - s for s, e in one.iteration_bounds]
    barrier = [e - s for s, e in flush.iteration_bounds]
    # rank 0 ends each iteration last: the first iteration pays the chain of three pre-step
    # messages after it, and the next starts when rank 0 has stepped, as with the barrier
    assert steady[0] == pytest.approx(barrier[0] + 3 * PRESTEP, abs=1e-6)
    assert steady[1:] == pytest.approx(barrier[1:], abs=1e-6)


@pytest.mark.parametrize("name", ["1f1b", "zb-h1", "zb-h2", "interleaved-1f1b", "zb-v"])
def test_every_walk_gives_one_timeline(name):
    vpp = 2 if name in ("interleaved-1f1b", "zb-v") else 1
    sched = generate(name, 4, 8, vpp)
    wl = uniform_workload(2 * sched.n_chunks, 1000, 700, 500, pp=4, ga=8, pp_comm=4096,
                          all_gpus=16, wg_comm=DP_ROW, update_time=40)
    for overlap in (False, True):
        rt = Runtime(sched, partition(wl, sched.n_chunks), wl.header, SYSTEM, iterations=3,
                     options=EngineOptions(p2p="async", jitter_sigma=0.05, seed=3,
                                           ddp=DDPSettings(overlap_grad_reduce=overlap,
                                                           post_validation=True)))
        rec = _three_walks(rt)
        ends = [e for _, e in rec.iteration_bounds]
        assert ends == sorted(ends) and len(ends) == 3
        # no rank starts an iteration before it has stepped after the one before
        for r in range(4):
            k = len(sched.ranks[r])
            assert rec.actions.start[r][k] > rec.rank_finish[0][r]


def test_a_schedule_without_a_flush_is_refused():
    with pytest.raises(ConfigError, match=r"^--optimizer-post-validation: expected a schedule "
                       r"with a flush, got 2bw \(its minibatches already run as one "
                       r"continuous schedule\)$"):
        _runtime("2bw", 2, 4, 2, True).program


def test_fsdp_is_refused():
    with pytest.raises(ConfigError, match=r"^--optimizer-post-validation: expected Megatron-LM's "
                       r"optimizer, got --fsdp \(torchtitan's FSDP2\)$"):
        RunOptions(fsdp=8, optimizer_post_validation=True).ddp_settings()


def test_the_option_turns_on_megatron_ddp_and_the_report_says_so():
    o = RunOptions(optimizer_post_validation=True)
    assert o.uses_megatron_ddp and o.ddp_settings().post_validation
    sched = generate("zb-h2", 2, 3, 1)
    wl = uniform_workload(2, 1000, 1000, 1000, pp=2, ga=3, pp_comm=0, all_gpus=2,
                          wg_comm=DP_ROW)
    res = simulate(wl, sched, SYSTEM, RunOptions(optimizer_post_validation=True,
                                                 iterations=2))
    assert list(res.summary["iteration_times_ns"]) == [10000.0 + STEP, 9000.0 + STEP]
    assert res.summary["steady_iteration_ns"] == 9000.0 + STEP
    barrier = simulate(wl, sched, SYSTEM, RunOptions(megatron_ddp=True, iterations=2))
    assert "steady_iteration_ns" not in barrier.summary.to_dict()
    assert any(n.startswith("--optimizer-post-validation (the zero-bubble fork's): no barrier")
               for n in res.summary["notes"])


def test_one_iteration_is_warned_its_time_holds_the_fill():
    sched = generate("zb-h2", 2, 3, 1)
    wl = uniform_workload(2, 1000, 1000, 1000, pp=2, ga=3, pp_comm=0, all_gpus=2,
                          wg_comm=DP_ROW)
    one = simulate(wl, sched, SYSTEM, RunOptions(optimizer_post_validation=True))
    said = [w for w in one.warnings if w.code == "post_validation_one_iteration"]
    assert [w.message for w in said] == [
        "--optimizer-post-validation with one iteration: its time holds the pipeline's fill, "
        "which the overlap of iterations hides from the second on"]
    two = simulate(wl, sched, SYSTEM, RunOptions(optimizer_post_validation=True, iterations=2))
    assert "post_validation_one_iteration" not in [w.code for w in two.warnings]
