"""The fast path (one SimPy event per action, per-layer times derived) gives the same timeline
as the reference path (one event per layer state, DP collectives issued as each weight
gradient ends), on every registered schedule."""

from __future__ import annotations

import pytest

from simulator import simulate
from simulator.errors import ConfigError
from simulator.schedules import generate, get, names
from simulator.system import SystemConfig
from simulator.system.config import CollectiveConfig, LinkConfig
from simulator.workload import Comm, CommGroup, CommType, make_layer
from simulator.workload.model import Header, Workload

ONE_B_PER_NS = LinkConfig(bandwidth_gbps=8.0, latency_ns=100.0)
SYSTEM = SystemConfig(links=ONE_B_PER_NS,
                      collectives=CollectiveConfig(tp=ONE_B_PER_NS, dp=ONE_B_PER_NS))
TP = Comm(CommType.ALLREDUCE, CommGroup.TP, 6000, "ALLREDUCE")
DP = Comm(CommType.ALLREDUCE, CommGroup.DP, 20000, "ALLREDUCE")


def workload(n_chunks: int) -> Workload:
    """Three rows per chunk with different costs, TP collectives, DP all-reduces, recompute."""
    layers = []
    for i in range(3 * n_chunks):
        layers.append(make_layer(i, 1000 + 37 * i, 900 + 11 * (i % 5), 500 + 3 * i,
                                 fwd_comm=TP if i % 2 else Comm(CommType.NONE, CommGroup.TP, 0),
                                 ig_comm=TP, wg_comm=DP, update_time=50))
    header = Header("HYBRID_TRANSFORMER_FWD_IN_BCKWD", tp=2, pp=1, all_gpus=4, pp_comm=3000,
                    checkpoints=(0,), checkpoint_initiates=(2,))
    return Workload("<fast-path>", header, tuple(layers))


def timeline(r):
    rec = r.records
    return (sorted((a.rank, a.stage, a.kind, a.microbatch, a.iteration, a.start, a.end)
                   for a in rec.actions),
            sorted((t.src_rank, t.dst_rank, t.data, t.dst_stage, t.microbatch, t.iteration,
                    t.start, t.end) for t in rec.transfers),
            sorted((c.rank, c.layer, c.iteration, c.ready, c.start, c.end)
                   for c in rec.collectives),
            rec.iteration_bounds)


def same(a, b):
    assert len(a) == len(b)
    for x, y in zip(a, b):
        assert x == pytest.approx(y, abs=1e-6)


@pytest.mark.parametrize("name", sorted(names()))
def test_fast_path_equals_layer_by_layer_on_every_schedule(name):
    spec = get(name)
    cases = 0
    for P, M in ((2, 4), (4, 8)):
        v = 2 if spec.variable_vpp else spec.default_vpp
        try:
            sched = generate(name, P, M, v)
        except ConfigError:
            continue
        wl = workload(sched.n_chunks)
        fast = simulate(wl, sched, SYSTEM, iterations=2)
        slow = simulate(wl, sched, SYSTEM, iterations=2, layer_by_layer=True)
        assert len(fast.records.collectives) > 0
        for part_fast, part_slow in zip(timeline(fast), timeline(slow)):
            same(part_fast, part_slow)
        assert fast.to_dict()["makespan_ns"] == pytest.approx(slow.to_dict()["makespan_ns"])
        cases += 1
    assert cases > 0


def test_reference_path_refuses_variation():
    with pytest.raises(ConfigError, match="--layer-by-layer"):
        simulate(workload(2), "1f1b", SYSTEM, pp=2, microbatches=2, layer_by_layer=True,
                 jitter=0.1)
