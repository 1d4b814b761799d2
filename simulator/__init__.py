"""pipesim: a discrete-event simulator of pipeline-parallel training.

``simulate(workload, schedule=..., system=..., **overrides)`` runs one simulation and returns a
:class:`SimulationResult` whose ``to_dict()`` is the JSON summary.
"""

from .api import simulate
from .errors import (ConfigError, DeadlockError, OutOfMemoryError, PipesimError, ScheduleError,
                     WorkloadError)
from .result import SimulationResult

__version__ = "0.1.0"

__all__ = ["simulate", "SimulationResult", "PipesimError", "WorkloadError", "ConfigError",
           "ScheduleError", "DeadlockError", "OutOfMemoryError", "__version__"]
