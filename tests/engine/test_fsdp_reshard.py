"""torchtitan's FSDP2 without a pipeline (engine/costs.py ``gathers``, engine/tail.py
``fsdp_gathers``): every forward all-gathers each layer's weights, every backward gathers them
again and reduce-scatters the gradients, microbatch after microbatch; with a pipeline the
gradients are synced on the last microbatch only (the distributed optimizer's timing).

The workload of tests/engine/test_megatron_ddp.py: four layers of F 1000 / I 700 / W 500 ns,
5,000 parameters each (a DP row of 20,000 B at 4 B a gradient), DP = 4 on the built-in
400 Gb/s, 2000 ns link. A layer's bf16 all-gather is 10,000 B: 3/4 x 10,000 x 8 / 400 +
3 x 2000 = 6150 ns; the chunk's one bucket (Megatron's default size holds all 20,000
parameters) reduce-scatters 80,000 B in fp32: 1200 + 6000 = 7200 ns; the step on the 5,000
parameters of the rank's shard, 32 B each over 1000 B/ns of HBM: 160 ns. After
each gather the layer's 5,000 bf16 weights are copied out of it on the compute stream (read and written, 4 B each: 20 ns), and
before each reduce-scatter its gradients are copied into the fp32 input (read 2 B, write 4 B:
30 ns, inside the layer's weight-gradient state)."""

from __future__ import annotations

import pytest

from simulator.engine.costs import FSDP_ALL_GATHER, FSDP_COPY_OUT
from simulator.engine.evaluator import evaluate
from simulator.engine.options import EngineOptions
from simulator.engine.runtime import Runtime, _Run
from simulator.run_options import RunOptions
from simulator.schedules import generate
from simulator.workload import uniform_workload
from simulator.workload.partition import partition

from .cases import assert_same
from .test_megatron_ddp import DP_ROW, SYSTEM

FSDP = RunOptions.from_values({"fsdp": 4, "param_dtype": "bf16"}).ddp_settings()
GATHER, REDUCE, STEP = 6150.0, 7200.0, 160.0
COPY_OUT, COPY_IN = 20.0, 30.0


def _run(microbatches: int, pp: int = 1, f: float = 1000.0, schedule: str = "1f1b"):
    sched = generate(schedule, pp, microbatches, 1)
    wl = uniform_workload(4, f, 700, 500, pp=pp, ga=microbatches, all_gpus=4 * pp,
                          wg_comm=DP_ROW)
    rt = Runtime(sched, partition(wl, pp), wl.header, SYSTEM, iterations=1,
                 options=EngineOptions(p2p="async", ddp=FSDP))
    rec = _Run(rt, look_ahead=False).run()
    assert_same(rec, rt.run())        # the lookahead walk
    assert_same(rec, evaluate(rt))    # the evaluator
    return rt, rec


def test_each_microbatch_gathers_every_layer_and_reduce_scatters_its_gradient():
    rt, rec = _run(2)
    # F: the gathers back to back from the action's start (ready at 6150, 12300, 18450,
    # 24600), each layer's copy-out and 1000 ns after its own; B the same, last layer first,
    # W (with the copy-in) then I (layer 0's gradient done 24600 + 20 + 530 into it)
    f, b = 4 * GATHER + COPY_OUT + 1000, 4 * GATHER + COPY_OUT + COPY_IN + 1200
    assert [(a.kind, a.start, a.end) for a in rec.actions] == [
        ("F", 0.0, f), ("B", f, f + b), ("F", f + b, 2 * f + b), ("B", 2 * f + b, 2 * (f + b))]
    # every microbatch's backward reduce-scatters once its copy-in is done; no all-gather
    # after the step
    ready = 4 * GATHER + COPY_OUT + 500 + COPY_IN
    assert [(c.start, c.end, c.nbytes) for c in rec.collectives] == [
        (f + ready, f + ready + REDUCE, 80000),
        (2 * f + b + ready, 2 * f + b + ready + REDUCE, 80000)]
    assert rec.iteration_bounds == [(0.0, 2 * f + b + ready + REDUCE + STEP)]
    assert rec.iteration_bounds == [(0.0, 109600.0)]
    costs = rt.program.costs[0].F.segments
    waits = [s for s in costs if s.state == FSDP_ALL_GATHER]
    assert [(s.layer, s.offset, s.duration) for s in waits] == [
        (0, 0.0, GATHER), (1, 7170.0, GATHER - 1020), (2, 13320.0, GATHER - 1020),
        (3, 19470.0, GATHER - 1020)]
    copies = [s for s in costs if s.state == FSDP_COPY_OUT]
    assert [(s.layer, s.offset, s.duration) for s in copies] == [
        (0, 6150.0, COPY_OUT), (1, 12300.0, COPY_OUT), (2, 18450.0, COPY_OUT),
        (3, 24600.0, COPY_OUT)]


def test_gathers_hide_behind_longer_layers_but_the_first():
    _, rec = _run(1, f=10000.0)
    # each gather (6150 ns) ends before the layer ahead of it does: only the first shows; each
    # layer copies its weights out of its gather first
    assert rec.actions[0].end == GATHER + 4 * (COPY_OUT + 10000)


@pytest.mark.parametrize("schedule", ["1f1b", "gpipe"])
def test_with_a_pipeline_the_weights_stay_gathered_and_the_last_microbatch_syncs(schedule):
    rt, rec = _run(2, pp=2, schedule=schedule)
    costs = rt.program.costs
    # no gathers inside the actions: two layers of 1000 a stage, B 2 x 1200
    assert [(c.F.duration, c.B.duration) for c in costs] == [(2000.0, 2400.0)] * 2
    # one reduce-scatter a stage, after its last backward (10,000 parameters, 40,000 B)
    assert sorted((c.rank, c.nbytes) for c in rec.collectives) == [(0, 40000), (1, 40000)]


@pytest.mark.parametrize("shard, link, expect", [
    # HSDP: 8 shards in a node, replicas across the 2 nodes: NVLink (3600 Gb/s, 1 us)
    (8, "intra", 7 / 8 * 10000 * 8 / 3600 + 7 * 1000),
    # FSDP over all 16: a ring across the nodes on 8 NICs (8 x 400 Gb/s, 5 us)
    (16, "inter", 15 / 16 * 10000 * 8 / 3200 + 15 * 5000),
])
def test_a_gather_runs_over_the_shard_group(shard, link, expect):
    """16 GPUs at TP 1, two nodes: FSDP's gathers go over its shard group's links."""
    from pathlib import Path

    from simulator.engine.tail import fsdp_gathers
    from simulator.system.config import load_system, with_fsdp
    from simulator.system.topology import LinkModel

    h100 = load_system(Path(__file__).resolve().parents[2] / "configs" / "system" / "h100.yaml")
    fsdp = with_fsdp(h100, shard, "bf16")
    # the file's 4 B a gradient: 20,000 B a row is 5,000 parameters, 10,000 B gathered
    system = fsdp._replace(memory=fsdp.memory._replace(grad_bytes_per_param=4.0))
    wl = uniform_workload(4, pp=1, ga=1, all_gpus=16, wg_comm=DP_ROW)
    got = fsdp_gathers(generate("1f1b", 1, 1, 1), partition(wl, 1), wl.header, system,
                       LinkModel(wl.header, system, 1), FSDP)
    # the copies at the preset's elementwise rate: 5,000 weights x 4 B out, x 6 B in
    bw = system.memory.bandwidth_gbs
    assert got == [{i: pytest.approx((expect, 20000 / bw, 30000 / bw)) for i in range(4)}]


@pytest.mark.parametrize("shard, expect", [
    # HSDP: a reduce-scatter over the node's 8 shards (NVLink), then the 10,000 B shard
    # all-reduced over the 2 replicas, one NIC each (400 Gb/s, 5 us)
    (8, (7 / 8 * 80000 * 8 / 3600 + 7 * 1000) + (2 * 1 / 2 * 10000 * 8 / 400 + 2 * 5000)),
    # FSDP over all 16: one reduce-scatter across the nodes on 8 NICs
    (16, 15 / 16 * 80000 * 8 / 3200 + 15 * 5000),
])
def test_hybrid_sharding_reduces_over_the_shards_then_the_replicas(shard, expect):
    """The chunk's one bucket (20,000 parameters, 80,000 B of fp32 gradients) on 16 GPUs."""
    from pathlib import Path

    from simulator.system.config import load_system, with_fsdp

    h100 = load_system(Path(__file__).resolve().parents[2] / "configs" / "system" / "h100.yaml")
    fsdp = with_fsdp(h100, shard, "bf16")
    system = fsdp._replace(memory=fsdp.memory._replace(grad_bytes_per_param=4.0))
    wl = uniform_workload(4, pp=1, ga=1, all_gpus=16, wg_comm=DP_ROW)
    rt = Runtime(generate("1f1b", 1, 1, 1), partition(wl, 1), wl.header, system,
                 iterations=1, options=EngineOptions(p2p="async", ddp=FSDP))
    (c,) = evaluate(rt).collectives
    assert (c.nbytes, c.end - c.start) == (80000, pytest.approx(expect))


def _with_policy(policy: str):
    return RunOptions.from_values({"fsdp": 4, "param_dtype": "bf16",
                                   "fsdp_reshard_after_forward": policy}).ddp_settings()


def test_never_resharding_after_forward_gathers_in_the_forward_only():
    sched = generate("1f1b", 1, 2, 1)
    wl = uniform_workload(4, 1000, 700, 500, pp=1, ga=2, all_gpus=4, wg_comm=DP_ROW)
    rt = Runtime(sched, partition(wl, 1), wl.header, SYSTEM, iterations=1,
                 options=EngineOptions(p2p="async", ddp=_with_policy("never")))
    rec = _Run(rt, look_ahead=False).run()
    assert_same(rec, evaluate(rt))
    # F as before (25,620); B keeps the weights its forward gathered: 4 x (1200 + the copy-in);
    # each backward still reduce-scatters, 4220 into it (layer 0's gradient and its copy-in)
    f, b = 4 * GATHER + COPY_OUT + 1000, 4 * (1200 + COPY_IN)
    assert [(a.start, a.end) for a in rec.actions] == [
        (0.0, f), (f, f + b), (f + b, 2 * f + b), (2 * f + b, 2 * (f + b))]
    assert [c.start for c in rec.collectives] == [f + 4220, 2 * f + b + 4220]
    assert rec.iteration_bounds == [(0.0, 2 * f + b + 4220 + REDUCE + STEP)]


def test_always_resharding_with_a_pipeline_is_refused():
    from simulator.errors import ConfigError

    sched = generate("1f1b", 2, 2, 1)
    wl = uniform_workload(4, pp=2, ga=2, all_gpus=8, wg_comm=DP_ROW)
    with pytest.raises(ConfigError) as err:
        Runtime(sched, partition(wl, 2), wl.header, SYSTEM, iterations=1,
                options=EngineOptions(p2p="async", ddp=_with_policy("always")))
    assert str(err.value) == (
        "--fsdp-reshard-after-forward always: expected default or never with a pipeline "
        "(pp 2): FSDP2 resharding after every forward under torch's PipelineStage is not "
        "modelled")


@pytest.mark.parametrize("shard, step", [(2, 20000 / 2 * 32 / 1000), (4, STEP)])
def test_the_step_runs_on_the_shard_groups_share(shard, step):
    """Hybrid sharding over 2 of the 4 DP ranks steps half the 20,000 parameters, 32 B each
    over 1000 B/ns of HBM; FSDP over all 4 a quarter."""
    from simulator.system.config import with_fsdp

    fsdp = with_fsdp(SYSTEM, shard, "bf16")
    system = fsdp._replace(memory=fsdp.memory._replace(grad_bytes_per_param=4.0,
                                                        bandwidth_gbs=1000.0))
    wl = uniform_workload(4, 1000, 700, 500, pp=1, ga=1, all_gpus=4, wg_comm=DP_ROW)
    rt = Runtime(generate("1f1b", 1, 1, 1), partition(wl, 1), wl.header, system,
                 iterations=1, options=EngineOptions(p2p="async", ddp=FSDP))
    assert rt.program.tail.ddp.ranks[0].step_ns == pytest.approx(step)
