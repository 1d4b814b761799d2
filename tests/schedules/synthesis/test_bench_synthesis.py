"""benchmarks/bench_synthesis.py runs (quick sizes, without the reference repository) and auto
never loses to 1F1B or ZB-H1 there."""

from __future__ import annotations

from benchmarks import bench_synthesis


def test_quick_run_prints_the_table(capsys, monkeypatch):
    monkeypatch.delenv("ZB_REPO", raising=False)
    assert bench_synthesis.main(["--quick", "--markdown", "--iterations", "200"]) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert lines[0] == ("| P | M | costs | cap K | zb greedy | 1f1b | zb-h1 | auto | bound | gap "
                        "| auto s |")
    rows = [line.split(" | ") for line in lines[2:] if line.startswith("| 4")]
    assert len(rows) == 12
    assert all(row[4] == "n/a" for row in rows)
    # heavy first stage at K = P: auto meets the bound (351), 1F1B 390
    assert rows[0][2:9] == ["heavy-first", "P=4", "n/a", "390", "351", "351", "351"]
