"""Numbers as people read them: durations, byte counts, percentages, aligned text tables.

Shared by the text report, the comparison table and the Gantt titles; no imports beyond the
standard library, so it costs nothing on ``pipesim run``'s start-up.
"""

from __future__ import annotations


def fmt_time(ns: float) -> str:
    """A duration in the unit that keeps 3-4 significant digits readable."""
    a = abs(ns)
    if a >= 1e9:
        return f"{ns / 1e9:.3f} s"
    if a >= 1e6:
        return f"{ns / 1e6:.3f} ms"
    if a >= 1e3:
        return f"{ns / 1e3:.3f} us"
    return f"{ns:.0f} ns"


def fmt_bytes(n: float) -> str:
    for unit, size in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if abs(n) >= size:
            return f"{n / size:.2f} {unit}"
    return f"{n:.0f} B"


def fmt_pct(x: float | None) -> str:
    return "n/a" if x is None else f"{100 * x:.2f} %"


def table(headers: list[str], rows: list[list[str]]) -> str:
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h)
              for i, h in enumerate(headers)]
    line = "  ".join(h.rjust(w) for h, w in zip(headers, widths))
    out = [line, "  ".join("-" * w for w in widths)]
    out += ["  ".join(c.rjust(w) for c, w in zip(r, widths)) for r in rows]
    return "\n".join(out)
