"""Before any work: what the run's options make of the workload, and whether its sizes are sane.

Everything here is decided from the parameters and the parsed rows alone, in well under a
second, so an impossible run is refused before a schedule is built, and every default that will
change a number is a :class:`~simulator.diagnostics.RunWarning` from the start.
"""

from __future__ import annotations

from typing import NamedTuple

from .diagnostics import RunWarning
from .errors import ConfigError
from .schedules.registry import ScheduleSpec, torch_class_of
from .schedules.schedule import Schedule
from .system.per_runtime import for_runtime
from .system.topology import LinkModel, expert_grid
from .units import fmt_bytes
from .workload.header import FILE_KEY, defaults_note
from .workload.model import CommGroup, Layer, Partition, Workload
from .workload.partition import check_chunks
from .workload.stage_layers import PipelineSplit

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
                drawn: Drawn = Drawn(), split: PipelineSplit = PipelineSplit()) -> int:
    """Refuse a run its sizes make impossible or too large (its actions in every iteration,
    weighted by the point-to-point mode's cost per action and by what drawing them costs;
    ``split``: the runtimes' layer-split options, which decide the layers per chunk);
    returns the model chunks it needs."""
    chunks, actions = spec.size_of(pp, microbatches, vpp, options)
    check_chunks(workload, chunks, split, pp)
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
                   microbatches: int | None = None, vpp: int | None = None,
                   decided: frozenset[str] = frozenset(), schedule_name: str = ""
                   ) -> tuple[Workload, list[RunWarning]]:
    """The workload with the run's ``pp_comm`` and world size in its header, and the warnings
    for what had to be assumed (see docs/model.md, "What pipesim assumes"). The values are
    checked already (:class:`~simulator.run_options.RunOptions`); what is decided here is what
    they make of this workload, in five steps: the bytes between stages, the world size, the
    rows pipesim reads but does not model, the header keys the file lacks and the run still
    uses (``decided`` names the header fields the run's options set: ``pp``, ``ga``, ``vpp``,
    ``checkpoints``), and the parser's notes without its note on those keys."""
    changes: dict[str, object] = {}
    warnings = _stage_bytes(workload, pp, pp_comm, changes)
    used = _groups_used(workload.layers)
    warnings += _world_size(workload, pp, gpus, dp, used, changes)
    warnings += _unmodelled(workload, used)
    warnings += _expert_grid(workload.header._replace(**changes), pp, used, workload.path)
    warnings += _generated_defaults(workload, decided | set(changes))
    if workload.layout_detected:
        warnings.append(RunWarning("layout_detected", workload.layout_detected,
                                   "--layout model|aicb or layout: in the header"))
    # the file's missing keys first: under --strict the refusal names the most basic one
    warnings = _header_defaults(workload, decided | set(changes), pp, vpp, schedule_name,
                                {w.code for w in warnings}, used) + warnings
    notes = _restated_notes(workload)
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


def _expert_grid(h, pp: int, used: dict[CommGroup, int], path: str) -> list[RunWarning]:
    """Where the rows have expert collectives but the header's etp x ep does not divide a
    stage's GPUs (Megatron-LM refuses such a launch), the experts run as the dense layers."""
    if not used.keys() & {CommGroup.EP, CommGroup.ETP, CommGroup.DP_EP}:
        return []
    etp, ep, _ = expert_grid(h, pp)
    if (etp, ep) == (h.expert_tp, max(1, h.ep)):
        return []
    stage = h.all_gpus // max(1, pp)
    return [RunWarning(
        "expert_grid_folded",
        f"{path}: etp {h.expert_tp} x ep {h.ep} does not divide a stage's {stage} GPUs "
        f"(all_gpus {h.all_gpus} / pp {pp}); the experts' collectives run as the dense "
        f"layers' (ETP {etp}, EP 1, expert-DP the stage's data-parallel ranks)",
        "ep: (and etp:) dividing all_gpus / pp")]


# the warning each key's absence already gets elsewhere: no second warning for it
_COVERED = {"pp_comm": ("pp_comm_derived", "p2p_free"), "all_gpus": ("gpus_defaulted",),
            "tp": ("tp_group_of_one",), "ep": ("ep_group_of_one",)}


def _header_defaults(workload: Workload, decided: set[str], pp: int, vpp: int | None,
                     schedule_name: str, codes: set[str],
                     used: dict[CommGroup, int]) -> list[RunWarning]:
    """A warning for each header key the file lacks whose default the run uses (the parser's
    defaults change numbers: a missing ``pp:`` runs one stage, a missing ``ga:`` one
    microbatch); a key the run's options decide is not defaulted, nor ``ep:`` where no row
    has an expert-parallel collective (``used``: bytes per group)."""
    h, path = workload.header, workload.path
    missing = [k for k in h.defaults_used if k not in decided
               and not any(c in codes for c in _COVERED.get(k, ()))]
    # EP sizes only the _EP and _DP_EP groups: a file without them runs the same at any EP
    if "ep" in missing and not (CommGroup.EP in used or CommGroup.DP_EP in used):
        missing.remove("ep")
    if "checkpoints" in missing and "checkpoint_initiates" in missing:
        missing.remove("checkpoint_initiates")
    out: list[RunWarning] = []
    for key in missing:
        said = f"{path}:1: header has no {FILE_KEY[key]}"
        if key == "pp":
            out.append(RunWarning("pp_defaulted", f"{said}; using pp {h.pp} (one stage, no "
                                  "pipeline)", "--pp or pp: in the header"))
        elif key == "ga":
            out.append(RunWarning("ga_defaulted", f"{said}; using {h.ga} microbatch per "
                                  "iteration", "-m or ga: in the header"))
        elif key == "vpp" and workload.layout == "aicb":
            layers = workload.aicb.layers_per_stage if workload.aicb is not None else 0
            out.append(RunWarning("vpp_defaulted", f"{said} (the AICB layout's layers per "
                                  f"stage); the block's {layers} layer(s) per stage are taken "
                                  "unchecked", "vpp: in the header"))
        elif key == "vpp":
            out.append(RunWarning("vpp_defaulted", f"{said}; using vpp {vpp} ({schedule_name} "
                                  f"at {vpp} chunk(s) per rank)", "--vpp or vpp: in the header"))
        elif key == "tp":
            out.append(RunWarning("tp_defaulted", f"{said}; using TP {h.tp} (the world size and "
                                  "a derived pp_comm assume it)",
                                  "model_parallel_NPU_group: in the header"))
        elif key == "ep":
            out.append(RunWarning("ep_defaulted", f"{said}; using EP {h.ep}",
                                  "ep: in the header"))
        elif key == "pp_comm":
            out.append(RunWarning("pp_comm_defaulted", f"{said} and no activation size can be "
                                  "derived from its rows; using 0 bytes between stages and for "
                                  "activation memory", "--pp-comm or pp_comm: in the header"))
        elif key == "all_gpus":
            out.append(RunWarning("gpus_defaulted", f"{said}; assuming {h.all_gpus} GPU(s) (tp "
                                  f"x the header's pp), so DP = "
                                  f"{max(1, h.all_gpus // (max(1, h.tp) * pp))}",
                                  "--gpus or --dp"))
        elif key in ("checkpoints", "checkpoint_initiates"):
            out.append(RunWarning("checkpoints_defaulted", f"{said} (its policy "
                                  f"{h.policy} reads them); no layer is recomputed",
                                  "--recompute or checkpoints: in the header"))
    return out


# generate's options a run's own options decide (the header field each one wrote)
_GENERATED_FIELD = {"pp": "pp", "ga": "ga", "vpp": "vpp", "dp": "all_gpus", "tp": "tp"}


def _generated_defaults(workload: Workload, decided: set[str]) -> list[RunWarning]:
    """The options ``pipesim generate`` filled in (the header's ``generated_defaults:``), less
    those the run's options decide (--pp, -m, --vpp, --gpus / --dp)."""
    h = workload.header
    left = [d for d in h.generated_defaults
            if _GENERATED_FIELD.get(d.split("=")[0].replace("-", "_"), "") not in decided]
    if not left:
        return []
    return [RunWarning(
        "generated_default",
        f"{workload.path}:1: pipesim generate wrote it with options filled in (generated_defaults:"
        f" {','.join(h.generated_defaults)}); the rows and the header assume "
        + ", ".join("--" + d.replace("=", " ") for d in left),
        "those options to pipesim generate")]


def _restated_notes(workload: Workload) -> tuple[str, ...]:
    """The parser's notes, without its note on the header's missing keys: a run states each
    key it still uses as a warning (:func:`_header_defaults`)."""
    h = workload.header
    if not h.defaults_used:
        return workload.warnings
    note = defaults_note(workload.path, h, h.defaults_used)
    return tuple(n for n in workload.warnings if n != note)


def memory_warnings(memory, records, system, limit_bytes: float | None,
                    workload: Workload, notes: list[str] | None = None) -> list[RunWarning]:
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
                f"({_static_rule(cfg)}) and {fmt_bytes(peak - static)} of "
                f"{'gradients and ' if cfg.precision else ''}stashed activations ({act_rule})",
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
        deferred = workload.header.deferred_wgrad_bytes
        if "keeps" not in cfg.actions.get("*", {}).get("I", {}):
            if deferred and memory.graph_freed:
                transient += (f"; a split backward's I frees the layer's stash and keeps the "
                              f"header's deferred_wgrad_bytes {deferred} B per layer until its "
                              "W (the linears' inputs and output gradients: Megatron-LM's "
                              "zero-bubble runtime; --p2p torch keeps the whole graph)")
            else:
                transient += (f"; a split backward's I keeps the header's split_backward_bytes "
                              f"{split} B per layer until its W" if split else
                              "; a split backward's I keeps nothing until its W (the header has "
                              "no split_backward_bytes:)")
        if h.loss_keeps_bytes and cfg.loss_by_shape:
            transient += (f"; the last stage's loss keeps the header's loss_keeps_bytes "
                          f"{h.loss_keeps_bytes} B a microbatch until its backward and holds "
                          f"{h.loss_f_transient_bytes} / {h.loss_b_transient_bytes} B more in "
                          "its F / B (the logits' fp32 copies of the cross-entropy)")
        if not cfg.params_per_layer:
            transient += "; parameters: the rows' weight-gradient bytes / " + _grad_bytes_rule(
                cfg, workload.header.grad_bytes_per_param)
        # derived by a documented rule from what the file gives: a note (a key the shape
        # needs and the header lacks is a warning below)
        if notes is not None:
            notes.append(
                f"activation memory from the model's shape: the header's activation_bytes "
                f"{workload.header.activation_bytes} B per transformer layer and microbatch "
                "(Korthikanti et al.'s count for the precision, flash attention and sequence "
                "parallelism pipesim generate was given; dropout masks 1 B an element; a llama "
                "or moe layer: SwiGLU's input, K and V of the query groups, no dropout)"
                f"{transient} (memory.actions in --system replaces it; pipesim calibrate "
                "--memory fits them from a profiler trace with memory events)")
        lacking = [k for k, v in (("split_backward_bytes:", split),
                                  ("f/b/i/w_transient_bytes:", any(shaped))) if not v]
        if lacking and not cfg.actions:
            out.append(RunWarning(
                "activation_shape_partial",
                f"{workload.path}:1: the header gives activation_bytes but no "
                f"{' and no '.join(lacking)}; using 0 B for them (a split backward's I keeps "
                "nothing until its W; no working memory inside an action)",
                "the missing keys in the header (pipesim generate writes them) or "
                "memory.actions in --system"))
    if (not cfg.params_per_layer and not cfg.grad_bytes_per_param
            and not workload.header.grad_bytes_per_param
            and any(b > 0 for b in memory.static_bytes)):
        out.append(RunWarning(
            "params_assumed",
            "parameters per layer: the rows' weight-gradient bytes / " + _grad_bytes_rule(
                cfg, 0),
            "memory.params_per_layer or memory.grad_bytes_per_param in --system, or "
            "grad_bytes_per_param: in the header"))
    if (not cfg.precision and not cfg.bytes_per_param and not cfg.actions
            and any(b > 0 for b in memory.static_bytes)):
        out.append(RunWarning(
            "memory_per_param_default",
            f"weights, gradients and optimizer state: {cfg.per_param_bytes:g} B a parameter on "
            "every DP rank (mixed-precision Adam, no distributed optimizer: the default when "
            "nothing says); Megatron-LM with --bf16 --use-distributed-optimizer holds "
            "6 + 12/DP B, plain fp32 16 B",
            "--param-dtype bf16|fp32 (and --use-distributed-optimizer), or memory.bytes_per_param "
            "or memory.precision in --system"))
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


def _static_rule(cfg) -> str:
    """How the static memory was counted, for a message."""
    if not cfg.precision:
        return f"{cfg.per_param_bytes:g} bytes per parameter"
    over = f"{cfg.shard_ranks} ranks" if cfg.shard_ranks else "DP"
    if cfg.zero >= 3:
        return (f"{cfg.precision} weights, {cfg.grad_dtype or cfg.precision} gradients and the "
                f"optimizer state sharded over {over} (FSDP), each transformer layer's weights "
                f"gathered whole in {cfg.gather_dtype or cfg.precision} while it computes")
    return (f"{cfg.precision} weights, {cfg.grad_dtype or cfg.precision} gradients from the "
            "first backward, optimizer state " + (f"sharded over {over}" if cfg.zero else
                                                  "on every DP rank"))


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


_RETENTION_RULE = {"kept_outputs": "the last stage keeps its outputs to the step's end "
                                   "(torch's return_outputs=True default)",
                   "sends_held": "torch 2.13's rule for this runtime and schedule",
                   "recv_buffers": "one receive buffer per microbatch for each input and "
                                   "gradient from another rank, kept across steps"}


def retention_warnings(system, schedule_name: str, p2p: str) -> list[RunWarning]:
    """On torch's runtimes: which retention values the memory took (runtime.kept_outputs,
    sends_held, recv_buffers), each set by the system (a calibration writes what its traces
    show) or, for ``auto``, by torch 2.13's rule, which changes the peaks."""
    if p2p not in _RUNTIME_NAME:
        return []
    rt = for_runtime(system, p2p).runtime
    used = dict(zip(("sends_held", "recv_buffers", "kept_outputs"),
                    rt.retention(p2p, torch_class_of(schedule_name))[:3]))
    auto = [k for k in ("kept_outputs", "sends_held", "recv_buffers") if getattr(rt, k) == "auto"]
    if not auto:
        return []
    parts = [f"{k} {used[k]} (" + (f"auto: {_RETENTION_RULE[k]}" if k in auto else "given")
             + ")" for k in ("kept_outputs", "sends_held", "recv_buffers")]
    return [RunWarning(
        "retention_assumed",
        f"memory on torch's {_RUNTIME_NAME[p2p]} runtime: " + ", ".join(parts),
        "runtime.kept_outputs / sends_held / recv_buffers in --system (pipesim calibrate "
        "--memory finds them in profiler traces)")]


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


def _us(ns: float) -> str:
    return f"{ns / 1e3:g} us"


def overhead_report(system, p2p: str) -> tuple[list[RunWarning], list[str]]:
    """The runtime overheads the run priced (``runtime.action_overhead_ns``, the step's prologue
    and epilogue, the links' latency per transfer), named: a warning where the system says they
    are estimates (``runtime.overheads_guessed``: the GPU presets' host time per action), else a
    note when there are any."""
    system = for_runtime(system, p2p)
    rt = system.runtime
    parts = []
    if rt.has_overheads:
        kinds = rt.action_overhead_ns
        same = len(set(kinds.values())) == 1
        parts.append((f"{_us(kinds['F'])} before each action" if same else
                      ", ".join(f"{_us(v)} before each {k}" for k, v in kinds.items()))
                     + " (host time: the launch of its first kernel)")
    for name, ns in (("step prologue", rt.step_prologue_ns), ("step epilogue", rt.step_epilogue_ns)):
        if ns:
            parts.append(f"{name} {_us(ns)}")
    if not parts:
        return [], []
    topo = system.topology
    links = ([("within a node", topo.intra_node), ("between nodes", topo.inter_node)]
             if topo.enabled else [("on a link", system.links)])
    parts.append("point-to-point latency " + ", ".join(f"{_us(link.latency_ns)} {where}"
                                                      for where, link in links))
    text = f"runtime overheads of the system ({system.name}): " + "; ".join(parts)
    if rt.overheads_guessed and not rt.calibrated_on:    # a calibration measured them
        return [RunWarning("runtime_overheads_guessed",
                           text + ": estimates, not measurements",
                           "runtime.action_overhead_ns and the links' latency_ns in --system "
                           "(pipesim calibrate fits them from profiler traces)")], []
    return [], [text]


def ddp_report(tail, system, options, header=None,
               pp: int = 1) -> tuple[list[RunWarning], list[str]]:
    """What Megatron-LM's data parallelism (engine/tail.py) assumed: a note of its buckets,
    step and all-gather; a warning where the optimizer step could not be priced (the system
    states no HBM bandwidth) or a tensor-parallel overlap's assumption."""
    warnings: list[RunWarning] = []
    notes: list[str] = []
    ddp = tail.ddp
    if options.fsdp is not None:
        line = (f"--fsdp {options.fsdp}: fp32 weights, their fp32 gradients and Adam's state "
                f"sharded over {options.fsdp} ranks; each transformer layer's weights gathered "
                f"whole in {system.memory.gather_dtype} while it computes, the next layer's "
                "beside it (FSDP2's prefetch), and in its backward its whole fp32 gradient "
                "until the reduce-scatter; "
                + ("without a pipeline every microbatch all-gathers each layer's weights "
                   "before its forward"
                   + (" and again before its backward (FSDP2 resharding after forward, "
                      "torchtitan's default)" if options.fsdp_reshard_after_forward != "never"
                      else " (not before its backward: --fsdp-reshard-after-forward never)")
                   + ", the gathers back to back on their own stream, and reduce-scatters its "
                   "gradients as its backward fills the buckets (the note on Megatron DDP)"
                   if pp == 1 else
                   "the reduce-scatters and all-gathers are priced as the distributed "
                   "optimizer's with both overlaps (the note on Megatron DDP)")
                + ", the step as Adam on the fp32 shard")
        if options.param_dtype is None:
            warnings.append(RunWarning("fsdp_gather_dtype_default", line + " (bf16, torchtitan's "
                                       "default mixed_precision_param)", "--param-dtype "
                                       "bf16|fp32"))
        else:
            notes.append(line)
    if options.tp_comm_overlap:
        notes.append("--tp-comm-overlap: each tensor-parallel collective hides behind the "
                     "compute of its own row (its GEMMs), never more than that takes; an "
                     "overlapped F/B pair's collectives hide behind the pair's compute")
    if ddp is None:
        if header is not None and header.embedding_sync_params > 0 and pp > 1:
            notes.append(f"the header's embedding_sync_params {header.embedding_sync_params:,} "
                         "(a tied word embedding) is priced with Megatron's DDP only "
                         "(--megatron-ddp): this run's data parallelism is the rows' own")
        return warnings, notes
    s = ddp.settings
    buckets = sum(len(c) for c in ddp.chunk_dp) + sum(len(r.blocking) for r in ddp.ranks)
    slow = max(ddp.ranks, key=lambda r: r.after_barrier(s.overlap_param_gather))
    kind = "reduce-scatter" if s.distributed_optimizer else "all-reduce"
    size = s.bucket_size(1) if s.bucket_params is not None else None
    notes.append(
        f"Megatron DDP: {buckets} gradient bucket(s) ({kind}, {s.grad_bytes:g} B a gradient; "
        + ("buckets of " + (f"{size:,} parameters" if size is not None
                            else "max(40M, 1M x DP) parameters")
           + (", each reduced as every microbatch's backward fills it" if s.reshards(pp)
              else ", each reduced as the backward fills it") if s.overlap_grad_reduce
           else "one per chunk, after the rank's last backward, blocking")
        + f"); the slowest rank's step {slow.step_ns / 1e6:.3f} ms"
        + (f" and parameter all-gather {slow.gather_ns / 1e6:.3f} ms"
           + (" (behind the next forward, up to one microbatch's forward)"
              if s.overlap_param_gather else "")
           if s.distributed_optimizer and not s.reshards(pp) else "")
        + (", each rank's own after its pre-step state (no barrier)" if s.post_validation
           else " after the barrier"))
    if s.post_validation:
        notes.append(
            "--optimizer-post-validation (the zero-bubble fork's): no barrier before the "
            "step; each rank steps once its collectives are done and the partial global "
            "state has come from the rank before it, then starts the next iteration; the "
            "validation that comes back during the next iteration's first forwards is not "
            "waited for; an iteration's time runs from the previous one's end to its own "
            "(the first holds the pipeline's fill)")
        if options.iterations == 1:
            warnings.append(RunWarning(
                "post_validation_one_iteration",
                "--optimizer-post-validation with one iteration: its time holds the "
                "pipeline's fill, which the overlap of iterations hides from the second on",
                "--iterations 2 or more (steady_iteration_ns: the mean of those after the "
                "first)"))
    if ddp.embedding_ns > 0:
        notes.append(f"the tied word embedding's gradient, {ddp.embedding_bytes:,} B, "
                     f"all-reduced between the first and the last stage before the step: "
                     f"{ddp.embedding_ns / 1e6:.3f} ms (Megatron-LM's finalize_model_grads"
                     + ("; with post-validation each of the two ranks waits for it after its "
                        "own end, not for the other rank, as the zero-bubble fork issues it "
                        "early)" if s.post_validation else ")"))
    if not any(r.params for r in ddp.ranks):
        warnings.append(RunWarning(
            "ddp_without_gradients",
            "Megatron DDP: the layer rows carry no weight-gradient collective, so no bucket is "
            "reduced and the optimizer step is priced at 0 ns (a file's once-per-iteration "
            "rows keep their own collectives, as the file states them)",
            "the layer rows' weight-gradient collectives (pipesim generate writes them), or "
            "run without --megatron-ddp"))
    elif ddp.bandwidth_gbs <= 0:
        warnings.append(RunWarning(
            "optimizer_step_unpriced",
            f"the system ({system.name}) states no HBM bandwidth: Megatron DDP's optimizer step "
            f"({s.step_bytes_per_param:g} B a parameter through memory) is taken as 0 ns",
            "memory.bandwidth_gbs in --system"))
    return warnings, notes
