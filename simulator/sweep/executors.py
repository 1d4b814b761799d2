"""Where a sweep's points run: local worker processes, a Ray cluster, or a Dask cluster.

Each executor runs a picklable function over tasks and yields results as they finish, keeping
only a small window of tasks in flight (twice the workers), so a killed sweep loses little and a
huge sweep does not sit in memory. Ray and Dask are imported only when asked for, with a clear
error when the extra is not installed. The same points give the same rows whichever runs them:
the simulation is deterministic and the table is sorted into point order at the end.
"""

from __future__ import annotations

import atexit
import ctypes
import logging
import multiprocessing
import os
import select
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import zipfile
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from pathlib import Path
from typing import Any

import simulator
from ..errors import ConfigError, PipesimError

EXECUTORS = ("local", "ray", "dask")


class ExecutorError(PipesimError):
    """The executor itself failed (a worker process died, the cluster went away)."""

    exit_code = 1


class ConnectError(ExecutorError):
    """The cluster named by ``--address`` cannot be reached, or refuses this client: bad input."""

    exit_code = 2


DEFAULT_CONNECT_TIMEOUT_S = 30.0

# what Ray's gRPC layer logs, once a second, while the cluster refuses this client's token
_RAY_AUTH_MARKERS = ("InvalidAuthToken", "UNAUTHENTICATED", "Unauthenticated")


def _run_chunk(fn: Callable[[Any], Any], chunk: list) -> list:
    return [fn(task) for task in chunk]


def _init_worker(driver_pid: int) -> None:
    """Set up a local worker process: it leaves Ctrl-C to the driver (which stops the sweep
    cleanly) and dies with the driver, ``kill -9`` included.

    A killed driver runs no cleanup, and its workers would live on: each holds the pipes of the
    pool, so none sees an end of file, and the forkserver and the resource tracker (which exit
    only when every holder of their pipe is gone) stay with them. The worker's parent is the
    forkserver, not the driver, so ``PR_SET_PDEATHSIG`` alone covers only the forkserver's
    death; a thread waits on the driver's pid itself and ends the process when it exits.
    """
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    _set_parent_death_signal()
    _exit_when_gone(driver_pid)


def _set_parent_death_signal() -> None:
    """Linux: the kernel sends SIGKILL to this process when its parent dies."""
    if not sys.platform.startswith("linux"):
        return

    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGKILL, 0, 0, 0)  # PR_SET_PDEATHSIG = 1
    except (OSError, AttributeError):  # no prctl: the watch thread still covers the driver
        pass


def _exit_when_gone(pid: int, poll_s: float = 0.2) -> None:
    """End this process (``os._exit``) as soon as process ``pid`` has exited.

    Linux waits on a pidfd (woken the moment it exits); elsewhere the thread polls.
    """
    fd = None
    try:
        fd = os.pidfd_open(pid)
    except ProcessLookupError:
        os._exit(_ORPHANED)  # the driver died before this worker started
    except (AttributeError, OSError):
        pass

    def watch() -> None:
        if fd is not None:
            select.select([fd], [], [])
        else:
            while _alive(pid):
                time.sleep(poll_s)
        os._exit(_ORPHANED)

    threading.Thread(target=watch, name="pipesim-driver-watch", daemon=True).start()


_ORPHANED = 70  # a worker's exit status when its driver is gone (nobody reads it)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class LocalExecutor:
    """``jobs`` worker processes (``concurrent.futures``); ``jobs == 1`` runs in this process.

    Points go to the workers in chunks of up to ``MAX_CHUNK`` (fewer hand-offs between
    processes: the driver shares the CPUs with the workers), small enough that a kill loses
    little: at most ``2 * jobs`` chunks are in flight.
    """

    name = "local"
    MAX_CHUNK = 4
    starting = None  # (its workers start in a moment: nothing to say while waiting)

    def __init__(self, jobs: int | None = None) -> None:
        self.workers = jobs or os.cpu_count() or 1
        self._pool = None

    def __enter__(self) -> "LocalExecutor":
        if self.workers > 1:
            # forkserver where there is one: a clean server process, with the simulator
            # imported once, forks the workers (forking this process could copy a lock held by
            # another thread); elsewhere the platform's default (spawn)
            ctx = None
            if "forkserver" in multiprocessing.get_all_start_methods():
                ctx = multiprocessing.get_context("forkserver")
                ctx.set_forkserver_preload(["simulator.sweep.worker", "simulator.api"])
            self._pool = ProcessPoolExecutor(self.workers, mp_context=ctx,
                                             initializer=_init_worker,
                                             initargs=(os.getpid(),))
        return self

    def __exit__(self, *exc: Any) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
            self._pool = None

    def map_unordered(self, fn: Callable[[Any], Any], tasks: Iterable[Any]) -> Iterator[Any]:
        if self._pool is None:
            for task in tasks:
                yield fn(task)
            return

        tasks = list(tasks)
        size = max(1, min(self.MAX_CHUNK, len(tasks) // (16 * self.workers)))
        todo = iter([tasks[i:i + size] for i in range(0, len(tasks), size)])
        pending: set = set()
        window = 2 * self.workers
        while True:
            for chunk in todo:
                pending.add(self._pool.submit(_run_chunk, fn, chunk))
                if len(pending) >= window:
                    break
            if not pending:
                return
            done, pending = wait(pending, return_when=FIRST_COMPLETED)
            for fut in done:
                try:
                    yield from fut.result()
                except BrokenProcessPool:
                    raise ExecutorError(
                        "a sweep worker process died (killed, or out of memory); the finished "
                        "points are saved: rerun with --resume") from None


class RayExecutor:
    """Tasks on a Ray cluster (``address`` as ``ray.init`` takes it), or on a local Ray."""

    name = "ray"

    def __init__(self, jobs: int | None = None, address: str | None = None,
                 connect_timeout: float = DEFAULT_CONNECT_TIMEOUT_S) -> None:
        self.jobs = jobs
        self.address = address
        self.connect_timeout = connect_timeout
        self.workers = jobs or 1
        self._ray = None
        self._owned = False
        self._reaper: Any = None

    @property
    def starting(self) -> str:
        """What the sweep waits for before its first point."""
        if self.address is None:
            return "starting a local Ray instance"
        return (f"connecting to the Ray cluster at {self.address} (up to "
                f"{self.connect_timeout:g} s, --connect-timeout)")

    def __enter__(self) -> "RayExecutor":
        try:
            # optional extra
            import ray
        except ImportError:
            raise ExecutorError("--executor ray: ray is not installed; install pipesim[ray] "
                                "(pip install 'pipesim[ray]')") from None
        self._ray = ray
        if not ray.is_initialized():
            kwargs: dict[str, Any] = {
                "include_dashboard": False, "log_to_driver": False, "logging_level": "ERROR",
                # ship this simulator package: the workers run exactly the driver's code
                "runtime_env": {"py_modules": [str(Path(simulator.__file__).parent)]},
            }
            if self.address is None:
                if self.jobs:
                    kwargs["num_cpus"] = self.jobs
                before = _descendants()
                try:
                    # "local": always a new instance here, never a cluster found lying around
                    ray.init(address="local", **kwargs)
                except (ConnectionError, ValueError, RuntimeError) as err:
                    raise ExecutorError(f"--executor ray: cannot start a local Ray: "
                                        f"{_first_line(err)}") from None
                self._reaper = _start_reaper(_descendants() - before)
            else:
                _ray_connect(ray, self.address, kwargs, self.connect_timeout)
            self._owned = True
        if not self.jobs:
            self.workers = max(1, int(ray.cluster_resources().get("CPU", 1)))
        return self

    def __exit__(self, *exc: Any) -> None:
        if self._owned:
            self._ray.shutdown()
            self._owned = False
        if self._reaper is not None:
            self._reaper.stdin.close()  # its cue: whatever of the local Ray is left goes now
            self._reaper.wait()
            self._reaper = None

    def map_unordered(self, fn: Callable[[Any], Any], tasks: Iterable[Any]) -> Iterator[Any]:
        ray = self._ray
        remote = ray.remote(fn).options(num_cpus=1, max_retries=0)
        todo = iter(tasks)
        pending: list = []
        window = 2 * self.workers
        while True:
            for task in todo:
                pending.append(remote.remote(task))
                if len(pending) >= window:
                    break
            if not pending:
                return
            done, pending = ray.wait(pending, num_returns=1)
            try:
                yield ray.get(done[0])
            except ray.exceptions.RayError as err:
                raise ExecutorError(f"a Ray worker failed: {_first_line(err)}; the finished "
                                    "points are saved: rerun with --resume") from None


def _descendants() -> set[tuple[int, float]]:
    """``(pid, start time)`` of every process this one started, directly or not (psutil comes
    with Ray, perhaps only in Ray's own folder of third-party packages)."""
    try:
        # optional (with ray)
        import psutil
    except ImportError:
        return set()
    found = set()
    for child in psutil.Process().children(recursive=True):
        try:
            found.add((child.pid, child.create_time()))
        except psutil.Error:  # it exited meanwhile
            pass
    return found


# The reaper: waits for end of file on its stdin (the driver closes it, or the driver dies,
# kill -9 included), then kills the listed processes that are still the ones listed (same
# start time: a pid reused meanwhile is left alone).
_REAPER = """\
import signal, sys
signal.signal(signal.SIGINT, signal.SIG_IGN)  # a Ctrl-C meant for the driver
sys.path.insert(0, sys.argv[1])
import psutil
sys.stdin.buffer.read()
for item in sys.argv[2:]:
    pid, started = item.split("@")
    try:
        proc = psutil.Process(int(pid))
        if proc.create_time() == float(started):
            proc.kill()
    except psutil.Error:
        pass
"""


def _start_reaper(processes: set[tuple[int, float]]) -> Any:
    """A process that kills ``processes`` (a local Ray) once this process is gone.

    Ray ties its local cluster to the driver (``PR_SET_PDEATHSIG``), and after a ``kill -9`` its
    GCS, raylet and workers go within a second or two; but its two agent processes (runtime
    env, dashboard) first try to report the raylet's death to the dead GCS and stay for Ray's
    fixed 60 s timeout. The reaper ends them at once.
    """
    # optional (with ray)
    import psutil

    if not processes:
        return None
    where = str(Path(psutil.__file__).parents[1])  # the folder psutil was imported from
    args = [f"{pid}@{started!r}" for pid, started in sorted(processes)]
    return subprocess.Popen([sys.executable, "-c", _REAPER, where, *args],
                            stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)


class DaskExecutor:
    """Tasks on a Dask scheduler at ``address``, or on a new local cluster of ``jobs`` processes."""

    name = "dask"

    def __init__(self, jobs: int | None = None, address: str | None = None,
                 connect_timeout: float = DEFAULT_CONNECT_TIMEOUT_S) -> None:
        self.jobs = jobs
        self.address = address
        self.connect_timeout = connect_timeout
        self.workers = jobs or 1
        self._client = None
        self._cluster = None

    @property
    def starting(self) -> str:
        """What the sweep waits for before its first point."""
        if self.address is None:
            return "starting a local Dask cluster"
        return (f"connecting to the Dask scheduler at {self.address} (up to "
                f"{self.connect_timeout:g} s, --connect-timeout)")

    def __enter__(self) -> "DaskExecutor":
        try:
            # optional extra
            from dask.distributed import Client, LocalCluster
        except ImportError:
            raise ExecutorError("--executor dask: dask.distributed is not installed; install "
                                "pipesim[dask] (pip install 'pipesim[dask]')") from None

        try:
            if self.address is None:
                self._cluster = LocalCluster(n_workers=self.jobs or os.cpu_count() or 1,
                                             threads_per_worker=1, processes=True,
                                             dashboard_address=None,
                                             # no dashboard, and its HTTP server on a free port
                                             # (the default, 8787, warns when taken)
                                             scheduler_kwargs={"dashboard_address": ":0"},
                                             silence_logs=logging.ERROR)
                self._client = Client(self._cluster)
            else:
                self._client = _connect_within(
                    self.address, "Dask scheduler", self.connect_timeout,
                    lambda: Client(self.address, timeout=self.connect_timeout))
                _ship_code(self._client)
        except (OSError, TimeoutError) as err:
            self.__exit__()
            if self.address is None:
                raise ExecutorError(f"--executor dask: cannot start a local cluster: "
                                    f"{_first_line(err)}") from None
            raise ConnectError(f"--address {self.address}: cannot reach the Dask scheduler: "
                               f"{_first_line(err)}") from None
        except ConnectError:
            self.__exit__()
            raise
        if not self.jobs:
            self.workers = max(1, sum(self._client.nthreads().values()))
        return self

    def __exit__(self, *exc: Any) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None
        if self._cluster is not None:
            self._cluster.close()
            self._cluster = None

    def map_unordered(self, fn: Callable[[Any], Any], tasks: Iterable[Any]) -> Iterator[Any]:
        # optional extra
        from dask.distributed import as_completed

        client = self._client
        todo = iter(tasks)
        window = 2 * self.workers
        first = [client.submit(fn, t, pure=False) for _, t in zip(range(window), todo)]
        running = as_completed(first)
        for fut in running:
            try:
                result = fut.result()
            except Exception as err:  # noqa: BLE001 -- run_point never raises: the worker died
                raise ExecutorError(f"a Dask worker failed: {type(err).__name__}: "
                                    f"{_first_line(err)}; the finished points are saved: rerun "
                                    "with --resume") from None
            fut.release()
            nxt = next(todo, None)
            if nxt is not None:
                running.add(client.submit(fn, nxt, pure=False))
            yield result


def _ship_code(client: Any) -> None:
    """Upload this simulator package (a zip) to the Dask scheduler and workers: they run the
    driver's code, as Ray's ``py_modules`` does; their environment supplies the dependencies."""
    root = Path(simulator.__file__).parent
    with tempfile.TemporaryDirectory() as tmp:
        archive = Path(tmp) / "pipesim_simulator.zip"
        with zipfile.ZipFile(archive, "w", zipfile.ZIP_DEFLATED) as zf:
            for path in sorted(root.rglob("*")):
                if path.is_file() and "__pycache__" not in path.parts:
                    zf.write(path, path.relative_to(root.parent))
        client.upload_file(str(archive))


def _host_port(address: str) -> tuple[str, int] | None:
    """The ``(host, port)`` an address names (``HOST:PORT``, ``ray://HOST:PORT``,
    ``tcp://[::1]:PORT``), or None when it names none (Ray's ``auto``)."""
    rest = address.split("://", 1)[-1].rstrip("/")
    host, sep, port = rest.rpartition(":")
    if not sep or not host or not port.isdigit():
        return None
    return host.strip("[]"), int(port)


def _check_reachable(address: str, what: str, timeout: float) -> None:
    """Open (and close) a TCP connection to the address first: a closed port or an unknown
    host fails at once, a silent one after ``timeout``, where Ray would retry for minutes."""
    where = _host_port(address)
    if where is None:
        return
    try:
        socket.create_connection(where, timeout=timeout).close()
    except socket.timeout:
        raise ConnectError(_no_answer(address, what, timeout)) from None
    except OSError as err:
        raise ConnectError(f"--address {address}: cannot reach the {what}: "
                           f"{err.strerror or _first_line(err)}") from None


def _ray_auth_error(address: str) -> ConnectError:
    return ConnectError(
        f"--address {address}: the Ray cluster refused this client's token (InvalidAuthToken): "
        "it uses token authentication; set RAY_AUTH_MODE=token and the cluster's token in "
        "RAY_AUTH_TOKEN (or ~/.ray/auth_token), or start the cluster with RAY_AUTH_MODE=disabled")


def _ray_connect(ray: Any, address: str, kwargs: dict[str, Any], timeout: float) -> None:
    """``ray.init`` on the cluster at ``address``, failing within ``timeout`` with one line.

    Ray retries a connection for minutes and, when the cluster refuses the client's token,
    logs an ``InvalidAuthToken`` line a second from its C++ core, straight to file descriptor
    2: that is kept from the terminal and recognised at its first line.
    """
    def refused(text: str) -> bool:
        return any(m in text for m in _RAY_AUTH_MARKERS)

    def given_up() -> None:  # the half-made connection: Ray's exit hook would wait on it

        atexit.unregister(ray.shutdown)

    try:
        _connect_within(address, "Ray cluster", timeout,
                        lambda: ray.init(address=address, **kwargs), refused, given_up)
    except _Refused:
        raise _ray_auth_error(address) from None
    except ConnectError:
        raise
    except Exception as err:  # noqa: BLE001 -- any failure of ray.init is a failed connection
        if type(err).__name__ == "AuthenticationError" or refused(str(err)):
            raise _ray_auth_error(address) from None
        raise ConnectError(f"--address {address}: cannot reach the Ray cluster: "
                           f"{_first_line(err)}") from None


class _Refused(Exception):
    """What the connection logged says the cluster refused it."""


def _connect_within(address: str, what: str, timeout: float, connect: Callable[[], Any],
                    refused: Callable[[str], bool] = lambda text: False,
                    given_up: Callable[[], None] = lambda: None) -> Any:
    """``connect()`` within ``timeout`` seconds, or :class:`ConnectError`.

    A TCP check comes first (a closed port fails at once). Ray and Dask retry, or wait on a
    port that accepts but never answers, far longer than asked, so ``connect`` runs in a
    daemon thread that this one gives up on at the deadline (it ends with the process; then
    ``given_up`` runs). Meanwhile file descriptor 2 goes to a file, as C++ libraries log
    there; :class:`_Refused` as soon as ``refused(logged text)``. ``connect``'s own exception
    is re-raised here.
    """
    deadline = time.monotonic() + timeout
    _check_reachable(address, what, timeout)
    outcome: dict[str, Any] = {}

    def run() -> None:
        try:
            outcome["value"] = connect()
        except BaseException as err:  # noqa: BLE001 -- re-raised by the waiting thread
            outcome["error"] = err

    with _stderr_to_file() as logged:
        thread = threading.Thread(target=run, name="pipesim-connect", daemon=True)
        thread.start()
        while thread.is_alive():
            thread.join(0.05)
            if thread.is_alive() and refused(logged()):
                given_up()
                raise _Refused()
            if thread.is_alive() and time.monotonic() > deadline:
                given_up()
                raise ConnectError(_no_answer(address, what, timeout))
        if refused(logged()):
            raise _Refused()
    if "error" in outcome:
        raise outcome["error"]
    return outcome["value"]


def _no_answer(address: str, what: str, timeout: float) -> str:
    return f"--address {address}: cannot reach the {what}: no answer within {timeout:g} s " \
           "(--connect-timeout)"


class _stderr_to_file:
    """Send file descriptor 2 (where C++ libraries log) to a temporary file meanwhile, while
    ``sys.stderr`` (pipesim's own messages, the progress spinner) still reaches the terminal;
    calling the context's value returns what was logged so far."""

    def __enter__(self) -> Callable[[], str]:
        sys.stderr.flush()
        self._tmp = tempfile.TemporaryFile()
        self._saved = os.dup(2)
        self._stderr = sys.stderr
        sys.stderr = open(os.dup(self._saved), "w", buffering=1,  # noqa: SIM115
                          encoding=getattr(self._stderr, "encoding", None) or "utf-8",
                          errors="backslashreplace")
        os.dup2(self._tmp.fileno(), 2)
        return self.text

    def text(self) -> str:
        size = os.fstat(self._tmp.fileno()).st_size
        return os.pread(self._tmp.fileno(), size, 0).decode(errors="replace")

    def __exit__(self, *exc: Any) -> None:
        ours, sys.stderr = sys.stderr, self._stderr
        ours.close()
        os.dup2(self._saved, 2)
        os.close(self._saved)
        self._tmp.close()


def _first_line(err: BaseException) -> str:
    text = str(err).strip()
    return text.splitlines()[0] if text else type(err).__name__


def make_executor(name: str, jobs: int | None = None, address: str | None = None,
                  connect_timeout: float = DEFAULT_CONNECT_TIMEOUT_S) -> Any:
    """The executor called ``name`` (``local``, ``ray`` or ``dask``); not yet started.

    ``connect_timeout``: seconds to reach the cluster at ``address`` before giving up."""
    if jobs is not None and jobs < 1:
        raise ConfigError(f"--jobs: expected a positive integer, got {jobs}")
    if not connect_timeout > 0:  # also refuses nan
        raise ConfigError(f"--connect-timeout: expected a positive number of seconds, got "
                          f"{connect_timeout:g}")
    if name == "local":
        if address is not None:
            raise ConfigError("--address: only with --executor ray or dask")
        return LocalExecutor(jobs)
    if name == "ray":
        return RayExecutor(jobs, address, connect_timeout)
    if name == "dask":
        return DaskExecutor(jobs, address, connect_timeout)
    raise ConfigError(f"--executor: expected one of {', '.join(EXECUTORS)}, found {name!r}")
