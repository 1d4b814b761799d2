"""results.parquet is the `parquet` extra's: asked with --parquet, refused in one line without
pyarrow, and the base install does not pull pyarrow."""

from __future__ import annotations

import sys
import tomllib
from pathlib import Path

import pytest

from simulator.cli.main import main

from .helpers import workload_text, write

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def spec(tmp_path):
    write(tmp_path / "w.txt", workload_text(4))
    return write(tmp_path / "s.yaml", "workload: w.txt\ngrid:\n  schedule: [gpipe, 1f1b]\n")


def test_the_base_install_has_no_pyarrow_and_the_extra_names_it():
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    assert not [d for d in project["dependencies"] if d.startswith("pyarrow")]
    assert project["optional-dependencies"]["parquet"] == ["pyarrow>=14.0"]


def test_parquet_without_pyarrow_is_refused_before_any_point_runs(spec, tmp_path, capsys,
                                                                   monkeypatch):
    monkeypatch.setitem(sys.modules, "pyarrow", None)   # `import pyarrow` raises ImportError
    out = tmp_path / "out"
    assert main(["sweep", str(spec), "--out", str(out), "-j", "1", "--parquet"]) == 2
    cap = capsys.readouterr()
    assert (cap.out, cap.err) == ("", "pipesim: error: --parquet: writing results.parquet needs "
                                      "pyarrow, which the base install leaves out: pip install "
                                      "'pipesim[parquet]'\n")
    assert not out.exists()


def test_parquet_is_written_when_asked_and_an_old_one_never_outlives_its_csv(spec, tmp_path,
                                                                             capsys):
    pd = pytest.importorskip("pandas")
    out = tmp_path / "out"
    assert main(["sweep", str(spec), "--out", str(out), "-j", "1", "--parquet"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[1:3] == [f"  {out / 'results.csv'}", f"  {out / 'results.parquet'}"]
    table = pd.read_parquet(out / "results.parquet")
    assert list(table["run_schedule"]) == ["gpipe", "1f1b"]
    # resumed without --parquet: the CSV is rewritten, so the old parquet file goes
    assert main(["sweep", str(spec), "--out", str(out), "-j", "1", "--resume"]) == 0
    assert sorted(p.name for p in out.iterdir()) == ["results.csv"]


def test_a_long_sweep_prints_the_fastest_points_and_says_where_the_rest_are(tmp_path, capsys):
    write(tmp_path / "w.txt", workload_text(8))
    spec = write(tmp_path / "s.yaml", "workload: w.txt\ngrid:\n  schedule: [gpipe, 1f1b]\n"
                 "  microbatches: [2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12]\n")
    assert main(["sweep", str(spec), "--out", str(tmp_path / "o"), "-j", "1"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[3] == "point  schedule  microbatches  iteration time   bubble  peak memory  status"
    assert len(lines) == 4 + 1 + 20 + 1
    assert lines[-1] == "... 2 more point(s) in results.csv"
    times = [line.split()[3:5] for line in lines[5:25]]
    assert [float(t) * {"us": 1e3, "ms": 1e6, "ns": 1.0}[u] for t, u in times] == sorted(
        float(t) * {"us": 1e3, "ms": 1e6, "ns": 1.0}[u] for t, u in times)
