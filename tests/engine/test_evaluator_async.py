"""The evaluator's step-by-step walk of asynchronous runs (``evaluator_async``) gives the SimPy
engine's records to the nanosecond. Called directly here, so a fallback to the SimPy engine
cannot hide a difference: every registered schedule with seeded random costs, several
iterations, slow ranks and jitter (its general step), plain ranks (its fast step), links that
queue and zero-byte sends; the cases it hands on (an unchecked list); the float identity its
plain step relies on."""

from __future__ import annotations

import random

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from simulator import DeadlockError, simulate
from simulator.engine import evaluator_async
from simulator.engine.evaluator import evaluate
from simulator.engine.options import EngineOptions
from simulator.engine.runtime import Runtime
from simulator.schedules import generate, names
from simulator.schedules.action import Action
from simulator.schedules.schedule import Schedule
from simulator.system import SystemConfig
from simulator.system.config import CollectiveConfig, LinkConfig
from simulator.workload import Comm, CommGroup, CommType, make_layer, uniform_workload
from simulator.workload.model import Header, Workload
from simulator.workload.partition import partition

from .cases import SYSTEM, assert_same, cases

DP = Comm(CommType.ALLREDUCE, CommGroup.DP, 20000, "ALLREDUCE")


def random_workload(rng: random.Random, n_chunks: int, pp_comm: int) -> Workload:
    """Two or three rows per chunk with costs drawn from ``rng`` (zeros included: steps that
    take no time), DP all-reduces on odd rows."""
    rows = n_chunks * rng.choice((2, 3))
    layers = tuple(make_layer(i, rng.choice((0, 700, 1000, 3333)), rng.choice((0, 900, 1501)),
                              rng.choice((0, 500, 1234)),
                              wg_comm=DP if i % 2 else Comm(CommType.NONE, CommGroup.DP, 0),
                              update_time=rng.choice((0, 40)))
                   for i in range(rows))
    return Workload("<random>", Header("HYBRID_TRANSFORMER", pp=1, pp_comm=pp_comm), layers)


def _walk(rt):
    return evaluator_async.walk(rt.program, rt.options, rt.iterations)


def walk_and_simpy(sched, wl, system=SYSTEM, iterations=3, **options):
    """The walk's records and the engine's, or the same deadlock in both (None then)."""
    rt = Runtime(sched, partition(wl, sched.n_chunks), wl.header, system,
                 iterations=iterations if sched.flush else 1,
                 options=EngineOptions(p2p="async", **options))
    assert evaluator_async.covers(rt.program, "async")
    try:
        simpy = rt.run()
    except DeadlockError as err:
        with pytest.raises(DeadlockError) as again:
            _walk(rt)
        assert str(again.value) == str(err) and again.value.waits == err.waits
        return None
    fast = _walk(rt)
    assert fast is not None
    assert_same(simpy, fast)
    return fast


@pytest.mark.parametrize("name", sorted(names()))
def test_walk_equals_simpy_on_every_schedule_random_costs(name):
    rng = random.Random(f"walk-{name}")
    # 3 bytes per 8 ns (thirds of a ns in the times): links queue
    link = LinkConfig(bandwidth_gbps=3.0, latency_ns=250.0)
    system = SystemConfig(links=link, collectives=CollectiveConfig(tp=link, dp=link))
    for sched in cases(name):
        for pp_comm in (0, 5000):
            wl = random_workload(rng, sched.n_chunks, pp_comm)
            # plain ranks: the fast step (and the general one for pairs, zero costs, DP)
            plain = walk_and_simpy(sched, wl, system)
            # a slow rank, every rank jittered: the general step, drawn in each rank's order
            varied = walk_and_simpy(sched, wl, system, slow_ranks=((0, 1.3),),
                                    jitter_sigma=0.25, seed=rng.randrange(1000))
            assert plain is not None and varied is not None
            if pp_comm and sched.pp > 1:
                assert max(t.start - t.issued for t in plain.transfers) > 0   # queued


def test_known_times_with_a_queueing_link():
    # 1F1B on 2 ranks, F = B = 1000 ns, 4000 B per transfer at 1 B/ns + 100 ns latency:
    # rank 0's forwards are sent at 1000 and 2000 ns; the second waits for the link
    wl = uniform_workload(2, 1000, 500, 500, pp_comm=4000)
    link = LinkConfig(bandwidth_gbps=8.0, latency_ns=100.0)
    sched = Schedule("custom", 2, 1, 2, (0, 1), (
        tuple(map(Action.parse, ("0F0", "0F1", "0B0", "0B1"))),
        tuple(map(Action.parse, ("1F0", "1B0", "1F1", "1B1")))))
    fast = walk_and_simpy(sched, wl, SystemConfig(links=link), iterations=1)
    sends = [(t.src_rank, t.data, t.microbatch, t.issued, t.start, t.end)
             for t in fast.transfers]
    assert sends == [(0, "F", 0, 1000.0, 1000.0, 5100.0), (0, "F", 1, 2000.0, 5000.0, 9100.0),
                     (1, "B", 0, 7100.0, 7100.0, 11200.0),
                     (1, "B", 1, 11100.0, 11100.0, 15200.0)]
    # rank 0's backwards wait for the gradients: 11200-12200 and 15200-16200
    assert [(a.kind, a.start, a.end) for a in fast.actions if a.rank == 0] == [
        ("F", 0.0, 1000.0), ("F", 1000.0, 2000.0), ("B", 11200.0, 12200.0),
        ("B", 15200.0, 16200.0)]
    assert fast.iteration_bounds == [(0.0, 16200.0)]


def test_microbatch_beyond_the_count_runs_the_simpy_engine_and_says_so():
    # an unchecked list naming microbatch 5 of a 2-microbatch schedule: the walk's mailbox
    # has no slot for it and hands the run on; the evaluator's result is the engine's
    A = Action.parse
    sched = Schedule("custom", 2, 1, 2, (0, 1), (
        (A("0F0"), A("0F5"), A("0B0"), A("0B5")),
        (A("1F0"), A("1B0"), A("1F5"), A("1B5"))))
    wl = uniform_workload(2, 1000, 700, 500, pp_comm=4096)
    rt = Runtime(sched, partition(wl, 2), wl.header, SYSTEM, iterations=2)
    assert _walk(rt) is None
    assert_same(rt.run(), evaluate(rt))
    r = simulate(wl, sched, SYSTEM, validate=False, iterations=2, engine="evaluator")
    assert r.to_dict()["engine_used"] == "simpy"
    assert ("engine: the evaluator does not cover a microbatch beyond the schedule's count "
            "(an unchecked list); the SimPy engine ran") in r.to_dict()["notes"]


def test_deadlock_names_every_waiting_receive():
    # rank 1 runs 1B1 before 1F1 (F 1000 ns, B 1200 ns): ranks 0 and 1 wait on gradients from
    # t=2000, rank 2 on an activation from the end of its 2B0 at 4200;
    # the walk finds them by their marks in the mailbox
    A = Action.parse
    sched = Schedule("custom", 3, 1, 2, (0, 1, 2), (
        (A("0F0"), A("0F1"), A("0B0"), A("0B1")),
        (A("1F0"), A("1B1"), A("1F1"), A("1B0")),
        (A("2F0"), A("2B0"), A("2F1"), A("2B1"))))
    wl = uniform_workload(3, 1000, 700, 500, pp_comm=0)
    rt = Runtime(sched, partition(wl, 3), wl.header, SYSTEM, iterations=2)
    with pytest.raises(DeadlockError) as simpy:
        rt.run()
    with pytest.raises(DeadlockError) as fast:
        _walk(rt)
    assert fast.value.waits == simpy.value.waits
    assert str(fast.value) == str(simpy.value) == (
        "deadlock at t=4200 ns: rank 0 waits on recv 0B0 (1->0) from rank 1 (since t=2000 ns); "
        "rank 1 waits on recv 1B1 (2->1) from rank 2 (since t=2000 ns); rank 2 waits on recv "
        "2F1 (1->2) from rank 1 (since t=4200 ns)")


def test_layer_records_are_the_engines_and_other_modes_are_not_covered():
    # layer records take the general step: each action's layer states in proportion
    sched = generate("interleaved-1f1b", 4, 8, 2)
    wl = uniform_workload(8, 1000, 700, 500, pp_comm=64)
    rt = Runtime(sched, partition(wl, 8), wl.header, SYSTEM, iterations=2,
                 options=EngineOptions(p2p="async", trace_layers=True, jitter_sigma=0.2, seed=3))
    assert evaluator_async.covers(rt.program, "async")
    fast = _walk(rt)
    # iterations x stages x M x (F; B: input and weight gradients)
    assert len(fast.layers) == 2 * 8 * 8 * 3
    assert_same(rt.run(), fast)
    rt = Runtime(sched, partition(wl, 8), wl.header, SYSTEM, options=EngineOptions(p2p="batched"))
    assert not evaluator_async.covers(rt.program, "batched")


@settings(max_examples=2000, deadline=None)
@given(st.floats(min_value=0.0, max_value=1e300, allow_nan=False, allow_infinity=False),
       st.floats(min_value=5e-324, max_value=1e300, allow_nan=False, allow_infinity=False))
def test_a_plain_step_ends_at_now_when_it_starts_after_its_length(start, total):
    # the walk records a plain step's end as `now` when start >= total instead of the
    # engine's start + 1.0 * (now - start): equal by Fast2Sum (the difference of a sum and
    # its larger addend is exact)
    assume(start >= total)
    now = start + total
    assert start + 1.0 * (now - start) == now
