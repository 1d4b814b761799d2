"""What a stage boundary carries per microbatch when the file does not say (no ``pp_comm``).

A transformer layer's tensor-parallel collectives move its activation, so the bytes a stage
sends to the next can be read off the layer rows (Megatron-LM; AICB's mocked Megatron writes
``comm_size = 2 * s * b * h``, bf16):

- without sequence parallelism, the layer's forward ALLREDUCE carries the full ``s·b·h``
  activation, and that is what Megatron sends between stages (tensor shape ``(s, b, h)``):
  ``pp_comm = bytes``;
- with sequence parallelism the forward collective is an ALLGATHER (column-parallel input) or a
  REDUCESCATTER (row-parallel output) of the full ``s·b·h`` tensor, and each GPU holds and sends
  its ``1/TP`` sequence shard across the boundary: ``pp_comm = bytes / TP``.

The row used is the first transformer row (a name starting with ``attention``/``mlp``/``moe``,
else the first row) whose forward collective runs on the TP group. Nothing is derived when TP is
1 or no row has such a collective; the caller then warns that transfers cost nothing.
"""

from __future__ import annotations

from typing import NamedTuple

from .model import CommGroup, CommType, Layer

_LAYER_PREFIXES = ("attention", "mlp", "moe")


# a NamedTuple, not a dataclass: start-up (simulator/__init__.py)
class DerivedPPComm(NamedTuple):
    """Bytes between stages worked out from the rows: the row it came from and the rule."""

    nbytes: int
    layer: Layer
    rule: str

    def describe(self, path: str) -> str:
        return (f"{path} has no pp_comm; using {self.nbytes} bytes per microbatch between "
                f"stages, derived from line {self.layer.line} ({self.layer.name}: {self.rule})")


def _tp_forward(layer: Layer) -> bool:
    c = layer.fwd_comm
    return (c.active and c.group is CommGroup.TP
            and c.type in (CommType.ALLREDUCE, CommType.ALLGATHER, CommType.REDUCESCATTER))


def derive_pp_comm(layers: tuple[Layer, ...], tp: int) -> DerivedPPComm | None:
    """The activation bytes of one microbatch at a stage boundary, or None (see module doc)."""
    if tp <= 1:
        return None
    candidates = [r for r in layers if _tp_forward(r)]
    if not candidates:
        return None
    named = [r for r in candidates if r.name.lower().startswith(_LAYER_PREFIXES)]
    row = (named or candidates)[0]
    c = row.fwd_comm
    if c.type is CommType.ALLREDUCE:
        return DerivedPPComm(c.bytes, row, f"forward ALLREDUCE of {c.bytes} bytes = the s·b·h "
                                           "activation")
    return DerivedPPComm(c.bytes // tp, row, f"forward {c.type.value} of {c.bytes} bytes, "
                                             f"sequence parallel: each GPU sends its 1/{tp} shard")


def transformer_split_backward_bytes(seq: int, micro_batch: int, hidden: int, qkv: int,
                                     up: int, tp: int = 1, sequence_parallel: bool = True,
                                     dtype_bytes: int = 2) -> int:
    """Bytes one transformer layer's input-gradient backward (a split backward's I) keeps per
    microbatch until its weight-gradient backward (W): the gradient at the output of every
    layer with weights, which W multiplies by the stashed input (torch keeps them from
    ``autograd.grad`` to the W; Qi et al.'s zero-bubble split). Per token: the two norms'
    outputs, the attention projection's and the MLP's last linear's outputs (4·h, split by TP
    only with sequence parallelism) and the fused QKV output (``qkv``) and the MLP's up
    projection(s) (``up``), split by TP."""
    s, b, d = seq, micro_batch, dtype_bytes
    outside = 4 * hidden * s * b * d
    inside = (qkv + up) * s * b * d
    if sequence_parallel:
        return (outside + inside) // tp
    return outside + inside // tp


def transformer_deferred_wgrad_bytes(seq: int, micro_batch: int, hidden: int, qkv: int,
                                     up: int, ffn: int, tp: int = 1,
                                     sequence_parallel: bool = True, dtype_bytes: int = 2) -> int:
    """Bytes one transformer layer holds per microbatch from its I to its W where the I frees
    the autograd graph and defers only the linears' weight-gradient GEMMs: Megatron-LM's
    zero-bubble runtime (Qi et al.'s implementation, ``WeightGradStore.put(total_input,
    grad_output, weight, ...)`` in ``tensor_parallel/layers.py``), whose norms and biases take
    their gradients inside the I. Per token, each linear's input and the gradient at its
    output: outside the tensor-parallel regions (split by TP only with sequence parallelism)
    the two norms' outputs that the QKV and the MLP's first linear read, and the gradients at
    the attention projection's and the MLP's last linear's outputs (4·h); inside them, split by
    TP, the projection's input (h), the last linear's input (``ffn``), and the gradients at the
    fused QKV's (``qkv``) and the first linear's (``up``) outputs."""
    s, b, d = seq, micro_batch, dtype_bytes
    outside = 4 * hidden * s * b * d
    inside = (hidden + ffn + qkv + up) * s * b * d
    if sequence_parallel:
        return (outside + inside) // tp
    return outside + inside // tp


def transformer_activation_bytes(seq: int, micro_batch: int, hidden: int, heads: int,
                                 ffn: int, tp: int = 1, sequence_parallel: bool = True,
                                 flash_attention: bool = True, dtype_bytes: int = 2,
                                 gated: bool = False, kv_width: int | None = None,
                                 dropout: bool = True, fp8: bool = False,
                                 eager: bool = False) -> int:
    """Bytes one transformer layer keeps for its backward per microbatch (Korthikanti et al.,
    "Reducing Activation Recomputation in Large Transformer Models", 2022, section 4.1), with
    the MLP's width ``ffn`` in place of their 4h and activations of ``dtype_bytes`` bytes (their
    count is for 16-bit ones, 2); dropout masks are 1 byte an element in every precision:

    - outside the tensor-parallel regions, split by TP only with sequence parallelism: the two
      layer-norm inputs and the two linears' inputs they feed (4·s·b·h elements) and the two
      dropout masks after the attention projection and the MLP (2·s·b·h bytes);
    - inside them, split by TP: Q, K, V, the projection's input (4·s·b·h elements) and the
      GELU's input and output (2·s·b·ffn elements);
    - the attention scores, split by TP: the softmax's output and its dropout's output (2·a·s²·b
      elements) and that dropout's mask (a·s²·b bytes); none with flash attention, which
      recomputes them (as selective recompute does).

    In 16-bit at ffn = 4h: s·b·h·(10 + 24/t + 5·a·s/(h·t)), and s·b·h·(34 + 5·a·s/h)/t with
    sequence parallelism, the paper's equations; in fp32 s·b·h·(18 + 48/t + 9·a·s/(h·t)).

    A LLaMA-style layer differs where its kernels keep other tensors (Megatron-Core's):
    ``gated`` (SwiGLU) keeps the up projection's output, 2·ffn wide, for the activation's
    backward (``BiasSwiGLUFunction`` saves its input) and the activation's output, ffn wide,
    for the last linear: 3·s·b·ffn elements in place of GELU's 2; ``kv_width`` (grouped-query
    attention, the K and V widths together) is what a flash kernel keeps of K and V (unfused,
    each K/V head is repeated for its group before the products, which keep the copies: 2·h);
    without ``dropout`` there are no masks and the unfused scores keep the softmax's output
    alone (a·s²·b elements). ``eager`` (torchtitan's ``F.silu(w1(x)) * w3(x)``, a gated layer):
    silu keeps its input (w1's output), the product both of its inputs (silu's output and w3's),
    and the last linear its input: 4·s·b·ffn elements.

    With ``fp8`` (Transformer Engine's FP8 linears) a linear keeps its input for the weight
    gradient as its quantized column-wise copy, 1 B an element: the two norms' outputs the QKV
    and the MLP's first linear read, and the last linear's input, are kept in FP8 alone; the
    attention projection's input is the flash kernel's output, which that kernel keeps in 16
    bits besides (unfused: the FP8 copy alone)."""
    s, b, h, d = seq, micro_batch, hidden, dtype_bytes
    masks = 2 if dropout else 0
    kv = kv_width if (kv_width is not None and flash_attention) else 2 * h
    q8 = 1 if fp8 else d                     # bytes of a linear's kept input
    outside = (2 * d + 2 * q8 + masks) * s * b * h
    proj = (d + 1 if flash_attention else 1) if fp8 else d
    # the activation's inputs (and, eager, silu's output), the last linear's input
    up = ((3 * d if gated and eager else 2 * d if gated else d) + q8) * ffn
    inside = s * b * (d * (h + kv) + proj * h + up)
    per_score = (2 * d + 1) if dropout else d
    scores = 0 if flash_attention else per_score * heads * s * s * b
    if sequence_parallel:
        return (outside + inside + scores) // tp
    return outside + (inside + scores) // tp


def op_sac_activation_bytes(seq: int, micro_batch: int, hidden: int, ffn: int, v_width: int,
                            tp: int = 1, sequence_parallel: bool = True,
                            dtype_bytes: int = 2) -> int:
    """Bytes a LLaMA layer keeps per microbatch under torchtitan's op-level selective
    checkpointing (``selective_ac_option = "op"``, ``_apply_op_sac``): the block's input, and
    the outputs of the ops on its save list (the attention kernel, the reduce-scatters) and of
    every other GEMM (its policy recomputes the second, fourth, ...: of wq, wk, wv, wo, w1,
    w3, w2 it keeps wq's, wv's, w1's and w2's); everything else runs again in the backward.
    Per token, in elements: the input h (split by TP with sequence parallelism); inside the
    tensor-parallel regions, split by TP, wq's h, wv's ``v_width`` (the V heads' width), the
    attention's h and w1's ``ffn``; w2's h, whole on every TP rank (its output is a partial sum
    before the reduce-scatter); with TP, the two reduce-scatters' outputs, h/TP each. The
    attention's log-sum-exp (4 B a head and token) is left out."""
    s, b, h, d = seq, micro_batch, hidden, dtype_bytes
    tokens = s * b
    outside = h * tokens
    inside = (2 * h + v_width + ffn) * tokens
    partial = h * tokens
    scattered = 2 * h * tokens if tp > 1 else 0
    if sequence_parallel:
        return d * ((outside + inside + scattered) // tp + partial)
    return d * (outside + inside // tp + partial)


def transformer_transient_bytes(seq: int, micro_batch: int, hidden: int, heads: int, ffn: int,
                                tp: int = 1, sequence_parallel: bool = True,
                                flash_attention: bool = True, dtype_bytes: int = 2,
                                widest: int | None = None) -> tuple[int, int, int, int]:
    """A transformer layer's working memory per microbatch, F, B, I, W: what an action holds for
    a moment above the higher of the levels before and after it (pipesim's ``transient``), as
    PyTorch's eager autograd runs a Megatron-style layer written without fused kernels (the
    layer of ``benchmarks/memory``), its
    weights' gradients accumulated over microbatches (torch adds each new one to ``.grad``;
    Megatron's fused accumulation into ``main_grad`` needs no such copy). ``E`` is one
    ``s·b·h`` activation (split by TP only with sequence parallelism), ``A`` the attention
    scores ``a·s²·b`` split by TP (0 with flash attention, which never forms them), masks 1 B:

    - F: the scores before the softmax, held until the layer's forward returns, and at its end
      the last linear's output and the dropout's working copy: ``A + 2E``;
    - B: at the start, the gradient of the last dropout's input and of the MLP's hidden
      activation, and the gradient of the MLP's output weight and bias before it is added to
      ``.grad``, less the dropout mask freed: ``E + s·b·ffn/t + h·ffn/t + h - mask``;
    - I: the gradient of the attention probabilities and of the scores, ``2A`` (at least ``2E``
      with flash attention); measured 0.81x-1.16x of it over the shapes tried: the I's
      working set moves with where it frees its stash;
    - W: the widest weight's gradient before it is added to ``.grad``: ``h·w/t + h``, ``w`` the
      widest linear's outputs (``widest``: by default the larger of the fused QKV's 3h and
      ffn); measured 0.50x-1.19x of it, for the stash it frees first.

    F and B are exact at micro-batch 1, with and without flash attention (PyTorch's
    ``scaled_dot_product_attention``; ``benchmarks/memory/layer_transients.py``); at 2 the
    written-out attention's batched matmuls also copy Q, K and V for a moment (3E more in F)."""
    s, b, h, d = seq, micro_batch, hidden, dtype_bytes
    outside = tp if sequence_parallel else 1
    e = s * b * h * d // outside
    scores = 0 if flash_attention else heads * s * s * b * d // tp
    mask = s * b * h // outside
    widest = max(3 * h, ffn) if widest is None else widest
    return (scores + 2 * e, e + s * b * ffn * d // tp + (h * ffn // tp + h) * d - mask,
            max(2 * scores, 2 * e), (h * widest // tp + h) * d)


# whose model code a generated workload runs: its kernels (layer_ops) and what its loss keeps and
# holds per logit (:func:`loss_memory_bytes`)
MODEL_RUNTIMES = ("megatron", "torchtitan")


def loss_memory_bytes(logits: int, dtype_bytes: int = 2, runtime: str = "megatron",
                      fused: bool = False) -> tuple[int, int, int]:
    """What the last stage's loss adds per microbatch over its ``logits`` (this rank's tokens x
    its share of the padded vocabulary): (kept until the backward, working memory in the
    forward above what it keeps, working memory in the backward), as each runtime's code
    allocates them in 16-bit training:

    - ``megatron`` (Megatron-LM's vocab-parallel cross-entropy,
      core/tensor_parallel/cross_entropy.py): the logits cast to fp32, the max subtracted and
      exponentiated in place, and the softmax kept for the backward (4 B a logit); the 16-bit
      logits are held beside the fp32 copy while the loss runs (d); the backward works in
      place on the kept softmax and casts its gradient back to 16 bits (d); ``fused``
      (``--cross-entropy-loss-fusion``, its torch.compile'd functions:
      layer_ops.cross_entropy_ops) the backward holds a functional copy of the softmax (4 B)
      beside the gradient it returns in bf16 (2 B);
    - ``torchtitan`` (``cross_entropy_loss``: ``F.cross_entropy(pred.float(), labels)``):
      log_softmax keeps its fp32 output (4 B); the forward holds the 16-bit logits and their
      fp32 copy beside it (d + 4); the backward holds nll_loss's fp32 gradient and
      log_softmax's beside the kept output (8 B).

    fp32 logits need no copy: the cast returns the same tensor (Megatron then works on the
    logits themselves; torchtitan's forward still holds them beside log_softmax's output)."""
    if runtime not in MODEL_RUNTIMES:
        raise ValueError(f"loss runtime {runtime!r}")
    d = dtype_bytes
    cast = d if d < 4 else 0          # the 16-bit logits beside their fp32 copy
    if runtime == "megatron":
        return 4 * logits, cast * logits, (6 if fused else cast) * logits
    return 4 * logits, (d + (4 if d < 4 else 0)) * logits, 8 * logits
