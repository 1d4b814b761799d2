"""``simulate()``: the one call behind ``pipesim run``, sweeps and the exporters.

A run takes its options whole (:class:`~simulator.run_options.RunOptions`, checked when made)
and goes in three steps: :func:`plan_run` decides its shape once (a
:class:`~simulator.preflight.RunPlan`: P, M, v, the header as run, the partition, the link
model, the warnings), :func:`build_schedule` builds and checks the schedule for that plan, and
:func:`execute` compiles it and runs it on the engine asked for.
"""

from __future__ import annotations

import gc
from collections.abc import Sequence
from os import PathLike
from typing import Any

from .diagnostics import RunWarning, enforce_strict
from .engine.options import EngineOptions
from .engine.program import Program
from .engine.runtime import RunRecords, Runtime
from .errors import ConfigError, PipesimError
from .preflight import (DEFAULT_MAX_ACTIONS, Drawn, RunPlan, calibration_warnings, ddp_report,
                        overhead_report, retention_warnings,
                        check_schedule_size, check_sizes, counted_actions, header_for_run,
                        memory_warnings)
from .result import ScheduleRun, SimulationResult
from .run_options import RunOptions
from .schedules import registry
from .schedules.registry import ScheduleSpec
from .schedules.schedule import Schedule
from .schedules.validate import validate as check_schedule
from .system.config import (SystemConfig, check_memory_keys, load_system, system_from_dict,
                            with_fsdp, with_param_dtype)
from .system.topology import LinkModel
from .workload.model import Workload
from .workload.parser import load_workload
from .workload.partition import check_chunks, partition, with_recompute
from .workload.stage_layers import split_note, with_split

__all__ = ["simulate", "compare", "compare_vpp", "interleaves", "plan_run", "build_schedule",
           "execute", "resolve_shape",
           "RunOptions", "RunPlan"]


def _load(workload: Workload | str | PathLike, layout: str) -> Workload:
    if isinstance(workload, Workload):
        return workload
    return load_workload(workload, layout=layout)


def _system(system: SystemConfig | str | PathLike | dict | None) -> SystemConfig:
    if isinstance(system, SystemConfig):
        return system
    if isinstance(system, dict):
        return system_from_dict(system)
    return load_system(system)


def resolve_shape(workload: Workload, schedule: Schedule | str | None, options: RunOptions,
                  notes: list[str]) -> tuple[ScheduleSpec | None, int, int, int]:
    """The schedule's spec and its P, M, v (options override the header); nothing is built."""
    h = workload.header
    pp, microbatches, vpp = options.pp, options.microbatches, options.vpp
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
    # the header's values are the file's (checked by the parser); the options' by RunOptions
    P = h.pp if pp is None else pp
    M = h.ga if microbatches is None else microbatches
    header_vpp = h.vpp if workload.layout == "model" else 1
    if schedule is None and h.pp_schedule is not None:
        spec = file_schedule(workload)
    else:
        if schedule is None:    # the spec registered as the default at that many chunks
            spec = registry.default_for(vpp if vpp is not None else header_vpp)
        else:
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
        v = vpp
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
                      spec: ScheduleSpec | None) -> list[RunWarning]:
    """What the header's ``pp_schedule:`` did: ran, or was overridden by ``-s``."""
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


def decided_keys(workload: Workload, schedule: Schedule | str | None,
                 spec: ScheduleSpec | None, options: RunOptions) -> frozenset[str]:
    """The header fields the run's options set, so that a file lacking them is not running on
    a default: ``pp`` (--pp), ``ga`` (-m), ``vpp`` (--vpp, or a schedule of a fixed chunk count
    that was named rather than chosen by the header's vpp) and ``checkpoints`` (--recompute)."""
    if isinstance(schedule, Schedule):
        decided = {"pp", "ga", "vpp"}
    else:
        decided = {k for k, v in (("pp", options.pp), ("ga", options.microbatches),
                                  ("vpp", options.vpp)) if v is not None}
        named = schedule is not None or workload.header.pp_schedule is not None
        if (workload.layout == "model" and spec is not None and not spec.variable_vpp
                and named):
            decided.add("vpp")
    if options.recompute != "file":
        decided |= {"checkpoints", "checkpoint_initiates"}
    return frozenset(decided)


def drawn_as(options: RunOptions, system: SystemConfig) -> Drawn:
    """What one action of this run costs against the budget: its point-to-point mode and the
    outputs it will be drawn into."""
    return Drawn(options.p2p or system.runtime.p2p, options.gantt, options.trace_layers)


def plan_run(workload: Workload, schedule: Schedule | str | None, system: SystemConfig,
             options: RunOptions) -> RunPlan:
    """The run's shape, decided once: P, M, v, the header as run (and its warnings), the sizes
    checked against the budget, the partition and the link model. Nothing is built yet."""
    notes: list[str] = []
    spec, P, M, v = resolve_shape(workload, schedule, options, notes)
    for rank, _ in options.slow_ranks():
        if rank >= P:
            raise ConfigError(f"--slow-rank: rank {rank} does not exist (pp = {P})")
    wl, warnings = header_for_run(workload, P, pp_comm=options.pp_comm, gpus=options.gpus,
                                  dp=options.dp, microbatches=M, vpp=v,
                                  decided=decided_keys(workload, schedule, spec, options),
                                  schedule_name=spec.name if spec is not None else "")
    warnings += schedule_warnings(wl, schedule, spec)
    drawn = drawn_as(options, system)   # the mode and the outputs decide what an action costs
    split = options.pipeline_split()
    if isinstance(schedule, Schedule):
        chunks = schedule.n_chunks
        check_chunks(wl, chunks, split, P)
        check_schedule_size(wl, schedule, options.iterations, options.max_actions, drawn)
    else:
        chunks = check_sizes(wl, spec, P, M, v, options.schedule_options, options.max_actions,
                             options.iterations, drawn, split)
    wl = with_split(wl, P, max(1, chunks // P), split)
    note = split_note(wl, chunks, split)
    if note is not None:
        notes.append(note)
    if options.strict:
        enforce_strict(warnings)
    return RunPlan(wl, spec, P, M, v, options.iterations, chunks, partition(wl, chunks),
                   LinkModel(wl.header, system, P), warnings, notes)


def build_schedule(plan: RunPlan, schedule: Schedule | str | None, system: SystemConfig,
                   options: RunOptions) -> Schedule:
    """The schedule the plan asks for (a cost-aware one, auto or zb-greedy, built for this run's own
    per-stage costs), checked unless ``options.validate`` is off."""
    if isinstance(schedule, Schedule):
        sched = schedule
    else:
        opts = dict(options.schedule_options or {})
        if plan.spec.needs_costs and opts.get("stage_costs") is None:
            # only a cost-aware schedule (auto) needs it: a plain run's start-up does without
            from .engine.stage_costs import run_stage_costs

            # the costs the run will charge: its recompute re-runs forwards in the backwards;
            # the memory its point-to-point mode keeps (a zero-bubble runtime's I frees the
            # stash, torch's keeps the graph to the W)
            part = with_recompute(plan.partition, plan.workload, options.recompute,
                                  *options.recompute_grouping())
            opts["stage_costs"] = run_stage_costs(part, plan.workload.header, system, plan.pp,
                                                  links=plan.links,
                                                  p2p=options.p2p or system.runtime.p2p)
        sched = registry.generate(plan.spec.name, plan.pp, plan.microbatches, plan.vpp, **opts)
    if options.validate:
        check_schedule(sched)
    return sched


def execute(plan: RunPlan, sched: Schedule, system: SystemConfig, engine: EngineOptions,
            which: str, recompute: str,
            grouping: tuple[str, int] = ("uniform", 1)) -> tuple[Runtime, RunRecords, str]:
    """Compile ``sched`` for the plan and run it: the runtime, its records and the engine that
    ran (``which`` = evaluator falls back to simpy with a note where it does not apply)."""
    part = plan.partition
    if sched.n_chunks != plan.chunks:   # a generator that chose its own number of chunks
        part = partition(plan.workload, sched.n_chunks)
    part = with_recompute(part, plan.workload, recompute, *grouping)
    header = plan.workload.header
    links = plan.links if sched.pp == plan.pp else None
    # The run allocates many small, acyclic objects: the cyclic collector only costs time here.
    gc_was_enabled = gc.isenabled()
    gc.disable()
    try:
        program = Program.compile(sched, part, header, system, p2p=engine.p2p, links=links,
                                  ddp=engine.ddp, tp_comm_overlap=engine.tp_comm_overlap,
                                  p2p_scatter_gather=engine.p2p_scatter_gather)
        runtime = Runtime(sched, part, header, system, iterations=plan.iterations,
                          options=engine, program=program)
        if which == "evaluator":
            # imported when asked for: the default (simpy) run's start-up does without it
            from .engine.evaluator import run as evaluate

            records, reason = evaluate(runtime)
            if reason is None:
                return runtime, records, "evaluator"
            plan.notes.append(f"engine: {reason}; the SimPy engine ran")
            return runtime, records, "simpy"
        return runtime, runtime.run(), "simpy"
    finally:
        if gc_was_enabled:
            gc.enable()


def simulate(workload: Workload | str | PathLike, schedule: Schedule | str | None = None,
             system: SystemConfig | str | PathLike | dict | None = None,
             options: RunOptions | None = None, **keywords: Any) -> SimulationResult:
    """Simulate ``workload`` under ``schedule`` on ``system`` with ``options``.

    ``workload`` is a path or a parsed :class:`Workload`; ``schedule`` a registered name, a
    :class:`Schedule`, or None (``options.schedule``, else the header's ``pp_schedule``, else
    1f1b, or interleaved-1f1b when vpp > 1); ``system`` a SystemConfig, a YAML path, a dict or
    None (the built-in). ``options`` is a :class:`~simulator.run_options.RunOptions` (each
    field's help says what it does; ``pipesim run --help`` lists them). Keyword arguments are a
    shim for API callers, laid over ``options``: the fields' names (``memory_limit`` in GiB),
    plus ``memory_limit_gb`` (GB of 10^9 bytes) and ``slow_ranks`` (a mapping rank -> factor),
    e.g. ``simulate(wl, "1f1b", pp=4, jitter=0.1)``.
    """
    opts = RunOptions.given(options, keywords)
    grouping = opts.recompute_grouping()   # refused from the options alone, before any work
    if schedule is None:
        schedule = opts.schedule
    wl = _load(workload, opts.layout)
    # Megatron-LM's DDP allocates its gradient buffer in the reduction's dtype
    # (megatron/core/distributed/param_and_grad_buffer.py: fp32 if grad_reduce_in_fp32, else
    # the parameters' dtype), so --grad-reduce-in-bf16 halves the gradients' memory too
    opts.check_sharding()
    if opts.fsdp is not None:
        sysconf = with_fsdp(_system(system), opts.fsdp, opts.param_dtype or "bf16")
    else:
        sysconf = with_param_dtype(_system(system), opts.param_dtype,
                                   opts.use_distributed_optimizer,
                                   opts.grad_reduce_dtype if opts.uses_megatron_ddp else None)
    check_memory_keys(sysconf.memory)
    engine = opts.engine_options(sysconf.memory.capacity_bytes)
    plan = plan_run(wl, schedule, sysconf, opts)
    sched = build_schedule(plan, schedule, sysconf, opts)
    runtime, records, engine_used = execute(plan, sched, sysconf, engine, opts.engine,
                                            opts.recompute, grouping)
    warnings = plan.warnings
    warnings += memory_warnings(runtime.program.memory, records, sysconf,
                                opts.memory_limit_bytes(sysconf.memory.capacity_bytes),
                                plan.workload, plan.notes)
    warnings += calibration_warnings(sysconf, sched.name, runtime.program.p2p)
    warnings += retention_warnings(sysconf, sched.name, runtime.program.p2p)
    ddp_warnings, ddp_notes = ddp_report(runtime.program.tail, sysconf, opts,
                                         plan.workload.header, sched.pp)
    warnings += ddp_warnings
    plan.notes.extend(ddp_notes)
    overhead_warnings, overhead_notes = overhead_report(sysconf, runtime.program.p2p)
    warnings += overhead_warnings
    plan.notes.extend(overhead_notes)
    if opts.strict:
        enforce_strict(warnings)
    program = runtime.program
    return SimulationResult(plan.workload, sched, plan.spec, sysconf, program.partition, records,
                            plan.iterations, program.labels, plan.notes, runtime.options,
                            warnings, engine_used)


def compare(workload: Workload | str | PathLike,
            schedules: Sequence[str | tuple[str, int | None]],
            system: SystemConfig | str | PathLike | dict | None = None,
            options: RunOptions | None = None, **keywords: Any) -> list[ScheduleRun]:
    """Simulate ``workload`` under each schedule with the same P, M and system, in order.

    A schedule is a registered name, or ``(name, v)``: its own count of virtual stages per rank
    (``pipesim compare --schedules 1f1b,interleaved-1f1b:2``). The workload is parsed once. A
    schedule that cannot run with these numbers (an illegal P/M/v, a deadlock) keeps its place
    with the error, and the others still run. Which schedules a common ``vpp`` reaches is
    :func:`compare_vpp`'s rule. ``options`` and ``keywords`` as for :func:`simulate`.
    """
    opts = RunOptions.given(options, keywords)
    opts.recompute_grouping()   # one refusal for every schedule, before any work
    wl = _load(workload, opts.layout)
    sysconf = _system(system)
    each, set_by = [], []
    for entry in schedules:
        name, own = (entry, None) if isinstance(entry, str) else entry
        spec = registry.get(name)
        v, by = compare_vpp(spec, own, opts.vpp)
        each.append((spec, opts._replace(vpp=v)))
        set_by.append(by)
    _check_compare_size(wl, each, sysconf, opts.max_actions)
    runs = []
    for (spec, one), by in zip(each, set_by):
        try:
            result = simulate(wl, spec.name, sysconf, one)
        except PipesimError as err:
            runs.append(ScheduleRun(spec.name, error=str(err), vpp_set_by=by))
            continue
        runs.append(ScheduleRun(spec.name, result=result, vpp_set_by=by))
    return runs


def interleaves(spec: ScheduleSpec) -> bool:
    """A schedule whose point is its virtual stages (interleaved 1F1B, looped BFS, Hanayo: two
    or more by default, any count taken). ZB-H1 takes a count too, but at v > 1 it is another
    schedule (the interleaved zero-bubble one), so a common ``--vpp`` does not reach it."""
    return spec.variable_vpp and spec.default_vpp > 1


def compare_vpp(spec: ScheduleSpec, own: int | None, common: int | None
                ) -> tuple[int | None, str]:
    """(vpp to run ``spec`` at, None for the usual resolution; what set it). A schedule's own
    count (``name:v``) wins; a common ``--vpp`` reaches only the schedules that
    :func:`interleaves`; ZB-H1 without its own count runs plain ZB-H1 (v = 1) whatever the
    header's vpp; the others run their fixed count."""
    if own is not None:
        if not spec.variable_vpp and own != spec.default_vpp:
            raise ConfigError(f"--schedules: {spec.name}:{own}: {spec.name} runs "
                              f"{spec.default_vpp} virtual stage(s) per rank, not {own}")
        return own, "--schedules"
    if interleaves(spec):
        return (None, "default") if common is None else (common, "--vpp")
    if spec.variable_vpp:
        return spec.default_vpp, "default"
    return None, "default"


def _check_compare_size(wl: Workload, each: list[tuple[ScheduleSpec, RunOptions]],
                        system: SystemConfig, max_actions: int | None) -> None:
    """The schedules of one compare share one budget: their counted actions in all, before any
    runs (each alone may be within it). A schedule that cannot run, or is over the budget by
    itself, costs nothing: its own row says why."""
    limit = DEFAULT_MAX_ACTIONS if max_actions is None else max_actions
    if limit <= 0 or len(each) < 2:
        return
    sizes = []
    for spec, one in each:
        try:
            _, P, M, v = resolve_shape(wl, spec.name, one, [])
            sizes.append((spec.name, counted_actions(wl, spec, P, M, v, one.schedule_options,
                                                     one.iterations, drawn_as(one, system))))
        except PipesimError:
            continue
    sizes = [(name, size) for name, size in sizes if size <= limit]
    total = sum(size for _, size in sizes)
    if total > limit:
        parts = ", ".join(f"{name} {size:,}" for name, size in sizes)
        raise ConfigError(
            f"--max-actions: compare runs {len(sizes)} schedules of up to {total:,} actions in "
            f"all ({parts}), above the limit of {limit:,} (about 10 s of simulation); pass "
            f"--max-actions {total} (or 0 for no limit) to run them anyway")
