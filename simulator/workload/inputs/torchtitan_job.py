"""A torchtitan job TOML (its job config's ``[model]``, ``[parallelism]``, ``[training]`` and
``[activation_checkpoint]`` keys, torchtitan's names and defaults) as the model's shape and the
launch's settings.

The shape is the ``llama3`` flavor's (torchtitan's ``llama3_args``: the numbers below are its
TransformerModelArgs, the FFN width by its FeedForward rule: 4·dim, x 2/3, x
ffn_dim_multiplier, rounded up to multiple_of). Another flavor or model needs the shape from
``--hf-config`` or the model flags.

The layout is torchtitan's: stages per rank 1 for single-stage schedules (1F1B, GPipe), else
ceil((layers + first_less + last_less) / pipeline_parallel_layers_per_stage) / pp, or 2 without
it; layers per stage from ``module_fqns_per_model_part``, else torchtitan's even split with the
embedding and the output each weighing ``pipeline_parallel_first/last_stage_less_layers``
layers; microbatches local_batch_size / pipeline_parallel_microbatch_size.
"""

from __future__ import annotations

import os
import re
from typing import NoReturn

from ...errors import ConfigError
from ..stage_layers import TorchtitanSplitError, torchtitan_chunk_layers, torchtitan_stages
from ._files import read_text
from ..generator import cp_exchange_warning
from .shape import LaunchSettings, ModelInput, ModelShape

OPTION = "--torchtitan"


def _ffn(dim: int, multiplier: float | None, multiple_of: int) -> int:
    hidden = int(2 * (4 * dim) / 3)
    if multiplier is not None:
        hidden = int(multiplier * hidden)
    return multiple_of * ((hidden + multiple_of - 1) // multiple_of)


# torchtitan's llama3_args: (dim, n_layers, n_heads, n_kv_heads, vocab, ffn_dim_multiplier,
# multiple_of); vocab 128256 and multiple_of 256 are TransformerModelArgs' defaults
LLAMA3 = {
    "debugmodel": (256, 6, 16, None, 2048, None, 256),
    "8B": (4096, 32, 32, 8, 128256, 1.3, 1024),
    "70B": (8192, 80, 64, 8, 128256, 1.3, 4096),
    "405B": (16384, 126, 128, 8, 128256, 1.2, 4096),
}


def llama3_shape(flavor: str) -> ModelShape:
    dim, layers, heads, kv, vocab, mult, multiple = LLAMA3[flavor]
    return ModelShape("llama", layers, dim, heads, ffn=_ffn(dim, mult, multiple), vocab=vocab,
                      kv_heads=kv if kv is not None else heads, max_positions=131072)


def llama3_flavor(shape: ModelShape) -> str | None:
    """The llama3 flavor of exactly this shape, or None."""
    for name in LLAMA3:
        if llama3_shape(name)._replace(max_positions=None) == shape._replace(
                max_positions=None, tied_embeddings=False) and not shape.tied_embeddings:
            return name
    return None


# torch.distributed.pipelining's schedule classes -> pipesim's schedules
SCHEDULES = {"1f1b": "1f1b", "gpipe": "gpipe", "interleaved1f1b": "interleaved-1f1b",
             "loopedbfs": "looped-bfs", "interleavedzerobubble": "zb-h1",
             "zbvzerobubble": "zb-v", "dualpipev": "dualpipe-v"}
SINGLE = ("1f1b", "gpipe")
CSV_CLASSES = ("pipelinesschedulesingle", "pipelineschedulesingle", "pipelineschedulemulti",
               "_pipelinescheduleruntime")
READ = {
    # norm_type: torchtitan's choice of norm until 2025 (layernorm, np_layernorm, rmsnorm,
    # fused_rmsnorm), read by _norm_type
    "model": ("name", "flavor", "hf_assets_path", "tokenizer_path", "converters", "norm_type"),
    "parallelism": ("data_parallel_replicate_degree", "data_parallel_shard_degree",
                    "tensor_parallel_degree", "pipeline_parallel_degree",
                    "context_parallel_degree", "expert_parallel_degree",
                    "pipeline_parallel_schedule", "pipeline_parallel_schedule_csv",
                    "pipeline_parallel_microbatch_size", "pipeline_parallel_layers_per_stage",
                    "pipeline_parallel_first_stage_less_layers",
                    "pipeline_parallel_last_stage_less_layers", "module_fqns_per_model_part",
                    "fsdp_reshard_after_forward", "pipeline_parallel_microbatches",
                    "pipeline_parallel_split_points"),
    # batch_size: local_batch_size's name before torchtitan renamed it (2025); compile: the
    # [compile] section's enable before it had one
    "training": ("local_batch_size", "batch_size", "global_batch_size", "seq_len",
                 "mixed_precision_param", "steps", "dataset", "dataset_path", "max_norm",
                 "compile"),
    "activation_checkpoint": ("mode", "selective_ac_option"),
}
# where torchtitan kept these [parallelism] keys before that section (pytorch/torchtitan
# 785c34c99, 2025-03-18): the data-parallel and tensor-parallel degrees and FSDP's policy in
# [training], the pipeline (its microbatches as a count) and context parallelism in
# [experimental]
MOVED = {"data_parallel_replicate_degree": "training", "data_parallel_shard_degree": "training",
         "tensor_parallel_degree": "training", "fsdp_reshard_after_forward": "training",
         "disable_loss_parallel": "training",
         "enable_async_tensor_parallel": "experimental",
         "pipeline_parallel_degree": "experimental",
         "pipeline_parallel_schedule": "experimental",
         "pipeline_parallel_schedule_csv": "experimental",
         "pipeline_parallel_microbatches": "experimental",
         "pipeline_parallel_split_points": "experimental",
         "context_parallel_degree": "experimental"}
# sections that change no number pipesim computes
QUIET = ("job", "profiling", "metrics", "optimizer", "lr_scheduler", "checkpoint", "validation",
         "comm", "debug", "fault_tolerance", "experimental", "memory_estimation")


def read_torchtitan_job(path: str, gpus: int | None = None,
                        shape: ModelShape | None = None) -> ModelInput:
    """The launch (and, for a llama3 flavor, the shape) of a torchtitan job TOML; ``shape``:
    the model's shape from elsewhere (``--hf-config``, the model flags)."""
    import tomllib   # only with --torchtitan

    text = read_text(path, OPTION)
    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError as err:
        raise ConfigError(f"{OPTION} {path}: expected TOML ({err})") from None
    return _Job(path, doc, gpus).read(shape)


class _Job:
    def __init__(self, path: str, doc: dict, gpus: int | None) -> None:
        self.path, self.doc, self.gpus = path, doc, gpus
        self.src = f"{OPTION} {path}"
        self.warnings: list[str] = []
        self.notes: list[str] = []
        # the local batch's key as the job names it: batch_size before torchtitan renamed it
        self.batch_key = "local_batch_size"
        # [parallelism] keys the job gives in their older sections (MOVED): key -> section
        self.moved: dict[str, str] = {}

    def _where(self, section: str, key: str) -> str:
        """The section the job gives ``key`` in (a MOVED key's older one)."""
        return self.moved.get(key, section) if section == "parallelism" else section

    def _move_old_keys(self) -> None:
        """Read MOVED keys from their older sections as [parallelism] keys; the same key in
        both places is refused."""
        parallelism = self.doc.get("parallelism", {})
        if not isinstance(parallelism, dict):
            raise ConfigError(f"{self.src}: [parallelism]: expected a table")
        parallelism = dict(parallelism)
        for key, old in MOVED.items():
            table = self.doc.get(old)
            if not isinstance(table, dict) or key not in table:
                continue
            if key in parallelism:
                self.refuse(old, key, f"not together with [parallelism] {key} (its section "
                            "since torchtitan moved it, March 2025)", repr(table[key]))
            parallelism[key] = table[key]
            self.doc[old] = {k: v for k, v in table.items() if k != key}
            self.moved[key] = old
        if self.moved:
            self.doc["parallelism"] = parallelism
            self.notes.append(f"{self.src}: " + ", ".join(
                f"[{s}] {k}" for k, s in self.moved.items()) + ": read as [parallelism] "
                "keys, their section since torchtitan moved them (March 2025)")

    def get(self, section: str, key: str, default, kind=int):
        table = self.doc.get(section, {})
        if not isinstance(table, dict):
            raise ConfigError(f"{self.src}: [{section}]: expected a table")
        value = table.get(key, default)
        where = self._where(section, key)
        if kind is int and (isinstance(value, bool) or not isinstance(value, int)):
            raise ConfigError(f"{self.src}: [{where}] {key}: expected an integer, found "
                              f"{value!r}")
        if kind is str and value is not None and not isinstance(value, str):
            raise ConfigError(f"{self.src}: [{where}] {key}: expected a string, found "
                              f"{value!r}")
        return value

    def refuse(self, section: str, key: str, expected: str, found) -> NoReturn:
        raise ConfigError(f"{self.src}: [{self._where(section, key)}] {key}: expected "
                          f"{expected}, found {found}")

    def _norm_type(self) -> None:
        """[model] norm_type: its fused RMSNorm (the Triton kernel of fused_rmsnorm) is what a
        llama layer's norms are priced as (layer_ops); any other norm is named in a warning."""
        norm = self.get("model", "norm_type", "fused_rmsnorm", str)
        if norm == "fused_rmsnorm":
            return
        if norm not in ("rmsnorm", "layernorm", "np_layernorm"):
            self.refuse("model", "norm_type", "layernorm, np_layernorm, rmsnorm or "
                        "fused_rmsnorm", repr(norm))
        self.warnings.append(f"{self.src}: [model] norm_type {norm!r}: "
                             + ("its eager RMSNorm (several kernels) "
                                if norm == "rmsnorm" else f"its {norm} ")
                             + "priced as a fused RMSNorm kernel")

    def read(self, shape: ModelShape | None) -> ModelInput:
        self._move_old_keys()
        self._norm_type()
        converters = self.doc.get("model", {}).get("converters", [])
        if isinstance(converters, str):   # torchtitan before 2025's list: "float8,mx"
            converters = [c.strip() for c in converters.split(",") if c.strip()]
        if not isinstance(converters, list) or not all(isinstance(c, str) for c in converters):
            self.refuse("model", "converters", "a list of names", repr(converters))
        if converters:
            # torchao's float8 and MX linears: pipesim prices the job's linears in bf16
            self.warnings.append(f"{self.src}: [model] converters {converters}: not modelled "
                                 "by pipesim (the linears priced in bf16)")
        for section, table in self.doc.items():
            if section in QUIET:
                continue
            # what only a converter or torch.compile turns on is inert without it (as in
            # torchtitan's own llama3 presets): eager kernels and bf16 linears, as priced
            if section == "compile" and isinstance(table, dict):
                if table.get("enable"):
                    self.warnings.append(f"{self.src}: [compile] enable: torch.compile's "
                                         "fused kernels are not modelled by pipesim (priced "
                                         "as eager ones)")
                continue
            if section == "float8" and not any("float8" in c for c in converters):
                continue
            if section not in READ:
                self.warnings.append(f"{self.src}: [{section}]: not modelled by pipesim "
                                     "(ignored)")
                continue
            for key in table:
                if key not in READ[section]:
                    self.warnings.append(f"{self.src}: [{section}] {key}: not modelled by "
                                         "pipesim (ignored)")
        shape = self._shape(shape)
        P = "parallelism"
        tp = self.get(P, "tensor_parallel_degree", 1)
        pp = self.get(P, "pipeline_parallel_degree", 1)
        cp = self.get(P, "context_parallel_degree", 1)
        ep = self.get(P, "expert_parallel_degree", 1)
        replicate = self.get(P, "data_parallel_replicate_degree", 1)
        shard = self.get(P, "data_parallel_shard_degree", -1)
        for key, value in (("tensor_parallel_degree", tp), ("pipeline_parallel_degree", pp),
                           ("context_parallel_degree", cp), ("expert_parallel_degree", ep),
                           ("data_parallel_replicate_degree", replicate)):
            if value < 1:
                self.refuse(P, key, "a positive integer", value)
        if cp > 1:
            self.warnings.append(cp_exchange_warning(
                f"{self.src}: [parallelism] context_parallel_degree {cp}", cp))
        fixed = tp * pp * cp * replicate
        if shard == -1:
            if self.gpus is None:
                shard = 1
                self.warnings.append(f"{self.src}: [parallelism] data_parallel_shard_degree -1 "
                                     "without --gpus: pipesim assumes 1 (torchtitan takes the "
                                     "rest of the world size)")
            else:
                if self.gpus % fixed:
                    raise ConfigError(f"{self.src}: --gpus {self.gpus}: expected a multiple of "
                                      f"tp x pp x cp x replicate = {fixed}")
                shard = self.gpus // fixed
        elif shard < 1:
            self.refuse(P, "data_parallel_shard_degree", "-1 or a positive integer", shard)
        elif self.gpus is not None and self.gpus != fixed * shard:
            raise ConfigError(f"{self.src}: --gpus {self.gpus}: expected tp x pp x cp x "
                              f"replicate x shard = {fixed * shard}")
        # torchtitan shards with FSDP2 over dp_shard x cp (its mesh "dp_shard_cp"), with
        # context parallelism even at data_parallel_shard_degree 1
        fsdp = shard * cp
        if fsdp > 1:
            # FSDP2's memory and collectives (--fsdp), in Megatron's buckets
            self.warnings.append(f"{self.src}: [parallelism] data_parallel_shard_degree "
                                 f"{shard}" + (f" x context_parallel_degree {cp}" if cp > 1
                                               else "")
                                 + f": FSDP (--fsdp {fsdp}) reduce-scatters in Megatron's "
                                 "buckets, not per transformer block; without a pipeline each "
                                 "microbatch gathers every layer before its forward, and "
                                 "before its backward with reshard_after_forward (torchtitan's "
                                 "default there), with one the weights are gathered behind "
                                 "the first forward; the gathers and the reduce-scatters are "
                                 "priced as if each had the link alone")
        reshard = self.get(P, "fsdp_reshard_after_forward", "default", str)
        if reshard not in ("default", "always", "never"):
            self.refuse(P, "fsdp_reshard_after_forward", "default, always or never",
                        repr(reshard))
        if reshard == "always" and pp > 1 and fsdp > 1:
            self.refuse(P, "fsdp_reshard_after_forward", "default or never with "
                        f"pipeline_parallel_degree {pp} (resharding after every forward under "
                        "torch's PipelineStage is not modelled)", repr(reshard))
        dp = replicate * shard
        if shape.heads % tp:
            self.refuse(P, "tensor_parallel_degree", f"a divisor of the {shape.heads} heads", tp)
        T = "training"
        table = self.doc.get(T, {})
        if isinstance(table, dict) and "batch_size" in table:
            if "local_batch_size" in table:
                self.refuse(T, "batch_size", "not together with local_batch_size (its name "
                            "since torchtitan renamed it)", table["batch_size"])
            local, self.batch_key = self.get(T, "batch_size", 8), "batch_size"
            self.notes.append(f"{self.src}: [training] batch_size {local}: the local batch "
                              "(local_batch_size, as torchtitan has named it since 2025)")
        else:
            local = self.get(T, "local_batch_size", 8)
        if isinstance(table, dict) and table.get("compile"):
            self.warnings.append(f"{self.src}: [training] compile: torch.compile's fused "
                                 "kernels are not modelled by pipesim (priced as eager ones)")
        gbs = self.get(T, "global_batch_size", -1)
        seq = self.get(T, "seq_len", 2048)
        micro = self.get(P, "pipeline_parallel_microbatch_size", 1)
        for section, key, value in ((T, self.batch_key, local), (T, "seq_len", seq),
                                    (P, "pipeline_parallel_microbatch_size", micro)):
            if value < 1:
                self.refuse(section, key, "a positive integer", value)
        if cp > 1 and seq % (2 * cp):
            # its context parallelism splits each sequence into 2 x cp load-balanced chunks
            self.refuse(T, "seq_len", f"a multiple of 2 x context_parallel_degree {cp}", seq)
        if pp > 1 and local % micro:
            self.refuse(T, self.batch_key, f"a multiple of pipeline_parallel_microbatch_size "
                        f"{micro}", local)
        if gbs == -1:
            gbs = local * dp
        if gbs < 1 or gbs % (local * dp):
            self.refuse(T, "global_batch_size", f"a multiple of {self.batch_key} {local} x the "
                        f"data-parallel degree {dp}", gbs)
        accumulation = gbs // (local * dp)
        if accumulation > 1:
            self.warnings.append(f"{self.src}: [training] global_batch_size {gbs}: "
                                 f"{accumulation} gradient-accumulation steps, each a pipeline "
                                 "step of its own; pipesim simulates one")
        count = self.get(P, "pipeline_parallel_microbatches", None, kind=None)
        if count is not None and pp > 1:
            # torchtitan before 2025's microbatch count (local batch / count sequences each)
            if "pipeline_parallel_microbatch_size" in self.doc.get(P, {}):
                self.refuse(P, "pipeline_parallel_microbatches", "not together with "
                            "pipeline_parallel_microbatch_size", count)
            if isinstance(count, bool) or not isinstance(count, int) or count < 1:
                self.refuse(P, "pipeline_parallel_microbatches", "a positive integer",
                            repr(count))
            if local % count:
                self.refuse(P, "pipeline_parallel_microbatches", f"a divisor of "
                            f"{self.batch_key} {local}", count)
            micro = local // count
        elif pp > 1 and self.moved.get("pipeline_parallel_degree"):
            # torchtitan of then took the number of stages, which depends on the schedule
            self.refuse(P, "pipeline_parallel_degree", "pipeline_parallel_microbatches beside "
                        "it (the torchtitan of [experimental] then ran as many microbatches as "
                        "stages, which pipesim does not derive)", pp)
        split = self.get(P, "pipeline_parallel_split_points", [], kind=None)
        if split and pp > 1:
            self.refuse(P, "pipeline_parallel_split_points", "module_fqns_per_model_part or "
                        "pipeline_parallel_layers_per_stage (today's names for the split, "
                        "which pipesim reads)", repr(split))
        if pp == 1:
            micro = local
        microbatches = local // micro
        schedule, csv, vpp, stage_layers = self._pipeline(shape, pp, microbatches)
        precision = {"bfloat16": "bf16", "float32": "fp32"}.get(
            self.get(T, "mixed_precision_param", "bfloat16", str))
        if precision is None:
            self.refuse(T, "mixed_precision_param", "bfloat16 or float32",
                        repr(self.doc[T]["mixed_precision_param"]))
        mode = self.get("activation_checkpoint", "mode", "selective", str)
        if mode not in ("selective", "full", "memory_budget", "none"):
            self.refuse("activation_checkpoint", "mode", "selective, full, memory_budget or "
                        "none", repr(mode))
        recompute = "full" if mode == "full" else "none"
        method = nlayers = None
        option = self.get("activation_checkpoint", "selective_ac_option", "2", str)
        default = " (torchtitan's default)" if "activation_checkpoint" not in self.doc else ""
        if mode == "selective" and option.isdigit():
            recompute, method, nlayers = self._layer_sac(int(option), shape.layers,
                                                         stage_layers, default)
            mode = "full" if recompute == "full" else "none"
        elif mode == "selective" and option == "op" and shape.arch == "llama":
            # the generated layer keeps what the policy saves and re-runs the rest
            mode = "op"
            self.notes.append(
                f"{self.src}: [activation_checkpoint] mode selective{default}, "
                "selective_ac_option 'op': each layer keeps its input, the attention's output "
                "and every other GEMM's (wq, wv, w1, w2); its backward first runs the norms, "
                "wk, RoPE, wo, w3, SwiGLU and the residual adds again (their all-gathers' time is "
                "not counted)")
        elif mode in ("selective", "memory_budget"):
            self.warnings.append(f"{self.src}: [activation_checkpoint] mode {mode}{default}"
                                 + (f", selective_ac_option {option!r}" if mode == "selective"
                                    else "") + ": not modelled yet; run as no recompute")
        launch = LaunchSettings(
            source=self.src, tp=tp, pp=pp, vpp=vpp, dp=dp, ep=ep, cp=cp, seq=seq,
            micro_batch=micro, global_batch=gbs,
            microbatches=microbatches, gpus=self.gpus if self.gpus is not None else fixed * shard,
            sequence_parallel=tp > 1, precision=precision, flash_attention=True,
            recompute=recompute, recompute_granularity=None if mode == "none" else mode,
            recompute_method=method, recompute_num_layers=nlayers,
            schedule=schedule, schedule_csv=csv, stage_layers=stage_layers,
            layers_per_stage=self.get(P, "pipeline_parallel_layers_per_stage", None,
                                      None),
            fsdp=fsdp if fsdp > 1 else 0, fsdp_reshard_after_forward=reshard,
            runtime="torchtitan")
        self.notes.append(f"{self.src}: torchtitan's tensor parallelism shards the sequence "
                          "between its norms (sequence parallel) and its attention is SDPA "
                          "(flash: no scores kept)")
        return ModelInput(self.src, shape, launch, tuple(self.warnings), tuple(self.notes))

    def _shape(self, shape: ModelShape | None) -> ModelShape:
        name = self.get("model", "name", "llama3", str)
        flavor = self.get("model", "flavor", "debugmodel", str)
        if shape is not None:
            return shape
        if name != "llama3" or flavor not in LLAMA3:
            raise ConfigError(f"{self.src}: [model] {name} flavor {flavor!r}: pipesim knows "
                              "torchtitan's llama3 flavors (" + ", ".join(LLAMA3) + "); give "
                              "the shape with --hf-config or the model flags")
        return llama3_shape(flavor)

    def _layer_sac(self, freq: int, layers: int, stage_layers, default: str):
        """torchtitan's layer-selective checkpointing (``selective_ac_option`` a number N):
        every N-th transformer block a rank wraps is checkpointed whole (``_apply_layer_sac``:
        its count modulo N is 0; 0 or 1: every block), the others keep their activations. That
        is full recompute of floor(L / N) of a stage's L layers, pipesim's block method (the
        first ones of each stage: the same memory and time as every N-th). (recompute,
        method, layers)."""
        what = f"{self.src}: [activation_checkpoint] mode selective{default}, " \
               f"selective_ac_option {freq}"
        if freq <= 1:
            self.notes.append(f"{what}: every transformer block checkpointed (full recompute)")
            return "full", None, None
        counts = list(stage_layers) if stage_layers else [layers]
        per = sorted({n // freq for n in counts})
        if per[0] == 0:
            self.warnings.append(f"{what}: a stage of {min(counts)} layers checkpoints no "
                                 f"block (one in {freq}); run as no recompute")
            return "none", None, None
        if len(per) > 1:
            self.warnings.append(f"{what}: the stages' {', '.join(map(str, counts))} layers "
                                 f"checkpoint {', '.join(str(n // freq) for n in counts)} "
                                 f"blocks; pipesim recomputes {per[0]} of each stage")
        self.notes.append(f"{what}: one block in {freq} checkpointed, {per[0]} of each "
                          f"stage's layers recomputed whole (--recompute full "
                          f"--recompute-method block --recompute-num-layers {per[0]})")
        return "full", "block", per[0]

    def _pipeline(self, shape: ModelShape, pp: int, microbatches: int):
        P = "parallelism"
        name = self.get(P, "pipeline_parallel_schedule", "1F1B", str)
        csv = self.get(P, "pipeline_parallel_schedule_csv", "", str) or None
        key = name.lower()
        if csv is not None:
            csv = os.path.join(os.path.dirname(self.path), csv)
            schedule = None
        elif key in SCHEDULES:
            schedule = SCHEDULES[key]
        else:
            self.refuse(P, "pipeline_parallel_schedule", "one of torch's schedule classes ("
                        + ", ".join(["1F1B", "GPipe", "Interleaved1F1B", "LoopedBFS",
                                     "InterleavedZeroBubble", "ZBVZeroBubble", "DualPipeV"])
                        + "), or a pipeline_parallel_schedule_csv", repr(name))
        single = key in SINGLE or key == "pipelineschedulesingle"
        layers = shape.layers
        first_less = self.get(P, "pipeline_parallel_first_stage_less_layers", 1)
        last_less = self.get(P, "pipeline_parallel_last_stage_less_layers", 1)
        # what the embedding and the output weigh, in layers: never less than nothing
        for key, value in (("pipeline_parallel_first_stage_less_layers", first_less),
                           ("pipeline_parallel_last_stage_less_layers", last_less)):
            if value < 0:
                self.refuse(P, key, "an integer >= 0", value)
        fqns = self.get(P, "module_fqns_per_model_part", None, None)
        per = self.get(P, "pipeline_parallel_layers_per_stage", None, None)
        if pp == 1:
            return schedule or "1f1b", csv, 1, None
        if fqns is not None:
            counts = self._fqn_counts(fqns, layers)
            stages = len(counts)
        else:
            if per is not None:
                if isinstance(per, bool) or not isinstance(per, int) or per < 1:
                    self.refuse(P, "pipeline_parallel_layers_per_stage", "a positive integer",
                                repr(per))
                stages = torchtitan_stages(layers, per, first_less, last_less)
            else:
                stages = pp * (1 if single else 2)
            counts = self._automatic_split(stages, layers, first_less, last_less)
        if stages % pp:
            self.refuse(P, "module_fqns_per_model_part" if fqns is not None else
                        "pipeline_parallel_layers_per_stage", f"a stage count divisible by "
                        f"pipeline_parallel_degree {pp}", f"{stages} stages")
        vpp = stages // pp
        if single and vpp != 1:
            self.refuse(P, "pipeline_parallel_schedule", f"a multi-stage schedule for {vpp} "
                        "stages per rank", repr(name))
        if not single and csv is None and vpp < 2:
            self.refuse(P, "pipeline_parallel_schedule", "a single-stage schedule (1F1B, GPipe) "
                        "for 1 stage per rank", repr(name))
        if microbatches < stages and csv is None:
            self.refuse("training", self.batch_key, f"at least {stages} microbatches (one "
                        "per stage, torchtitan's rule)", f"{microbatches} microbatches")
        return schedule, csv, vpp, tuple(counts)

    def _automatic_split(self, stages: int, layers: int, first_less: int,
                         last_less: int) -> tuple[int, ...]:
        """torchtitan's automatic split (:func:`torchtitan_chunk_layers`), its refusals named by
        this file's keys."""
        P = "parallelism"
        try:
            return torchtitan_chunk_layers(layers, stages, first_less, last_less)
        except TorchtitanSplitError as err:
            if err.option == "stages":
                self.refuse(P, "pipeline_parallel_degree", f"at most {err.limit} stages "
                            f"({layers} layers + {first_less} + {last_less})", f"{stages} stages")
            self.refuse(P, f"pipeline_parallel_{err.option}_stage_less_layers",
                        f"at most the {err.limit} layers of the smallest stage",
                        first_less if err.option == "first" else last_less)

    def _fqn_counts(self, fqns, layers: int) -> list[int]:
        if not isinstance(fqns, list) or not all(isinstance(p, list) for p in fqns):
            self.refuse("parallelism", "module_fqns_per_model_part", "a list of lists of module "
                        "names", repr(fqns)[:40])
        counts, seen = [], []
        for part in fqns:
            n = 0
            for name in part:
                m = re.fullmatch(r"layers\.(\d+)", str(name))
                if m:
                    seen.append(int(m.group(1)))
                    n += 1
            counts.append(n)
        if seen != list(range(layers)):
            self.refuse("parallelism", "module_fqns_per_model_part", f"layers.0 to "
                        f"layers.{layers - 1} once each, in order", f"{len(seen)} layer names")
        return counts
