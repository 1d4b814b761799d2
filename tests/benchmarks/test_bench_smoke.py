"""The benchmark harness on tiny sizes: every section runs and its tables have the right shape.
No timed assertions: timings vary; only structure, counts and the pure helpers are checked."""

from __future__ import annotations

import importlib.util
import math
import re
from pathlib import Path

import pytest

from benchmarks import markdown as md
from benchmarks import run_all, scaling, startup, timing

REPO = Path(__file__).resolve().parents[2]
SMALL = REPO / "workloads" / "gpt-24l.txt"


def _tables(text: str) -> list[list[list[str]]]:
    """Every markdown table in ``text`` as rows of cells (header first, separator dropped)."""
    tables, cur = [], []
    for line in text.splitlines() + [""]:
        if line.startswith("|"):
            cells = [c.strip() for c in re.split(r"(?<!\\)\|", line.strip())[1:-1]]
            if not all(set(c) <= {"-"} and c for c in cells):
                cur.append(cells)
        elif cur:
            tables.append(cur)
            cur = []
    return tables


def test_quick_run_prints_every_table_and_appends_it(tmp_path, capsys):
    out = tmp_path / "perf.md"
    argv = ["--quick", "--workload", str(SMALL), "--out", str(out)]
    assert run_all.main(argv) == 0
    text = capsys.readouterr().out
    assert "FAILED" not in text
    assert text.startswith("## Run ") and "(quick)" in text.splitlines()[0]
    assert out.read_text() == "# Performance\n\n" + text

    tables = _tables(text)
    for t in tables:
        assert all(len(row) == len(t[0]) for row in t), t
    by_head = {t[0][0] + "/" + t[0][1]: t for t in tables}

    ab = by_head["case/resolved as"]
    assert ab[0] == ["case", "resolved as", "layer-ops", "SimPy events", "median of 3", "min",
                     "layer-ops/s", "bare loop, same count", "ratio (target ≤ 1.0)",
                     "per SimPy event vs bare"]
    assert [r[0] for r in ab[1:]] == [
        "(a) bare SimPy loop, one `env.timeout` per event",
        "(b) gpt-24l.txt, default `simulate(path)`", "(b) gpt-24l.txt, `layout=\"model\"`"]
    if importlib.util.find_spec("simulator.workload.aicb") is None:
        assert "- `layout=\"aicb\"` skipped: simulator/workload/aicb.py is not there yet." in text
    else:                            # a whole-model file is not an AICB stage trace
        assert "- `layout=\"aicb\"` skipped: " + str(SMALL) + ": layout: expected the AICB" in text
    assert ab[1][2] == "20,000 timeouts" and ab[1][3] == "20,000"
    assert ab[3][1] == "model layout, 1f1b P=4 v=1 M=16"
    assert ab[3][2] == "2,400"                 # 50 rows x 16 microbatches x (F, IG, WG)

    sc = by_head["series/pp"]
    assert sc[0] == ["series", "pp", "microbatches", "layers", "layer-ops", "actions",
                     "median wall (runs)", "median CPU", "layer-ops/s", "vs bare loop",
                     "peak RSS (after import)"]
    assert [r[:6] for r in sc[1:]] == [
        ["model", "2", "4", "32", "384", "16"], ["model", "4", "8", "64", "1,536", "64"],
        ["model", "4", "16", "128", "6,144", "128"],
        ["event-heavy", "4", "32", "4", "384", "256"],
        ["event-heavy", "4", "128", "4", "1,536", "1,024"],
        ["event-heavy", "8", "256", "8", "6,144", "4,096"]]
    assert all(r[6].endswith(" (1)") for r in sc[1:])          # one run each in quick mode
    fit = by_head["series/exponent, wall (target ≤ 1.05)"]
    assert [r[0] for r in fit[1:]] == ["model", "event-heavy"]
    assert all(r[4].endswith("(not 1M)") for r in fit[1:])

    su = by_head["command/median wall of 1"]
    assert su[0][2:] == ["median CPU (user+sys)", "note"]
    assert [r[0] for r in su[1:]] == ["`python -c pass` (interpreter floor)",
                                      "`python -c \"import simulator\"`",
                                      f"`{startup.pipesim_command()[1]} run gpt-24l.txt`"]
    # the package face is lazy: its biggest entries are its layers (simulator.api, ...)
    assert any(r[0].startswith("simulator") for r in by_head["module/cumulative"][1:])

    assert text.count("#### Profile: ") == 4
    phases = [t for t in tables if t[0] == ["phase", "cumulative", "share"]]
    assert len(phases) == 4 and all(len(t) == 1 + len(run_all.profiling.PHASES) for t in phases)



def test_no_append_writes_nothing(tmp_path, capsys):
    out = tmp_path / "perf.md"
    assert run_all.main(["--quick", "--workload", str(tmp_path / "absent.txt"), "--sections",
                         "ab", "--no-append", "--out", str(out)]) == 0
    text = capsys.readouterr().out
    assert "Sections: ab." in text and "### (c)" not in text and "### Profiles" not in text
    assert f"- (b) skipped: workload {tmp_path / 'absent.txt'} not found (give --workload)." in text
    assert not out.exists()


@pytest.mark.parametrize("argv, message", [
    (["--repeats", "0"], "--repeats: expected a positive integer, got 0"),
    (["--sections", "ab,x"], "--sections: expected a comma-separated subset of ab,c,d,profile, "
                             "found 'ab,x'"),
])
def test_bad_options_are_one_line_errors(argv, message, capsys):
    with pytest.raises(SystemExit) as exc:
        run_all.main(argv)
    assert exc.value.code == 2
    assert capsys.readouterr().err.splitlines()[-1].endswith(message)


def test_fit_exponent_recovers_a_power_law():
    ops = [1e3, 1e4, 1e5, 1e6]
    assert math.isclose(scaling.fit_exponent(ops, [2e-6 * n ** 1.5 for n in ops]), 1.5,
                        rel_tol=1e-9)
    assert math.isclose(scaling.fit_exponent(ops, [3e-7 * n for n in ops]), 1.0, rel_tol=1e-9)
    with pytest.raises(ValueError, match=r"^need at least two points to fit an exponent, got 1$"):
        scaling.fit_exponent([10.0], [1.0])


def test_counting_events_counts_processed_events_only():
    with timing.counting_events() as counter:
        timing.bare_loop(100)
    assert counter == [102]          # process start + 100 timeouts + process end


def test_parse_importtime_finds_parents():
    text = ("import time: self [us] | cumulative | imported package\n"
            "import time:       109 |        109 |   _io\n"
            "import time:       233 |        600 | _frozen_importlib_external\n"
            "import time:        10 |         10 |       numpy.core\n"
            "import time:        20 |         30 |     numpy\n"
            "import time:         5 |          5 |     simulator.errors\n"
            "import time:        40 |         75 |   simulator.api\n"
            "import time:       100 |        175 | simulator\n")
    got = [(e.name, e.self_us, e.cumulative_us, e.level, e.parent)
           for e in startup.parse_importtime(text)]
    assert got == [("_io", 109, 109, 1, "_frozen_importlib_external"),
                   ("_frozen_importlib_external", 233, 600, 0, None),
                   ("numpy.core", 10, 10, 3, "numpy"),
                   ("numpy", 20, 30, 2, "simulator.api"),
                   ("simulator.errors", 5, 5, 2, "simulator.api"),
                   ("simulator.api", 40, 75, 1, "simulator"),
                   ("simulator", 100, 175, 0, None)]
    assert [e.name for e in startup.external_imports(startup.parse_importtime(text))] == ["numpy"]


def test_table_and_append(tmp_path):
    assert md.table(["a", "b"], [[1, "x|y"]]) == "| a | b |\n|---|---|\n| 1 | x\\|y |"
    with pytest.raises(ValueError, match=r"^row has 1 cells, header has 2: \[1\]$"):
        md.table(["a", "b"], [[1]])
    assert (md.seconds(0.0123), md.seconds(2.5), md.rate(3e6, 2.0), md.rate(500, 1.0)) == (
        "12.3 ms", "2.5 s", "1.5 M/s", "0.5 k/s")
    path = tmp_path / "p.md"
    path.write_text("# Performance\nintro")
    md.append_section(path, "## Run 1\n")
    md.append_section(path, "## Run 2")
    assert path.read_text() == "# Performance\nintro\n\n## Run 1\n\n## Run 2\n"


def test_measure_point_stops_at_its_time_budget():
    one = scaling.measure_point(2, 2, 2, repeats=3, budget_s=0.0)
    three = scaling.measure_point(2, 2, 2, repeats=3, budget_s=1e9)
    assert (len(one["times"]), len(three["times"])) == (1, 3)
    assert len(one["cpu"]) == 1 and len(three["cpu"]) == 3
    assert one["layer_ops"] == three["layer_ops"] == 12      # 2 layers x 2 microbatches x 3
    assert one["actions"] == 8                                # 2 ranks x 2 microbatches x F, B
    assert 0 < one["rss_base_mb"] <= one["rss_peak_mb"]
