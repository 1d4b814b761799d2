"""``pipesim plan WORKLOAD --gpus N``: which pipeline degree, virtual stages, microbatch count
and schedule to run on N GPUs within their memory (see :mod:`simulator.planning.plan`)."""

from __future__ import annotations

import contextlib
import sys
from dataclasses import dataclass, field
from pathlib import Path

import click

from ...errors import ConfigError, PipesimError
from ...export.compare import parse_schedules
from ...export.gantt import gantt_format
from ...export.launch import write_launch
from ...metrics.types import SCHEMA_VERSION
from ...run_options import OPTION_FIELDS, RunOptions, click_option_of
from ...planning.plan import (SPLIT_OPTIONS, PlanSettings, cached_workload, command_for,
                              no_memory_limit_warning, plan, screen_context,
                              simulate_candidate, split_label, unlimited_memory)
from ...planning.settings import check_settings, load_plan_system, plan_cps, recompute_options
from ...schedules import registry
from ...schedules.csv_io import load_schedule_csv, write_schedule_csv
from ...schedules.runtimes import torch_cannot_run
from ...schema import schema_of
from ...units import fmt_bytes, fmt_pct, table
from ...workload.activations import MODEL_RUNTIMES
from ...units import fmt_time as format_ns
from ..jsonout import schema_option
from ..outputs import check_writable, check_writable_dir, out_dir_lock
from ..model_inputs import (PLAN_FLAGS, click_options as model_options, ddp_option_values,
                            launch_system, model_gpu, resolve, split_options)
from .run import write_json

TOP = 10
PRUNED_SHOWN = 5           # pruned candidates listed with their bound (all in --json)
GLOBAL_BATCH_REMOVED = "0.2.0"   # the release that removes --global-batch
# the largest expert-parallel size a plan of a moe model tries when nothing states one: a DGX
# node's 8 GPUs, whose NVSwitch the dispatcher's all-to-all then stays on (--tp-max's default)
MOE_EP_MAX = 8


@dataclass(frozen=True)
class PlanCandidateJson:
    """One screened candidate of ``pipesim plan --json``."""

    key: str = field(metadata={"help": "the candidate's identity (its shape and options)"})
    tp: int = field(metadata={"help": "tensor-parallel size"})
    cp: int = field(metadata={"help": "context-parallel size (each rank holds s/cp tokens)"})
    ep: int = field(metadata={"help": "expert-parallel size (moe: the experts over ep of the "
                                      "data-parallel ranks)"})
    pp: int = field(metadata={"help": "pipeline degree"})
    dp: int = field(metadata={"help": "data-parallel size, GPUs / (TP x CP x PP)"})
    vpp: int = field(metadata={"help": "chunks per rank"})
    microbatches: int = field(metadata={"help": "microbatches per iteration per DP group"})
    schedule: str = field(metadata={"help": "registered schedule"})
    max_in_flight: int | None = field(metadata={"help": "auto's cap on held activations"})
    max_pending: int | None = field(metadata={"help": "zb-greedy's memory limit, in forwards' "
                                                      "activations (p: ZB-1p, 2p: ZB-2p)"})
    recompute: str = field(metadata={"help": "file, none or full"})
    makespan_ns: float | None = field(metadata={"help": "iteration time (ns); null when not run"})
    p95_ns: float | None = field(metadata={"help": "95th percentile iteration time under "
                                                   "--jitter"})
    peak_memory_bytes: int | None = field(metadata={"help": "largest rank's peak memory"})
    bubble_ratio: float | None = field(metadata={"help": "pipeline bubble ratio"})
    lower_bound_ns: float | None = field(metadata={"help": "the shape's lower bound, used to "
                                                           "prune"})
    engine: str | None = field(metadata={"help": "engine that ran it"})
    feasible: bool = field(metadata={"help": "ran and fits the memory limit"})
    reason: str | None = field(metadata={"help": "why it is infeasible or was not run"})
    command: str | None = field(default=None, metadata={"help": "the pipesim run command"})
    csv: str | None = field(default=None, metadata={"help": "best only: its schedule as "
                                                            "torch's CSV, when written"})
    command_schedule_file: str | None = field(default=None, metadata={
        "help": "best only: the run command on the written CSV"})


@dataclass(frozen=True)
class PlanJson:
    """``pipesim plan --json``: every candidate, ranked, and the best."""

    schema_version: str = field(metadata={"help": "version of this JSON's shape"})
    workload: str = field(metadata={"help": "workload file (or model flags' name)"})
    gpus: int = field(metadata={"help": "world size searched"})
    memory_limit_bytes: float = field(metadata={"help": "per-GPU memory limit (0: none)"})
    objective: str = field(metadata={"help": "makespan_ns or p95_ns"})
    candidates: tuple[PlanCandidateJson, ...] = field(metadata={"help": "ranked: feasible "
                                                                "first by the objective"})
    best: PlanCandidateJson = field(metadata={"help": "the winner"})
    notes: tuple[str, ...] = field(metadata={"help": "what the plan assumed or skipped"})
    warnings: tuple[str, ...] = field(default=(), metadata={
        "help": "what the model input could not express or assumed (--hf-config, "
                "--megatron-args, --torchtitan), deprecated options, the system's defaults "
                "(no --system for a model, no memory limit), the winner's run's warnings, and "
                "candidates --max-work left unscreened"})


def _schema() -> dict:
    return schema_of(PlanJson, "pipesim plan --json")


SPLIT_FIELDS = SPLIT_OPTIONS
# how the full-recompute retry groups the layers: `pipesim run`'s own options
RECOMPUTE_FIELDS = ("recompute_method", "recompute_num_layers")


def _recompute_options(fn):
    for f in reversed([f for f in OPTION_FIELDS if f.name in RECOMPUTE_FIELDS]):
        fn = click_option_of(f)(fn)
    return fn


@click.command("plan")
@click.argument("workload", type=click.Path(dir_okay=False), required=False)
@model_options(PLAN_FLAGS)
@click.option("--efficiency", type=float, default=None, help="Fraction of peak (model flags).")
@click.option("--tp-max", type=click.IntRange(min=1), default=8, show_default=True,
              help="Largest TP tried with the model flags (divisors of N up to it).")
@click.option("--cp-max", type=click.IntRange(min=1), default=1, show_default=True,
              help="Largest context-parallel size tried with the model flags (divisors of N "
                   "up to it; 1: the launch file's, or --cp's, alone).")
@click.option("--ep-max", type=click.IntRange(min=1), default=None,
              help="Largest expert-parallel size tried for the moe model (divisors of its "
                   "experts up to it; 1: the launch file's, or --ep's, alone). Default: "
                   f"{MOE_EP_MAX} for a moe model from its flags or --hf-config (one node's "
                   "GPUs, as --tp-max), else 1.")
@click.option("--gpus", type=int, required=True, metavar="N",
              help="World size; every pipeline degree dividing N / (TP x CP) is tried, "
                   "DP = N / (TP x CP x PP).")
@click.option("--memory-limit", type=float, default=None, metavar="GIB",
              help="Per-GPU memory in GiB (2^30 bytes); default the system's memory capacity "
                   "(none on the built-in system).")
@click.option("--global-batch-size", "global_batch_size", type=int, default=None, metavar="B",
              help="Sequences per iteration across DP, as in Megatron-LM: M = B / (b x DP), b "
                   "the --micro-batch (default: the file's ga x its DP microbatches).")
@click.option("--global-batch", type=int, default=None, metavar="B",
              help=f"Deprecated (removed in pipesim {GLOBAL_BATCH_REMOVED}): microbatches per "
                   "iteration across DP; give --global-batch-size (sequences).")
@click.option("--system", type=click.Path(dir_okay=False), default=None,
              help="System YAML (default: the built-in).")
@click.option("--calibration", type=click.Path(dir_okay=False), default=None, metavar="FILE",
              help="YAML laid over the system (as in `pipesim run`).")
@click.option("--p2p", type=click.Choice(["async", "blocking", "batched", "torch", "torch-single",
              "torch-multi"]), default=None, help="Point-to-point semantics (as in `pipesim run`).")
@click.option("--jitter", type=float, default=0.0, metavar="SIGMA",
              help="Confirm the best candidates under seeded lognormal compute noise and rank "
                   "them by p95 iteration time.")
@click.option("--iterations", type=int, default=1, show_default=True,
              help="Iterations of each confirming run (with --jitter).")
@click.option("--seed", type=int, default=0, show_default=True, help="Seed for --jitter.")
@click.option("--confirm", type=int, default=3, show_default=True, metavar="K",
              help="Candidates confirmed on the SimPy engine after the evaluator's screen.")
@click.option("--out", "out_dir", type=click.Path(file_okay=False), default=None, metavar="DIR",
              help="Stream every screened candidate to DIR/candidates.jsonl and write "
                   "DIR/plan.json.")
@click.option("--resume", is_flag=True, help="Screen only the candidates not yet in --out.")
@click.option("--json", "json_dest", default=None, metavar="PATH|-",
              help="Write {candidates, best} to PATH, or to stdout (and nothing else) with '-'.")
@schema_option(_schema)
@click.option("--plot", type=click.Path(dir_okay=False), default=None, metavar="PNG|SVG|PDF",
              help="Iteration time against peak memory per GPU, the Pareto front marked.")
@click.option("--csv", "csv_path", type=click.Path(dir_okay=False), default=None,
              help="Write the winner's schedule as torch's CSV (default plan-best.csv beside "
                   "the JSON when the winner is auto).")
@click.option("--executor", type=click.Choice(["local", "ray", "dask"]), default="local",
              show_default=True, help="Where candidates are screened (the sweep executors).")
@click.option("--jobs", "-j", type=int, default=None,
              help="Workers (default: the CPU count; 1 screens in this process).")
@click.option("--address", default=None, metavar="ADDR", help="Ray or Dask cluster address.")
@click.option("--max-actions", type=click.IntRange(min=0), default=None, metavar="N",
              help="Candidates with more actions are listed infeasible, with the reason "
                   "(default 50000: a screen stays about a second or less; 0 = no limit).")
@click.option("--max-work", type=click.IntRange(min=0), default=None, metavar="N",
              help="Cap on the plan's actions: refused at once when what it is sure to run "
                   "passes it; later rounds, retries and auto run while within it (default "
                   "700000: about 8 s; 0 = no limit).")
@click.option("--schedules", "-s", "schedule_list", default=None, metavar="A,B,C",
              help="Hand-made schedules to search (default: every registered one); auto, "
                   "zb-greedy at 1p and 2p, and v-zb are always added on the winning shapes.")
@click.option("--runtime", type=click.Choice(["torch", "megatron", "torchtitan"]), default=None,
              help="Keep only configurations this runtime runs (the others are listed with "
                   "the rule they break).")
@click.option("--launch", "launch_dir", type=click.Path(file_okay=False), default=None,
              metavar="DIR", help="Write the winner's launch settings into DIR: "
              "megatron_args.txt, torchtitan.toml, schedule.csv, stage_ranks.json, README.md.")
@click.option("--param-dtype", type=click.Choice(["bf16", "fp32"]), default=None,
              help="Every candidate's training state by dtype, as `pipesim run --param-dtype` "
                   "counts it (a Megatron-LM launch file states it).")
@click.option("--use-distributed-optimizer", "distributed_optimizer", is_flag=True,
              help="Every candidate's optimizer state sharded over its data parallelism "
                   "(Megatron-LM's; needs a dtype: --param-dtype or a launch file's).")
@click.option("--fsdp", is_flag=True,
              help="Every candidate's state sharded over its data parallelism as torchtitan's "
                   "FSDP2 shards it (`pipesim run --fsdp DP`; a torchtitan job with FSDP sets "
                   "it).")
@click.option("--no-prune", is_flag=True,
              help="Run every candidate, also those whose lower bound shows they cannot win "
                   "(slower; every row gets its numbers).")
@click.option("--strict", is_flag=True,
              help="Treat every warning as an error (exit 2): those of the inputs and the "
                   "memory limit before the search; the winner's run's and candidates left "
                   "unscreened after it.")
@split_options
@_recompute_options
def command(workload, gpu, efficiency, tp_max, cp_max, ep_max, gpus, memory_limit,
            global_batch_size, global_batch, system,
            calibration, p2p, jitter, iterations, seed, confirm, out_dir, resume, json_dest, plot,
            csv_path, executor, jobs, address, max_actions, max_work, schedule_list, runtime,
            launch_dir, param_dtype, distributed_optimizer, fsdp, no_prune, strict, **values):
    """Search pipeline degree, virtual stages, microbatches and schedule (auto included) for
    WORKLOAD on --gpus N GPUs, screen with the exact evaluator, confirm the best on the SimPy
    engine, and print the ranking and the `pipesim run` command of the winner."""

    split_values = {k: values.pop(k) for k in SPLIT_FIELDS}
    recompute_values = {k: values.pop(k) for k in RECOMPUTE_FIELDS}
    grouping = (RunOptions.from_values({"recompute": "full", **recompute_values})
                .recompute_grouping()
                if any(v is not None for v in recompute_values.values()) else ())
    model_values = values
    tp = model_values.get("tp")
    warnings: list[str] = []
    if global_batch is not None and global_batch_size is not None:
        raise ConfigError("--global-batch and --global-batch-size: give one (--global-batch "
                          "counts microbatches and is deprecated; --global-batch-size counts "
                          "sequences)")
    if global_batch is not None:
        warnings.append(f"--global-batch is deprecated and removed in pipesim "
                        f"{GLOBAL_BATCH_REMOVED}: it counts microbatches; give "
                        "--global-batch-size (sequences, as in Megatron-LM)")
    if global_batch_size is not None and global_batch_size < 1:
        raise ConfigError(f"--global-batch-size: expected a positive number of sequences, got "
                          f"{global_batch_size}")
    if plot:
        gantt_format(plot, "--plot")   # a bad extension is refused before the search

    for path, option in ((json_dest, "--json"), (csv_path, "--csv")):
        check_writable(path, option)
    check_writable(plot, "--plot", make_folder=True)
    check_writable_dir(out_dir, "--out")
    names = None
    if schedule_list is not None:
        names = tuple(n for n in parse_schedules(schedule_list) if n != "auto")
    model = None
    launch_ddp: dict = {}
    rank_order = order_note = None
    mi = resolve(dict(model_values, micro_batch=model_values.get("micro_batch")), gpus=gpus)
    if mi is not None:
        if workload is not None:
            raise ConfigError(f"WORKLOAD {workload} and the model flags / files: give one")
        launch = mi.launch
        micro_batch = launch.micro_batch
        fields = dict(seq=launch.seq, micro_batch=launch.micro_batch,
                      **{k: v for k, v in mi.shape.spec_fields().items()
                         if mi.shape.arch == "moe" or k not in ("experts", "topk")})
        model = tuple(sorted(fields.items()))
        warnings += list(mi.warnings)
        from ...system.config import load_system

        base = load_system(system)
        gpu, gpu_warnings = model_gpu(gpu, base.gpu.preset, system is None)
        warnings += gpu_warnings
        placed, with_note = launch_system(base, mi)
        if placed is not base:
            # the launch's rank order places every candidate, as `pipesim run` of it does
            rank_order, order_note = launch.rank_order, with_note.notes[-1]
        if launch.source is not None:
            if global_batch is None and global_batch_size is None:
                global_batch_size = launch.global_batch
                warnings.append(f"{launch.source}: --global-batch-size {global_batch_size} "
                                f"sequences, {global_batch_size // launch.micro_batch} "
                                f"microbatches of --micro-batch-size {launch.micro_batch}")
            for what, have, plans in (("sequence parallelism", launch.sequence_parallel,
                                       True), ("flash attention", launch.flash_attention, True),
                                      ("bf16", launch.precision in ("bf16", "fp16"), True)):
                if have != plans:
                    warnings.append(f"{launch.source}: plan generates its candidates with "
                                    f"{what}; the file runs without it")
            # the launch's training state and data parallelism, as `pipesim run` of the file
            # runs them
            if launch.source.startswith("--megatron-args") or launch.fsdp:
                if param_dtype is None:
                    param_dtype = "bf16" if launch.precision in ("bf16", "fp16") else "fp32"
                fsdp = fsdp or bool(launch.fsdp)
                launch_ddp = {k: v for k, v in ddp_option_values(launch).items() if k != "fsdp"}
            if launch.recompute != "none" or launch.recompute_granularity is not None:
                what = ("op-level selective checkpointing"
                        if launch.recompute_granularity == "op" else
                        "selective recompute" if launch.recompute_granularity == "selective"
                        else "full recompute" + (f" ({launch.recompute_method}, "
                                                 f"{launch.recompute_num_layers} layers)"
                                                 if launch.recompute_method else ""))
                warnings.append(f"{launch.source}: plan's candidates run without the file's "
                                f"{what}, and with full recompute of every layer where one is "
                                "over the memory limit")
            warnings.append(f"{launch.source}: plan searches pp, virtual stages, "
                            "microbatches and schedule (TP up to --tp-max, or --tp); the "
                            f"file's tp {launch.tp} / pp {launch.pp} / vpp {launch.vpp} are "
                            "not fixed")
        workload = f"{mi.shape.arch}-{mi.shape.layers}l"
    elif workload is None:
        raise ConfigError("WORKLOAD: expected a workload file, or the model flags (--model "
                          "gpt|llama --layers --hidden --heads --seq), or --hf-config / "
                          "--megatron-args / --torchtitan")
    else:
        micro_batch = model_values.get("micro_batch") or 1
        if global_batch_size is not None and model_values.get("micro_batch") is None:
            warnings.append(f"{workload}: a workload file states no sequences per microbatch; "
                            "--micro-batch 1 is taken for --global-batch-size (M = B / DP)")
    batch_flag = "--global-batch" if global_batch is not None else "--global-batch-size"
    if global_batch_size is not None:
        if global_batch_size % micro_batch:
            raise ConfigError(f"--global-batch-size {global_batch_size}: expected a multiple of "
                              f"--micro-batch {micro_batch} (sequences per microbatch)")
        global_batch = global_batch_size // micro_batch
    ep_note = None
    if ep_max is None:
        # a moe model whose expert parallelism nothing states: search it as TP is searched,
        # within a node's GPUs (a launch file's EP, or --ep, is the job's own)
        searched = (mi is not None and mi.shape.arch == "moe" and mi.launch.source is None
                    and model_values.get("ep") is None)
        ep_max = MOE_EP_MAX if searched else 1
        if searched:
            ep_note = (f"expert parallelism searched over the divisors of the "
                       f"{mi.shape.experts} experts up to {MOE_EP_MAX} (--ep-max's default "
                       "for a moe model; --ep N fixes one)")
    if mi is not None and mi.launch.etp not in (0, mi.launch.tp):
        warnings.append(f"{mi.source}: experts' tensor parallelism {mi.launch.etp}: plan splits "
                        "each expert over its candidate's TP (Megatron-LM's default); the "
                        "launch's ETP is not planned")
    split = RunOptions.from_values(split_values).pipeline_split()
    settings = PlanSettings(workload, gpus, memory_limit, global_batch, system, calibration, p2p,
                            jitter, iterations, seed, confirm, max_actions, not no_prune,
                            model, gpu, efficiency, tp_max, names, runtime,
                            tuple(split) if split.given else (), tp, batch_flag, grouping,
                            plan_state(param_dtype, distributed_optimizer, fsdp, launch_ddp),
                            mi.launch.fp8 if mi is not None else "",
                            _plan_size(mi, "cp", model_values.get("cp"), cp_max), cp_max,
                            _plan_size(mi, "ep", model_values.get("ep"), ep_max), ep_max,
                            _model_runtime(runtime, mi),
                            () if mi is None else tuple(mi.launch.code_fields().items()),
                            rank_order)
    if settings.cp is None and settings.model is not None:
        # what a searched context parallelism leaves out, as a launch file's CP says it
        from ...workload.generator import cp_exchange_warning

        warnings.append(cp_exchange_warning(f"--cp-max {cp_max}", "cp"))
    if strict:
        # a bad or missing setting, or a bad file, is refused before a warning
        check_settings(settings)
        if settings.model is None:
            cached_workload(settings.workload)
        if unlimited_memory(settings, load_plan_system(settings)):
            warnings.append(no_memory_limit_warning())
        if warnings:
            raise ConfigError(f"--strict: {warnings[0]}")
    where = out_dir or (str(Path(json_dest).parent) if json_dest and json_dest != "-" else ".")
    quiet = json_dest == "-" or not sys.stderr.isatty()
    lock = out_dir_lock(out_dir, "--out") if out_dir is not None else contextlib.nullcontext()
    with lock, _Progress(Path(workload).name, enabled=not quiet) as bar:
        result = plan(settings, executor=executor, jobs=jobs, address=address, out_dir=out_dir,
                      resume=resume, progress=bar.update, workload_dir=where,
                      max_work=max_work)
    best = result.best
    if ep_note is not None:
        result.notes.insert(0, ep_note)
    if order_note is not None:
        result.notes.insert(0, order_note)
    if launch_dir is not None and runtime is None and settings.model_runtime != "torchtitan":
        result.notes.append("the written torchtitan.toml runs torchtitan's eager modules "
                            "(unfused RoPE and SwiGLU, separate projections, FSDP2's copies), "
                            "priced here as Megatron-LM's fused kernels: --runtime torchtitan "
                            "prices them")
    warnings += result.warnings
    if strict and warnings:
        raise ConfigError(f"--strict: {warnings[0]}")
    written_csv = _write_csv(result, csv_path, json_dest)

    data = {"schema_version": SCHEMA_VERSION, **result.to_dict(), "warnings": warnings}
    if written_csv is not None:
        data["best"]["csv"] = written_csv
        # the same number from the written CSV (what torch's runtime would load)
        data["best"]["command_schedule_file"] = command_for(result.settings, best, written_csv)
    written_launch = None
    if launch_dir is not None:
        written_launch = _write_launch(result, launch_dir, micro_batch, mi)
        data["best"]["launch"] = launch_dir
    if out_dir is not None:
        write_json(data, str(Path(out_dir) / "plan.json"))
    if plot:
        _plot(result, plot)
    if json_dest:
        write_json(data, json_dest)
    if json_dest == "-":     # stdout holds the JSON and nothing else
        return
    click.echo(_render(result))
    for line in warnings:
        click.echo(f"warning: {line}")
    click.echo(f"\nbest: {best.command}")
    if written_csv is not None:
        click.echo(f"  its schedule as torch's CSV: {written_csv}; the same number: "
                   f"{data['best']['command_schedule_file']}")
    if written_launch is not None:
        click.echo(f"  its launch settings: {launch_dir}/ ({', '.join(Path(f).name for f in written_launch)})")


def _write_csv(result, csv_path: str | None, json_dest: str | None) -> str | None:
    best = result.best
    if csv_path is None:
        if best.candidate.schedule != "auto" or not json_dest or json_dest == "-":
            return None
        csv_path = str(Path(json_dest).with_name("plan-best.csv"))

    c = best.candidate
    spec = registry.get(c.schedule)
    if best.schedule is not None:   # the schedule the plan synthesized and ran
        sched = best.schedule
    elif spec.needs_costs:   # the same schedule the run builds: from the run's own costs
        sched = simulate_candidate(screen_context(result.settings), c, "evaluator").schedule
    else:
        sched = registry.generate(c.schedule, c.pp, c.microbatches, c.vpp, **c.options)
    why = torch_cannot_run(sched)
    if why is not None:
        click.echo(f"pipesim: note: --csv: not written: {why}", err=True)
        return None
    try:
        write_schedule_csv(sched, csv_path)
    except OSError as err:
        raise ConfigError(f"--csv: cannot write {csv_path}: {err.strerror or err}") from None

    try:   # a CSV nobody can load back (e.g. bidirectional DualPipe) is not handed out
        load_schedule_csv(csv_path, vpp=c.vpp)
    except PipesimError as err:
        Path(csv_path).unlink()
        click.echo(f"pipesim: note: --csv: not written: {c.schedule}'s schedule does not "
                   f"survive torch's CSV ({str(err).splitlines()[0]})", err=True)
        return None
    return csv_path


def _write_launch(result, launch_dir: str, micro_batch: int, mi=None) -> list[str]:
    """The winner's launch folder, from a run of the winner itself (the schedule it ran)."""

    best = result.best
    c = best.candidate
    # the winner's own simulation, as the plan ran it (its DDP, state, recompute and split)
    res = simulate_candidate(screen_context(result.settings), c, "evaluator",
                             schedule=best.schedule)
    numbers = {"makespan_ns": best.makespan_ns, "bubble_ratio": best.bubble_ratio,
               "peak_memory_bytes": best.peak_memory_bytes}
    extra = {}
    if mi is not None:   # the model the plan generated: bf16, flash attention, SP at TP > 1
        state = dict(result.settings.state)
        distributed = bool(state.get("use_distributed_optimizer"))
        fsdp = bool(state.get("fsdp"))
        extra = {"model": mi.shape, "settings": mi.launch._replace(
            precision="bf16", flash_attention=True, sequence_parallel=res.workload.header.tp > 1,
            use_distributed_optimizer=distributed, cp=c.cp, ep=c.ep,
            fsdp=c.shard_ranks if fsdp and c.shard_ranks > 1 else 0,
            fp8=result.settings.fp8)}
    grouping = recompute_options(result.settings.recompute_grouping, c.recompute)
    return write_launch(launch_dir, res, micro_batch_size=micro_batch, recompute=c.recompute,
                        recompute_grouping=tuple(grouping.values()) or ("uniform", 1),
                        options=c.options, command=best.command, numbers=numbers, **extra)


def _model_runtime(runtime: str | None, mi) -> str:
    """Whose model code a generated candidate runs (its kernels, what its loss keeps): the
    --runtime's where it has its own (Megatron-LM's, torchtitan's), else the launch file's,
    else Megatron-LM's."""
    if runtime in MODEL_RUNTIMES:
        return runtime
    return mi.launch.runtime if mi is not None else "megatron"


def _plan_size(mi, name: str, flag: int | None, most: int) -> int | None:
    """PlanSettings.cp or .ep (``name``): the flag's, else the launch file's unless the
    ``--<name>-max`` search is asked for (None)."""
    if flag is not None:
        return flag
    if most > 1:
        return None
    return getattr(mi.launch, name) if mi is not None else 1


def plan_state(param_dtype, distributed_optimizer: bool, fsdp: bool, launch_ddp: dict) -> tuple:
    """PlanSettings.state: the flags, over the launch file's own data parallelism."""
    state = dict(launch_ddp)
    if param_dtype is not None:
        state["param_dtype"] = param_dtype
    if distributed_optimizer:
        state["use_distributed_optimizer"] = True
    if fsdp:
        state["fsdp"] = True
    # refused here, before the search, as every candidate's run would refuse it
    RunOptions.from_values({"fsdp": 2 if state.get("fsdp") else None,
                            "use_distributed_optimizer": bool(
                                state.get("use_distributed_optimizer"))}).check_sharding()
    return tuple(sorted((k, v) for k, v in state.items() if v not in (None, False)))


def _render(result) -> str:
    s = result.settings
    counts = [f"{result.screened} screened"]
    if result.pruned:
        counts.append(f"{result.pruned} not run (lower bound above the best)")
    if result.ruled_out:
        counts.append(f"{result.ruled_out} ruled out by their sizes")
    if result.resumed:
        counts.append(f"{result.resumed} taken from --out (--resume)")
    title = (f"pipesim plan: {s.workload} on {s.gpus} GPUs, "
             f"{len(result.outcomes)} candidates: {', '.join(counts)}; ranked by "
             + ("p95 iteration time" if result.objective == "p95_ns" else "iteration time")
             + (f"; only what {s.runtime} runs" if s.runtime else ""))
    # the sizes the plan chose or was given beside pp and dp: TP where it searched the model
    # flags' TP sizes, CP where it is above 1 or searched, EP for the moe model
    sizes = ((["tp"] if s.model is not None else []) + (["cp"] if plan_cps(s) != [1] else [])
             + (["ep"] if dict(s.model or ()).get("arch") == "moe" else []))
    headers = ["#", *sizes, "pp", "dp", "vpp", "M", "schedule", "iteration", "p95", "bubble",
               "peak mem/GPU", "engine", "runs on"]
    cells = []
    feasible = [o for o in result.outcomes if o.feasible]
    for n, o in enumerate(feasible[:TOP], 1):
        c = o.candidate
        cells.append([str(n), *(str(getattr(c, k)) for k in sizes), str(c.pp), str(c.dp),
                      str(c.vpp), str(c.microbatches), _name(c), format_ns(o.makespan_ns),
                      format_ns(o.p95_ns) if o.p95_ns is not None else "-",
                      fmt_pct(o.bubble_ratio), fmt_bytes(o.peak_memory_bytes), o.engine,
                      _runs_on(o.runtimes)])
    dropped: dict[str, int] = {}
    pruned = []
    for o in result.outcomes:
        if not o.feasible:
            why = o.reason or "?"
            key = "over the memory limit" if why.startswith("peak memory") else why
            if why.startswith(PRUNED):
                key = "not run: lower bound above the best found (listed above)"
                pruned.append(o)
            dropped[key] = dropped.get(key, 0) + 1
    lines = [title, ""]
    if cells:
        schedule = headers.index("schedule")   # the left-aligned columns: schedule, engine, runs on
        lines.append(table(headers, cells, left=(schedule, schedule + 5, schedule + 6)))
    if pruned:
        lines += ["", _pruned_table(pruned, sizes), ""]
    if dropped:
        lines.append(f"dropped {sum(dropped.values())}:")
        lines += [f"  {n} x {why}" for why, n in sorted(dropped.items(), key=lambda kv: -kv[1])]
    lines += [f"note: {n}" for n in result.notes]
    return "\n".join(lines)


def _name(c) -> str:
    """The schedule column: the name, auto's cap, zb-greedy's limit, a split other than the
    default one, and full recompute."""
    pending = ""
    if c.max_pending is not None:
        pending = {c.pp: " 1p", 2 * c.pp: " 2p"}.get(c.max_pending, f" pending={c.max_pending}")
    split = split_label(c.split)
    return c.schedule + (f" K={c.max_in_flight}" if c.max_in_flight is not None else "") \
        + pending + (f" ({split})" if split else "") \
        + (", full recompute" if c.recompute == "full" else "")


PRUNED = "not run: its lower bound"   # the search's reason for a pruned candidate


def _pruned_table(pruned: list, sizes: list[str]) -> str:
    """The pruned candidates with the lowest bounds, each with the bound that pruned it
    (``sizes``: the TP / CP / EP columns the ranking shows)."""
    rows = sorted(pruned, key=lambda o: (o.lower_bound_ns, o.candidate.index))
    cells = []
    for o in rows[:PRUNED_SHOWN]:
        c = o.candidate
        cells.append([*(str(getattr(c, k)) for k in sizes), str(c.pp), str(c.dp), str(c.vpp),
                      str(c.microbatches), _name(c), format_ns(o.lower_bound_ns)])
    shown = f"the {len(cells)} lowest of {len(rows)}" if len(rows) > len(cells) else \
        f"{len(rows)}"
    return (f"not run, their lower bound above the best found ({shown}; every one in "
            "--json):\n" + table([*sizes, "pp", "dp", "vpp", "M", "schedule", "lower bound"],
                                  cells, left=(len(sizes) + 4,)))


def _runs_on(runtimes: dict | None) -> str:
    """The runtimes that run a configuration: ``torch``, ``torch(csv)`` (from the CSV only),
    ``megatron``, ``titan``; ``-`` when none does."""
    if not runtimes:
        return "-"
    names = {"torchtitan": "titan"}
    out = [names.get(k, k) + ("(csv)" if v["how"].startswith("csv") else "")
           for k, v in runtimes.items() if v["accepts"]]
    return " ".join(out) or "-"


def _plot(result, path: str) -> None:
    import matplotlib   # only with --plot: matplotlib is heavy

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ran = [o for o in result.outcomes if o.makespan_ns is not None]
    pts = sorted(((o.peak_memory_bytes / 2**30, o.makespan_ns / 1e6, o) for o in ran),
                 key=lambda t: (t[0], t[1]))
    front, best_t = [], float("inf")
    for mem, t, o in pts:
        if t < best_t:
            front.append((mem, t))
            best_t = t
    fig, ax = plt.subplots(figsize=(7, 4.5))
    ax.scatter([p[0] for p in pts if p[2].feasible], [p[1] for p in pts if p[2].feasible],
               s=12, color="tab:blue", label="fits")
    ax.scatter([p[0] for p in pts if not p[2].feasible],
               [p[1] for p in pts if not p[2].feasible], s=12, color="tab:gray", marker="x",
               label="dropped")
    ax.step([p[0] for p in front], [p[1] for p in front], where="post", color="tab:red",
            label="Pareto front")
    b = result.best
    ax.scatter([b.peak_memory_bytes / 2**30], [b.makespan_ns / 1e6], s=80, facecolors="none",
               edgecolors="black", label="best")
    if result.memory_limit_bytes > 0:
        ax.axvline(result.memory_limit_bytes / 2**30, color="tab:gray", ls="--", label="limit")
    ax.set_xlabel("peak memory per GPU (GiB)")
    ax.set_ylabel("iteration time (ms)")
    ax.set_title(f"pipesim plan: {Path(result.settings.workload).name}, "
                 f"{result.settings.gpus} GPUs")
    ax.legend(fontsize=8)
    fig.tight_layout()
    try:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(path)
    except OSError as err:
        raise ConfigError(f"--plot: cannot write {path}: {err.strerror or err}") from None
    finally:
        plt.close(fig)


class _Progress:
    """A rich progress bar on stderr, only on a terminal."""

    def __init__(self, label: str, enabled: bool) -> None:
        self.label, self.enabled = label, enabled
        self._bar = self._task = None

    def __enter__(self) -> "_Progress":
        if self.enabled:
            # rich: only on a terminal that shows the progress bar
            from rich.console import Console
            from rich.progress import Progress

            self._bar = Progress(console=Console(stderr=True), transient=True)
            self._bar.start()
            self._task = self._bar.add_task(f"planning {self.label}", total=None)
        return self

    def update(self, done: int, total: int) -> None:
        if self._bar is not None:
            self._bar.update(self._task, completed=done, total=total)

    def __exit__(self, *exc) -> None:
        if self._bar is not None:
            self._bar.stop()
