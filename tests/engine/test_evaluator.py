"""The exact critical-path evaluator gives the SimPy engine's records to the nanosecond: every
time compared with ==, on every registered schedule, the bundled workloads and random
workloads, asynchronous point-to-point (its one walk, ``evaluator_async``); in every other mode
the SimPy engine runs and the result says so."""

from __future__ import annotations

import glob
import json
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from shared_files import real_files
from simulator import DeadlockError, OutOfMemoryError, simulate
from simulator.cli.main import main
from simulator.engine.evaluator import evaluate, unsupported
from simulator.engine.options import EngineOptions
from simulator.engine.runtime import Runtime
from simulator.errors import ConfigError, PipesimError
from simulator.schedules import generate, names
from simulator.schedules.action import Action
from simulator.schedules.schedule import Schedule
from simulator.system import SystemConfig
from simulator.system.config import CollectiveConfig, LinkConfig, TopologyConfig
from simulator.system.runtime_profile import RuntimeProfile
from simulator.workload import Comm, CommGroup, CommType, make_layer, uniform_workload
from simulator.workload.model import Header, Workload
from simulator.workload.partition import partition

from .cases import DP, LINK, SYSTEM, Drawn, assert_same, cases, vpps_of, workload

REPO = Path(__file__).resolve().parents[2]


def check(rt) -> object | None:
    """Both engines on ``rt``: the same records, or the same deadlock (None then)."""
    assert unsupported(rt) is None
    try:
        simpy = rt.run()
    except DeadlockError as err:
        with pytest.raises(DeadlockError) as again:
            evaluate(rt)
        assert str(again.value) == str(err) and again.value.waits == err.waits
        return None
    fast = evaluate(rt)
    assert_same(simpy, fast)
    return fast


def both(sched, wl, system=SYSTEM, iterations=2, **options):
    rt = Runtime(sched, partition(wl, sched.n_chunks), wl.header, system,
                 iterations=iterations if sched.flush else 1, options=EngineOptions(**options))
    return check(rt)


def test_known_times_uniform_1f1b():
    # F = 1000, B = 2000 per stage, no transfers: (M + P - 1)(F + B) = 33000 ns, every action
    # where the closed form puts it
    wl = uniform_workload(4, 1000, 1000, 1000, pp_comm=0)
    r = simulate(wl, "1f1b", SYSTEM, pp=4, microbatches=8, engine="evaluator")
    assert r.to_dict()["engine_used"] == "evaluator"
    assert r.records.iteration_bounds == [(0.0, 33000.0)]
    last = [(a.kind, a.microbatch, a.start, a.end) for a in r.records.actions if a.rank == 3]
    assert last[:4] == [("F", 0, 3000.0, 4000.0), ("B", 0, 4000.0, 6000.0),
                        ("F", 1, 6000.0, 7000.0), ("B", 1, 7000.0, 9000.0)]


def test_jitter_slow_ranks_layers_and_memory_samples():
    sched = generate("interleaved-1f1b", 4, 8, 2)
    fast = both(sched, workload(8), jitter_sigma=0.3, seed=7, slow_ranks=((1, 1.7),),
                trace_layers=True)
    assert fast.layers and len(fast.memory) > 4


def test_runtime_profile_overheads_prologue_and_epilogue():
    profile = RuntimeProfile(action_overhead_ns={"F": 130.0, "B": 70.0, "I": 40.0, "W": 25.0},
                             step_prologue_ns=1000.0, step_epilogue_ns=333.3)
    system = SystemConfig(links=LINK, collectives=CollectiveConfig(tp=LINK, dp=LINK),
                          runtime=profile)
    for name in ("1f1b", "zb-h1", "dualpipe-v"):
        sched = next(cases(name))
        assert both(sched, workload(sched.n_chunks), system) is not None
        assert both(sched, workload(sched.n_chunks), system, jitter_sigma=0.2,
                    seed=1) is not None


def test_links_that_queue():
    # 100 kB per transfer at 1 B/ns: transfers take longer than the compute; async sends queue
    # on their links (FIFO)
    sched = generate("1f1b", 4, 8, 1)
    fast = both(sched, workload(4, pp_comm=100_000), p2p="async")
    assert max(t.start - t.issued for t in fast.transfers) > 50_000


BUNDLED = sorted(glob.glob(str(REPO / "workloads" / "*.txt"))
                 + glob.glob(str(REPO / "workloads" / "generated" / "*.txt"))
                 + glob.glob(str(REPO / "tests" / "data" / "*.txt"))
                 + [str(p) for p in real_files("*.txt")])


@pytest.mark.parametrize("path", BUNDLED, ids=lambda p: Path(p).name)
def test_bundled_workloads_same_summary(path):
    try:
        simpy = simulate(path)
    except PipesimError as err:
        with pytest.raises(type(err)) as again:
            simulate(path, engine="evaluator")
        assert str(again.value) == str(err)
        return
    fast = simulate(path, engine="evaluator")
    assert_same(simpy.records, fast.records)
    a, b = simpy.to_dict(), fast.to_dict()
    assert (a.pop("engine_used"), b.pop("engine_used")) == ("simpy", "evaluator")
    assert a == b


def test_async_deadlock_same_error():
    # rank 1 runs its microbatch-1 backward before that microbatch's forward: nobody can move
    A = Action.parse
    sched = Schedule("custom", 3, 1, 2, (0, 1, 2), (
        (A("0F0"), A("0F1"), A("0B0"), A("0B1")),
        (A("1F0"), A("1B1"), A("1F1"), A("1B0")),
        (A("2F0"), A("2B0"), A("2F1"), A("2B1"))))
    wl = uniform_workload(3, 1000, 700, 500, pp_comm=4096)
    with pytest.raises(DeadlockError) as simpy:
        simulate(wl, sched, validate=False, iterations=2)
    with pytest.raises(DeadlockError) as fast:
        simulate(wl, sched, validate=False, iterations=2, engine="evaluator")
    assert str(fast.value) == str(simpy.value) == (
        "deadlock at t=8364 ns: rank 0 waits on recv 0B0 (1->0) from rank 1 (since t=2000 ns); "
        "rank 1 waits on recv 1B1 (2->1) from rank 2 (since t=4082 ns); rank 2 waits on recv "
        "2F1 (1->2) from rank 1 (since t=8364 ns)")
    assert fast.value.waits == simpy.value.waits


def test_document_001_blocking_deadlock_same_error():
    wl = uniform_workload(4, 1000, 1000, 1000, pp_comm=1000)
    fast_sys = SystemConfig(links=LinkConfig(bandwidth_gbps=8000.0, latency_ns=10.0))
    errors = []
    for engine in ("simpy", "evaluator"):
        with pytest.raises(DeadlockError) as err:
            simulate(wl, "1f1b", fast_sys, pp=4, microbatches=8, p2p="blocking", engine=engine)
        errors.append(err.value)
    assert str(errors[0]) == str(errors[1])
    assert "rank 2 waits on send 3F1 (2->3) to rank 3 (its receive is not posted)" in str(
        errors[1])


def test_out_of_memory_same_error():
    # 480 kB of weights per rank; rank 1 peaks at 939 kB of activations on top: a limit of
    # 800 kB is crossed in the middle of the run, at its first forward that does not fit
    wl = workload(4)
    msgs = []
    for engine in ("simpy", "evaluator"):
        with pytest.raises(OutOfMemoryError) as err:
            simulate(wl, "1f1b", SYSTEM, pp=4, microbatches=8, memory_limit_gb=8e-4,
                     engine=engine)
        msgs.append(str(err.value))
    assert msgs[0] == msgs[1]
    assert msgs[1].startswith("rank 1 out of memory at t=") and "starting 1F" in msgs[1]


@pytest.mark.parametrize("kwargs, system, reason", [
    ({"layer_by_layer": True}, SYSTEM, "--layer-by-layer (the reference path)"),
    ({}, SystemConfig(links=LINK, topology=TopologyConfig(sharing="fair")),
     "fair link sharing"),
    ({"schedule": "2bw", "iterations": 2}, SYSTEM,
     "several iterations of a schedule without a flush"),
    ({"p2p": "blocking", "schedule": "gpipe"}, SYSTEM, "--p2p blocking"),
    ({"p2p": "batched"}, SYSTEM, "--p2p batched"),
    ({"p2p": "torch"}, SYSTEM, "--p2p torch-single"),
    ({"p2p": "torch", "schedule": "zb-h1"}, SYSTEM, "--p2p torch-multi"),
])
def test_falls_back_to_simpy_with_a_note(kwargs, system, reason):
    kwargs = {"schedule": "1f1b", **kwargs}
    wl = workload(4)
    r = simulate(wl, system=system, pp=4, microbatches=8, engine="evaluator", **kwargs)
    ref = simulate(wl, system=system, pp=4, microbatches=8, **kwargs)
    note = f"engine: the evaluator does not cover {reason}; the SimPy engine ran"
    assert r.to_dict()["engine_used"] == "simpy"
    assert note in r.to_dict()["notes"] and note not in ref.to_dict()["notes"]
    assert r.records.iteration_bounds == ref.records.iteration_bounds


def test_unknown_engine_is_one_line_error(capsys):
    with pytest.raises(ConfigError, match=r"^--engine: expected one of simpy, evaluator, got 'x'$"):
        simulate(workload(4), "1f1b", SYSTEM, pp=4, microbatches=8, engine="x")
    rc = main(["run", str(REPO / "workloads" / "gpt-24l.txt"), "--engine", "x"])
    err = capsys.readouterr().err
    assert rc == 2 and err.count("\n") == 1 and "--engine" in err


def test_cli_engine_evaluator_same_json_and_trace(tmp_path, capsys):
    path = str(REPO / "workloads" / "gpt-24l.txt")
    out = {}
    for engine in ("simpy", "evaluator"):
        trace = tmp_path / f"{engine}.json"
        assert main(["run", path, "-s", "interleaved-1f1b", "--vpp", "2", "--iterations", "2",
                     "--engine", engine, "--trace", str(trace), "--json", "-"]) == 0
        out[engine] = json.loads(capsys.readouterr().out)
        out[engine + "-trace"] = trace.read_text()
    assert out["simpy"].pop("engine_used") == "simpy"
    assert out["evaluator"].pop("engine_used") == "evaluator"
    assert out["simpy"] == out["evaluator"]
    assert out["simpy-trace"] == out["evaluator-trace"]


@st.composite
def random_case(draw, drawn: Drawn):
    name = draw(st.sampled_from(sorted(names())))
    P = draw(st.integers(1, 5))
    M = draw(st.integers(1, 10))
    v = draw(st.sampled_from(vpps_of(name)))
    sched = drawn.generate(name, P, M, v) or generate("1f1b", P, M, 1)
    costs = draw(st.lists(st.tuples(*[st.sampled_from([0, 1000, 1500, 3333])] * 3),
                          min_size=1, max_size=3))
    rows = sched.n_chunks * draw(st.integers(1, 2))
    layers = tuple(make_layer(i, *costs[i % len(costs)],
                              wg_comm=DP if i % 2 else Comm(CommType.NONE, CommGroup.DP, 0))
                   for i in range(rows))
    wl = Workload("<random>", Header("HYBRID_TRANSFORMER", pp=1, all_gpus=2 * P,
                                     pp_comm=draw(st.sampled_from([0, 1000, 8000]))), layers)
    link = LinkConfig(bandwidth_gbps=draw(st.sampled_from([1.0, 8.0, 16.0])),
                      latency_ns=draw(st.sampled_from([0.0, 500.0])))
    system = SystemConfig(links=link, collectives=CollectiveConfig(tp=link, dp=link))
    iterations = draw(st.integers(1, 2))
    return sched, wl, system, iterations


def test_random_workloads_equal_simpy():
    drawn = Drawn()

    @settings(max_examples=50, deadline=None, derandomize=True,
              suppress_health_check=[HealthCheck.too_slow])
    @given(random_case(drawn))
    def run(case):
        sched, wl, system, iterations = case
        both(sched, wl, system, iterations)

    run()
    drawn.check(0.5)


def test_records_are_time_columns_that_read_as_the_engine_lists():
    from simulator.engine.columns import ActionColumns, TransferColumns
    from simulator.engine.records import ActionRecord, TransferRecord

    wl = uniform_workload(4, 1000, 1000, 1000, pp_comm=1000)   # 1000 B at 1 B/ns + 100 ns
    sched = generate("1f1b", 4, 8, 1)
    simpy, fast = (simulate(wl, sched, SYSTEM, engine=e).records for e in ("simpy", "evaluator"))
    assert isinstance(fast.actions, ActionColumns) and isinstance(fast.transfers, TransferColumns)
    assert len(fast.actions) == len(simpy.actions) == 64
    assert len(fast.transfers) == len(simpy.transfers) == 48
    assert fast.actions[0] == ActionRecord(0, 0, "F", 0, 0, 0.0, 1000.0, "Warmup", 0, None)
    assert fast.transfers[0] == TransferRecord(0, 1, 0, 1, "F", 0, 0, 1000, 1000.0, 1000.0,
                                               2100.0)
    assert sorted(fast.actions) == sorted(simpy.actions)
    # both read in time order: actions as they end, transfers as they are issued, ranks in
    # order at equal times
    assert fast.actions == simpy.actions == sorted(simpy.actions, key=lambda a: (a.end, a.rank))
    assert fast.transfers == simpy.transfers == sorted(simpy.transfers,
                                                       key=lambda t: (t.issued, t.src_rank))
    assert repr(fast.actions) == "<ActionColumns: 64 records>"


def test_zero_byte_transfers_keep_one_time_and_read_back_whole():
    wl = uniform_workload(8, 1000, 1000, 1000, pp_comm=0)
    sched = generate("interleaved-1f1b", 4, 8, 2)
    simpy, fast = (simulate(wl, sched, SYSTEM, engine=e).records for e in ("simpy", "evaluator"))
    assert fast.transfers.instant and not any(len(c) for c in fast.transfers.start)
    assert fast.transfers == simpy.transfers
    assert all(t.issued == t.start == t.end for t in fast.transfers)
