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
from ..units import table as text_table


def parse_schedules(text: str, option: str = "--schedules") -> list[str]:
    """``a,b,c`` -> registered names, in the given order; unknown or repeated names are errors."""
    out: list[str] = []
    for name, vpp in parse_schedule_entries(text, option, counts=False):
        if name in out:
            raise ConfigError(f"{option}: {name!r} is given twice")
        out.append(name)
    return out


def parse_schedule_entries(text: str, option: str = "--schedules", counts: bool = True
                           ) -> list[tuple[str, int | None]]:
    """``1f1b,interleaved-1f1b:2,zb-h1`` -> [(registered name, its own virtual-stage count or
    None)], in the given order; an unknown name, a bad count or an entry given twice is an
    error (one schedule at two counts is two entries)."""
    names = [n.strip() for n in text.split(",")]
    if not text.strip() or any(not n for n in names):
        raise ConfigError(f"{option}: expected a comma-separated list of schedule names, "
                          f"found {text!r}")
    out: list[tuple[str, int | None]] = []
    for entry in names:
        n, colon, count = entry.partition(":") if counts else (entry, "", "")
        n = n.strip()
        vpp = None
        if colon:
            count = count.strip()
            if not (count.isascii() and count.isdigit()) or int(count) < 1:
                raise ConfigError(f"{option}: {entry!r}: expected NAME or NAME:V with V a "
                                  f"positive number of virtual stages per rank")
            vpp = int(count)
        try:
            spec = registry.get(n)
        except ConfigError:
            raise ConfigError(f"{option}: unknown schedule {n!r}; expected one of: "
                              + ", ".join(sorted(registry.names()))) from None
        if (spec.name, vpp) in out:
            raise ConfigError(f"{option}: {label(spec.name, vpp)!r} is given twice")
        out.append((spec.name, vpp))
    return out


def label(name: str, vpp: int | None) -> str:
    """How an entry of ``--schedules`` is written: ``name`` or ``name:v``."""
    return name if vpp is None else f"{name}:{vpp}"


def run_label(run: Run) -> str:
    """A run's name in the table and the speed-up header: ``name:v`` when its own count set
    its virtual stages."""
    if run.vpp_set_by == "--schedules" and run.result is not None:
        return label(run.schedule, run.result.schedule.vpp)
    return run.schedule


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
    vpp_set_by: str = field(metadata={"help": "what chose vpp: --schedules (NAME:V), --vpp (a "
                                              "schedule that interleaves), or default"})
    peak_inflight_microbatches: int | None = field(metadata={"help": "most held by a rank"})
    peak_memory_bytes: int | None = field(metadata={"help": "the largest rank's peak memory"})
    peak_memory_rank: int | None = field(metadata={"help": "the rank that holds it"})
    p2p_bytes: int | None = field(metadata={"help": "point-to-point bytes per iteration"})
    speedup: float | None = field(metadata={"help": "baseline's time over this one's"})
    baseline: str | None = field(metadata={"help": "the first schedule that ran (NAME:V when "
                                                  "its own count set its vpp)"})
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
            out.append({"schema_version": SCHEMA_VERSION, "schedule": run.schedule, "pp": None,
                        "vpp": None, "vpp_set_by": run.vpp_set_by, "microbatches": None,
                        "makespan_ns": None, "bubble_ratio": None,
                        "theoretical_bubble_ratio": None, "theoretical_formula": None,
                        "peak_inflight_microbatches": None, "peak_memory_bytes": None,
                        "peak_memory_rank": None, "p2p_bytes": None,
                        "speedup": None, "baseline": None, "error": run.error, "warnings": []})
            continue
        s = run.result.summary
        top = max(s.ranks, key=lambda r: (r.peak_memory_bytes, -r.rank)) if s.ranks else None
        out.append({"schema_version": SCHEMA_VERSION, "schedule": run.schedule, "pp": s.pp,
                    "vpp": s.vpp, "vpp_set_by": run.vpp_set_by,
                    "microbatches": s.microbatches, "makespan_ns": s.makespan_ns,
                    "bubble_ratio": s.bubble_ratio,
                    "theoretical_bubble_ratio": s.theoretical_bubble_ratio,
                    "theoretical_formula": s.theoretical_formula,
                    "peak_inflight_microbatches": s.peak_inflight_microbatches,
                    "peak_memory_bytes": s.peak_memory_bytes,
                    "peak_memory_rank": None if top is None else top.rank,
                    "p2p_bytes": s.p2p_bytes, "speedup": speedup(run, base),
                    "baseline": run_label(base), "error": None,
                    "warnings": [w.to_dict() for w in s.warnings]})
    return out


def vpp_note(runs: Sequence[Run], vpp: int | None) -> str:
    """What a common ``--vpp`` did: the schedules it set, and those that kept their own count
    (ZB-H1 among them: ``zb-h1:V`` is how its interleaved form is asked for)."""
    if vpp is None:
        return ""
    reached = [r.schedule for r in runs if r.vpp_set_by == "--vpp"]
    kept = [r for r in runs if r.vpp_set_by == "default"]
    if not kept:
        return f"note: --vpp {vpp} applies to {', '.join(reached)}"
    own = ", ".join(r.schedule if r.result is None else f"{r.schedule} (v={r.result.schedule.vpp})"
                    for r in kept)
    hint = "".join(f"; {r.schedule}:{vpp} asks for its interleaved form" for r in kept
                   if registry.get(r.schedule).variable_vpp)
    return (f"note: --vpp {vpp} applies to {', '.join(reached) or 'none of them'}; "
            f"{own} run their own virtual stages{hint}")


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
           "peak memory", "p2p traffic", "speed-up", "note"]


def render_table(table: Sequence[dict[str, Any]]) -> str:
    """Aligned text table (:func:`simulator.units.table`): numbers right-aligned, the note (an
    error) last."""
    base = next((r["baseline"] for r in table if r["baseline"]), None)
    headers = list(HEADERS)
    if base:
        headers[8] = f"speed-up vs {base}"
    cells = []
    for r in table:
        if r["error"] is not None:
            cells.append([r["schedule"]] + ["-"] * 8 + [f"error: {r['error']}"])
            continue
        name = label(r["schedule"], r["vpp"]) if r["vpp_set_by"] == "--schedules" \
            else r["schedule"]
        cells.append([
            name, str(r["vpp"]), fmt_time(r["makespan_ns"]), fmt_pct(r["bubble_ratio"]),
            fmt_pct(r["theoretical_bubble_ratio"]), str(r["peak_inflight_microbatches"]),
            fmt_bytes(r["peak_memory_bytes"]), fmt_bytes(r["p2p_bytes"]),
            "n/a" if r["speedup"] is None else f"{r['speedup']:.2f}x", ""])
    if not any(c[-1] for c in cells):
        headers, cells = headers[:-1], [c[:-1] for c in cells]
    return text_table(headers, cells, left=(0, 9))
