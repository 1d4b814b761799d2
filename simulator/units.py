"""Numbers as people read them: durations, byte counts (binary units: GiB), percentages, and
the one text-table style.

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


def table(headers: list[str], rows: list[list[str]], left: tuple[int, ...] = (0,)) -> str:
    """The one table style of ``run``, ``compare``, ``plan`` and ``sweep``: rich's ``SIMPLE_HEAD``
    box without edges (the header, a rule under it, the rows; columns two spaces apart), as
    plain text with no trailing spaces. The columns in ``left`` are left-aligned, the others
    (numbers) right-aligned. Drawn here rather than by rich because ``pipesim run`` imports no
    rich (start-up); tests/test_units.py checks it against rich's own rendering."""
    widths = [max([len(h)] + [len(r[i]) for r in rows]) for i, h in enumerate(headers)]

    def line(cells) -> str:
        return "  ".join(c.ljust(w) if i in left else c.rjust(w)
                         for i, (c, w) in enumerate(zip(cells, widths))).rstrip()

    rule = "\u2500" * (sum(widths) + 2 * (len(widths) - 1))
    return "\n".join([line(headers), rule] + [line(r) for r in rows])
