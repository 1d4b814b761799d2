"""System description: GPU speed, point-to-point links, collective links.

Validated at the edge (YAML -> frozen dataclasses); an unknown or mistyped key is a
:class:`ConfigError` naming the file and the dotted key. The built-in default here is what
``configs/system/default.yaml`` spells out (a test keeps the two equal).

Units: bandwidth in Gb/s (10^9 bits per second, as NICs and NVLink are quoted), latency in ns.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

import yaml

from ..errors import ConfigError


@dataclass(frozen=True)
class LinkConfig:
    """A link: ``latency_ns + bytes * 8 / bandwidth_gbps`` ns per transfer."""

    bandwidth_gbps: float = 400.0
    latency_ns: float = 2000.0

    def transfer_ns(self, nbytes: float) -> float:
        if nbytes <= 0:
            return 0.0
        return self.latency_ns + nbytes * 8.0 / self.bandwidth_gbps


@dataclass(frozen=True)
class GPUConfig:
    compute_scale: float = 1.0  # multiplies every compute time of the workload


@dataclass(frozen=True)
class CollectiveConfig:
    """Per process group: the bus bandwidth and per-step latency the ring formulas use."""

    tp: LinkConfig = field(default_factory=lambda: LinkConfig(2400.0, 1000.0))
    ep: LinkConfig = field(default_factory=lambda: LinkConfig(400.0, 2000.0))
    dp: LinkConfig = field(default_factory=lambda: LinkConfig(400.0, 2000.0))
    dp_ep: LinkConfig = field(default_factory=lambda: LinkConfig(400.0, 2000.0))


@dataclass(frozen=True)
class SystemConfig:
    name: str = "default"
    gpu: GPUConfig = field(default_factory=GPUConfig)
    links: LinkConfig = field(default_factory=LinkConfig)
    collectives: CollectiveConfig = field(default_factory=CollectiveConfig)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def with_overrides(self, overrides: dict[str, Any], source: str = "override") -> "SystemConfig":
        """A copy with dotted keys replaced, e.g. ``{"links.bandwidth_gbps": 100}``."""
        data = self.to_dict()
        for dotted, value in overrides.items():
            node = data
            parts = dotted.split(".")
            for part in parts[:-1]:
                if not isinstance(node.get(part), dict):
                    raise ConfigError(f"{source}: unknown system key {dotted!r}")
                node = node[part]
            if parts[-1] not in node or isinstance(node[parts[-1]], dict):
                raise ConfigError(f"{source}: unknown system key {dotted!r}")
            node[parts[-1]] = value
        return system_from_dict(data, source)


def _build(cls: type, data: Any, source: str, prefix: str) -> Any:
    if not isinstance(data, dict):
        raise ConfigError(f"{source}: {prefix or 'top level'}: expected a mapping, "
                          f"found {type(data).__name__}")
    known = {f.name: f for f in fields(cls)}
    kwargs: dict[str, Any] = {}
    for key, value in data.items():
        dotted = f"{prefix}.{key}" if prefix else str(key)
        f = known.get(key)
        if f is None:
            raise ConfigError(f"{source}: unknown key {dotted!r}; expected one of: "
                              + ", ".join(sorted(known)))
        default = f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default
        if dataclasses.is_dataclass(default):
            kwargs[key] = _build(type(default), value, source, dotted)
        elif isinstance(default, str):
            if not isinstance(value, str):
                raise ConfigError(f"{source}: {dotted}: expected a string, found {value!r}")
            kwargs[key] = value
        else:
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise ConfigError(f"{source}: {dotted}: expected a number, found {value!r}")
            if value < 0 or (key in ("bandwidth_gbps", "compute_scale") and value <= 0):
                raise ConfigError(f"{source}: {dotted}: expected a positive number, found {value!r}")
            kwargs[key] = float(value)
    return cls(**kwargs)


def system_from_dict(data: dict[str, Any], source: str = "system") -> SystemConfig:
    return _build(SystemConfig, data, source, "")


def load_system(path: str | Path | None) -> SystemConfig:
    """The system at ``path``, or the built-in default when ``path`` is None."""
    if path is None:
        return SystemConfig()
    p = Path(path)
    try:
        text = p.read_text()
    except OSError as err:
        raise ConfigError(f"--system: cannot read {p}: {err.strerror or err}") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f"{p}:{mark.line + 1}:{mark.column + 1}" if mark else str(p)
        raise ConfigError(f"{where}: invalid YAML: {getattr(err, 'problem', err)}") from None
    if data is None:
        data = {}
    return system_from_dict(data, str(p))
