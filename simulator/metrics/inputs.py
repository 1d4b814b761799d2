"""What a run's summary reads besides its records: the run's inputs, declared on this floor so
that the metrics never read the result (a floor above, which calls them)."""

from __future__ import annotations

from typing import NamedTuple, Sequence

from ..diagnostics import RunWarning
from ..schedules.registration import ScheduleSpec
from ..schedules.schedule import Schedule
from ..system.config import SystemConfig
from ..workload.model import Partition, Workload


# a NamedTuple, not a dataclass: start-up (simulator/__init__.py)
class RunInputs(NamedTuple):
    """A run's inputs, as :func:`~.summary.summarize` reads them."""

    workload: Workload
    schedule: Schedule
    spec: ScheduleSpec | None        # None: a schedule given as data, not by name
    system: SystemConfig
    partition: Partition
    iterations: int
    phase_labels: Sequence[Sequence[str]]   # per rank, the phase of each action
    p2p_mode: str                    # the point-to-point semantics that ran
    engine_used: str                 # simpy, or evaluator where it applies
    warnings: tuple[RunWarning, ...] = ()
    notes: tuple[str, ...] = ()
    # the iterations overlap (no barrier before the optimizer's step: post-validation)
    iterations_overlap: bool = False
