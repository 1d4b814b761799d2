"""The command line (``pipesim``).

Any command may name the planning layer's cost-aware schedule (``auto``): the schedule registry
gets a loader for it here, which it calls only when a name is not in its library, so a run that
never asks for ``auto`` does not import the planning layer.
"""

from ..schedules import registry as _registry


def _load_planning() -> None:
    """Register ``auto``: importing the planning layer does."""
    # on first use only (start-up): a run that never asks for auto does without planning
    from .. import planning  # noqa: F401


_registry.add_cost_aware_loader(_load_planning)
