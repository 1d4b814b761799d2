"""``pipesim generate``: write a workload file for a GPT / LLaMA / MoE model from its shape.

Compute times come from a roofline (FLOPs / (peak x efficiency) of a GPU preset), collective
and ``pp_comm`` sizes from Megatron's formulas; see :mod:`simulator.workload.generator`.
"""

from __future__ import annotations

import click

from ...errors import ConfigError
from ...workload.generator import LAYOUTS, MODELS, PRECISIONS, ModelSpec, ParallelSpec, \
    activation_bytes, render, split_backward_bytes, transient_bytes
from ...workload.gpus import GPUS, gpu_preset
from ..outputs import check_writable


@click.command("generate")
@click.option("--model", "arch", type=click.Choice(MODELS), required=True,
              help="gpt (LayerNorm, GELU MLP, biases), llama (RMSNorm, SwiGLU, GQA), moe "
              "(llama attention + top-k SwiGLU experts).")
@click.option("--layers", type=int, required=True, help="Transformer layers.")
@click.option("--hidden", type=int, required=True, help="Hidden size h.")
@click.option("--heads", type=int, required=True, help="Attention heads.")
@click.option("--seq", type=int, required=True, help="Sequence length s.")
@click.option("--micro-batch", type=int, required=True, help="Sequences per microbatch b.")
@click.option("--tp", type=int, default=1, show_default=True, help="Tensor parallelism T.")
@click.option("--pp", type=int, default=1, show_default=True, help="Pipeline stages P.")
@click.option("--vpp", type=int, default=1, show_default=True,
              help="Chunks per rank (model layout only).")
@click.option("--ga", type=int, default=1, show_default=True,
              help="Microbatches per iteration (gradient accumulation).")
@click.option("--dp", type=int, default=1, show_default=True, help="Data parallelism.")
@click.option("--gpu", type=click.Choice(sorted(GPUS)), default="a100", show_default=True,
              help="GPU preset: dense BF16 peak and efficiency.")
@click.option("--efficiency", type=float, default=None,
              help="Fraction of peak reached (default: the preset's).")
@click.option("--layout", type=click.Choice(LAYOUTS), default="model", show_default=True,
              help="model: the whole model once (ASTRA-sim); aicb: one stage unrolled over ga "
              "microbatches (SimAI/AICB).")
@click.option("--ffn", type=int, default=None,
              help="FFN size (default 4h; SwiGLU models: 8h/3 rounded up to 256).")
@click.option("--vocab", type=int, default=None, help="Vocabulary (default gpt 50257, else 32000).")
@click.option("--kv-heads", type=int, default=None, help="Key/value heads (grouped-query attention).")
@click.option("--experts", type=int, default=1, show_default=True, help="Experts (moe).")
@click.option("--topk", type=int, default=2, show_default=True, help="Experts per token (moe).")
@click.option("--ep", type=int, default=1, show_default=True, help="Expert parallelism (moe).")
@click.option("--no-sequence-parallel", "no_sp", is_flag=True,
              help="TP all-reduces instead of all-gather/reduce-scatter; pp_comm not split by T.")
@click.option("--no-flash-attention", "no_flash", is_flag=True,
              help="The attention keeps its scores for the backward (5·a·s²·b bytes per layer "
                   "more in the header's activation_bytes).")
@click.option("--precision", type=click.Choice(sorted(PRECISIONS)), default="bf16",
              show_default=True,
              help="Activations' and weights' dtype: the bytes of pp_comm, the collectives and "
                   "the header's activation_bytes (dropout masks 1 byte in every precision). "
                   "Compute times stay the GPU preset's BF16 roofline.")
@click.option("-o", "--output", type=click.Path(dir_okay=False), required=True,
              help="File to write ('-' for stdout).")
def command(arch, layers, hidden, heads, seq, micro_batch, tp, pp, vpp, ga, dp, gpu, efficiency,
            layout, ffn, vocab, kv_heads, experts, topk, ep, no_sp, no_flash, precision, output):
    """Write a workload file for a model of the given shape and parallelism."""

    model = ModelSpec(arch, layers, hidden, heads, seq, micro_batch, ffn=ffn, vocab=vocab,
                      kv_heads=kv_heads, experts=experts, topk=topk)
    par = ParallelSpec(tp=tp, pp=pp, vpp=vpp, ga=ga, dp=dp, ep=ep, sequence_parallel=not no_sp,
                       flash_attention=not no_flash, precision=precision)

    check_writable(output, "--output")
    text = render(model, par, gpu_preset(gpu), layout, efficiency)
    if output == "-":
        click.echo(text, nl=False)
        return
    try:
        with open(output, "w") as fh:
            fh.write(text)
    except OSError as err:
        raise ConfigError(f"--output: cannot write {output}: {err.strerror or err}") from None
    rows = int(text.split("\n", 2)[1])
    click.echo(f"wrote {output}: {rows} rows ({layout} layout, {arch}, {layers} layers, "
               f"tp {tp} pp {pp} ga {ga}, {gpu})")
    attention = "scores not kept (flash attention)" if not no_flash else "scores kept"
    split = f", split over tp {tp}" + (" with sequence parallelism" if not no_sp else "")
    click.echo(f"activation_bytes: {activation_bytes(model, par)} B per layer and microbatch "
               f"(Korthikanti et al.: {precision} activations, 1-byte dropout masks, "
               f"{attention}{split if tp > 1 else ''}); split_backward_bytes: "
               f"{split_backward_bytes(model, par)} B (the weights' output gradients a split "
               "backward's I keeps until its W); working memory inside F / B / I / W: "
               + " / ".join(str(n) for n in transient_bytes(model, par))
               + " B (PyTorch eager autograd, no fused kernels, gradients added to .grad)")
