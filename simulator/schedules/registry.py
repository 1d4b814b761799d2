"""Name -> schedule generator. A new schedule is one module in ``library/`` that calls
:func:`register`; the CLI, sweeps and docs list what is registered here.

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

import importlib
import inspect
import pkgutil
from typing import Callable, NamedTuple

from ..errors import ConfigError
from .schedule import Schedule

Generator = Callable[..., Schedule]
# sizes(pp, microbatches, vpp, options) -> (model chunks, an upper bound on the actions): what a
# run needs, known from the parameters alone, before anything is built
Sizes = Callable[[int, int, int, dict], "tuple[int, int]"]
# closed_form(pp, microbatches, vpp) -> bubble ratio under uniform costs (F = I = W, B = 2F, no
# communication), of the makespan (``closed_form_basis="makespan"``) or of each stage's own span
# from its first to its last action (``"own"``, how the zero-bubble paper counts)
ClosedForm = Callable[[int, int, int], float]
# work(pp, microbatches, vpp, actions) -> what building the schedule costs, counted in actions
# of the engine (about 14 us each): for generators whose construction grows faster than the
# actions they emit (measured by benchmarks/bench_fuzz.py's finds), so the one size budget
# counts what they really cost
Work = Callable[[int, int, int, int], int]


# a NamedTuple, not a dataclass: start-up (simulator/__init__.py)
class ScheduleSpec(NamedTuple):
    name: str
    generate: Generator
    summary: str
    closed_form: ClosedForm | None = None
    formula: str = ""
    default_vpp: int = 1
    aliases: tuple[str, ...] = ()
    variable_vpp: bool = False   # takes any --vpp (interleaved); else fixed at default_vpp
    closed_form_basis: str = "makespan"   # or "own": see ClosedForm
    sizes: Sizes | None = None   # default: pp x vpp chunks, 3 actions per stage and microbatch
    work: Work | None = None     # default: building costs what the actions cost

    def size_of(self, pp: int, microbatches: int, vpp: int, options: dict | None = None
                ) -> tuple[int, int]:
        """(model chunks, most actions) of the schedule at these sizes, without building it."""
        if self.sizes is not None:
            return self.sizes(pp, microbatches, vpp, options or {})
        return pp * vpp, 3 * pp * vpp * microbatches

    def work_of(self, pp: int, microbatches: int, vpp: int, actions: int) -> int:
        """What building the schedule costs, in engine actions (see :data:`Work`)."""
        if self.work is None:
            return actions
        return max(actions, self.work(pp, microbatches, vpp, actions))
    needs_costs: bool = False   # takes stage_costs=...; registered by a layer above (planning)
    flushes: bool = True        # False: runs ``iterations`` minibatches without a flush (2BW)
    shares_weights: bool = False   # True: two stages run on one set of weights (DualPipe)


def fb_sizes(pp: int, microbatches: int, vpp: int, options: dict) -> tuple[int, int]:
    """Sizes of a schedule whose backward is one B: a forward and a backward per stage-mb."""
    return pp * vpp, 2 * pp * vpp * microbatches


_REGISTRY: dict[str, ScheduleSpec] = {}
_COST_AWARE: dict[str, ScheduleSpec] = {}
_ALIASES: dict[str, str] = {}
_loaded = False
# functions a layer above handed in, each registering its cost-aware schedules (called once)
_COST_AWARE_LOADERS: list[Callable[[], None]] = []


def register(name: str, *, summary: str, closed_form: ClosedForm | None = None,
             formula: str = "", default_vpp: int = 1, aliases: tuple[str, ...] = (),
             variable_vpp: bool = False, closed_form_basis: str = "makespan",
             sizes: Sizes | None = None, work: Work | None = None, flushes: bool = True,
             shares_weights: bool = False) -> Callable[[Generator], Generator]:
    """Decorator: ``@register("1f1b", summary=...)`` on ``def generate(pp, microbatches, vpp=1, **opts)``."""

    def deco(fn: Generator) -> Generator:
        if name in _REGISTRY:
            raise RuntimeError(f"schedule {name!r} registered twice")
        _REGISTRY[name] = ScheduleSpec(name, fn, summary, closed_form, formula, default_vpp, aliases,
                                        variable_vpp, closed_form_basis, sizes=sizes, work=work,
                                        flushes=flushes, shares_weights=shares_weights)
        for alias in aliases:
            if alias in _ALIASES or alias in _REGISTRY:
                raise RuntimeError(f"schedule alias {alias!r} registered twice")
            _ALIASES[alias] = name
        return fn

    return deco


def register_cost_aware(name: str, generate: Generator, *, summary: str, default_vpp: int = 1,
                        variable_vpp: bool = False) -> None:
    """Register a generator that takes ``stage_costs=`` (e.g. synthesis' ``auto``); idempotent
    for the same function, so the registering module may be imported more than once."""
    key = name.lower()
    old = _COST_AWARE.get(key)
    if old is not None and old.generate is not generate:
        raise RuntimeError(f"cost-aware schedule {name!r} registered twice")
    _load_library()
    if key in _REGISTRY or key in _ALIASES:
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
    # here, not at the top: each library module imports this one to register its schedule
    from . import library

    # by name: each module of library/ registers its schedule when imported (and imports this
    # module to do so, so the registry cannot import them by an import statement: a circle)
    for mod in sorted(pkgutil.iter_modules(library.__path__), key=lambda m: m.name):
        importlib.import_module(f"{library.__name__}.{mod.name}")


def names() -> list[str]:
    _load_library()
    return list(_REGISTRY)


def get(name: str) -> ScheduleSpec:
    _load_library()
    key = _ALIASES.get(name.lower(), name.lower())
    if key not in _REGISTRY:
        _load_cost_aware()
    spec = _REGISTRY.get(key) or _COST_AWARE.get(key)
    if spec is None:
        hint = ""
        if key == "auto" and not _COST_AWARE:   # from Python, nothing installed its loader
            hint = " (auto is the planning layer's: import simulator.planning first)"
        raise ConfigError(f"--schedule: unknown schedule {name!r}{hint}; expected one of: "
                          + ", ".join(sorted(_REGISTRY)))
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
    accepted = options_of(spec)
    unknown = sorted(set(options) - set(accepted))
    if unknown:
        takes = ", ".join(accepted) if accepted else "no options"
        raise ConfigError(f"--option: {spec.name} has no option {unknown[0]!r}; it takes {takes}")
    return spec.generate(pp, microbatches, v, **options)


def options_of(spec: ScheduleSpec) -> list[str]:
    """The keyword options a generator takes beyond (pp, microbatches, vpp)."""
    params = list(inspect.signature(spec.generate).parameters.values())[3:]
    return [p.name for p in params
            if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY) and not p.name.startswith("_")]
