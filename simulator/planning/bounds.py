"""Lower bounds on a candidate's makespan, from its per-stage costs: a candidate whose bound is
above the best found cannot win and is not run."""

from __future__ import annotations

from ..engine.stage_costs import run_stage_costs
from ..errors import PipesimError
from ..preflight import header_for_run
from ..schedules import registry
from ..workload.partition import partition
from ..workload.stage_layers import PipelineSplit, with_split
from .candidates import Candidate


def stage_costs_of(wl, system, gpus: int, pp: int, vpp: int, split: tuple = ()):
    """The per-chunk F / I / W costs of ``wl`` run at ``pp`` x ``vpp`` with ``split``, as the
    engine times them."""
    run_wl, _ = header_for_run(wl, pp, gpus=gpus)
    run_wl = with_split(run_wl, pp, vpp, PipelineSplit(*split))
    return run_stage_costs(partition(run_wl, pp * vpp), run_wl.header, system, pp)


class ShapeBounds:
    """The bound of each candidate's shape, the per-stage costs computed once per (workload, pp,
    vpp, split)."""

    def __init__(self, workloads: dict, workload: str, system, gpus: int) -> None:
        self.workloads, self.workload, self.system, self.gpus = workloads, workload, system, gpus
        self.stage_costs: dict[tuple, object] = {}

    def __call__(self, c: Candidate) -> float | None:
        """A makespan no schedule of this shape beats (ns): every rank runs its share of the
        compute, at best an equal share, and no rank starts before the first microbatch's
        forward reaches its first chunk (the ranks' first chunks are distinct, so their start
        delays add up to at least those of chunks 0 .. pp-1), except where the iterations
        overlap (``c.runs`` > 1: the steady state hides the fill). DP collectives, transfers
        and the end of the pipeline are left out, so it stays a bound."""
        spec = registry.spec_of(c.schedule)
        if c.reason is not None or (spec is not None and not spec.lower_bound):
            return None     # the spec says the bound does not hold (DualPipe(V))
        key = (c.workload, c.pp, c.vpp, c.split)
        sc = self.stage_costs.get(key)
        if sc is None:
            try:
                sc = self.stage_costs[key] = stage_costs_of(
                    self.workloads[c.workload or self.workload], self.system,
                    self.gpus, c.pp, c.vpp, c.split)
            except PipesimError:
                sc = self.stage_costs[key] = False
        if sc is False:
            return None
        total = sum(sc.f) + sum(sc.i) + sum(sc.w)
        prefix, starts = 0.0, 0.0
        for k in range(c.pp if c.runs == 1 else 0):
            starts += prefix
            prefix += sc.f[k]
        return (c.microbatches * total + starts) / c.pp
