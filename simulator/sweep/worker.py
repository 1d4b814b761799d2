"""Run one sweep point, in whatever process an executor picked.

:func:`run_point` never raises for a bad point: a :class:`PipesimError` (illegal combination,
deadlock, out of memory) or any other exception (a bug, recorded with its type) becomes a row
with ``status = "error"``, so one point cannot stop a sweep. Parsed workloads and systems are
cached per process: a worker parses each workload file once, not once per point.
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass
from pathlib import Path
from statistics import mean
from typing import Any

from ..errors import PipesimError
from .keys import OPTIONS_PREFIX, SYSTEM_PREFIX

# (column, pandas dtype) of what a worker reports, after the point's own parameters
RESULT_COLUMNS: tuple[tuple[str, str], ...] = (
    ("status", "string"),
    ("error_type", "string"),
    ("error", "string"),
    ("run_schedule", "string"),
    ("run_pp", "Int64"),
    ("run_vpp", "Int64"),
    ("run_microbatches", "Int64"),
    ("makespan_ns", "float64"),
    ("bubble_ratio", "float64"),
    ("bubble_ratio_own", "float64"),
    ("theoretical_bubble_ratio", "float64"),
    ("theoretical_formula", "string"),
    ("utilization", "float64"),
    ("forward_ns", "float64"),
    ("backward_ns", "float64"),
    ("forward_bubble_ns", "float64"),
    ("backward_bubble_ns", "float64"),
    ("peak_inflight_microbatches", "Int64"),
    ("peak_inflight_activations", "Int64"),
    ("p2p_bytes", "Int64"),
    ("dp_collective_bytes", "Int64"),
    ("total_comm_bytes", "Int64"),
    ("layer_ops", "Int64"),
    ("iteration_times_json", "string"),
    ("stages_json", "string"),
    ("warnings", "string"),   # JSON list of {code, message, option}; "[]" when none
)

# summary keys copied as they are
_SCALARS = ("makespan_ns", "bubble_ratio", "theoretical_bubble_ratio", "theoretical_formula",
            "utilization", "forward_ns", "backward_ns", "forward_bubble_ns",
            "backward_bubble_ns", "peak_inflight_microbatches", "p2p_bytes",
            "dp_collective_bytes", "total_comm_bytes", "layer_ops")


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
        from ..workload.parser import load_workload

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
    from ..system.config import load_system

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
    from ..api import simulate

    base = Path(base_dir)
    layout = params.get("layout", "auto")
    workload = cached_workload(str(base / params["workload"]), layout, workload_sha256)
    system_path = str(base / params["system"]) if params.get("system") is not None else None
    overrides = {k[len(SYSTEM_PREFIX):]: v for k, v in params.items()
                 if k.startswith(SYSTEM_PREFIX)}
    options = {k[len(OPTIONS_PREFIX):]: v for k, v in params.items()
               if k.startswith(OPTIONS_PREFIX)}
    return simulate(workload, params.get("schedule"), _system(system_path, overrides),
                    pp=params.get("pp"), microbatches=params.get("microbatches"),
                    vpp=params.get("vpp"), iterations=params.get("iterations", 1), layout=layout,
                    schedule_options=options or None, pp_comm=params.get("pp_comm"),
                    gpus=params.get("gpus"), dp=params.get("dp"),
                    strict=strict or bool(params.get("strict", False)))


def metrics(result: Any) -> dict[str, Any]:
    """A result's summary flattened into the table's result columns."""
    d = result.summary
    stages = d["stages"]
    out: dict[str, Any] = {
        "status": "ok", "error_type": None, "error": None,
        "run_schedule": d["schedule"], "run_pp": d["pp"], "run_vpp": d["vpp"],
        "run_microbatches": d["microbatches"],
        "bubble_ratio_own": mean(s["bubble_ratio_own"] for s in stages) if stages else 0.0,
        "peak_inflight_activations": max((s["peak_inflight_activations"] for s in stages),
                                         default=0),
        "iteration_times_json": json.dumps(d["iteration_times_ns"]),
        "stages_json": json.dumps(stages, separators=(",", ":")),
        "warnings": json.dumps([w.to_dict() for w in getattr(result, "warnings", ())],
                               separators=(",", ":")),
    }
    out.update({k: d[k] for k in _SCALARS})
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
