"""What a plan costs before it runs, in engine actions: per candidate (:func:`candidate_work`),
for ``auto`` (:func:`auto_floor`), and in all against ``--max-work`` (:func:`check_work`)."""

from __future__ import annotations

from ..errors import ConfigError, PipesimError
from ..schedules import registry
from ..schedules.synthesis.search import EVALUATIONS_PER_ACTION, synthesis_work
from .candidates import AUTO_ITERATIONS, AUTO_SHAPES, Candidate, auto_candidates
from .settings import PlanSettings

PLAN_MAX_ACTIONS = 50_000  # default per-candidate size (--max-actions): screens stay ~1 s or less
# default budget of a whole plan (--max-work), in actions: every candidate's screen and the
# confirming runs; a screen costs ~15 us per action on a loaded 2-core machine, so ~10 s
PLAN_MAX_WORK = 700_000


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
