"""Sweep spec files: YAML validated at the edge into :class:`SweepSpec`.

::

    name: pp-vs-microbatches          # optional (default: the file's stem)
    workload: ../workloads/gpt.txt    # paths are relative to this file's folder
    system: ../system/default.yaml    # optional
    iterations: 1                     # any other option at the top level is fixed
    grid:                             # option -> list: the cartesian product, last key fastest
      schedule: [gpipe, 1f1b]
      system.links.bandwidth_gbps: [100, 400]
    zip:                              # groups of equal-length lists that vary together
      - {pp: [2, 4, 8], microbatches: [8, 16, 32]}
    exclude:                          # skip a point matching every key of a rule;
      - {schedule: gpipe, pp: [4, 8]} # a list value means "any of these"

Every error is one line naming the file and the key (``sweep.yaml: grid.pp: expected a list of
positive integers, found 'x'``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


from ..errors import ConfigError
from ..yaml_file import read_yaml
from .keys import OPTIONS_PREFIX, BadValue, KeyKind, key_order, kind_of

STRUCTURE = ("name", "grid", "zip", "exclude")


@dataclass(frozen=True)
class Axis:
    """One varying dimension: a grid key (one key) or a zip group (keys varying together)."""

    where: str                              # "grid.pp" or "zip[0]"
    keys: tuple[str, ...]
    steps: tuple[tuple[Any, ...], ...]      # per step, one value per key


@dataclass(frozen=True)
class ExcludeRule:
    where: str                              # "exclude[2]"
    match: dict[str, tuple[Any, ...]]       # key -> the values that match

    def matches(self, params: dict[str, Any]) -> bool:
        return all(_same_in(params.get(k), vals) for k, vals in self.match.items())


@dataclass(frozen=True)
class SweepSpec:
    label: str                              # the spec path as given, for messages
    base_dir: Path                          # paths in the spec are relative to it
    name: str
    fixed: dict[str, Any]
    axes: tuple[Axis, ...]
    exclude: tuple[ExcludeRule, ...] = ()
    kinds: dict[str, KeyKind] = field(default_factory=dict)

    @property
    def keys(self) -> list[str]:
        """Every option the sweep sets, in column order."""
        found = list(self.fixed) + [k for a in self.axes for k in a.keys]
        return sorted(found, key=lambda k: (key_order(k), found.index(k)))

    def values_of(self, key: str) -> list[Any]:
        if key in self.fixed:
            return [self.fixed[key]]
        for axis in self.axes:
            if key in axis.keys:
                i = axis.keys.index(key)
                return [step[i] for step in axis.steps]
        return []


def _same(a: Any, b: Any) -> bool:
    return type(a) is type(b) and a == b


def _same_in(value: Any, values: tuple[Any, ...]) -> bool:
    return any(_same(value, v) for v in values)


def _show(value: Any, limit: int = 60) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


class _Loader:
    """Validation context: the label for messages, the folder paths are relative to."""

    def __init__(self, label: str, base: Path) -> None:
        self.label = label
        self.base = base
        self.kinds: dict[str, KeyKind] = {}

    def fail(self, where: str, message: str) -> ConfigError:
        return ConfigError(f"{self.label}: {where}: {message}")

    def kind(self, key: Any, where: str) -> KeyKind:
        try:
            kind = kind_of(key)
        except BadValue as bad:
            raise self.fail(where, bad.detail or "unknown option") from None
        self.kinds[key] = kind
        return kind

    def one(self, key: str, value: Any, where: str) -> Any:
        kind = self.kind(key, where)
        if isinstance(value, list):
            raise self.fail(where, f"expected {kind.one}, found {_show(value)} "
                                   "(lists go under grid: or zip:)")
        try:
            return kind.check(value, self.base)
        except BadValue as bad:
            raise self.fail(where, bad.detail or f"expected {kind.one}, found {_show(value)}") \
                from None

    def many(self, key: str, value: Any, where: str, repeats: bool = False) -> tuple[Any, ...]:
        kind = self.kind(key, where)
        if not isinstance(value, list) or not value:
            raise self.fail(where, f"expected a non-empty list of {kind.many}, found "
                                   f"{_show(value)}")
        out: list[Any] = []
        for item in value:
            try:
                norm = kind.check(item, self.base)
            except BadValue as bad:
                raise self.fail(where, bad.detail or f"expected a list of {kind.many}, found "
                                                     f"{_show(item)}") from None
            if not repeats and _same_in(norm, tuple(out)):
                raise self.fail(where, f"{_show(item)} is listed twice")
            out.append(norm)
        return tuple(out)


def _mapping(loader: _Loader, value: Any, where: str, what: str) -> dict:
    if not isinstance(value, dict):
        raise loader.fail(where, f"expected {what}, found {_show(value)}")
    return value


def spec_from_dict(data: Any, label: str = "<sweep>", base_dir: str | Path = ".") -> SweepSpec:
    """Validate a parsed spec; ``label`` names it in errors, paths are relative to ``base_dir``."""
    base = Path(base_dir)
    ld = _Loader(label, base)
    if not isinstance(data, dict):
        raise ConfigError(f"{label}: expected a mapping of options (workload:, grid:, ...), "
                          f"found {_show(data)}")
    name = data.get("name", Path(label).stem)
    if not isinstance(name, str):
        raise ld.fail("name", f"expected a string, found {_show(name)}")
    fixed: dict[str, Any] = {}
    owner: dict[str, str] = {}

    def claim(key: str, where: str) -> None:
        if key in owner:
            other = "the top level" if owner[key] == key else owner[key]
            raise ld.fail(where, f"also set at {other}; set it in one place")
        owner[key] = where

    for key, value in data.items():
        if key in STRUCTURE:
            continue
        if key == "schedule_options":
            for opt, v in _mapping(ld, value, key, "a mapping of option -> value").items():
                dotted = f"{OPTIONS_PREFIX}{opt}"
                claim(dotted, f"{key}.{opt}")
                fixed[dotted] = ld.one(dotted, v, f"{key}.{opt}")
            continue
        claim(key, str(key))
        fixed[key] = ld.one(key, value, str(key))

    axes: list[Axis] = []
    grid = data.get("grid") or {}
    for key, values in _mapping(ld, grid, "grid", "a mapping of option -> list").items():
        where = f"grid.{key}"
        claim(key, where)
        axes.append(Axis(where, (key,), tuple((v,) for v in ld.many(key, values, where))))

    groups = data.get("zip") or []
    if isinstance(groups, dict):
        groups = [groups]
    if not isinstance(groups, list):
        raise ld.fail("zip", "expected a list of groups (each a mapping of option -> list), "
                             f"found {_show(groups)}")
    for i, group in enumerate(groups):
        gwhere = f"zip[{i}]"
        group = _mapping(ld, group, gwhere, "a mapping of option -> list")
        if not group:
            raise ld.fail(gwhere, "expected at least one option, found an empty group")
        columns = {}
        for key, values in group.items():
            where = f"{gwhere}.{key}"
            claim(key, where)
            columns[key] = ld.many(key, values, where, repeats=True)
        lengths = {len(v) for v in columns.values()}
        if len(lengths) > 1:
            raise ld.fail(gwhere, "expected lists of equal length, found "
                          + ", ".join(f"{k}: {len(v)}" for k, v in columns.items()))
        steps = tuple(zip(*columns.values()))
        for j, step in enumerate(steps):
            first = steps.index(step)
            if first != j:
                shown = ", ".join(f"{k}={_show(v)}" for k, v in zip(columns, step))
                raise ld.fail(gwhere, f"step {j} repeats step {first} ({shown})")
        axes.append(Axis(gwhere, tuple(columns), steps))

    if "workload" not in owner:
        raise ConfigError(f"{label}: workload: required (a file path at the top level, or a "
                          "list under grid: or zip:)")

    rules = data.get("exclude") or []
    if not isinstance(rules, list):
        raise ld.fail("exclude", "expected a list of rules (mappings of option -> value or "
                                 f"list of values), found {_show(rules)}")
    exclude = []
    for i, rule in enumerate(rules):
        rwhere = f"exclude[{i}]"
        rule = _mapping(ld, rule, rwhere, "a mapping of option -> value or list of values")
        if not rule:
            raise ld.fail(rwhere, "expected at least one option, found an empty rule")
        match = {}
        for key, value in rule.items():
            where = f"{rwhere}.{key}"
            if key not in owner:
                raise ld.fail(where, "not an option this sweep sets (it sets: "
                              + ", ".join(owner) + ")")
            match[key] = (ld.many(key, value, where) if isinstance(value, list)
                          else (ld.one(key, value, where),))
        exclude.append(ExcludeRule(rwhere, match))

    return SweepSpec(label, base, name, fixed, tuple(axes), tuple(exclude), dict(ld.kinds))


def load_spec(path: str | Path) -> SweepSpec:
    """Read and validate the spec at ``path`` (errors name ``path`` and the key)."""
    label = str(path)
    data = read_yaml(path, f"{label}: cannot read the sweep spec")
    return spec_from_dict(data, label, Path(path).parent)
