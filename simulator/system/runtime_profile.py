"""The ``runtime:`` section of a system YAML: what a real pipeline runtime adds to the compute
the workload rows describe (see docs/model.md, *The runtime model*).

Every key is optional and the defaults are the ideal machine (no overheads, transfers as the
``async`` mode prices them), so a system without this section simulates exactly what it did
before. Keys:

- ``p2p``: the point-to-point mode used when ``--p2p`` is not given;
- ``action_overhead_ns: {F, B, I, W}``: a launch cost the rank pays before each action of that
  kind (an overlapped F/B pair pays one: the larger of its two kinds');
- ``step_prologue_ns`` / ``step_epilogue_ns``: paid by every rank at the start / end of every
  iteration (torch's ``step()``);
- ``exchange_ns``: the extra cost of a simultaneous two-way exchange between two ranks;
- ``first_stage_backward``: ``rows`` (I and W as the rows say) or ``torch`` (the first stage
  computes no input gradient: its I costs nothing and its W runs the whole backward);
- ``action_costs_ns: {"<stage>": {F, B, I, W}}`` (global virtual stage) with
  ``calibrated_for: {pp, vpp}``: measured action costs that replace the rows' sums when the
  run's P and v are the calibrated ones;
- ``layer_scale: {"<layer>": factor | {F, I, W}}``: per-layer factors on the rows' compute,
  which apply wherever ``action_costs_ns`` does not;
- ``calibrated_on: {schedule, p2p}``: what ``pipesim calibrate`` fitted on (the traced
  schedule and torch's runtime it ran on, ``torch-single`` or ``torch-multi``), so a run on the
  other runtime can say that the transfer figures were never seen there;
- what the runtime keeps in memory (docs/model.md, Memory), each ``auto`` by default, which
  follows the point-to-point mode (:data:`RETENTION`): ``sends_held`` (``none``: a sent tensor
  is not counted past the action that made it; ``until_sent``: until its transfer ends;
  ``step_end``: until the step ends, as torch's multi-stage runtime waits for its sends),
  ``recv_buffers`` (``none``, or ``per_microbatch``: one receive buffer per microbatch for every
  input a stage takes from another rank, allocated once and kept across steps) and
  ``kept_outputs`` (``none``, or ``step_end``: the last stage keeps each microbatch's output
  until the step ends, torch's ``return_outputs``) and ``gradients`` (``kept`` from a stage's
  first weight backward on, or ``per_step``: freed at the step's end);
- ``overheads_guessed``: true where the figures above (and the topology's link latencies) are
  estimates, not measurements (the GPU presets' host time per action): a run then states
  each of them as a warning; otherwise a run with overheads states them as a note;
- ``runtimes: {torch-single: {...}, torch-multi: {...}}``: figures of one of torch's runtimes
  that replace the ones above on a run of that runtime (:func:`per_runtime.for_runtime`):
  ``action_overhead_ns``, ``step_prologue_ns``, ``step_epilogue_ns``, ``exchange_ns``,
  ``latency_ns`` (the links' one-way latency), ``calibrated_on`` (the schedule whose traces
  they were fitted on) and ``sends_held`` (what that runtime's traces showed). ``pipesim calibrate`` writes them when given traces of both runtimes:
  the two exchange their tensors differently (docs/model.md, *The runtime model*), and one
  figure for both left 1F1B 17 % high at 1 ms per layer.

Layering: this module belongs to the system layer; the engine reads it.
"""

from __future__ import annotations

from typing import Any, Callable, NamedTuple

from ..errors import ConfigError

P2P_MODES = ("async", "blocking", "batched", "torch", "torch-single", "torch-multi")
KINDS = ("F", "B", "I", "W")
LAYER_KINDS = ("F", "I", "W")          # a layer's forward, input- and weight-gradient compute
FIRST_STAGE_BACKWARD = ("rows", "torch")
RETENTION_CHOICES = {"sends_held": ("auto", "none", "until_sent", "step_end"),
                     "recv_buffers": ("auto", "none", "per_microbatch"),
                     "kept_outputs": ("auto", "none", "step_end"),
                     "gradients": ("auto", "kept", "per_step")}
# what ``auto`` means per point-to-point mode (sends_held, recv_buffers, kept_outputs,
# gradients): the ideal modes count no runtime buffer and keep gradients from their first
# backward on (a persistent gradient buffer, as Megatron allocates); torch's runtimes as torch
# 2.13 allocates (docs/model.md, measured by benchmarks/memory): GPipe and the multi-stage
# runtime wait for their sends at the end of the step, 1F1B before its next send; gradients
# from a stage's first backward to the step's end (zero_grad(set_to_none=True)).
RETENTION = {"torch-single": ("until_sent", "per_microbatch", "step_end", "per_step"),
             "torch-multi": ("step_end", "per_microbatch", "step_end", "per_step")}
NO_RETENTION = ("none", "none", "none", "kept")
TORCH_RUNTIMES = ("torch-single", "torch-multi")
# what a ``runtimes.<runtime>`` mapping may set (see the module docstring)
RUNTIME_FIGURES = ("action_overhead_ns", "step_prologue_ns", "step_epilogue_ns", "exchange_ns",
                   "latency_ns", "calibrated_on", "sends_held")


def _zero_overheads() -> dict[str, float]:
    return {k: 0.0 for k in KINDS}


def fresh_defaults(record: Any, factories: dict[str, Callable[[], Any]]) -> Any:
    """``record`` with a new object, from ``factories``, for each field still holding its class's
    default: a NamedTuple's default is one object shared by every instance, so a mutable one (a
    dict) is made afresh per instance, as a dataclass's ``default_factory`` was."""
    defaults = record._field_defaults
    changes = {name: make() for name, make in factories.items()
               if getattr(record, name) is defaults[name]}
    return record._replace(**changes) if changes else record


# a NamedTuple, not a dataclass: start-up (simulator/__init__.py); RuntimeProfile below adds
# its methods and a new dict per instance for each dict default
class _RuntimeFields(NamedTuple):
    p2p: str = "async"
    action_overhead_ns: dict = _zero_overheads()
    step_prologue_ns: float = 0.0
    step_epilogue_ns: float = 0.0
    exchange_ns: float = 0.0
    first_stage_backward: str = "rows"
    calibrated_for: dict | None = None          # {"pp": P, "vpp": v}
    action_costs_ns: dict = {}                  # {"3": {"F": ns, ...}}
    layer_scale: dict = {}                      # {"7": {"F": x, "I": y, "W": z}}
    calibrated_on: dict | None = None           # {"schedule": name, "p2p": "torch-multi"}
    sends_held: str = "auto"
    recv_buffers: str = "auto"
    kept_outputs: str = "auto"
    gradients: str = "auto"
    runtimes: dict = {}                         # {"torch-single": {exchange_ns: ...}}
    overheads_guessed: bool = False             # the overheads are estimates (a run warns)


_RUNTIME_DICTS = {"action_overhead_ns": _zero_overheads, "action_costs_ns": dict,
                  "layer_scale": dict, "runtimes": dict}


class RuntimeProfile(_RuntimeFields):
    """The ``runtime:`` section (see the module docstring); stage and layer keys are strings,
    as YAML and ``--set runtime.action_costs_ns.3.F=...`` spell them."""

    __slots__ = ()

    def __new__(cls, *args: Any, **kwargs: Any) -> "RuntimeProfile":
        return fresh_defaults(super().__new__(cls, *args, **kwargs), _RUNTIME_DICTS)

    @property
    def has_overheads(self) -> bool:
        return any(self.action_overhead_ns.values())

    def overhead(self, kinds: tuple[str, ...]) -> float:
        """What a step of these kinds pays before it starts (a pair pays one overhead)."""
        return max(self.action_overhead_ns[k] for k in kinds)

    def retention(self, p2p: str, torch_class: str | None = None) -> tuple[str, str, str, str]:
        """(sends_held, recv_buffers, kept_outputs, gradients) of a run in point-to-point mode
        ``p2p`` (``torch`` already resolved to ``torch-single`` or ``torch-multi``) of a
        schedule torch runs as ``torch_class`` (its spec's; None: from a CSV)."""
        auto = RETENTION.get(p2p, NO_RETENTION)
        if p2p == "torch-single" and torch_class == "GPipe":
            auto = ("step_end",) + auto[1:]
        given = (self.sends_held, self.recv_buffers, self.kept_outputs, self.gradients)
        return tuple(a if g == "auto" else g for g, a in zip(given, auto))  # type: ignore

    def calibrated(self, pp: int, vpp: int) -> bool:
        """Whether ``action_costs_ns`` applies to a run with this P and v."""
        cf = self.calibrated_for
        return bool(self.action_costs_ns) and cf is not None and cf["pp"] == pp \
            and cf["vpp"] == vpp

    def action_costs(self) -> dict[tuple[int, str], float]:
        """``{(stage, kind): ns}``."""
        return {(int(s), k): v for s, kinds in self.action_costs_ns.items()
                for k, v in kinds.items()}

    def layer_factors(self, layer: int) -> tuple[float, float, float] | None:
        """(F, I, W) compute factors of one layer (file-order index), or None for 1, 1, 1."""
        f = self.layer_scale.get(str(layer))
        if f is None:
            return None
        return (f["F"], f["I"], f["W"])


def _number(value: Any, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value != value \
            or value < 0 or value == float("inf"):
        raise ConfigError(f"{where}: expected a number >= 0, found {value!r}")
    return float(value)


def _mapping(value: Any, where: str, example: str) -> dict:
    if not isinstance(value, dict):
        raise ConfigError(f"{where}: expected a mapping like {example}, found {value!r}")
    return value


def _index(key: Any, where: str, what: str) -> str:
    text = str(key)
    if isinstance(key, bool) or not text.isdigit():
        raise ConfigError(f"{where}: expected {what} (an integer >= 0) as key, found {key!r}")
    return str(int(text))


def _kinds(value: Any, where: str, allowed: tuple[str, ...]) -> dict[str, float]:
    example = "{" + ", ".join(f"{k}: ..." for k in allowed) + "}"
    out = {}
    for k, v in _mapping(value, where, example).items():
        if k not in allowed:
            raise ConfigError(f"{where}: unknown kind {k!r}; expected one of "
                              + ", ".join(allowed))
        out[k] = _number(v, f"{where}.{k}")
    return out


def _runtimes(value: Any, where: str) -> dict:
    """``runtimes: {torch-single: {...}, torch-multi: {...}}`` validated (module docstring)."""
    out: dict = {}
    for name, figs in _mapping(value, where, "{torch-single: {exchange_ns: 700000}}").items():
        if name not in TORCH_RUNTIMES:
            raise ConfigError(f"{where}: unknown runtime {name!r}; expected "
                              + " or ".join(TORCH_RUNTIMES))
        w = f"{where}.{name}"
        got: dict = {}
        for k, v in _mapping(figs, w, "{exchange_ns: 700000, latency_ns: 100000}").items():
            if k not in RUNTIME_FIGURES:
                raise ConfigError(f"{w}: unknown key {k!r}; expected one of: "
                                  + ", ".join(RUNTIME_FIGURES))
            if k == "action_overhead_ns":
                got[k] = {**_zero_overheads(), **_kinds(v, f"{w}.{k}", KINDS)}
            elif k == "calibrated_on":
                if not isinstance(v, str) or not v:
                    raise ConfigError(f"{w}.{k}: expected a schedule name, found {v!r}")
                got[k] = v
            elif k in RETENTION_CHOICES:
                if v not in RETENTION_CHOICES[k]:
                    raise ConfigError(f"{w}.{k}: expected one of "
                                      f"{', '.join(RETENTION_CHOICES[k])}, found {v!r}")
                got[k] = v
            else:
                got[k] = _number(v, f"{w}.{k}")
        out[name] = got
    return out


def runtime_from_dict(data: Any, source: str, prefix: str = "runtime") -> RuntimeProfile:
    """Validate a ``runtime:`` mapping; errors name ``source`` and the dotted key."""
    if data is None:
        return RuntimeProfile()
    data = _mapping(data, f"{source}: {prefix}", "{p2p: torch, exchange_ns: 2000000}")
    names = set(RuntimeProfile._fields)
    kw: dict[str, Any] = {}
    for key, value in data.items():
        where = f"{source}: {prefix}.{key}"
        if key not in names:
            raise ConfigError(f"{source}: unknown key '{prefix}.{key}'; expected one of: "
                              + ", ".join(sorted(names)))
        if key == "p2p":
            if value not in P2P_MODES:
                raise ConfigError(f"{where}: expected one of {', '.join(P2P_MODES)}, "
                                  f"found {value!r}")
            kw[key] = value
        elif key in RETENTION_CHOICES:
            if value not in RETENTION_CHOICES[key]:
                raise ConfigError(f"{where}: expected one of {', '.join(RETENTION_CHOICES[key])}"
                                  f", found {value!r}")
            kw[key] = value
        elif key == "first_stage_backward":
            if value not in FIRST_STAGE_BACKWARD:
                raise ConfigError(f"{where}: expected one of {', '.join(FIRST_STAGE_BACKWARD)}, "
                                  f"found {value!r}")
            kw[key] = value
        elif key == "action_overhead_ns":
            kw[key] = {**_zero_overheads(), **_kinds(value, where, KINDS)}
        elif key == "calibrated_for":
            if value is None:
                kw[key] = None
                continue
            value = _mapping(value, where, "{pp: 4, vpp: 2}")
            if set(value) != {"pp", "vpp"}:
                raise ConfigError(f"{where}: expected exactly the keys pp and vpp, found "
                                  + ", ".join(map(str, value)))
            for k, n in value.items():
                if isinstance(n, bool) or not isinstance(n, int) or n < 1:
                    raise ConfigError(f"{where}.{k}: expected a positive integer, found {n!r}")
            kw[key] = {"pp": value["pp"], "vpp": value["vpp"]}
        elif key == "calibrated_on":
            if value is None:
                kw[key] = None
                continue
            value = _mapping(value, where, "{schedule: interleaved-1f1b, p2p: torch-multi}")
            if set(value) != {"schedule", "p2p"}:
                raise ConfigError(f"{where}: expected exactly the keys schedule and p2p, found "
                                  + ", ".join(map(str, value)))
            if not isinstance(value["schedule"], str) or not value["schedule"]:
                raise ConfigError(f"{where}.schedule: expected a schedule name, found "
                                  f"{value['schedule']!r}")
            if value["p2p"] not in ("torch-single", "torch-multi"):
                raise ConfigError(f"{where}.p2p: expected torch-single or torch-multi, found "
                                  f"{value['p2p']!r}")
            kw[key] = {"schedule": value["schedule"], "p2p": value["p2p"]}
        elif key == "runtimes":
            kw[key] = _runtimes(value, where)
        elif key == "overheads_guessed":
            if not isinstance(value, bool):
                raise ConfigError(f"{where}: expected true or false, found {value!r}")
            kw[key] = value
        elif key == "action_costs_ns":
            costs = {}
            for s, kinds in _mapping(value, where, "{'0': {F: 1000, B: 2000}}").items():
                stage = _index(s, where, "a stage")
                costs[stage] = _kinds(kinds, f"{where}.{stage}", KINDS)
            kw[key] = costs
        elif key == "layer_scale":
            scales = {}
            for i, f in _mapping(value, where, "{'3': 1.2}").items():
                layer = _index(i, where, "a layer")
                w = f"{where}.{layer}"
                if isinstance(f, dict):
                    given = _kinds(f, w, LAYER_KINDS)
                    scales[layer] = {k: given.get(k, 1.0) for k in LAYER_KINDS}
                else:
                    x = _number(f, w)
                    scales[layer] = {k: x for k in LAYER_KINDS}
            kw[key] = scales
        else:
            kw[key] = _number(value, where)
    profile = RuntimeProfile(**kw)
    if profile.action_costs_ns and profile.calibrated_for is None:
        raise ConfigError(f"{source}: {prefix}.action_costs_ns: needs {prefix}.calibrated_for: "
                          "{pp: P, vpp: v} (the stages are numbered for one P and v)")
    return profile
