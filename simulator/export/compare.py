"""The table that compares several schedules' runs (:func:`simulator.api.compare` runs them).

A schedule that could not run with the given numbers keeps its row, with the error.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from ..diagnostics import RunWarning
from ..errors import ConfigError
from ..metrics.types import SCHEMA_VERSION
from ..result import ScheduleRun as Run
from ..schedules import registry
from ..schema import schema_of
from ..units import fmt_bytes, fmt_pct, fmt_time


def parse_schedules(text: str, option: str = "--schedules") -> list[str]:
    """``a,b,c`` -> registered names, in the given order; unknown or repeated names are errors."""
    names = [n.strip() for n in text.split(",")]
    if not text.strip() or any(not n for n in names):
        raise ConfigError(f"{option}: expected a comma-separated list of schedule names, "
                          f"found {text!r}")
    out: list[str] = []
    for n in names:
        try:
            spec = registry.get(n)
        except ConfigError:
            raise ConfigError(f"{option}: unknown schedule {n!r}; expected one of: "
                              + ", ".join(sorted(registry.names()))) from None
        if spec.name in out:
            raise ConfigError(f"{option}: {spec.name!r} is given twice")
        out.append(spec.name)
    return out


@dataclass(frozen=True)
class CompareRow:
    """One schedule's row of ``pipesim compare --json``; numbers are null where it could not run,
    and ``error`` says why."""

    schema_version: str = field(metadata={"help": "version of this JSON's shape"})
    schedule: str = field(metadata={"help": "registered schedule"})
    pp: int | None = field(metadata={"help": "pipeline ranks"})
    vpp: int | None = field(metadata={"help": "chunks per rank"})
    microbatches: int | None = field(metadata={"help": "microbatches per iteration"})
    makespan_ns: float | None = field(metadata={"help": "iteration time"})
    bubble_ratio: float | None = field(metadata={"help": "mean idle / iteration time"})
    theoretical_bubble_ratio: float | None = field(metadata={"help": "closed form"})
    theoretical_formula: str | None = field(metadata={"help": "the closed form, written out"})
    peak_inflight_microbatches: int | None = field(metadata={"help": "most held by a rank"})
    p2p_bytes: int | None = field(metadata={"help": "point-to-point bytes per iteration"})
    speedup: float | None = field(metadata={"help": "baseline's time over this one's"})
    baseline: str | None = field(metadata={"help": "the first schedule that ran"})
    error: str | None = field(metadata={"help": "why it did not run (null if it did)"})
    warnings: tuple[RunWarning, ...] = field(metadata={"help": "the run's warnings"})


def compare_schema() -> dict[str, Any]:
    return schema_of(CompareRow, "pipesim compare --json", array=True)


def baseline(runs: Sequence[Run]) -> Run | None:
    """The run speed-ups are measured against: the first that ran."""
    return next((r for r in runs if r.result is not None), None)


def speedup(run: Run, base: Run | None) -> float | None:
    if run.result is None or base is None or not run.result.makespan_ns:
        return None
    return base.result.makespan_ns / run.result.makespan_ns


def rows(runs: Sequence[Run]) -> list[dict[str, Any]]:
    """One JSON-ready dict per schedule (``pipesim compare --json``); numbers are None for a
    schedule that did not run, whose ``error`` says why."""
    base = baseline(runs)
    out = []
    for run in runs:
        if run.result is None:
            out.append({"schema_version": SCHEMA_VERSION, "schedule": run.schedule, "pp": None, "vpp": None, "microbatches": None,
                        "makespan_ns": None, "bubble_ratio": None,
                        "theoretical_bubble_ratio": None, "theoretical_formula": None,
                        "peak_inflight_microbatches": None, "p2p_bytes": None,
                        "speedup": None, "baseline": None, "error": run.error, "warnings": []})
            continue
        s = run.result.summary
        out.append({"schema_version": SCHEMA_VERSION, "schedule": run.schedule, "pp": s.pp,
                    "vpp": s.vpp,
                    "microbatches": s.microbatches, "makespan_ns": s.makespan_ns,
                    "bubble_ratio": s.bubble_ratio,
                    "theoretical_bubble_ratio": s.theoretical_bubble_ratio,
                    "theoretical_formula": s.theoretical_formula,
                    "peak_inflight_microbatches": s.peak_inflight_microbatches,
                    "p2p_bytes": s.p2p_bytes, "speedup": speedup(run, base),
                    "baseline": base.schedule, "error": None,
                    "warnings": [w.to_dict() for w in s.warnings]})
    return out


def render_warnings(table: Sequence[dict[str, Any]]) -> str:
    """Each distinct warning once, with the schedules it applies to."""
    seen: dict[str, list[str]] = {}
    fixes: dict[str, str] = {}
    for r in table:
        for w in r.get("warnings") or []:
            seen.setdefault(w["message"], []).append(r["schedule"])
            fixes[w["message"]] = w.get("option") or ""
    if not seen:
        return ""
    lines = [f"warnings ({len(seen)}): numbers above rest on these assumptions"]
    for message, who in seen.items():
        scope = "" if len(who) == len(table) else f" ({', '.join(who)})"
        fix = f" [set {fixes[message]}]" if fixes[message] else ""
        lines.append(f"  ! {message}{scope}{fix}")
    return "\n".join(lines)


HEADERS = ["schedule", "v", "iteration time", "bubble", "closed form", "peak in flight",
           "p2p traffic", "speed-up", "note"]


def render_table(table: Sequence[dict[str, Any]]) -> str:
    """Aligned text table: numbers right-aligned, the note (an error) last and unpadded."""
    base = next((r["baseline"] for r in table if r["baseline"]), None)
    headers = list(HEADERS)
    if base:
        headers[7] = f"speed-up vs {base}"
    cells = []
    for r in table:
        if r["error"] is not None:
            cells.append([r["schedule"]] + ["-"] * 7 + [f"error: {r['error']}"])
            continue
        cells.append([
            r["schedule"], str(r["vpp"]), fmt_time(r["makespan_ns"]), fmt_pct(r["bubble_ratio"]),
            fmt_pct(r["theoretical_bubble_ratio"]), str(r["peak_inflight_microbatches"]),
            fmt_bytes(r["p2p_bytes"]),
            "n/a" if r["speedup"] is None else f"{r['speedup']:.2f}x", ""])
    notes = any(c[-1] for c in cells)
    return _rich_text(headers if notes else headers[:-1],
                      cells if notes else [c[:-1] for c in cells])


def _rich_text(headers: list[str], cells: list[list[str]]) -> str:
    """A rich table as plain text: the schedule left, numbers right, a note (an error) last and
    never wrapped; no colour, no box, so it reads the same in a terminal, a file or a test."""
    # deferred (start-up): only this output needs rich
    from rich import box
    from rich.console import Console
    from rich.table import Table

    t = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False, padding=(0, 1, 0, 0))
    for i, h in enumerate(headers):
        t.add_column(h, justify="left" if i == 0 or h == "note" else "right", no_wrap=True)
    for c in cells:
        t.add_row(*c)
    console = Console(width=10_000, record=True, color_system=None, file=_Null())
    console.print(t)
    return "\n".join(line.rstrip() for line in console.export_text().splitlines()
                     if line.strip())


class _Null:
    def write(self, _text: str) -> int:
        return 0

    def flush(self) -> None:
        pass
