"""The fast path (one SimPy event per action, per-layer times derived) gives the same timeline
as the reference path (one event per layer state, DP collectives issued as each weight
gradient ends), on every registered schedule."""

from __future__ import annotations

import pytest

from simulator import simulate
from simulator.errors import ConfigError
from simulator.schedules import names

from .cases import SYSTEM, cases, one_vpp, workload


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
    n = 0
    for sched in cases(name, ((2, 4), (4, 8)), one_vpp(name)):
        wl = workload(sched.n_chunks)
        fast = simulate(wl, sched, SYSTEM, iterations=2)
        slow = simulate(wl, sched, SYSTEM, iterations=2, layer_by_layer=True)
        assert len(fast.records.collectives) > 0
        for part_fast, part_slow in zip(timeline(fast), timeline(slow)):
            same(part_fast, part_slow)
        assert fast.to_dict()["makespan_ns"] == pytest.approx(slow.to_dict()["makespan_ns"])
        n += 1
    assert n > 0


def test_reference_path_refuses_variation():
    with pytest.raises(ConfigError, match="--layer-by-layer"):
        simulate(workload(2), "1f1b", SYSTEM, pp=2, microbatches=2, layer_by_layer=True,
                 jitter=0.1)
