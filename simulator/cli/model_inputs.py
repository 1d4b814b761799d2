"""The model's flags, declared once, and the model input they resolve to.

``generate``, ``plan``, ``run`` and ``compare`` describe a model the same way: the shape flags
(``--model --layers --hidden --heads`` and the optional ``--ffn --vocab --kv-heads --experts
--topk``), or a file that states it (``--hf-config``), and the launch's settings from
``--megatron-args`` or ``--torchtitan`` (either may also give the shape), with ``--seq`` /
``--micro-batch`` / ``--tp`` / ``--gpu`` where no launch file states them. :data:`FLAGS` is the
one declaration (click options and ``pipesim run``'s plain reader are both made from it);
:func:`resolve` turns the values into one :class:`~simulator.workload.inputs.shape.ModelInput`.

No click and no generator at import: ``pipesim run`` reads this module on its fast path.
"""

from __future__ import annotations

from typing import NamedTuple

from ..errors import ConfigError
from ..workload.inputs.shape import ARCHS, LaunchSettings, ModelInput, ModelShape


class ModelFlag(NamedTuple):
    """One flag: ``kind`` int, path, str or choice (``choices``)."""

    flags: tuple[str, ...]
    dest: str
    kind: str
    help: str
    metavar: str | None = None
    choices: tuple[str, ...] = ()


FLAGS: tuple[ModelFlag, ...] = (
    ModelFlag(("--hf-config",), "hf_config", "path",
              "A Hugging Face config.json (llama, mistral, qwen2, gpt2, gpt_neox, mixtral, "
              "deepseek families) for the model's shape.", "FILE"),
    ModelFlag(("--megatron-args",), "megatron_args", "path",
              "A Megatron-LM argument list (one shell line or one per line, as --launch "
              "writes megatron_args.txt): the shape, parallelism, batch and recompute, with "
              "Megatron-LM's defaults; the world size is --gpus (generate: --dp x tp x pp).",
              "FILE"),
    ModelFlag(("--torchtitan",), "torchtitan", "path",
              "A torchtitan job TOML: [parallelism], [training], [activation_checkpoint]; the "
              "shape of its llama3 flavor (else from --hf-config or the shape flags).", "FILE"),
    ModelFlag(("--model",), "arch", "choice",
              "gpt (LayerNorm, GELU MLP, biases), llama (RMSNorm, SwiGLU, GQA), moe (llama "
              "attention + top-k SwiGLU experts).", None, ARCHS),
    ModelFlag(("--layers",), "layers", "int", "Transformer layers."),
    ModelFlag(("--hidden",), "hidden", "int", "Hidden size h."),
    ModelFlag(("--heads",), "heads", "int", "Attention heads."),
    ModelFlag(("--ffn",), "ffn", "int",
              "FFN size (default 4h; SwiGLU models: 8h/3 rounded up to 256)."),
    ModelFlag(("--vocab",), "vocab", "int", "Vocabulary (default gpt 50257, else 32000)."),
    ModelFlag(("--kv-heads",), "kv_heads", "int", "Key/value heads (grouped-query attention)."),
    ModelFlag(("--experts",), "experts", "int", "Experts (moe; default 1)."),
    ModelFlag(("--topk",), "topk", "int", "Experts per token (moe; default 2)."),
    ModelFlag(("--shared-ffn",), "shared_ffn", "int",
              "The shared experts' FFN size every token runs beside its routed ones (moe; "
              "Megatron-LM's --moe-shared-expert-intermediate-size: their count x one's "
              "width; default none)."),
    ModelFlag(("--seq", "--seq-length"), "seq", "int",
              "Sequence length s (Megatron-LM's --seq-length; a launch file states its own)."),
    ModelFlag(("--micro-batch",), "micro_batch", "int",
              "Sequences per microbatch b (a launch file states its own)."),
    ModelFlag(("--global-batch-size",), "global_batch_size", "int",
              "Sequences per iteration over every DP rank, as Megatron-LM's: -m = B / "
              "(--micro-batch x DP), DP = --gpus / (TP x CP x PP) (a launch file states its "
              "own)."),
    ModelFlag(("--tp",), "tp", "int", "Tensor parallelism T (default 1; a launch file states "
              "its own)."),
    ModelFlag(("--cp",), "cp", "int", "Context parallelism: each rank holds s/cp tokens of "
              "every sequence, flash attention only (default 1; a launch file states its own)."),
    ModelFlag(("--ep",), "ep", "int", "Expert parallelism (moe): the experts split over EP of "
              "the data-parallel ranks (default 1; a launch file states its own)."),
    ModelFlag(("--etp",), "etp", "int", "The experts' tensor parallelism (moe; Megatron-LM's "
              "--expert-tensor-parallel-size): each expert split over ETP ranks, a stage's "
              "GPUs folded into ETP x EP x expert-DP (default: --tp; a launch file states its "
              "own)."),
    ModelFlag(("--gpu",), "gpu", "str", "GPU preset of the kernel prices (a100, h100, h200; "
              "default: the system's gpu.preset, else a100 with a warning)."),
)
BY_DEST = {f.dest: f for f in FLAGS}
FILES = ("hf_config", "megatron_args", "torchtitan")
SHAPE = ("arch", "layers", "hidden", "heads", "ffn", "vocab", "kv_heads", "experts", "topk",
         "shared_ffn")
# which flags each command takes (generate declares its own parallel flags: --tp among them)
RUN_FLAGS = FILES + SHAPE + ("seq", "micro_batch", "global_batch_size", "tp", "cp", "ep", "etp",
                             "gpu")
PLAN_FLAGS = FILES + SHAPE + ("seq", "micro_batch", "tp", "cp", "ep", "gpu")
GENERATE_FLAGS = FILES + SHAPE + ("seq", "micro_batch", "etp")


def click_options(dests: tuple[str, ...], defaults: dict | None = None):
    """A decorator adding the click options of ``dests`` (in :data:`FLAGS` order)."""
    import click   # only where click reads the line

    defaults = defaults or {}

    def deco(fn):
        for flag in reversed([f for f in FLAGS if f.dest in dests]):
            kw: dict = {"help": flag.help, "metavar": flag.metavar,
                        "default": defaults.get(flag.dest)}
            if flag.dest in defaults:
                kw["show_default"] = True
            if flag.kind == "path":
                kw["type"] = click.Path(dir_okay=False)
            elif flag.kind == "int":
                kw["type"] = int
            elif flag.kind == "choice":
                kw["type"] = click.Choice(flag.choices)
            fn = click.option(*flag.flags, flag.dest, **kw)(fn)
        return fn
    return deco


def split_options(fn):
    """The runtimes' layer-split options, declared once in RunOptions (``pipesim run``'s own)."""
    from ..planning.candidates import SPLIT_OPTIONS   # only where a command is declared
    from ..run_options import OPTION_FIELDS, click_option_of

    for f in reversed([f for f in OPTION_FIELDS if f.name in SPLIT_OPTIONS]):
        fn = click_option_of(f)(fn)
    return fn


def split_of(values: dict):
    """The :class:`~simulator.workload.stage_layers.PipelineSplit` of the split options among a
    command's ``values`` (taken out of them)."""
    from ..planning.candidates import SPLIT_OPTIONS
    from ..workload.stage_layers import PipelineSplit

    return PipelineSplit(*(values.pop(k) for k in SPLIT_OPTIONS))


def given(values: dict) -> bool:
    """Whether ``values`` name a model at all (a file or the shape flags)."""
    return any(values.get(k) is not None for k in FILES + ("arch",))


def _shape_from_flags(values: dict) -> ModelShape | None:
    shape_flags = [k for k in SHAPE if values.get(k) is not None]
    if not shape_flags:
        return None
    if values.get("arch") is None:
        raise ConfigError(f"{BY_DEST[shape_flags[0]].flags[0]}: needs --model (gpt, llama or "
                          "moe) with the other shape flags, or a file that states the shape "
                          "(--hf-config)")
    if values["arch"] not in ARCHS:
        raise ConfigError(f"--model: expected one of {', '.join(ARCHS)}, found "
                          f"{values['arch']!r}")
    for dest in ("layers", "hidden", "heads"):
        if values.get(dest) is None:
            raise ConfigError(f"{BY_DEST[dest].flags[0]}: needed with --model (the model's "
                              "shape)")
    for dest in SHAPE[1:]:
        v = values.get(dest)
        if v is not None and v < 1:
            raise ConfigError(f"{BY_DEST[dest].flags[0]}: expected a positive integer, found {v}")
    return ModelShape(values["arch"], values["layers"], values["hidden"], values["heads"],
                      ffn=values.get("ffn"), vocab=values.get("vocab"),
                      kv_heads=values.get("kv_heads"), experts=values.get("experts") or 1,
                      topk=values.get("topk") or 2, shared_ffn=values.get("shared_ffn") or 0)


def resolve(values: dict, gpus: int | None = None) -> ModelInput | None:
    """The model input the flags in ``values`` (keyed by :data:`FLAGS`' dests) name, or None
    when they name none. The shape comes from the shape flags or ``--hf-config`` (one of them),
    else from the launch file; the launch from ``--megatron-args`` or ``--torchtitan`` (one of
    them). A launch file whose shape contradicts the given one is refused."""
    if not given(values) and not any(values.get(k) is not None for k in SHAPE):
        return None
    hf, meg, titan = (values.get(k) for k in FILES)
    flags_shape = _shape_from_flags(values)
    if meg is not None and titan is not None:
        raise ConfigError(f"--megatron-args {meg} and --torchtitan {titan}: give one launch's "
                          "settings, not both")
    warnings: list[str] = []
    notes: list[str] = []
    shape, source = flags_shape, "the model flags"
    if hf is not None:
        if flags_shape is not None:
            raise ConfigError(f"--hf-config {hf} and --model: give one shape, not both (the "
                              "config states the layers, hidden size and heads)")
        from ..workload.inputs.hf_config import read_hf_config

        got = read_hf_config(hf)
        shape, source = got.shape, got.source
        warnings += got.warnings
        notes += got.notes
    launch = None
    if meg is not None:
        from ..workload.inputs.megatron_args import read_megatron_args

        got = read_megatron_args(meg, gpus)
        if shape is not None:
            for field, flag in (("layers", "--num-layers"), ("hidden", "--hidden-size"),
                                ("heads", "--num-attention-heads")):
                if getattr(got.shape, field) != getattr(shape, field):
                    raise ConfigError(f"--megatron-args {meg}: {flag}: expected "
                                      f"{getattr(shape, field)} as {source} says, found "
                                      f"{getattr(got.shape, field)}")
            # the shape's own file says the rest; Megatron's guesses about it (its defaults of
            # --vocab-size, biases, norms) do not apply
            warnings += [w for w in got.warnings if not _about_shape(w)]
        else:
            shape, source = got.shape, got.source
            warnings += got.warnings
        notes += got.notes
        launch = got.launch
    elif titan is not None:
        from ..workload.inputs.torchtitan_job import read_torchtitan_job

        got = read_torchtitan_job(titan, gpus, shape)
        if shape is None:
            shape, source = got.shape, got.source
        launch = got.launch
        warnings += got.warnings
        notes += got.notes
    if shape is None:
        raise ConfigError("--model: needed, or a file that states the shape (--hf-config, "
                          "--megatron-args, --torchtitan)")
    given_launch = launch is not None
    launch = _with_flags(launch, values, source)
    if not given_launch and launch.cp > 1:   # a launch file's reader says it of its own
        from ..workload.generator import cp_exchange_warning

        warnings.append(cp_exchange_warning(f"--cp {launch.cp}", launch.cp))
    if shape.max_positions is not None and launch.seq > shape.max_positions:
        warnings.append(f"{source}: sequence length {launch.seq} above the "
                        f"{shape.max_positions} positions the model was built for; priced as "
                        "given")
    return ModelInput(source, shape, launch, tuple(warnings), tuple(notes))


SHAPE_WARNED = ("--vocab-size absent", "--untie-embeddings", "--normalization",
                "--disable-bias-linear", "--swiglu absent", "--group-query-attention: the gpt",
                "--position-embedding-type")


def _about_shape(warning: str) -> bool:
    return any(f": {key}" in warning for key in SHAPE_WARNED)


def _with_flags(launch: LaunchSettings | None, values: dict, source: str) -> LaunchSettings:
    """The launch with --seq / --micro-batch / --tp / --cp / --ep / --etp where no launch file
    states them; a flag that contradicts the file is refused."""
    seq, micro, tp, cp, ep, etp = (values.get(k) for k in ("seq", "micro_batch", "tp", "cp", "ep",
                                                           "etp"))
    if launch is not None:
        for flag, value, have in (("--seq", seq, launch.seq), ("--micro-batch", micro,
                                  launch.micro_batch), ("--tp", tp, launch.tp),
                                  ("--cp", cp, launch.cp), ("--ep", ep, launch.ep),
                                  ("--etp", etp, launch.etp or launch.tp)):
            if value is not None and value != have:
                raise ConfigError(f"{flag} {value}: the launch file says {have}; give one")
        return launch
    if seq is None:
        if source == "the model flags":
            raise ConfigError("--seq: needed with --model (the model's shape)")
        raise ConfigError(f"--seq: needed with {source} (the training sequence length; a "
                          "config states only the longest it was built for)")
    for flag, value in (("--seq", seq), ("--micro-batch", micro), ("--tp", tp), ("--cp", cp),
                        ("--ep", ep), ("--etp", etp)):
        if value is not None and value < 1:
            raise ConfigError(f"{flag}: expected a positive integer, found {value}")
    return LaunchSettings(tp=tp or 1, seq=seq, micro_batch=micro or 1, precision="bf16",
                          sequence_parallel=(tp or 1) > 1, flash_attention=True, cp=cp or 1,
                          ep=ep or 1, etp=etp or 0)


# -- the launch's placement, and the launch onto the run's options: here only ------------------
#
# The launch's placement is applied as the header's ``stage_layers:`` split, by the one rule
# that places Megatron-LM's layers (:func:`simulator.workload.stage_layers.megatron_chunk_layers`,
# which ``pipesim run``'s own --decoder-*-pipeline-num-layers options use too); the DP /
# optimizer flags and --tp-comm-overlap are carried in the record and warned as not modelled (by
# the readers).

def stage_layers(layers: int, pp: int, vpp: int, launch: LaunchSettings) -> tuple[int, ...]:
    """Transformer layers per chunk in model order (chunk c on rank c % pp): torchtitan's split
    as its reader gave it, else Megatron-LM's from the launch's placement options."""
    if launch.stage_layers is not None and len(launch.stage_layers) == pp * vpp:
        return tuple(launch.stage_layers)
    from ..workload.stage_layers import megatron_chunk_layers

    return megatron_chunk_layers(layers, pp, vpp, launch.decoder_first_pipeline_num_layers,
                                 launch.decoder_last_pipeline_num_layers,
                                 bool(launch.account_for_embedding_in_pipeline_split),
                                 bool(launch.account_for_loss_in_pipeline_split))


def run_option_values(launch: LaunchSettings) -> dict:
    """The RunOptions fields a launch sets when the command line leaves them at their default."""
    return {"schedule": launch.schedule, "pp": launch.pp, "vpp": launch.vpp,
            "microbatches": launch.microbatches, "recompute": launch.recompute,
            # full recompute's grouping, Megatron-LM's --recompute-method / -num-layers
            **({"recompute_method": launch.recompute_method,
                "recompute_num_layers": launch.recompute_num_layers}
               if launch.recompute == "full" else {}),
            "gpus": launch.tp * launch.pp * launch.cp * launch.dp,
            # Megatron-LM's memory: --bf16 / --fp16 keep bf16 weights with fp32 main grads,
            # fp32 otherwise (--use-distributed-optimizer, among the DDP flags, shards the fp32
            # state over DP)
            "param_dtype": "bf16" if launch.precision in ("bf16", "fp16") else "fp32",
            **ddp_option_values(launch)}


# the run's flags a Megatron-LM launch sets, in RunOptions' names (Megatron's own)
DDP_FLAGS = ("use_distributed_optimizer", "overlap_grad_reduce", "overlap_param_gather",
             "tp_comm_overlap", "ddp_bucket_size", "grad_reduce_dtype", "fp16_loss_scale",
             "optimizer_post_validation", "log_num_zeros_in_grad", "log_params_norm",
             "calculate_per_token_loss")


def ddp_option_values(launch: LaunchSettings) -> dict:
    """A Megatron-LM launch's data parallelism and overlaps as RunOptions fields: Megatron's
    DDP (engine/tail.py) with the file's flags; a torchtitan job's FSDP2 (memory); none for
    another launcher's file."""
    if launch.fsdp:
        policy = launch.fsdp_reshard_after_forward
        return {"fsdp": launch.fsdp,
                **({"fsdp_reshard_after_forward": policy} if policy != "default" else {})}
    if launch.source is None or not launch.source.startswith("--megatron-args"):
        return {}
    return {"megatron_ddp": True, **{k: getattr(launch, k) for k in DDP_FLAGS}}


def model_gpu(flag: str | None, system_preset: str,
              builtin_system: bool = False) -> tuple[str, list[str]]:
    """The GPU preset whose kernel prices a generated workload takes, and the warnings of its
    defaults: ``--gpu``, else the system's ``gpu.preset`` (the system a run is priced on names
    its GPU); the two disagreeing is refused, neither given is a100 with a warning (a default
    that changes every compute time). ``builtin_system``: no --system was given, so the
    model's transfers, collectives and memory meet pipesim's built-in system, not the GPU's
    cluster (:func:`builtin_system_warning`)."""
    warnings = []
    if flag is not None:
        gpu = flag.lower()
        if system_preset and gpu != system_preset:
            raise ConfigError(f"--gpu {gpu}: the system's GPU is {system_preset} (gpu.preset in "
                              "--system); give one of them, or the same")
    elif system_preset:
        gpu = system_preset
    else:
        gpu = "a100"
        warnings.append("no --gpu, and the system names no GPU (gpu.preset in --system): the "
                        "generated workload's kernels are priced on the a100 preset")
    if builtin_system:
        warnings.append(builtin_system_warning(gpu))
    return gpu, warnings


def builtin_system_warning(gpu: str) -> str:
    """What a model generated for ``gpu`` meets without --system: the built-in system's links
    (simulator/system/config.py, read here so the numbers are its own) and no memory
    capacity, where the GPU's cluster file has nodes, NICs and the card's memory."""
    from ..system.config import SystemConfig

    built = SystemConfig()
    return (f"no --system: the {gpu} model's transfers and collectives are priced on pipesim's "
            f"built-in system ({built.links.bandwidth_gbps:g} Gb/s between stages, "
            f"{built.collectives.dp.bandwidth_gbps:g} Gb/s over DP, "
            f"{built.collectives.tp.bandwidth_gbps:g} Gb/s over TP, no nodes) and no memory "
            f"capacity is checked; --system configs/system/{gpu}.yaml describes the {gpu} "
            "cluster (its nodes, NICs and the card's memory)")


def model_run(workload, model_values: dict, opts, schedule, system_preset: str = "",
              builtin_system: bool = False):
    """``(workload, opts, schedule, model)`` of a run (``run``, ``compare``) given model flags
    or files: the generated workload and the options and schedule its launch sets, refused in
    one line beside a WORKLOAD file, and with ``--strict``, on any warning of the input.
    ``system_preset``: the run's system's ``gpu.preset``; ``builtin_system``: no --system
    (:func:`model_gpu`)."""
    batch = model_values.get("global_batch_size")
    if workload is not None:
        if batch is not None and not given(model_values):
            raise ConfigError(f"--global-batch-size: for a model input (the model flags, "
                              f"--hf-config, a launch file); WORKLOAD {workload} states its "
                              "microbatches (ga:), -m overrides them")
        raise ConfigError(f"WORKLOAD {workload} and the model flags / files: give one")
    gpu, gpu_warnings = model_gpu(model_values["gpu"], system_preset, builtin_system)
    model = resolve(model_values, gpus=opts.gpus)
    if batch is not None:
        opts = opts._replace(microbatches=_microbatches_of(batch, model, opts))
    opts, schedule, added = launch_options(opts, model, schedule)
    model = model._replace(warnings=model.warnings + tuple(added) + tuple(gpu_warnings))
    workload = workload_of(model, pp=opts.pp, vpp=opts.vpp, microbatches=opts.microbatches,
                           gpus=opts.gpus, gpu=gpu)
    if opts.strict and model.warnings:
        from ..diagnostics import enforce_strict

        enforce_strict(run_warnings(model))
    return workload, opts, schedule, model


def launch_system(system, mi: ModelInput):
    """``(system, mi)``: the run's system with the launch's rank order (a Megatron-LM launch
    states one: ``--use-tp-pp-dp-mapping`` or Megatron's default), said in a note where it
    replaces the system file's ``topology.order``; a later ``--set topology.order=...``
    overrides it. Without nodes the order places nothing: the system unchanged."""
    order = mi.launch.rank_order if mi.launch is not None else None
    topo = system.topology
    if order is None or not topo.enabled or order == topo.order:
        return system, mi
    note = (f"{mi.source}: the ranks in Megatron-LM's "
            + ("tp-cp-ep-pp-dp order (--use-tp-pp-dp-mapping" if order == "tp-pp-dp"
               else "default tp-cp-ep-dp-pp order (no --use-tp-pp-dp-mapping")
            + f"): topology.order {order}, not the system's {topo.order}")
    return (system.with_overrides({"topology.order": order}, mi.source),
            mi._replace(notes=mi.notes + (note,)))


def _dp_of(launch: LaunchSettings, world: int, pp: int) -> int:
    """The data-parallel size of ``world`` GPUs at the launch's TP and CP and ``pp`` stages."""
    if world % (launch.tp * pp * launch.cp):
        raise ConfigError(f"--gpus {world}: expected a multiple of tp {launch.tp} x pp {pp}"
                          + (f" x cp {launch.cp}" if launch.cp > 1 else ""))
    return world // (launch.tp * pp * launch.cp)


def _microbatches_of(batch: int, mi: ModelInput, opts) -> int:
    """-m of ``--global-batch-size`` as Megatron-LM derives it: B / (micro-batch x DP), DP =
    world / (TP x CP x PP), or --dp; refused in one line where -m is given too, where a launch file
    states another batch, or where B does not divide."""
    launch = mi.launch
    if opts.microbatches is not None:
        raise ConfigError(f"--global-batch-size {batch} and -m {opts.microbatches}: give one "
                          "(-m counts one pipeline's microbatches)")
    if batch < 1:
        raise ConfigError(f"--global-batch-size: expected a positive number of sequences, "
                          f"found {batch}")
    if launch.source is not None and launch.global_batch not in (None, batch):
        raise ConfigError(f"--global-batch-size {batch}: the launch file says "
                          f"{launch.global_batch}; give one")
    world = opts.gpus or launch.gpus
    if opts.dp is not None and opts.gpus is None:
        dp = opts.dp
    elif world is None:
        raise ConfigError(f"--global-batch-size {batch}: needs --gpus (DP = N / (TP x CP x "
                          "PP)) or --dp")
    else:
        dp = _dp_of(launch, world, opts.pp or (launch.pp if launch.source is not None else 1))
    per = launch.micro_batch * dp
    if batch % per:
        raise ConfigError(f"--global-batch-size {batch}: expected a multiple of --micro-batch "
                          f"{launch.micro_batch} x DP {dp} = {per}")
    return batch // per


# -- the workload of a model input ---------------------------------------------------------------

def workload_text(mi: ModelInput, *, pp: int | None = None, vpp: int | None = None,
                  microbatches: int | None = None, gpus: int | None = None,
                  gpu: str | None = None, efficiency: float | None = None,
                  layout: str = "model", placement: bool = True) -> str:
    """The generated workload file of ``mi`` (the generator's roofline on ``gpu``), its
    parallel settings the launch's unless given; with ``placement``, the header carries the
    launch's whole-layer split (``stage_layers:``)."""
    from ..workload.generator import ModelSpec, ParallelSpec, render
    from ..workload.gpus import gpu_preset

    launch = mi.launch
    P = pp or launch.pp
    V = vpp or launch.vpp
    M = microbatches or launch.microbatches
    cp = launch.cp
    dp = _dp_of(launch, gpus or launch.gpus or launch.tp * P * cp * launch.dp, P)
    spec = ModelSpec(seq=launch.seq, micro_batch=launch.micro_batch, **mi.shape.spec_fields())
    par = ParallelSpec(tp=launch.tp, pp=P, vpp=V if layout == "model" else 1, ga=M, dp=dp,
                       ep=launch.ep, etp=launch.etp, cp=cp,
                       sequence_parallel=launch.sequence_parallel,
                       flash_attention=launch.flash_attention,
                       precision=launch.precision,
                       selective_recompute=launch.recompute_granularity == "selective",
                       op_recompute=launch.recompute_granularity == "op", fp8=launch.fp8,
                       stage_layers=placed_counts(mi, P, V) if placement and layout == "model"
                       else (), runtime=launch.runtime,
                       **launch.code_fields())
    text = render(spec, par, gpu_preset(gpu or "a100"), layout, efficiency)
    if not placement or layout != "model":
        return text
    return placed(text, mi, P, V)


def placed_counts(mi: ModelInput, pp: int, vpp: int) -> tuple[int, ...]:
    """The whole-layer split a generated model-layout file's header carries (``stage_layers:``):
    a launch file's always, else the even split where it is whole; empty: none."""
    if pp < 2 or (mi.launch.source is None and mi.shape.layers % (pp * vpp)):
        return ()
    return stage_layers(mi.shape.layers, pp, vpp, mi.launch)


def placed(text: str, mi: ModelInput, pp: int, vpp: int) -> str:
    """A generated model-layout file with the launch's whole-layer split in its header
    (``stage_layers:``, :func:`placed_counts`)."""
    return with_stage_layers(text, placed_counts(mi, pp, vpp))


def with_stage_layers(text: str, counts: tuple[int, ...]) -> str:
    """A generated model-layout file with ``counts`` as its header's ``stage_layers:`` (none
    given, or the header has its own: unchanged)."""
    if not counts:
        return text
    header, rest = text.split("\n", 1)
    if "stage_layers:" in header:
        return text
    return header + " stage_layers: " + " ".join(map(str, counts)) + "\n" + rest


def workload_of(mi: ModelInput, **kw):
    """The parsed workload of ``mi`` (:func:`workload_text`), named after its source."""
    from ..workload.parser import parse_workload_text

    return parse_workload_text(workload_text(mi, **kw), f"{mi.source} (generated)")


def run_warnings(mi: ModelInput):
    """The input's warnings as the run's (code ``model_input``)."""
    from ..diagnostics import RunWarning

    return [RunWarning("model_input", w) for w in mi.warnings]


def launch_options(opts, mi: ModelInput, schedule: str | None):
    from ..run_options import FIELDS

    DEFAULTS = {f.name: f.default for f in FIELDS}
    """``opts`` (RunOptions) with the launch's values where the command line left a field at
    its default, the schedule likewise, and warnings for what neither states (a run of the
    shape alone: one stage, one microbatch)."""
    added: list[str] = []
    launch = mi.launch
    from_file = launch.source is not None
    values = run_option_values(launch)
    changes = {}
    if from_file:
        for key in ("pp", "vpp", "microbatches", "gpus"):
            if getattr(opts, key) is None:
                changes[key] = values[key]
        if opts.recompute == "file":
            changes["recompute"] = values["recompute"]
        if changes.get("recompute", opts.recompute) == "full":
            for key in ("recompute_method", "recompute_num_layers"):
                if getattr(opts, key) is None and values.get(key) is not None:
                    changes[key] = values[key]
        if opts.param_dtype is None and (launch.source.startswith("--megatron-args")
                                         or launch.fsdp):
            # a Megatron-LM launch states its weights' dtype, a torchtitan job with FSDP the
            # dtype its layers are gathered in
            changes["param_dtype"] = values["param_dtype"]
        # a flag the command line left at its default
        for key in ("megatron_ddp", "fsdp", "fsdp_reshard_after_forward") + DDP_FLAGS:
            if key in values and getattr(opts, key) == DEFAULTS[key]:
                changes[key] = values[key]
        if opts.p2p is None and launch.p2p is not None:
            changes["p2p"] = launch.p2p
        if schedule is None and opts.schedule is None:
            schedule = values["schedule"]
    else:
        if opts.pp is None:
            added.append(f"{mi.source}: no --pp and no launch file: 1 pipeline stage")
        if opts.microbatches is None:
            added.append(f"{mi.source}: no -m and no launch file: 1 microbatch per iteration")
    return opts._replace(**changes), schedule, added
