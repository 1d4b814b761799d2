"""Planning: what to run on N GPUs, given costs (:mod:`.plan`, ``pipesim plan``). Sits above the
engine and the sweeps: it scores candidates with the exact evaluator and confirms them with
runs on the sweep executors.

``from simulator.planning import StageCosts, synthesize`` (and ``Synthesis``,
``generate_auto``, ``load_stage_costs``) still works with a ``DeprecationWarning``: schedule
synthesis is :mod:`simulator.schedules.synthesis`; these names are removed in pipesim 0.2.0.
"""

from __future__ import annotations

_MOVED = ("StageCosts", "Synthesis", "generate_auto", "load_stage_costs", "synthesize")


def __getattr__(name: str):
    if name not in _MOVED:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import warnings

    from ..schedules import synthesis

    warnings.warn(f"simulator.planning.{name} moved to simulator.schedules.synthesis.{name}; "
                  "the old name is removed in pipesim 0.2.0", DeprecationWarning, stacklevel=2)
    return getattr(synthesis, name)
