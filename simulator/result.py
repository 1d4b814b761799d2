"""The outcome of one simulation: the inputs it ran, the records, and the summary."""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from .diagnostics import RunWarning
from .engine.options import EngineOptions
from .engine.runtime import RunRecords
from .schedules.registry import ScheduleSpec
from .schedules.schedule import Schedule
from .system.config import SystemConfig
from .workload.model import Partition, Workload


@dataclass
class SimulationResult:
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

    @cached_property
    def summary(self) -> dict[str, Any]:
        from .metrics.summary import summarize

        return summarize(self)

    @property
    def makespan_ns(self) -> float:
        return self.summary["makespan_ns"]

    @property
    def bubble_ratio(self) -> float:
        return self.summary["bubble_ratio"]

    def to_dict(self) -> dict[str, Any]:
        """The JSON summary (``pipesim run --json``)."""
        out = _json_numbers(dict(self.summary))
        out["warnings"] = [w.to_dict() for w in self.warnings]
        out["notes"] = list(self.notes) + list(self.workload.warnings)
        return out


@dataclass
class ScheduleRun:
    """One schedule's outcome in a comparison: a result, or the one-line error that stopped it."""

    schedule: str
    result: SimulationResult | None = None
    error: str | None = None


def _json_numbers(obj: Any, key: str = "") -> Any:
    """Bytes as integers (a byte count has no fraction), other whole floats as integers."""
    if isinstance(obj, dict):
        return {k: _json_numbers(v, k) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_json_numbers(v, key) for v in obj]
    if isinstance(obj, float) and obj == obj and obj not in (float("inf"), float("-inf")):
        if "bytes" in key:
            return int(round(obj))
        if obj.is_integer() and key.endswith("_ns"):
            return int(obj)
    return obj
