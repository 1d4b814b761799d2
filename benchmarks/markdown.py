"""Markdown output: GitHub tables, and a dated run saved as data under benchmarks/results/."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results"


def table(header: list[str], rows: list[list[object]]) -> str:
    """A GitHub-flavoured markdown table; every row must have one cell per column."""
    for row in rows:
        if len(row) != len(header):
            raise ValueError(f"row has {len(row)} cells, header has {len(header)}: {row!r}")

    def line(cells: list[object]) -> str:
        return "| " + " | ".join(str(c).replace("|", "\\|") for c in cells) + " |"

    return "\n".join([line(header), "|" + "|".join("---" for _ in header) + "|",
                      *(line(r) for r in rows)])


def seconds(s: float | None) -> str:
    """Seconds with three significant digits, in ms below one second."""
    if s is None:
        return "-"
    return f"{s:.3g} s" if s >= 1 else f"{s * 1e3:.3g} ms"


def rate(count: float, s: float) -> str:
    """A per-second rate in k/s or M/s."""
    r = count / s
    return f"{r / 1e6:.3g} M/s" if r >= 1e6 else f"{r / 1e3:.3g} k/s"


def verdict(ok: bool) -> str:
    return "meets" if ok else "MISSES"


def append_section(path: Path, text: str) -> None:
    """Append ``text`` (a section starting with a ``##`` heading) to the markdown file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    old = path.read_text() if path.exists() else "# Performance\n"
    sep = "" if old.endswith("\n\n") else ("\n" if old.endswith("\n") else "\n\n")
    path.write_text(old + sep + text.rstrip("\n") + "\n")


def dated_result(name: str) -> Path:
    """``benchmarks/results/<UTC date-time>-<name>.md``: where a run's dated output is kept (docs/
    keeps only where things stand)."""
    return RESULTS / f"{dt.datetime.now(dt.timezone.utc):%Y-%m-%d-%H%M}-{name}.md"
