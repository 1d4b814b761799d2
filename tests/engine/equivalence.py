"""The one equivalence harness: every fast twin in pipesim beside its plain reference, run on the
same cases and compared (docs/performance.md, "Fast paths", states the rule and each twin's
measured gain; tests/engine/test_equivalence.py runs every twin on every case).

A :class:`Twin` names where the fast path and its reference live, gives its cases, runs both
on a case and says what "the same" means for it: the engine's records to the nanosecond
(``==``, per rank, in the engine's order), the same deadlock or memory error line, the same
op lists op for op, the same validation verdict, the same keyword arguments as click's
reading. Cases are deterministic (seeded): the registered schedules at small shapes, with
uneven costs (fractions of a ns), queueing links, DP collectives, slow ranks, jitter and several
iterations; the hypothesis tests of the engine draw more."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any, Callable, Iterator, NamedTuple
from unittest import mock

from simulator import simulate
from simulator.engine import runtime as runtime_module
from simulator.engine.evaluator import evaluate, unsupported
from simulator.engine.options import EngineOptions
from simulator.engine.program import Program, ProgramBuilder, RankOps
from simulator.engine.runtime import Runtime
from simulator.errors import DeadlockError, ScheduleError
from simulator.schedules import names
from simulator.schedules import validate as V
from simulator.schedules.comm_pass import op_lists
from simulator.schedules.rank_actions import RankActions
from simulator.schedules.registry import megatron_of
from simulator.schedules.schedule import Schedule
from simulator.system import SystemConfig
from simulator.system.config import CollectiveConfig, LinkConfig
from simulator.workload import Comm, CommGroup, CommType, make_layer, uniform_workload
from simulator.workload.model import Header, Workload
from simulator.workload.partition import partition

from .cases import SYSTEM, assert_same, cases, one_vpp, workload
from .reference_program import reference_ops

REPO = Path(__file__).resolve().parents[2]


class Case(NamedTuple):
    """One input both paths run on; ``data`` is the twin's own (a run, a schedule, a line)."""

    id: str
    data: Any


class Twin(NamedTuple):
    """A fast path and its plain reference: where each lives, its cases, how one case runs
    on both (``run(case) -> (fast, reference)``) and what "the same" is (``same`` raises
    AssertionError when they differ)."""

    name: str
    fast: str
    reference: str
    cases: Callable[[], Iterator[Case]]
    run: Callable[[Any], tuple[Any, Any]]
    same: Callable[[Any, Any], None]


# -- runs: the records of a run, or the one error line it ends with ---------------------------
class Outcome(NamedTuple):
    """What a run gives: its records, or the error (class and line) it ends with."""

    records: Any
    error: tuple[str, str] | None


def _outcome(run: Callable[[], Any]) -> Outcome:
    try:
        return Outcome(run(), None)
    except (DeadlockError, ScheduleError) as err:
        return Outcome(None, (type(err).__name__, str(err)))
    except Exception as err:                      # noqa: BLE001 (an OutOfMemoryError, ...)
        if type(err).__name__ != "OutOfMemoryError":
            raise
        return Outcome(None, (type(err).__name__, str(err)))


def same_outcome(fast: Outcome, ref: Outcome) -> None:
    assert fast.error == ref.error
    if ref.error is None:
        assert_same(ref.records, fast.records)


def _step_by_step(rt: Runtime):
    """The reference walk: every op in time order on SimPy's queue (``_Run._rank``)."""
    with mock.patch.object(runtime_module._Run, "_can_look_ahead", lambda self: False):
        return rt.run()


class EngineRun(NamedTuple):
    schedule: Schedule
    workload: Workload
    system: SystemConfig
    iterations: int
    options: EngineOptions

    def runtime(self) -> Runtime:
        return Runtime(self.schedule, partition(self.workload, self.schedule.n_chunks),
                       self.workload.header, self.system,
                       iterations=self.iterations if self.schedule.flush else 1,
                       options=self.options)


# a link of 3 bytes per 8 ns and 250 ns (thirds of a ns in the times): transfers queue
QUEUEING = LinkConfig(bandwidth_gbps=3.0, latency_ns=250.0)
QUEUEING_SYSTEM = SystemConfig(links=QUEUEING,
                               collectives=CollectiveConfig(tp=QUEUEING, dp=QUEUEING))
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


def engine_cases() -> Iterator[Case]:
    """Every registered schedule at (P, M) = (2, 4), (4, 8), (3, 7) and each v it takes: the
    engine tests' workload with a slow last rank over two iterations; seeded random costs on
    queueing links, with and without point-to-point bytes, plain and with jitter and a slow
    rank."""
    for name in sorted(names()):
        rng = random.Random(f"walk-{name}")
        for sched in cases(name):
            shape = f"{name}-P{sched.pp}-M{sched.microbatches}-v{sched.vpp}"
            yield Case(f"{shape}-slow-last", EngineRun(
                sched, workload(sched.n_chunks), SYSTEM, 2,
                EngineOptions(p2p="async", slow_ranks=((sched.pp - 1, 1.25),))))
            for pp_comm in (0, 5000):
                wl = random_workload(rng, sched.n_chunks, pp_comm)
                yield Case(f"{shape}-random-{pp_comm}B", EngineRun(
                    sched, wl, QUEUEING_SYSTEM, 3, EngineOptions(p2p="async")))
                yield Case(f"{shape}-random-{pp_comm}B-jitter", EngineRun(
                    sched, wl, QUEUEING_SYSTEM, 3, EngineOptions(
                        p2p="async", slow_ranks=((0, 1.3),), jitter_sigma=0.25,
                        seed=rng.randrange(1000))))


def _evaluator(run: EngineRun) -> tuple[Outcome, Outcome]:
    rt = run.runtime()
    assert unsupported(rt) is None
    return _outcome(lambda: evaluate(rt)), _outcome(lambda: _step_by_step(rt))


def _lookahead(run: EngineRun) -> tuple[Outcome, Outcome]:
    rt = run.runtime()
    runner = runtime_module._Run(rt)
    runner.debug = False                         # what run() sets first
    assert runner._can_look_ahead()
    return _outcome(rt.run), _outcome(lambda: _step_by_step(rt))


# -- one SimPy step per action against one per layer state ------------------------------------
def layer_cases() -> Iterator[Case]:
    for name in sorted(names()):
        for sched in cases(name, ((2, 4), (4, 8)), one_vpp(name)):
            yield Case(f"{name}-P{sched.pp}-M{sched.microbatches}-v{sched.vpp}", sched)


def timeline(result) -> tuple:
    """A run's action, transfer and collective records and iteration bounds, sorted."""
    rec = result.records
    return (sorted((a.rank, a.stage, a.kind, a.microbatch, a.iteration, a.start, a.end)
                   for a in rec.actions),
            sorted((t.src_rank, t.dst_rank, t.data, t.dst_stage, t.microbatch, t.iteration,
                    t.start, t.end) for t in rec.transfers),
            sorted((c.rank, c.layer, c.iteration, c.ready, c.start, c.end)
                   for c in rec.collectives),
            rec.iteration_bounds)


def _per_action(sched: Schedule) -> tuple:
    wl = workload(sched.n_chunks)
    return (simulate(wl, sched, SYSTEM, iterations=2),
            simulate(wl, sched, SYSTEM, iterations=2, layer_by_layer=True))


def same_parts(fast: list, ref: list) -> None:
    """One part of two timelines, record by record within 1e-6 ns."""
    import pytest

    assert len(fast) == len(ref)
    for x, y in zip(fast, ref):
        assert x == pytest.approx(y, abs=1e-6)


def same_timeline(fast, ref) -> None:
    """The same records within 1e-6 ns: a chunk's layer times are summed in another order."""
    import pytest

    assert len(fast.records.collectives) > 0
    for part_fast, part_ref in zip(timeline(fast), timeline(ref)):
        same_parts(part_fast, part_ref)
    assert fast.to_dict()["makespan_ns"] == pytest.approx(ref.to_dict()["makespan_ns"])


# -- a rank's actions held as columns against a list of Actions --------------------------------
def column_cases() -> Iterator[Case]:
    for name in sorted(names()):
        for sched in cases(name):
            if any(type(r) is RankActions for r in sched.ranks):
                yield Case(f"{name}-P{sched.pp}-M{sched.microbatches}-v{sched.vpp}", sched)


def _columns(sched: Schedule) -> tuple[Outcome, Outcome]:
    s = sched
    as_lists = Schedule(s.name, s.pp, s.vpp, s.microbatches, s.placement,
                        tuple(tuple(r) for r in s.ranks), s.pipelines, s.stage_chunk, s.flush,
                        s.meta)
    assert not any(type(r) is RankActions for r in as_lists.ranks)
    wl = workload(sched.n_chunks)

    def run(s):
        return simulate(wl, s, SYSTEM, iterations=2, slow_ranks={s.pp - 1: 1.25}).records

    return _outcome(lambda: run(sched)), _outcome(lambda: run(as_lists))


# -- compact op lists against the comm pass's ----------------------------------------------------
MODES = ("async", "blocking", "batched", "torch-single", "torch-multi")


def op_list_cases() -> Iterator[Case]:
    for name in sorted(names()):
        for sched in cases(name, ((2, 4), (4, 8)), one_vpp(name)):
            for mode in MODES:
                if (mode == "batched" and megatron_of(name) == "interleaved" and sched.pp <= 2
                        and sched.vpp > 1):
                    continue   # refused before compiling, as Megatron-LM asserts (P > 2)
                yield Case(f"{name}-P{sched.pp}-M{sched.microbatches}-{mode}", (sched, mode))


def _op_lists(data) -> tuple[list, list]:
    sched, mode = data
    wl = uniform_workload(2 * sched.n_chunks, pp=sched.pp, ga=sched.microbatches,
                          pp_comm=4096)
    program = Program.compile(sched, partition(wl, sched.n_chunks), wl.header, SystemConfig(),
                              p2p=mode)
    builder = ProgramBuilder(sched, list(program.costs), list(program.labels), mode,
                             program.pp_comm, program.profile)
    comm = op_lists(sched, early_receives=mode == "torch-multi")
    fast, ref = [], []
    for r in range(sched.pp):
        ops = program.compiled[r]
        assert isinstance(ops, RankOps) and ops.mode == mode
        assert (ops.lowered is not None) == (mode == "torch-multi")
        fast.append((list(ops), list(ops), len(ops)))     # walked twice: the same both times
        expected = reference_ops(builder, r, comm[r])
        ref.append((expected, expected, len(expected)))
    return fast, ref


def same_value(fast, ref) -> None:
    assert fast == ref


# -- validation's fast first pass against the explaining checks --------------------------------
def _detailed(s: Schedule) -> bool:
    try:
        V._explain(s)
    except ScheduleError:
        return False
    return True


def _broken(s: Schedule, rng: random.Random) -> Schedule:
    ranks = [list(r) for r in s.ranks]
    r = rng.randrange(len(ranks))
    acts = ranks[r]
    i, j = rng.randrange(len(acts)), rng.randrange(len(acts))
    how = rng.choice(("swap", "drop", "dup", "move"))
    if how == "swap":
        acts[i], acts[j] = acts[j], acts[i]
    elif how == "drop":
        del acts[i]
    elif how == "dup":
        acts.insert(j, acts[i])
    else:
        other = ranks[(r + 1) % len(ranks)]
        other.insert(rng.randrange(len(other) + 1), acts.pop(i))
    return Schedule(s.name, s.pp, s.vpp, s.microbatches, s.placement,
                    tuple(tuple(x) for x in ranks), s.pipelines, s.stage_chunk, s.flush, s.meta)


def validate_cases() -> Iterator[Case]:
    """Every registered schedule at (2, 4) and (4, 8), and 45 seeded breakages of each (swaps,
    drops, duplicates, moves to the next rank), 15 a case."""
    for name in sorted(names()):
        for sched in cases(name, ((2, 4), (4, 8)), one_vpp(name)):
            shape = f"{name}-P{sched.pp}-M{sched.microbatches}"
            yield Case(shape, (sched,))
            for seed in range(3):
                rng = random.Random(f"validate-{shape}-{seed}")
                yield Case(f"{shape}-broken-{seed}",
                           tuple(_broken(sched, rng) for _ in range(15)))


def _validate(schedules) -> tuple[list, list]:
    fast = [(V._rules_hold(s), len(s.pipelines), s.as_strings()) for s in schedules]
    ref = [(_detailed(s), len(s.pipelines), s.as_strings()) for s in schedules]
    return fast, ref


def same_verdict(fast, ref) -> None:
    """The fast pass never accepts what the checks reject; with one pipeline it rejects only
    what they reject (with several it hands every schedule to them)."""
    wrong = [("accepts" if ok_fast else "rejects", ranks)
             for (ok_fast, pipelines, ranks), (ok_ref, _, _) in zip(fast, ref)
             if (ok_fast and not ok_ref) or (not ok_fast and pipelines == 1 and ok_ref)]
    assert wrong == [], "the fast pass judges these otherwise than the checks"


# -- `pipesim run` read without click against click's reading -----------------------------------
DOC000 = str(REPO / "workloads" / "doc000-1f1b-test.txt")
SYSTEM_FILE = str(REPO / "configs" / "system" / "default.yaml")
RUN_LINES = (
    [DOC000],
    [DOC000, "--json", "-"],
    [DOC000, "--json"],                          # bare: stdout
    ["--json", "--system", SYSTEM_FILE, DOC000],  # bare before another option
    ["--json", "-", DOC000],
    [DOC000, "--json=out.json", "--trace", "t.json", "--gantt", "g.png"],
    [DOC000, "--json=", "--json", "x.json"],     # the last one wins
    [DOC000, "-s", "zb-h1", "--pp", "4", "-m", "8", "--vpp", "2", "--iterations", "3"],
    [DOC000, "--schedule=interleaved-1f1b", "--microbatches=16", "--layout", "aicb"],
    [DOC000, "-O", "group_size=4", "--option", "waves=2", "--set", "links.bandwidth_gbps=1"],
    [DOC000, "--slow-rank", "1:1.5", "--slow-rank", "2:2", "--jitter", "0.1", "--seed", "7"],
    [DOC000, "--memory-limit", "80", "--p2p", "batched", "--recompute", "full"],
    [DOC000, "--pp-comm", "0", "--gpus", "16", "--max-actions", "1_000", "--engine", "evaluator"],
    [DOC000, "--strict", "--layer-by-layer", "--log-level", "debug", "--dp", "2"],
    [DOC000, "--schedule-file", "s.csv", "--calibration", "c.yaml", "--system", SYSTEM_FILE],
    [DOC000, "--pp", " 3", "--jitter", "1e-3", "--memory-limit", "inf"],   # int()/float() rules
    ["", "--pp", "0"],                          # an empty workload name is click's too
)
# lines the plain reader hands to click (None): click's errors, help, completion's words
CLICK_LINES = (
    [],                                    # missing WORKLOAD
    [DOC000, DOC000],                      # an extra argument
    [DOC000, "--help"], [DOC000, "-h"], [DOC000, "--json-schema"],
    [DOC000, "--nosuch"], [DOC000, "--pp"], [DOC000, "--pp", "x"], [DOC000, "--pp", "-1"],
    [DOC000, "--pp=2.0"], [DOC000, "--jitter", "abc"], [DOC000, "--layout", "AICB"],
    [DOC000, "--log-level", "DEBUG"],      # click accepts any case: its reading
    [DOC000, "--strict=yes"], [DOC000, "-s2bw"], [DOC000, "--", "x"], ["-"],
    [DOC000, "--json=--pp"], [str(REPO)], [DOC000, "--system", str(REPO)],
)


def reader_cases() -> Iterator[Case]:
    for k, line in enumerate(RUN_LINES):
        yield Case(f"read-{k}", (line, True))
    for k, line in enumerate(CLICK_LINES):
        yield Case(f"click-{k}", (line, False))


def _reader(data) -> tuple[Any, Any]:
    from simulator.cli.commands.run import command
    from simulator.cli.run_impl import parse_run_args

    line, plain_reads_it = data
    plain = parse_run_args(list(line))
    if not plain_reads_it:
        return plain, None               # handed to click, which reads (or refuses) it
    return plain, dict(command.make_context("run", list(line)).params)


# -- waking a waiter: its own event queued as a Timeout queues itself ------------------------------
def fire_cases() -> Iterator[Case]:
    for delay in (0.0, 1.0, 7.0, 1 / 3, 2.5e9):
        yield Case(f"delay-{delay!r}", delay)


def _fire(delay: float) -> tuple[tuple, tuple]:
    """The queue entry (time, priority) and the event's state after ``fire_at`` on a bare
    event, and after a Timeout made at the same instant."""
    import simpy
    from simpy.events import Timeout

    from simulator.engine.simpy_fast import fire_at

    def entry(env, ev) -> tuple:
        (when, priority, _, event), = env._queue
        assert event is ev
        return when, priority, ev.triggered, ev.ok, ev.value

    env = simpy.Environment()
    ev = env.event()
    fire_at(env, ev, delay)
    fast = entry(env, ev)
    env = simpy.Environment()
    ref = entry(env, Timeout(env, delay, value=None))
    return fast, ref


TWINS: tuple[Twin, ...] = (
    Twin("evaluator", "simulator/engine/evaluator.py, evaluator_async.py (the walk, no queue)",
         "simulator/engine/runtime.py _Run._rank (step by step on SimPy)",
         engine_cases, _evaluator, same_outcome),
    Twin("lookahead", "simulator/engine/runtime.py _Run._run_ahead (the walk on SimPy)",
         "simulator/engine/runtime.py _Run._rank (step by step on SimPy)",
         engine_cases, _lookahead, same_outcome),
    Twin("fire_at", "simulator/engine/simpy_fast.py fire_at (the waiter's own event queued)",
         "simpy.events.Timeout (a new event, then a callback)", fire_cases, _fire, same_value),
    Twin("per_action_steps", "simulator/engine/runtime.py (one timeout per action)",
         "simulator/engine/runtime.py _Run._layers (--layer-by-layer)",
         layer_cases, _per_action, same_timeline),
    Twin("rank_columns", "simulator/schedules/rank_actions.py RankActions (1F1B's ranks)",
         "a list of Action tuples", column_cases, _columns, same_outcome),
    Twin("rank_ops", "simulator/engine/program.py RankOps (generated when walked)",
         "tests/engine/reference_program.py (a list from the comm pass)",
         op_list_cases, _op_lists, same_value),
    Twin("validate_fast_pass", "simulator/schedules/validate.py _rules_hold",
         "simulator/schedules/validate.py _explain (the explaining checks)",
         validate_cases, _validate, same_verdict),
    Twin("cli_plain_reader", "simulator/cli/run_impl.py parse_run_args",
         "click's reading of simulator/cli/commands/run.py",
         reader_cases, _reader, same_value),
)
