"""Several schedules on one workload and system, and the table that compares them.

The workload is parsed once and every schedule runs on it with the same P, M and system. A
schedule that cannot run with these numbers (an illegal P/M/v, a deadlock) keeps its row, with
the error, and the others still run. ``--vpp`` applies to the schedules that take any number of
chunks (interleaved ones); the others run their own fixed number (ZB-V and DualPipeV: 2).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ..cli.report import fmt_bytes, fmt_pct, fmt_time
from ..errors import ConfigError, PipesimError
from ..schedules import registry


@dataclass
class Run:
    """One schedule's outcome: a result, or the one-line error that stopped it."""

    schedule: str
    result: Any = None
    error: str | None = None


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


def run_schedules(workload: Any, schedules: Sequence[str], system: Any = None, *,
                  pp: int | None = None, microbatches: int | None = None,
                  vpp: int | None = None, layout: str = "auto",
                  trace_layers: bool = False) -> list[Run]:
    """Simulate ``workload`` (a path or a Workload) under each schedule, in order."""
    from ..api import simulate
    from ..system.config import SystemConfig, load_system, system_from_dict
    from ..workload import Workload, load_workload

    wl = workload if isinstance(workload, Workload) else load_workload(workload, layout=layout)
    if isinstance(system, dict):
        sysconf = system_from_dict(system)
    elif isinstance(system, SystemConfig):
        sysconf = system
    else:
        sysconf = load_system(system)
    runs = []
    for name in schedules:
        spec = registry.get(name)
        v = vpp if spec.variable_vpp else None
        try:
            result = simulate(wl, spec.name, sysconf, pp=pp, microbatches=microbatches, vpp=v,
                              trace_layers=trace_layers)
        except PipesimError as err:
            runs.append(Run(spec.name, error=str(err)))
            continue
        runs.append(Run(spec.name, result=result))
    return runs


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
            out.append({"schedule": run.schedule, "pp": None, "vpp": None, "microbatches": None,
                        "makespan_ns": None, "bubble_ratio": None,
                        "theoretical_bubble_ratio": None, "theoretical_formula": None,
                        "peak_inflight_microbatches": None, "p2p_bytes": None,
                        "speedup": None, "baseline": None, "error": run.error, "warnings": []})
            continue
        s = run.result.summary
        out.append({"schedule": run.schedule, "pp": s["pp"], "vpp": s["vpp"],
                    "microbatches": s["microbatches"], "makespan_ns": s["makespan_ns"],
                    "bubble_ratio": s["bubble_ratio"],
                    "theoretical_bubble_ratio": s.get("theoretical_bubble_ratio"),
                    "theoretical_formula": s.get("theoretical_formula"),
                    "peak_inflight_microbatches": s["peak_inflight_microbatches"],
                    "p2p_bytes": s["p2p_bytes"], "speedup": speedup(run, base),
                    "baseline": base.schedule, "error": None,
                    "warnings": [w.to_dict() for w in run.result.warnings]})
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
    if not any(c[-1] for c in cells):
        headers[-1] = ""
    widths = [max([len(h)] + [len(c[i]) for c in cells]) for i, h in enumerate(headers)]

    def line(row: list[str]) -> str:
        parts = [row[0].ljust(widths[0])]
        parts += [c.rjust(w) for c, w in zip(row[1:-1], widths[1:-1])]
        return ("  ".join(parts) + ("  " + row[-1] if row[-1] else "")).rstrip()

    out = [line(headers), line(["-" * w for w in widths[:-1]] + [""])]
    out += [line(c) for c in cells]
    return "\n".join(out)
