"""``pipesim plan``: which pipeline degree, virtual stages, microbatch count and schedule to run
on N GPUs, within their memory.

The search space, for a workload file (its tensor-parallel size fixed by the header):

- ``pp``: every divisor of N / TP; ``dp = N / (TP * pp)``;
- ``microbatches``: the global batch (``--global-batch B`` microbatches, default the file's
  ``ga x dp``) over DP, ``M = B / dp`` (a pp whose DP does not divide B is listed infeasible);
- ``schedule`` and ``vpp``: every registered schedule, at 1, 2 and 4 chunks per rank for those
  that take any number, else at their own; then ``auto``, synthesized for the run's own per-stage
  costs, at v = 1 and 2 and caps K = P and 2P activations (2P and 4P in V mode), on the
  :data:`AUTO_SHAPES` pipeline degrees whose best hand-made schedule fits and is fastest (a
  synthesis costs ~0.1-1 s, a screen ~10 ms: synthesizing on every shape would be most of the
  plan's time), with :data:`AUTO_ITERATIONS` search moves per start and at most
  :data:`AUTO_MAX_ACTIONS` actions;
- ``recompute``: the file's own checkpoint lists (``file``) for every candidate; a candidate
  whose peak memory is over the limit is tried again with full recompute (``full``: every layer
  replays its forward before its backward and keeps only its input), which trades time for
  activation memory.

Every candidate is screened with the exact critical-path evaluator (``engine="evaluator"``, the
same timeline as the SimPy engine), the best ``confirm`` feasible ones are run again on the SimPy
engine (with ``--jitter``: ``iterations`` seeded iterations, ranked by p95), and a candidate whose
peak memory per GPU exceeds the limit is kept in the list as infeasible, with the reason. Ranking
is by iteration time (p95 with jitter), ties by enumeration order: same inputs, same plan.
"""

from __future__ import annotations

import json
import math
import shlex
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, Callable, Iterator

from ..api import simulate
from ..engine.stage_costs import run_stage_costs
from ..errors import ConfigError, PipesimError
from ..preflight import header_for_run
from ..schedules import registry
from ..schedules.runtimes import RUNTIMES, check_runtimes, shape_of
from ..sweep.executors import make_executor
from ..system.config import load_system
from ..system.overlay import apply_calibration
from ..units import fmt_bytes
from ..workload.generator import MAX_LAYERS, ModelSpec, ParallelSpec, check, render
from ..workload.gpus import gpu_preset
from ..workload.parser import load_workload
from ..workload.partition import partition
from ..workload.stage_layers import PipelineSplit, default_chunk_layers, n_model_layers, with_split
from ..schedules.synthesis.search import EVALUATIONS_PER_ACTION, synthesis_work

AUTO = "auto"
VARIABLE_VPPS = (1, 2, 4)
AUTO_VPPS = (1, 2)
DEFAULT_CONFIRM = 3
AUTO_SHAPES = 2            # pipeline degrees auto is synthesized on
AUTO_ITERATIONS = 200      # auto's local-search moves per start (-O iterations=...)
AUTO_MAX_ACTIONS = 3_000   # larger shapes are not synthesized (listed with the reason)
PLAN_MAX_ACTIONS = 50_000  # default per-candidate size (--max-actions): screens stay ~1 s or less
# default budget of a whole plan (--max-work), in actions: every candidate's screen and the
# confirming runs; a screen costs ~15 us per action on a loaded 2-core machine, so ~10 s
PLAN_MAX_WORK = 700_000
ROUND = 16                 # candidates screened between two prunings by lower bound
# DualPipe(V): overlapped F/B pairs hide collectives, and microbatches enter at both ends:
# neither term of the bound holds
NO_BOUND = frozenset({"dualpipe", "dualpipe-v"})
CANDIDATES_FILE = "candidates.jsonl"
SETTINGS_FILE = "plan-settings.json"


@dataclass(frozen=True)
class PlanSettings:
    """What a plan depends on (``--resume`` refuses a folder planned with other settings)."""

    workload: str
    gpus: int
    memory_limit_gib: float | None = None   # GiB; None: the system's capacity; 0: no limit
    global_batch: int | None = None
    system: str | None = None
    calibration: str | None = None
    p2p: str | None = None
    jitter: float = 0.0
    iterations: int = 1
    seed: int = 0
    confirm: int = DEFAULT_CONFIRM
    max_actions: int | None = None
    prune: bool = True   # skip candidates whose lower bound is above the best (not with jitter)
    # instead of a file: `pipesim generate`'s model flags (arch, layers, hidden, heads, seq,
    # micro_batch, ffn, vocab, kv_heads) as sorted (key, value) pairs, the GPU preset and its
    # efficiency; TP then varies over the divisors of N up to tp_max
    model: tuple[tuple[str, Any], ...] | None = None
    gpu: str = "a100"
    efficiency: float | None = None
    tp_max: int = 8
    schedules: tuple[str, ...] | None = None   # hand-made schedules searched (None: all)
    runtime: str | None = None   # keep only what this runtime runs (torch|megatron|torchtitan)
    # Megatron-LM's layer-split options for every candidate (a PipelineSplit's fields); empty:
    # pipesim's default split, and the end-stage variants of :func:`end_stage_splits`
    split: tuple = ()


@dataclass(frozen=True)
class Candidate:
    index: int
    tp: int
    pp: int
    dp: int
    vpp: int
    microbatches: int
    schedule: str
    max_in_flight: int | None = None   # auto's cap K
    search_iterations: int | None = None   # auto's local-search moves per start
    recompute: str = "file"
    reason: str | None = None          # set: infeasible before it runs
    workload: str = ""                 # the file it runs (one per TP with model flags)
    split: tuple = ()                  # a PipelineSplit's fields; empty: the default split

    @property
    def key(self) -> str:
        k = f"tp{self.tp}-pp{self.pp}-v{self.vpp}-m{self.microbatches}-{self.schedule}"
        k += f"-k{self.max_in_flight}" if self.max_in_flight is not None else ""
        k += split_key(self.split)
        return k + (f"-r{self.recompute}" if self.recompute != "file" else "")

    @property
    def split_options(self) -> dict[str, Any]:
        """The split as :func:`simulator.api.simulate` keywords (none: the default split)."""
        if not self.split:
            return {}
        return dict(zip(SPLIT_OPTIONS, PipelineSplit(*self.split)))


    @property
    def options(self) -> dict[str, int]:
        out = {}
        if self.max_in_flight is not None:
            out["max_in_flight"] = self.max_in_flight
        if self.search_iterations is not None:
            out["iterations"] = self.search_iterations
        return out


# the RunOptions fields of a PipelineSplit's fields, in order
SPLIT_OPTIONS = ("decoder_first_pipeline_num_layers", "decoder_last_pipeline_num_layers",
                 "account_for_embedding_in_pipeline_split", "account_for_loss_in_pipeline_split",
                 "pipeline_parallel_layers_per_stage", "pipeline_parallel_first_stage_less_layers",
                 "pipeline_parallel_last_stage_less_layers")


def split_key(split: tuple) -> str:
    """The candidate key's part for a split (empty for the default)."""
    if not split:
        return ""
    sp = PipelineSplit(*split)
    return ("-split" + (f"-f{sp.first}" if sp.first is not None else "")
            + (f"-l{sp.last}" if sp.last is not None else "")
            + ("-ae" if sp.account_for_embedding else "") + ("-al" if sp.account_for_loss else "")
            + (f"-lps{sp.layers_per_stage}" if sp.layers_per_stage is not None else "")
            + (f"-fl{sp.first_less}" if sp.first_less is not None else "")
            + (f"-ll{sp.last_less}" if sp.last_less is not None else ""))


# Megatron-LM's own rebalancing of the end stages, searched where it gives another split
END_STAGE_SPLITS = (PipelineSplit(account_for_loss=True),
                    PipelineSplit(account_for_embedding=True),
                    PipelineSplit(account_for_embedding=True, account_for_loss=True))
# the schedules whose layouts Megatron-LM's split options set
END_STAGE_SCHEDULES = ("1f1b", "interleaved-1f1b")


def end_stage_splits(n_layers: int, pp: int, vpp: int) -> list[tuple]:
    """The splits of :data:`END_STAGE_SPLITS` Megatron-LM accepts at ``pp`` x ``vpp`` that differ
    from the default split and from each other (the embedding's and the loss's place counted as
    a layer: a lighter first or last chunk)."""
    seen = {default_chunk_layers(n_layers, pp * vpp)}
    out = []
    for sp in END_STAGE_SPLITS:
        try:
            counts = sp.counts(n_layers, pp, vpp)
        except ConfigError:
            continue
        if counts not in seen and (len(counts) < 2 or min(counts) > 0):
            seen.add(counts)
            out.append(tuple(sp))
    return out

@dataclass
class Outcome:
    """A candidate's numbers (``makespan_ns`` and ``p95_ns`` from the last engine that ran it)."""

    candidate: Candidate
    makespan_ns: float | None = None
    p95_ns: float | None = None
    peak_memory_bytes: int | None = None
    bubble_ratio: float | None = None
    peak_inflight_activations: int | None = None
    engine: str | None = None
    feasible: bool = False
    reason: str | None = None
    command: str | None = None
    lower_bound_ns: float | None = None
    runtimes: dict[str, dict] | None = None   # per runtime: accepts, how, rule (once it ran)
    # the schedule a cost-aware candidate (auto) was synthesized into: the confirming run and
    # the written CSV take it instead of synthesizing it again (not part of the row)
    schedule: Any = field(default=None, repr=False, compare=False)

    def row(self) -> dict[str, Any]:
        c = self.candidate
        out = {"key": c.key, "tp": c.tp, "pp": c.pp, "dp": c.dp, "vpp": c.vpp,
               "microbatches": c.microbatches, "schedule": c.schedule,
               "max_in_flight": c.max_in_flight, "recompute": c.recompute,
               "makespan_ns": self.makespan_ns, "p95_ns": self.p95_ns,
               "peak_memory_bytes": self.peak_memory_bytes, "bubble_ratio": self.bubble_ratio,
               "lower_bound_ns": self.lower_bound_ns, "engine": self.engine,
               "feasible": self.feasible, "reason": self.reason, "runtimes": self.runtimes}
        if self.command is not None:
            out["command"] = self.command
        return out


@dataclass
class Plan:
    settings: PlanSettings
    outcomes: list[Outcome]            # ranked: feasible first by the objective, then the rest
    memory_limit_bytes: float
    objective: str                     # "makespan_ns" or "p95_ns"
    notes: list[str] = field(default_factory=list)
    screened: int = 0                  # candidates run in this call (not taken from --resume)
    resumed: int = 0                   # taken from --out's candidates (--resume)
    pruned: int = 0                    # not run: their lower bound was above the best
    ruled_out: int = 0                 # not run: their sizes alone rule them out

    @property
    def best(self) -> Outcome:
        return self.outcomes[0]

    def to_dict(self) -> dict[str, Any]:
        best = self.best.row()
        return {"workload": self.settings.workload, "gpus": self.settings.gpus,
                "memory_limit_bytes": self.memory_limit_bytes, "objective": self.objective,
                "runtime": self.settings.runtime,
                "counts": {"candidates": len(self.outcomes), "screened": self.screened,
                           "resumed": self.resumed, "pruned": self.pruned,
                           "ruled_out": self.ruled_out},
                "candidates": [o.row() for o in self.outcomes], "best": best,
                "notes": list(self.notes)}


# -- the space ------------------------------------------------------------------------------

# The largest world size a plan searches (--gpus): beyond the largest clusters built, and its
# candidates (every divisor, times every schedule) stay a few thousand.
MAX_PLAN_GPUS = 1 << 17


def divisors(n: int) -> list[int]:
    """The divisors of ``n`` in increasing order, in O(sqrt n)."""
    small, large = [], []
    d = 1
    while d * d <= n:
        if n % d == 0:
            small.append(d)
            if d * d != n:
                large.append(n // d)
        d += 1
    return small + large[::-1]


def enumerate_candidates(tp: int, gpus: int, global_batch: int, n_layers: int,
                         schedules: list[tuple[str, bool, int]], first: int = 0,
                         workload: str = "", split: tuple = (),
                         layered: bool = False) -> list[Candidate]:
    """Every (pp, vpp, schedule, K) for ``gpus`` GPUs at tensor-parallel size ``tp``.

    ``schedules``: (name, takes any vpp, its own vpp) of the hand-made schedules (``auto`` is
    added later by :func:`auto_candidates`). A shape the sizes alone rule out (DP not dividing the global batch, more chunks than
    layers, a split Megatron-LM refuses) is a candidate with its ``reason``. ``split``: the
    split every candidate runs; else, where the file has layers of several rows (``layered``),
    the Megatron-LM schedules also run at each of :func:`end_stage_splits`.
    """
    out: list[Candidate] = []

    def add(**kw: Any) -> None:
        out.append(Candidate(first + len(out), workload=workload, **kw))

    for pp in divisors(gpus // tp):
        dp = gpus // (tp * pp)
        m = global_batch // dp
        shape_reason = None
        if global_batch % dp:
            shape_reason = (f"global batch {global_batch} is not a multiple of DP {dp}")
            m = 0
        elif m < 1:
            shape_reason = f"global batch {global_batch} < DP {dp}"
        rows: list[tuple[str, int, int | None]] = []
        for name, variable, own in schedules:
            for v in (VARIABLE_VPPS if variable else (own,)):
                rows.append((name, v, None))
        for name, v, k in rows:
            reason = shape_reason
            if reason is None and pp * v > n_layers:
                reason = f"{pp * v} chunks for {n_layers} layers"
            if reason is None and split:
                try:
                    PipelineSplit(*split).counts(n_layers, pp, v)
                except ConfigError as err:
                    reason = str(err)
            add(tp=tp, pp=pp, dp=dp, vpp=v, microbatches=m, schedule=name, max_in_flight=k,
                reason=reason, split=split)
            if reason is None and not split and layered and pp > 1 and \
                    name in END_STAGE_SCHEDULES:
                for variant in end_stage_splits(n_layers, pp, v):
                    add(tp=tp, pp=pp, dp=dp, vpp=v, microbatches=m, schedule=name,
                        max_in_flight=k, split=variant)
    return out


def auto_candidates(first: int, shapes: list[Candidate], n_layers: int) -> list[Candidate]:
    """``auto`` at v = 1, 2 and K = P*v, 2*P*v on each shape's (tp, pp, dp, microbatches)."""
    out = []
    for c in shapes:
        for v in AUTO_VPPS:
            base = c.pp * v
            for k in (base, 2 * base):
                reason = None
                if c.pp * v > n_layers:
                    reason = f"{c.pp * v} chunks for {n_layers} layers"
                elif 3 * c.pp * v * c.microbatches > AUTO_MAX_ACTIONS:
                    reason = (f"auto not synthesized above {AUTO_MAX_ACTIONS} actions "
                              f"({3 * c.pp * v * c.microbatches})")
                out.append(Candidate(first + len(out), c.tp, c.pp, c.dp, v, c.microbatches,
                                     AUTO, k, AUTO_ITERATIONS, reason=reason,
                                     workload=c.workload, split=c.split if v == c.vpp else ()))
    return out


def generate_workloads(settings: PlanSettings, where: Path) -> list[tuple[int, str]]:
    """One workload file per TP (divisors of N up to ``tp_max`` the model allows), written
    into ``where`` so that ``best.command`` can run it: ``plan-<arch>-<layers>l-tp<T>.txt``."""
    fields = dict(settings.model or ())
    model = ModelSpec(**fields)
    gpu = gpu_preset(settings.gpu)
    out: list[tuple[int, str]] = []
    refused = []
    for tp in divisors(settings.gpus):
        if tp > settings.tp_max:
            break
        par = ParallelSpec(tp=tp, pp=1, vpp=1, ga=1, dp=settings.gpus // tp)
        try:
            check(model, par, "model")
            text = render(model, par, gpu, "model", settings.efficiency)
        except ConfigError as err:
            refused.append(f"TP {tp}: {err}")
            continue
        path = where / f"plan-{model.arch}-{model.layers}l-tp{tp}.txt"
        try:
            where.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
        except OSError as err:
            raise ConfigError(f"cannot write the generated workload {path}: "
                              f"{err.strerror or err}") from None
        out.append((tp, str(path)))
    if not out:
        raise ConfigError(f"--tp-max {settings.tp_max}: no tensor-parallel size fits the "
                          f"model; {refused[0] if refused else ''}".rstrip("; "))
    return out


# -- running one ----------------------------------------------------------------------------

@dataclass(frozen=True)
class _Context:
    """What every screen of one plan shares (sent to the workers with each task)."""

    workload: str
    system: Any        # a SystemConfig (calibration already laid over)
    gpus: int
    p2p: str | None
    max_actions: int | None
    runtime: str | None = None


_WORKLOADS: dict[str, Any] = {}


def _workload(path: str):
    wl = _WORKLOADS.get(path)
    if wl is None:
        wl = _WORKLOADS[path] = load_workload(path)
    return wl


def _p95(values: list[float]) -> float:
    """Nearest-rank 95th percentile."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(0.95 * len(ordered)) - 1)]


def run_candidate(ctx: _Context, c: Candidate, engine: str, jitter: float = 0.0,
                  iterations: int = 1, seed: int = 0, schedule: Any = None) -> Outcome:
    """Simulate one candidate (no memory limit: the plan judges memory itself); ``schedule``:
    the candidate's schedule already built (a synthesized ``auto``), else it is built here."""
    out = Outcome(c, reason=c.reason)
    if c.reason is not None:
        return out
    try:
        result = simulate(_workload(c.workload or ctx.workload),
                          c.schedule if schedule is None else schedule, ctx.system, pp=c.pp,
                          microbatches=c.microbatches, vpp=c.vpp, gpus=ctx.gpus, p2p=ctx.p2p,
                          schedule_options=c.options or None, memory_limit_gb=math.inf,
                          engine=engine, jitter=jitter, iterations=iterations, seed=seed,
                          # the per-candidate budget is per iteration (confirming runs under
                          # --jitter run several)
                          max_actions=ctx.max_actions * iterations if ctx.max_actions
                          else ctx.max_actions, recompute=c.recompute, **c.split_options)
    except PipesimError as err:
        out.reason = str(err).splitlines()[0]
        return out
    if registry.get(c.schedule).needs_costs:
        out.schedule = result.schedule
    if not result.schedule.flush:
        out.reason = (f"{c.schedule} does not flush the pipeline (1-stale weights): its "
                      "iteration time is not comparable")
        return out

    verdicts = check_runtimes(shape_of(result.schedule, result.workload, result.partition,
                                       c.options))
    out.runtimes = {k: v.to_dict() for k, v in verdicts.items()}
    if ctx.runtime is not None and not verdicts[ctx.runtime].accepts:
        out.reason = f"{ctx.runtime} does not run it: {verdicts[ctx.runtime].rule}"
        return out
    s = result.to_dict()
    out.makespan_ns = s["makespan_ns"]
    out.p95_ns = _p95(list(s["iteration_times_ns"])) if jitter > 0 else None
    out.peak_memory_bytes = int(s["peak_memory_bytes"])
    out.bubble_ratio = s["bubble_ratio"]
    out.engine = s["engine_used"]
    out.feasible = True
    return out


def _screen(task: tuple[_Context, Candidate]) -> Outcome:
    ctx, c = task
    return run_candidate(ctx, c, "evaluator")


# -- the plan -------------------------------------------------------------------------------

def _load_system(settings: PlanSettings):
    system = load_system(settings.system)
    if settings.calibration is not None:
        system = apply_calibration(system, settings.calibration)
    return system


def command_for(settings: PlanSettings, o: Outcome, schedule_file: str | None = None) -> str:
    """The ``pipesim run`` command that reproduces ``o``'s ``makespan_ns``."""
    c = o.candidate
    words = ["pipesim", "run", c.workload or settings.workload, "--gpus", str(settings.gpus),
             "--pp", str(c.pp), "-m", str(c.microbatches), "--vpp", str(c.vpp)]
    if schedule_file is not None:
        words += ["--schedule-file", schedule_file]
    else:
        words += ["-s", c.schedule]
        for key, value in c.options.items():
            words += ["-O", f"{key}={value}"]
    for flag in PipelineSplit(*c.split).flags() if c.split else ():
        words += flag.split()
    if c.recompute != "file":
        words += ["--recompute", c.recompute]
    if settings.system is not None:
        words += ["--system", settings.system]
    if settings.calibration is not None:
        words += ["--calibration", settings.calibration]
    if settings.p2p is not None:
        words += ["--p2p", settings.p2p]
    if settings.memory_limit_gib is not None:
        words += ["--memory-limit", f"{settings.memory_limit_gib:g}"]
    if settings.jitter > 0:
        words += ["--jitter", f"{settings.jitter:g}", "--iterations", str(settings.iterations),
                  "--seed", str(settings.seed)]
    if settings.max_actions is not None:
        words += ["--max-actions", str(settings.max_actions)]
    return shlex.join(words)


def candidate_work(c: Candidate, max_actions: int | None) -> int:
    """What running ``c`` once costs, in engine actions, from its sizes alone: its actions, or
    what building its schedule costs when that grows faster (as ``run``'s budget counts them),
    plus for ``auto`` its synthesis (:func:`~simulator.schedules.synthesis.search.synthesis_work`, ~40 evaluations per
    action); 0 when nothing runs (its sizes rule it out, or it is above the per-candidate
    ``max_actions`` and refused at once)."""
    if c.reason is not None:
        return 0

    spec = registry.get(c.schedule)
    try:
        _, actions = spec.size_of(c.pp, c.microbatches, c.vpp, c.options or None)
    except PipesimError:
        return 0
    work = spec.work_of(c.pp, c.microbatches, c.vpp, actions)
    if max_actions and work > max_actions:
        return 0
    if spec.needs_costs:   # auto: its synthesis, counted in engine actions

        evaluations = synthesis_work(c.pp, c.microbatches, c.vpp,
                                     c.search_iterations or AUTO_ITERATIONS)
        work += -(-evaluations // EVALUATIONS_PER_ACTION)
    return work


def auto_floor(candidates: list[Candidate], layers: dict[str, int],
               max_actions: int | None) -> int:
    """The least the ``auto`` candidates can cost, before any screen says where they go: their
    work (syntheses and screens) on the :data:`AUTO_SHAPES` cheapest (tp, pp) shapes that give
    a whole number of microbatches."""
    shapes: dict[tuple[str, int, int], Candidate] = {}
    for c in candidates:
        if c.reason is None or "chunks for" in c.reason:
            shapes.setdefault((c.workload, c.tp, c.pp), c)
    costs = sorted(sum(candidate_work(a, max_actions)
                       for a in auto_candidates(0, [c], layers[c.workload]))
                   for c in shapes.values())
    return sum(costs[:AUTO_SHAPES])


def check_work(settings: PlanSettings, candidates: list[Candidate], max_actions: int | None,
               max_work: int | None, autos: int = 0) -> int:
    """Refuse a plan whose candidates cost more than ``max_work`` actions in all (default
    :data:`PLAN_MAX_WORK`, 0 = none), before any runs: every candidate screened (no lower bound
    is assumed to prune one), ``autos`` (:func:`auto_floor`) and the ``confirm`` largest run
    again for ``iterations`` iterations. Returns the count."""
    each = sorted((candidate_work(c, max_actions) for c in candidates), reverse=True)
    screens = sum(each)
    confirms = sum(each[:settings.confirm]) * settings.iterations
    total = screens + autos + confirms
    bound = PLAN_MAX_WORK if max_work is None else max_work
    if bound > 0 and total > bound:
        run = sum(1 for w in each if w)
        raise ConfigError(
            f"--max-work: plan of {settings.workload} on {settings.gpus} GPUs screens {run} "
            f"candidate(s) of {screens:,} actions in all, synthesizes auto on its "
            f"{AUTO_SHAPES} cheapest pipeline degree(s) (at least {autos:,}) and confirms the "
            f"best {settings.confirm} x {settings.iterations} iteration(s) (up to "
            f"{confirms:,}), {total:,} actions, above the limit of {bound:,} (about 10 s); pass "
            f"--max-work {total} (or 0 for no limit), or a lower --max-actions to list the "
            "largest candidates infeasible")
    return total


def _check(settings: PlanSettings) -> None:
    if settings.gpus < 1:
        raise ConfigError(f"--gpus: expected a positive number of GPUs, got {settings.gpus}")
    if settings.gpus > MAX_PLAN_GPUS:
        raise ConfigError(f"--gpus: {settings.gpus:,} GPUs, above the largest world size a plan "
                          f"searches ({MAX_PLAN_GPUS:,})")
    layers = dict(settings.model or ()).get("layers")
    if layers is not None:
        if layers > MAX_LAYERS:
            raise ConfigError(f"--layers: {layers:,} layers, above the most pipesim generates "
                              f"({MAX_LAYERS:,}; real models have a few hundred)")
    if settings.global_batch is not None and settings.global_batch < 1:
        raise ConfigError(f"--global-batch: expected a positive number of microbatches, got "
                          f"{settings.global_batch}")
    if settings.memory_limit_gib is not None and not settings.memory_limit_gib >= 0:
        raise ConfigError(f"--memory-limit: expected a non-negative number of GiB, got "
                          f"{settings.memory_limit_gib:g}")
    if settings.jitter < 0 or not math.isfinite(settings.jitter):
        raise ConfigError(f"--jitter: expected a non-negative sigma, got {settings.jitter:g}")
    if settings.iterations < 1:
        raise ConfigError(f"--iterations: expected a positive integer, got {settings.iterations}")
    if settings.confirm < 1:
        raise ConfigError(f"--confirm: expected a positive integer, got {settings.confirm}")

    if settings.runtime is not None and settings.runtime not in RUNTIMES:
        raise ConfigError(f"--runtime: expected one of {', '.join(RUNTIMES)}, got "
                          f"{settings.runtime!r}")


def _read_resumed(out_dir: Path, settings: PlanSettings, resume: bool
                  ) -> dict[str, dict[str, Any]]:
    """Outcomes already in ``out_dir`` (with ``resume``), by candidate key."""
    settings_path = out_dir / SETTINGS_FILE
    mine = json.dumps(asdict(settings), sort_keys=True)
    done: dict[str, dict[str, Any]] = {}
    if resume and settings_path.exists():
        if settings_path.read_text().strip() != mine:
            raise ConfigError(f"--resume: {out_dir} holds a plan with other settings "
                              f"({settings_path}); use another --out or drop --resume")
        path = out_dir / CANDIDATES_FILE
        if path.exists():
            for line in path.read_text().splitlines():
                try:
                    row = json.loads(line)
                except json.JSONDecodeError:
                    continue   # a line cut short by an interrupted plan: run it again
                done[row["key"]] = row
    out_dir.mkdir(parents=True, exist_ok=True)
    settings_path.write_text(mine + "\n")
    if not resume:
        (out_dir / CANDIDATES_FILE).write_text("")
    return done


def _from_row(c: Candidate, row: dict[str, Any]) -> Outcome:
    return Outcome(c, row["makespan_ns"], row["p95_ns"], row["peak_memory_bytes"],
                   row["bubble_ratio"], None, row["engine"], row["feasible"], row["reason"],
                   lower_bound_ns=row.get("lower_bound_ns"), runtimes=row.get("runtimes"))


def _enumerate(settings: PlanSettings, table: list[tuple[str, bool, int]],
               workload_dir: str | Path | None
               ) -> tuple[list[Candidate], dict[str, Any], dict[str, int], int]:
    """Every hand-made candidate of every workload (one per TP with model flags), the workloads
    by path, their layer counts and the number of layers ``auto`` is given (the last
    workload's); refuses a global batch no pipeline degree divides."""
    if settings.model is not None:
        if settings.global_batch is None:
            raise ConfigError("--global-batch: needed with the model flags (microbatches per "
                              "iteration across DP)")
        sources = generate_workloads(settings, Path(workload_dir or "."))
    else:
        sources = [(None, settings.workload)]
    candidates: list[Candidate] = []
    workloads: dict[str, Any] = {}
    layers: dict[str, int] = {}   # per workload (by the candidates' ``workload`` field)
    tried_dps: set[int] = set()
    for tp, path in sources:
        wl = workloads[path] = _workload(path)
        h = wl.header
        if tp is None:
            tp = max(1, h.tp)
            if settings.gpus % tp:
                raise ConfigError(f"--gpus {settings.gpus}: expected a multiple of the "
                                  f"workload's tensor-parallel size {tp} ({settings.workload})")
        global_batch = (settings.global_batch if settings.global_batch is not None
                        else h.ga * h.dp)
        tried_dps.update(settings.gpus // (tp * pp) for pp in divisors(settings.gpus // tp))
        n_layers = n_model_layers(wl)
        layers[path if settings.model else ""] = n_layers
        layered = wl.layout == "aicb" or n_layers < len(wl.layers)
        candidates += enumerate_candidates(tp, settings.gpus, global_batch, n_layers, table,
                                           len(candidates), path if settings.model else "",
                                           settings.split, layered)
    if not any(global_batch % dp == 0 for dp in tried_dps):
        raise ConfigError(f"--global-batch {global_batch}: no pipeline degree gives a whole "
                          f"number of microbatches per data-parallel group; expected a multiple "
                          f"of one of DP = {', '.join(map(str, sorted(tried_dps)))} "
                          f"(--gpus {settings.gpus})")
    return candidates, workloads, layers, n_layers


class _Search:
    """One plan's screening state: the candidates so far, their outcomes and lower bounds, the
    work spent against ``--max-work``, the counters the report prints, and the candidates file
    (``--out``) each outcome is appended to as it comes."""

    def __init__(self, settings: PlanSettings, system: Any, workloads: dict[str, Any],
                 candidates: list[Candidate], limit: float, ctx: _Context, work: int,
                 work_bound: int, executor: str, jobs: int | None, address: str | None,
                 progress: Callable[[int, int], None] | None) -> None:
        self.settings, self.system, self.workloads = settings, system, workloads
        self.candidates, self.limit, self.ctx = candidates, limit, ctx
        self.work, self.work_bound = work, work_bound
        self.executor, self.jobs, self.address, self.progress = executor, jobs, address, progress
        self.notes: list[str] = []
        self.unretried = ""   # the no-fit error's last words when retries were left out
        self.stage_costs: dict[tuple[str, int, int], Any] = {}
        self.bounds: dict[int, float | None] = {}
        # under jitter the ranking is by p95, which a bound on the plain makespan does not bound
        self.prune = settings.prune and settings.jitter == 0
        self.floor: dict[int, float] = {}   # a recompute retry: its own run without recompute
        self.outcomes: dict[int, Outcome] = {}
        self.resumed: dict[str, dict[str, Any]] = {}
        self.sink = None
        self.total = len(candidates) + AUTO_SHAPES * 2 * len(AUTO_VPPS)
        self.screened = self.resumed_count = self.pruned_count = self.ruled_out = 0

    def open(self, out_dir: str | Path | None, resume: bool) -> None:
        """Read what ``out_dir`` already holds (with ``resume``) and append to it from now."""
        if out_dir is not None:
            out_dir = Path(out_dir)
            self.resumed = _read_resumed(out_dir, self.settings, resume)
            self.sink = open(out_dir / CANDIDATES_FILE, "a")
        elif resume:
            raise ConfigError("--resume: needs --out DIR (the folder of the plan to complete)")

    def close(self) -> None:
        if self.sink is not None:
            self.sink.close()

    def lower_bound(self, c: Candidate) -> float | None:
        """The shape's bound (below), raised for a full-recompute retry to the makespan of the
        same candidate without recompute: replaying forwards only lengthens actions, and with
        the orders fixed the makespan cannot shrink."""
        base = self.shape_bound(c)
        f = self.floor.get(c.index)
        if f is None:
            return base
        return f if base is None else max(base, f)

    def shape_bound(self, c: Candidate) -> float | None:
        """A makespan no schedule of this shape beats (ns): every rank runs its share of the
        compute, at best an equal share, and no rank starts before the first microbatch's
        forward reaches its first chunk (the ranks' first chunks are distinct, so their start
        delays add up to at least those of chunks 0 .. pp-1). DP collectives, transfers and
        the end of the pipeline are left out, so it stays a bound."""
        if c.reason is not None or c.schedule in NO_BOUND:
            return None
        key = (c.workload, c.pp, c.vpp, c.split)
        sc = self.stage_costs.get(key)
        if sc is None:
            try:
                sc = self.stage_costs[key] = _run_costs(
                    self.workloads[c.workload or self.settings.workload], self.system,
                    self.settings.gpus, c.pp, c.vpp, c.split)
            except PipesimError:
                sc = self.stage_costs[key] = False
        if sc is False:
            return None
        total = sum(sc.f) + sum(sc.i) + sum(sc.w)
        prefix, starts = 0.0, 0.0
        for k in range(c.pp):
            starts += prefix
            prefix += sc.f[k]
        return (c.microbatches * total + starts) / c.pp

    def _tell(self) -> None:
        if self.progress is not None:
            self.progress(len(self.outcomes), self.total)

    def _best_fitting(self) -> float:
        """The best makespan a candidate must beat to matter: of those that fit and, without
        --runtime, that Megatron-LM or torchtitan runs (the winner is one of them)."""
        any_runtime = self.settings.runtime is not None
        return min((o.makespan_ns for o in self.outcomes.values() if _fits(o, self.limit)
                    and (any_runtime or not _not_launchable(o))), default=math.inf)

    def record(self, o: Outcome) -> None:
        o.lower_bound_ns = self.bounds.get(o.candidate.index)
        self.outcomes[o.candidate.index] = o
        if self.sink is not None:
            self.sink.write(json.dumps(o.row()) + "\n")
            self.sink.flush()

    def screen(self, batch: list[Candidate]) -> None:
        """Run ``batch`` in rounds, cheapest lower bound first; after each round, a candidate
        whose bound is above the best fitting makespan so far is not run (it cannot win). The
        rounds have a fixed size, so what is pruned does not depend on the workers' timing."""
        todo = []
        for c in batch:
            row = self.resumed.get(c.key)
            if row is not None:
                self.outcomes[c.index] = _from_row(c, row)
                self.resumed_count += 1
            else:
                todo.append(c)
        self._tell()
        bounds = self.bounds
        bounds.update((c.index, self.lower_bound(c)) for c in todo)
        todo.sort(key=lambda c: (bounds[c.index] if bounds[c.index] is not None else -1.0,
                                 c.index))
        while todo:
            best = self._best_fitting()
            keep, pruned = [], []
            for c in todo:
                b = bounds[c.index]
                (pruned if self.prune and b is not None and b > best else keep).append(c)
            for c in pruned:
                self.record(Outcome(c, reason=f"not run: its lower bound {_ms(bounds[c.index])} "
                                              f"is above the best found, {_ms(best)}"))
                self.pruned_count += 1
            if pruned:
                self._tell()
            todo, now = keep[ROUND:], keep[:ROUND]
            for o in _map(self.executor, self.jobs, self.address, [(self.ctx, c) for c in now]):
                self.record(o)
                if o.candidate.reason is not None:   # refused by its sizes, nothing ran
                    self.ruled_out += 1
                else:
                    self.screened += 1
                self._tell()

    def retry_with_recompute(self) -> None:
        """What does not fit, once more with full recompute (less memory, more compute), while
        the plan stays within --max-work (what is not retried keeps its reason, over the memory
        limit, and a note says so)."""
        outcomes, limit = self.outcomes, self.limit
        over = [c for c in self.candidates if c.recompute == "file"
                and outcomes[c.index].peak_memory_bytes is not None
                and outcomes[c.index].peak_memory_bytes > limit]
        retry, skipped, extra = [], 0, 0
        for c in over:
            w = candidate_work(replace(c, recompute="full"), self.ctx.max_actions)
            if self.work_bound > 0 and self.work + w > self.work_bound:
                skipped += 1
                extra += w
                continue
            self.work += w
            retry.append(c)
        if skipped:
            unretried = (f"{skipped} candidate(s) over the memory limit not tried again "
                         f"with full recompute: the plan would pass --max-work "
                         f"{self.work_bound} (pass --max-work {self.work + extra} to try them)")
            self.notes.append(unretried)
            self.unretried = "; " + unretried
        over = retry
        redo = [replace(c, index=len(self.candidates) + k, recompute="full")
                for k, c in enumerate(over)]
        self.floor.update((r.index, outcomes[c.index].makespan_ns) for r, c in zip(redo, over))
        self.candidates = self.candidates + redo
        self.total = len(self.candidates) + AUTO_SHAPES * 2 * len(AUTO_VPPS)
        self.screen(redo)

    def synthesize_autos(self, n_layers: int, floor_autos: int) -> None:
        """``auto`` on the pipeline degrees whose best hand-made schedule fits and is fastest,
        synthesized while the plan stays within --max-work (those left out say so); the floor
        held for them until now is counted again, on the shapes chosen."""
        outcomes, limit = self.outcomes, self.limit
        fitting = sorted((outcomes[c.index] for c in self.candidates
                          if outcomes[c.index].feasible and (
                              limit <= 0 or outcomes[c.index].peak_memory_bytes <= limit)),
                         key=lambda o: (o.makespan_ns, o.candidate.index))
        shapes: list[Candidate] = []
        for o in fitting:
            if len(shapes) < AUTO_SHAPES and (o.candidate.tp, o.candidate.pp) not in {
                    (c.tp, c.pp) for c in shapes}:
                shapes.append(o.candidate)
        autos = auto_candidates(len(self.candidates), shapes, n_layers)
        self.work -= floor_autos
        skipped, extra = 0, 0
        best_yet = self._best_fitting()
        for n, a in enumerate(autos):
            b = self.lower_bound(a)
            if self.prune and b is not None and b > best_yet:
                continue   # its bound already rules it out: screen() prunes it, nothing runs
            w = candidate_work(a, self.ctx.max_actions)
            if self.work_bound > 0 and self.work + w > self.work_bound:
                skipped += 1
                extra += w
                autos[n] = replace(a, reason=f"auto not synthesized: the plan would pass "
                                             f"--max-work {self.work_bound}")
                continue
            self.work += w
        if skipped:
            self.notes.append(f"{skipped} auto candidate(s) not synthesized: the plan would pass "
                              f"--max-work {self.work_bound} (pass --max-work "
                              f"{self.work + extra} to synthesize them)")
        self.candidates = self.candidates + autos
        self.total = len(self.candidates)
        self.screen(autos)

    def rank(self) -> Plan:
        """Confirm the best ``confirm`` fitting candidates on the SimPy engine (with jitter when
        asked), rank by what it says, and list the rest after them."""
        settings, limit, notes = self.settings, self.limit, self.notes
        ordered = [self.outcomes[c.index] for c in self.candidates]
        objective = "p95_ns" if settings.jitter > 0 else "makespan_ns"
        _judge_memory(ordered, limit)
        # by default the winner is one Megatron-LM or torchtitan launches; --runtime NAME has
        # already kept only what NAME runs
        first = (lambda o: 0) if settings.runtime is not None else _not_launchable
        fits = sorted((o for o in ordered if o.feasible),
                      key=lambda o: (first(o), o.makespan_ns, o.candidate.index))
        if not fits:
            _no_fit(ordered, limit, settings, self.unretried)
        confirmed = fits[:settings.confirm]
        for n, o in enumerate(confirmed):
            again = run_candidate(self.ctx, o.candidate, "simpy", settings.jitter,
                                  settings.iterations, settings.seed, o.schedule)
            again.lower_bound_ns = o.lower_bound_ns
            if again.feasible:
                confirmed[n] = again
            else:
                confirmed[n].feasible, confirmed[n].reason = False, again.reason
        _judge_memory(confirmed, limit)
        confirmed.sort(key=lambda o: (first(o), _objective(o, objective), o.candidate.index))
        rest = fits[settings.confirm:]
        ranked = [o for o in confirmed if o.feasible] + rest
        if not ranked:
            _no_fit(ordered, limit, settings, self.unretried)
        dropped = [o for o in confirmed if not o.feasible] + [o for o in ordered if not o.feasible]
        if settings.jitter > 0 and rest:
            notes.append(f"p95 is measured for the {len(confirmed)} confirmed candidates only; "
                         "the others are ranked by their evaluated makespan")
        best = ranked[0]
        faster = sum(1 for o in ranked if first(o) and o.makespan_ns < best.makespan_ns)
        if faster and not first(best):
            notes.append(f"{faster} faster candidate(s) run on neither Megatron-LM nor "
                         "torchtitan (listed after the winner); --runtime torch lets one win")
        best.command = command_for(settings, best)
        return Plan(settings, ranked + dropped, limit, objective, notes, self.screened,
                    self.resumed_count, self.pruned_count, self.ruled_out)


def plan(settings: PlanSettings, *, executor: str = "local", jobs: int | None = None,
         address: str | None = None, out_dir: str | Path | None = None, resume: bool = False,
         progress: Callable[[int, int], None] | None = None,
         workload_dir: str | Path | None = None, max_work: int | None = None) -> Plan:
    """Screen every candidate, confirm the best, rank; see the module docstring.

    ``progress(done, total)`` is called as candidates finish. With model flags, the workload
    of each TP is generated into ``workload_dir`` (default: here), where ``best.command`` runs
    it. Raises ConfigError (exit 2) when the candidates cost more than ``max_work`` actions in
    all (:func:`check_work`), or when no candidate fits the memory limit, naming the smallest
    peak found and what to relax.
    """
    _check(settings)

    system = _load_system(settings)
    specs = [registry.get(n) for n in (settings.schedules or registry.names())]
    table = [(sp.name, sp.variable_vpp, sp.default_vpp) for sp in specs]
    candidates, workloads, layers, n_layers = _enumerate(settings, table, workload_dir)
    if settings.memory_limit_gib is not None:
        limit = settings.memory_limit_gib * 2**30
    else:
        limit = system.memory.capacity_bytes
    ctx = _Context(settings.workload, system, settings.gpus, settings.p2p,
                   PLAN_MAX_ACTIONS if settings.max_actions is None else settings.max_actions,
                   settings.runtime)
    floor_autos = auto_floor(candidates, layers, ctx.max_actions)
    work = check_work(settings, candidates, ctx.max_actions, max_work, floor_autos)
    search = _Search(settings, system, workloads, candidates, limit, ctx, work,
                     PLAN_MAX_WORK if max_work is None else max_work, executor, jobs, address,
                     progress)
    search.open(out_dir, resume)
    try:
        search.screen(candidates)
        if limit > 0:
            search.retry_with_recompute()
        search.synthesize_autos(n_layers, floor_autos)
    finally:
        search.close()
    return search.rank()


def _run_costs(wl, system, gpus: int, pp: int, vpp: int, split: tuple = ()):
    run_wl, _ = header_for_run(wl, pp, gpus=gpus)
    run_wl = with_split(run_wl, pp, vpp, PipelineSplit(*split))
    return run_stage_costs(partition(run_wl, pp * vpp), run_wl.header, system, pp)


def _not_launchable(o: Outcome) -> int:
    """1 when neither Megatron-LM nor torchtitan runs the candidate (torchtitan with a CSV
    counts), else 0."""
    runs = o.runtimes or {}
    return 0 if any((runs.get(r) or {}).get("accepts") for r in ("megatron", "torchtitan")) \
        else 1


def _fits(o: Outcome, limit: float) -> bool:
    return o.feasible and (limit <= 0 or o.peak_memory_bytes <= limit)


def _ms(ns: float) -> str:
    return f"{ns / 1e6:.3f} ms"


def _objective(o: Outcome, objective: str) -> float:
    value = getattr(o, objective)
    return value if value is not None else o.makespan_ns


def _judge_memory(outcomes: list[Outcome], limit: float) -> None:
    if limit <= 0:
        return
    for o in outcomes:
        if o.feasible and o.peak_memory_bytes > limit:
            o.feasible = False
            o.reason = (f"peak memory {fmt_bytes(o.peak_memory_bytes)} per GPU over the limit "
                        f"{fmt_bytes(limit)}")


def _no_fit(outcomes: list[Outcome], limit: float, settings: PlanSettings,
            unretried: str = "") -> None:
    ran = [o for o in outcomes if o.peak_memory_bytes is not None]
    if not ran and settings.runtime is not None:
        refused = [o.reason for o in outcomes
                   if o.reason and o.reason.startswith(f"{settings.runtime} does not run it")]
        if refused:
            raise ConfigError(f"--runtime {settings.runtime}: no candidate it runs on --gpus "
                              f"{settings.gpus}; the first refused: {refused[0]}")
    if not ran:
        first = next((o.reason for o in outcomes if o.reason), "no candidate")
        raise ConfigError(f"{settings.workload}: no candidate could run on --gpus "
                          f"{settings.gpus}; the first reason: {first}")
    low = min(ran, key=lambda o: (o.peak_memory_bytes, o.candidate.index))
    c = low.candidate
    option = ("--memory-limit" if settings.memory_limit_gib is not None
              else "the system's memory.capacity_gib (or give --memory-limit)")
    raise ConfigError(f"--memory-limit {fmt_bytes(limit)}: no feasible configuration; the "
                      f"smallest peak memory found is {fmt_bytes(low.peak_memory_bytes)} per GPU "
                      f"(pp {c.pp}, vpp {c.vpp}, {c.schedule}"
                      f"{', full recompute' if c.recompute == 'full' else ''}); raise {option}, "
                      f"add GPUs (--gpus) or lower --global-batch{unretried}")


def _map(executor: str, jobs: int | None, address: str | None,
         tasks: list[tuple[_Context, Candidate]]) -> Iterator[Outcome]:
    if not tasks:
        return
    if executor == "local" and (jobs == 1 or len(tasks) == 1):
        for task in tasks:
            yield _screen(task)
        return

    with make_executor(executor, jobs, address) as ex:
        yield from ex.map_unordered(_screen, tasks)
