"""Run a sweep: expand the spec, skip what the table already has, run the rest, finish the table.

The driver checks the spec and parses each workload once before anything runs (bad input is one
error, not a table of identical failures), then streams each finished point into the CSV.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from ..errors import ConfigError
from .executors import DEFAULT_CONNECT_TIMEOUT_S, make_executor
from .points import FileHashes, Point, expand
from .spec import SweepSpec, load_spec
from .table import ResultsTable, require_parquet
from .worker import RESULT_COLUMNS, Task, cached_workload, run_point


class Reporter(Protocol):
    """Progress of a sweep (the CLI shows a rich progress bar; the default shows nothing)."""

    def waiting(self, what: str) -> None: ...
    def start(self, total: int, already: int, workers: int, executor: str) -> None: ...
    def advance(self, ok: bool) -> None: ...
    def close(self) -> None: ...


class NullReporter:
    def waiting(self, what: str) -> None:
        pass

    def start(self, total: int, already: int, workers: int, executor: str) -> None:
        pass

    def advance(self, ok: bool) -> None:
        pass

    def close(self) -> None:
        pass


@dataclass
class SweepOutcome:
    spec: SweepSpec
    out_dir: Path
    csv_path: Path
    parquet_path: Path | None   # None: not asked (parquet=False)
    points: int          # points in the spec (after exclude)
    skipped: int         # already in the table (resume)
    ran: int
    failed: int          # of the points run now
    workers: int
    elapsed_s: float
    table: Any           # pandas DataFrame, in point order
    notes: list[str] = field(default_factory=list)
    first_error: str | None = None   # the failure of the first failed point, in point order


# The most points a sweep runs unless --max-points says otherwise: counted from the spec's
# axes before any point is made (a grid of 10^10 points was expanded in full first).
DEFAULT_MAX_POINTS = 100_000


def check_points(spec: SweepSpec, max_points: int | None) -> None:
    """Refuse a spec whose grid has more than ``max_points`` points (default
    :data:`DEFAULT_MAX_POINTS`, 0 = none), from the axes' lengths alone (exclude rules can only
    remove points, so this is an upper bound)."""
    limit = DEFAULT_MAX_POINTS if max_points is None else max_points
    n = 1
    for axis in spec.axes:
        n *= len(axis.steps)
    if limit > 0 and n > limit:
        sizes = " x ".join(str(len(axis.steps)) for axis in spec.axes)
        raise ConfigError(f"--max-points: the sweep {spec.label} has up to {n:,} points (axes of "
                          f"{sizes} values), above the limit of {limit:,}; pass --max-points "
                          f"{n} (or 0 for no limit) to run it anyway")


def _param_dtype(spec: SweepSpec, key: str) -> str:
    dtype = spec.kinds[key].dtype
    if dtype != "object":
        return dtype
    values = spec.values_of(key)
    if all(isinstance(v, bool) for v in values):
        return "boolean"
    if all(isinstance(v, int) and not isinstance(v, bool) for v in values):
        return "Int64"
    if all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values):
        return "float64"
    return "string"


def table_columns(spec: SweepSpec) -> tuple[list[str], dict[str, str]]:
    """The results table's columns, in order, and their pandas dtypes."""
    dtypes = {"point": "Int64", "point_id": "string"}
    dtypes.update({k: _param_dtype(spec, k) for k in spec.keys})
    dtypes.update(RESULT_COLUMNS)
    return list(dtypes), dtypes


def _describe(point: Point) -> str:
    shown = ", ".join(f"{k}={v}" for k, v in point.params.items() if k != "workload")
    return f"point {point.index} ({shown})"


def run_sweep(spec: SweepSpec | str | Path, out_dir: str | Path, *, jobs: int | None = None,
              resume: bool = False, executor: str = "local", address: str | None = None,
              reporter: Reporter | None = None,
              connect_timeout: float = DEFAULT_CONNECT_TIMEOUT_S,
              strict: bool = False, max_points: int | None = None,
              parquet: bool = False) -> SweepOutcome:
    """Run every point of ``spec`` (a :class:`SweepSpec` or a spec file) into ``out_dir``.

    ``executor`` is ``local`` (``jobs`` processes, default the CPU count; 1 runs in this
    process), ``ray`` or ``dask`` (``address`` of the cluster, or None for a local one;
    ``connect_timeout`` seconds to reach it).
    With ``resume``, points already in ``out_dir/results.csv`` are not run again. With
    ``strict``, a point whose run has warnings is recorded as failed with the first one. With
    ``parquet`` the table is also written as ``results.parquet`` (pyarrow: the ``parquet``
    extra; refused before anything runs without it).
    """
    t0 = time.perf_counter()
    if parquet:
        require_parquet()
    if not isinstance(spec, SweepSpec):
        spec = load_spec(spec)
    check_points(spec, max_points)
    reporter = reporter or NullReporter()
    ex = make_executor(executor, jobs, address, connect_timeout)
    hashes = FileHashes(spec.base_dir)
    points, notes = expand(spec, hashes)
    columns, dtypes = table_columns(spec)
    # checked and read now, created only once the executor is up: a cluster that cannot be
    # reached leaves no table behind
    table = ResultsTable.prepare(out_dir, columns, dtypes, resume)
    todo = [p for p in points if p.point_id not in table.done]
    base = str(spec.base_dir.resolve())
    tasks = []
    for p in todo:
        sha = hashes(p.params["workload"])
        # parse each workload here first: a bad file is one error before anything runs
        # (and with --jobs 1 the points reuse this parse)
        cached_workload(str(Path(base) / p.params["workload"]),
                        p.params.get("layout", "auto"), sha)
        tasks.append(Task(p.index, p.point_id, p.params, base, sha, strict))
    failed = 0
    first_error = None
    try:
        waiting = getattr(reporter, "waiting", None)  # (a reporter written before it existed)
        if ex.starting and waiting is not None:
            waiting(ex.starting)
        with ex:
            table.start()
            reporter.start(len(todo), len(points) - len(todo), ex.workers, ex.name)
            try:
                for index, result in ex.map_unordered(run_point, tasks):
                    point = points[index]
                    table.append({"point": index, "point_id": point.point_id, **point.params,
                                  **result})
                    ok = result["status"] == "ok"
                    if not ok:
                        failed += 1
                        if first_error is None or index < first_error[0]:
                            first_error = (index, f"{_describe(point)}: {result['error']}")
                    reporter.advance(ok)
            finally:
                table.close()
    finally:
        reporter.close()
    frame = table.finish({p.point_id: p.index for p in points}, parquet)
    return SweepOutcome(spec, Path(out_dir), table.csv_path,
                        table.parquet_path if parquet else None, len(points),
                        len(points) - len(todo), len(todo), failed, ex.workers,
                        time.perf_counter() - t0, frame, notes,
                        first_error[1] if first_error else None)

