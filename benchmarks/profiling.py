"""cProfile summaries of one ``simulate()``: how the time splits into the pipeline's phases
(load, schedule, validate, costs, comm pass, compile, SimPy run, summary) and which functions
burn it (own time). cProfile inflates call-heavy code about 2x; read shares, not seconds."""

from __future__ import annotations

import cProfile
import os
import pstats
from dataclasses import dataclass
from typing import Any, Callable

# (label, path suffix of the file, function name); a phase missing from the profile shows "-"
PHASES: list[tuple[str, str, str]] = [
    ("load + parse workload", "simulator/api.py", "_load"),
    ("generate schedule", "simulator/api.py", "resolve_schedule"),
    ("validate schedule", "simulator/schedules/validate.py", "validate"),
    ("Runtime() setup (all)", "simulator/engine/runtime.py", "__init__"),
    ("  cost tables", "simulator/engine/costs.py", "partition_costs"),
    ("  comm pass", "simulator/schedules/comm_pass.py", "add_communication"),
    ("  compile op lists", "simulator/engine/runtime.py", "_compile"),
    ("SimPy run", "simulator/engine/runtime.py", "run"),
    ("summary (metrics)", "simulator/metrics/summary.py", "summarize"),
]


@dataclass
class Profile:
    total_s: float
    phases: list[tuple[str, float | None]]             # (label, cumulative seconds)
    hotspots: list[tuple[str, int, float, float]]      # (where, calls, own s, cumulative s)


def _where(key: tuple[str, int, str]) -> str:
    path, line, func = key
    if path == "~":
        return func                                    # a builtin, e.g. <method 'append' ...>
    parts = path.replace(os.sep, "/").split("/")
    for anchor in ("simulator", "simpy"):
        if anchor in parts:
            i = len(parts) - 1 - parts[::-1].index(anchor)
            return f"{'/'.join(parts[i:])}:{line} {func}"
    return f"{parts[-1]}:{line} {func}"


def profile_call(fn: Callable[[], Any], top: int = 15) -> Profile:
    """Profile one call of ``fn``."""
    prof = cProfile.Profile()
    prof.enable()
    fn()
    prof.disable()
    stats = pstats.Stats(prof).stats                   # key -> (cc, nc, tt, ct, callers)
    total = sum(v[2] for v in stats.values())
    phases = []
    for label, suffix, func in PHASES:
        cum = [v[3] for k, v in stats.items()
               if k[2] == func and k[0].replace(os.sep, "/").endswith(suffix)]
        phases.append((label, max(cum) if cum else None))
    ranked = sorted(stats.items(), key=lambda kv: -kv[1][2])[:top]
    hotspots = [(_where(k), v[1], v[2], v[3]) for k, v in ranked]
    return Profile(total, phases, hotspots)
