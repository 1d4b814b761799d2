"""``simulate()``: the one call behind ``pipesim run``, sweeps and the exporters."""

from __future__ import annotations

import gc
from os import PathLike
from collections.abc import Sequence
from typing import Any

from .engine.options import EngineOptions
from .engine.runtime import Runtime
from .diagnostics import enforce_strict
from .errors import ConfigError, PipesimError
from .preflight import (calibration_warnings, check_schedule_size, check_sizes, header_for_run,
                        memory_warnings)
from .result import ScheduleRun, SimulationResult
from .schedules import registry
from .schedules.registry import ScheduleSpec
from .schedules.schedule import Schedule
from .system.config import SystemConfig, load_system, system_from_dict
from .workload.model import Workload
from .workload.partition import check_chunks, partition, with_recompute


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


def resolve_shape(workload: Workload, schedule: Schedule | str | None, pp: int | None,
                  microbatches: int | None, vpp: int | None,
                  notes: list[str]) -> tuple[ScheduleSpec | None, int, int, int]:
    """The schedule's spec and its P, M, v (options override the header); nothing is built."""
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
        return spec, schedule.pp, schedule.microbatches, schedule.vpp
    P = _positive("pp", h.pp if pp is None else pp)
    M = _positive("microbatches", h.ga if microbatches is None else microbatches)
    header_vpp = h.vpp if workload.layout == "model" else 1
    if schedule is None and h.pp_schedule is not None:
        spec = file_schedule(workload)
    else:
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
    return spec, P, M, v


def file_schedule(workload: Workload) -> ScheduleSpec:
    """The schedule the header's ``pp_schedule:`` names."""
    name = workload.header.pp_schedule
    try:
        return registry.get(name)
    except ConfigError:
        raise ConfigError(f"{workload.path}:1: pp_schedule: expected a registered schedule "
                          f"(pipesim schedule --list), found {name!r}") from None


def schedule_warnings(workload: Workload, schedule: Schedule | str | None,
                      spec: ScheduleSpec | None) -> list:
    """What the header's ``pp_schedule:`` did: ran, or was overridden by ``-s``."""
    from .diagnostics import RunWarning

    named = workload.header.pp_schedule
    if named is None or spec is None:
        return []
    if schedule is None:
        return [RunWarning("schedule_from_file", f"{workload.path}: runs {spec.name}, the "
                           f"schedule its header names (pp_schedule: {named})", "-s")]
    if registry.get(named).name != spec.name:
        return [RunWarning("schedule_file_overridden", f"{workload.path}: its header names "
                           f"pp_schedule: {named}; -s {spec.name} runs instead", "")]
    return []


def resolve_schedule(workload: Workload, schedule: Schedule | str | None, pp: int | None,
                     microbatches: int | None, vpp: int | None,
                     options: dict | None, notes: list[str]) -> tuple[Schedule, Any]:
    """Pick the schedule and its P, M, v (options override the header), and build it."""
    spec, P, M, v = resolve_shape(workload, schedule, pp, microbatches, vpp, notes)
    if isinstance(schedule, Schedule):
        return schedule, spec
    return registry.generate(spec.name, P, M, v, **(options or {})), spec


def simulate(workload: Workload | str | PathLike, schedule: Schedule | str | None = None,
             system: SystemConfig | str | PathLike | dict | None = None, *,
             pp: int | None = None, microbatches: int | None = None, vpp: int | None = None,
             iterations: int = 1, layout: str = "auto", schedule_options: dict | None = None,
             trace_layers: bool = False, validate: bool = True, p2p: str | None = None,
             memory_limit_gb: float | None = None, jitter: float = 0.0, seed: int = 0,
             slow_ranks: dict[int, float] | None = None,
             layer_by_layer: bool = False, engine: str = "simpy",
             pp_comm: int | None = None, gpus: int | None = None, dp: int | None = None,
             max_actions: int | None = None, strict: bool = False,
             recompute: str = "file") -> SimulationResult:
    """Simulate ``workload`` under ``schedule`` on ``system``.

    ``workload`` is a path or a parsed :class:`Workload`; ``schedule`` a registered name, a
    :class:`Schedule`, or None (1f1b, or interleaved-1f1b when vpp > 1). ``pp``,
    ``microbatches`` (default: the header's ``ga``) and ``vpp`` override the header.
    ``p2p`` is async | blocking | batched | torch | torch-single | torch-multi (default: the
    system's ``runtime.p2p``, async on the built-in system); ``memory_limit_gb`` (default: the system's
    ``memory.capacity_gb``, 0 = none) turns an overflow into an OutOfMemoryError; ``jitter`` is
    the sigma of lognormal compute noise (seeded by ``seed``); ``slow_ranks`` maps a rank to a
    compute slow-down factor. ``layer_by_layer`` runs the reference path (one SimPy event per
    layer state) instead of one event per action; both give the same timeline. ``engine``:
    ``simpy`` (the event-driven engine) or ``evaluator`` (the exact critical-path sweep, same
    timeline; where it does not apply the SimPy engine runs and a note says why).
    ``pp_comm`` (bytes per microbatch between stages) overrides the header's; ``gpus`` (the world
    size) or ``dp`` sets the data-parallel size; ``max_actions`` caps the run's size (default
    :data:`~simulator.preflight.DEFAULT_MAX_ACTIONS`, 0 = none), checked before anything is
    built; ``strict`` refuses a run that has warnings (:mod:`simulator.diagnostics`);
    ``recompute`` is ``file`` (the header's checkpoint lists), ``none`` or ``full`` (every layer
    recomputed before its backward).
    """
    wl = _load(workload, layout)
    sysconf = _system(system)
    iterations = _positive("iterations", iterations)
    if engine not in ("simpy", "evaluator"):
        raise ConfigError(f"--engine: expected simpy or evaluator, got {engine!r}")
    if memory_limit_gb is None and sysconf.memory.capacity_bytes > 0:
        memory_limit_gb = sysconf.memory.capacity_bytes / 1e9
    options = EngineOptions(
        p2p=p2p, memory_limit_bytes=None if memory_limit_gb is None else memory_limit_gb * 1e9,
        jitter_sigma=jitter, seed=seed, slow_ranks=tuple(sorted((slow_ranks or {}).items())),
        trace_layers=trace_layers, layer_by_layer=layer_by_layer)
    notes: list[str] = []
    spec, P, M, v = resolve_shape(wl, schedule, pp, microbatches, vpp, notes)
    for rank, _ in options.slow_ranks:
        if rank >= P:
            raise ConfigError(f"--slow-rank: rank {rank} does not exist (pp = {P})")
    wl, warnings = header_for_run(wl, P, pp_comm=pp_comm, gpus=gpus, dp=dp, microbatches=M,
                                  vpp=v)
    warnings += schedule_warnings(wl, schedule, spec)
    if spec is not None and not isinstance(schedule, Schedule):
        check_sizes(wl, spec, P, M, v, schedule_options, max_actions, iterations,
                    p2p or sysconf.runtime.p2p)
    else:
        check_chunks(wl, schedule.n_chunks)
        check_schedule_size(schedule, iterations, max_actions, p2p or sysconf.runtime.p2p)
    if strict:
        enforce_strict(warnings)
    opts = schedule_options or {}
    if spec is not None and spec.needs_costs and not isinstance(schedule, Schedule) \
            and opts.get("stage_costs") is None:
        # a cost-aware schedule (auto) is built for this run's own per-stage costs
        from .engine.stage_costs import run_stage_costs

        opts = {**opts, "stage_costs": run_stage_costs(partition(wl, P * v), wl.header,
                                                       sysconf, P)}
    sched = schedule if isinstance(schedule, Schedule) else registry.generate(
        spec.name, P, M, v, **opts)
    if validate:
        from .schedules.validate import validate as check

        check(sched)
    part = with_recompute(partition(wl, sched.n_chunks), wl, recompute)
    # The run allocates many small, acyclic objects: the cyclic collector only costs time here.
    gc_was_enabled = gc.isenabled()
    gc.disable()
    try:
        runtime = Runtime(sched, part, wl.header, sysconf, iterations=iterations,
                          options=options)
        engine_used = "simpy"
        if engine == "evaluator":
            from .engine.evaluator import run as evaluate

            records, reason = evaluate(runtime)
            if reason is None:
                engine_used = "evaluator"
            else:
                notes.append(f"engine: {reason}; the SimPy engine ran")
        else:
            records = runtime.run()
    finally:
        if gc_was_enabled:
            gc.enable()
    warnings += memory_warnings(runtime.memory, records, sysconf, memory_limit_gb, wl)
    warnings += calibration_warnings(sysconf, sched.name, runtime.p2p)
    if strict:
        enforce_strict(warnings)
    result = SimulationResult(wl, sched, spec, sysconf, part, records, iterations,
                              runtime.labels, notes, runtime.options, warnings)
    result.engine_used = engine_used   # read by the summary (`engine_used`)
    return result


def compare(workload: Workload | str | PathLike, schedules: Sequence[str],
            system: SystemConfig | str | PathLike | dict | None = None, *,
            pp: int | None = None, microbatches: int | None = None, vpp: int | None = None,
            layout: str = "auto", trace_layers: bool = False, **run_options: Any
            ) -> list[ScheduleRun]:
    """Simulate ``workload`` under each schedule with the same P, M and system, in order.

    The workload is parsed once. A schedule that cannot run with these numbers (an illegal
    P/M/v, a deadlock) keeps its place with the error, and the others still run. ``vpp`` applies
    to the schedules that take any number of chunks (interleaved ones); the others run their own
    fixed number (ZB-V and DualPipeV: 2). ``run_options`` go to :func:`simulate` unchanged.
    """
    wl = _load(workload, layout)
    sysconf = _system(system)
    runs = []
    for name in schedules:
        spec = registry.get(name)
        v = vpp if spec.variable_vpp else None
        try:
            result = simulate(wl, spec.name, sysconf, pp=pp, microbatches=microbatches, vpp=v,
                              trace_layers=trace_layers, **run_options)
        except PipesimError as err:
            runs.append(ScheduleRun(spec.name, error=str(err)))
            continue
        runs.append(ScheduleRun(spec.name, result=result))
    return runs
