"""``auto``: a schedule synthesized for given per-stage costs under a cap on in-flight
activations (the search is :mod:`.search`). It registers like a library schedule; it lives
beside the search, not in ``library/``, because the search starts from the library's schedules
(a library module that needed the search would import it in a circle). Its options are the search's;
an option left out takes the search's default."""

from __future__ import annotations

from ..registration import register


@register("auto", needs_costs=True, default_vpp=1, variable_vpp=True,
          summary="synthesized for given per-stage costs (--stage-costs) under a cap on "
                  "in-flight activations (--max-in-flight, default P); --vpp 2 uses the V "
                  "placement")
def generate(pp: int, microbatches: int, vpp: int = 1, max_in_flight: int | None = None,
             stage_costs: object = None, seed: int = 0, iterations: int | None = None,
             max_evaluations: int | None = None):
    # here, not at the top: the search (dataclasses, heapq, random) is no part of a run's
    # start-up unless the run asks for auto
    from .search import generate_auto

    extra = {} if iterations is None else {"iterations": iterations}
    return generate_auto(pp, microbatches, vpp, max_in_flight=max_in_flight,
                         stage_costs=stage_costs, seed=seed, max_evaluations=max_evaluations,
                         **extra)
