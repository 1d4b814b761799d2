"""A run as the settings the runtimes take: Megatron-LM's arguments, torchtitan's
``[parallelism]`` block, torch's CSV and the stage each rank must build, and a README.

Translating by hand is where launches go wrong (layers silently dropped by an uneven split, a
V-shaped schedule placed in a loop, fewer microbatches than stages). Everything here is read off
the simulated run itself: its schedule, the transformer layers of each chunk
(:mod:`simulator.workload.stage_layers`) and the runtime check
(:mod:`simulator.schedules.runtimes`). A runtime that cannot run the configuration gets, in its
file, the rule it breaks and nothing to launch.
"""

from __future__ import annotations

import json
import shlex
from dataclasses import dataclass
from pathlib import Path

from ..errors import ConfigError, PipesimError
from ..schedules.csv_io import load_schedule_csv, write_schedule_csv
from ..schedules.registration import ZERO_BUBBLE_FORK
from ..schedules.registry import megatron_of, torch_class_of
from ..schedules.runtimes import Shape, Verdict, check_runtimes, shape_of
from ..units import fmt_bytes, fmt_time
from ..workload.chunks import chunk_bounds
from ..workload.inputs.shape import LaunchSettings, ModelShape
from ..workload.inputs.zero_bubble_fork import fork_layer_flags, zb_v_setup
from ..workload.stage_layers import chunk_layers_of, megatron_split_of, n_model_layers

FILES = ("megatron_args.txt", "torchtitan.toml", "schedule.csv", "stage_ranks.json", "README.md")


@dataclass(frozen=True)
class LaunchPlan:
    """Everything the files say, computed once."""

    shape: Shape
    verdicts: dict[str, Verdict]
    tp: int
    dp: int
    micro_batch_size: int          # sequences per microbatch
    recompute: str                 # file | none | full
    file_recompute: bool           # the header names checkpoint lists
    embedding_stage: int | None
    head_stage: int | None
    stage_ranks: dict[int, list[int]]
    model: ModelShape | None = None          # the shape, when the run's model is known
    settings: LaunchSettings | None = None   # its sequence, precision, SP, attention
    recompute_grouping: tuple[str, int] = ("uniform", 1)   # full's method and layers
    rank_order: str = "tp-dp-pp"   # the run's placement (its system's topology.order)

    @property
    def global_batch(self) -> int:
        return self.micro_batch_size * self.shape.microbatches * self.dp

    @property
    def cp(self) -> int:
        """The run's context parallelism (its launch's; 1 without one)."""
        return self.settings.cp if self.settings is not None else 1


def launch_plan(result, micro_batch_size: int = 1, recompute: str = "file",
                options: dict | None = None, model: ModelShape | None = None,
                settings: LaunchSettings | None = None,
                recompute_grouping: tuple[str, int] = ("uniform", 1)) -> LaunchPlan:
    """The launch settings of a simulated run (a :class:`~simulator.result.SimulationResult`)."""
    wl, sched = result.workload, result.schedule
    shape = shape_of(sched, wl, result.partition, options)
    found = chunk_layers_of(wl, result.partition.chunks)
    h = wl.header
    ranks: dict[int, list[int]] = {r: [] for r in range(sched.pp)}
    for stage, rank in enumerate(sched.placement):
        ranks[rank].append(stage)
    tp = max(1, h.tp)
    cp = settings.cp if settings is not None else 1
    dp = max(1, h.all_gpus // (tp * sched.pp * cp))   # the run's world size over its own pp
    topo = result.system.topology
    return LaunchPlan(shape, check_runtimes(shape), tp, dp, micro_batch_size,
                      recompute, bool(h.checkpoint_initiates), found.embedding_chunk,
                      found.head_chunk, ranks, model, settings, recompute_grouping,
                      topo.order if topo.enabled else "tp-dp-pp")


# -- Megatron-LM ------------------------------------------------------------------------------

def megatron_layout(counts: tuple[int, ...], embedding: int | None = 0,
                    head: int | None = None) -> str:
    """Megatron's ``--pipeline-model-parallel-layout``: stages in virtual-stage order split by
    ``|``, ``E`` the embedding, ``t*n`` n transformer layers, ``L`` the loss (commas are
    cosmetic)."""
    last = len(counts) - 1 if head is None else head
    parts = []
    for s, n in enumerate(counts):
        items = (["E"] if s == embedding else []) + ([f"t*{n}"] if n else []) + \
                (["L"] if s == last else [])
        parts.append(",".join(items))
    return "|".join(parts)


def megatron_args(lp: LaunchPlan) -> list[str]:
    """The arguments, one per line (``#`` lines are notes), or the reason there are none."""
    s, v = lp.shape, lp.verdicts["megatron"]
    if not v.accepts:
        return [f"# Megatron-LM cannot run this configuration: {v.rule}.",
                "# No arguments are written: none would reproduce what pipesim simulated."]
    counts = s.layers
    out = [f"--tensor-model-parallel-size {lp.tp}", f"--pipeline-model-parallel-size {s.pp}",
           f"--num-layers {sum(counts)}"]
    if lp.cp > 1:
        out.append(f"--context-parallel-size {lp.cp}")
    if lp.rank_order == "tp-pp-dp":   # the ranks as the run placed them: stages side by side
        out.append("--use-tp-pp-dp-mapping")
    split = (megatron_split_of(counts, s.pp, s.vpp)
             if lp.embedding_stage in (0, None) and lp.head_stage in (len(counts) - 1, None)
             else None)
    if megatron_of(s.schedule) in ZERO_BUBBLE_FORK:
        # the fork's own layer flags (its verdict accepted the split) and schedule flags
        out += zero_bubble_args(s)
        if lp.settings is not None and lp.settings.optimizer_post_validation:
            # the fork's: read only with its zero-bubble schedule
            out.append("--enable-optimizer-post-validation")
    elif split is not None:
        if s.vpp > 1:
            out.append(f"--num-virtual-stages-per-pipeline-rank {s.vpp}")
        out += split.flags()
    else:
        layout = megatron_layout(counts, lp.embedding_stage, lp.head_stage)
        out.append(f"--pipeline-model-parallel-layout {layout}")
    if s.vpp > 1 and s.group_size is not None and s.group_size != s.pp:
        out.append(f"--microbatch-group-size-per-virtual-pipeline-stage {s.group_size}")
    out += [f"--micro-batch-size {lp.micro_batch_size}", f"--global-batch-size {lp.global_batch}"]
    if lp.recompute == "full":
        method, n = lp.recompute_grouping
        out += ["--recompute-granularity full", f"--recompute-method {method}",
                f"--recompute-num-layers {n}"]
    if lp.model is not None:
        out += megatron_model_args(lp.model, lp.settings, lp.tp)
    elif lp.recompute == "file" and lp.file_recompute:
        out.append("# the workload's checkpoint lists have no Megatron-LM flag; no recompute "
                   "flags written (pipesim simulated the file's lists)")
    return out


def megatron_model_args(m: ModelShape, st: LaunchSettings | None, tp: int) -> list[str]:
    """The model's shape, sequence and precision as Megatron-LM's arguments (what pipesim's
    generator priced: its gpt model is GELU with LayerNorm and biases, llama / moe SwiGLU with
    RMSNorm, rotary positions and no biases)."""
    spec = _spec(m)
    out = ["# the model (pipesim's shape)", f"--hidden-size {m.hidden}",
           f"--num-attention-heads {m.heads}", f"--ffn-hidden-size {spec.ffn_size}",
           f"--vocab-size {spec.vocab_size}"]
    if m.arch != "gpt":
        # the llama and moe rows have no dropout (Megatron-LM's default is 0.1 for both)
        out += ["--swiglu", "--normalization RMSNorm", "--disable-bias-linear",
                "--position-embedding-type rope", "--attention-dropout 0.0",
                "--hidden-dropout 0.0"]
        if spec.kv != m.heads:
            out += ["--group-query-attention", f"--num-query-groups {spec.kv}"]
    if not m.tied_embeddings:
        out.append("--untie-embeddings-and-output-weights")
    if m.arch == "moe":
        # the dispatcher and the experts' GEMMs the moe rows priced (not Megatron-LM's
        # defaults, allgather and SequentialMLP)
        out += [f"--num-experts {m.experts}", f"--moe-router-topk {m.topk}",
                f"--moe-ffn-hidden-size {spec.ffn_size}", "--moe-token-dispatcher-type alltoall",
                "--moe-grouped-gemm"]
        if m.shared_ffn:
            out.append(f"--moe-shared-expert-intermediate-size {m.shared_ffn}")
        if st is not None and st.router_fp32:
            out.append("--moe-router-dtype fp32")
        if st is not None and st.ep > 1:
            out.append(f"--expert-model-parallel-size {st.ep}")
        if st is not None and st.etp not in (0, tp):   # Megatron-LM's default: tp
            out.append(f"--expert-tensor-parallel-size {st.etp}")
    if st is not None and st.seq is not None:
        out += [f"--seq-length {st.seq}",
                f"--max-position-embeddings {max(st.seq, m.max_positions or 0)}"]
        if st.precision in ("bf16", "fp16"):
            out.append(f"--{st.precision}")
        if st.vocab_divisor != 128:    # Megatron-LM's default padding unit
            out.append(f"--make-vocab-size-divisible-by {st.vocab_divisor}")
        if st.rotary_percent != 1.0:
            out.append(f"--rotary-percent {st.rotary_percent:g}")
        if st.fp8:   # Transformer Engine's FP8 linears, in the recipe the run priced
            out += ["--fp8-format hybrid", f"--fp8-recipe {st.fp8}"]
        # the gradients' reduction (and buffer) dtype where it is not Megatron's default
        if st.precision == "bf16" and st.grad_reduce_dtype == "bf16":
            out.append("--grad-reduce-in-bf16")
        elif st.precision == "fp16" and st.grad_reduce_dtype == "fp32":
            out.append("--accumulate-allreduce-grads-in-fp32")
        if st.sequence_parallel and tp > 1:
            out.append("--sequence-parallel")
        if st.flash_attention:
            out.append("--use-flash-attn")
        out += [flag for flag, on in (
            ("--use-distributed-optimizer", st.use_distributed_optimizer),
            ("--overlap-grad-reduce", st.overlap_grad_reduce),
            ("--overlap-param-gather", st.overlap_param_gather),
            ("--tp-comm-overlap", st.tp_comm_overlap),
            ("--no-gradient-accumulation-fusion", not st.grad_accumulation_fusion),
            ("--no-rope-fusion", not st.rope_fusion),
            ("--no-bias-gelu-fusion", not st.bias_gelu_fusion),
            ("--cross-entropy-loss-fusion", st.cross_entropy_fusion),
            ("--log-num-zeros-in-grad", st.log_num_zeros_in_grad),
            ("--log-params-norm", st.log_params_norm),
            ("--calculate-per-token-loss", st.calculate_per_token_loss)) if on]
    return out


def zero_bubble_args(s: Shape) -> list[str]:
    """The zero-bubble fork's flags (its megatron/arguments.py, tag zero-bubble-v0.1.0): the
    layers' placement (:func:`fork_layer_flags`), then zb-greedy under its limit of pending
    backwards (p: ZB-1p, 2p: ZB-2p), or the V schedule in its memory setup (two chunks a rank,
    set by the flag itself: no virtual-stage flag)."""
    v = megatron_of(s.schedule) == "zero-bubble-v"
    out = list(fork_layer_flags(s.layers, s.pp, s.vpp, v) or ())
    if v:
        return out + ["--zero-bubble-v-schedule",
                      f"--zero-bubble-v-schedule-mem-setup {zb_v_setup(s.schedule)}"]
    pending = s.max_pending if s.max_pending is not None else s.pp
    return out + ["--enable-zero-bubble", f"--zero-bubble-max-pending-backward {int(pending)}"]


def _spec(m: ModelShape):
    """The generator's view of the shape (its defaults of ffn, vocab, kv heads)."""
    from ..workload.generator import ModelSpec

    return ModelSpec(seq=1, micro_batch=1, **m.spec_fields())


# -- torchtitan -------------------------------------------------------------------------------

def torchtitan_parallelism(lp: LaunchPlan, csv_name: str | None) -> dict | None:
    """The ``[parallelism]`` keys (torchtitan 0.3's ``ParallelismConfig``), or None."""
    s, v = lp.shape, lp.verdicts["torchtitan"]
    if not v.accepts:
        return None
    cls = torch_class_of(s.schedule)
    # FSDP over the whole data parallelism where the run counted it so, else replicas
    fsdp = lp.settings is not None and lp.settings.fsdp > 1
    out: dict = {"pipeline_parallel_degree": s.pp, "tensor_parallel_degree": lp.tp,
                 "data_parallel_replicate_degree": 1 if fsdp else lp.dp,
                 "data_parallel_shard_degree": lp.dp if fsdp else 1}
    if lp.cp > 1:
        out["context_parallel_degree"] = lp.cp
    if fsdp and lp.settings.fsdp_reshard_after_forward != "default":
        out["fsdp_reshard_after_forward"] = lp.settings.fsdp_reshard_after_forward
    if v.how.startswith("csv"):
        # the name only places the stages (torchtitan's _get_pp_rank_to_stage_indices_mapping)
        out["pipeline_parallel_schedule"] = ("ZBVZeroBubble" if s.placement == "v" else
                                             "Interleaved1F1B" if s.vpp > 1 else "1F1B")
        out["pipeline_parallel_schedule_csv"] = csv_name or "schedule.csv"
    else:
        out["pipeline_parallel_schedule"] = cls
    out["pipeline_parallel_microbatch_size"] = lp.micro_batch_size
    out["module_fqns_per_model_part"] = module_fqns(s.layers, lp.embedding_stage, lp.head_stage)
    return out


def module_fqns(counts: tuple[int, ...], embedding: int | None, head: int | None) -> list:
    """Module names per stage, torchtitan's LLM naming (``tok_embeddings``, ``layers.N``,
    ``norm``, ``lm_head``), stages in order."""
    last = len(counts) - 1 if head is None else head
    out, at = [], 0
    for s, n in enumerate(counts):
        names = (["tok_embeddings"] if s == (embedding if embedding is not None else 0) else [])
        names += [f"layers.{k}" for k in range(at, at + n)]
        at += n
        if s == last:
            names += ["norm", "lm_head"]
        out.append(names)
    return out


def torchtitan_model(m: ModelShape) -> list[str]:
    """``[model]``: torchtitan's llama3 flavor of the shape, else a flavor to register, its
    TransformerModelArgs in the comment above it (torchtitan takes a model's arguments from
    its registry, not from the TOML)."""
    from ..workload.inputs.torchtitan_job import llama3_flavor

    flavor = llama3_flavor(m) if m.arch == "llama" else None
    lines = [""]
    if flavor is None:
        spec = _spec(m)
        name = f"pipesim-{m.arch}-{m.layers}l-{m.hidden}h"
        lines += [f"# not a stock flavor: register {name!r} in the model's registry as",
                  f"#   TransformerModelArgs(dim={m.hidden}, n_layers={m.layers}, "
                  f"n_heads={m.heads}, n_kv_heads={spec.kv}, vocab_size={spec.vocab_size}), "
                  f"its FFN {spec.ffn_size} wide"
                  + (f", {m.experts} experts, top-{m.topk}" if m.arch == "moe" else "")
                  + ("; pipesim's gpt model is GELU with LayerNorm, not llama3's"
                     if m.arch == "gpt" else "")]
        flavor = name
    lines += ["[model]", 'name = "llama3"', f"flavor = {_toml_value(flavor)}"]
    return lines


def _toml_value(value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, str):
        return json.dumps(value)
    return "[" + ", ".join(_toml_value(x) for x in value) + "]"


def torchtitan_toml(lp: LaunchPlan, csv_name: str | None) -> str:
    par = torchtitan_parallelism(lp, csv_name)
    v = lp.verdicts["torchtitan"]
    if par is None:
        return (f"# torchtitan cannot run this configuration: {v.rule}.\n"
                "# No settings are written: none would reproduce what pipesim simulated.\n")
    local = lp.micro_batch_size * lp.shape.microbatches
    training = {"local_batch_size": local, "global_batch_size": local * lp.dp}
    model_lines: list[str] = []
    if lp.model is not None:
        model_lines = torchtitan_model(lp.model)
        st = lp.settings
        if st is not None and st.seq is not None:
            training["seq_len"] = st.seq
            training["mixed_precision_param"] = "float32" if st.precision == "fp32" \
                else "bfloat16"
    lines = ["# torchtitan settings (ParallelismConfig / TrainingConfig keys). torchtitan 0.3 "
             "takes them as", "# command-line overrides, e.g. --parallelism.pipeline_parallel_"
             "degree " + str(par["pipeline_parallel_degree"]) + " (see README.md)"]
    if v.rule:
        lines.append(f"# {v.rule}; torchtitan runs the CSV")
    lines += model_lines
    lines += ["", "[parallelism]"] + [f"{k} = {_toml_value(x)}" for k, x in par.items()]
    lines += ["", "[training]"] + [f"{k} = {_toml_value(x)}" for k, x in training.items()]
    if lp.model is not None:
        mode = "full" if lp.recompute == "full" else "none"
        lines += ["", "[activation_checkpoint]"]
        if mode == "full" and lp.recompute_grouping != ("uniform", 1):
            # torchtitan's full mode checkpoints every block alone; it has no grouping
            method, n = lp.recompute_grouping
            lines.append(f"# no mode: torchtitan has no Megatron-LM --recompute-method "
                         f"{method} --recompute-num-layers {n} (its full mode checkpoints "
                         "every layer alone)")
        else:
            lines.append(f"mode = {_toml_value(mode)}")
    return "\n".join(lines) + "\n"


def torchtitan_overrides(lp: LaunchPlan, csv_name: str | None) -> list[str]:
    """The same settings as torchtitan 0.3's command-line overrides (``--section.key value``)."""
    par = torchtitan_parallelism(lp, csv_name)
    if par is None:
        return []
    local = lp.micro_batch_size * lp.shape.microbatches
    out = []
    for key, value in par.items():
        if key == "module_fqns_per_model_part":
            out += [f"--parallelism.{key}"] + [",".join(part) for part in value]
        else:
            out += [f"--parallelism.{key}", str(value)]
    out += ["--training.local_batch_size", str(local),
            "--training.global_batch_size", str(local * lp.dp)]
    return out


# -- writing ------------------------------------------------------------------------------------

def write_launch(directory: str | Path, result, *, micro_batch_size: int = 1,
                 recompute: str = "file", options: dict | None = None,
                 command: str | None = None, numbers: dict | None = None,
                 model: ModelShape | None = None,
                 settings: LaunchSettings | None = None,
                 recompute_grouping: tuple[str, int] = ("uniform", 1)) -> list[str]:
    """Write the launch folder for ``result``; returns the files written. ``numbers`` are the
    figures the README quotes (default: the run's own); ``model`` and ``settings``, when the
    run's model is known, add its shape, sequence and precision to the runtimes' files."""
    lp = launch_plan(result, micro_batch_size, recompute, options, model, settings,
                     recompute_grouping)
    out = Path(directory)
    try:
        out.mkdir(parents=True, exist_ok=True)
        written = []
        csv_note = lp.shape.csv_reason
        csv_path = out / "schedule.csv"
        if csv_note is None:
            write_schedule_csv(result.schedule, csv_path)
            try:
                load_schedule_csv(csv_path, vpp=result.schedule.vpp,
                                  placement=tuple(result.schedule.placement))
            except PipesimError as err:   # a CSV nobody can load back is not handed out
                csv_path.unlink()
                csv_note = f"its CSV does not load back ({str(err).splitlines()[0]})"
            else:
                written.append(str(csv_path))
        elif csv_path.exists():
            csv_path.unlink()
        csv_name = "schedule.csv" if csv_note is None else None
        files = {
            "megatron_args.txt": "\n".join(megatron_args(lp)) + "\n",
            "torchtitan.toml": torchtitan_toml(lp, csv_name),
            "stage_ranks.json": "{\n" + ",\n".join(
                f'  "{r}": {json.dumps(s)}' for r, s in lp.stage_ranks.items()) + "\n}\n",
            "README.md": readme(lp, result, csv_note, command, numbers),
        }
        for name, text in files.items():
            (out / name).write_text(text)
            written.append(str(out / name))
    except OSError as err:
        raise ConfigError(f"--launch: cannot write {out}: {err.strerror or err}") from None
    return written


def readme(lp: LaunchPlan, result, csv_note: str | None, command: str | None,
           numbers: dict | None) -> str:
    s = lp.shape
    n = numbers or {"makespan_ns": result.makespan_ns, "bubble_ratio": result.bubble_ratio,
                    "peak_memory_bytes": result.to_dict().get("peak_memory_bytes")}
    gpus = lp.tp * s.pp * lp.cp * lp.dp
    cp = f" x CP {lp.cp}" if lp.cp > 1 else ""
    lines = [f"# Launch settings: {s.schedule} on {gpus} GPUs", "",
             f"Written by pipesim from `{result.workload.path}`: TP {lp.tp} x PP {s.pp}{cp} x DP "
             f"{lp.dp}, {s.vpp} stage(s) per rank, {s.microbatches} microbatches of "
             f"{lp.micro_batch_size} sequence(s) per data-parallel group and iteration (global "
             f"batch {lp.global_batch} sequences).", ""]
    if s.layers:
        lines.append("Transformer layers per stage (stage order): "
                     + " ".join(map(str, s.layers)) + f" ({sum(s.layers)} in all); "
                     f"the embedding on stage {lp.embedding_stage if lp.embedding_stage is not None else 0}, "
                     f"the LM head and loss on stage {lp.head_stage if lp.head_stage is not None else len(s.layers) - 1}.")
    elif s.layer_cut:
        even = [b - a for a, b in chunk_bounds(n_model_layers(result.workload),
                                               s.pp * s.vpp)]
        lines.append(f"Layers: {s.layer_cut}; a runtime that places whole layers cannot "
                     "reproduce this split. To simulate a whole-layer split, add "
                     f"`stage_layers: {' '.join(map(str, even))}` to the workload's header "
                     "and plan or run again.")
    lines += ["", "pipesim's numbers for this configuration: iteration "
              f"{fmt_time(n['makespan_ns'])}, bubble {n['bubble_ratio']:.1%}"
              + (f", peak memory {fmt_bytes(n['peak_memory_bytes'])} per GPU"
                 if n.get("peak_memory_bytes") else "") + "."]
    if result.warnings:    # what those numbers rest on, as the run states it
        lines += ["", "They rest on these assumptions (pipesim's warnings for the run):", ""]
        lines += [f"- {w}" for w in result.warnings]
    if command:
        lines += ["", "Reproduce them:", "", f"    {command}"]
    lines += ["", "| runtime | runs it | how, or the rule it breaks |", "|---|---|---|"]
    for name, v in lp.verdicts.items():
        lines.append(f"| {name} | {'yes' if v.accepts else 'no'} | "
                     f"{v.how if v.accepts else v.rule}"
                     + (f" ({v.rule})" if v.accepts and v.rule else "") + " |")
    overrides = torchtitan_overrides(lp, None if csv_note else "schedule.csv")
    lines += ["", "## Files", "",
              "- `megatron_args.txt`: " + (
                  "Megatron-LM's pipeline, batch and recompute arguments, one per line (`#` "
                  "lines are notes): `pretrain_gpt.py $(grep -v '^#' megatron_args.txt) ...`; "
                  "the model's size, data and optimizer arguments are yours."
                  if lp.verdicts["megatron"].accepts else "why Megatron-LM cannot run it."),
              "- `torchtitan.toml`: " + (
                  "the `[parallelism]` and `[training]` keys of torchtitan's config; torchtitan "
                  "0.3 takes them as overrides: `... --module <model> --config <config> "
                  + " ".join(_shell(x) for x in overrides)
                  + "`. The module names are torchtitan's LLM naming." if overrides else
                  "why torchtitan cannot run it."),
              "- `schedule.csv`: " + ("the schedule in torch's format, one row per rank "
                                      "(`_PipelineScheduleRuntime._load_csv(path)`, "
                                      "torchtitan's `pipeline_parallel_schedule_csv`)."
                                      if csv_note is None else f"not written: {csv_note}."),
              "- `stage_ranks.json`: the stages each rank must build, `{\"rank\": [stages]}`; "
              "torch takes the placement from the CSV, and stages built elsewhere hang.",
              ""]
    return "\n".join(lines)


def _shell(word: str) -> str:
    return shlex.quote(word)
