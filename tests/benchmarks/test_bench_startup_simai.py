"""The start-up benchmark's arithmetic and report, on made-up runs (no SimAI, no wheel)."""

from __future__ import annotations

import sys

import pytest

from benchmarks import bench_startup_simai as bench
from benchmarks import startup
from benchmarks.startup import ProcessRun


def runs(*pairs):
    return [ProcessRun(w, c, 20.0, 0) for w, c in pairs]


def fake(simai):
    return {"pipesim": runs((0.10, 0.09), (0.12, 0.10), (0.11, 0.095)), "simai": simai,
            "floor": runs((0.01, 0.01)), "install": "a fresh venv", "output": "to a pipe",
            "when": "2026-11-23 14:00 UTC", "commit": "abc1234", "python": "3.11.7",
            "load": 1.0,
            "imports": {"total_ms": 60.0, "simulator_ms": 20.0, "third_party_ms": {"click": 15.0},
                        "stdlib_ms": 25.0, "modules": 190, "heavy": [], "metadata": False,
                        "external": [("click", "simulator.cli.main", 19.6)]},
            "profile": {"total_s": 0.17, "imports_s": 0.12,
                        "phases": [("SimPy run", 0.01), ("report text", None)],
                        "own": [("workload/rows.py:63 parse_rows", 1, 0.005)]}}


def test_ratios_are_pair_by_pair_and_verdicts_follow_the_target():
    a = runs((0.10, 0.09), (0.12, 0.10), (0.11, 0.095))
    b = runs((0.05, 0.05), (0.10, 0.05), (0.11, 0.05))
    assert startup.pair_ratios(a, b, "wall_s") == pytest.approx([2.0, 1.2, 1.0])
    text, targets = bench.report(fake(b))
    assert [t[2] for t in targets] == [False, True, True]
    assert targets[0][1] == "1.20x wall (0.110 s vs 0.100 s); 1.90x CPU"
    assert "| ratio pipesim / SimAI, pair by pair | 1.20x (1.00x-2.00x) | 1.90x (1.80x-2.00x) |" \
        in text
    assert text.startswith("## Start-up vs SimAI_analytical 2026-11-23 14:00 UTC, abc1234")
    assert "| report text | - |" in text and "| SimPy run | 10.0 ms |" in text
    fast = runs((0.05, 0.05), (0.12, 0.05), (0.12, 0.05))
    assert bench.report(fake(fast))[1][0][2] is True          # median ratio 1.0: meets


def test_without_simai_the_recorded_figure_is_the_yardstick():
    _, targets = bench.report(fake(None))
    assert targets[0] == ("whole-process `pipesim run` <= 1.0x SimAI_analytical -O3 (recorded "
                          "0.085-0.09 s)", "0.110 s wall = 1.22-1.29x", False)


def test_interleaved_runs_counts_pairs_after_warmup_and_refuses_failures(tmp_path):
    log = tmp_path / "log"
    a = ([sys.executable, "-c", f"open({str(log)!r}, 'a').write('A')"], tmp_path)
    b = ([sys.executable, "-c", f"open({str(log)!r}, 'a').write('B')"], tmp_path)
    ra, rb = startup.interleaved(a, b, pairs=2, warmup=1)
    assert log.read_text() == "ABABAB" and len(ra) == len(rb) == 2
    assert all(r.returncode == 0 and r.cpu_s >= 0 and r.peak_mb > 0 for r in ra + rb)
    with pytest.raises(RuntimeError, match="exited 3"):
        startup.interleaved(([sys.executable, "-c", "raise SystemExit(3)"], tmp_path), None, 1)


def test_a_peak_at_the_parents_own_size_is_reported_as_a_floor():
    assert bench._peak(runs((0.1, 0.1)), 20.0) == "<= 20.0 MB (floor)"      # runs() peak 20.0
    assert bench._peak(runs((0.1, 0.1)), 12.0) == "20.0 MB"
