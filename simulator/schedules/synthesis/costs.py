"""Per-stage costs for schedule synthesis: the zero-bubble paper's model.

Each virtual stage ``s`` has a forward ``f[s]``, an input-gradient backward ``i[s]`` and a
weight-gradient backward ``w[s]`` (a fused backward costs ``i[s] + w[s]``); an activation or a
gradient moving between two ranks arrives a fixed ``comm`` after it was produced (no link
contention). Costs are in one arbitrary time unit; lists are in global virtual-stage order.
The dataclass lives in :mod:`simulator.schedules.stage_costs` (``api`` builds one from a run);
this module reads and checks ``costs.yaml``.
"""

from __future__ import annotations

import math
from pathlib import Path

from ...errors import ConfigError
from ..stage_costs import StageCosts
from ...yaml_file import read_yaml

KEYS = ("f", "i", "w")
__all__ = ["KEYS", "StageCosts", "load_stage_costs", "stage_costs_from", "costs_option"]


def _number(value: object, where: str) -> float:
    # bool is an int subclass: `true` in YAML is not a cost
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ConfigError(f"{where}: expected a non-negative number, found {value!r}")
    if value < 0:
        raise ConfigError(f"{where}: expected a non-negative number, found {value!r}")
    return value


def stage_costs_from(data: object, n_stages: int, where: str, how: str = "") -> StageCosts:
    """Check a parsed ``{f, i, w, comm}`` mapping; ``where`` starts every message (the file).

    ``how`` says where ``n_stages`` comes from (e.g. ``"--pp 4"``), for the length message.
    """
    if not isinstance(data, dict):
        raise ConfigError(f"{where}: expected a mapping with keys f, i, w (lists) and comm, "
                          f"found {type(data).__name__}")
    unknown = sorted(str(k) for k in data if k not in (*KEYS, "comm"))
    if unknown:
        raise ConfigError(f"{where}: unknown key {unknown[0]!r}; expected f, i, w and comm")
    lists = {}
    for key in KEYS:
        if key not in data:
            raise ConfigError(f"{where}: {key}: missing; expected a list of {n_stages} "
                              f"non-negative numbers")
        value = data[key]
        if not isinstance(value, list):
            raise ConfigError(f"{where}: {key}: expected a list of {n_stages} non-negative "
                              f"numbers, found {value!r}")
        if len(value) != n_stages:
            suffix = f" ({how})" if how else ""
            raise ConfigError(f"{where}: {key}: expected {n_stages} costs, one per "
                              f"stage{suffix}, found {len(value)}")
        lists[key] = tuple(_number(x, f"{where}: {key}[{n}]") for n, x in enumerate(value))
    comm = _number(data.get("comm", 0), f"{where}: comm")
    return StageCosts(lists["f"], lists["i"], lists["w"], comm)


def load_stage_costs(path: str | Path, n_stages: int, option: str = "--stage-costs",
                     how: str = "") -> StageCosts:
    """Read ``costs.yaml``; every problem is one ConfigError naming the file."""
    data = read_yaml(path, f"{option}: cannot read {path}")
    return stage_costs_from(data, n_stages, str(path), how)


def costs_option(stage_costs: object, n_stages: int, who: str, how: str) -> StageCosts | None:
    """A cost-driven schedule's ``stage_costs`` option as every caller gives it: None (unit
    costs), the run's :class:`StageCosts` (``api``), or a costs.yaml path (``pipesim schedule
    --stage-costs``, ``-O stage_costs=PATH``); ``who`` is the schedule, ``how`` where
    ``n_stages`` comes from (``--pp 4 x --vpp 2``)."""
    if stage_costs is None:
        return None
    if isinstance(stage_costs, (str, Path)):
        return load_stage_costs(stage_costs, n_stages, how=how)
    if not isinstance(stage_costs, StageCosts):
        raise ConfigError(f"{who}: stage_costs: expected a costs.yaml path, found "
                          f"{stage_costs!r}")
    if stage_costs.n_stages != n_stages:
        raise ConfigError(f"{who}: expected {n_stages} stage costs, one per stage ({how}), "
                          f"found {stage_costs.n_stages}")
    return stage_costs
