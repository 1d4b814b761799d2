"""pipesim: a discrete-event simulator of pipeline-parallel training.

``simulate(workload, schedule, system, options)`` runs one simulation (``options`` a
``simulator.run_options.RunOptions``; keyword arguments such as ``pp=4`` are laid over it) and
returns a :class:`SimulationResult` whose ``to_dict()`` is the JSON summary; ``compare`` runs
several schedules on one workload. The names load on first use, so importing one layer of the package
(``simulator.workload``, say) does not import the engine.

No class on ``pipesim run``'s path is a dataclass: records are ``typing.NamedTuple`` (a change
is ``x._replace(...)``), mutable state plain classes with ``__slots__``. ``pipesim run`` creates
every class of the modules it imports; a frozen dataclass cost about five times a NamedTuple to
create, and the ``dataclasses`` module (with inspect) ~16 ms to import, together about a third
of a small run (benchmarks/bench_startup_simai.py).
"""

from __future__ import annotations

TYPE_CHECKING = False
if TYPE_CHECKING:   # not typing itself: `pipesim` imports this package first, before its run
    from typing import Any

__version__ = "0.1.0"

_LAZY = {
    "simulate": ("api", "simulate"),
    "compare": ("api", "compare"),
    "SimulationResult": ("result", "SimulationResult"),
    "PipesimError": ("errors", "PipesimError"),
    "WorkloadError": ("errors", "WorkloadError"),
    "ConfigError": ("errors", "ConfigError"),
    "ScheduleError": ("errors", "ScheduleError"),
    "DeadlockError": ("errors", "DeadlockError"),
    "OutOfMemoryError": ("errors", "OutOfMemoryError"),
}

__all__ = [*_LAZY, "__version__"]


def __getattr__(name: str) -> Any:
    found = _LAZY.get(name)
    if found is None:
        raise AttributeError(f"module 'simulator' has no attribute {name!r}")
    from importlib import import_module  # the package face loads each name on first use

    value = getattr(import_module(f"{__name__}.{found[0]}"), found[1])
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)
