"""``--calibration FILE``: a YAML fragment of the system file's shape laid over a system.

Precedence: built-in default < ``--system`` < ``--calibration`` < ``--set`` < explicit flags.
Mappings merge key by key (a calibration that fits ``runtime.exchange_ns`` keeps the system's
other ``runtime`` keys); the calibrated costs themselves (``runtime.action_costs_ns``,
``runtime.calibrated_for``, ``runtime.layer_scale``, ``runtime.runtimes``, ``memory.actions``) replace the system's
as a whole, since stage numbers from two calibrations do not mix.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..errors import ConfigError
from ..yaml_file import read_yaml
from .config import SystemConfig, system_from_dict

WHOLE = ("action_costs_ns", "calibrated_for", "calibrated_on", "layer_scale", "actions",
         "runtimes")


def _merge(base: dict, over: dict) -> dict:
    out = dict(base)
    for key, value in over.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict) and key not in WHOLE:
            out[key] = _merge(out[key], value)
        else:
            out[key] = value
    return out


def apply_calibration(system: SystemConfig, path: str | Path) -> SystemConfig:
    """``system`` with the calibration file at ``path`` laid over it (validated; errors name
    the file and the dotted key)."""
    data: Any = read_yaml(path, f"--calibration: cannot read {path}")
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: top level: expected a mapping, found {type(data).__name__}")
    return system_from_dict(_merge(system.to_dict(), data), str(path))
