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
    from .synthesis import auto  # noqa: F401  (auto, beside the search it runs)


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


def spec_of(name: str) -> ScheduleSpec | None:
    """The spec a built schedule's name names (generators name what they build by the
    registered name), or None: a schedule read from a file or made by hand under another name."""
    _load_library()
    return LIBRARY.get(name)


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
