"""Writes ``simulator/run_options.pyi``: :class:`~simulator.run_options.RunOptions` as a class a
type checker reads, generated from :data:`~simulator.run_options.FIELDS` (the one declaration).

``run_options.py`` builds RunOptions at import time from FIELDS (a NamedTuple, no dataclass:
start-up), which mypy and pyright cannot follow; the stub declares the same fields, in the same
order, with the same types and defaults, so ``RunOptions(pp=4).pp`` reads as ``int | None`` and
a wrong field name is an error. The stub costs nothing at run time (Python never imports a
``.pyi``). After changing FIELDS, run::

    python tests/make_run_options_stub.py           # rewrites simulator/run_options.pyi
    python tests/make_run_options_stub.py --check   # exit 1 when it is out of date

tests/test_run_options_stub.py fails while the stub and FIELDS disagree.
"""

from __future__ import annotations

import sys
import types
import typing
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from simulator.run_options import FIELDS  # noqa: E402  (the repository's, not an installed one)

STUB = REPO / "simulator" / "run_options.pyi"

HEADER = '''\
# Generated from FIELDS by `python tests/make_run_options_stub.py`; do not edit by hand
# (tests/test_run_options_stub.py fails when it is out of date).
"""Type checkers' view of :mod:`simulator.run_options` (the module builds RunOptions from
FIELDS at import time)."""

from typing import Any, Callable, Mapping, NamedTuple

from .engine.options import EngineOptions
from .errors import ConfigError
from .workload.stage_layers import PipelineSplit

ENGINES: tuple[str, ...]


class OptionField(NamedTuple):
    name: str
    type: Any
    default: Any
    metadata: dict[str, Any]


def _opt(name: str, type: Any, default: Any, help: str, *, flag: str | None = ...,
         short: str | None = ..., kind: str = ..., metavar: str | None = ...,
         choices: tuple[str, ...] = ..., multiple: bool = ...,
         api_only: bool = ...) -> OptionField: ...


FIELDS: tuple[OptionField, ...]


class RunOptions(NamedTuple):
    """Everything about one run that is neither the workload nor the system (the fields, their
    help and checks: FIELDS)."""

'''

FOOTER = '''
    @classmethod
    def from_values(cls, values: Mapping[str, Any], source: str = ...) -> RunOptions: ...
    @classmethod
    def given(cls, options: RunOptions | None, keywords: Mapping[str, Any]) -> RunOptions: ...
    def pipeline_split(self) -> PipelineSplit: ...
    def slow_ranks(self) -> tuple[tuple[int, float], ...]: ...
    def memory_limit_bytes(self, capacity_bytes: float) -> float | None: ...
    def engine_options(self, capacity_bytes: float) -> EngineOptions: ...


class OptionError(ConfigError):
    name: str
    expected: str
    value: Any
    def __init__(self, name: str, flag: str, expected: str, value: Any) -> None: ...
    def where(self, source: str) -> str: ...


def flag_of(f: OptionField) -> str: ...
def check(f: OptionField, value: Any, source: str = ...) -> Any: ...
def _check_one(kind: str, meta: dict[str, Any], value: Any, name: str, where: str) -> Any: ...


OPTION_FIELDS: tuple[OptionField, ...]
SWEEPABLE: tuple[str, ...]


def click_options(*, skip: tuple[str, ...] = ...) -> Callable[..., Any]: ...
def click_option_of(f: OptionField) -> Callable[..., Any]: ...
'''

# what the stub imports from typing: a field's type may name only these (and builtins)
TYPING_NAMES = ("Any", "Callable", "Mapping")


def type_text(t: object) -> str:
    """``t`` as it is written in the stub: ``int | None``, ``tuple[str, ...]``,
    ``Mapping[str, Any] | None``."""
    if t is None or t is type(None):
        return "None"
    if t is Ellipsis:
        return "..."
    if t is typing.Any:
        return "Any"
    origin = typing.get_origin(t)
    if isinstance(t, types.UnionType) or origin is typing.Union:
        return " | ".join(type_text(a) for a in typing.get_args(t))
    if origin is not None:
        name = getattr(t, "_name", None) or origin.__name__
        if origin.__module__ != "builtins" and name not in TYPING_NAMES:
            raise ValueError(f"a field's type names {name}: add it to the stub's imports")
        return f"{name}[{', '.join(type_text(a) for a in typing.get_args(t))}]"
    if isinstance(t, type) and t.__module__ == "builtins":
        return t.__name__
    raise ValueError(f"a field's type {t!r} is not one the stub can write: builtins, "
                     f"{', '.join(TYPING_NAMES)}, unions and their generics")


def render() -> str:
    """The stub's text for the FIELDS imported now."""
    fields = "".join(f"    {f.name}: {type_text(f.type)} = ...\n" for f in FIELDS)
    return HEADER + fields + FOOTER


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    text = render()
    if argv == ["--check"]:
        current = STUB.read_text() if STUB.exists() else ""
        if current != text:
            print(f"{STUB}: out of date with FIELDS; run python tests/make_run_options_stub.py",
                  file=sys.stderr)
            return 1
        return 0
    STUB.write_text(text)
    print(f"wrote {STUB}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
