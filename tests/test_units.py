"""The one table style (units.table) is rich's SIMPLE_HEAD table, drawn without rich."""

from __future__ import annotations

import string

from hypothesis import given, settings
from hypothesis import strategies as st

from simulator.units import table

CELL = st.text(alphabet=string.ascii_letters + string.digits + " .%-/()", max_size=12).map(
    str.strip)


def rich_table(headers, rows, left):
    from rich import box
    from rich.console import Console
    from rich.table import Table

    t = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False, padding=(0, 1, 0, 0))
    for i, h in enumerate(headers):
        t.add_column(h, justify="left" if i in left else "right", no_wrap=True)
    for r in rows:
        t.add_row(*r)
    console = Console(width=10_000, record=True, color_system=None, file=open("/dev/null", "w"))
    console.print(t)
    return "\n".join(line.rstrip() for line in console.export_text().splitlines()
                     if line.strip())


@settings(max_examples=300, deadline=None)
@given(st.integers(1, 6).flatmap(lambda n: st.tuples(
    st.lists(CELL.filter(bool), min_size=n, max_size=n),
    st.lists(st.lists(CELL.filter(bool), min_size=n, max_size=n), min_size=1, max_size=5),
    st.sets(st.integers(0, n - 1)))))
def test_table_is_riches_simple_head(case):
    headers, rows, left = case
    assert table(headers, rows, left=tuple(left)) == rich_table(headers, rows, left)


def test_table_as_a_user_reads_it():
    assert table(["stage", "busy", "note"], [["0", "1.000 ms", "ok"], ["10", "2 ns", ""]],
                 left=(0, 2)).splitlines() == [
        "stage      busy  note",
        "─────────────────────",
        "0      1.000 ms  ok",
        "10         2 ns",
    ]
