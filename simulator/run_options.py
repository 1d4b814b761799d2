"""The options of one run, written once: ``pipesim run``, ``compare`` and ``sweep`` and
``simulate()`` all take them from here.

Each field carries its help, its command-line flag and how a value is checked (vidur's
dataclass-config style). :func:`click_options` turns the fields into click options, and
:data:`SWEEPABLE` lists every option that changes a simulated number: a sweep spec may set or
vary any of them. Options that only choose outputs (``--gantt``, ``--trace``, ``--log-level``)
are not here.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any, Callable

from .errors import ConfigError
from .system.runtime_profile import P2P_MODES

LAYOUTS = ("auto", "model", "aicb")
ENGINES = ("simpy", "evaluator")


def _opt(help: str, *, flag: str | None = None, short: str | None = None,
         kind: str = "any", metavar: str | None = None, choices: tuple[str, ...] = (),
         multiple: bool = False, run_only: bool = False) -> dict[str, Any]:
    """Field metadata: ``kind`` is how a value is checked (positive, non_negative, number,
    non_negative_number, bool, choice, string, slow_rank)."""
    return {"help": help, "flag": flag, "short": short, "kind": kind, "metavar": metavar,
            "choices": choices, "multiple": multiple, "run_only": run_only}


@dataclass(frozen=True)
class RunOptions:
    """Everything about one run that is neither the workload nor the system."""

    schedule: str | None = field(default=None, metadata=_opt(
        "Registered schedule (see `pipesim schedule --list`); default 1f1b, or "
        "interleaved-1f1b when vpp > 1.", short="-s", kind="string"))
    pp: int | None = field(default=None, metadata=_opt(
        "Pipeline stages (overrides the header's pp).", kind="positive"))
    microbatches: int | None = field(default=None, metadata=_opt(
        "Microbatches per iteration (overrides the header's ga).", short="-m", kind="positive"))
    vpp: int | None = field(default=None, metadata=_opt(
        "Virtual stages (chunks) per rank.", kind="positive"))
    iterations: int = field(default=1, metadata=_opt(
        "Iterations to simulate (with --jitter: the spread of iteration times).",
        kind="positive"))
    layout: str = field(default="auto", metadata=_opt(
        "How to read the rows: the whole model once, or an AICB stage trace.", kind="choice",
        choices=LAYOUTS))
    p2p: str | None = field(default=None, metadata=_opt(
        "Point-to-point semantics: isend/irecv, blocking send/recv (document 001's naive "
        "order), Megatron's batched send/recv pairs, or torch's runtimes (docs/model.md). "
        "Default: the system's runtime.p2p, else async.", kind="choice", choices=P2P_MODES))
    memory_limit: float | None = field(default=None, metadata=_opt(
        "Per-GPU memory in GB (10^9 bytes); an overflow is reported as out of memory.",
        kind="positive_number", metavar="GB"))
    jitter: float = field(default=0.0, metadata=_opt(
        "Scale compute times by seeded lognormal noise with this sigma (mean 1).",
        kind="non_negative_number", metavar="SIGMA"))
    seed: int = field(default=0, metadata=_opt("Seed for --jitter.", kind="non_negative"))
    slow_rank: tuple[str, ...] = field(default=(), metadata=_opt(
        "Make rank R's compute FACTOR times slower (repeatable).", kind="slow_rank",
        metavar="R:FACTOR", multiple=True))
    recompute: str = field(default="file", metadata=_opt(
        "Activation recompute: file (the header's checkpoint lists), none, or full (every layer "
        "recomputes its forward before its backward and keeps only its input).",
        kind="choice", choices=("file", "none", "full")))
    pp_comm: int | None = field(default=None, metadata=_opt(
        "Bytes one microbatch sends between adjacent stages (overrides the file's pp_comm; "
        "when the file has none it is derived from the rows, with a warning).",
        kind="non_negative", metavar="BYTES"))
    gpus: int | None = field(default=None, metadata=_opt(
        "World size; DP = N / (TP x PP) must be whole (default: the header's all_gpus).",
        kind="positive", metavar="N"))
    dp: int | None = field(default=None, metadata=_opt(
        "Data-parallel size instead of --gpus.", kind="positive", metavar="D"))
    max_actions: int | None = field(default=None, metadata=_opt(
        "Refuse a run with more actions than N before building it (default 700000, about "
        "10 s; 0 = no limit).", kind="non_negative", metavar="N"))
    engine: str = field(default="simpy", metadata=_opt(
        "simpy: the event-driven engine; evaluator: the exact critical-path sweep (same "
        "timeline, faster; falls back to simpy with a note where it does not apply).",
        kind="choice", choices=ENGINES))
    strict: bool = field(default=False, metadata=_opt(
        "Treat every warning as an error (exit 2): no number pipesim cannot stand behind.",
        kind="bool"))
    layer_by_layer: bool = field(default=False, metadata=_opt(
        "Reference path: one simulation event per layer state instead of per action "
        "(slower; same timeline).", kind="bool"))

    def simulate_kwargs(self) -> dict[str, Any]:
        """Keyword arguments of :func:`simulator.api.simulate` (the schedule goes apart)."""
        from .engine.options import parse_slow_rank

        slow: dict[int, float] = {}
        for text in self.slow_rank:
            r, f = parse_slow_rank(text)
            slow[r] = slow.get(r, 1.0) * f
        return {"pp": self.pp, "microbatches": self.microbatches, "vpp": self.vpp,
                "iterations": self.iterations, "layout": self.layout, "p2p": self.p2p,
                "memory_limit_gb": self.memory_limit, "jitter": self.jitter, "seed": self.seed,
                "slow_ranks": slow, "pp_comm": self.pp_comm, "gpus": self.gpus, "dp": self.dp,
                "max_actions": self.max_actions, "engine": self.engine, "strict": self.strict,
                "layer_by_layer": self.layer_by_layer, "recompute": self.recompute}

    @classmethod
    def from_values(cls, values: dict[str, Any], source: str = "") -> "RunOptions":
        """Options from a mapping (CLI keyword arguments or a sweep point), each checked."""
        known = {f.name: f for f in fields(cls)}
        kwargs = {}
        for name, value in values.items():
            if name not in known:
                continue
            kwargs[name] = check(known[name], value, source)
        return cls(**kwargs)


def flag_of(f) -> str:
    return f.metadata.get("flag") or "--" + f.name.replace("_", "-")


def check(f, value: Any, source: str = "") -> Any:
    """``value`` for field ``f``, normalised, or a one-line ConfigError naming the option."""
    meta = f.metadata
    where = f"{source}: {f.name}" if source else flag_of(f)
    if value is None and f.default is None:
        return None
    kind = meta["kind"]
    if meta["multiple"]:
        items = value if isinstance(value, (list, tuple)) else [value]
        return tuple(_check_one(kind, meta, v, where) for v in items)
    return _check_one(kind, meta, value, where)


def _check_one(kind: str, meta: dict, value: Any, where: str) -> Any:
    def bad(expected: str) -> ConfigError:
        return ConfigError(f"{where}: expected {expected}, got {value!r}")

    is_int = isinstance(value, int) and not isinstance(value, bool)
    is_num = isinstance(value, (int, float)) and not isinstance(value, bool) and value == value
    if kind == "positive":
        if not is_int or value < 1:
            raise bad("a positive integer")
    elif kind == "non_negative":
        if not is_int or value < 0:
            raise bad("a whole number >= 0")
    elif kind == "positive_number":
        if not is_num or value <= 0:
            raise bad("a positive number")
        value = float(value)
    elif kind == "non_negative_number":
        if not is_num or value < 0:
            raise bad("a number >= 0")
        value = float(value)
    elif kind == "bool":
        if not isinstance(value, bool):
            raise bad("true or false")
    elif kind == "choice":
        if value not in meta["choices"]:
            raise bad("one of " + ", ".join(meta["choices"]))
    elif kind == "string":
        if not isinstance(value, str):
            raise bad("a string")
    elif kind == "slow_rank":
        from .engine.options import parse_slow_rank

        if not isinstance(value, str):
            raise bad("R:FACTOR like 2:1.5")
        parse_slow_rank(value)
    return value


# every option that changes a simulated number, as a sweep may set it
SWEEPABLE: tuple[str, ...] = tuple(f.name for f in fields(RunOptions))


def click_options(*, skip: tuple[str, ...] = ()) -> Callable:
    """A decorator adding one click option per RunOptions field (help, flag, type, default)."""
    import click

    def deco(fn: Callable) -> Callable:
        for f in reversed(fields(RunOptions)):
            if f.name in skip:
                continue
            meta = f.metadata
            names = [flag_of(f)] + ([meta["short"]] if meta["short"] else [])
            kw: dict[str, Any] = {"help": meta["help"], "metavar": meta["metavar"]}
            kind = meta["kind"]
            if kind == "bool":
                kw.update(is_flag=True, default=False)
            elif kind == "choice":
                kw.update(type=click.Choice(meta["choices"]), default=f.default,
                          show_default=f.default is not None, metavar=None)
            elif meta["multiple"]:
                kw.update(multiple=True, default=())
            elif kind in ("positive", "non_negative"):
                # checked by RunOptions (one-line messages of our own), not click's IntRange
                kw.update(type=int, default=f.default, show_default=f.default is not None)
            elif kind in ("positive_number", "non_negative_number"):
                kw.update(type=float, default=f.default, show_default=bool(f.default))
            else:
                kw.update(default=f.default)
            fn = click.option(*names, f.name, **kw)(fn)
        return fn

    return deco


def pop_run_options(kwargs: dict[str, Any]) -> RunOptions:
    """Take the RunOptions fields out of a click command's keyword arguments."""
    names = {f.name for f in fields(RunOptions)}
    values = {k: kwargs.pop(k) for k in list(kwargs) if k in names}
    return RunOptions.from_values(values)
