"""Name -> schedule generator. A new schedule is one module in ``library/`` that calls
:func:`~.registration.register`, listed in ``library/__init__.py``; the CLI, sweeps and docs list
what is registered here.

Generators that need per-stage costs (schedule synthesis) live in a layer above the engine; that
layer calls :func:`register_cost_aware` when it is imported, so this module never imports it.
Such generators are found by :func:`get` and :func:`generate` but listed apart
(:func:`cost_aware_names`), not by :func:`names`, which stays the hand-made library.

A layer above that provides cost-aware schedules hands the registry a function that registers
them (:func:`add_cost_aware_loader`; the command line does, for ``auto``); :func:`get` calls it
the first time a name is not in the library, so a run that never asks for one does not import
it. The registry holds no planning code, no import edge to it and no module name.
"""

from __future__ import annotations

from typing import Callable

from ..errors import ConfigError
from .registration import (ALIASES, LIBRARY, ClosedForm, Generator, ScheduleSpec,  # noqa: F401
                           Sizes, Work, fb_sizes, register)   # the library's side, re-exported
from .schedule import Schedule

_COST_AWARE: dict[str, ScheduleSpec] = {}
_loaded = False
# functions a layer above handed in, each registering its cost-aware schedules (called once)
_COST_AWARE_LOADERS: list[Callable[[], None]] = []


def register_cost_aware(name: str, generate: Generator, *, summary: str, default_vpp: int = 1,
                        variable_vpp: bool = False) -> None:
    """Register a generator that takes ``stage_costs=`` (e.g. synthesis' ``auto``); idempotent
    for the same function, so the registering module may be imported more than once."""
    key = name.lower()
    old = _COST_AWARE.get(key)
    if old is not None and old.generate is not generate:
        raise RuntimeError(f"cost-aware schedule {name!r} registered twice")
    _load_library()
    if key in LIBRARY or key in ALIASES:
        raise RuntimeError(f"cost-aware schedule {name!r} clashes with a library schedule")
    _COST_AWARE[key] = ScheduleSpec(key, generate, summary, default_vpp=default_vpp,
                                    variable_vpp=variable_vpp, needs_costs=True)


def add_cost_aware_loader(load: Callable[[], None]) -> None:
    """``load()`` registers cost-aware schedules (:func:`register_cost_aware`); called the first
    time :func:`get` misses a name or :func:`cost_aware_names` is asked. Adding it again does
    nothing."""
    if load not in _COST_AWARE_LOADERS:
        _COST_AWARE_LOADERS.append(load)


def _load_cost_aware() -> None:
    while _COST_AWARE_LOADERS:
        _COST_AWARE_LOADERS.pop(0)()


def cost_aware_names() -> list[str]:
    """Every cost-aware schedule (runs the loaders handed in)."""
    _load_cost_aware()
    return list(_COST_AWARE)


def _load_library() -> None:
    global _loaded
    if _loaded:
        return
    _loaded = True
    # here, not at the top: each library module imports this one to register its schedule (a
    # circle at import time); the package imports every module of it
    from . import library  # noqa: F401


def names() -> list[str]:
    _load_library()
    return list(LIBRARY)


def get(name: str) -> ScheduleSpec:
    _load_library()
    key = ALIASES.get(name.lower(), name.lower())
    if key not in LIBRARY:
        _load_cost_aware()
    spec = LIBRARY.get(key) or _COST_AWARE.get(key)
    if spec is None:
        hint = ""
        if key == "auto" and not _COST_AWARE:   # from Python, nothing installed its loader
            hint = " (auto is the planning layer's: import simulator.planning first)"
        raise ConfigError(f"--schedule: unknown schedule {name!r}{hint}; expected one of: "
                          + ", ".join(sorted(LIBRARY)))
    return spec


def spec_of(name: str) -> ScheduleSpec | None:
    """The spec a built schedule's name names (generators name what they build by the
    registered name), or None: a schedule read from a file or made by hand under another name.
    No loader runs: a name not registered yet is no registered schedule."""
    _load_library()
    return LIBRARY.get(name) or _COST_AWARE.get(name)


def torch_runtime_of(name: str) -> str:
    """The torch runtime (``torch-single`` or ``torch-multi``) that runs the schedule of this
    name: its spec's, and torch's multi-stage one for any schedule it runs from a CSV."""
    spec = spec_of(name)
    return spec.torch_runtime if spec is not None else "torch-multi"


def torch_class_of(name: str) -> str | None:
    """torch's class that runs the schedule of this name (its spec's), None: from a CSV."""
    spec = spec_of(name)
    return spec.torch_class if spec is not None else None


def megatron_of(name: str) -> str | None:
    """Megatron-LM's schedule that runs the schedule of this name (its spec's), or None."""
    spec = spec_of(name)
    return spec.megatron if spec is not None else None


def default_for(vpp: int) -> ScheduleSpec:
    """The schedule a run takes without ``--schedule``, at ``vpp`` chunks per rank."""
    want = "vpp>1" if vpp > 1 else "vpp=1"
    _load_library()
    return next(s for s in LIBRARY.values() if s.default_for == want)


def generate(name: str, pp: int, microbatches: int, vpp: int | None = None, **options) -> Schedule:
    """Build schedule ``name`` for ``pp`` ranks, ``microbatches`` microbatches, ``vpp`` chunks/rank."""
    spec = get(name)
    if pp < 1:
        raise ConfigError(f"--pp: expected a positive number of pipeline stages, got {pp}")
    if microbatches < 1:
        raise ConfigError(f"--microbatches: expected a positive number, got {microbatches}")
    v = spec.default_vpp if vpp is None else vpp
    if v < 1:
        raise ConfigError(f"--vpp: expected a positive number of chunks per rank, got {v}")
    unknown = sorted(set(options) - set(accepted := options_of(spec))) if options else ()
    if unknown:
        takes = ", ".join(accepted) if accepted else "no options"
        raise ConfigError(f"--option: {spec.name} has no option {unknown[0]!r}; it takes {takes}")
    return spec.generate(pp, microbatches, v, **options)


def options_of(spec: ScheduleSpec) -> list[str]:
    """The keyword options a generator takes beyond (pp, microbatches, vpp)."""
    # start-up: inspect (with ast, dis and tokenize) is ~10 ms of a small `pipesim run`, which
    # asks this only when given options
    import inspect

    params = list(inspect.signature(spec.generate).parameters.values())[3:]
    return [p.name for p in params
            if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY) and not p.name.startswith("_")]
