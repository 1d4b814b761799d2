"""Name -> schedule generator. A new schedule is one module in ``library/`` that calls
:func:`~.registration.register`, listed in ``library/__init__.py``; the CLI, sweeps and docs list
what is registered here.

A generator that needs per-stage costs (``needs_costs``: ``auto``, synthesized for them) is
found by :func:`get` and :func:`generate` like any other but listed apart
(:func:`cost_aware_names`), not by :func:`names`, which stays the hand-made library.
"""

from __future__ import annotations

from ..errors import ConfigError
from .registration import (ALIASES, LIBRARY, ClosedForm, Generator, ScheduleSpec,  # noqa: F401
                           Sizes, Work, fb_sizes, register)   # the library's side, re-exported
from .schedule import Schedule

_loaded = False


def cost_aware_names() -> list[str]:
    """Every schedule that takes per-stage costs (``stage_costs=``)."""
    _load_library()
    return [name for name, spec in LIBRARY.items() if spec.needs_costs]


def _load_library() -> None:
    global _loaded
    if _loaded:
        return
    _loaded = True
    # here, not at the top: the library is read the first time a schedule is looked up, not by
    # every module that imports the registry for its types; the package imports every module
    from . import library  # noqa: F401


def names() -> list[str]:
    """The hand-made schedules, in the order their modules registered."""
    _load_library()
    return [name for name, spec in LIBRARY.items() if not spec.needs_costs]


def get(name: str) -> ScheduleSpec:
    _load_library()
    key = ALIASES.get(name.lower(), name.lower())
    spec = LIBRARY.get(key)
    if spec is None:
        raise ConfigError(f"--schedule: unknown schedule {name!r}; expected one of: "
                          + ", ".join(sorted(names())))
    return spec


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
