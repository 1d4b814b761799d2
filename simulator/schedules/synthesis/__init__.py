"""Schedule synthesis: the search behind the schedule ``auto`` (:mod:`.search`), the exact
evaluator it scores orders with (:mod:`.evaluate`), the lower bound that proves a result optimal
(:mod:`.bounds`), an optional MILP for small problems (:mod:`.exact`) and ``costs.yaml``
(:mod:`.costs`). ``auto`` itself (:mod:`.auto`) registers like a library schedule and imports
the search the first time it builds one.

The names below load on first use (PEP 562): the registry imports :mod:`.auto` for every run,
and a run that does not ask for ``auto`` loads none of the search (start-up).
"""

from __future__ import annotations

__all__ = ["StageCosts", "Synthesis", "generate_auto", "load_stage_costs", "synthesize"]
_WHERE = {"StageCosts": "costs", "load_stage_costs": "costs", "Synthesis": "search",
          "generate_auto": "search", "synthesize": "search"}


def __getattr__(name: str):
    where = _WHERE.get(name)
    if where is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    from importlib import import_module

    return getattr(import_module(f".{where}", __name__), name)
