"""Before any work: what the run's options make of the workload, and whether its sizes are sane.

Everything here is decided from the parameters and the parsed rows alone, in well under a
second, so an impossible run is refused before a schedule is built, and every default that will
change a number is a :class:`~simulator.diagnostics.RunWarning` from the start.
"""

from __future__ import annotations

from typing import NamedTuple

from .diagnostics import RunWarning
from .errors import ConfigError
from .schedules.registry import ScheduleSpec
from .schedules.schedule import Schedule
from .system.per_runtime import for_runtime
from .system.topology import LinkModel
from .units import fmt_bytes
from .workload.header import defaults_note
from .workload.model import CommGroup, Layer, Partition, Workload
from .workload.partition import check_chunks

# The most actions a run may have unless --max-actions says otherwise: the largest allowed run
# finishes in about 10 s on a 2-core machine (docs/performance.md).
DEFAULT_MAX_ACTIONS = 700_000
# What one action costs the engine per point-to-point mode, as a multiple of an asynchronous one
# (benchmarks/bench_run_cost.py: CPU per action with jitter, 2 cores: async 6-11 us, torch's
# runtimes 19-23 us, blocking 28 us, batched 29-47 us): a run's actions count this many times
# against --max-actions, so every mode's largest allowed run stays near 10 s.
P2P_ACTION_COST = {"async": 1, "torch": 2, "torch-single": 2, "torch-multi": 2, "blocking": 3,
                   "batched": 4}
# What drawing a run costs, in asynchronous actions, added to each action's own cost when the
# run is drawn (benchmarks/bench_writer_cost.py; 14 us a unit): a Gantt chart's bar and label
# 87-90 us; a Perfetto trace's slices, flows and counters ~157 us an action, plus 13-25 us and
# ~2.3 KB each layer's slice (5M slices took 144 s and 11 GB before this count).
GANTT_ACTION_COST = 7
TRACE_ACTION_COST = 12
TRACE_LAYER_COST = 2
# What a GPU holds when no system says (A100 / H100 SXM: "80 GB" is 80 GiB of HBM).
TYPICAL_CAPACITY_BYTES = 80 * 2**30


# a NamedTuple, not a dataclass: start-up (simulator/__init__.py)
class Drawn(NamedTuple):
    """What the run's outputs cost beyond the run (--gantt, --trace) and the point-to-point mode
    each action is counted at: one action's cost, in asynchronous actions."""
    p2p: str = "async"
    gantt: bool = False
    trace: bool = False

    def weight(self, layers_per_action: float = 0.0) -> int:
        weight = P2P_ACTION_COST.get(self.p2p, 1)
        weight += GANTT_ACTION_COST * self.gantt
        if self.trace:
            weight += TRACE_ACTION_COST + round(TRACE_LAYER_COST * layers_per_action)
        return weight

    def says(self, weight: int, counted: int) -> str:
        """What the weight is made of, for the refusal: nothing for a plain asynchronous run,
        ``, each counted 2x with --p2p torch (N)``, or each part when outputs are drawn."""
        p2p = P2P_ACTION_COST.get(self.p2p, 1)
        if not (self.gantt or self.trace):
            return f", each counted {weight}x with --p2p {self.p2p} ({counted:,})" if p2p > 1 else ""
        parts = [f"--p2p {self.p2p} {p2p}"]
        if self.gantt:
            parts.append(f"--gantt {GANTT_ACTION_COST}")
        if self.trace:
            parts.append(f"--trace {weight - p2p - GANTT_ACTION_COST * self.gantt} "
                         f"({TRACE_ACTION_COST} and {TRACE_LAYER_COST} a layer)")
        return f", each counted {weight}x ({', '.join(parts)}: {counted:,})"


def _layers_per_action(workload: Workload, chunks: int) -> float:
    """Rows one action runs, on average: a trace draws a slice for each."""
    return len(workload.layers) / max(1, chunks)


def check_sizes(workload: Workload, spec: ScheduleSpec, pp: int, microbatches: int, vpp: int,
                options: dict | None, max_actions: int | None, iterations: int = 1,
                drawn: Drawn = Drawn()) -> int:
    """Refuse a run its sizes make impossible or too large (its actions in every iteration,
    weighted by the point-to-point mode's cost per action and by what drawing them costs);
    returns the model chunks it needs."""
    chunks, actions = spec.size_of(pp, microbatches, vpp, options)
    check_chunks(workload, chunks)
    built = spec.work_of(pp, microbatches, vpp, actions)
    weight = drawn.weight(_layers_per_action(workload, chunks) if drawn.trace else 0.0)
    work = "runs up to {actions:,} actions"
    if iterations > 1:
        work = f"x {iterations} iterations " + work
    runs = actions * iterations
    work += drawn.says(weight, runs * weight).replace("{", "{{").replace("}", "}}")
    check_actions(spec, pp, microbatches, vpp, runs, max_actions, work=work,
                  built=built if iterations == 1 or built > actions else None, weight=weight)
    return chunks


def counted_actions(workload: Workload, spec: ScheduleSpec, pp: int, microbatches: int,
                    vpp: int, options: dict | None, iterations: int = 1,
                    drawn: Drawn = Drawn()) -> int:
    """What a run counts against --max-actions: its actions x iterations, each weighted by its
    point-to-point mode and its outputs, or what building its schedule costs when that is more."""
    chunks, actions = spec.size_of(pp, microbatches, vpp, options)
    built = spec.work_of(pp, microbatches, vpp, actions)
    weight = drawn.weight(_layers_per_action(workload, chunks) if drawn.trace else 0.0)
    return max(actions * iterations * weight, built)


def check_schedule_size(workload: Workload, schedule: Schedule, iterations: int,
                        max_actions: int | None, drawn: Drawn = Drawn()) -> None:
    """The same budget for a schedule given whole (a CSV file): its actions in every
    iteration, weighted by the point-to-point mode and the outputs."""
    actions = sum(len(r) for r in schedule.ranks) * iterations
    weight = drawn.weight(_layers_per_action(workload, schedule.n_chunks) if drawn.trace
                          else 0.0)
    counted = actions * weight
    limit = DEFAULT_MAX_ACTIONS if max_actions is None else max_actions
    if limit > 0 and counted > limit:
        raise ConfigError(
            f"--max-actions: schedule {schedule.name} ({schedule.pp} ranks) x {iterations} "
            f"iteration(s) runs {actions:,} actions{drawn.says(weight, counted)}, above the "
            f"limit of {limit:,} (about 10 s of simulation); pass --max-actions {counted} (or 0 "
            "for no limit) to run it anyway")


def check_actions(spec: ScheduleSpec, pp: int, microbatches: int, vpp: int, actions: int,
                  max_actions: int | None, *, limit: int = DEFAULT_MAX_ACTIONS,
                  work: str = "runs up to {actions:,} actions",
                  cost: str = "about 10 s of simulation", built: int | None = None,
                  weight: int = 1, why: str = "its generator grows faster than its actions"
                  ) -> None:
    """The one size check of every command that builds a schedule (``run``, ``schedule``,
    ``verify``...): ``actions`` (or what ``work`` counts) above ``max_actions`` (default
    ``limit``, 0 = none) is refused in one line saying how to raise it. ``built``: what
    building the schedule costs in actions, when its generator grows faster than its actions
    (:meth:`~simulator.schedules.registry.ScheduleSpec.work_of`); the larger of the two counts.
    ``weight``: what one action costs, in asynchronous actions (:data:`P2P_ACTION_COST`)."""
    bound = limit if max_actions is None else max_actions
    counted = actions * weight
    size = counted if built is None else max(counted, built)
    if bound > 0 and size > bound:
        what = work.format(actions=actions, counted=counted)
        if size > counted:
            what += (f", and building it costs as much as {size:,} ({why})")
        raise ConfigError(
            f"--max-actions: {spec.name} with pp {pp}, vpp {vpp}, {microbatches} microbatches "
            f"{what}, above the limit of {bound:,} ({cost}); pass --max-actions {size} (or 0 "
            "for no limit) to run it anyway")


def _groups_used(layers: tuple[Layer, ...]) -> dict[CommGroup, int]:
    """Bytes moved per collective group by the rows (forward, input- and weight-gradient);
    rows share their Comm objects, so each distinct one is looked at once (counted by identity:
    a Comm's own hash hashes its enums in Python, ten thousand times on a big file)."""
    count: dict[int, list] = {}
    for r in layers:
        for c in (r.fwd_comm, r.ig_comm, r.wg_comm):
            seen = count.get(id(c))
            if seen is None:
                count[id(c)] = [c, 1]
            else:
                seen[1] += 1
    used: dict[CommGroup, int] = {}
    for c, n in count.values():
        if c.active:
            used[c.group] = used.get(c.group, 0) + c.bytes * n
    return used


# a NamedTuple, not a dataclass: start-up (simulator/__init__.py)
class RunPlan(NamedTuple):
    """What one run is, decided once before a schedule is built, and handed down to the size
    checks, the stage costs of a cost-aware schedule and the engine's compile.

    ``workload`` carries the run's header (``pp_comm`` and world size as run); ``partition``
    splits it into ``chunks`` model chunks as the file says (recompute as read: the run's
    ``--recompute`` is applied on top, :func:`~simulator.workload.partition.with_recompute`);
    ``links`` prices its transfers and collectives. ``spec`` is None for a schedule given whole
    that is not registered."""

    workload: Workload
    spec: ScheduleSpec | None
    pp: int
    microbatches: int
    vpp: int
    iterations: int
    chunks: int
    partition: Partition
    links: LinkModel
    warnings: list[RunWarning]
    notes: list[str]


def header_for_run(workload: Workload, pp: int, *, pp_comm: int | None = None,
                   gpus: int | None = None, dp: int | None = None,
                   microbatches: int | None = None, vpp: int | None = None
                   ) -> tuple[Workload, list[RunWarning]]:
    """The workload with the run's ``pp_comm`` and world size in its header, and the warnings
    for what had to be assumed (see docs/model.md, "What pipesim assumes"). The values are
    checked already (:class:`~simulator.run_options.RunOptions`); what is decided here is what
    they make of this workload, in four steps: the bytes between stages, the world size, the
    rows pipesim reads but does not model, and the parser's note restated for the run."""
    changes: dict[str, object] = {}
    warnings = _stage_bytes(workload, pp, pp_comm, changes)
    used = _groups_used(workload.layers)
    warnings += _world_size(workload, pp, gpus, dp, used, changes)
    warnings += _unmodelled(workload, used)
    notes = _restated_notes(workload, changes, pp, microbatches, vpp)
    if changes or notes != workload.warnings:
        workload = workload._replace(header=workload.header._replace(**changes),
                                     warnings=notes)
    return workload, warnings


def _stage_bytes(workload: Workload, pp: int, pp_comm: int | None,
                 changes: dict[str, object]) -> list[RunWarning]:
    """``pp_comm`` as given, else derived from the rows when the file has none (a warning)."""
    h, path = workload.header, workload.path
    if pp_comm is not None:
        changes["pp_comm"] = pp_comm
        return []
    if h.pp_comm != 0:
        return []
    said = "has no pp_comm" if "pp_comm" in h.defaults_used else "says pp_comm: 0"
    rows = workload.aicb.model if workload.aicb is not None else workload.layers
    # only for a file without pp_comm: a run of one that has it does not import the module
    from .workload.activations import derive_pp_comm
    derived = derive_pp_comm(rows, h.tp)
    if derived is not None:
        changes["pp_comm"] = derived.nbytes
        return [RunWarning(
            "pp_comm_derived",
            f"{path} {said}; using {derived.nbytes} bytes per microbatch between stages "
            f"(and for activation memory), derived from line {derived.layer.line} "
            f"({derived.layer.name}: {derived.rule})", "--pp-comm")]
    if pp > 1:
        return [RunWarning(
            "p2p_free",
            f"{path} {said} and no activation size can be derived from its rows (no "
            f"tensor-parallel forward collective); the {pp - 1} stage boundaries move 0 "
            f"bytes, so transfers cost nothing and activations take no memory", "--pp-comm")]
    return []


def _world_size(workload: Workload, pp: int, gpus: int | None, dp: int | None,
                used: dict[CommGroup, int], changes: dict[str, object]) -> list[RunWarning]:
    """``all_gpus`` from ``--gpus`` or ``--dp``; else the header's, with a warning where its
    data-parallel (or tensor-parallel) collectives would run on a group of one."""
    h, path = workload.header, workload.path
    tp = max(1, h.tp)
    if gpus is not None and dp is not None:
        raise ConfigError("--gpus and --dp: give one, not both (DP = GPUs / (TP x PP))")
    if gpus is not None:
        if gpus % (tp * pp):
            raise ConfigError(f"--gpus: {gpus} GPUs do not divide into TP {tp} x PP {pp} = "
                              f"{tp * pp} per data-parallel replica; expected a multiple of "
                              f"{tp * pp}")
        changes["all_gpus"] = gpus
        return []
    if dp is not None:
        changes["all_gpus"] = dp * tp * pp
        return []
    warnings: list[RunWarning] = []
    world = h.all_gpus
    dp_now = max(1, world // (tp * pp))
    dp_groups = {g: b for g, b in used.items() if g in (CommGroup.DP, CommGroup.DP_EP)}
    if "all_gpus" in h.defaults_used and dp_groups:
        total = sum(dp_groups.values())
        warnings.append(RunWarning(
            "gpus_defaulted",
            f"{path} has no all_gpus; assuming {world} GPU(s) (tp x the header's pp), so "
            f"at pp {pp} DP = {dp_now} and its data-parallel collectives ({total} bytes "
            f"named in the rows) run on a group of one and cost nothing", "--gpus or --dp"))
    elif dp_now == 1 and dp_groups and world % (tp * pp) == 0:
        total = sum(dp_groups.values())
        warnings.append(RunWarning(
            "dp_group_of_one",
            f"{path}: all_gpus {world} = TP {tp} x PP {pp}, so DP = 1 and its "
            f"data-parallel collectives ({total} bytes named in the rows) run on a group of "
            "one and cost nothing", "--gpus or --dp"))
    elif world % (tp * pp) and dp_groups:
        warnings.append(RunWarning(
            "gpus_indivisible",
            f"{path}: all_gpus {world} is not a multiple of TP {tp} x PP {pp}; using DP = "
            f"{dp_now} for its data-parallel collectives (the remainder of the GPUs is left "
            "out)", "--gpus or --dp"))
    if CommGroup.TP in used and tp == 1:
        warnings.append(RunWarning(
            "tp_group_of_one",
            f"{path}: rows name tensor-parallel collectives but model_parallel_NPU_group is "
            f"{'absent' if 'tp' in h.defaults_used else '1'}; they run on a group of one "
            "and cost nothing", "model_parallel_NPU_group: in the header"))
    return warnings


def _unmodelled(workload: Workload, used: dict[CommGroup, int]) -> list[RunWarning]:
    """Rows pipesim reads but prices otherwise: expert-parallel groups of one, per-row
    policies."""
    h, path = workload.header, workload.path
    warnings: list[RunWarning] = []
    if CommGroup.EP in used and max(1, h.ep) == 1:
        warnings.append(RunWarning(
            "ep_group_of_one",
            f"{path}: rows name expert-parallel collectives (_EP) but ep is "
            f"{'absent' if 'ep' in h.defaults_used else '1'}; they run on a group of one and "
            "cost nothing", "ep: in the header"))
    if h.policy == "HYBRID_CUSTOMIZED":
        policies = sorted({r.policy for r in workload.layers if r.policy})
        warnings.append(RunWarning(
            "layer_policy_ignored",
            f"{path}: HYBRID_CUSTOMIZED rows carry their own policy ({', '.join(policies)}); "
            "pipesim prices each collective by its group suffix instead (TP for forward and "
            "input-gradient rows, DP for weight-gradient rows)", ""))
    return warnings


def _restated_notes(workload: Workload, changes: dict[str, object], pp: int,
                    microbatches: int | None, vpp: int | None) -> tuple[str, ...]:
    """The parser's note on the header's missing keys, without the keys the run decides
    (``pp``, ``microbatches`` and ``vpp`` as run, a given or derived ``pp_comm``, a given world
    size): those no longer read as defaulted."""
    h, path = workload.header, workload.path
    decided = set(changes) | {k for k, run in (("pp", pp), ("ga", microbatches), ("vpp", vpp))
                              if run is not None and run != getattr(h, k)}
    notes = workload.warnings
    if decided & set(h.defaults_used):
        note = defaults_note(path, h, h.defaults_used)
        still = [k for k in h.defaults_used if k not in decided]
        restated = (defaults_note(path, h, still),) if still else ()
        notes = tuple(x for n in notes for x in (restated if n == note else (n,)))
    return notes


def memory_warnings(memory, records, system, limit_bytes: float | None,
                    workload: Workload) -> list[RunWarning]:
    """After the run: peaks no GPU could hold, and ranks whose memory the file does not say.

    With a capacity (``--memory-limit`` or the system's ``memory.capacity_*``) an overflow has
    already stopped the run as out of memory; without one the peak is held against a typical
    80 GiB GPU and the warning names what drives it.
    """
    out: list[RunWarning] = []
    peaks = list(records.peak_memory)
    if not peaks:
        return out
    cfg = system.memory
    if limit_bytes is None:
        worst = max(range(len(peaks)), key=lambda r: peaks[r])
        peak = peaks[worst]
        if peak > TYPICAL_CAPACITY_BYTES:
            static = records.static_memory[worst] if records.static_memory else 0.0
            if cfg.activation_bytes_per_layer:
                act_rule = f"memory.activation_bytes_per_layer {cfg.activation_bytes_per_layer:g}"
            elif workload.header.activation_bytes:
                act_rule = (f"the header's activation_bytes {workload.header.activation_bytes} "
                            "per layer and microbatch")
            else:
                act_rule = (f"activation_factor {cfg.activation_factor:g} x pp_comm "
                            f"{workload.header.pp_comm} bytes per layer and microbatch")
            out.append(RunWarning(
                "memory_over_capacity",
                f"rank {worst} peaks at {fmt_bytes(peak)}, above the 80 GiB of a typical A100/H100 "
                f"(no memory capacity set): {fmt_bytes(static)} weights and optimizer state "
                f"({cfg.bytes_per_param:g} bytes per parameter) and {fmt_bytes(peak - static)} of "
                f"stashed activations ({act_rule})",
                "--memory-limit or memory.capacity_gib in --system"))
    if (not cfg.activation_bytes_per_layer and not workload.header.activation_bytes
            and "keeps" not in cfg.actions.get("*", {}).get("F", {})
            and any(m.stash > 0 for m in memory.stages)):
        out.append(RunWarning(
            "activation_assumed",
            f"activation memory assumed: {cfg.activation_factor:g} x pp_comm "
            f"({workload.header.pp_comm} bytes) per layer and microbatch, Megatron's 34·s·b·h "
            "with flash attention or selective recompute (Korthikanti et al.); the file gives "
            "no activation size",
            "memory.activation_bytes_per_layer in --system, activation_bytes: in the header "
            "(pipesim generate writes it), or pipesim calibrate --memory"))
    if (not cfg.activation_bytes_per_layer and workload.header.activation_bytes
            and "keeps" not in cfg.actions.get("*", {}).get("F", {})
            and any(m.stash > 0 for m in memory.stages)):
        h = workload.header
        shaped = (h.f_transient_bytes, h.b_transient_bytes, h.i_transient_bytes,
                  h.w_transient_bytes)
        if cfg.actions:
            transient = ""
        elif any(shaped):
            transient = ("; working memory inside an action, the header's F / B / I / W "
                         "transient bytes " + " / ".join(map(str, shaped)) + " B per layer "
                         "(PyTorch eager autograd without fused kernels, each new weight "
                         "gradient added to .grad)")
        else:
            transient = ("; no working memory inside an action (transient 0 B: a forward's "
                         "output before its residual add, a backward's gradients)")
        split = workload.header.split_backward_bytes
        if "keeps" not in cfg.actions.get("*", {}).get("I", {}):
            transient += (f"; a split backward's I keeps the header's split_backward_bytes "
                          f"{split} B per layer until its W" if split else
                          "; a split backward's I keeps nothing until its W (the header has no "
                          "split_backward_bytes:)")
        if not cfg.params_per_layer:
            transient += "; parameters: the rows' weight-gradient bytes / " + _grad_bytes_rule(
                cfg, workload.header.grad_bytes_per_param)
        out.append(RunWarning(
            "activation_from_shape",
            f"activation memory from the model's shape: the header's activation_bytes "
            f"{workload.header.activation_bytes} B per transformer layer and microbatch "
            "(Korthikanti et al.'s count for the precision, flash attention and sequence "
            f"parallelism pipesim generate was given; dropout masks 1 B an element){transient}",
            "memory.actions in --system (pipesim calibrate --memory fits them from a profiler "
            "trace with memory events)"))
    if (not cfg.params_per_layer and not cfg.grad_bytes_per_param
            and not workload.header.grad_bytes_per_param
            and not any(w.code == "activation_from_shape" for w in out)
            and any(b > 0 for b in memory.static_bytes)):
        out.append(RunWarning(
            "params_assumed",
            "parameters per layer: the rows' weight-gradient bytes / " + _grad_bytes_rule(
                cfg, 0),
            "memory.params_per_layer or memory.grad_bytes_per_param in --system, or "
            "grad_bytes_per_param: in the header"))
    zero = [r for r, p in enumerate(peaks) if p <= 0]
    if zero:
        listed = ", ".join(str(r) for r in zero[:8]) + (", ..." if len(zero) > 8 else "")
        out.append(RunWarning(
            "memory_unknown",
            f"rank(s) {listed} hold 0 B: {workload.path} names no parameter sizes for their "
            f"layers (no weight-gradient ALLREDUCE/REDUCESCATTER bytes) and no activation size "
            f"(pp_comm {workload.header.pp_comm})",
            "--set memory.params_per_layer=N, memory.activation_bytes_per_layer=B or --pp-comm"))
    return out


def _grad_bytes_rule(cfg, header_value: int) -> str:
    """Which gradient bytes per parameter counted the parameters, and why that one."""
    if cfg.grad_bytes_per_param:
        over = (f", over the header's grad_bytes_per_param {header_value}" if header_value
                else "")
        return f"memory.grad_bytes_per_param {cfg.grad_bytes_per_param:g} (the system's wins{over})"
    if header_value:
        return (f"the header's grad_bytes_per_param {header_value} (memory.grad_bytes_per_param "
                "in --system would win)")
    return (f"{cfg.grad_bytes():g} B a parameter, bf16 gradients assumed (the header has no "
            "grad_bytes_per_param:, which pipesim generate writes, and --system no "
            "memory.grad_bytes_per_param)")


_RUNTIME_NAME = {"torch-single": "single-stage", "torch-multi": "multi-stage"}


def calibration_warnings(system, schedule_name: str, p2p: str) -> list[RunWarning]:
    """A calibration fitted on one of torch's runtimes applied to a run on the other: its
    transfer figures were never seen there (docs/validation.md, the 1 ms per layer run)."""
    system = for_runtime(system, p2p)    # a runtime with its own figures: fitted there
    on = system.runtime.calibrated_on
    if not on or p2p not in _RUNTIME_NAME or p2p == on["p2p"]:
        return []
    fix = ("--calibration from a gpipe or 1f1b run's traces" if p2p == "torch-single"
           else "--calibration from a multi-stage schedule's traces")
    return [RunWarning(
        "calibration_other_runtime",
        f"the calibration was fitted on {on['schedule']} (torch's {_RUNTIME_NAME[on['p2p']]} "
        f"runtime); {schedule_name} runs on torch's {_RUNTIME_NAME[p2p]} runtime, whose "
        f"transfers it never saw: its launch overheads and exchange cost "
        f"({system.runtime.exchange_ns / 1e6:.3f} ms) are carried over (at 1 ms per layer, "
        "calibrated on interleaved-1f1b, 1f1b came out 17 % high: docs/validation.md)", fix)]
