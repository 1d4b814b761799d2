"""The outcome of one simulation: the inputs it ran, the records, and the summary."""

from __future__ import annotations

from typing import Any, NamedTuple

from .diagnostics import RunWarning
from .engine.options import EngineOptions
from .engine.runtime import RunRecords
from .metrics.inputs import RunInputs
from .metrics.summary import summarize
from .metrics.types import RunSummary
from .schedules.registry import ScheduleSpec
from .schedules.schedule import Schedule
from .system.config import SystemConfig
from .workload.model import Partition, Workload


# a plain class, not a dataclass: start-up (simulator/__init__.py)
class SimulationResult:
    """One run: its inputs, records and notes; the summary is computed when first asked."""

    __slots__ = ("workload", "schedule", "spec", "system", "partition", "records", "iterations",
                 "phase_labels", "notes", "options", "warnings", "engine_used", "_summary")

    def __init__(self, workload: Workload, schedule: Schedule, spec: ScheduleSpec | None,
                 system: SystemConfig, partition: Partition, records: RunRecords,
                 iterations: int, phase_labels: list[list[str]], notes: list[str] | None = None,
                 options: EngineOptions | None = None, warnings: list[RunWarning] | None = None,
                 engine_used: str = "simpy") -> None:
        self.workload = workload
        self.schedule = schedule
        self.spec = spec
        self.system = system
        self.partition = partition
        self.records = records
        self.iterations = iterations
        self.phase_labels = phase_labels
        self.notes = [] if notes is None else notes
        self.options = options
        self.warnings = [] if warnings is None else warnings
        self.engine_used = engine_used   # the engine that ran: simpy, or evaluator where it applies
        self._summary: RunSummary | None = None

    @property
    def inputs(self) -> RunInputs:
        """What the summary reads of this run besides its records."""
        return RunInputs(self.workload, self.schedule, self.spec, self.system, self.partition,
                         self.iterations, self.phase_labels,
                         self.options.p2p if self.options else "async", self.engine_used,
                         tuple(self.warnings), tuple(self.notes),
                         bool(self.options and self.options.ddp
                              and self.options.ddp.post_validation))

    @property
    def summary(self) -> RunSummary:
        """The run's summary, computed on first use."""
        if self._summary is None:
            self._summary = summarize(self.records, self.inputs)
        return self._summary

    @property
    def makespan_ns(self) -> float:
        return self.summary.makespan_ns

    @property
    def bubble_ratio(self) -> float:
        return self.summary.bubble_ratio

    def to_dict(self) -> dict[str, Any]:
        """The JSON summary (``pipesim run --json``)."""
        return self.summary.to_dict()


# a NamedTuple, not a dataclass: start-up (simulator/__init__.py)
class ScheduleRun(NamedTuple):
    """One schedule's outcome in a comparison: a result, or the one-line error that stopped it."""

    schedule: str
    result: SimulationResult | None = None
    error: str | None = None
    # what chose its virtual stages: "--schedules" (name:v), "--vpp", or "default"
    vpp_set_by: str = "default"
