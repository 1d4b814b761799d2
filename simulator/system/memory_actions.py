"""The memory keys of a system YAML beyond one number per parameter: dtypes, the optimizer, and
what each action of a stage allocates, keeps, frees and briefly needs (``memory.actions``).

``memory.actions`` maps ``"*"`` (every stage) or a global virtual stage (``"3"``) to bytes per
microbatch, by action kind (a stage's own entry wins over ``"*"``, key by key):

- ``F: {keeps, transient}``: ``keeps`` replaces the stash the rows give (what a forward keeps
  for its backward); ``transient``: its working memory above the level before and after it;
- ``I: {frees, keeps, transient}``: the input-gradient half of a split backward frees
  ``frees`` of the stash and keeps ``keeps`` (gradients of intermediate outputs) until its W;
- ``B: {transient}``, ``W: {transient}``: a full backward frees the stash, a W what its I left.

A value is bytes >= 0, or ``{per_layer: x, fixed: y, per_param: z}``: ``x`` bytes for each
layer of the stage's chunk plus ``y`` (which may be negative, as long as the sum is not), the
form ``pipesim calibrate`` writes so that one fit serves stages of any size; ``z`` adds bytes
per parameter of a row, so that rows of different sizes (a heavy last stage) hold what their
own size gives: of all the stage's rows for ``keeps`` and ``frees``, of its largest row for a
``transient`` (an action works on one row at a time). An unknown kind or field is an error
naming the dotted key.
"""

from __future__ import annotations

from typing import Any

from ..errors import ConfigError

PRECISIONS = ("", "fp32", "bf16", "fp16")
OPTIMIZERS = ("", "adam", "sgd-momentum", "sgd")
DTYPE_BYTES = {"fp32": 4, "bf16": 2, "fp16": 2}
# optimizer state per parameter, fp32: Adam's m and v, SGD's momentum buffer
OPTIMIZER_STATE_BYTES = {"adam": 8, "sgd-momentum": 4, "sgd": 0}
MASTER_COPY_BYTES = 4      # mixed precision keeps an fp32 master copy of every weight

ACTION_FIELDS = {"F": ("keeps", "transient"), "I": ("frees", "keeps", "transient"),
                 "B": ("transient",), "W": ("transient",)}


def memory_actions_from_dict(value: Any, source: str, dotted: str) -> dict:
    """Validate ``memory.actions``: ``{"*"|"<stage>": {kind: {field: bytes}}}``."""
    if not isinstance(value, dict):
        raise ConfigError(f"{source}: {dotted}: expected a mapping like "
                          "{'*': {F: {transient: 1048576}}}, found " + repr(value))
    out: dict[str, dict[str, dict[str, float]]] = {}
    for stage, kinds in value.items():
        text = str(stage)
        if text != "*" and (isinstance(stage, bool) or not text.isdigit()):
            raise ConfigError(f"{source}: {dotted}: expected '*' or a stage (an integer >= 0) "
                              f"as key, found {stage!r}")
        key = text if text == "*" else str(int(text))
        where = f"{dotted}.{key}"
        if not isinstance(kinds, dict):
            raise ConfigError(f"{source}: {where}: expected a mapping of kinds (F, I, B, W), "
                              f"found {kinds!r}")
        out[key] = {}
        for kind, fields in kinds.items():
            if kind not in ACTION_FIELDS:
                raise ConfigError(f"{source}: {where}: unknown kind {kind!r}; expected one of "
                                  + ", ".join(ACTION_FIELDS))
            if not isinstance(fields, dict):
                raise ConfigError(f"{source}: {where}.{kind}: expected a mapping of "
                                  + ", ".join(ACTION_FIELDS[kind]) + f", found {fields!r}")
            out[key][kind] = {}
            for name, n in fields.items():
                if name not in ACTION_FIELDS[kind]:
                    raise ConfigError(f"{source}: {where}.{kind}: unknown field {name!r}; "
                                      "expected one of " + ", ".join(ACTION_FIELDS[kind]))
                out[key][kind][name] = _value(n, source, f"{where}.{kind}.{name}")
    return out


def _number(n: Any, source: str, where: str, signed: bool = False) -> float:
    if isinstance(n, bool) or not isinstance(n, (int, float)) or n != n \
            or n in (float("inf"), float("-inf")) or (n < 0 and not signed):
        raise ConfigError(f"{source}: {where}: expected bytes{'' if signed else ' >= 0'}, "
                          f"found {n!r}")
    return float(n)


def _value(n: Any, source: str, where: str) -> float | tuple[float, ...]:
    """Bytes, or (per layer, fixed[, per parameter]) from ``{per_layer: x, fixed: y,
    per_param: z}``."""
    if not isinstance(n, dict):
        return _number(n, source, where)
    if not set(n) <= {"per_layer", "fixed", "per_param"} or not n:
        raise ConfigError(f"{source}: {where}: expected bytes or {{per_layer: x, fixed: y, "
                          f"per_param: z}}, found {n!r}")
    out = (_number(n.get("per_layer", 0), source, f"{where}.per_layer"),
           _number(n.get("fixed", 0), source, f"{where}.fixed", signed=True))
    if "per_param" in n:
        out += (_number(n["per_param"], source, f"{where}.per_param"),)
    return out


def action_bytes(actions: dict, stage: int, kind: str, name: str,
                 layers: int = 1, params: float = 0.0) -> float | None:
    """``memory.actions``' value for one stage (of ``layers`` layers; ``params``: the parameters
    ``per_param`` counts), kind and field (the stage's own, else ``*``'s), or None when neither
    gives it."""
    for key in (str(stage), "*"):
        v = actions.get(key, {}).get(kind, {}).get(name)
        if v is not None:
            if type(v) is not tuple:
                return v
            if len(v) == 2:
                return max(0.0, v[0] * layers + v[1])
            return max(0.0, v[0] * layers + v[1] + v[2] * params)
    return None
