"""Errors a user can act on.

Every error pipesim raises for bad input derives from :class:`PipesimError`; the CLI prints
``str(error)`` on one line and exits with ``error.exit_code`` (never a traceback). The message
names where the problem is (file:line:column, option, rank/position) and what was expected.
"""

from __future__ import annotations

from typing import NamedTuple


class PipesimError(Exception):
    """Base of all user-facing errors."""

    exit_code = 1


class WorkloadError(PipesimError):
    """A workload file that cannot be read: names ``path:line:column``, field, expected, found."""

    exit_code = 2

    def __init__(
        self,
        path: str,
        line: int | None,
        column: int | None,
        field: str,
        expected: str,
        found: str | None = None,
    ) -> None:
        self.path = str(path)
        self.line = line
        self.column = column
        self.field = field
        self.expected = expected
        self.found = found
        super().__init__(self._format())

    def _format(self) -> str:
        where = self.path
        if self.line is not None:
            where += f":{self.line}"
            if self.column is not None:
                where += f":{self.column}"
        msg = f"{where}: {self.field}: expected {self.expected}"
        if self.found is not None:
            msg += f", found {_show(self.found)}"
        return msg


def _show(found: str, limit: int = 40) -> str:
    text = found if len(found) <= limit else found[: limit - 3] + "..."
    return repr(text)


class ConfigError(PipesimError):
    """A bad option, system YAML or sweep spec: the message names the option or key."""

    exit_code = 2


class ScheduleError(PipesimError):
    """A schedule that is not valid: names the rank, the position and the action."""

    exit_code = 2

    def __init__(self, message: str, rank: int | None = None, position: int | None = None,
                 action: str | None = None) -> None:
        self.rank = rank
        self.position = position
        self.action = action
        where = []
        if rank is not None:
            where.append(f"rank {rank}")
        if position is not None:
            where.append(f"position {position}")
        if action is not None:
            where.append(f"action {action}")
        prefix = (", ".join(where) + ": ") if where else ""
        super().__init__(prefix + message)


# a NamedTuple, not a dataclass: start-up (simulator/__init__.py)
class Wait(NamedTuple):
    """What one blocked rank waits for when the simulation cannot go on."""

    rank: int
    op: str          # e.g. "recv 3F5" or "send 2F1"
    peer: int | None  # the rank it waits for, if any
    time_ns: float

    def __str__(self) -> str:
        if self.peer is None:
            peer = ""
        elif self.op.startswith("send"):
            peer = f" to rank {self.peer} (its receive is not posted)"
        else:
            peer = f" from rank {self.peer}"
        return f"rank {self.rank} waits on {self.op}{peer} (since t={self.time_ns:.0f} ns)"


class DeadlockError(PipesimError):
    """No rank can make progress: lists who waits for whom."""

    exit_code = 3

    # the line names this many waits and counts the others (at P = 2000 every rank waits: a
    # line of ~130,000 characters); all of them stay in ``waits``
    SHOWN = 10

    def __init__(self, waits: list[Wait], time_ns: float) -> None:
        self.waits = list(waits)
        self.time_ns = time_ns
        detail = "; ".join(str(w) for w in self.waits[:self.SHOWN])
        more = len(self.waits) - self.SHOWN
        if more > 0:
            detail += (f"; and {more:,} more ranks wait likewise" if more > 1
                       else "; and 1 more rank waits likewise")
        super().__init__(f"deadlock at t={time_ns:.0f} ns: {detail}")


class OutOfMemoryError(PipesimError):
    """A rank's memory exceeded the limit."""

    exit_code = 4
