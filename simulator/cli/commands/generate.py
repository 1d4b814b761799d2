"""``pipesim generate``: write a workload file for a GPT / LLaMA / MoE model from its shape.

Compute times are the sum of each row's kernels priced on a GPU preset (GEMMs by tiles and
waves, flash attention, memory-bound ops by bytes; :mod:`simulator.workload.kernels`), or with
``--efficiency`` FLOPs over that fraction of the dense peak; collective and ``pp_comm`` sizes
from Megatron's formulas; see :mod:`simulator.workload.generator`. The shape comes from the
model flags or a file (:mod:`simulator.cli.model_inputs`); a launch file (``--megatron-args``,
``--torchtitan``) also gives the parallelism, batch and precision, and the header then carries
its whole-layer split (``stage_layers:``).
"""

from __future__ import annotations

import click

from ...errors import ConfigError
from ...workload.generator import LAYOUTS, PRECISIONS, ModelSpec, ParallelSpec, \
    activation_bytes, cp_exchange_warning, deferred_wgrad_bytes, loss_bytes, render, \
    split_backward_bytes, transient_bytes
from ...workload.gpus import GPUS, gpu_preset
from ...workload.layer_ops import eager
from ..model_inputs import GENERATE_FLAGS, click_options, placed, placed_counts, resolve, \
    split_of, split_options, with_stage_layers
from ..outputs import check_writable


# options whose default changes the file's numbers, and the models they apply to (the FFN size
# follows from h by a documented rule, the efficiency from the GPU preset: not listed)
_NUMBER_OPTIONS = (("gpu", None), ("tp", None), ("pp", None), ("vpp", None), ("ga", None),
                   ("dp", None), ("precision", None), ("vocab", None),
                   ("kv_heads", ("llama", "moe")), ("experts", ("moe",)), ("topk", ("moe",)),
                   ("ep", ("moe",)))


def _defaulted(ctx: click.Context, layout: str, arch: str, values: dict, *,
               shape_given: bool, parallel_given: bool) -> tuple[str, ...]:
    """``option=value`` for each number-changing option the command line left to its default
    and no input file stated (``values``: what the file was generated with)."""
    filled = []
    for name, models in _NUMBER_OPTIONS:
        if models is not None and arch not in models:
            continue
        if name == "vpp" and layout != "model":
            continue
        if ctx.get_parameter_source(name) is not click.core.ParameterSource.DEFAULT:
            continue
        if name in _SHAPE_OPTIONS and not shape_given:
            continue      # the model file states it
        if name not in _SHAPE_OPTIONS and name != "gpu" and parallel_given:
            continue      # the launch file states it
        filled.append(f"{name.replace('_', '-')}={values[name]}")
    return tuple(filled)


_SHAPE_OPTIONS = ("vocab", "kv_heads", "experts", "topk")


@click.command("generate")
@click_options(GENERATE_FLAGS)
@click.option("--tp", type=int, default=None, help="Tensor parallelism T (default 1).")
@click.option("--pp", type=int, default=None, help="Pipeline stages P (default 1).")
@click.option("--vpp", type=int, default=None,
              help="Chunks per rank (model layout only; default 1).")
@click.option("--ga", type=int, default=None,
              help="Microbatches per iteration (gradient accumulation; default 1).")
@click.option("--dp", type=int, default=None, help="Data parallelism (default 1).")
@click.option("--cp", type=int, default=None,
              help="Context parallelism (Megatron-LM's --context-parallel-size): each rank holds "
                   "s/cp tokens of every sequence; flash attention only (default 1; a launch "
                   "file: its own).")
@click.option("--gpu", type=click.Choice(sorted(GPUS)), default="a100", show_default=True,
              help="GPU preset: SMs, dense peaks, HBM bandwidth and the kernels' achieved "
                   "fractions (docs/model.md).")
@click.option("--efficiency", type=float, default=None,
              help="Time every row as FLOPs over this fraction of the dense BF16 peak instead "
                   "of pricing its kernels (norms, softmax, dropout, embedding, loss: 0 ns).")
@click.option("--layout", type=click.Choice(LAYOUTS), default="model", show_default=True,
              help="model: the whole model once (ASTRA-sim); aicb: one stage unrolled over ga "
              "microbatches (SimAI/AICB).")
@click.option("--ep", type=int, default=None, help="Expert parallelism (moe; default 1).")
@click.option("--no-sequence-parallel", "no_sp", is_flag=True,
              help="TP all-reduces instead of all-gather/reduce-scatter; pp_comm not split by T.")
@click.option("--no-flash-attention", "no_flash", is_flag=True,
              help="The attention keeps its scores for the backward (5·a·s²·b bytes per layer "
                   "more in the header's activation_bytes).")
@click.option("--precision", type=click.Choice(sorted(PRECISIONS)), default=None,
              help="Activations' and weights' dtype: the bytes of pp_comm, the collectives and "
                   "the header's activation_bytes (dropout masks 1 byte in every precision); "
                   "fp32 GEMMs run at the FP32 (non-tensor) peak. Default bf16 (a launch file: "
                   "its own).")
@click.option("--selective-recompute", "selective", is_flag=True,
              help="Megatron's --recompute-granularity selective: the attention core's forward "
                   "runs again in the backward (its time in the input-grad column) and its "
                   "scores are not kept (a launch file: its own).")
@click.option("--ops", "ops_path", type=click.Path(dir_okay=False), default=None,
              help="Also write each row's kernels (shape, bytes, bound, ns) as JSON here, for "
                   "`pipesim inspect WORKLOAD --ops`.")
@click.option("-o", "--output", type=click.Path(dir_okay=False), required=True,
              help="File to write ('-' for stdout).")
@split_options
def command(tp, pp, vpp, ga, dp, cp, gpu, efficiency, layout, ep, no_sp, no_flash, precision,
            selective, ops_path, output, **values):
    """Write a workload file for a model of the given shape and parallelism."""

    values["tp"] = tp
    split = split_of(values)
    if values.get("micro_batch") is None and values.get("megatron_args") is None and \
            values.get("torchtitan") is None:
        raise ConfigError("--micro-batch: needed (sequences per microbatch), or a launch file "
                          "that states it (--megatron-args, --torchtitan)")
    mi = resolve(values)
    if mi is None:
        raise ConfigError("--model: needed (gpt, llama or moe with --layers --hidden --heads), "
                          "or a file that states the shape (--hf-config, --megatron-args, "
                          "--torchtitan)")
    launch = mi.launch
    if cp is not None and launch.source is not None and cp != launch.cp:
        raise ConfigError(f"--cp {cp}: the launch file says {launch.cp}; give one")
    if dp is not None and launch.source is not None:   # the world size the launch file needs
        mi = resolve(values, gpus=dp * launch.tp * launch.pp * launch.cp)
        launch = mi.launch
    ours = launch.source is None        # no launch file: the flags and generate's defaults
    P = pp or (1 if ours else launch.pp)
    V = vpp or (1 if ours else launch.vpp)
    M = ga or (1 if ours else launch.microbatches)
    counts = placed_counts(mi, P, V) if not ours and layout == "model" else ()
    if split.given:   # the run's rule, written into the header as stage_layers:
        flag = split.flags()[0].split()[0]
        if not ours:
            raise ConfigError(f"{flag}: expected no launch file with it ({launch.source} sets "
                              "the layers per stage)")
        if layout != "model":
            raise ConfigError(f"{flag}: expected --layout model (an AICB stage file holds one "
                              "stage; give the split to `pipesim run`)")
        counts = split.counts(mi.shape.layers, P, V)
    D = dp or (1 if ours else launch.dp)
    E = ep or (1 if ours else launch.ep)
    C = cp or launch.cp
    model = ModelSpec(seq=launch.seq, micro_batch=launch.micro_batch, **mi.shape.spec_fields())
    par = ParallelSpec(tp=launch.tp, pp=P, vpp=V, ga=M, dp=D, ep=E, etp=launch.etp, cp=C,
                       sequence_parallel=(ours or launch.sequence_parallel) and not no_sp,
                       flash_attention=(ours or launch.flash_attention) and not no_flash,
                       precision=precision or ("bf16" if ours else launch.precision),
                       selective_recompute=selective or (
                           not ours and launch.recompute_granularity == "selective"),
                       op_recompute=not ours and launch.recompute_granularity == "op",
                       fp8="" if ours else launch.fp8,
                       stage_layers=counts, runtime=launch.runtime,
                       **launch.code_fields())
    selective = par.selective_recompute

    check_writable(output, "--output")
    if ops_path is not None:
        check_writable(ops_path, "--ops")
        if efficiency is not None:
            raise ConfigError("--ops: the per-op breakdown is the kernel model's; --efficiency "
                              "times rows without kernels")
    filled = {"gpu": gpu, "tp": par.tp, "pp": P, "vpp": V, "ga": M, "dp": D, "ep": E,
              "precision": par.precision, "vocab": model.vocab_size, "kv_heads": model.kv,
              "experts": model.experts, "topk": model.topk}
    defaulted = _defaulted(click.get_current_context(), layout, model.arch, filled,
                           shape_given=mi.source == "the model flags",
                           parallel_given=not ours)
    text = render(model, par, gpu_preset(gpu), layout, efficiency, defaulted)
    if defaulted:
        click.echo("warning: options not given, filled in (the file says generated_defaults: "
                   f"{','.join(defaulted)}; a run of it warns): "
                   + ", ".join("--" + d.replace("=", " ") for d in defaulted), err=True)
    if not ours and layout == "model":
        text = placed(text, mi, P, V)
    elif split.given and len(counts) > 1:
        text = with_stage_layers(text, counts)
    warnings = list(mi.warnings)
    if ours and C > 1:
        warnings.append(cp_exchange_warning(f"--cp {C}", C))
    if launch.rank_order not in (None, "tp-dp-pp"):
        # the order places ranks on a system's nodes; a workload file has no field for it
        warnings.append(f"{launch.source}: --use-tp-pp-dp-mapping: the workload file does not "
                        f"hold the ranks' order (the system's topology.order does): run it "
                        f"with --set topology.order={launch.rank_order}")
    for line in warnings:
        click.echo(f"pipesim: warning: {line}", err=True)
    for line in mi.notes:
        click.echo(f"pipesim: note: {line}", err=True)
    if ops_path is not None:
        _write_ops(ops_path, model, par, layout, gpu)
    if output == "-":
        click.echo(text, nl=False)
        return
    try:
        with open(output, "w") as fh:
            fh.write(text)
    except OSError as err:
        raise ConfigError(f"--output: cannot write {output}: {err.strerror or err}") from None
    rows = int(text.split("\n", 2)[1])
    T, sp, flash = par.tp, par.sequence_parallel, par.flash_attention
    click.echo(f"wrote {output}: {rows} rows ({layout} layout, {model.arch}, {model.layers} "
               f"layers, tp {T} pp {P} ga {M}, {gpu})")
    attention = ("scores not kept (flash attention)" if flash else
                 "scores not kept (selective recompute)" if selective else "scores kept")
    split = f", split over tp {T}" + (" with sequence parallelism" if sp else "")
    click.echo(f"activation_bytes: {activation_bytes(model, par)} B per layer and microbatch "
               f"(Korthikanti et al.: {par.precision} activations, "
               + ("1-byte dropout masks, " if model.arch == "gpt" else
                  ("SwiGLU's w1, w3 and silu outputs kept (torchtitan's eager SwiGLU), "
                   if eager(model, par) else "SwiGLU's 2f-wide input kept, ")
                  + "K and V of the query groups' width with a fused kernel, no dropout, ")
               + f"{attention}{split if T > 1 else ''}); split_backward_bytes: "
               f"{split_backward_bytes(model, par)} B (the weights' output gradients a split "
               "backward's I keeps until its W on torch's runtime); deferred_wgrad_bytes: "
               f"{deferred_wgrad_bytes(model, par)} B (what it keeps where its I frees the "
               "graph, as Megatron-LM's zero-bubble runtime: the linears' inputs and output "
               "gradients); working memory inside F / B / I / W: "
               + " / ".join(str(n) for n in transient_bytes(model, par))
               + " B (PyTorch eager autograd, no fused kernels, gradients added to .grad); "
               "the last stage's loss keeps {} B until its backward and holds {} / {} B more "
               "in its F / B ({}'s cross-entropy over the fp32 logits)".format(
                   *loss_bytes(model, par),
                   "torchtitan" if par.runtime == "torchtitan" else "Megatron-LM"))


def _write_ops(path: str, model, par, layout: str, gpu: str) -> None:
    import json

    from ...workload.generator import generate_rows
    from ...workload.op_breakdown import breakdown

    data = breakdown(generate_rows(model, par, layout), gpu)
    try:
        with open(path, "w") as fh:
            json.dump(data, fh, indent=1)
            fh.write("\n")
    except OSError as err:
        raise ConfigError(f"--ops: cannot write {path}: {err.strerror or err}") from None
