"""Run one sweep point, in whatever process an executor picked.

:func:`run_point` never raises for a bad point: a :class:`PipesimError` (illegal combination,
deadlock, out of memory) or any other exception (a bug, recorded with its type) becomes a row
with ``status = "error"``, so one point cannot stop a sweep. Parsed workloads and systems are
cached per process: a worker parses each workload file once, not once per point.
"""

from __future__ import annotations

import json
import threading
import types
import typing
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..api import simulate
from ..errors import PipesimError
from ..metrics.types import RunSummary, to_json
from ..result import SimulationResult
from ..run_options import RunOptions
from ..system.config import load_system
from ..workload.parser import load_workload
from .keys import OPTIONS_PREFIX, SYSTEM_PREFIX

# summary fields that are the point's own parameters (as run_*) or not a per-point number
_AS_RUN = ("schedule", "pp", "vpp", "microbatches")
_LEFT_OUT = ("schema_version", "workload", "layout", "iterations", "theoretical_bubble_basis",
             "warnings", "notes")
# nested summary fields written as JSON text: (summary field, column)
_AS_JSON = (("iteration_times_ns", "iteration_times_json"), ("ranks", "stages_json"),
            ("warnings", "warnings"))


def _dtype(hint: Any) -> str | None:
    """The pandas dtype of a scalar summary field, from its type (None: not a scalar)."""
    if typing.get_origin(hint) is types.UnionType:     # X | None
        args = [a for a in typing.get_args(hint) if a is not type(None)]
        hint = args[0] if len(args) == 1 else None
    return {int: "Int64", float: "float64", str: "string"}.get(hint)


def _result_columns() -> tuple[tuple[str, str], ...]:
    """(column, pandas dtype) of what a worker reports, after the point's own parameters:
    derived from the typed run summary, so a new summary number is a new column."""
    cols = [("status", "string"), ("error_type", "string"), ("error", "string")]
    cols += [(f"run_{name}", "string" if name == "schedule" else "Int64") for name in _AS_RUN]
    scalars = []
    for name, hint in typing.get_type_hints(RunSummary).items():
        dtype = _dtype(hint)
        if dtype is not None and name not in _AS_RUN and name not in _LEFT_OUT:
            scalars.append(name)
            cols.append((name, dtype))
    cols.append(("peak_inflight_activations", "Int64"))
    cols += [(column, "string") for _, column in _AS_JSON]
    return tuple(cols), tuple(scalars)


RESULT_COLUMNS, _SCALARS = _result_columns()


@dataclass(frozen=True)
class Task:
    """What a worker needs for one point (small and picklable: it crosses process boundaries)."""

    index: int
    point_id: str
    params: dict[str, Any]
    base_dir: str               # absolute; the spec's paths are relative to it
    workload_sha256: str        # cache key: an edited file is parsed again
    strict: bool = False        # pipesim sweep --strict: a warning fails the point


_lock = threading.Lock()        # Dask runs tasks on threads
_workloads: dict[tuple[str, str, str], Any] = {}
_systems: dict[tuple[str | None, tuple], Any] = {}
parse_count = 0                 # how many workload parses this process did (tests read it)


def cached_workload(path: str, layout: str, sha: str) -> Any:
    """The parsed workload, parsed once per process (a parse error is cached too)."""
    global parse_count
    key = (path, layout, sha)
    with _lock:
        found = _workloads.get(key)
    if found is None:
        parse_count += 1
        try:
            found = load_workload(path, layout=layout)
        except PipesimError as err:
            found = err
        with _lock:
            _workloads[key] = found
    if isinstance(found, PipesimError):
        raise found
    return found


def _system(path: str | None, overrides: dict[str, Any]) -> Any:
    key = (path, tuple(sorted(overrides.items())))
    with _lock:
        found = _systems.get(key)
    if found is None:
        found = load_system(path)
        if overrides:
            found = found.with_overrides(overrides, source="sweep")
        with _lock:
            _systems[key] = found
    return found


def simulate_point(params: dict[str, Any], base_dir: str | Path, workload_sha256: str = "",
                   strict: bool = False) -> Any:
    """The :class:`SimulationResult` of one point: what ``pipesim run`` with its options gives."""
    base = Path(base_dir)
    layout = params.get("layout", "auto")
    workload = cached_workload(str(base / params["workload"]), layout, workload_sha256)
    system_path = str(base / params["system"]) if params.get("system") is not None else None
    overrides = {k[len(SYSTEM_PREFIX):]: v for k, v in params.items()
                 if k.startswith(SYSTEM_PREFIX)}
    options = {k[len(OPTIONS_PREFIX):]: v for k, v in params.items()
               if k.startswith(OPTIONS_PREFIX)}

    values = {k: v for k, v in params.items() if k not in ("workload", "system", "schedule")}
    if isinstance(values.get("slow_rank"), str):
        values["slow_rank"] = tuple(v.strip() for v in values["slow_rank"].split(","))
    if strict:
        values["strict"] = True
    opts = RunOptions.from_values(values, "sweep")
    return simulate(workload, params.get("schedule"), _system(system_path, overrides),
                    opts._replace(schedule_options=options or None))


def metrics(result: SimulationResult) -> dict[str, Any]:
    """A result's summary flattened into the table's result columns."""
    d = result.summary
    ranks = d.ranks
    out: dict[str, Any] = {
        "status": "ok", "error_type": None, "error": None,
        **{f"run_{name}": getattr(d, name) for name in _AS_RUN},
        "peak_inflight_activations": max((r.peak_inflight_activations for r in ranks),
                                         default=0),
    }
    for name in _SCALARS:
        out[name] = to_json(getattr(d, name), name)
    for name, column in _AS_JSON:
        value = to_json(getattr(d, name), name)
        if name == "ranks":   # the per-rank rows as `pipesim run --json` writes them
            value = d["stages"]
        out[column] = json.dumps(value, separators=(",", ":"))
    return out


def _one_line(text: str) -> str:
    return " ".join(text.split("\n")).replace("\r", " ")


def failure(err: BaseException) -> dict[str, Any]:
    """The result columns of a point that failed with ``err``."""
    message = str(err)
    if not isinstance(err, PipesimError):
        message = f"{type(err).__name__}: {message}" if message else type(err).__name__
    return {"status": "error", "error_type": type(err).__name__, "error": _one_line(message)}


def run_point(task: Task) -> tuple[int, dict[str, Any]]:
    """(task.index, result columns) of one point; never raises for a bad point or a bug."""
    try:
        result = simulate_point(task.params, task.base_dir, task.workload_sha256, task.strict)
        return task.index, metrics(result)
    except Exception as err:  # noqa: BLE001 -- a bug in one point is recorded, the sweep goes on
        return task.index, failure(err)
