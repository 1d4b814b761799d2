"""The lookahead walk (a rank runs ahead on its own clock while its data has been sent, and
yields only to wait for data not sent yet) gives the step-by-step walk's records exactly: every
time compared with ==, on every registered schedule, random costs with fractions of a ns,
queueing links, DP collectives, jitter, slow ranks, several iterations; the same deadlock
report; and far fewer SimPy events."""

from __future__ import annotations

import functools

import pytest
import simpy
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from simulator import DeadlockError, simulate
from simulator.engine import runtime as rt_mod
from simulator.errors import ConfigError
from simulator.schedules import generate, names
from simulator.schedules.action import Action, Kind
from simulator.schedules.schedule import Schedule
from simulator.system import SystemConfig
from simulator.system.config import CollectiveConfig, LinkConfig
from simulator.workload import Comm, CommGroup, CommType, make_layer
from simulator.workload.model import Header, Workload

from .cases import Drawn, cases, one_vpp

LINK = LinkConfig(bandwidth_gbps=3.0, latency_ns=70.5)   # 8/3 ns per byte: fractional times
SYSTEM = SystemConfig(links=LINK, collectives=CollectiveConfig(tp=LINK, dp=LINK))
TP = Comm(CommType.ALLREDUCE, CommGroup.TP, 6000, "ALLREDUCE")
DP = Comm(CommType.ALLREDUCE, CommGroup.DP, 20000, "ALLREDUCE")


def workload(n_chunks: int, costs: list[tuple[int, int, int]], pp_comm: int) -> Workload:
    layers = []
    for i in range(n_chunks):
        f, ig, wg = costs[i % len(costs)]
        layers.append(make_layer(i, f, ig, wg, fwd_comm=TP if i % 2 else
                                 Comm(CommType.NONE, CommGroup.TP, 0), ig_comm=TP, wg_comm=DP,
                                 update_time=50))
    header = Header("HYBRID_TRANSFORMER_FWD_IN_BCKWD", tp=2, pp=1, all_gpus=6, pp_comm=pp_comm)
    return Workload("<lookahead>", header, tuple(layers))


def records(r) -> tuple:
    rec = r.records
    return (sorted((a.rank, a.stage, a.kind, a.microbatch, a.iteration, a.start, a.end)
                   for a in rec.actions),
            sorted((t.src_rank, t.dst_rank, t.data, t.dst_stage, t.microbatch, t.iteration,
                    t.issued, t.start, t.end) for t in rec.transfers),
            sorted((c.rank, c.layer, c.iteration, c.ready, c.start, c.end)
                   for c in rec.collectives),
            rec.iteration_bounds, rec.rank_finish, rec.peak_memory,
            sorted((k, v.bytes, v.transfers, v.busy_ns) for k, v in rec.links.items()))


def step_by_step(monkeypatch, *args, **kwargs):
    with monkeypatch.context() as m:
        m.setattr(rt_mod._Run, "_can_look_ahead", lambda self: False)
        return simulate(*args, **kwargs)


@pytest.mark.parametrize("name", sorted(names()))
def test_lookahead_equals_step_by_step_on_every_schedule(name, monkeypatch):
    n = 0
    for sched in cases(name, ((2, 4), (4, 8)), one_vpp(name)):
        wl = workload(sched.n_chunks, [(1000, 900, 500), (1333, 877, 411), (999, 1201, 0)],
                      pp_comm=3001)
        kw = dict(iterations=3 if sched.flush else 1, slow_ranks={sched.pp - 1: 1.37})
        ahead = simulate(wl, sched, SYSTEM, **kw)
        step = step_by_step(monkeypatch, wl, sched, SYSTEM, **kw)
        assert records(ahead) == records(step)
        assert ahead.to_dict() == step.to_dict()
        n += 1
    assert n > 0


@functools.lru_cache(maxsize=None)
def _legal_shapes(name: str) -> list[tuple[int, int]]:
    """The (P, M) with P 2-5 and M 1-10 at which schedule ``name`` exists."""
    out = []
    for P in range(2, 6):
        for M in range(1, 11):
            try:
                generate(name, P, M, one_vpp(name)[0])
            except ConfigError:
                continue
            out.append((P, M))
    return out


def test_lookahead_equals_step_by_step_on_random_runs(monkeypatch):
    drawn = Drawn()

    @settings(max_examples=40, deadline=None, derandomize=True,
              suppress_health_check=[HealthCheck.function_scoped_fixture])
    @given(name=st.sampled_from(sorted(names())), data=st.data(),
           costs=st.lists(st.tuples(st.integers(0, 5000), st.integers(0, 5000),
                                    st.integers(0, 5000)), min_size=1, max_size=6),
           pp_comm=st.sampled_from([0, 1, 777, 50_000]), jitter=st.sampled_from([0.0, 0.3]),
           iterations=st.integers(1, 3))
    def run(name, data, costs, pp_comm, jitter, iterations):
        # a shape the schedule takes (P 2-5, M 1-10): drawing any shape and leaving out the
        # refused ones let the draws fall mostly on DualPipe's few legal shapes
        P, M = data.draw(st.sampled_from(_legal_shapes(name)))
        sched = drawn.generate(name, P, M, one_vpp(name)[0])
        if sched is None:
            return
        if not sched.flush:
            iterations = 1
        wl = workload(sched.n_chunks, costs, pp_comm)
        kw = dict(iterations=iterations, jitter=jitter, seed=7)
        assert records(simulate(wl, sched, SYSTEM, **kw)) == \
            records(step_by_step(monkeypatch, wl, sched, SYSTEM, **kw))

    run()
    drawn.check(0.5)


def test_lookahead_reports_the_same_deadlock(monkeypatch):
    # rank 1 runs F1 first: it waits for rank 0's F1, which comes after rank 0's B0, which
    # waits for rank 1's B0 gradient
    F, B = Kind.F, Kind.B
    ranks = ((Action(0, F, 0), Action(0, B, 0), Action(0, F, 1), Action(0, B, 1)),
             (Action(1, F, 1), Action(1, F, 0), Action(1, B, 0), Action(1, B, 1)))
    sched = Schedule("swapped", 2, 1, 2, (0, 1), ranks)
    wl = workload(2, [(1000, 900, 500)], pp_comm=3001)
    with pytest.raises(DeadlockError) as ahead:
        simulate(wl, sched, SYSTEM, validate=False)
    with pytest.raises(DeadlockError) as step:
        step_by_step(monkeypatch, wl, sched, SYSTEM, validate=False)
    assert str(ahead.value) == str(step.value)
    assert str(ahead.value) == (
        "deadlock at t=1000 ns: rank 0 waits on recv 0B0 (1->0) from rank 1 (since t=1000 ns); "
        "rank 1 waits on recv 1F1 (0->1) from rank 0 (since t=0 ns)")


def test_lookahead_makes_far_fewer_events(monkeypatch):
    """What the lookahead is for: on 1F1B at P = 4, M = 64 the step-by-step walk makes about
    1.5 SimPy events per action; the lookahead only where a rank has to wait."""
    counts = []
    real = simpy.Environment.schedule

    def counting(self, *a, **k):
        counts[-1] += 1
        return real(self, *a, **k)

    monkeypatch.setattr(simpy.Environment, "schedule", counting)
    sched = generate("1f1b", 4, 64, 1)
    wl = workload(4, [(1000, 900, 500)], pp_comm=3001)
    counts.append(0)
    ahead = simulate(wl, sched, SYSTEM)
    counts.append(0)
    step = step_by_step(monkeypatch, wl, sched, SYSTEM)
    assert records(ahead) == records(step)
    n_actions = 2 * 4 * 64
    assert counts[1] >= n_actions          # one timeout per action at least
    assert counts[0] < n_actions / 2
