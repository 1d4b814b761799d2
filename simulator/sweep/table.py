"""The results table: ``results.csv`` streamed row by row, ``results.parquet`` written from it
when asked (pyarrow: the ``parquet`` extra).

Each finished point appends one CSV line and flushes, so a killed sweep loses only the points in
flight. Every row is one physical line (error messages are made one-line), so a line cut by a kill
is exactly the bytes after the last newline; :meth:`ResultsTable.open` with ``resume`` drops them
and reads which ``point_id`` s are done. :meth:`ResultsTable.finish` sorts the rows into point
order (atomically) and rewrites the parquet file from the CSV, so an interrupted-then-resumed
sweep ends with the same table as an uninterrupted one; a parquet file of an earlier run that
is not rewritten is removed, so the folder never holds a table older than its CSV.
"""

from __future__ import annotations

import contextlib
import csv
import importlib.util
import math
import os
from pathlib import Path
from typing import Any

from ..errors import ConfigError

CSV_NAME = "results.csv"
PARQUET_NAME = "results.parquet"
PARQUET_EXTRA = "pip install 'pipesim[parquet]'"


def require_parquet(option: str = "--parquet") -> None:
    """Refuse parquet output, before any work, where pyarrow (the ``parquet`` extra) is not
    installed."""
    try:
        import pyarrow  # noqa: F401  (only asked: the base install has no pyarrow)
    except ImportError:
        raise ConfigError(f"{option}: writing {PARQUET_NAME} needs pyarrow, which the base "
                          f"install leaves out: {PARQUET_EXTRA}") from None


def _cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return repr(value) if math.isfinite(value) else str(value)
    return str(value)


def _read_rows(path: Path) -> list[list[str]]:
    with open(path, newline="") as fh:
        return list(csv.reader(fh))


class ResultsTable:
    """``DIR/results.csv`` open for appending rows with the given columns."""

    def __init__(self, out_dir: Path, columns: list[str], dtypes: dict[str, str]) -> None:
        self.out_dir = out_dir
        self.columns = columns
        self.dtypes = dtypes
        self.csv_path = out_dir / CSV_NAME
        self.parquet_path = out_dir / PARQUET_NAME
        self.done: set[str] = set()
        self._fh = None
        self._writer = None
        self._fresh = True

    @classmethod
    def open(cls, out_dir: str | Path, columns: list[str], dtypes: dict[str, str],
             resume: bool) -> "ResultsTable":
        """:meth:`prepare` then :meth:`start`: the table, open for appending."""
        table = cls.prepare(out_dir, columns, dtypes, resume)
        table.start()
        return table

    @classmethod
    def prepare(cls, out_dir: str | Path, columns: list[str], dtypes: dict[str, str],
                resume: bool) -> "ResultsTable":
        """Check ``out_dir`` and, with ``resume``, read which points its table has (repairing a
        cut last line); create nothing yet, so a sweep that fails before its first point (a
        cluster it cannot reach) leaves no table behind.

        Without ``resume`` a table with finished points is an error, never overwritten; one
        without any (just the header, as a sweep killed while starting leaves it) counts as new.
        """
        out = Path(out_dir)
        if out.exists() and not out.is_dir():
            raise ConfigError(f"--out: {out} is a file; expected a folder")
        table = cls(out, columns, dtypes)
        table._fresh = table._finished_rows() == 0
        if not table._fresh:
            if not resume:
                raise ConfigError(f"--out: {table.csv_path} exists; pass --resume to complete "
                                  "that sweep, or choose another --out")
            table._repair_and_load()
        return table

    def _finished_rows(self) -> int:
        """Complete lines after the header (0: no table, or only a pipesim header, perhaps with
        a line cut by a kill); any other one-line file counts as 1 (it is not ours to replace)."""
        try:
            with open(self.csv_path, "rb") as fh:
                head = b""
                while head.count(b"\n") < 2:
                    block = fh.read(1 << 16)
                    if not block:
                        break
                    head += block
        except FileNotFoundError:
            return 0
        except OSError as err:
            raise ConfigError(f"--out: cannot read {self.csv_path}: {err.strerror or err}") \
                from None
        lines = head.count(b"\n")
        if lines >= 2:
            return lines - 1
        first = head.split(b"\n", 1)[0]
        return 0 if not head or (lines == 1 and b"point_id" in first.split(b",")) else 1

    def start(self) -> None:
        """Create the folder and open the table for appending (a new table: with its header)."""
        try:
            self.out_dir.mkdir(parents=True, exist_ok=True)
        except OSError as err:
            raise ConfigError(f"--out: cannot create {self.out_dir}: {err.strerror or err}") \
                from None
        self._fh = open(self.csv_path, "w" if self._fresh else "a", newline="")
        self._writer = csv.writer(self._fh, lineterminator="\n")
        if self._fresh:
            self._writer.writerow(self.columns)
            self._fh.flush()

    def _repair_and_load(self) -> None:
        path = self.csv_path
        data = path.read_bytes()
        keep = data.rfind(b"\n") + 1
        if keep < len(data):  # the last line was cut by a kill: drop it, that point runs again
            with open(path, "r+b") as fh:
                fh.truncate(keep)
        rows = _read_rows(path)
        if not rows:
            return
        if rows[0] != self.columns:
            raise ConfigError(
                f"--resume: {path} has other columns than this sweep ({', '.join(rows[0])} "
                f"vs {', '.join(self.columns)}); was it written by another spec? Use another --out")
        at = self.columns.index("point_id")
        for n, row in enumerate(rows[1:], start=2):
            if len(row) != len(self.columns):
                raise ConfigError(f"--resume: {path}:{n}: expected {len(self.columns)} cells, "
                                  f"found {len(row)}; the table was edited or damaged")
            self.done.add(row[at])

    def append(self, row: dict[str, Any]) -> None:
        """Write one finished point and flush it to the OS (it survives a kill of this process)."""
        self._writer.writerow([_cell(row.get(c)) for c in self.columns])
        self._fh.flush()
        self.done.add(row["point_id"])

    def close(self) -> None:
        if self._fh is not None:
            self._fh.close()
            self._fh = None

    def finish(self, order: dict[str, int], parquet: bool = False) -> Any:
        """Sort the CSV into point order (rows of points not in ``order`` last, with an empty
        ``point``), write the parquet file from it when ``parquet`` (else remove an earlier
        one), and return the table as a DataFrame."""
        self.close()
        rows = _read_rows(self.csv_path)
        header, body = rows[0], rows[1:]
        at = header.index("point_id")
        seen: set[str] = set()
        unique = []
        for row in body:
            if row[at] not in seen:
                seen.add(row[at])
                unique.append(row)
        big = len(order)
        unique.sort(key=lambda r: order.get(r[at], big))  # stable: unknown rows keep their order
        if "point" in header:  # the current spec's numbering; empty for points it no longer has
            pos = header.index("point")
            for row in unique:
                row[pos] = str(order[row[at]]) if row[at] in order else ""
        tmp = self.csv_path.with_suffix(".csv.tmp")
        with open(tmp, "w", newline="") as fh:
            writer = csv.writer(fh, lineterminator="\n")
            writer.writerow(header)
            writer.writerows(unique)
        os.replace(tmp, self.csv_path)
        frame = read_csv(self.csv_path, self.dtypes)
        if not parquet:
            with contextlib.suppress(FileNotFoundError):
                self.parquet_path.unlink()   # an earlier run's: older than this CSV
            return frame
        tmp = self.parquet_path.with_suffix(".parquet.tmp")
        frame.to_parquet(tmp, index=False)
        os.replace(tmp, self.parquet_path)
        return frame


def read_csv(path: str | Path, dtypes: dict[str, str] | None = None) -> Any:
    """The CSV as a DataFrame with the table's column types ("" is missing, floats exact)."""
    # deferred: pandas loads in ~0.5 s, only reading a table needs it
    import pandas as pd

    # pandas 3 parses floats round-trip exactly by default (and deprecates the option); 2.x
    # needs to be asked, or a resumed table could differ in the last bit
    exact = {"float_precision": "round_trip"} if int(pd.__version__.split(".")[0]) < 3 else {}
    return pd.read_csv(path, dtype=dtypes or None, keep_default_na=False, na_values=[""],
                       **exact)


def read_table(out_dir: str | Path) -> Any:
    """The results of the sweep in ``out_dir``: the parquet file (with pyarrow), else the
    CSV."""
    # deferred: pandas loads in ~0.5 s, only reading a table needs it
    import pandas as pd

    out = Path(out_dir)
    if (out / PARQUET_NAME).is_file() and _has_pyarrow():
        return pd.read_parquet(out / PARQUET_NAME)
    if (out / CSV_NAME).is_file():
        return read_csv(out / CSV_NAME)
    raise ConfigError(f"{out}: no {PARQUET_NAME} or {CSV_NAME} here; run `pipesim sweep SPEC "
                      f"--out {out}` first")


def _has_pyarrow() -> bool:
    return importlib.util.find_spec("pyarrow") is not None
