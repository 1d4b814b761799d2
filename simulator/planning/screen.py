"""Running one candidate: the context every screen of a plan shares, the simulation, and its
:class:`Outcome` (numbers, or the reason it has none)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from ..api import simulate
from ..errors import ConfigError, PipesimError
from ..schedules import registry
from ..schedules.registration import ZERO_BUBBLE_FORK
from ..schedules.registry import megatron_of
from ..schedules.library.interleaved_1f1b import resolve_group_size
from ..schedules.runtimes import Shape, check_runtimes, megatron_verdict, shape_of
from .candidates import Candidate
from .settings import recompute_options, state_options
from .workloads import cached_workload


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
    # its run's warnings, as `pipesim run` states them (None: not known here, e.g. resumed);
    # the plan states the winner's (not part of the row: every candidate's are alike)
    warnings: tuple[str, ...] | None = field(default=None, compare=False)
    # the schedule a cost-aware candidate (auto) was synthesized into: the confirming run and
    # the written CSV take it instead of synthesizing it again (not part of the row)
    schedule: Any = field(default=None, repr=False, compare=False)

    def row(self) -> dict[str, Any]:
        c = self.candidate
        out = {"key": c.key, "tp": c.tp, "cp": c.cp, "ep": c.ep, "pp": c.pp, "dp": c.dp,
               "vpp": c.vpp,
               "microbatches": c.microbatches, "schedule": c.schedule,
               "max_in_flight": c.max_in_flight, "max_pending": c.max_pending,
               "recompute": c.recompute,
               "makespan_ns": self.makespan_ns, "p95_ns": self.p95_ns,
               "peak_memory_bytes": self.peak_memory_bytes, "bubble_ratio": self.bubble_ratio,
               "lower_bound_ns": self.lower_bound_ns, "engine": self.engine,
               "feasible": self.feasible, "reason": self.reason, "runtimes": self.runtimes}
        if self.command is not None:
            out["command"] = self.command
        return out


def not_launchable(o: Outcome) -> int:
    """1 when neither Megatron-LM nor torchtitan runs the candidate (torchtitan with a CSV
    counts), else 0."""
    runs = o.runtimes or {}
    return 0 if any((runs.get(r) or {}).get("accepts") for r in ("megatron", "torchtitan")) \
        else 1


def fits(o: Outcome, limit: float) -> bool:
    return o.feasible and (limit <= 0 or o.peak_memory_bytes <= limit)


@dataclass(frozen=True)
class ScreenContext:
    """What every screen of one plan shares (sent to the workers with each task)."""

    workload: str
    system: Any        # a SystemConfig (calibration already laid over)
    gpus: int
    p2p: str | None
    max_actions: int | None
    runtime: str | None = None
    recompute_grouping: tuple = ()   # PlanSettings'
    state: tuple = ()   # PlanSettings'




def megatron_options(runtime: str | None) -> dict:
    """The run options of a plan for ``runtime``: Megatron-LM's DDP and the step after it for
    ``--runtime megatron``, as its launch file runs (``pipesim run --megatron-args``), so the
    launch reads back with the plan's numbers."""
    return {"megatron_ddp": True} if runtime == "megatron" else {}


def p95(values: list[float]) -> float:
    """Nearest-rank 95th percentile."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(0.95 * len(ordered)) - 1)]


def simulate_candidate(ctx: ScreenContext, c: Candidate, engine: str, jitter: float = 0.0,
                       iterations: int = 1, seed: int = 0, schedule: Any = None):
    """The one simulation of a candidate, as the plan screens and confirms it and as its
    written CSV and launch folder are built from it (no memory limit: the plan judges memory
    itself); ``schedule``: the candidate's schedule already built (a synthesized ``auto``), else
    it is built here. Raises what :func:`simulate` raises."""
    # iterations that overlap (c.runs > 1) are timed by the steady state, after the first
    iterations = max(iterations, c.runs)
    return simulate(cached_workload(c.workload or ctx.workload),
                    c.schedule if schedule is None else schedule, ctx.system, pp=c.pp,
                    microbatches=c.microbatches, vpp=c.vpp, gpus=ctx.gpus, p2p=ctx.p2p,
                    schedule_options=c.options or None, memory_limit_gb=math.inf,
                    engine=engine, jitter=jitter, iterations=iterations, seed=seed,
                    # the per-candidate budget is per iteration (confirming runs under
                    # --jitter run several)
                    max_actions=ctx.max_actions * iterations if ctx.max_actions
                    else ctx.max_actions, recompute=c.recompute,
                    **recompute_options(ctx.recompute_grouping, c.recompute),
                    **c.split_options,
                    **{**megatron_options(ctx.runtime), **state_options(ctx.state, c.shard_ranks)})


def run_candidate(ctx: ScreenContext, c: Candidate, engine: str, jitter: float = 0.0,
                  iterations: int = 1, seed: int = 0, schedule: Any = None) -> Outcome:
    """One candidate's :func:`simulate_candidate`, as the plan's numbers for it."""
    out = Outcome(c, reason=c.reason)
    if c.reason is not None:
        return out
    try:
        result = simulate_candidate(ctx, c, engine, jitter, iterations, seed, schedule)
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
    times = list(s["iteration_times_ns"])
    if c.runs > 1:       # the first iteration holds the pipeline's fill the others overlap
        times = times[1:]
        out.makespan_ns = s["steady_iteration_ns"]
    else:
        out.makespan_ns = s["makespan_ns"]
    out.p95_ns = p95(times) if jitter > 0 else None
    out.peak_memory_bytes = int(s["peak_memory_bytes"])
    out.bubble_ratio = s["bubble_ratio"]
    out.engine = s["engine_used"]
    out.feasible = True
    out.warnings = tuple(str(w) for w in result.warnings)
    return out


def screen_one(task: tuple[ScreenContext, Candidate]) -> Outcome:
    ctx, c = task
    return run_candidate(ctx, c, "evaluator")


def refused_before_running(runtime: str | None, c: Candidate, state: tuple = ()) -> str | None:
    """Why ``--runtime megatron`` refuses ``c`` by its schedule, sizes and the plan's training
    state alone (Megatron-LM's rules on the schedule, pp, vpp and microbatch groups, the
    zero-bubble fork's on the distributed optimizer's overlaps; its layer rules need the run),
    so that it is ruled out unscreened; None: it runs, or it needs the run to tell."""
    if runtime != "megatron" or c.reason is not None:
        return None
    ddp = dict(state)
    fork = megatron_of(c.schedule)
    if fork in ZERO_BUBBLE_FORK and ddp.get("use_distributed_optimizer") and (
            ddp.get("overlap_grad_reduce") or ddp.get("overlap_param_gather")):
        # megatron/arguments.py (tag zero-bubble-v0.1.0): with --enable-zero-bubble (which
        # --zero-bubble-v-schedule turns on) and the distributed optimizer, neither overlap
        flag = "--enable-zero-bubble" if fork == "zero-bubble" else "--zero-bubble-v-schedule"
        return (f"megatron does not run it: the zero-bubble fork runs {flag} "
                "with the distributed optimizer only without --overlap-grad-reduce and "
                "--overlap-param-gather")
    group = None
    if c.schedule == "interleaved-1f1b":
        try:
            group = resolve_group_size(c.pp, c.microbatches, c.vpp,
                                       c.options.get("group_size"), c.schedule)
        except ConfigError:
            return None   # the run gives its own reason
    verdict = megatron_verdict(Shape(c.schedule, c.pp, c.vpp, c.microbatches,
                                     group_size=group, max_pending=c.max_pending))
    return None if verdict.accepts else f"megatron does not run it: {verdict.rule}"
