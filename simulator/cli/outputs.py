"""Output paths are checked before the work starts: a plot, CSV or JSON that cannot be written
is one line and exit 2 at once, not a traceback (or a lost result) after the run."""

from __future__ import annotations

import contextlib
import os

from ..errors import ConfigError


def check_writable(path, option: str, make_folder: bool = False) -> None:
    """Refuse ``path`` (a file pipesim will write; None and ``-`` pass) when it is a folder, or
    cannot be written, or its folder does not exist or cannot be written in. With
    ``make_folder`` (a picture: ``--gantt``, ``--plot``, whose writer makes its folders) a
    folder that does not exist yet passes when the nearest one above it can be written in."""
    if path is None or path == "-":
        return
    name = os.fspath(path)
    if os.path.isdir(name):
        raise ConfigError(f"{option}: cannot write {name}: is a folder; expected a file name")
    if os.path.exists(name):
        if not os.access(name, os.W_OK):
            raise ConfigError(f"{option}: cannot write {name}: permission denied")
        return
    _check_folder(os.path.dirname(name) or ".", name, option, create=make_folder)


def check_writable_dir(path, option: str) -> None:
    """Refuse the output folder ``path`` when it is a file, or it (or, when it does not exist
    yet, the nearest folder above it, where it will be made) cannot be written in."""
    if path is None:
        return
    name = os.fspath(path)
    if os.path.exists(name) and not os.path.isdir(name):
        raise ConfigError(f"{option}: cannot write in {name}: is a file; expected a folder")
    _check_folder(name, name, option, create=True)


def _check_folder(folder: str, name: str, option: str, create: bool) -> None:
    probe = folder
    while not os.path.exists(probe):
        if not create:
            raise ConfigError(f"{option}: cannot write {name}: folder {folder} does not exist")
        parent = os.path.dirname(os.path.abspath(probe))
        if parent == os.path.abspath(probe):
            break
        probe = parent
    if not os.path.isdir(probe):
        raise ConfigError(f"{option}: cannot write {name}: {probe} is not a folder")
    if not os.access(probe, os.W_OK | os.X_OK):
        raise ConfigError(f"{option}: cannot write {name}: permission denied in {probe}")


@contextlib.contextmanager
def out_dir_lock(path, option: str):
    """Hold the output folder ``path`` for this run: a second pipesim writing the same folder
    at once (two plans streaming one candidates.jsonl duplicated its rows) is refused in one
    line. The lock is a file in the temporary folder named after the folder's real path, so
    the folder itself is neither created nor touched until the run writes it."""
    # for the folder lock only (sweep, plan): a plain run's start-up does without them
    import fcntl
    import hashlib
    import tempfile

    key = hashlib.sha256(os.path.realpath(os.fspath(path)).encode()).hexdigest()[:16]
    lock = os.path.join(tempfile.gettempdir(), f"pipesim-out-{key}.lock")
    try:
        fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o666)
    except OSError:
        yield   # no lock can be made (a read-only temporary folder): run unguarded
        return
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            holder = os.read(fd, 32).decode(errors="replace").strip() or "?"
            raise ConfigError(f"{option}: {os.fspath(path)} is being written by another pipesim "
                              f"run (pid {holder}); wait for it to finish or choose another "
                              "folder") from None
        os.ftruncate(fd, 0)
        os.write(fd, str(os.getpid()).encode())
        yield
    finally:
        os.close(fd)   # closing releases the lock
