"""``simulate()``: the one call behind ``pipesim run``, sweeps and the exporters."""

from __future__ import annotations

from os import PathLike
from typing import Any

from .engine.runtime import Runtime
from .errors import ConfigError
from .result import SimulationResult
from .schedules import registry
from .schedules.schedule import Schedule
from .system.config import SystemConfig, load_system, system_from_dict
from .workload.model import Workload


def _load(workload: Workload | str | PathLike, layout: str) -> Workload:
    if isinstance(workload, Workload):
        return workload
    from .workload.parser import load_workload

    return load_workload(workload, layout=layout)


def _system(system: SystemConfig | str | PathLike | dict | None) -> SystemConfig:
    if isinstance(system, SystemConfig):
        return system
    if isinstance(system, dict):
        return system_from_dict(system)
    return load_system(system)


def _positive(name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError(f"--{name}: expected a positive integer, got {value!r}")
    return value


def resolve_schedule(workload: Workload, schedule: Schedule | str | None, pp: int | None,
                     microbatches: int | None, vpp: int | None,
                     options: dict | None, notes: list[str]) -> tuple[Schedule, Any]:
    """Pick the schedule and its P, M, v: options override the header."""
    h = workload.header
    if isinstance(schedule, Schedule):
        for opt, given, have in (("pp", pp, schedule.pp), ("microbatches", microbatches,
                                 schedule.microbatches), ("vpp", vpp, schedule.vpp)):
            if given is not None and given != have:
                raise ConfigError(f"--{opt} {given} disagrees with the given schedule ({have})")
        try:
            spec = registry.get(schedule.name)
        except ConfigError:
            spec = None
        return schedule, spec
    P = _positive("pp", h.pp if pp is None else pp)
    M = _positive("microbatches", h.ga if microbatches is None else microbatches)
    header_vpp = h.vpp if workload.layout == "model" else 1
    if schedule is None:
        chosen_v = vpp if vpp is not None else header_vpp
        schedule = "interleaved-1f1b" if chosen_v > 1 else "1f1b"
    spec = registry.get(schedule)
    if vpp is None:
        if spec.variable_vpp:
            v = header_vpp if header_vpp > 1 else spec.default_vpp
        else:
            v = spec.default_vpp
            if header_vpp != v:
                notes.append(f"header vpp {header_vpp} not used: {spec.name} runs {v} chunk(s) "
                             "per rank")
    else:
        v = _positive("vpp", vpp)
    return registry.generate(spec.name, P, M, v, **(options or {})), spec


def simulate(workload: Workload | str | PathLike, schedule: Schedule | str | None = None,
             system: SystemConfig | str | PathLike | dict | None = None, *,
             pp: int | None = None, microbatches: int | None = None, vpp: int | None = None,
             iterations: int = 1, layout: str = "auto", schedule_options: dict | None = None,
             trace_layers: bool = False, validate: bool = True) -> SimulationResult:
    """Simulate ``workload`` under ``schedule`` on ``system``.

    ``workload`` is a path or a parsed :class:`Workload`; ``schedule`` a registered name, a
    :class:`Schedule`, or None (1f1b, or interleaved-1f1b when vpp > 1). ``pp``,
    ``microbatches`` (default: the header's ``ga``) and ``vpp`` override the header.
    """
    wl = _load(workload, layout)
    sysconf = _system(system)
    iterations = _positive("iterations", iterations)
    notes: list[str] = []
    sched, spec = resolve_schedule(wl, schedule, pp, microbatches, vpp, schedule_options, notes)
    if validate:
        from .schedules.validate import validate as check

        check(sched)
    partition = wl.partition(sched.n_chunks)
    runtime = Runtime(sched, partition, wl.header, sysconf, iterations=iterations,
                      trace_layers=trace_layers)
    records = runtime.run()
    return SimulationResult(wl, sched, spec, sysconf, partition, records, iterations,
                            runtime.labels, notes)
