"""``pipesim plan``: which pipeline degree, virtual stages, microbatch count and schedule to run
on N GPUs, within their memory.

The search space, for a workload file (its tensor-parallel size fixed by the header; with the
model flags, ``--tp`` or every divisor of N / CP up to ``--tp-max``, at the context parallelism
CP of ``--cp`` or the launch file, 1 by default, or every divisor up to ``--cp-max``; a moe
model's expert parallelism EP likewise, ``--ep`` or every divisor of its experts up to
``--ep-max``, a DP x CP that is not a multiple of EP ruled out):

- ``pp``: every divisor of N / (TP * CP); ``dp = N / (TP * CP * pp)``;
- ``microbatches``: the global batch in microbatches (``--global-batch-size`` sequences over
  the micro batch, as the CLI gives it; default the file's ``ga x dp``) over DP, ``M = B / dp``
  (a pp whose DP does not divide B is listed infeasible);
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


The pieces: :mod:`.settings` (what a plan depends on), :mod:`.candidates` (the space),
:mod:`.workloads` (the files it runs), :mod:`.screen` (running one candidate), :mod:`.budgets`
(what it costs before it runs), :mod:`.bounds` (lower bounds), :mod:`.search` (screening,
pruning, retries, ranking), :mod:`.resume` (the ``--out`` folder) and :mod:`.report` (the
answer).
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Callable

from ..schedules import registry
from ..units import fmt_bytes
from .budgets import PLAN_MAX_ACTIONS, PLAN_MAX_WORK, auto_floor, candidate_work, check_work
from .bounds import ShapeBounds
from .candidates import (AUTO, AUTO_ITERATIONS, AUTO_MAX_ACTIONS, AUTO_SHAPES, AUTO_VPPS,
                         END_STAGE_SCHEDULES, END_STAGE_SPLITS, SPLIT_OPTIONS, VARIABLE_VPPS,
                         Candidate, ScheduleChoice, auto_candidates, divisors, end_stage_splits,
                         enumerate_candidates, split_key, split_label)
from .report import Plan, command_for
from .screen import (Outcome, ScreenContext, refused_before_running, run_candidate,
                     simulate_candidate)
from .search import Search
from .settings import (DEFAULT_CONFIRM, MAX_PLAN_GPUS, PlanSettings, check_settings,
                       load_plan_system)
from .workloads import cached_workload, enumerate_space, generate_workloads

__all__ = ["AUTO", "AUTO_ITERATIONS", "AUTO_MAX_ACTIONS", "AUTO_SHAPES", "AUTO_VPPS",
           "DEFAULT_CONFIRM", "END_STAGE_SCHEDULES", "END_STAGE_SPLITS", "MAX_PLAN_GPUS",
           "PLAN_MAX_ACTIONS", "PLAN_MAX_WORK", "SPLIT_OPTIONS", "VARIABLE_VPPS", "Candidate",
           "Outcome", "Plan", "PlanSettings", "ScheduleChoice", "auto_candidates", "auto_floor",
           "cached_workload", "candidate_work", "check_work", "command_for", "divisors",
           "end_stage_splits", "enumerate_candidates", "generate_workloads", "plan",
           "run_candidate", "screen_context", "simulate_candidate", "split_key",
           "split_label"]


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
    check_settings(settings)

    system = load_plan_system(settings)
    # the cost-aware schedules (auto, zb-greedy, v-zb) are laid out on the winning shapes, not
    # enumerated (their layout needs each shape's costs)
    names = [n for n in settings.schedules or () if not registry.get(n).needs_costs]
    specs = [registry.get(n) for n in (names or registry.names())]
    table = [ScheduleChoice(sp.name, sp.variable_vpp, sp.default_vpp) for sp in specs]
    space = enumerate_space(settings, table, workload_dir)
    # what --runtime megatron refuses by its sizes alone is ruled out before any screen
    candidates = [c if (why := refused_before_running(settings.runtime, c, settings.state))
                  is None
                  else replace(c, reason=why) for c in space.candidates]
    if settings.memory_limit_gib is not None:
        limit = settings.memory_limit_gib * 2**30
    else:
        limit = system.memory.capacity_bytes
    ctx = screen_context(settings, system)
    floor_autos = auto_floor(candidates, space.layers, ctx.max_actions)
    shape_bound = ShapeBounds(space.workloads, settings.workload, system, settings.gpus)
    # the bounds order the screens and prune them (not under --jitter: p95 is not bounded)
    prunes = settings.prune and settings.jitter == 0
    bounds = {c.index: shape_bound(c) for c in candidates} if prunes else None
    work = check_work(settings, candidates, ctx.max_actions, max_work, floor_autos, bounds)
    search = Search(settings, system, space.workloads, candidates, limit, ctx, work,
                    PLAN_MAX_WORK if max_work is None else max_work, executor, jobs, address,
                    progress, shape_bound)
    search.open(out_dir, resume)
    try:
        search.screen(candidates)
        if limit > 0:
            search.retry_with_recompute()
        search.synthesize_autos(space.auto_layers, floor_autos)
    finally:
        search.close()
    answer = search.rank()
    best = answer.best
    if best.feasible and best.warnings is None:        # resumed: run it once for them
        best.warnings = run_candidate(ctx, best.candidate, "evaluator").warnings
    # what the winner's numbers rest on, as `pipesim run` of its command states it
    answer.warnings[:0] = [w for w in (best.warnings or ()) if w not in answer.warnings]
    if unlimited_memory(settings, system):
        answer.warnings.insert(0, no_memory_limit_warning(
            [o.peak_memory_bytes for o in answer.outcomes
             if o.feasible and o.peak_memory_bytes is not None]))
    elif settings.memory_limit_gib is None and best.feasible and best.peak_memory_bytes \
            and best.peak_memory_bytes > NO_HEADROOM * limit:
        answer.warnings.insert(0, no_headroom_warning(best.peak_memory_bytes, limit))
    return answer


# a winner's peak above this share of the card's whole memory is said (no_headroom_warning):
# a judgment, not a measurement (what the runtime takes beyond pipesim's peak is the job's)
NO_HEADROOM = 0.9


def no_headroom_warning(peak: float, capacity: float) -> str:
    """The default of a plan held against the card's whole memory (no --memory-limit): its
    winner near it leaves the CUDA context, NCCL's buffers and the allocator's reserve no
    room."""
    return (f"no headroom: the winner's peak, {fmt_bytes(peak)}, is {peak / capacity:.0%} of "
            f"the system's {fmt_bytes(capacity)} a GPU, which the plan holds candidates "
            "against without --memory-limit; pipesim's peak leaves out the CUDA context, "
            "NCCL's buffers and the caching allocator's reserve (torchtitan's own runs' "
            "reserved peaks beside pipesim's: docs/validation.md); give --memory-limit GIB with "
            "room for them")


def screen_context(settings: PlanSettings, system=None) -> ScreenContext:
    """What every simulation of the plan's candidates shares; ``system``: the plan's, laid
    over with its calibration (read from ``settings`` when None)."""
    return ScreenContext(settings.workload,
                         load_plan_system(settings) if system is None else system,
                         settings.gpus, settings.p2p,
                         PLAN_MAX_ACTIONS if settings.max_actions is None
                         else settings.max_actions, settings.runtime,
                         settings.recompute_grouping, settings.state)


def unlimited_memory(settings: PlanSettings, system) -> bool:
    """No memory limit by default: the system states no capacity and --memory-limit is not
    given (an explicit --memory-limit 0 asks for none and is not a default)."""
    return settings.memory_limit_gib is None and system.memory.capacity_bytes <= 0


def no_memory_limit_warning(peaks: "list[int] | tuple[int, ...]" = ()) -> str:
    """The warning of :func:`unlimited_memory`; ``peaks``: the ranked candidates' peaks."""
    largest = f" (the ranked candidates' peaks reach {fmt_bytes(max(peaks))})" if peaks else ""
    return ("no memory limit: the system states no memory capacity (memory.capacity_gib) and "
            f"--memory-limit is not given, so no candidate is refused for its peak{largest}; "
            "give --memory-limit GIB, or a --system with the GPU's memory")

