"""Schedule synthesis: the search behind the schedule ``auto`` (:mod:`.search`), the exact
evaluator it scores orders with (:mod:`.evaluate`), the lower bound that proves a result optimal
(:mod:`.bounds`), an optional MILP for small problems (:mod:`.exact`) and ``costs.yaml``
(:mod:`.costs`). ``auto`` itself is a library schedule (``library/auto.py``), which imports
this package the first time it builds one.

The search starts from the library's hand-made schedules, read from the registration table: the
library is imported here so that they are all registered whichever module a caller imports
first.
"""

from .. import library  # noqa: F401  (registers the hand-made schedules the search starts from)
from .costs import StageCosts, load_stage_costs
from .search import Synthesis, generate_auto, synthesize

__all__ = ["StageCosts", "Synthesis", "generate_auto", "load_stage_costs", "synthesize"]
