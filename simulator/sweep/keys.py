"""The options a sweep can set, and how each value is checked at the edge.

A key is one of the ``pipesim run`` options (``workload``, ``system``, ``schedule``, ``pp``,
``vpp``, ``microbatches``, ``iterations``, ``layout``, ``pp_comm``, ``gpus``, ``dp``, ``strict``), a system value by dotted path
(``system.links.bandwidth_gbps``; applied with :meth:`SystemConfig.with_overrides`), or a schedule
generator option (``schedule_options.group_size``). Every checker returns the normalised value or
raises :class:`BadValue` saying what it expected; the spec loader adds the file and the key.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from ..errors import ConfigError
from ..system.config import SystemConfig

LAYOUTS = ("auto", "model", "aicb")
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


def _positive_int(value: Any, base: Path) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise BadValue()
    return value


def _schedule(value: Any, base: Path) -> str:
    from ..schedules import registry

    if not isinstance(value, str):
        raise BadValue()
    try:
        return registry.get(value).name
    except ConfigError:
        raise BadValue("expected a registered schedule (one of: "
                       + ", ".join(sorted(registry.names())) + f"), found {value!r}") from None


def _layout(value: Any, base: Path) -> str:
    if value not in LAYOUTS:
        raise BadValue()
    return value


def _non_negative_int(value: Any, base: Path) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise BadValue()
    return value


def _bool(value: Any, base: Path) -> bool:
    if not isinstance(value, bool):
        raise BadValue()
    return value


def _file(value: Any, base: Path) -> str:
    if not isinstance(value, str) or not value:
        raise BadValue()
    if not (base / value).is_file():
        raise BadValue(f"expected a readable file (relative to {base}), found {value!r}")
    return value


def _system_file(value: Any, base: Path) -> str:
    """A system YAML: it must exist and load (its own errors name the file, line and key)."""
    from ..system.config import load_system

    value = _file(value, base)
    load_system(base / value)
    return value


def _scalar(value: Any, base: Path) -> Any:
    if not isinstance(value, (str, int, float, bool)):
        raise BadValue()
    return value


RUN_KEYS: dict[str, KeyKind] = {
    "workload": KeyKind("a workload file path", "workload file paths", _file, "string"),
    "system": KeyKind("a system YAML path", "system YAML paths", _system_file, "string"),
    "schedule": KeyKind("a schedule name", "schedule names", _schedule, "string"),
    "pp": KeyKind("a positive integer", "positive integers", _positive_int, "Int64"),
    "vpp": KeyKind("a positive integer", "positive integers", _positive_int, "Int64"),
    "microbatches": KeyKind("a positive integer", "positive integers", _positive_int, "Int64"),
    "iterations": KeyKind("a positive integer", "positive integers", _positive_int, "Int64"),
    "layout": KeyKind("one of " + ", ".join(LAYOUTS), "layouts (" + ", ".join(LAYOUTS) + ")",
                      _layout, "string"),
    "pp_comm": KeyKind("a whole number of bytes >= 0", "whole numbers of bytes >= 0",
                       _non_negative_int, "Int64"),
    "gpus": KeyKind("a positive integer", "positive integers", _positive_int, "Int64"),
    "dp": KeyKind("a positive integer", "positive integers", _positive_int, "Int64"),
    "strict": KeyKind("true or false", "booleans", _bool, "boolean"),
}


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
