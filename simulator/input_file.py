"""Reading a file the user names: the one way every input file (workload, YAML, CSV, trace) is
read, so that a FIFO, ``/dev/zero``, a directory or a file too large to be what it claims is
refused in one line before anything is read, instead of waiting in ``open()`` or reading until
memory runs out.

Kept to ``os`` and ``stat``: ``pipesim run`` reads its workload through here and its start-up
time counts.
"""

from __future__ import annotations

import os
import stat

MiB = 1 << 20
# The largest file of each kind pipesim reads. Real workload files are well under 1 MiB (the
# largest in ../shared/workloads-real: 190 kB) and a system or sweep YAML a few kB; a file
# above its limit is not what it claims to be, or more than the rest of pipesim could use.
MAX_WORKLOAD_BYTES = 64 * MiB
MAX_YAML_BYTES = MiB // 4   # PyYAML's Python parser reads ~100-300 kB a second
MAX_CSV_BYTES = 64 * MiB
MAX_TRACE_BYTES = 1024 * MiB

_KINDS = ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO (named pipe)"),
          (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
          (stat.S_ISSOCK, "a socket"))


class InputFileError(Exception):
    """What is wrong with a file, before the caller turns it into its own error class."""

    def __init__(self, problem: str, expected: str = "a readable file",
                 found: str | None = None) -> None:
        super().__init__(problem)
        self.problem = problem          # the whole sentence: "is a FIFO (named pipe), not ..."
        self.expected = expected        # or in two parts, for messages built as
        self.found = problem if found is None else found   # "expected X, found Y"


def not_regular(mode: int) -> str | None:
    """What a file of this ``st_mode`` is when it is not a regular file (None when it is)."""
    if stat.S_ISREG(mode):
        return None
    for test, what in _KINDS:
        if test(mode):
            return what
    return "not a regular file"


def read_input_bytes(path, limit: int) -> bytes:
    """The bytes of the regular file at ``path``, at most ``limit`` of them; anything else is
    an :class:`InputFileError` saying what the file is (a directory, a FIFO, a device, too
    large) or why it cannot be read."""
    name = os.fspath(path)
    if not isinstance(name, str) or not name or name.endswith(("/", ".")):
        # names pathlib rewrites ("", "f/", "f/."), as it would; imported only for them, as
        # pathlib costs ``pipesim run`` ~8 ms of start-up
        from pathlib import Path
        name = str(Path(os.fsdecode(name)))
    try:
        st = os.stat(name)            # never blocks, unlike open() on a FIFO
    except OSError as err:
        raise InputFileError(err.strerror or type(err).__name__) from None
    what = not_regular(st.st_mode)
    if what is not None:
        raise InputFileError(f"is {what}, not a regular file", "a regular file", what)
    if st.st_size > limit:
        raise InputFileError(f"{st.st_size:,} bytes, above the limit of {_size(limit)} "
                             "for this kind of file", f"a file of at most {_size(limit)}",
                             f"{st.st_size:,} bytes")
    try:
        fd = os.open(name, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    except OSError as err:
        raise InputFileError(err.strerror or type(err).__name__) from None
    try:
        what = not_regular(os.fstat(fd).st_mode)   # replaced since the stat: look again
        if what is not None:
            raise InputFileError(f"is {what}, not a regular file", "a regular file", what)
        chunks = []
        left = limit + 1
        while left > 0:
            chunk = os.read(fd, min(left, 16 * MiB))
            if not chunk:
                break
            chunks.append(chunk)
            left -= len(chunk)
    except OSError as err:
        raise InputFileError(err.strerror or type(err).__name__) from None
    finally:
        os.close(fd)
    data = b"".join(chunks)
    if len(data) > limit:   # a file that grows while read, or one whose size stat does not say
        raise InputFileError(f"more than {_size(limit)}, the limit for this kind of file",
                             f"a file of at most {_size(limit)}", f"more than {_size(limit)}")
    return data


def decode_utf8(data: bytes) -> str:
    """``data`` as text; an undecodable byte is an :class:`InputFileError` at its line:column
    (``problem`` starts with ``LINE:COLUMN: ``)."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as err:
        line = data.count(b"\n", 0, err.start) + 1
        start = data.rfind(b"\n", 0, err.start) + 1
        column = len(data[start:err.start].decode("utf-8", errors="replace")) + 1
        raise InputFileError(f"{line}:{column}: not UTF-8 text (byte "
                             f"0x{data[err.start]:02x})") from None


def _size(n: int) -> str:
    return f"{n // MiB} MiB" if n >= MiB and n % MiB == 0 else f"{n:,} bytes"
