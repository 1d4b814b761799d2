"""Warnings: numbers pipesim cannot fully stand behind, and the defaults behind them.

A warning is an assumption that changes a reported number (a defaulted GPU count, a derived
``pp_comm``, an assumed GPU memory) or a number that is probably wrong as it stands (transfers
that cost nothing). Each carries a stable ``code`` for scripts, a message saying what was
assumed and why it matters, and the ``option`` that settles it. Information that changes no
number stays a note. ``--strict`` turns any warning into an error (exit 2).
"""

from __future__ import annotations

from typing import NamedTuple

from .errors import ConfigError


# a NamedTuple, not a dataclass: start-up (simulator/__init__.py)
class RunWarning(NamedTuple):
    """One assumption a run had to make: a stable code, the message, and the option to set."""

    code: str
    message: str
    option: str = ""

    def to_dict(self) -> dict[str, str]:
        return {"code": self.code, "message": self.message, "option": self.option}

    def __str__(self) -> str:
        return f"{self.message} (set {self.option})" if self.option else self.message


class StrictError(ConfigError):
    """A warning under ``--strict``: the run is refused with the warning's text."""

    def __init__(self, warning: RunWarning) -> None:
        super().__init__(f"--strict: {warning} [{warning.code}]")
        self.warning = warning


def enforce_strict(warnings: list[RunWarning] | tuple[RunWarning, ...]) -> None:
    if warnings:
        raise StrictError(warnings[0])
