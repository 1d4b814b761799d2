"""The table ``pipesim sweep`` prints at the end: the points fastest first, in the one table
style (:func:`simulator.units.table`), with the axes the spec varies and what each point gave."""

from __future__ import annotations

import math
from typing import Any

from ..units import fmt_bytes, fmt_pct, fmt_time, table

SHOWN = 20   # rows printed; the rest are in results.csv


def render_summary(frame: Any, keys: list[str], shown: int = SHOWN) -> str:
    """``frame`` (the results table) as text: one row per point, the points that ran fastest
    first, then the failed ones in point order with their error; ``keys`` the spec's parameter
    columns, of which those taking more than one value are shown."""
    varied = [k for k in keys if k in frame.columns
              and frame[k].astype("string").nunique(dropna=False) > 1]
    headers = ["point", *varied, "iteration time", "bubble", "peak memory", "status"]
    records = frame.to_dict("records")
    ok = sorted((r for r in records if r["status"] == "ok"),
                key=lambda r: (r["makespan_ns"], _int(r["point"])))
    failed = [r for r in records if r["status"] != "ok"]
    cells = []
    for r in (ok + failed)[:shown]:
        params = ["-" if _missing(r[k]) else str(r[k]) for k in varied]
        if r["status"] == "ok":
            cells.append([str(_int(r["point"])), *params, fmt_time(r["makespan_ns"]),
                          fmt_pct(r["bubble_ratio"]), fmt_bytes(r["peak_memory_bytes"]), "ok"])
        else:
            cells.append([str(_int(r["point"])), *params, "-", "-", "-",
                          f"{r['status']}: {r['error']}"])
    left = tuple(i for i, h in enumerate(headers) if h in ("status",)
                 or (h in varied and not _numeric(frame[h])))
    lines = [table(headers, cells, left=left)]
    if len(records) > shown:
        lines.append(f"... {len(records) - shown} more point(s) in results.csv")
    return "\n".join(lines)


def _missing(value: Any) -> bool:
    return value is None or (isinstance(value, float) and math.isnan(value)) \
        or str(value) == "<NA>"


def _int(value: Any) -> int:
    return -1 if _missing(value) else int(value)


def _numeric(column: Any) -> bool:
    return column.dtype.kind in "iuf" or str(column.dtype) in ("Int64", "Float64")
