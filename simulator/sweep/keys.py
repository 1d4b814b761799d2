"""The options a sweep can set, and how each value is checked at the edge.

A key is one of the ``pipesim run`` options (``workload``, ``system``, and every field of
:class:`simulator.run_options.RunOptions`: ``schedule``, ``pp``, ``microbatches``, ``p2p``,
``jitter``, ``seed``, ``slow_rank``, ``memory_limit``, ...), a system value by dotted path
(``system.links.bandwidth_gbps``; applied with :meth:`SystemConfig.with_overrides`), or a schedule
generator option (``schedule_options.group_size``). Every checker returns the normalised value or
raises :class:`BadValue` saying what it expected; the spec loader adds the file and the key.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from ..errors import ConfigError
from ..run_options import FIELDS, check
from ..schedules import registry
from ..system.config import SystemConfig, load_system

SYSTEM_PREFIX = "system."
OPTIONS_PREFIX = "schedule_options."


class BadValue(Exception):
    """A value of the wrong kind; ``detail`` replaces the kind's own wording when given."""

    def __init__(self, detail: str | None = None) -> None:
        super().__init__(detail or "")
        self.detail = detail


@dataclass(frozen=True)
class KeyKind:
    one: str                      # "a positive integer"
    many: str                     # "positive integers"
    check: Callable[[Any, Path], Any]
    dtype: str                    # pandas dtype of the column in the results table


def _schedule(value: Any, base: Path) -> str:
    if not isinstance(value, str):
        raise BadValue()
    try:
        return registry.get(value).name
    except ConfigError:
        raise BadValue("expected a registered schedule (one of: "
                       + ", ".join(sorted(registry.names())) + f"), found {value!r}") from None


def _bool(value: Any, base: Path) -> bool:
    if not isinstance(value, bool):
        raise BadValue()
    return value


def _file(value: Any, base: Path) -> str:
    if not isinstance(value, str) or not value:
        raise BadValue()
    try:
        found = (base / value).is_file()
    except OSError as err:      # a name too long for the file system, ...
        raise BadValue(f"expected a readable file (relative to {base}), found "
                       f"{value[:60]!r}{'...' if len(value) > 60 else ''} "
                       f"({err.strerror})") from None
    if not found:
        raise BadValue(f"expected a readable file (relative to {base}), found {value!r}")
    return value


def _system_file(value: Any, base: Path) -> str:
    """A system YAML: it must exist and load (its own errors name the file, line and key)."""
    value = _file(value, base)
    load_system(base / value)
    return value


def _scalar(value: Any, base: Path) -> Any:
    if not isinstance(value, (str, int, float, bool)):
        raise BadValue()
    return value


_KIND_TEXT = {
    "positive": ("a positive integer", "positive integers", "Int64"),
    "non_negative": ("a whole number >= 0", "whole numbers >= 0", "Int64"),
    "positive_number": ("a positive number", "positive numbers", "float64"),
    "non_negative_number": ("a number >= 0", "numbers >= 0", "float64"),
    "bool": ("true or false", "booleans", "boolean"),
    "string": ("a string", "strings", "string"),
    "slow_rank": ("R:FACTOR pairs like '2:1.5' or '2:1.5,3:2'", "R:FACTOR pairs", "string"),
}


def _run_option_kind(f) -> KeyKind:
    """A sweep key for a RunOptions field: checked as ``pipesim run`` checks it."""
    meta = f.metadata
    if meta["kind"] == "choice":
        one = "one of " + ", ".join(meta["choices"])
        plural = {"layout": "layouts", "p2p": "p2p modes", "engine": "engines"}.get(
            f.name, f.name + " values")
        many, dtype = f"{plural} ({', '.join(meta['choices'])})", "string"
    else:
        one, many, dtype = _KIND_TEXT[meta["kind"]]

    def check_value(value: Any, base: Path) -> Any:
        if meta["kind"] == "slow_rank":
            if not isinstance(value, str) or not value:
                raise BadValue()
            items = [v.strip() for v in value.split(",")]
        else:
            items = value
        try:
            check(f, items)
        except ConfigError:
            raise BadValue() from None
        return value

    return KeyKind(one, many, check_value, dtype)


def _run_keys() -> dict[str, KeyKind]:
    """Every run option that changes a simulated number (simulator.run_options), plus the
    workload and system files."""
    keys = {
        "workload": KeyKind("a workload file path", "workload file paths", _file, "string"),
        "system": KeyKind("a system YAML path", "system YAML paths", _system_file, "string"),
        "schedule": KeyKind("a schedule name", "schedule names", _schedule, "string"),
    }
    for f in FIELDS:
        if f.name not in keys and not f.metadata["api_only"]:
            keys[f.name] = _run_option_kind(f)
    return keys


RUN_KEYS: dict[str, KeyKind] = _run_keys()


def _system_value(dotted: str) -> KeyKind:
    """A system leaf: the default config says whether it is a string (name) or a number."""
    path = dotted[len(SYSTEM_PREFIX):]
    node: Any = SystemConfig().to_dict()
    for part in path.split("."):
        if not isinstance(node, dict) or part not in node:
            raise BadValue(f"unknown system key {path!r}")
        node = node[part]
    if isinstance(node, dict):
        raise BadValue(f"{path!r} is a section, not a value; name one of its keys: "
                       + ", ".join(sorted(node)))
    if isinstance(node, str):
        def check_str(value: Any, base: Path) -> str:
            if not isinstance(value, str):
                raise BadValue()
            return value
        return KeyKind("a string", "strings", check_str, "string")

    def check_number(value: Any, base: Path) -> float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise BadValue()
        try:
            SystemConfig().with_overrides({path: value})
        except ConfigError:
            raise BadValue() from None
        return float(value)

    positive = path.rsplit(".", 1)[-1] in ("bandwidth_gbps", "compute_scale")
    if positive:
        return KeyKind("a positive number", "positive numbers", check_number, "float64")
    return KeyKind("a number >= 0", "numbers >= 0", check_number, "float64")


def kind_of(key: str) -> KeyKind:
    """The kind of ``key``; :class:`BadValue` (with the reason) for a key sweeps do not know."""
    if not isinstance(key, str):
        raise BadValue(f"expected an option name, found {key!r}")
    if key in RUN_KEYS:
        return RUN_KEYS[key]
    if key.startswith(SYSTEM_PREFIX):
        return _system_value(key)
    if key.startswith(OPTIONS_PREFIX) and key[len(OPTIONS_PREFIX):].isidentifier():
        return KeyKind("a string, number or boolean", "strings, numbers or booleans", _scalar,
                       "object")
    raise BadValue("unknown option; expected one of: " + ", ".join(RUN_KEYS)
                   + ", system.<dotted key> (e.g. system.links.bandwidth_gbps), "
                   "schedule_options.<name>")


def key_order(key: str) -> tuple[int, int]:
    """Where a key's column goes: run options in their fixed order, then system, then options."""
    if key in RUN_KEYS:
        return (0, list(RUN_KEYS).index(key))
    return (1 if key.startswith(SYSTEM_PREFIX) else 2, 0)
