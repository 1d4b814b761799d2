"""Planning: what to run, given costs. Sits above the engine (it uses the exact evaluator, not
the SimPy engine, to score thousands of candidates).

Importing this package registers the cost-aware schedule ``auto`` with the schedule registry.
"""

from ..schedules import registry as _registry
from .costs import StageCosts, load_stage_costs
from .synthesis import Synthesis, generate_auto, synthesize

_registry.register_cost_aware(
    "auto", generate_auto,
    summary="synthesized for given per-stage costs (--stage-costs) under a cap on in-flight "
            "activations (--max-in-flight, default P); --vpp 2 uses the V placement",
    default_vpp=1, variable_vpp=True)

__all__ = ["StageCosts", "Synthesis", "generate_auto", "load_stage_costs", "synthesize"]
