"""Sweeps leave nothing behind: no process after `kill -9` of the driver, no table after a failed
start, a bounded wait for a cluster that cannot be reached."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
import types
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


def live_processes(session: int) -> list[str]:
    """``pid cmdline`` of every process of session ``session`` that is not a zombie."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
            cmd = Path(f"/proc/{entry}/cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:  # it exited meanwhile
            continue
        fields = stat[stat.rindex(")") + 2:].split()  # state, ppid, pgrp, session, ...
        if int(fields[3]) == session and fields[0] != "Z":
            found.append(f"{entry} {cmd.strip()}")
    return found


def rows(csv: Path) -> int:
    return max(0, csv.read_bytes().count(b"\n") - 1) if csv.exists() else 0


# executor, its module, processes before the kill (at least), seconds until none is left
KILLS = [
    # the driver, the forkserver, the resource tracker and the two workers
    pytest.param("local", "concurrent.futures", 5, 5, id="local"),
    # the driver, the resource tracker and the two worker processes of a LocalCluster
    pytest.param("dask", "distributed", 4, 5, id="dask", marks=pytest.mark.slow),
    # the driver, Ray's GCS, raylet, agents, monitors, workers, and pipesim's reaper; Ray's
    # workers notice the raylet is gone in 2-3 s
    pytest.param("ray", "ray", 10, 10, id="ray", marks=pytest.mark.slow),
]


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="counts processes in /proc")
@pytest.mark.parametrize("executor, module, started, within", KILLS)
def test_kill_9_of_the_driver_leaves_no_process(tmp_path, executor, module, started, within):
    pytest.importorskip(module)
    write(tmp_path / "w.txt", workload_text(64, pp_comm=1 << 20))
    spec = write(tmp_path / "sweep.yaml", SPEC)
    out = tmp_path / "out"
    env = {**os.environ, "PYTHONPATH": str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""),
           "RAY_AUTH_MODE": "disabled"}
    # a session of its own: every process the sweep starts is in session proc.pid
    proc = subprocess.Popen([sys.executable, "-m", "simulator", "sweep", str(spec), "--out",
                             str(out), "--jobs", "2", "--quiet", "--executor", executor],
                            env=env, cwd=tmp_path, start_new_session=True,
                            stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        while rows(out / "results.csv") < 2:
            assert proc.poll() is None, "the sweep ended before it could be killed"
            assert time.monotonic() < deadline, "the sweep wrote no rows in 60 s"
            time.sleep(0.01)
        before = live_processes(proc.pid)
        assert len(before) >= started, before
        if executor == "local":
            assert len(before) == started, before
        os.kill(proc.pid, signal.SIGKILL)  # the driver only: it gets no chance to clean up
        proc.wait()
        assert rows(out / "results.csv") < 96, "the sweep finished before the kill"
        deadline = time.monotonic() + within
        while (left := live_processes(proc.pid)) and time.monotonic() < deadline:
            time.sleep(0.02)
        assert left == []
    finally:
        for line in live_processes(proc.pid):  # whatever the test found left
            try:
                os.kill(int(line.split()[0]), signal.SIGKILL)
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


# --- reaching a cluster: --connect-timeout, one line naming the address, exit 2 ---------------

def closed_port() -> int:
    """A local port nothing listens on (bound, then closed)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture
def silent_port():
    """A port that accepts connections (the kernel's backlog) but never answers."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen(16)
        yield sock.getsockname()[1]


def sweep_cli(tmp_path: Path, *args: str) -> tuple[int, str, float]:
    """``python -m simulator sweep`` in a process of its own (a connection given up on ends
    with it): exit code, stderr, seconds."""
    write(tmp_path / "w.txt", workload_text(8, pp_comm=1 << 20))
    spec = write(tmp_path / "s.yaml", "workload: w.txt\ngrid:\n  pp: [1, 2]\n")
    env = {**os.environ, "PYTHONPATH": str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    t0 = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "simulator", "sweep", str(spec), "--out",
                           str(tmp_path / "out"), "-q", *args], env=env, cwd=tmp_path,
                          capture_output=True, text=True, timeout=120)
    return done.returncode, done.stderr, time.monotonic() - t0


CLUSTERS = [("ray", "ray", "Ray cluster"), ("dask", "distributed", "Dask scheduler")]


@pytest.mark.parametrize("executor, module, what", CLUSTERS)
def test_a_closed_port_fails_at_once_and_leaves_no_table(tmp_path, executor, module, what):
    pytest.importorskip(module)
    port = closed_port()
    rc, err, took = sweep_cli(tmp_path, "--executor", executor, "--address", f"127.0.0.1:{port}")
    assert (rc, err) == (2, f"pipesim: error: --address 127.0.0.1:{port}: cannot reach the "
                            f"{what}: Connection refused\n")
    assert took < 15  # the interpreter and the import; the refusal itself is immediate
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("executor, module, what", CLUSTERS)
def test_a_silent_port_fails_after_the_connect_timeout(tmp_path, silent_port, executor, module,
                                                       what):
    pytest.importorskip(module)
    rc, err, took = sweep_cli(tmp_path, "--executor", executor, "--address",
                              f"127.0.0.1:{silent_port}", "--connect-timeout", "1.5")
    assert (rc, err) == (2, f"pipesim: error: --address 127.0.0.1:{silent_port}: cannot reach "
                            f"the {what}: no answer within 1.5 s (--connect-timeout)\n")
    # it waited the timeout, then gave up: the upper bound only tells giving up from hanging (the
    # whole process imports ray or dask, 17-21 s on a loaded 2-core machine)
    assert 1.5 < took < 60
    assert not (tmp_path / "out").exists()


def test_unknown_hosts_and_addresses_without_a_port():
    from simulator.sweep.executors import ConnectError, _check_reachable, _host_port

    assert _host_port("10.0.0.1:6379") == ("10.0.0.1", 6379)
    assert _host_port("ray://head.example:10001") == ("head.example", 10001)
    assert _host_port("tcp://[::1]:8786") == ("::1", 8786)
    assert _host_port("auto") is None
    _check_reachable("auto", "Ray cluster", 1)  # nothing to check: Ray resolves it
    with pytest.raises(ConnectError) as info:
        _check_reachable("no-such-host.invalid:6379", "Ray cluster", 1)
    assert str(info.value).startswith("--address no-such-host.invalid:6379: cannot reach the Ray "
                                      "cluster: ")
    assert info.value.exit_code == 2


@pytest.mark.parametrize("bad", ["0", "-1", "nan"])
def test_connect_timeout_must_be_positive(tmp_path, bad, capsys):
    from simulator.cli.main import main

    write(tmp_path / "w.txt", workload_text(8))
    spec = write(tmp_path / "s.yaml", "workload: w.txt\ngrid:\n  pp: [1, 2]\n")
    rc = main(["sweep", str(spec), "--out", str(tmp_path / "o"), "--executor", "dask",
               "--address", "127.0.0.1:1", "--connect-timeout", bad])
    assert rc == 2
    assert capsys.readouterr().err == ("pipesim: error: --connect-timeout: expected a positive "
                                       f"number of seconds, got {float(bad):g}\n")


# --- Ray's InvalidAuthToken -----------------------------------------------------------------

AUTH_LINE = ("[2026-11-23 12:48:24,539 W 22189 22189] gcs_client.cc:210: Failed to get cluster ID "
             "from GCS server: Unauthenticated: RPC error: InvalidAuthToken: Authentication token "
             "is missing or incorrect\n")
AUTH_MESSAGE = ("--address 127.0.0.1:{port}: the Ray cluster refused this client's token "
                "(InvalidAuthToken): it uses token authentication; set RAY_AUTH_MODE=token and "
                "the cluster's token in RAY_AUTH_TOKEN (or ~/.ray/auth_token), or start the "
                "cluster with RAY_AUTH_MODE=disabled")


class FakeRay:
    """What Ray 2.60's ``ray.init`` does on a token-auth cluster without the token: its C++
    core writes AUTH_LINE to file descriptor 2 every second and gives up after about 20 s."""

    def __init__(self, released: threading.Event) -> None:
        self.released = released
        self.exceptions = types.SimpleNamespace(RayError=RuntimeError)

    def is_initialized(self) -> bool:
        return False

    def init(self, address: str, **kwargs) -> None:
        for _ in range(3):
            os.write(2, AUTH_LINE.encode())
            time.sleep(0.02)
        self.released.wait(20)  # (the test releases it at its end)
        raise ConnectionError(f"Failed to connect to Ray cluster at {address}")

    def shutdown(self) -> None:
        pass


def test_invalid_auth_token_is_one_line_naming_the_variable(silent_port, monkeypatch, capfd):
    from simulator.sweep.executors import ConnectError, make_executor

    released = threading.Event()
    monkeypatch.setitem(sys.modules, "ray", FakeRay(released))
    try:
        t0 = time.monotonic()
        with pytest.raises(ConnectError) as info:
            with make_executor("ray", 1, f"127.0.0.1:{silent_port}"):
                pass
        took = time.monotonic() - t0
        assert str(info.value) == AUTH_MESSAGE.format(port=silent_port)
        assert info.value.exit_code == 2
        assert took < 2  # not Ray's 20 s of retries
        assert capfd.readouterr().err == ""  # none of Ray's lines reach the terminal
    finally:
        released.set()


def test_ray_authentication_error_raised_by_init_is_explained(silent_port, monkeypatch):
    from simulator.sweep.executors import ConnectError, make_executor

    class AuthenticationError(RuntimeError):
        pass

    fake = FakeRay(threading.Event())

    def init(address, **kwargs):
        raise AuthenticationError("Token authentication is enabled but no token was found")

    fake.init = init
    monkeypatch.setitem(sys.modules, "ray", fake)
    with pytest.raises(ConnectError) as info:
        with make_executor("ray", 1, f"127.0.0.1:{silent_port}"):
            pass
    assert str(info.value) == AUTH_MESSAGE.format(port=silent_port)


# --- what the sweep says while it waits -------------------------------------------------------

class Recorder:
    """A reporter that records its calls."""

    def __init__(self) -> None:
        self.calls: list[tuple] = []

    def waiting(self, what: str) -> None:
        self.calls.append(("waiting", what))

    def start(self, total: int, already: int, workers: int, executor: str) -> None:
        self.calls.append(("start", total, already, workers, executor))

    def advance(self, ok: bool) -> None:
        self.calls.append(("advance", ok))

    def close(self) -> None:
        self.calls.append(("close",))


def test_the_reporter_says_what_is_awaited_and_is_closed_when_the_connect_fails(tmp_path):
    pytest.importorskip("distributed")
    from simulator.sweep.executors import ConnectError

    write(tmp_path / "w.txt", workload_text(8, pp_comm=1 << 20))
    spec = spec_from_dict({"workload": "w.txt", "grid": {"pp": [1, 2]}}, "s.yaml", tmp_path)
    port = closed_port()
    rec = Recorder()
    with pytest.raises(ConnectError):
        run_sweep(spec, tmp_path / "out", executor="dask", address=f"127.0.0.1:{port}",
                  connect_timeout=7, reporter=rec)
    assert rec.calls == [("waiting", f"connecting to the Dask scheduler at 127.0.0.1:{port} "
                                     "(up to 7 s, --connect-timeout)"), ("close",)]
    rec = Recorder()
    run_sweep(spec, tmp_path / "local", jobs=1, reporter=rec)  # local: nothing to wait for
    assert rec.calls == [("start", 2, 0, 1, "local"), ("advance", True), ("advance", True),
                         ("close",)]


def test_the_waiting_spinner_is_drawn_on_a_terminal_and_cleared():
    import io

    from rich.console import Console

    from simulator.sweep.progress import RichReporter

    buf = io.StringIO()
    console = Console(file=buf, force_terminal=True, width=160, color_system=None)
    rep = RichReporter("demo.yaml", console=console)
    rep.waiting("connecting to the Ray cluster at h:6379 (up to 30 s, --connect-timeout)")
    time.sleep(0.2)
    rep.start(1, 0, 2, "ray")
    rep.advance(True)
    rep.close()
    text = buf.getvalue()
    assert "connecting to the Ray cluster at h:6379 (up to 30 s, --connect-timeout)" in text
    assert text.index("connecting to") < text.index("demo.yaml (2 ray)")
    quiet = RichReporter("demo.yaml", enabled=False, console=console)
    quiet.waiting("connecting")
    quiet.close()
    assert buf.getvalue() == text
