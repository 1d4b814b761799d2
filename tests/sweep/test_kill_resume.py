"""A real kill: SIGKILL a `python -m simulator sweep` partway, then --resume completes it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd

from simulator.cli.main import main
from simulator.sweep import load_spec, run_sweep

from .helpers import workload_text, write

REPO = Path(__file__).resolve().parents[2]
SPEC = """\
workload: w.txt
grid:
  schedule: [1f1b, zb-v, gpipe]
  pp: [4, 8]
  microbatches: [16, 32, 48]
  system.links.bandwidth_gbps: [100, 400]
"""
N_POINTS = 36


def complete_rows(csv: Path) -> int:
    if not csv.exists():
        return 0
    return max(0, csv.read_bytes().count(b"\n") - 1)


def test_sigkill_then_resume_gives_the_uninterrupted_table(tmp_path, capsys):
    write(tmp_path / "w.txt", workload_text(64, pp_comm=1 << 20))
    spec = write(tmp_path / "sweep.yaml", SPEC)
    out = tmp_path / "killed"
    env = {**os.environ, "PYTHONPATH": str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    proc = subprocess.Popen([sys.executable, "-m", "simulator", "sweep", str(spec), "--out",
                             str(out), "--jobs", "2", "--quiet"], env=env, cwd=tmp_path,
                            start_new_session=True, stderr=subprocess.PIPE)
    csv = out / "results.csv"
    deadline = time.monotonic() + 60
    try:
        while complete_rows(csv) < 4:
            assert proc.poll() is None, proc.stderr.read().decode()
            assert time.monotonic() < deadline, "the sweep wrote no rows in 60 s"
            time.sleep(0.005)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)  # the driver and its worker processes
        proc.wait()
        proc.stderr.close()
    killed_at = complete_rows(csv)
    assert 4 <= killed_at < N_POINTS, "the sweep finished before the kill"
    assert not (out / "results.parquet").exists()

    rc = main(["sweep", str(spec), "--out", str(out), "--jobs", "2", "--resume", "--parquet"])
    assert rc == 0
    printed = capsys.readouterr().out
    assert f"{N_POINTS - killed_at} of {N_POINTS} points run" in printed
    assert f"{killed_at} were already done" in printed

    full = run_sweep(load_spec(spec), tmp_path / "full", jobs=2).table
    resumed = pd.read_parquet(out / "results.parquet")
    assert len(resumed) == N_POINTS and resumed["point_id"].is_unique
    assert list(resumed["point"]) == list(range(N_POINTS))
    assert resumed.equals(full)
    assert csv.read_text() == (tmp_path / "full" / "results.csv").read_text()

