"""The kernels of each generated row (Megatron-LM's GPT / LLaMA layer on one GPU), as
:class:`.kernels.Op` shapes and byte counts for :func:`.kernels.price`.

Per microbatch of ``b`` sequences of ``s`` tokens on one GPU of tensor-parallel size ``T``, with
``d`` bytes per activation element. ``E = b·s·h`` elements of the hidden state, ``E/T`` with
sequence parallelism (the norms, dropouts and residual adds then run on 1/T of the sequence);
without it every TP rank repeats them on the whole sequence. Bytes per element of each
memory-bound kernel, counted as the kernel reads and writes HBM (Megatron-LM's fused kernels:
LayerNorm/RMSNorm, bias + GELU, bias + dropout + residual add, scaled masked softmax):

=======================  ============================  ======================================
kernel                   forward                       backward (input grad)
=======================  ============================  ======================================
norm                     read x, write y: 2d           read x, dy, write dx: 3d
residual grad add        -                             read two grads, write one: 3d
bias + dropout + add     read x, residual, write y,    read dy, mask, write dx: 2d + 1
(gpt; llama: add only)   mask 1 B: 3d + 1 (llama 3d)   (llama: the gradient passes through, 0)
bias + GELU              read x, write y: 2d           read x, dy, write dx: 3d
(unfused: add, GELU)     the add 2d, then GELU 2d      GELU's: 3d
SwiGLU (llama)           read 2 halves, write: 3d/2    read 2 halves, dy, write 2: 5d/2
                         per element of the 2f input   per element of the 2f input
softmax (no flash)       read scores, write probs: 2d  read probs, dprobs, write: 3d
attention dropout        read, write, mask: 2d + 1     read, mask, write: 2d + 1
=======================  ============================  ======================================

Without flash attention the core is Megatron's: a batched QKᵀ (``b·A/T`` products of s x s x
h/A, the full square even when causal: the mask is applied in the softmax), the softmax, the
dropout on the probabilities and a batched probs·V; its backward four batched GEMMs. With flash
attention the core is one kernel each way (:mod:`.kernels`, causal: half the square).

Weight gradients are GEMMs accumulating into fp32 main gradients (Megatron's gradient
accumulation fusion): the output is read and written in fp32, 8 bytes; with
``--no-gradient-accumulation-fusion`` the GEMM writes a 16-bit gradient and an elementwise add
puts it into main_grad (``_weight_grad``).

A LLaMA-style layer (llama, moe) rotates its queries and keys (RoPE) after the QKV projection:
Megatron-LM's fused kernel (``apply_rope_fusion``, on unless ``--no-rope-fusion``), one for Q
and one for K each way, reads and writes each element once (2d).

torchtitan's model code (``runtime`` torchtitan, a llama shape; its llama3 model, torchtitan/models/llama at
395a52627 and models/common today) runs eager PyTorch modules, so the kernels differ where
Megatron fuses:

- wq, wk and wv are three linears (three GEMMs each way, not one fused QKV), and w1 and w3 two;
  autograd adds the input gradients of linears that read the same tensor (two adds after the
  attention's three, one after the MLP's two; in place: read two, write one, 3d);
- RoPE in complex fp32 (``apply_rotary_emb``): for Q and for K, a cast to fp32 (read d, write
  4), the complex product with the frequencies (read 4, write 4) and a cast back (read 4,
  write d); the backward runs the three in reverse, the same bytes;
- SwiGLU as ``F.silu(w1(x)) * w3(x)``: silu (read d, write d per element of the f-wide
  output) and the product (read 2d, write d); backward: the product's two gradients (each read
  2d, write d) and silu's (read 2d, write d);
- the norms are its fused RMSNorm (its train_configs' ``fused_rmsnorm``), priced as Megatron's;
  GQA's K and V go to SDPA unrepeated (``enable_gqa``), and the cross-entropy is priced as
  Megatron-LM's passes.
"""

from __future__ import annotations

from .kernels import flash, gemm, memory

MASK = 1             # a dropout mask element (torch.bool)


def local_seq(model, par) -> int:
    """The tokens of one sequence a rank holds: s, over cp with context parallelism."""
    return model.seq // par.cp


def tokens(model, par) -> int:
    """The tokens of a microbatch this rank holds: b x :func:`local_seq`."""
    return model.micro_batch * local_seq(model, par)


def _hidden_elems(model, par) -> int:
    e = tokens(model, par) * model.hidden
    return e // par.tp if par.sequence_parallel else e


def _norm(name: str, model, par, residual: bool = True) -> tuple[list, list]:
    """A norm's kernels; ``residual``: its input also feeds a residual branch, whose gradient
    is added to the norm's input gradient."""
    d, e = par.dtype_bytes, _hidden_elems(model, par)
    bwd = [memory(f"{name}_bwd", "ig", 3 * d * e)]
    if residual:
        bwd.append(memory("residual_grad_add", "ig", 3 * d * e))
    return [memory(name, "fwd", 2 * d * e)], bwd


def _dropout_add(model, par) -> tuple[list, list]:
    d, e = par.dtype_bytes, _hidden_elems(model, par)
    if model.arch == "gpt":      # Megatron GPT: hidden dropout 0.1, biases
        return ([memory("bias_dropout_add", "fwd", (3 * d + MASK) * e)],
                [memory("bias_dropout_add_bwd", "ig", (2 * d + MASK) * e)])
    return [memory("residual_add", "fwd", 3 * d * e)], []


def eager(model, par) -> bool:
    """Whether the layer is torchtitan's llama3 model (eager modules) rather than
    Megatron-LM's fused kernels; a GPT or MoE shape under torchtitan is priced as
    Megatron-LM's layer (torchtitan's llama3 model code holds neither)."""
    return par.runtime == "torchtitan" and model.arch == "llama"


def _unfused_rope(name: str, e: int, r: int, d: int) -> list:
    """Megatron-LM's RoPE without its fused kernel (``--no-rope-fusion``:
    core/models/common/embeddings/rope_utils.py, ``_apply_rotary_pos_emb_bshd``) on ``e``
    elements of Q or K, ``r`` of them rotated (``--rotary-percent``): ``t·cos + rotate_half(t)·sin``
    on the rotated channels, ``rotate_half`` a negation of one half and a concatenation, then the
    concatenation with the channels passed through. Each PyTorch op a kernel reading its inputs
    and writing its output (the cos and sin tables, s x channels, left out); the backward as
    torch 2.13's autograd runs it (its ops logged with a TorchDispatchMode): the two products'
    gradients, the negation's, the halves' concatenation (split's backward), the two branches'
    sum, and the slices' backward (a zero-filled full tensor each, the part copied in; with
    every channel rotated only the empty pass-through's zeros) summed."""
    full = r == e
    fwd = [("cos_mul", 2 * r), ("neg", r), ("rotate_cat", 2 * r), ("sin_mul", 2 * r),
           ("add", 3 * r), ("pass_cat", 2 * e)]
    bwd = [("cos_mul_bwd", 2 * r), ("sin_mul_bwd", 2 * r), ("neg_bwd", r),
           ("split_bwd", 2 * r), ("branches_add", 3 * r),
           ("slice_bwd", e if full else 4 * e), ("slices_add", 3 * e)]
    return ([memory(f"rope_{name}_{k}", "fwd", d * n) for k, n in fwd]
            + [memory(f"rope_{name}_{k}", "ig", d * n) for k, n in bwd])


def _rope(model, par) -> list:
    """RoPE on this rank's queries and keys (module docstring); none in a GPT layer, whose
    positions are a learned table."""
    if model.arch == "gpt":
        return []
    hd = model.hidden // model.heads
    d, bs = par.dtype_bytes, tokens(model, par)
    ops = []
    for name, heads in (("q", model.heads), ("k", model.kv)):
        e = bs * heads // par.tp * hd
        if not eager(model, par):
            ops += (_unfused_rope(name, e, int(hd * par.rotary_percent) * e // hd, d)
                    if not par.rope_fusion else
                    [memory(f"rope_{name}", "fwd", 2 * d * e),
                     memory(f"rope_{name}_bwd", "ig", 2 * d * e)])
            continue
        rotate = [memory(f"rope_{name}_rotate", "fwd", 8 * e),
                  memory(f"rope_{name}_rotate_bwd", "ig", 8 * e)]
        if d == 4:      # fp32 activations: both casts return the tensor itself
            ops += rotate
            continue
        ops += [memory(f"rope_{name}_to_fp32", "fwd", (d + 4) * e), rotate[0],
                memory(f"rope_{name}_to_{8 * d}bit", "fwd", (4 + d) * e),
                memory(f"rope_{name}_to_fp32_bwd", "ig", (d + 4) * e), rotate[1],
                memory(f"rope_{name}_to_{8 * d}bit_bwd", "ig", (4 + d) * e)]
    return ops


def _grad_adds(name: str, model, par, linears: int) -> list:
    """Autograd's in-place adds of the input gradients of ``linears`` eager linears that read
    one tensor (this rank's b·s x h, the whole sequence inside a tensor-parallel region)."""
    e = tokens(model, par) * model.hidden
    return [memory(f"{name}_dgrad_add", "ig", 3 * par.dtype_bytes * e)
            for _ in range(linears - 1)]


def _linear(name: str, tokens: int, n_in: int, n_out: int, par, fp8: bool = True) -> list:
    """A linear layer's three GEMMs: y = x W (tokens x n_out), dx = dy Wᵀ, dW = xᵀ dy.

    ``fp8`` (a linear of the transformer block under Transformer Engine's FP8 recipe,
    ``par.fp8``): the three GEMMs take 1-byte operands at the FP8 peak and write 16-bit outputs
    (the weight gradient still into the fp32 main gradient), and the operands are quantized
    first: the input in the forward and the output gradient in the backward, each read in 16
    bits and written twice in FP8 (the row-wise copy its GEMM reads, the column-wise one the
    other GEMM of the backward reads: TE's quantizers' rowwise and columnwise usage), 4 B an
    element. With ``tensorwise`` (current scaling) each quantization first reads its tensor
    once more for its amax, which delayed scaling takes from the history instead. The weights'
    FP8 copies, made once an iteration, are not counted (what the linears keep:
    :func:`.activations.transformer_activation_bytes`). The weight gradient reaches the main
    gradient as :func:`_weight_grad` says."""
    d = par.dtype_bytes
    recipe = par.fp8 if fp8 else ""
    if not recipe:
        return [gemm(name, "fwd", tokens, n_out, n_in, dtype_bytes=d),
                gemm(f"{name}_dgrad", "ig", tokens, n_in, n_out, dtype_bytes=d),
                *_weight_grad(name, n_in, n_out, tokens, par)]
    cast = 2 * d + 2 if recipe == "tensorwise" else d + 2     # bytes an element quantized
    return [memory(f"{name}_input_fp8", "fwd", cast * tokens * n_in),
            gemm(name, "fwd", tokens, n_out, n_in, dtype_bytes=1, out_bytes=d),
            memory(f"{name}_grad_fp8", "ig", cast * tokens * n_out),
            gemm(f"{name}_dgrad", "ig", tokens, n_in, n_out, dtype_bytes=1, out_bytes=d),
            *_weight_grad(name, n_in, n_out, tokens, par, operand_bytes=1)]


def _weight_grad(name: str, n_in: int, n_out: int, tokens: int, par, batch: int = 1,
                 operand_bytes: int | None = None) -> list:
    """dW = xᵀ dy (``batch`` such products: grouped experts) into the main gradient (g =
    ``par.main_grad_bytes`` a weight: fp32, or the 16-bit dtype where the launch reduces in it).

    Megatron-LM's gradient accumulation fusion (``--gradient-accumulation-fusion``, on unless
    ``--no-gradient-accumulation-fusion``; ``par.grad_accumulation_fusion``) accumulates in the
    GEMM itself (``wgrad_gemm_accum_fp32`` / ``_fp16``: the output read and written, 2g B).
    Without it the GEMM writes a 16-bit gradient and the DDP's backward hook adds it into
    main_grad (``param.main_grad.add_(param.grad)``: read both, write main_grad, d + 2g B a
    weight; Megatron-LM of 2021, before the fusion, let autograd add it into the fp16 ``.grad``,
    the same bytes at g = 2): megatron/core/tensor_parallel/layers.py and
    distributed/distributed_data_parallel.py."""
    d = par.dtype_bytes
    fused = par.grad_accumulation_fusion
    grad = gemm(f"{name}_wgrad", "wg", n_in, n_out, tokens, batch=batch,
                dtype_bytes=operand_bytes or d,
                out_bytes=(2 * par.main_grad_bytes if d <= 2 else 2 * d) if fused else d)
    if fused:
        return [grad]
    return [grad, memory(f"{name}_main_grad_add", "wg",
                         (d + 2 * par.main_grad_bytes) * batch * n_in * n_out)]


def _swiglu(name: str, d: int, e: int) -> list:
    """Megatron-LM's fused (bias) SwiGLU over ``e`` elements of the 2f-wide input: forward
    reads both halves and writes one (3d/2 an element), backward reads both halves and dy and
    writes both gradients (5d/2)."""
    return [memory(name, "fwd", 3 * d * e // 2), memory(f"{name}_bwd", "ig", 5 * d * e // 2)]


def _again(ops) -> list:
    """``ops`` run again in the backward, before it (a recompute)."""
    return [o._replace(name=f"{o.name}_recompute", phase="ig") for o in ops]


def _attention_core(model, par) -> list:
    b, s, h, A, T, d = (model.micro_batch, model.seq, model.hidden, model.heads, par.tp,
                        par.dtype_bytes)
    heads = A // T
    hd = h // A
    if par.flash_attention:
        # causal: half the square ([FA2]); with context parallelism this rank's s/cp queries
        # against all s keys, 1/cp of the causal square (the load-balanced split), in blocks of
        # its s/cp tokens (Transformer Engine's ring: each step one block of K and V)
        q = local_seq(model, par)
        fwd = 4 * b * heads * q * s * hd // 2
        ops = [flash("flash_attention", "fwd", fwd, q)]
        if par.selective_recompute:
            ops.append(flash("flash_attention_recompute", "ig", fwd, q))
        return ops + [flash("flash_attention_bwd", "ig", fwd * 5 // 2, q)]
    bh = b * heads
    scores = bh * s * s
    ops = [gemm("attention_scores", "fwd", s, s, hd, batch=bh, dtype_bytes=d),
           memory("scale_mask_softmax", "fwd", 2 * d * scores)]
    if model.arch == "gpt":      # Megatron GPT: attention dropout 0.1
        ops.append(memory("attention_dropout", "fwd", (2 * d + MASK) * scores))
    ops.append(gemm("attention_context", "fwd", s, hd, s, batch=bh, dtype_bytes=d))
    if par.selective_recompute:  # the core's forward again, before its backward
        ops += _again(ops)
    ops += [gemm("attention_context_dgrad_probs", "ig", s, s, hd, batch=bh, dtype_bytes=d),
            gemm("attention_context_dgrad_v", "ig", s, hd, s, batch=bh, dtype_bytes=d)]
    if model.arch == "gpt":
        ops.append(memory("attention_dropout_bwd", "ig", (2 * d + MASK) * scores))
    ops += [memory("scale_mask_softmax_bwd", "ig", 3 * d * scores),
            gemm("attention_scores_dgrad_q", "ig", s, hd, s, batch=bh, dtype_bytes=d),
            gemm("attention_scores_dgrad_k", "ig", s, hd, s, batch=bh, dtype_bytes=d)]
    return ops


# the row whose kernels hold the attention core (the context-parallel ring runs in it)
ATTENTION_CORE_ROW = "attention_column"


def cp_kv_bytes(model, par) -> int:
    """What a context-parallel rank sends its ring neighbour each step: the K and V of its
    s/cp tokens, for its query groups over TP (Transformer Engine's AttnFuncWithCPAndKVP2P
    passes K and V concatenated)."""
    hd = model.hidden // model.heads
    return 2 * tokens(model, par) * (model.kv // par.tp) * hd * par.dtype_bytes


def cp_step_ops(model, par) -> tuple:
    """The attention core's flash kernels (forward, backward) of a context-parallel rank: the
    ring runs them in cp equal steps (the load-balanced split), one step a received block."""
    ops = [o for o in _attention_core(model, par) if o.kind == "flash"
           and not o.name.endswith("_recompute")]
    return tuple(o for o in ops if o.phase == "fwd"), tuple(o for o in ops if o.phase != "fwd")


def attention_column_ops(model, par) -> list:
    """Input norm, QKV projection (h -> q/T: one fused GEMM, torchtitan's three), RoPE (a llama
    layer), attention core. Under torchtitan's op-level selective checkpointing the backward
    first runs the norm, the K projection and RoPE again (its policy keeps wq's and wv's
    outputs and the attention's, recomputes wk's, and keeps no rotation's input or output)."""
    bs, h, T, d = tokens(model, par), model.hidden, par.tp, par.dtype_bytes
    kv = model.kv * (h // model.heads)
    q = h + 2 * kv
    f, b = _norm("input_norm", model, par)
    rope = _rope(model, par)
    if eager(model, par):
        proj = (_linear("wq", bs, h, h // T, par) + _linear("wk", bs, h, kv // T, par)
                + _linear("wv", bs, h, kv // T, par) + _grad_adds("qkv", model, par, 3))
    else:
        proj = _linear("qkv", bs, h, q // T, par)
    again = _again(f) + [gemm("k_proj_recompute", "ig", bs, kv // T, h, dtype_bytes=d)] \
        + _again([o for o in rope if o.phase == "fwd"]) if par.op_recompute else []
    return f + proj + rope + _attention_core(model, par) + again + b


def attention_row_ops(model, par) -> list:
    """Output projection (h/T -> h), bias + dropout + residual add."""
    bs, h, T, d = tokens(model, par), model.hidden, par.tp, par.dtype_bytes
    f, b = _dropout_add(model, par)
    linear = _linear("attention_proj", bs, h // T, h, par)
    # op-level selective checkpointing recomputes wo (the fourth GEMM) and the residual add
    again = _again([o for o in linear if o.phase == "fwd"] + f) if par.op_recompute else []
    return linear + f + again + b


def mlp_column_ops(model, par) -> list:
    """Pre-MLP norm, up projection (h -> f/T, SwiGLU: gate and up, 2f/T), the activation."""
    bs, h, f, T, d = (tokens(model, par), model.hidden, model.ffn_size, par.tp,
                      par.dtype_bytes)
    nf, nb = _norm("mlp_norm", model, par)
    if model.arch == "gpt":
        e = bs * f // T
        act = [memory("bias_gelu", "fwd", 2 * d * e), memory("bias_gelu_bwd", "ig", 3 * d * e)]
        if not par.bias_gelu_fusion:
            # x + bias, then F.gelu: the add's kernel reads and writes the activation once
            # more; GELU's backward reads its input and dy as the fused one does, the add's
            # gradient passes through
            act = [memory("bias_add", "fwd", 2 * d * e), memory("gelu", "fwd", 2 * d * e),
                   memory("gelu_bwd", "ig", 3 * d * e)]
        up = _linear("mlp_up", bs, h, f // T, par)
    elif eager(model, par):
        e = bs * f // T
        act = [memory("silu", "fwd", 2 * d * e), memory("swiglu_mul", "fwd", 3 * d * e),
               memory("swiglu_mul_bwd", "ig", 6 * d * e), memory("silu_bwd", "ig", 3 * d * e)]
        up = (_linear("w1", bs, h, f // T, par) + _linear("w3", bs, h, f // T, par)
              + _grad_adds("mlp_up", model, par, 2))
    else:
        e = 2 * bs * f // T
        act = _swiglu("swiglu", d, e)
        up = _linear("mlp_up", bs, h, 2 * f // T, par)
    again = []
    if par.op_recompute:   # the norm, w3 (the sixth GEMM: half the up projection), SwiGLU
        again = _again(nf) + [gemm("mlp_up_w3_recompute", "ig", bs, f // T, h, dtype_bytes=d)] \
            + _again([o for o in act if o.phase == "fwd"])
    return nf + up + act + again + nb


def mlp_row_ops(model, par) -> list:
    """Down projection (f/T -> h), bias + dropout + residual add."""
    bs, h, f, T, d = (tokens(model, par), model.hidden, model.ffn_size, par.tp,
                      par.dtype_bytes)
    fa, ba = _dropout_add(model, par)
    again = _again(fa) if par.op_recompute else []   # the residual add (w2's output is kept)
    return _linear("mlp_down", bs, f // T, h, par) + fa + again + ba


def moe_router_ops(model, par) -> list:
    """Pre-MLP norm and the router (h -> E) on this GPU's share of the tokens. With the router
    in fp32 (``--moe-router-dtype fp32`` under Transformer Engine: moe_utils.py
    RouterGatingLinearFunction) the forward GEMM reads the 16-bit operands and writes fp32
    logits, and the backward's two GEMMs run in fp32: the input gradient's cast back to 16
    bits, the input cast up to fp32 for the weight gradient (the E-wide tensors' casts, h x E
    and b·s/T x E, not priced)."""
    bs, h, T, d, E = tokens(model, par), model.hidden, par.tp, par.dtype_bytes, model.experts
    nf, nb = _norm("mlp_norm", model, par)
    if not par.router_fp32:
        return nf + _linear("router", bs // T, h, E, par, fp8=False) + nb
    t = bs // T
    return nf + [gemm("router", "fwd", t, E, h, dtype_bytes=d, out_bytes=4),
                 gemm("router_dgrad", "ig", t, h, E, dtype_bytes=4),
                 memory("router_dgrad_cast", "ig", (4 + d) * t * h),
                 memory("router_input_fp32", "wg", (d + 4) * t * h),
                 gemm("router_wgrad", "wg", h, E, t, dtype_bytes=4)] + nb


def moe_expert_ops(model, par) -> list:
    """This GPU's E/ep experts, each a SwiGLU FFN split over the experts' ETP ranks, on the
    tokens routed to it on average: the b·s/T tokens of each of the ep x etp ranks that send
    to it (the EP all-to-all, then the ETP all-gather), k copies, over E experts; a batched
    GEMM per projection."""
    bs, h, f, T, d = (tokens(model, par), model.hidden, model.ffn_size, par.expert_tp,
                      par.dtype_bytes)
    local = model.experts // par.ep
    routed = bs * model.topk * par.ep * T // (par.tp * model.experts)
    ops = []
    for name, n_in, n_out in (("expert_up", h, 2 * f // T), ("expert_down", f // T, h)):
        ops += [gemm(name, "fwd", routed, n_out, n_in, batch=local, dtype_bytes=d),
                gemm(f"{name}_dgrad", "ig", routed, n_in, n_out, batch=local, dtype_bytes=d),
                *_weight_grad(name, n_in, n_out, routed, par, batch=local)]
    e = 2 * local * routed * f // T
    ops += _swiglu("swiglu", d, e)
    return ops


def shared_expert_column_ops(model, par) -> list:
    """The shared experts' gate and up projection (h -> 2 shared_ffn / T) on every token and
    SwiGLU (Megatron-LM's fused bias_swiglu), as a dense llama MLP's; the pre-MLP norm is the
    router's."""
    bs, h, fs, T, d = (tokens(model, par), model.hidden, model.shared_ffn, par.tp,
                       par.dtype_bytes)
    e = 2 * bs * fs // T
    return _linear("shared_up", bs, h, 2 * fs // T, par) + _swiglu("shared_swiglu", d, e)


def shared_expert_row_ops(model, par) -> list:
    """The shared experts' down projection (shared_ffn / T -> h), and their output added to the
    routed experts' (MoELayer.postprocess: read two, write one over the hidden state; its
    gradient passes through)."""
    bs, h, fs, T, d = (tokens(model, par), model.hidden, model.shared_ffn, par.tp,
                       par.dtype_bytes)
    return _linear("shared_down", bs, fs // T, h, par) + [
        memory("shared_output_add", "fwd", 3 * d * _hidden_elems(model, par))]


def embedding_table_params(model, par, vocab: int) -> int:
    """This TP rank's share of the (padded) vocabulary's embedding table: V/T x h."""
    return vocab // par.tp * model.hidden


def embedding_ops(model, par, vocab: int) -> list:
    """Vocab-parallel lookup (each TP rank writes the whole b·s·h output, zeros outside its
    shard), then (gpt) the position embedding add and the embedding dropout on the hidden state;
    backward: the dense gradient of this rank's V/T x h table, added into its fp32 main
    gradient."""
    h, d = model.hidden, par.dtype_bytes
    full = tokens(model, par) * h
    e = _hidden_elems(model, par)
    table = embedding_table_params(model, par, vocab)
    ops = [memory("embedding_lookup", "fwd", 2 * d * full)]
    if model.arch == "gpt":
        ops += [memory("position_add", "fwd", 3 * d * e),
                memory("embedding_dropout", "fwd", (2 * d + MASK) * e),
                memory("embedding_dropout_bwd", "ig", (2 * d + MASK) * e)]
    # zero the table's gradient, scatter-add the rows' gradients, add it into main_grad
    ops += [memory("embedding_grad", "wg", d * table + 2 * d * full),
            memory("embedding_main_grad_add", "wg", (d + 2 * par.main_grad_bytes) * table)]
    return ops


def head_ops(model, par, vocab: int) -> list:
    """Final norm and the column-parallel LM head (h -> V/T)."""
    bs, h, T, d = tokens(model, par), model.hidden, par.tp, par.dtype_bytes
    f, b = _norm("final_norm", model, par, residual=False)
    return f + _linear("lm_head", bs, h, vocab // T, par, fp8=False) + b


def cross_entropy_ops(model, par, vocab: int) -> list:
    """Megatron-LM's vocab-parallel cross-entropy on this rank's b·s x V/T logits, in fp32
    (core/tensor_parallel/cross_entropy.py): forward: cast the logits to fp32 (read d, write 4),
    the max (read 4), subtract it (read 4, write 4), exp (read 4, write 4), the sum (read 4),
    the division that keeps the softmax for the backward (read 4, write 4) = d + 36 bytes per
    logit; backward: softmax minus the one-hot target, times the loss gradient (read 4, write 4)
    and the cast back for the LM head's backward (read 4, write d) = d + 12.

    With ``--cross-entropy-loss-fusion`` (``par.cross_entropy_fusion``: Megatron-LM's native
    impl, core/fusions/fused_cross_entropy.py) the same steps run as four functions under
    ``torch.compile``, each one Inductor kernel (torch 2.13's, its generated code read on the
    CPU backend): the cast, then the max over it (read d, write 4, read 4); subtract, exp and
    sum in one pass over the fp32 copy, in place (read 4, write 4); the division in one more
    (read 4, write 4) = d + 24; backward: a copy of the kept softmax (the one-hot subtraction
    scatters into a functional clone; read 4, write 4), then one pass that multiplies by the
    loss gradient, writes the gradient in bf16 (the function casts to bf16 whatever the
    training dtype) and writes the product back into the kept softmax (read 4, write 2 + 4)
    = 18."""
    e = tokens(model, par) * vocab // par.tp
    d = par.dtype_bytes
    if par.cross_entropy_fusion:
        return [memory("cross_entropy", "fwd", (d + 24) * e),
                memory("cross_entropy_bwd", "ig", 18 * e)]
    return [memory("cross_entropy", "fwd", (d + 36) * e),
            memory("cross_entropy_bwd", "ig", (d + 12) * e)]
