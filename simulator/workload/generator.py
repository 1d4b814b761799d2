"""Generate workload files from a model's shape: roofline compute times, Megatron comm sizes.

Per microbatch of ``b`` sequences of ``s`` tokens, hidden size ``h``, FFN size ``f``, ``A``
heads (``G`` key/value heads), tensor parallelism ``T`` (Megatron's column/row split; each GPU
does 1/T of every GEMM), one transformer layer is four rows (``gpt``/``llama``):

====================  =========================================  =========================
row                   forward FLOPs per GPU                      forward / input-grad comm
====================  =========================================  =========================
attention_column      2bs·h·q/T + 4bs²h/T   (q = h + 2G·h/A)      AG / RS  (no SP: - / AR)
attention_row         2bs·h·h/T                                  RS / AG  (no SP: AR / -)
mlp_column            2bs·h·f/T (llama, SwiGLU gate+up: 4bs·h·f/T)  AG / RS (no SP: - / AR)
mlp_row               2bs·f·h/T                                  RS / AG  (no SP: AR / -)
====================  =========================================  =========================

Input-gradient FLOPs equal the forward GEMM FLOPs plus twice the attention-core term (both
operands of QKᵀ and of softmax·V need gradients, and none of them is a weight); weight-gradient
FLOPs equal the forward GEMM FLOPs. Forward + backward is thus 3x forward (Megatron's 72bsh²·L
(1 + s/6h + ...) count). The ``moe`` model is llama-style attention followed by
``moe_router`` (2bs·h·E/T), ``moe_dispatch`` and ``moe_combine`` (all-to-all over the EP group
of 2bs·h·k/T bytes each way, AICB's size) and ``moe_experts`` (k routed tokens per token through
a SwiGLU expert: 6bs·k·h·f/T, experts split over EP and tensor-parallel over T).

Comm sizes: a TP collective moves the activation, 2bsh bytes in bf16 (``--precision``: 4bsh in fp32) (all-gather/reduce-scatter with
sequence parallelism, all-reduce without); ``pp_comm`` (one activation between stages) is 2bsh,
divided by T with sequence parallelism. Weight-gradient (DP) all-reduces move the row's fp32
gradients, 4 bytes per parameter on this GPU (weights and column biases split over T; row biases
and norms replicated); expert weights go to the DP-over-EP group (``ALLREDUCE_DP_EP``).

Compute time is the sum of each row's kernels priced on the GPU preset (:mod:`.layer_ops` says
which kernels a row runs, :mod:`.kernels` how each is timed, :mod:`.kernel_presets` the GPUs'
constants and their sources); with ``efficiency`` given, the row's FLOPs above over that
fraction of the preset's dense peak instead (every other op free). The embedding lookup is
memory-bound. The LM head (``final_column``, h x V/T, V padded to a multiple of 128·T as
Megatron does) and the vocab-parallel cross-entropy (three fp32 all-reduces of 4bs bytes; its
passes over the logits timed on the head's row) close the model.

Two layouts (see :mod:`.aicb`): ``model`` writes the whole model once (ASTRA-sim), ``vpp:`` the
chunks per rank; ``aicb`` writes one stage (``layers/pp`` layers with the embedding and LM head
rows, as AICB does) unrolled over ``ga`` microbatches between AICB's iteration rows (the
distributed optimizer's gradient reduce-scatter and parameter all-gather, cross-entropy and
optimizer all-reduces), ``vpp:`` holding layers per stage.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from ..errors import ConfigError
from .activations import (loss_memory_bytes, op_sac_activation_bytes,
                          transformer_activation_bytes,
                          transformer_deferred_wgrad_bytes,
                          transformer_split_backward_bytes, transformer_transient_bytes)
from . import layer_ops
from .layer_ops import eager, local_seq
from .gpus import GPUPreset
from .kernel_presets import kernel_preset
from .kernels import price, row_times
from .stage_layers import empty_chunk

MODELS = ("gpt", "llama", "moe")
LAYOUTS = ("model", "aicb")
POLICY = "HYBRID_TRANSFORMER_FWD_IN_BCKWD"
BF16 = 2
FP32 = 4
PRECISIONS = {"bf16": BF16, "fp16": BF16, "fp32": FP32}   # bytes of an activation element


@dataclass(frozen=True)
class ModelSpec:
    """The model's shape. ``ffn``/``vocab``/``kv_heads`` None means the architecture's default."""

    arch: str
    layers: int
    hidden: int
    heads: int
    seq: int
    micro_batch: int
    ffn: int | None = None
    vocab: int | None = None
    kv_heads: int | None = None
    experts: int = 1
    topk: int = 2
    tied_embeddings: bool = False   # the LM head shares the embedding's weights (Megatron's default)
    # moe: the shared experts' FFN size (Megatron-LM's --moe-shared-expert-intermediate-size:
    # their count x one's width), a SwiGLU MLP over TP every token runs beside the routed ones
    shared_ffn: int = 0

    @property
    def ffn_size(self) -> int:
        """gpt: 4h; llama/moe (SwiGLU): 2/3 of 4h rounded up to a multiple of 256 (LLaMA)."""
        if self.ffn is not None:
            return self.ffn
        if self.arch == "gpt":
            return 4 * self.hidden
        return -(-(8 * self.hidden // 3) // 256) * 256

    @property
    def vocab_size(self) -> int:
        if self.vocab is not None:
            return self.vocab
        return 50257 if self.arch == "gpt" else 32000

    @property
    def kv(self) -> int:
        return self.heads if self.kv_heads is None else self.kv_heads

    @property
    def token_ffn(self) -> int:
        """The FFN width a token goes through in one layer: an MoE layer's k routed experts and
        its shared experts (what its activations are counted over), else the MLP's."""
        if self.arch == "moe":
            return self.ffn_size * self.topk + self.shared_ffn
        return self.ffn_size


@dataclass(frozen=True)
class ParallelSpec:
    tp: int = 1
    pp: int = 1
    vpp: int = 1
    ga: int = 1
    dp: int = 1
    ep: int = 1
    sequence_parallel: bool = True
    flash_attention: bool = True     # the attention scores are not kept (activation memory)
    precision: str = "bf16"          # activations, weights and their collectives (PRECISIONS)
    # Megatron's --recompute-granularity selective: the attention core's forward (QKᵀ, softmax,
    # dropout, probs·V) runs again in the backward, so its scores are not kept
    selective_recompute: bool = False
    # torchtitan's op-level selective checkpointing (selective_ac_option "op", a llama layer):
    # the outputs of the attention kernel and of every other GEMM are kept, the rest of the
    # layer runs again in its backward
    op_recompute: bool = False
    # Transformer Engine's FP8 recipe (Megatron-LM's --fp8-format, --fp8-recipe: delayed,
    # tensorwise or blockwise; "": none): the transformer layers' linears run FP8 GEMMs on
    # quantized operands (layer_ops._linear); the attention, the norms and the LM head stay
    # 16-bit
    fp8: str = ""
    # context parallelism (Megatron-LM's --context-parallel-size, torchtitan's
    # context_parallel_degree): each rank holds s/cp tokens of every sequence (two chunks of
    # s/2cp, the load-balanced split), runs the linears, norms and loss on them and the
    # attention of its queries against the whole sequence's keys; the gradients are reduced over
    # dp x cp ranks (Megatron's data-parallel group with context parallelism)
    cp: int = 1
    # transformer layers per chunk (model order) that a launch file's split gives (empty:
    # pipesim's default split); a first or last chunk of none holds the embedding or the LM
    # head and loss, the rows the model layout writes before and after the layers
    stage_layers: tuple[int, ...] = ()
    # whose model code runs (activations.MODEL_RUNTIMES): Megatron-LM's fused kernels and
    # vocab-parallel loss, or torchtitan's eager modules (layer_ops) and its loss (what the
    # last stage keeps and holds: activations.loss_memory_bytes)
    runtime: str = "megatron"
    # Megatron-LM's gradient accumulation fusion (off with --no-gradient-accumulation-fusion):
    # the weight-gradient GEMMs accumulate into the fp32 main gradient themselves; without it
    # each weight's 16-bit gradient is added into main_grad by an elementwise kernel
    # (layer_ops._weight_grad)
    grad_accumulation_fusion: bool = True
    # bytes of a main gradient, the buffer weight gradients accumulate into (Megatron-Core's
    # DDP: fp32 where the reduction is, --accumulate-allreduce-grads-in-fp32 and bf16's
    # default, else the parameters' 16-bit dtype: --fp16 alone, --grad-reduce-in-bf16)
    main_grad_bytes: int = FP32
    # Megatron-LM's --make-vocab-size-divisible-by: the vocabulary padded to a multiple of it
    # x tp (padded_vocab)
    vocab_divisor: int = 128
    # Megatron-LM's fused RoPE kernel (off with --no-rope-fusion: PyTorch ops,
    # layer_ops._rope) and --rotary-percent, the fraction of each head's channels rotated
    rope_fusion: bool = True
    rotary_percent: float = 1.0
    # Megatron-LM's fused bias + GELU of the gpt MLP (off with --no-bias-gelu-fusion: the bias
    # added by a kernel of its own, layer_ops.mlp_column_ops)
    bias_gelu_fusion: bool = True
    # Megatron-LM's --cross-entropy-loss-fusion (its native impl: the loss's steps compiled
    # by torch.compile, layer_ops.cross_entropy_ops; activations.loss_memory_bytes)
    cross_entropy_fusion: bool = False
    # Megatron-LM's --moe-router-dtype fp32 under Transformer Engine: the router's GEMMs with
    # an fp32 output and, in the backward, fp32 operands (layer_ops.moe_router_ops)
    router_fp32: bool = False
    # the experts' tensor parallelism (Megatron-LM's --expert-tensor-parallel-size; 0: tp, its
    # default): each expert's FFN split over etp ranks, the stage's tp x cp x dp GPUs folded
    # into etp x ep x expert-dp (MoE parallel folding, parallel_state's expert grid)
    etp: int = 0

    @property
    def expert_tp(self) -> int:
        return self.etp or self.tp

    @property
    def dtype_bytes(self) -> int:
        return PRECISIONS[self.precision]

    @property
    def world(self) -> int:
        return self.tp * self.pp * self.dp * self.cp


def cp_exchange_warning(source: str, cp: int | str) -> str:
    """What a generated file of context parallelism ``cp`` (a size, or "cp" for a searched
    one) leaves out, as its input's warning (one text for every input that sets it)."""
    return (f"{source}: each rank's linears, norms, loss and memory "
            f"are its s/{cp} tokens' and its attention its queries' against all keys, in "
            f"{cp} ring steps of equal work (the load-balanced split), each step's K/V "
            "transfer to the next rank hidden behind the step's attention up to its length "
            "(Transformer Engine's ring of p2p; torchtitan's exchange is priced as the same "
            "ring)")


@dataclass(frozen=True)
class RowSpec:
    """One row before it is timed: FLOPs per GPU and collectives as (type token, bytes)."""

    name: str
    fwd_flops: int
    ig_flops: int
    wg_flops: int
    fwd_comm: tuple[str, int] = ("NONE", 0)
    ig_comm: tuple[str, int] = ("NONE", 0)
    wg_comm: tuple[str, int] = ("NONE", 0)
    params: int = 0                      # parameters of this row on one GPU
    meta: dict = field(default_factory=dict, compare=False)
    ops: tuple = field(default=(), compare=False)   # its kernels (:mod:`.layer_ops`)


def padded_vocab(model: ModelSpec, par: ParallelSpec) -> int:
    """The vocabulary the embedding and the LM head hold over the TP ranks. Megatron-LM pads it
    to a multiple of --make-vocab-size-divisible-by (128) x tp (training/tokenizer's
    _vocab_size_with_padding); torchtitan keeps the tokenizer's size, its TP shards uneven
    (DTensor's Shard(0): the largest ceil(V / tp), what a rank holds here)."""
    unit = (1 if par.runtime == "torchtitan" else par.vocab_divisor) * par.tp
    return -(-model.vocab_size // unit) * unit


# The most transformer layers (model layout; layers per stage x ga in the AICB layout) a
# generated file holds: a few rows each, so the file stays far below the workload reader's
# size limit and parses in about a second.
MAX_LAYERS = 10_000


def check(model: ModelSpec, par: ParallelSpec, layout: str) -> None:
    """Refuse shapes Megatron refuses, naming the option."""
    if model.arch not in MODELS:
        raise ConfigError(f"--model: expected one of {', '.join(MODELS)}, found {model.arch!r}")
    if par.precision not in PRECISIONS:
        raise ConfigError(f"--precision: expected one of {', '.join(PRECISIONS)}, found "
                          f"{par.precision!r}")
    if layout not in LAYOUTS:
        raise ConfigError(f"--layout: expected one of {', '.join(LAYOUTS)}, found {layout!r}")
    if par.fp8 and par.op_recompute:
        raise ConfigError("--fp8-format: expected no op-level selective checkpointing with "
                          "it (torchtitan's, whose FP8 pipesim does not price)")
    if par.op_recompute and (model.arch != "llama" or par.selective_recompute):
        raise ConfigError("op-level selective checkpointing: expected the llama model without "
                          f"Megatron's selective recompute, found {model.arch}"
                          + (" with it" if par.selective_recompute else ""))
    for opt, value in (("layers", model.layers), ("hidden", model.hidden), ("heads", model.heads),
                       ("seq", model.seq), ("micro-batch", model.micro_batch), ("tp", par.tp),
                       ("pp", par.pp), ("vpp", par.vpp), ("ga", par.ga), ("dp", par.dp),
                       ("cp", par.cp), ("ep", par.ep), ("etp", par.expert_tp),
                       ("experts", model.experts),
                       ("topk", model.topk)):
        if value < 1:
            raise ConfigError(f"--{opt}: expected a positive integer, found {value}")
    if model.layers > MAX_LAYERS:
        raise ConfigError(f"--layers: {model.layers:,} layers, above the most pipesim generates "
                          f"({MAX_LAYERS:,}; real models have a few hundred)")
    if layout == "aicb" and (model.layers // par.pp) * par.ga > MAX_LAYERS:
        raise ConfigError(f"--ga: {par.ga:,} microbatches x {model.layers // par.pp:,} layers "
                          f"per stage unroll into {(model.layers // par.pp) * par.ga:,} layers "
                          f"of rows, above the most pipesim generates ({MAX_LAYERS:,})")
    T = par.tp
    if model.hidden % model.heads:
        raise ConfigError(f"--hidden {model.hidden} is not a multiple of --heads {model.heads}")
    if model.heads % T:
        raise ConfigError(f"--heads {model.heads} is not a multiple of --tp {T}")
    if model.kv % T or model.heads % model.kv:
        raise ConfigError(f"--kv-heads {model.kv} must divide --heads {model.heads} and be a "
                          f"multiple of --tp {T}")
    if model.ffn_size % T:
        raise ConfigError(f"--ffn {model.ffn_size} is not a multiple of --tp {T}")
    if par.cp > 1:
        # Megatron-LM splits each sequence into 2 x cp chunks, rank r holding chunks r and
        # 2cp-1-r (get_batch_on_this_cp_rank), and runs context parallelism only with
        # Transformer Engine's fused attention
        if model.seq % (2 * par.cp):
            raise ConfigError(f"--seq {model.seq} is not a multiple of 2 x --cp {par.cp} "
                              "(context parallelism splits each sequence into 2 x cp chunks)")
        if not par.flash_attention:
            raise ConfigError(f"--cp {par.cp}: expected flash (fused) attention with context "
                              "parallelism (Megatron-LM runs it only with Transformer Engine's "
                              "fused attention)")
    if par.sequence_parallel and local_seq(model, par) % T:
        raise ConfigError(f"--seq {model.seq} is not a multiple of --tp {T}"
                          + (f" x --cp {par.cp}" if par.cp > 1 else "")
                          + " (sequence parallelism splits the sequence)")
    if model.arch == "moe":
        if model.experts < 2:
            raise ConfigError("--experts: the moe model needs at least 2 experts")
        stage = par.tp * par.cp * par.dp
        if model.experts % par.ep or stage % (par.ep * par.expert_tp):
            raise ConfigError(
                f"--ep {par.ep}: expected a divisor of --experts {model.experts} whose product "
                f"with --etp {par.expert_tp} divides a stage's --tp {par.tp} x --dp {par.dp}"
                + (f" x --cp {par.cp}" if par.cp > 1 else "")
                + f" = {stage} GPUs (Megatron-LM's expert grid)")
        if model.ffn_size % par.expert_tp:
            raise ConfigError(f"--ffn {model.ffn_size}: expected a multiple of the experts' "
                              f"tensor parallelism {par.expert_tp}")
        if par.tp > 1 and not par.sequence_parallel:
            raise ConfigError(f"--tp {par.tp}: expected sequence parallelism with the moe "
                              "model (Megatron-LM's MoE layer refuses to train tensor-parallel "
                              "without it)")
        if model.topk > model.experts:
            raise ConfigError(f"--topk {model.topk} exceeds --experts {model.experts}")
        if model.shared_ffn < 0 or model.shared_ffn % T:
            raise ConfigError(f"--shared-ffn {model.shared_ffn}: expected a multiple of --tp "
                              f"{T} (the shared experts' FFN is split over TP)")
    elif par.ep != 1 or model.experts != 1 or par.etp not in (0, par.tp) or model.shared_ffn:
        raise ConfigError("--experts/--ep/--etp/--shared-ffn: only the moe model has experts")
    if par.stage_layers and layout == "model":
        empty = empty_chunk(par.stage_layers, True, True)
        if empty is not None:
            raise ConfigError(f"--pp {par.pp} x --vpp {par.vpp}: expected every chunk of the "
                              "launch's split to hold a layer or the embedding / LM head rows; "
                              f"chunk {empty} of {' '.join(map(str, par.stage_layers))} holds "
                              "nothing")
    elif par.pp * par.vpp > model.layers:
        raise ConfigError(f"--pp {par.pp} x --vpp {par.vpp} chunks exceed --layers "
                          f"{model.layers}")
    if layout == "aicb":
        if model.layers % par.pp:
            raise ConfigError(f"--layers {model.layers} is not a multiple of --pp {par.pp}: the "
                              "aicb layout writes one stage of layers/pp layers")
        if par.vpp != 1:
            raise ConfigError("--vpp: the aicb layout's vpp: holds layers per stage; give the "
                              "chunks per rank to `pipesim run --vpp` instead")


def _tp_pair(sp: bool, column: bool, nbytes: int) -> tuple[tuple[str, int], tuple[str, int]]:
    """(forward, input-gradient) TP collectives of a column- or row-parallel linear."""
    if sp:
        return (("ALLGATHER", nbytes), ("REDUCESCATTER", nbytes)) if column else \
               (("REDUCESCATTER", nbytes), ("ALLGATHER", nbytes))
    return (("NONE", 0), ("ALLREDUCE", nbytes)) if column else \
           (("ALLREDUCE", nbytes), ("NONE", 0))


def _dp(params: int) -> tuple[str, int]:
    """The weight-gradient all-reduce over DP of ``params`` fp32 gradients."""
    return ("ALLREDUCE", FP32 * params)


def layer_rows(model: ModelSpec, par: ParallelSpec) -> list[RowSpec]:
    """The rows of one transformer layer (FLOPs and bytes per GPU, one microbatch)."""
    b, s, h, f, T = model.micro_batch, model.seq, model.hidden, model.ffn_size, par.tp
    bs = b * local_seq(model, par)                      # this rank's tokens
    act = par.dtype_bytes * bs * h
    sp = par.sequence_parallel
    gpt = model.arch == "gpt"
    q = h + 2 * model.kv * (h // model.heads)          # fused QKV output width
    core = 4 * bs * s * h // T                          # QK^T and softmax.V (all keys), forward
    norm = 2 * h if gpt else h                          # LayerNorm (w, b) or RMSNorm (w)
    rows = []
    gemm = 2 * bs * h * q // T
    fc, ic = _tp_pair(sp, True, act)
    params = (h * q + (q if gpt else 0)) // T + norm
    rows.append(RowSpec("attention_column", gemm + core, gemm + 2 * core, gemm, fc, ic,
                        _dp(params), params,
                        ops=tuple(layer_ops.attention_column_ops(model, par))))
    gemm = 2 * bs * h * h // T
    fc, ic = _tp_pair(sp, False, act)
    params = h * h // T + (h if gpt else 0)
    rows.append(RowSpec("attention_row", gemm, gemm, gemm, fc, ic, _dp(params), params,
                        ops=tuple(layer_ops.attention_row_ops(model, par))))
    if model.arch == "moe":
        return rows + _moe_rows(model, par)
    up = 1 if gpt else 2                                # SwiGLU: gate and up projections
    gemm = up * 2 * bs * h * f // T
    fc, ic = _tp_pair(sp, True, act)
    params = (up * h * f + (f if gpt else 0)) // T + norm
    rows.append(RowSpec("mlp_column", gemm, gemm, gemm, fc, ic, _dp(params), params,
                        ops=tuple(layer_ops.mlp_column_ops(model, par))))
    gemm = 2 * bs * f * h // T
    fc, ic = _tp_pair(sp, False, act)
    params = f * h // T + (h if gpt else 0)
    rows.append(RowSpec("mlp_row", gemm, gemm, gemm, fc, ic, _dp(params), params,
                        ops=tuple(layer_ops.mlp_row_ops(model, par))))
    return rows


def _moe_rows(model: ModelSpec, par: ParallelSpec) -> list[RowSpec]:
    """The router, Megatron-LM's alltoall dispatcher (each rank's b·s/T tokens, k copies, to
    the EP ranks of their experts; with experts split over ETP > 1 ranks the received tokens
    all-gathered over the ETP group, and the outputs reduce-scattered back before the return
    all-to-all: token_dispatcher.MoEAlltoAllTokenDispatcher; the routing probabilities' small
    gathers not priced), the experts, the combine."""
    b, h, f, T, X = model.micro_batch, model.hidden, model.ffn_size, par.tp, par.expert_tp
    E, k = model.experts, model.topk
    bs = b * local_seq(model, par)
    a2a = par.dtype_bytes * bs * h * k // T
    router = 2 * bs * h * E // T
    experts = 6 * bs * k * h * f // T
    expert_params = (E // par.ep) * 3 * h * f // X
    gather = ([RowSpec("moe_dispatch_gather", 0, 0, 0, ("ALLGATHER_ETP", X * a2a),
                       ("REDUCESCATTER_ETP", X * a2a))] if X > 1 else [])
    scatter = ([RowSpec("moe_combine_scatter", 0, 0, 0, ("REDUCESCATTER_ETP", X * a2a),
                        ("ALLGATHER_ETP", X * a2a))] if X > 1 else [])
    return [
        # router weight (h x E) and the pre-MLP RMSNorm (h), both replicated
        RowSpec("moe_router", router, router, router, wg_comm=_dp(h * E + h), params=h * E + h,
                ops=tuple(layer_ops.moe_router_ops(model, par))),
        *_shared_expert_rows(model, par),
        RowSpec("moe_dispatch", 0, 0, 0, ("ALLTOALL_EP", a2a), ("ALLTOALL_EP", a2a)),
        *gather,
        RowSpec("moe_experts", experts, experts, experts,
                wg_comm=("ALLREDUCE_DP_EP", FP32 * expert_params), params=expert_params,
                meta={"experts": True}, ops=tuple(layer_ops.moe_expert_ops(model, par))),
        *scatter,
        RowSpec("moe_combine", 0, 0, 0, ("ALLTOALL_EP", a2a), ("ALLTOALL_EP", a2a)),
    ]


def _shared_expert_rows(model: ModelSpec, par: ParallelSpec) -> list[RowSpec]:
    """Megatron-LM's shared experts (moe/shared_experts.py SharedExpertMLP, computed before the
    routing: moe_layer.py), a dense SwiGLU MLP of ``shared_ffn`` over TP on every token: its
    column-parallel gate and up projection (the TP all-gather before it with sequence
    parallelism) and its row-parallel down projection (the reduce-scatter after it), their
    weights reduced over DP as a dense layer's; none without shared experts."""
    fs = model.shared_ffn
    if not fs:
        return []
    h, T, sp = model.hidden, par.tp, par.sequence_parallel
    bs = model.micro_batch * local_seq(model, par)
    act = par.dtype_bytes * bs * h
    gemm = 2 * 2 * bs * h * fs // T
    fc, ic = _tp_pair(sp, True, act)
    params = 2 * h * fs // T
    column = RowSpec("moe_shared_column", gemm, gemm, gemm, fc, ic, _dp(params), params,
                     ops=tuple(layer_ops.shared_expert_column_ops(model, par)))
    gemm = 2 * bs * fs * h // T
    fc, ic = _tp_pair(sp, False, act)
    params = fs * h // T
    row = RowSpec("moe_shared_row", gemm, gemm, gemm, fc, ic, _dp(params), params,
                  ops=tuple(layer_ops.shared_expert_row_ops(model, par)))
    return [column, row]


def embedding_row(model: ModelSpec, par: ParallelSpec) -> RowSpec:
    """Vocab-parallel embedding: a lookup (0 FLOPs), then the TP reduction of its output."""
    h, T = model.hidden, par.tp
    act = par.dtype_bytes * model.micro_batch * local_seq(model, par) * h
    fwd = ("REDUCESCATTER", act) if par.sequence_parallel else ("ALLREDUCE", act)
    params = padded_vocab(model, par) * h // T + (model.seq * h if model.arch == "gpt" else 0)
    return RowSpec("embedding_layer", 0, 0, 0, fwd, ("NONE", 0), _dp(params), params,
                   ops=tuple(layer_ops.embedding_ops(model, par, padded_vocab(model, par))))


def head_row(model: ModelSpec, par: ParallelSpec) -> RowSpec:
    """The LM head (column-parallel h x V) with the final norm."""
    b, s, h, T = model.micro_batch, local_seq(model, par), model.hidden, par.tp
    V = padded_vocab(model, par)
    gemm = 2 * b * s * h * V // T
    fc, ic = _tp_pair(par.sequence_parallel, True, par.dtype_bytes * b * s * h)
    params = h * V // T + (2 * h if model.arch == "gpt" else h)
    # the cross-entropy's kernels run right after the head, per microbatch, on its stage: they
    # are timed here (the loss rows carry its all-reduces, and the AICB layout runs those once
    # per iteration)
    ops = layer_ops.head_ops(model, par, V) + layer_ops.cross_entropy_ops(model, par, V)
    return RowSpec("final_column", gemm, gemm, gemm, fc, ic, _dp(params), params,
                   ops=tuple(ops))


def loss_rows(model: ModelSpec, par: ParallelSpec) -> list[RowSpec]:
    """Vocab-parallel cross-entropy: max, sum of exp and target logit, each an fp32 all-reduce
    (its passes over the logits are timed on the LM head's row)."""
    nbytes = FP32 * model.micro_batch * local_seq(model, par)
    return [RowSpec(f"cross_entropy{i}", 0, 0, 0, ("ALLREDUCE", nbytes)) for i in (1, 2, 3)]


def pp_comm_bytes(model: ModelSpec, par: ParallelSpec) -> int:
    act = par.dtype_bytes * model.micro_batch * local_seq(model, par) * model.hidden
    return act // par.tp if par.sequence_parallel else act


def model_rows(model: ModelSpec, par: ParallelSpec, layers: int) -> list[RowSpec]:
    """Embedding, ``layers`` transformer layers, LM head: rows in forward order."""
    return [embedding_row(model, par)] + layer_rows(model, par) * layers + [head_row(model, par)]


def _no_dp(row: RowSpec) -> RowSpec:
    return RowSpec(row.name, row.fwd_flops, row.ig_flops, row.wg_flops, row.fwd_comm,
                   row.ig_comm, ("NONE", 0), row.params, row.meta, row.ops)


def aicb_iteration_rows(model: ModelSpec, par: ParallelSpec) -> tuple[list[RowSpec],
                                                                      list[RowSpec]]:
    """AICB's rows around the repeats: the distributed optimizer's gradient reduce-scatter
    (fp32) and parameter all-gather (in the training precision) over the stage's parameters on this GPU (experts over
    the DP-over-EP group), then cross-entropy and the optimizer's 4-byte all-reduces."""
    stage = model_rows(model, par, model.layers // par.pp)
    dense = sum(r.params for r in stage if not r.meta.get("experts"))
    experts = sum(r.params for r in stage if r.meta.get("experts"))
    pre = [RowSpec("grad_gather", 0, 0, 0, wg_comm=("ALLGATHER", par.dtype_bytes * dense)),
           RowSpec("grad_param_comm", 0, 0, 0, wg_comm=("REDUCESCATTER", FP32 * dense))]
    if experts:
        pre += [RowSpec("moe_grad_norm1", 0, 0, 0,
                        wg_comm=("ALLGATHER_DP_EP", par.dtype_bytes * experts)),
                RowSpec("moe_grad_norm2", 0, 0, 0,
                        wg_comm=("REDUCESCATTER_DP_EP", FP32 * experts))]
    post = loss_rows(model, par) + [RowSpec(f"optimizer{i}", 0, 0, 0, ("ALLREDUCE", FP32))
                               for i in (1, 2, 3, 4)]
    return pre, post


def generate_rows(model: ModelSpec, par: ParallelSpec, layout: str = "model") -> list[RowSpec]:
    """Every row of the file, in file order."""
    check(model, par, layout)
    if layout == "model":
        return model_rows(model, par, model.layers) + loss_rows(model, par)
    pre, post = aicb_iteration_rows(model, par)
    block = [_no_dp(r) for r in model_rows(model, par, model.layers // par.pp)]
    return pre + block * par.ga + post


def activation_bytes(model: ModelSpec, par: ParallelSpec) -> int:
    """What one transformer layer keeps per microbatch (Korthikanti et al.; an MoE layer's MLP
    counted once per expert a token visits). The llama and moe layers are LLaMA's: SwiGLU, K
    and V of their query groups' width, no dropout (:func:`.activations.
    transformer_activation_bytes`)."""
    ffn = model.token_ffn
    gpt = model.arch == "gpt"
    s = local_seq(model, par)               # the tokens of a sequence this rank holds
    if par.op_recompute:
        return op_sac_activation_bytes(s, model.micro_batch, model.hidden, ffn,
                                       model.kv * (model.hidden // model.heads), par.tp,
                                       par.sequence_parallel, par.dtype_bytes)
    return transformer_activation_bytes(s, model.micro_batch, model.hidden,
                                        model.heads, ffn, par.tp, par.sequence_parallel,
                                        par.flash_attention or par.selective_recompute,
                                        par.dtype_bytes, gated=not gpt,
                                        kv_width=2 * model.kv * (model.hidden // model.heads),
                                        dropout=gpt, fp8=bool(par.fp8),
                                        eager=eager(model, par))


def split_backward_bytes(model: ModelSpec, par: ParallelSpec) -> int:
    """What one transformer layer's I keeps per microbatch until its W (its weights' output
    gradients; an MoE layer's experts counted once per expert a token visits)."""
    q = model.hidden + 2 * model.kv * (model.hidden // model.heads)
    up = model.token_ffn * (1 if model.arch == "gpt" else 2)
    return transformer_split_backward_bytes(local_seq(model, par), model.micro_batch,
                                            model.hidden, q, up,
                                            par.tp, par.sequence_parallel, par.dtype_bytes)


def deferred_wgrad_bytes(model: ModelSpec, par: ParallelSpec) -> int:
    """What one transformer layer holds per microbatch from its I to its W where the I frees the
    autograd graph (Megatron-LM's zero-bubble runtime): its linears' inputs and output
    gradients (an MoE layer's experts counted once per expert a token visits)."""
    q = model.hidden + 2 * model.kv * (model.hidden // model.heads)
    up = model.token_ffn * (1 if model.arch == "gpt" else 2)
    return transformer_deferred_wgrad_bytes(local_seq(model, par), model.micro_batch,
                                            model.hidden, q, up,
                                            model.token_ffn, par.tp, par.sequence_parallel,
                                            par.dtype_bytes)


def transient_bytes(model: ModelSpec, par: ParallelSpec) -> tuple[int, int, int, int]:
    """One transformer layer's working memory per microbatch in its F, B, I and W (an MoE
    layer's MLP activation counted once per expert a token visits, its widest weight one
    expert's)."""
    ffn = model.token_ffn
    qkv = model.hidden + 2 * model.kv * (model.hidden // model.heads)
    up = max(model.ffn_size, model.shared_ffn) * (1 if model.arch == "gpt" else 2)
    f, b, i, w = transformer_transient_bytes(local_seq(model, par), model.micro_batch,
                                             model.hidden, model.heads, ffn, par.tp,
                                             par.sequence_parallel,
                                             par.flash_attention, par.dtype_bytes,
                                             widest=max(qkv, up))
    if par.op_recompute:
        # the backward re-runs the layer's forward: what it recomputes is held while it runs
        again = activation_bytes(model, replace(par, op_recompute=False)) \
            - activation_bytes(model, par)
        b, i = b + again, i + again
    return f, b, i, w


def loss_bytes(model: ModelSpec, par: ParallelSpec) -> tuple[int, int, int]:
    """What the last stage's loss keeps per microbatch until its backward and holds above that
    in its forward and backward, over this rank's logits (its b·s/cp tokens x the padded
    vocabulary over TP: Megatron's vocab-parallel loss, torchtitan's loss parallel)
    (:func:`.activations.loss_memory_bytes`)."""
    logits = layer_ops.tokens(model, par) * (padded_vocab(model, par) // par.tp)
    return loss_memory_bytes(logits, par.dtype_bytes, par.runtime, par.cross_entropy_fusion)


def cp_ring(model: ModelSpec, par: ParallelSpec, gpu: GPUPreset,
            efficiency: float | None = None) -> tuple[int, int, int] | None:
    """Context parallelism's ring as the header states it (``cp_kv_bytes``, ``cp_fwd_step_ns``,
    ``cp_bwd_step_ns``): the K and V bytes a rank sends each step and one step's attention
    forward and backward on ``gpu`` (the flash kernels' time over cp steps); None at cp 1."""
    if par.cp < 2 or not par.flash_attention:
        return None
    steps = []
    for ops in layer_ops.cp_step_ops(model, par):
        if efficiency is not None:
            ns = sum(gpu.time_ns(o.flops, efficiency) for o in ops)
        else:
            ns = sum(price(o, kernel_preset(gpu.key)).ns for o in ops)
        steps.append(ns // par.cp)
    return layer_ops.cp_kv_bytes(model, par), steps[0], steps[1]


def header_line(model: ModelSpec, par: ParallelSpec, layout: str,
                defaulted: tuple[str, ...] = (),
                ring: tuple[int, int, int] | None = None) -> str:
    """Line 1; ``defaulted``: the ``option=value`` pairs generate filled in (a run warns);
    ``ring``: context parallelism's (:func:`cp_ring`)."""
    vpp = par.vpp if layout == "model" else model.layers // par.pp
    filled = f" generated_defaults: {','.join(defaulted)}" if defaulted else ""
    return (f"{POLICY}\tmodel_parallel_NPU_group: {par.tp} ep: {par.ep} pp: {par.pp} "
            f"vpp: {vpp} ga: {par.ga} all_gpus: {par.world} checkpoints: 0 "
            f"checkpoint_initiates: 0 pp_comm: {pp_comm_bytes(model, par)} "
            f"activation_bytes: {activation_bytes(model, par)} "
            f"split_backward_bytes: {split_backward_bytes(model, par)} "
            f"deferred_wgrad_bytes: {deferred_wgrad_bytes(model, par)} "
            + "".join(f"{kind}_transient_bytes: {n} "
                      for kind, n in zip("fbiw", transient_bytes(model, par)))
            + "".join(f"loss_{what}_bytes: {n} "
                      for what, n in zip(("keeps", "f_transient", "b_transient"),
                                         loss_bytes(model, par)))
            + f"grad_bytes_per_param: {FP32} "
            + (f"embedding_sync_params: {embedding_sync_params(model, par)} "
               if model.tied_embeddings else "")
            + (f"cp: {par.cp} cp_kv_bytes: {ring[0]} cp_fwd_step_ns: {ring[1]} "
               f"cp_bwd_step_ns: {ring[2]} " if ring else "")
            + (f"etp: {par.expert_tp} " if par.expert_tp != par.tp else "")
            + f"layout: {layout}{filled}")


def embedding_sync_params(model: ModelSpec, par: ParallelSpec) -> int:
    """The tied word embedding's parameters on one TP rank (the padded vocab / T x h, the table
    the embedding row holds): the first stage's table and the last stage's LM head copy, whose
    gradients Megatron-LM all-reduces over the embedding group (``finalize_model_grads``) when
    the pipeline has more than one stage."""
    return layer_ops.embedding_table_params(model, par, padded_vocab(model, par))


def render(model: ModelSpec, par: ParallelSpec, gpu: GPUPreset, layout: str = "model",
           efficiency: float | None = None, defaulted: tuple[str, ...] = ()) -> str:
    """The workload file's text (tab-separated, SimAI's column order, update_time 0);
    ``defaulted`` names the options the caller filled in (``generated_defaults:``)."""
    if efficiency is not None and not 0 < efficiency <= 1:
        raise ConfigError(f"--efficiency: expected a number in (0, 1], found {efficiency}")
    if par.fp8:
        if efficiency is not None:
            raise ConfigError("--efficiency: the flat model prices every FLOP alike; FP8 "
                              "(--fp8-format) needs the kernel model")
        if not kernel_preset(gpu.key).fp8_tflops:
            raise ConfigError(f"--fp8-format: the {gpu.key} preset has no FP8 tensor cores "
                              "(expected h100 or h200)")
    ring = cp_ring(model, par, gpu, efficiency) if layout == "model" else None
    return render_rows(header_line(model, par, layout, defaulted, ring),
                       generate_rows(model, par, layout), gpu, efficiency)


def row_compute_ns(row: RowSpec, gpu: GPUPreset,
                   efficiency: float | None = None) -> tuple[int, int, int]:
    """A row's (forward, input-grad, weight-grad) compute ns on ``gpu``: the sum of its kernels'
    times (:mod:`.kernels`), or, with ``efficiency``, its FLOPs over that fraction of the
    preset's dense peak (one constant for every op, the model before kernels)."""
    if efficiency is not None:
        return tuple(gpu.time_ns(x, efficiency) for x in (row.fwd_flops, row.ig_flops,
                                                          row.wg_flops))
    return row_times(row.ops, kernel_preset(gpu.key))[0]


def render_rows(header: str, rows: list[RowSpec], gpu: GPUPreset,
                efficiency: float | None = None) -> str:
    """A header and ``rows`` as the workload file's text, each row timed on ``gpu``."""
    lines = [header, str(len(rows))]
    memo: dict = {}
    for r in rows:
        key = (r.name, r.fwd_flops, r.ig_flops, r.wg_flops, r.ops)
        t = memo.get(key)
        if t is None:
            t = memo[key] = row_compute_ns(r, gpu, efficiency)
            big = max((*t, r.fwd_comm[1], r.ig_comm[1], r.wg_comm[1]))
            if big >= 2**63:
                # a shape whose row the workload format cannot hold is refused here, naming
                # the shape, not as a bad line of the file it would have written
                raise ConfigError(f"the model is too large to price: its {r.name} row comes "
                                  f"to {big:.3g} ns or bytes, above the format's 2^63 (expected "
                                  "a smaller --hidden, --vocab, --ffn, --seq or --micro-batch)")
        lines.append("\t".join(str(x) for x in (
            r.name, -1, t[0], r.fwd_comm[0], r.fwd_comm[1], t[1], r.ig_comm[0], r.ig_comm[1],
            t[2], r.wg_comm[0], r.wg_comm[1], 0)))
    return "\n".join(lines) + "\n"
