"""Several schedules on one workload: rows, speed-ups, errors kept in their rows."""

from __future__ import annotations

import pytest

from simulator.errors import ConfigError
from simulator.api import compare as run_schedules
from simulator.export.compare import parse_schedules, render_table, rows
from simulator.workload import uniform_workload

# 8 identical layers, F = I = W = 1000 ns per layer, no communication: the closed forms hold
UNIFORM = uniform_workload(8)


def test_unit_cost_makespans_and_speedups():
    runs = run_schedules(UNIFORM, ["1f1b", "gpipe", "interleaved-1f1b", "zb-v", "dualpipe-v"],
                         pp=4, microbatches=8, vpp=2)
    table = rows(runs)
    # design notes, P=4, M=8, unit = one chunk's forward: 1F1B 33 units of 2 layers,
    # interleaved 57, ZB-V 51, DualPipeV 54 units of 1 layer
    assert [(r["schedule"], r["vpp"], r["makespan_ns"]) for r in table] == [
        ("1f1b", 1, 66000.0), ("gpipe", 1, 66000.0), ("interleaved-1f1b", 2, 57000.0),
        ("zb-v", 2, 51000.0), ("dualpipe-v", 2, 54000.0)]
    assert [r["speedup"] for r in table] == pytest.approx([1.0, 1.0, 66 / 57, 66 / 51, 66 / 54])
    assert {r["baseline"] for r in table} == {"1f1b"}
    first = table[0]
    assert first == {"schema_version": "2", "schedule": "1f1b", "pp": 4, "vpp": 1, "microbatches": 8,
                     "makespan_ns": 66000.0, "bubble_ratio": pytest.approx(3 / 11),
                     "theoretical_bubble_ratio": pytest.approx(3 / 11),
                     "theoretical_formula": "(P-1)/(M+P-1)", "peak_inflight_microbatches": 4,
                     "vpp_set_by": "default", "peak_memory_bytes": 0, "peak_memory_rank": 0,
                     "p2p_bytes": 0, "speedup": 1.0, "baseline": "1f1b", "error": None,
                     "warnings": first["warnings"]}
    # the uniform file's explicit pp_comm: 0 and its missing parameter sizes are warned about
    assert [w["code"] for w in first["warnings"]] == ["p2p_free", "memory_unknown"]
    assert table[1]["peak_inflight_microbatches"] == 8     # GPipe holds every microbatch


def test_vpp_only_reaches_schedules_that_take_it():
    runs = run_schedules(UNIFORM, ["1f1b", "interleaved-1f1b"], pp=2, microbatches=4, vpp=4)
    assert [r.result.schedule.vpp for r in runs] == [1, 4]


def test_an_illegal_schedule_keeps_its_row_and_the_others_run():
    runs = run_schedules(UNIFORM, ["dualpipe-v", "1f1b"], pp=4, microbatches=4)
    table = rows(runs)
    assert table[0]["error"] == ("--microbatches: dualpipe-v needs at least as many microbatches "
                                 "as stages (2 x pp = 8), got 4")
    assert all(table[0][k] is None for k in ("makespan_ns", "bubble_ratio", "speedup"))
    assert table[1]["error"] is None and table[1]["speedup"] == 1.0
    assert table[1]["baseline"] == "1f1b"      # the first schedule that ran


def test_render_table():
    runs = run_schedules(UNIFORM, ["dualpipe-v", "1f1b", "gpipe"], pp=4, microbatches=4)
    lines = render_table(rows(runs)).splitlines()
    assert lines[1] == "─" * len(lines[2])      # rich's header rule, across the note too
    assert lines[:1] + lines[2:] == [
        "schedule    v  iteration time   bubble  closed form  peak in flight  peak memory  "
        "p2p traffic  speed-up vs 1f1b  note",
        "dualpipe-v  -               -        -            -               -            -  "
        "          -                 -  error: --microbatches: dualpipe-v needs at least as "
        "many microbatches as stages (2 x pp = 8), got 4",
        "1f1b        1       42.000 us  42.86 %      42.86 %               4          0 B  "
        "        0 B             1.00x",
        "gpipe       1       42.000 us  42.86 %      42.86 %               4          0 B  "
        "        0 B             1.00x",
    ]


def test_render_table_without_errors_has_no_note_column():
    runs = run_schedules(UNIFORM, ["1f1b"], pp=2, microbatches=2)
    header = render_table(rows(runs)).splitlines()[0]
    assert header == "schedule  v  iteration time   bubble  closed form  peak in flight  " \
                     "peak memory  p2p traffic  speed-up vs 1f1b"


@pytest.mark.parametrize("text,message", [
    ("1f1b,nope", "--schedules: unknown schedule 'nope'; expected one of: "),
    ("1f1b,,gpipe", "--schedules: expected a comma-separated list of schedule names, "
                    "found '1f1b,,gpipe'"),
    (" ", "--schedules: expected a comma-separated list of schedule names, found ' '"),
    ("1f1b,1F1B", "--schedules: '1f1b' is given twice"),
])
def test_parse_schedules_errors(text, message):
    with pytest.raises(ConfigError) as err:
        parse_schedules(text)
    assert str(err.value).startswith(message)


def test_parse_schedules_keeps_the_order():
    assert parse_schedules(" zb-v, 1f1b ,gpipe") == ["zb-v", "1f1b", "gpipe"]


def test_own_counts_and_a_common_vpp_through_the_api():
    runs = run_schedules(UNIFORM, ["zb-h1", ("zb-h1", 2), "interleaved-1f1b", "zb-v"],
                         pp=2, microbatches=4, vpp=4)
    assert [(r.schedule, r.result.schedule.vpp, r.vpp_set_by) for r in runs] == [
        ("zb-h1", 1, "default"), ("zb-h1", 2, "--schedules"), ("interleaved-1f1b", 4, "--vpp"),
        ("zb-v", 2, "default")]
    assert [r["baseline"] for r in rows(runs)] == ["zb-h1"] * 4


def test_parse_schedule_entries():
    from simulator.export.compare import parse_schedule_entries
    assert parse_schedule_entries("1f1b, interleaved-1f1b:2 ,zb-h1,interleaved:4") == [
        ("1f1b", None), ("interleaved-1f1b", 2), ("zb-h1", None), ("interleaved-1f1b", 4)]
