"""The outcome of one simulation: the inputs it ran, the records, and the summary."""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from .diagnostics import RunWarning
from .engine.options import EngineOptions
from .engine.runtime import RunRecords
from .metrics.summary import summarize
from .metrics.types import RunSummary
from .schedules.registry import ScheduleSpec
from .schedules.schedule import Schedule
from .system.config import SystemConfig
from .workload.model import Partition, Workload


@dataclass
class SimulationResult:
    """One run: its inputs, records and notes; the summary is computed when first asked."""

    workload: Workload
    schedule: Schedule
    spec: ScheduleSpec | None
    system: SystemConfig
    partition: Partition
    records: RunRecords
    iterations: int
    phase_labels: list[list[str]]
    notes: list[str] = field(default_factory=list)
    options: EngineOptions | None = None
    warnings: list[RunWarning] = field(default_factory=list)
    engine_used: str = "simpy"   # the engine that ran: simpy, or evaluator where it applies

    @cached_property
    def summary(self) -> RunSummary:
        return summarize(self)

    @property
    def makespan_ns(self) -> float:
        return self.summary.makespan_ns

    @property
    def bubble_ratio(self) -> float:
        return self.summary.bubble_ratio

    def to_dict(self) -> dict[str, Any]:
        """The JSON summary (``pipesim run --json``)."""
        return self.summary.to_dict()


@dataclass
class ScheduleRun:
    """One schedule's outcome in a comparison: a result, or the one-line error that stopped it."""

    schedule: str
    result: SimulationResult | None = None
    error: str | None = None
