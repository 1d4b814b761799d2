"""What a plan costs before it runs, in engine actions: per candidate (:func:`candidate_work`),
for ``auto`` (:func:`auto_floor`), and in all against ``--max-work`` (:func:`check_work`)."""

from __future__ import annotations

from typing import NamedTuple

from ..errors import ConfigError, PipesimError
from ..schedules import registry
from ..schedules.synthesis.search import EVALUATIONS_PER_ACTION, synthesis_work
from .candidates import (AUTO, AUTO_ITERATIONS, AUTO_SHAPES, Candidate,
                         auto_candidates)
from .settings import PlanSettings

ROUND = 16                 # candidates screened between two prunings by lower bound

PLAN_MAX_ACTIONS = 50_000  # default per-candidate size (--max-actions): screens stay ~1 s or less
# default budget of a whole plan (--max-work), in actions: the screens it is sure to run and
# the confirming runs, ~8 s at US_PER_ACTION
PLAN_MAX_WORK = 700_000
# CPU per action of a whole plan (screens, confirming runs, start-up), measured on the 70B plan
# of docs/planning.md on a loaded 2-core machine (benchmarks/results/2026-12-01-plan-70b.md)
US_PER_ACTION = 12.0


def candidate_work(c: Candidate, max_actions: int | None) -> int:
    """What running ``c`` once costs, in engine actions, from its sizes alone: its actions, or
    what building its schedule costs when that grows faster (as ``run``'s budget counts them),
    plus for ``auto`` its synthesis (:func:`~simulator.schedules.synthesis.search.synthesis_work`, ~40 evaluations per
    action) (for ``zb-greedy`` and ``v-zb`` their layout, in their registration's work); 0 when nothing runs (its sizes rule it out, or it is above the per-candidate
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
    work *= c.runs     # the iterations a screen runs (two where they overlap)
    if c.schedule == AUTO:   # its synthesis, counted in engine actions
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


class WorkEstimate(NamedTuple):
    """What a plan is sure to cost before it runs, and which candidates that counts."""

    total: int               # actions: the screens counted, auto's floor, the confirming runs
    counted: frozenset       # the candidates' indexes whose screens are in ``total``
    most: int                # actions if no lower bound prunes a candidate


def check_work(settings: PlanSettings, candidates: list[Candidate], max_actions: int | None,
               max_work: int | None, autos: int = 0,
               bounds: dict[int, float | None] | None = None) -> WorkEstimate:
    """Refuse a plan whose sure cost is above ``max_work`` actions (default
    :data:`PLAN_MAX_WORK`, 0 = none), before any runs. Sure: the first round of screens (the
    :data:`ROUND` lowest lower bounds, as the search orders them: nothing is pruned before a
    best is found; those ruled out by their sizes cost nothing), every candidate no bound can
    prune (``bounds`` None for it), ``autos``
    (:func:`auto_floor`) and the ``confirm`` largest run again for ``iterations`` iterations.
    Without ``bounds`` (no pruning: ``--no-prune``, ``--jitter``) every screen is sure. The
    search counts each later round against the same limit as it comes (:class:`~.search.Search`)."""
    work = {c.index: candidate_work(c, max_actions) for c in candidates}
    each = sorted(work.values(), reverse=True)
    most = sum(each)
    if bounds is None:
        counted = frozenset(work)
    else:
        ran = [c for c in candidates if work[c.index]]
        bounded = sorted((c for c in ran if bounds[c.index] is not None),
                         key=lambda c: (bounds[c.index], c.index))
        counted = frozenset([c.index for c in bounded[:ROUND]]
                            + [c.index for c in ran if bounds[c.index] is None])
    screens = sum(work[i] for i in counted)
    # the confirming runs are of screened candidates: the largest of those counted
    confirms = sum(sorted((work[i] for i in counted), reverse=True)[:settings.confirm]) \
        * settings.iterations
    total = screens + autos + confirms
    bound = PLAN_MAX_WORK if max_work is None else max_work
    if bound > 0 and total > bound:
        run = sum(1 for i in counted if work[i])
        raise ConfigError(
            f"--max-work: plan of {settings.workload} on {settings.gpus} GPUs screens "
            + (f"at least {run} candidate(s) of {screens:,} actions (up to {most:,} if no lower "
               f"bound prunes)" if most > screens else
               f"{run} candidate(s) of {screens:,} actions in all")
            + f", synthesizes auto on its {AUTO_SHAPES} cheapest pipeline degree(s) (at "
            f"least {autos:,}) and confirms the best {settings.confirm} x "
            f"{settings.iterations} iteration(s) (up to {confirms:,}), {total:,} actions, above "
            f"the limit of {bound:,} (about {seconds_of(bound)} s); pass --max-work {total} (or "
            "0 for no limit), or a lower --max-actions to list the largest candidates "
            "infeasible")
    return WorkEstimate(total, counted, most + autos + sum(each[:settings.confirm])
                        * settings.iterations)


def seconds_of(actions: int) -> str:
    """The CPU time ``actions`` take at :data:`US_PER_ACTION`: whole seconds, one digit below
    one."""
    t = actions * US_PER_ACTION / 1e6
    return f"{t:.1g}" if t < 1 else f"{round(t)}"
