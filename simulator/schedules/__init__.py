"""Pipeline schedules as data: generators (``library/``), registry, validator, comm pass, CSV."""

from .action import Action, Kind, Overlap
from .registry import ScheduleSpec, generate, get, names, register
from .schedule import Schedule, loop_placement, v_placement

__all__ = ["Action", "Kind", "Overlap", "Schedule", "ScheduleSpec", "generate", "get", "names",
           "register", "loop_placement", "v_placement"]
