"""Sweeps leave nothing behind: no process after `kill -9` of the driver, no table after a failed
start, a bounded wait for a cluster that cannot be reached."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from simulator.errors import ConfigError
from simulator.sweep import run_sweep, spec_from_dict

from .helpers import workload_text, write

REPO = Path(__file__).resolve().parents[2]
SPEC = """\
workload: w.txt
grid:
  schedule: [1f1b, zb-v, gpipe]
  pp: [4, 8]
  microbatches: [16, 32, 48, 64]
  system.links.bandwidth_gbps: [100, 200, 400, 800]
"""


def live_processes(group: int) -> list[str]:
    """``pid cmdline`` of every process of process group ``group`` that is not a zombie."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
            cmd = Path(f"/proc/{entry}/cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:  # it exited meanwhile
            continue
        fields = stat[stat.rindex(")") + 2:].split()  # state, ppid, pgrp, ...
        if int(fields[2]) == group and fields[0] != "Z":
            found.append(f"{entry} {cmd.strip()}")
    return found


def rows(csv: Path) -> int:
    return max(0, csv.read_bytes().count(b"\n") - 1) if csv.exists() else 0


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="counts processes in /proc")
def test_kill_9_of_the_driver_leaves_no_process(tmp_path):
    write(tmp_path / "w.txt", workload_text(64, pp_comm=1 << 20))
    spec = write(tmp_path / "sweep.yaml", SPEC)
    out = tmp_path / "out"
    env = {**os.environ, "PYTHONPATH": str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    # a session of its own: every process the sweep starts is in process group proc.pid
    proc = subprocess.Popen([sys.executable, "-m", "simulator", "sweep", str(spec), "--out",
                             str(out), "--jobs", "2", "--quiet"], env=env, cwd=tmp_path,
                            start_new_session=True, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        while rows(out / "results.csv") < 2:
            assert proc.poll() is None, "the sweep ended before it could be killed"
            assert time.monotonic() < deadline, "the sweep wrote no rows in 60 s"
            time.sleep(0.01)
        before = live_processes(proc.pid)
        # the driver, the forkserver, the resource tracker and the two workers
        assert len(before) == 5, before
        os.kill(proc.pid, signal.SIGKILL)  # the driver only: it gets no chance to clean up
        proc.wait()
        assert rows(out / "results.csv") < 96, "the sweep finished before the kill"
        deadline = time.monotonic() + 5
        while (left := live_processes(proc.pid)) and time.monotonic() < deadline:
            time.sleep(0.02)
        assert left == []
    finally:
        try:
            os.killpg(proc.pid, signal.SIGKILL)  # whatever the test found left
        except ProcessLookupError:
            pass


def test_a_failed_start_leaves_no_table_and_the_same_command_then_runs(tmp_path, monkeypatch):
    from simulator.sweep.executors import ExecutorError, LocalExecutor

    write(tmp_path / "w.txt", workload_text(8, pp_comm=1 << 20))
    spec = spec_from_dict({"workload": "w.txt", "grid": {"pp": [1, 2]}}, "s.yaml", tmp_path)

    def unreachable(self):
        raise ExecutorError("--address 127.0.0.1:1: cannot reach the cluster")

    with monkeypatch.context() as patch:
        patch.setattr(LocalExecutor, "__enter__", unreachable)
        with pytest.raises(ExecutorError):
            run_sweep(spec, tmp_path / "out", jobs=1)
    assert not (tmp_path / "out").exists()
    outcome = run_sweep(spec, tmp_path / "out", jobs=1)  # no "exists; pass --resume"
    assert (outcome.ran, outcome.failed) == (2, 0)


def test_a_header_only_table_counts_as_new(tmp_path):
    write(tmp_path / "w.txt", workload_text(8, pp_comm=1 << 20))
    spec = spec_from_dict({"workload": "w.txt", "grid": {"pp": [1, 2]}}, "s.yaml", tmp_path)
    first = run_sweep(spec, tmp_path / "ref", jobs=1)
    header = (tmp_path / "ref" / "results.csv").read_text().splitlines()[0]
    # as a sweep killed before its first point left it (an older pipesim wrote it before
    # connecting), with and without a line cut by the kill
    for leftover in (header + "\n", header + "\n0,3f2a"):
        write(tmp_path / "out" / "results.csv", leftover)
        outcome = run_sweep(spec, tmp_path / "out", jobs=1)
        assert outcome.ran == 2
        assert outcome.table.equals(first.table)
    # a one-line file that is not a pipesim table is not ours to replace
    write(tmp_path / "other" / "results.csv", "a,b,c\n")
    with pytest.raises(ConfigError) as info:
        run_sweep(spec, tmp_path / "other", jobs=1)
    assert str(info.value) == (f"--out: {tmp_path / 'other' / 'results.csv'} exists; pass "
                               "--resume to complete that sweep, or choose another --out")
