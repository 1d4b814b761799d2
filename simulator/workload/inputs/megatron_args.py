"""A Megatron-LM argument list (``megatron/training/arguments.py``'s names, defaults and checks)
as the model's shape and the launch's settings.

The file is one shell line or one argument per line, ``#`` starting a comment (what
``--launch`` writes as ``megatron_args.txt``). A flag left out takes Megatron-LM's default; a
flag pipesim does not model is a warning naming it; what Megatron-LM itself would refuse (the
batch not divisible by micro x dp, layers not divisible by the stages, heads by TP, two
precisions, ...) is refused in one line naming the file, the flag and what was expected.

Derived as Megatron-LM derives them: ``--ffn-hidden-size`` 4h, or with ``--swiglu``
int(4h x 2/3 / 64) x 64; dp = world / (tp x pp); ``--global-batch-size`` micro x dp; the
microbatches global / (micro x dp); the virtual stages (layers [+1 embedding] [+1 loss]) / pp /
``--num-layers-per-virtual-pipeline-stage``; sequence parallelism off at TP 1.
"""

from __future__ import annotations

import math
import shlex

from ...errors import ConfigError
from ._files import read_text
from ..generator import cp_exchange_warning
from .shape import LaunchSettings, ModelInput, ModelShape
from .zero_bubble_fork import ZB_V_SCHEDULES, padded_counts

OPTION = "--megatron-args"

INT, FLOAT, STR, FLAG, LIST = "int", "float", "str", "flag", "list"
# the integers Megatron-LM takes 0 for: no layers recomputed; a manual garbage collection never
ZERO_ALLOWED = frozenset(("--recompute-num-layers", "--manual-gc-interval"))
# the flags pipesim reads: name -> kind (choices for STR)
READ: dict[str, tuple[str, tuple[str, ...]]] = {
    "--num-layers": (INT, ()), "--hidden-size": (INT, ()), "--ffn-hidden-size": (INT, ()),
    "--num-attention-heads": (INT, ()), "--group-query-attention": (FLAG, ()),
    "--num-query-groups": (INT, ()), "--swiglu": (FLAG, ()), "--kv-channels": (INT, ()),
    "--clip-grad": (FLOAT, ()), "--attention-dropout": (FLOAT, ()),
    "--hidden-dropout": (FLOAT, ()),
    "--normalization": (STR, ("LayerNorm", "RMSNorm")),
    "--untie-embeddings-and-output-weights": (FLAG, ()), "--vocab-size": (INT, ()),
    "--num-experts": (INT, ()), "--moe-router-topk": (INT, ()),
    "--moe-ffn-hidden-size": (INT, ()), "--moe-grouped-gemm": (FLAG, ()),
    "--moe-token-dispatcher-type": (STR, ("allgather", "alltoall", "flex")),
    "--expert-model-parallel-size": (INT, ()), "--expert-tensor-parallel-size": (INT, ()),
    "--seq-length": (INT, ()),
    "--max-position-embeddings": (INT, ()), "--micro-batch-size": (INT, ()),
    "--global-batch-size": (INT, ()), "--tensor-model-parallel-size": (INT, ()),
    "--pipeline-model-parallel-size": (INT, ()),
    "--num-layers-per-virtual-pipeline-stage": (INT, ()),
    "--num-virtual-stages-per-pipeline-rank": (INT, ()),
    "--decoder-first-pipeline-num-layers": (INT, ()),
    "--decoder-last-pipeline-num-layers": (INT, ()),
    "--account-for-embedding-in-pipeline-split": (FLAG, ()),
    "--account-for-loss-in-pipeline-split": (FLAG, ()),
    "--sequence-parallel": (FLAG, ()),
    "--recompute-granularity": (STR, ("full", "selective")),
    "--recompute-modules": (LIST, ()),
    "--recompute-activations": (FLAG, ()), "--checkpoint-activations": (FLAG, ()),
    "--recompute-method": (STR, ("uniform", "block")), "--recompute-num-layers": (INT, ()),
    "--fp16": (FLAG, ()), "--bf16": (FLAG, ()), "--use-distributed-optimizer": (FLAG, ()),
    "--overlap-grad-reduce": (FLAG, ()), "--overlap-param-gather": (FLAG, ()),
    "--tp-comm-overlap": (FLAG, ()), "--use-flash-attn": (FLAG, ()),
    "--transformer-impl": (STR, ("transformer_engine", "local", "inference_optimized")),
    "--use-mcore-models": (FLAG, ()), "--use-legacy-models": (FLAG, ()),
    "--fp8-format": (STR, ("e4m3", "hybrid")),
    "--fp8-recipe": (STR, ("delayed", "tensorwise", "blockwise", "mxfp8", "custom")),
    "--no-overlap-p2p-communication": (FLAG, ()),
    "--grad-reduce-in-bf16": (FLAG, ()), "--accumulate-allreduce-grads-in-fp32": (FLAG, ()),
    "--ddp-bucket-size": (INT, ()), "--no-gradient-accumulation-fusion": (FLAG, ()),
    "--distributed-backend": (STR, ("nccl", "gloo")),
    "--make-vocab-size-divisible-by": (INT, ()), "--no-rope-fusion": (FLAG, ()),
    "--rotary-percent": (FLOAT, ()),
    "--attention-softmax-in-fp32": (FLAG, ()), "--no-masked-softmax-fusion": (FLAG, ()),
    "--apply-query-key-layer-scaling": (FLAG, ()),
    "--attention-backend": (STR, ("flash", "fused", "unfused", "local", "auto")),
    "--disable-bias-linear": (FLAG, ()), "--add-bias-linear": (FLAG, ()),
    "--position-embedding-type": (STR, ("learned_absolute", "rope", "yarn", "mrope",
                                        "relative", "none")),
    "--context-parallel-size": (INT, ()), "--pipeline-model-parallel-layout": (STR, ()),
    "--use-tp-pp-dp-mapping": (FLAG, ()),
    "--log-num-zeros-in-grad": (FLAG, ()), "--log-params-norm": (FLAG, ()),
    "--no-bias-gelu-fusion": (FLAG, ()), "--calculate-per-token-loss": (FLAG, ()),
    "--cross-entropy-loss-fusion": (FLAG, ()), "--manual-gc": (FLAG, ()),
    "--manual-gc-interval": (INT, ()), "--no-manual-gc-eval": (FLAG, ()),
    "--deterministic-mode": (FLAG, ()),
    "--rerun-mode": (STR, ("disabled", "validate_results", "report_stats")),
    "--cross-entropy-fusion-impl": (STR, ("native", "te")),
    "--moe-shared-expert-intermediate-size": (INT, ()),
    "--moe-shared-expert-overlap": (FLAG, ()),
    "--moe-router-dtype": (STR, ("fp32", "fp64")),
    "--no-position-embedding": (FLAG, ()),
    # the zero-bubble fork of Megatron-LM (sail-sg/zero-bubble-pipeline-parallelism)
    "--enable-zero-bubble": (FLAG, ()), "--zero-bubble-v-schedule": (FLAG, ()),
    "--zero-bubble-v-schedule-mem-setup": (STR, tuple(ZB_V_SCHEDULES)),
    "--zero-bubble-max-pending-backward": (STR, ()),
    "--enable-optimizer-post-validation": (FLAG, ()), "--allow-padding-num-layers": (FLAG, ()),
}


# flags that change nothing of one iteration's time or memory, by what they do: the learning
# rate and its schedule, the optimizer's coefficients, the run's length, the data and the
# tokenizer (read by the data loader's workers), logging, evaluation and checkpoints, the
# initialisation; RoPE's base (its kernels are the same). Named in a note, not a warning: --strict does not refuse a real launch file
# for its --lr
NO_EFFECT = frozenset((
    "--lr", "--min-lr", "--lr-decay-style", "--lr-decay-iters", "--lr-decay-samples",
    "--lr-warmup-fraction", "--lr-warmup-iters", "--lr-warmup-samples", "--lr-warmup-init",
    "--decoupled-lr", "--decoupled-min-lr", "--weight-decay", "--weight-decay-incr-style",
    "--start-weight-decay", "--end-weight-decay", "--adam-beta1", "--adam-beta2", "--adam-eps",
    "--init-method-std", "--seed", "--train-iters", "--train-samples",
    "--exit-duration-in-mins", "--exit-interval", "--data-path", "--split", "--vocab-file",
    "--merge-file", "--tokenizer-type", "--tokenizer-model", "--mock-data", "--data-cache-path",
    "--num-workers", "--log-interval", "--save", "--load", "--save-interval",
    "--eval-interval", "--eval-iters", "--tensorboard-dir", "--wandb-project",
    "--wandb-exp-name", "--wandb-save-dir", "--no-load-optim", "--no-load-rng",
    "--log-throughput", "--timing-log-level", "--distributed-timeout-minutes",
    "--rotary-base", "--apply-layernorm-1p",
    # the zero-bubble fork's profiling window for its scheduler (pipesim is given the times)
    "--zero-bubble-pipeline-timers-start-iter", "--zero-bubble-pipeline-timers-end-iter",
    # the tokenizer and how the data files are read (by the loader's workers), the profilers'
    # windows (the steps outside them run unprofiled), the logger, the checkpoint format,
    # Transformer Engine's FP8 scaling history (the same GEMMs and casts): flags of
    # Megatron-LM's examples/llama/train_llama3_8b_h100_fp8.sh among them
    "--tiktoken-pattern", "--no-mmap-bin-files", "--profile", "--profile-step-start",
    "--profile-step-end", "--profile-ranks", "--use-pytorch-profiler", "--logging-level",
    "--tensorboard-log-interval", "--log-timers-to-tensorboard", "--moe-per-layer-logging",
    "--ckpt-format", "--fp8-amax-history-len", "--fp8-amax-compute-algo",
    # checkpoints (written every --save-interval, read at start: megatron/training/checkpointing.py),
    # what the logger writes at its intervals (training_log's tensorboard block: memory stats,
    # validation perplexity) and the progress file, evaluation's batch, the data loader's
    # workers (fill-in-the-middle, the attention mask it builds), the weights' hash check every
    # N iterations, RoPE's frequency scaling constants and the norms' epsilon: flags of
    # Megatron-LM's own functional-test launches (tests/functional_tests/test_cases)
    "--dist-ckpt-strictness", "--async-save", "--use-persistent-ckpt-worker",
    "--dist-ckpt-optim-fully-reshardable", "--use-checkpoint-args", "--auto-detect-ckpt-format",
    "--ckpt-fully-parallel-load", "--ckpt-fully-parallel-save", "--no-ckpt-fully-parallel-save",
    "--ckpt-assume-constant-structure", "--async-ckpt-use-cpu-shm", "--finetune",
    "--no-use-tokenizer-model-from-checkpoint-args", "--log-memory-to-tensorboard",
    "--log-validation-ppl-to-tensorboard", "--log-progress", "--eval-global-batch-size",
    "--fim-rate", "--fim-spm-rate", "--fim-data", "--no-create-attention-mask-in-dataloader",
    "--check-weight-hash-across-dp-replicas-interval", "--rotary-scaling-factor", "--mscale",
    "--mscale-all-dim", "--norm-epsilon", "--moe-aux-loss-coeff",
))


# what selective recompute may re-run (megatron/core/transformer/transformer_config.py's
# recompute_modules; ["core_attn"] when not given)
RECOMPUTE_MODULES = frozenset(("core_attn", "moe_act", "layernorm", "mla_up_proj", "mlp", "moe",
                               "shared_experts", "gdn_norm_out", "gdp_in_proj", "gdp_qkv", "mhc"))

# the global batch's ramp or schedule over the run (megatron/core/num_microbatches_calculator.py):
# the iteration pipesim times is one at --global-batch-size
BATCH_RAMPS = frozenset(("--rampup-batch-size", "--step-batch-size-schedule"))


def _tokens(text: str, path: str) -> list[str]:
    try:
        return shlex.split(text, comments=True)
    except ValueError as err:
        raise ConfigError(f"{OPTION} {path}: expected shell words ({err})") from None


def _looks_like_value(tok: str) -> bool:
    if not tok.startswith("-"):
        return True
    try:
        float(tok)
        return True
    except ValueError:
        return False


def _shown(value: object) -> object:
    """A flag's value as the line gives it (a list flag's words joined)."""
    return " ".join(value) if isinstance(value, tuple) else value


def parse_args(text: str, path: str) -> tuple[dict[str, object], list[str]]:
    """{flag: value} of the flags pipesim reads (flags True), and the other flags in order."""
    values: dict[str, object] = {}
    other: list[str] = []
    toks = _tokens(text, path)
    i = 0
    while i < len(toks):
        tok = toks[i]
        i += 1
        if not tok.startswith("--"):
            if not other:     # a launcher word before the first flag (python pretrain_gpt.py)
                raise ConfigError(f"{OPTION} {path}: {tok!r}: expected a --flag (Megatron-LM's "
                                  "arguments, one shell line or one per line)")
            continue          # a value of a flag pipesim does not read
        name, eq, inline = tok.partition("=")
        if name not in READ:
            other.append(name)
            if eq:
                continue
            while i < len(toks) and _looks_like_value(toks[i]):
                i += 1
            continue
        kind, choices = READ[name]
        if kind == LIST:     # argparse's nargs="*": the words up to the next flag
            words = [inline] if eq else []
            while not eq and i < len(toks) and _looks_like_value(toks[i]):
                words.append(toks[i])
                i += 1
            value = tuple(words)
        elif kind == FLAG:
            if eq:
                raise ConfigError(f"{OPTION} {path}: {name}: expected no value (a switch), "
                                  f"found {inline!r}")
            value: object = True
        else:
            if eq:
                word = inline
            elif i < len(toks) and _looks_like_value(toks[i]):
                word = toks[i]
                i += 1
            else:
                raise ConfigError(f"{OPTION} {path}: {name}: expected a value, found none")
            if kind in (INT, FLOAT):
                cast, what, bound = ((int, "an integer", "a positive integer") if kind == INT
                                     else (float, "a number", "a non-negative number"))
                try:
                    value = cast(word)
                except ValueError:
                    raise ConfigError(f"{OPTION} {path}: {name}: expected {what}, found "
                                      f"{word!r}") from None
                low = 1 if kind == INT and name not in ZERO_ALLOWED else 0
                if kind == INT and not low:
                    bound = "an integer >= 0"
                if not value >= low:
                    raise ConfigError(f"{OPTION} {path}: {name}: expected {bound}, found "
                                      f"{value if kind == INT else word}")
            else:
                if choices and word not in choices:
                    raise ConfigError(f"{OPTION} {path}: {name}: expected one of "
                                      f"{', '.join(choices)}, found {word!r}")
                value = word
        if name in values and values[name] != value:
            raise ConfigError(f"{OPTION} {path}: {name}: given twice ({_shown(values[name])} "
                              f"and {_shown(value)}); expected one value")
        values[name] = value
    return values, other


def read_megatron_args(path: str, gpus: int | None = None) -> ModelInput:
    """The shape and launch of a Megatron-LM argument file; ``gpus`` is the world size
    (``--gpus``; Megatron takes it from the launcher)."""
    return megatron_input(read_text(path, OPTION), path, gpus)


def megatron_input(text: str, path: str, gpus: int | None = None) -> ModelInput:
    a, other = parse_args(text, path)
    warnings: list[str] = []
    notes: list[str] = []
    src = f"{OPTION} {path}"

    def refuse(flag: str, expected: str, found: object = None) -> None:
        tail = "" if found is None else f", found {found}"
        raise ConfigError(f"{src}: {flag}: expected {expected}{tail}")

    def need(flag: str, what: str) -> int:
        if flag not in a:
            refuse(flag, f"{what} (Megatron-LM requires it)", "none")
        return a[flag]   # type: ignore[return-value]

    layers = need("--num-layers", "the transformer layers")
    hidden = need("--hidden-size", "the hidden size")
    heads = need("--num-attention-heads", "the attention heads")
    seq = need("--seq-length", "the sequence length")
    micro = need("--micro-batch-size", "the sequences per microbatch")
    if hidden % heads:
        refuse("--hidden-size", f"a multiple of --num-attention-heads {heads}", hidden)
    max_pos = a.get("--max-position-embeddings")
    if max_pos is not None and max_pos < seq:
        refuse("--max-position-embeddings", f"at least --seq-length {seq}", max_pos)
    swiglu = bool(a.get("--swiglu"))
    experts = a.get("--num-experts")
    norm = a.get("--normalization", "LayerNorm")
    if "--ffn-hidden-size" in a:
        ffn = a["--ffn-hidden-size"]
    else:
        ffn = int((4 * hidden * 2 / 3) / 64) * 64 if swiglu else 4 * hidden
        notes.append(f"{src}: --ffn-hidden-size {ffn} (Megatron-LM's default: "
                     + ("int(4h x 2/3 / 64) x 64 with --swiglu)" if swiglu else "4h)"))
    kv = None
    if a.get("--group-query-attention"):
        kv = a.get("--num-query-groups", 1)
        if heads % kv:
            refuse("--num-query-groups", f"a divisor of --num-attention-heads {heads}", kv)
    elif "--num-query-groups" in a:
        warnings.append(f"{src}: --num-query-groups: ignored without --group-query-attention "
                        "(as Megatron-LM does): every head has its own keys and values")
    arch = "moe" if experts else "llama" if swiglu else "gpt"
    topk = a.get("--moe-router-topk", 2)
    shared_ffn = 0
    router_fp32 = False
    if not experts:
        for flag in ("--moe-router-topk", "--moe-ffn-hidden-size", "--moe-grouped-gemm",
                     "--moe-token-dispatcher-type", "--moe-shared-expert-intermediate-size",
                     "--moe-shared-expert-overlap", "--moe-router-dtype"):
            if flag in a:
                value = "" if a[flag] is True else f" {a[flag]}"
                warnings.append(f"{src}: {flag}{value}: ignored without --num-experts (a "
                                "dense model)")
    if experts:
        if topk > experts:
            refuse("--moe-router-topk", f"at most --num-experts {experts}", topk)
        # the moe rows price what these two flags choose (workload/generator.py, layer_ops):
        # tokens sent to their experts' ranks and back by all-to-all over EP, and each
        # projection of the rank's experts as one batched GEMM; Megatron-LM's defaults are
        # the allgather dispatcher and SequentialMLP (one expert's GEMMs after another)
        dispatcher = a.get("--moe-token-dispatcher-type")
        if dispatcher == "alltoall":
            notes.append(f"{src}: --moe-token-dispatcher-type alltoall: the tokens dispatched "
                         "and combined by all-to-all over the expert-parallel group, as priced")
        else:
            given = (f" {dispatcher}" if dispatcher is not None
                     else " absent: Megatron-LM's default allgather")
            warnings.append(f"{src}: --moe-token-dispatcher-type{given}; pipesim prices the "
                            "alltoall dispatcher's all-to-all over the expert-parallel group")
        if a.get("--moe-grouped-gemm"):
            notes.append(f"{src}: --moe-grouped-gemm: each projection of the rank's experts "
                         "one grouped GEMM, as priced")
        else:
            warnings.append(f"{src}: --moe-grouped-gemm absent: Megatron-LM runs the rank's "
                            "experts one after another (SequentialMLP); pipesim prices each "
                            "projection of them as one batched GEMM")
        if "--moe-ffn-hidden-size" in a:
            ffn = a["--moe-ffn-hidden-size"]
        shared_ffn = a.get("--moe-shared-expert-intermediate-size", 0)
        if shared_ffn < 0:
            refuse("--moe-shared-expert-intermediate-size", "a positive integer", shared_ffn)
        if a.get("--moe-shared-expert-overlap"):
            if not shared_ffn:
                notes.append(f"{src}: --moe-shared-expert-overlap: no shared experts to overlap "
                             "(no --moe-shared-expert-intermediate-size)")
            else:
                warnings.append(f"{src}: --moe-shared-expert-overlap: the shared experts run "
                                "before the routed ones on the compute stream, not beside the "
                                "token dispatch's all-to-all")
        # the router's GEMM in a wider dtype (moe/router.py gating, moe_utils.py
        # RouterGatingLinearFunction): with Transformer Engine (Megatron-Core's default) one
        # general GEMM reads the 16-bit input and weight and writes fp32 logits, b·s x E, the
        # dtype changing only that small output; without it, or in fp64, torch.mm in that dtype
        router_dtype = a.get("--moe-router-dtype")
        if router_dtype is not None:
            if router_dtype == "fp32" and a.get("--transformer-impl") in (None,
                                                                         "transformer_engine"):
                router_fp32 = True
                notes.append(f"{src}: --moe-router-dtype fp32: the router's forward GEMM reads "
                             "its 16-bit operands and writes fp32 logits, its backward's two "
                             "GEMMs run in fp32 (Transformer Engine's general GEMM)")
            else:
                warnings.append(f"{src}: --moe-router-dtype {router_dtype}: the router's GEMM "
                                f"runs in {router_dtype} (torch.mm), priced as a 16-bit one")
        if not swiglu:
            warnings.append(f"{src}: --swiglu absent: the moe model's experts are SwiGLU (gate "
                            "and up projections), priced as such")
    if arch == "gpt":
        if norm == "RMSNorm":
            warnings.append(f"{src}: --normalization RMSNorm: the gpt model (GELU MLP) writes "
                            "LayerNorm (one more vector of parameters per norm)")
        if kv is not None and kv != heads:
            warnings.append(f"{src}: --group-query-attention: the gpt model (GELU MLP) has "
                            f"full multi-head attention; {kv} query groups are priced as "
                            f"{heads} key/value heads")
        if a.get("--disable-bias-linear"):
            warnings.append(f"{src}: --disable-bias-linear: the gpt model writes linear biases")
    else:
        if norm == "LayerNorm":
            warnings.append(f"{src}: --normalization LayerNorm (Megatron-LM's default): the "
                            f"{arch} model writes RMSNorm (one vector fewer per norm)")
        if not a.get("--disable-bias-linear"):
            warnings.append(f"{src}: --disable-bias-linear absent: Megatron-LM adds linear "
                            f"biases by default; the {arch} model writes none")
    vocab = a.get("--vocab-size")
    divisor = a.get("--make-vocab-size-divisible-by", 128)
    if divisor < 1:
        refuse("--make-vocab-size-divisible-by", "a positive integer", divisor)
    if vocab is None:
        warnings.append(f"{src}: --vocab-size absent: Megatron-LM takes it from the tokenizer; "
                        "pipesim uses " + ("50257 (GPT-2's)" if arch == "gpt" else "32000"))
    tied = not a.get("--untie-embeddings-and-output-weights")
    if tied:
        warnings.append(f"{src}: --untie-embeddings-and-output-weights absent: the LM head "
                        "shares the embedding's weights (Megatron-LM's default); pipesim counts "
                        "them apart, as the last stage's copy at pp > 1")
    shape = ModelShape(arch, layers, hidden, heads, ffn=ffn, vocab=vocab, kv_heads=kv,
                       experts=experts or 1, topk=topk if experts else 2,
                       tied_embeddings=tied, max_positions=max_pos, shared_ffn=shared_ffn)

    # -- parallelism ------------------------------------------------------------------------
    tp = a.get("--tensor-model-parallel-size", 1)
    pp = a.get("--pipeline-model-parallel-size", 1)
    ep = a.get("--expert-model-parallel-size", 1)
    cp = a.get("--context-parallel-size", 1)
    if heads % tp:
        refuse("--num-attention-heads", f"a multiple of --tensor-model-parallel-size {tp}",
               heads)
    if kv is not None and kv % tp and tp % kv:
        refuse("--num-query-groups", f"a multiple or divisor of --tensor-model-parallel-size "
               f"{tp}", kv)
    etp = a.get("--expert-tensor-parallel-size", tp)   # Megatron-LM's default: tp
    if etp < 1:
        refuse("--expert-tensor-parallel-size", "a positive integer", etp)
    if not experts and etp != tp:
        notes.append(f"{src}: --expert-tensor-parallel-size {etp}: no experts to split (a "
                     "dense model); it changes nothing")
        etp = tp
    if ep > 1 and not experts:
        refuse("--expert-model-parallel-size", "1 without --num-experts", ep)
    if experts and experts % ep:
        refuse("--num-experts", f"a multiple of --expert-model-parallel-size {ep}", experts)
    if cp < 1:
        refuse("--context-parallel-size", "a positive integer", cp)
    if cp > 1:
        warnings.append(cp_exchange_warning(f"{src}: --context-parallel-size {cp}", cp))
    if gpus is None:
        # the fewest data-parallel ranks the experts' grid allows (1 for a dense model)
        dp = math.lcm(tp * cp, etp * ep) // (tp * cp) if experts else 1
        warnings.append(f"{src}: no --gpus: Megatron-LM takes the world size from the "
                        f"launcher; pipesim assumes tp x pp"
                        + (f" x cp" if cp > 1 else "") + (f" x dp {dp}" if dp > 1 else "")
                        + f" = {tp * pp * cp * dp} GPUs (dp {dp}"
                        + (", the fewest the experts' grid allows)" if dp > 1 else ")"))
    else:
        if gpus % (tp * pp * cp):
            raise ConfigError(f"{src}: --gpus {gpus}: expected a multiple of "
                              f"--tensor-model-parallel-size {tp} x "
                              f"--pipeline-model-parallel-size {pp}"
                              + (f" x --context-parallel-size {cp}" if cp > 1 else ""))
        dp = gpus // (tp * pp * cp)
    if experts:
        # Megatron-LM's expert grid (parallel_state.initialize_model_parallel): the world in
        # ETP x EP x expert-DP x PP, refused (RuntimeError) where ETP x EP x PP does not divide it
        world = tp * cp * dp * pp
        if world % (etp * ep * pp):
            refuse("--expert-model-parallel-size", f"a size whose product with "
                   f"--expert-tensor-parallel-size {etp} x --pipeline-model-parallel-size {pp} "
                   f"divides the world's {world} GPUs (Megatron-LM's expert grid)", ep)
        if ffn % etp:
            refuse("--expert-tensor-parallel-size", f"a divisor of the experts' FFN size {ffn}",
                   etp)
    # the ranks' order (megatron/training/initialize.py): tp-cp-ep-dp-pp, or tp-cp-ep-pp-dp
    # with the flag, where parallel_state asserts that the experts' data-parallel size is the
    # dense layers' once there is a pipeline (ETP x EP = TP x CP)
    rank_order = "tp-pp-dp" if a.get("--use-tp-pp-dp-mapping") else "tp-dp-pp"
    if rank_order == "tp-pp-dp" and experts and pp > 1 and etp * ep != tp * cp:
        refuse("--use-tp-pp-dp-mapping", f"--expert-tensor-parallel-size x "
               f"--expert-model-parallel-size equal to --tensor-model-parallel-size"
               + (" x --context-parallel-size" if cp > 1 else "")
               + f" {tp * cp} with a pipeline (Megatron-LM's rule: the experts' data-parallel "
               "size the dense layers' when the pipeline is not the outermost dimension)",
               f"{etp} x {ep}")
    gbs = a.get("--global-batch-size")
    if gbs is None:
        gbs = micro * dp
        notes.append(f"{src}: --global-batch-size {gbs} (Megatron-LM's default: "
                     "--micro-batch-size x dp)")
    if gbs % (micro * dp):
        refuse("--global-batch-size", f"a multiple of --micro-batch-size {micro} x dp {dp} = "
               f"{micro * dp}", gbs)
    microbatches = gbs // (micro * dp)

    # -- stages -------------------------------------------------------------------------------
    first = a.get("--decoder-first-pipeline-num-layers")
    last = a.get("--decoder-last-pipeline-num-layers")
    emb = bool(a.get("--account-for-embedding-in-pipeline-split"))
    loss = bool(a.get("--account-for-loss-in-pipeline-split"))
    per_vstage = a.get("--num-layers-per-virtual-pipeline-stage")
    vstages = a.get("--num-virtual-stages-per-pipeline-rank")
    if "--virtual-pipeline-model-parallel-size" in other:
        # the interleaved schedule's first flag (dd88906264, 2020), renamed two months later
        # (dcef906978); Megatron-LM's argparse refuses it, and read as unknown it would run
        # the launch as 1F1B with a warning
        raise ConfigError(f"{src}: --virtual-pipeline-model-parallel-size: not a flag of "
                          "Megatron-LM since February 2021 (it refuses it); expected "
                          "--num-layers-per-virtual-pipeline-stage N or, since 2025, "
                          "--num-virtual-stages-per-pipeline-rank N")
    if per_vstage is not None and vstages is not None:
        refuse("--num-virtual-stages-per-pipeline-rank", "not together with "
               "--num-layers-per-virtual-pipeline-stage (Megatron-LM takes one)", vstages)
    if (first is not None or last is not None) and (emb or loss):
        refuse("--decoder-first-pipeline-num-layers" if first is not None else
               "--decoder-last-pipeline-num-layers", "not together with "
               "--account-for-embedding/loss-in-pipeline-split (Megatron-LM takes one)",
               first if first is not None else last)
    counted = layers + emb + loss
    vpp = 1
    layout = a.get("--pipeline-model-parallel-layout")
    counts = None
    if layout is not None:
        if per_vstage is not None or vstages is not None or first is not None or \
                last is not None or emb or loss:
            refuse("--pipeline-model-parallel-layout", "no other layer-placement flag with it "
                   "(Megatron-LM's rule)", layout)
        counts = _layout_counts(layout, src)
        if len(counts) % pp:
            refuse("--pipeline-model-parallel-layout", f"a stage count divisible by "
                   f"--pipeline-model-parallel-size {pp}", f"{len(counts)} stages")
        if sum(counts) != layers:
            refuse("--pipeline-model-parallel-layout", f"the {layers} layers of --num-layers",
                   f"{sum(counts)}")
        vpp = len(counts) // pp
    elif per_vstage is not None:
        if first is not None or last is not None:
            refuse("--num-layers-per-virtual-pipeline-stage", "--num-virtual-stages-per-"
                   "pipeline-rank with uneven first/last stages (Megatron-LM's rule)",
                   per_vstage)
        if counted % pp:
            refuse("--num-layers", f"layers{' + embedding' if emb else ''}"
                   f"{' + loss' if loss else ''} divisible by --pipeline-model-parallel-size "
                   f"{pp}", layers)
        if (counted // pp) % per_vstage:
            refuse("--num-layers-per-virtual-pipeline-stage", f"a divisor of the "
                   f"{counted // pp} layers per pipeline stage", per_vstage)
        vpp = counted // pp // per_vstage
        notes.append(f"{src}: {vpp} virtual stage(s) per rank ({counted // pp} layers per "
                     f"stage / {per_vstage})")
    elif vstages is not None:
        vpp = vstages
    if vpp > 1 and pp < 2:
        refuse("--pipeline-model-parallel-size", "more than 1 with virtual stages", pp)
    padding = bool(a.get("--allow-padding-num-layers")) and layers % pp > 0
    if padding and (layout is not None or per_vstage is not None or vstages is not None
                    or first is not None or last is not None or emb or loss):
        refuse("--allow-padding-num-layers", "no other layer-placement flag with it (the "
               "zero-bubble fork places the layers itself)", layers)
    if counts is not None or padding:
        pass
    elif first is None and last is None:
        if counted % (pp * vpp):
            refuse("--num-layers", f"layers{' + embedding' if emb else ''}"
                   f"{' + loss' if loss else ''} divisible by --pipeline-model-parallel-size "
                   f"{pp}" + (f" x {vpp} virtual stages" if vpp > 1 else ""), layers)
    else:
        middle_layers, middle = layers, pp
        for flag, n in (("--decoder-first-pipeline-num-layers", first),
                        ("--decoder-last-pipeline-num-layers", last)):
            if n is None:
                continue
            if n % vpp:
                refuse(flag, f"a multiple of the {vpp} virtual stages", n)
            middle_layers -= n
            middle -= 1
        if middle_layers < 0 or bool(middle_layers) != bool(middle) or \
                (middle and middle_layers % (middle * vpp)):
            refuse("--num-layers", f"the layers left after the first/last stages "
                   f"({middle_layers}) divisible over the {middle} middle stage(s)"
                   + (f" x {vpp} virtual stages" if vpp > 1 else ""), layers)

    padded = layers + (pp - layers % pp if padding else 0)
    schedule, vpp, post_validation, pending = _zero_bubble(a, src, pp, vpp, padded, first, last,
                                                           refuse, warnings, notes)
    if padding:
        counts = padded_counts(layers, pp, vpp)
        n = padded - layers
        notes.append(f"{src}: --allow-padding-num-layers: {layers} layers padded to {padded}, "
                     "the padding taken one a chunk off the last"
                     + (" and the first" if n == 2 else f" and the first {n - 1}" if n > 2
                        else "")
                     + f": {' '.join(map(str, counts))} (the zero-bubble fork's get_offset)")

    # -- what runs ------------------------------------------------------------------------------
    if a.get("--fp16") and a.get("--bf16"):
        refuse("--bf16", "not together with --fp16 (one precision)", "both")
    precision = "fp16" if a.get("--fp16") else "bf16" if a.get("--bf16") else "fp32"
    if precision == "fp32":
        warnings.append(f"{src}: neither --fp16 nor --bf16: fp32 training (Megatron-LM's "
                        "default); pipesim's compute times stay the GPU's BF16 roofline")
    # the gradient reduction's dtype, as Megatron-LM's validate_args sets it
    if precision == "bf16":
        grad_dtype = "bf16" if a.get("--grad-reduce-in-bf16") else "fp32"
    elif precision == "fp16":
        grad_dtype = "fp32" if a.get("--accumulate-allreduce-grads-in-fp32") else "fp16"
    else:
        grad_dtype = "fp32"
    if a.get("--grad-reduce-in-bf16") and precision != "bf16":
        refuse("--grad-reduce-in-bf16", "with --bf16 (Megatron-LM reduces in bf16 only then)",
               precision)
    bucket = a.get("--ddp-bucket-size")
    if bucket is not None and not a.get("--overlap-grad-reduce"):
        notes.append(f"{src}: --ddp-bucket-size {bucket}: without --overlap-grad-reduce "
                     "Megatron-LM reduces each chunk as one bucket (the size is not used)")
        bucket = None
    sp = bool(a.get("--sequence-parallel"))
    if sp and tp == 1:
        sp = False
        notes.append(f"{src}: --sequence-parallel: off at --tensor-model-parallel-size 1 (as "
                     "Megatron-LM turns it off)")
    if experts and tp > 1 and not sp:
        # MoELayer.forward raises ValueError in training at TP > 1 without it
        refuse("--sequence-parallel", "with --num-experts at --tensor-model-parallel-size "
               f"{tp} (Megatron-LM's MoE layer refuses to train without it)", "absent")
    if a.get("--tp-comm-overlap") and not sp:
        refuse("--tp-comm-overlap", "--sequence-parallel with it (Megatron-LM's rule)",
               "no sequence parallelism")
    if a.get("--overlap-param-gather"):
        if not a.get("--use-distributed-optimizer"):
            refuse("--overlap-param-gather", "--use-distributed-optimizer with it "
                   "(Megatron-LM's rule)", "none")
        if not a.get("--overlap-grad-reduce"):
            refuse("--overlap-param-gather", "--overlap-grad-reduce with it (Megatron-LM's "
                   "rule)", "none")
    # the attention: Megatron-Core's models run Transformer Engine's (--transformer-impl's
    # default), whose backends (auto picks one) never keep the scores; the local
    # implementation and the legacy models run the unfused core, which keeps them
    backend = a.get("--attention-backend")
    impl = a.get("--transformer-impl")
    if a.get("--use-legacy-models") and a.get("--use-mcore-models"):
        refuse("--use-legacy-models", "not both with --use-mcore-models")
    local = impl == "local" or bool(a.get("--use-legacy-models"))
    core = impl is not None or bool(a.get("--use-mcore-models"))
    if a.get("--use-flash-attn") or backend in ("flash", "fused"):
        flash = True
    elif backend in ("unfused", "local"):
        flash = False
    elif local:
        flash = False
        if backend == "auto":
            notes.append(f"{src}: --attention-backend auto with the local implementation: the "
                         "unfused attention, which keeps its scores")
    elif backend == "auto" or core:
        flash = True
        notes.append(f"{src}: " + ("--attention-backend auto" if backend == "auto" else
                                   "--use-mcore-models" if impl is None else
                                   f"--transformer-impl {impl}")
                     + ": Transformer Engine's attention, a fused kernel that keeps no scores")
    else:
        flash = False
        warnings.append(f"{src}: neither --use-flash-attn nor --attention-backend: the "
                        "attention keeps its scores (unfused, as Megatron-LM before Transformer "
                        "Engine); current Megatron-LM's default backend (auto) picks a fused "
                        "kernel that keeps none")
    if a.get("--checkpoint-activations"):
        raise ConfigError(f"{src}: --checkpoint-activations: no longer valid (Megatron-LM "
                          "refuses it); expected --recompute-activations (selective) or, for "
                          "what it meant in 2021, --recompute-granularity full "
                          "--recompute-method uniform --recompute-num-layers 1")
    gran = a.get("--recompute-granularity")
    if a.get("--recompute-activations"):
        # Megatron-LM's validate_args: --recompute-activations is selective recompute
        if gran == "full":
            refuse("--recompute-activations", "no --recompute-granularity full with it (it "
                   "means selective recompute)", "--recompute-granularity full")
        gran = "selective"
    method = a.get("--recompute-method")
    nrec = a.get("--recompute-num-layers")
    recompute = "none"
    if gran != "selective" and a.get("--recompute-modules") is not None:
        warnings.append(f"{src}: --recompute-modules: ignored without --recompute-granularity "
                        "selective (as Megatron-LM does)")
    if gran is None:
        for flag, val in (("--recompute-method", method), ("--recompute-num-layers", nrec)):
            if val is not None:
                warnings.append(f"{src}: {flag} {val}: ignored without "
                                "--recompute-granularity (as Megatron-LM does)")
    elif gran == "selective":
        if method is not None:
            refuse("--recompute-method", "none with --recompute-granularity selective "
                   "(Megatron-LM's rule)", method)
        if nrec is not None:
            refuse("--recompute-num-layers", "none with --recompute-granularity selective "
                   "(Megatron-LM's rule)", nrec)
        # the generator re-runs the attention core in the backward and keeps no scores:
        # Megatron-LM's default module list (transformer_config.py: ["core_attn"])
        modules = a.get("--recompute-modules")
        unknown = sorted(set(modules or ()) - RECOMPUTE_MODULES)
        if unknown:
            refuse("--recompute-modules", "modules of " + ", ".join(sorted(RECOMPUTE_MODULES))
                   + " (Megatron-LM's TransformerConfig refuses others)", unknown[0])
        if modules is not None and modules != ("core_attn",):
            listed = " ".join(modules) if modules else "(none: nothing recomputed)"
            warnings.append(f"{src}: --recompute-modules {listed}: not modelled; "
                            "pipesim's selective recompute re-runs the attention core alone "
                            "(core_attn, Megatron-LM's default)")
        elif modules is not None:
            notes.append(f"{src}: --recompute-modules core_attn: the attention core re-run "
                         "in the backward, as priced (Megatron-LM's default)")
    else:
        if method is None:
            refuse("--recompute-method", "uniform or block with --recompute-granularity full "
                   "(Megatron-LM's rule)", "none")
        if nrec is None:
            refuse("--recompute-num-layers", "a layer count with --recompute-granularity full "
                   "(Megatron-LM's rule)", "none")
        per_rank = layers // pp
        if not 1 <= nrec <= per_rank:
            refuse("--recompute-num-layers", f"between 1 and the {per_rank} layers per "
                   "pipeline rank", nrec)
        recompute = "full"
    # Megatron-LM overlaps an interleaved schedule's exchanges unless told not to, and batches
    # them without the overlap (megatron/training/arguments.py; the non-interleaved 1F1B has
    # no overlap to turn off): pipesim's --p2p batched
    p2p = "batched" if a.get("--no-overlap-p2p-communication") and vpp > 1 else None
    if p2p:
        notes.append(f"{src}: --no-overlap-p2p-communication: the interleaved schedule's "
                     "exchanges batched, as Megatron-LM runs them without the overlap "
                     "(--p2p batched)")
    elif a.get("--no-overlap-p2p-communication"):
        notes.append(f"{src}: --no-overlap-p2p-communication: no effect without virtual "
                     "stages (Megatron-LM overlaps only an interleaved schedule's exchanges)")
    if a.get("--position-embedding-type") not in (None, "learned_absolute") and arch == "gpt":
        warnings.append(f"{src}: --position-embedding-type {a['--position-embedding-type']}: "
                        "the gpt model counts a learned position table of seq x hidden "
                        "parameters")
    no_effect = [f for f in dict.fromkeys(other) if f in NO_EFFECT]
    if a.get("--no-position-embedding"):
        # deprecated; Megatron-LM's validate_args refuses it but with RoPE, which has no
        # learned positions to drop (examples/mixtral/train_mixtral_8x7b_distributed.sh)
        if a.get("--position-embedding-type") != "rope":
            refuse("--no-position-embedding", "--position-embedding-type rope with it "
                   "(Megatron-LM refuses it otherwise: deprecated, use "
                   "--position-embedding-type)", a.get("--position-embedding-type",
                                                       "learned_absolute (the default)"))
        no_effect.append("--no-position-embedding")
    kv_channels = a.get("--kv-channels")
    if kv_channels is not None:
        if kv_channels * heads == hidden:
            no_effect.append("--kv-channels")
        else:
            warnings.append(f"{src}: --kv-channels {kv_channels}: heads of {kv_channels} "
                            f"channels are not expressible; priced as --hidden-size / "
                            f"--num-attention-heads = {hidden // heads}")
    # the generated gpt layer runs Megatron-LM's dropouts (0.1: their kernels and 1-byte
    # masks), the llama and moe layers none; Megatron's default for both flags is 0.1
    priced = 0.1 if arch == "gpt" else 0.0
    for flag in ("--attention-dropout", "--hidden-dropout"):
        p = a.get(flag, 0.1)
        if p == priced:
            if flag in a:
                no_effect.append(flag)
            continue
        given = "" if flag in a else " (Megatron-LM's default)"
        warnings.append(f"{src}: {flag} {p:g}{given}: the {arch} model is priced "
                        + ("with dropout 0.1 (its kernels and masks)" if priced
                           else "without dropout (no kernels, no masks)"))
    clip = a.get("--clip-grad")
    if clip is not None:
        if clip > 0:    # Megatron-LM's default 1.0: the step takes the gradients' norm
            no_effect.append("--clip-grad")
        else:
            warnings.append(f"{src}: --clip-grad 0: Megatron-LM skips the gradients' norm; "
                            "pipesim's optimizer step still prices its pass over them")
    if a.get("--no-gradient-accumulation-fusion"):
        notes.append(f"{src}: --no-gradient-accumulation-fusion: each weight-gradient GEMM "
                     "writes a 16-bit gradient that the DDP's hook adds into main_grad (an "
                     "elementwise kernel: the gradient and main_grad read, main_grad written), "
                     "priced per microbatch")
    rope_fusion = not a.get("--no-rope-fusion")
    rotary = a.get("--rotary-percent", 1.0)
    if not 0 < rotary <= 1:
        refuse("--rotary-percent", "a fraction in (0, 1]", f"{rotary:g}")
    if arch == "gpt":
        # no RoPE in the gpt model (learned positions; a rope position type is warned above)
        if a.get("--position-embedding-type") in (None, "learned_absolute"):
            no_effect += [f for f in ("--no-rope-fusion", "--rotary-percent") if f in a]
    elif not rope_fusion:
        notes.append(f"{src}: --no-rope-fusion: RoPE as PyTorch ops on "
                     + (f"{rotary:g} of each head's channels" if rotary < 1 else "every channel")
                     + " of Q and K (t·cos + rotate_half(t)·sin, the pass-through concatenated; "
                     "the backward as autograd runs it), not Megatron-LM's fused kernel")
    elif "--rotary-percent" in a:
        no_effect.append("--rotary-percent")    # the fused kernel reads and writes all of Q, K
    # the GPT MLP's bias + GELU (megatron/core/transformer/mlp.py): one fused kernel
    # (bias_gelu_impl) unless --no-bias-gelu-fusion, which adds the bias in a kernel of its own
    # before F.gelu; SwiGLU has its own flag, and without biases GELU runs alone either way
    bias_gelu_fusion = True
    if a.get("--no-bias-gelu-fusion"):
        if arch == "gpt" and not a.get("--disable-bias-linear"):
            bias_gelu_fusion = False
            notes.append(f"{src}: --no-bias-gelu-fusion: the MLP's bias added by a kernel of "
                         "its own (the f-wide activation read and written) before GELU")
        else:
            no_effect.append("--no-bias-gelu-fusion")
    # the loss (core/models/common/language_module/language_module.py): Megatron-LM's fused
    # cross-entropy, its native impl (core/fusions/fused_cross_entropy.py, torch.compile'd),
    # with --cross-entropy-loss-fusion; Transformer Engine's impl Megatron-LM refuses
    # (megatron/training/arguments.py: "disabled due to stability issues")
    impl = a.get("--cross-entropy-fusion-impl", "native")
    cross_entropy_fusion = bool(a.get("--cross-entropy-loss-fusion"))
    if cross_entropy_fusion:
        if impl == "te":
            refuse("--cross-entropy-fusion-impl", "native with --cross-entropy-loss-fusion "
                   "(Megatron-LM refuses Transformer Engine's fused cross-entropy)", impl)
        notes.append(f"{src}: --cross-entropy-loss-fusion: the loss's fp32 passes as "
                     "torch.compile fuses them (Megatron-LM's native impl)")
    elif "--cross-entropy-fusion-impl" in a:
        no_effect.append("--cross-entropy-fusion-impl")
    # --deterministic-mode (megatron/training/determinism.py): refuses the loss's fusion and
    # TP overlap, then sets NCCL_ALGO=Ring (the ring collectives pipesim prices),
    # NVTE_ALLOW_NONDETERMINISTIC_ALGO=0 (Transformer Engine's fused attention runs its
    # deterministic backward) and torch.use_deterministic_algorithms (the experts' unpermute
    # then adds its tokens back with index_add_ where it scatter-adds: moe_utils.py)
    if a.get("--deterministic-mode"):
        for flag in ("--cross-entropy-loss-fusion", "--tp-comm-overlap"):
            if a.get(flag):
                refuse("--deterministic-mode", f"no {flag} with it (Megatron-LM's "
                       "determinism refuses it)", flag)
        slower = [what for what, on in (
            ("Transformer Engine's attention backward", flash),
            ("the experts' token combine", arch == "moe")) if on]
        if slower:
            warnings.append(f"{src}: --deterministic-mode: the deterministic kernels of "
                            f"{' and of '.join(slower)}, priced as the default ones")
        else:
            notes.append(f"{src}: --deterministic-mode: NCCL's ring collectives, as pipesim "
                         "prices them; no kernel it prices changes")
    # the rerun state machine (megatron/core/rerun_state_machine.py): validating results
    # (Megatron-LM's default) or not reruns nothing of a healthy iteration; report_stats
    # runs each iteration's forward and backward twice to compare them
    if a.get("--rerun-mode") == "report_stats":
        warnings.append(f"{src}: --rerun-mode report_stats: each iteration's forward and "
                        "backward run twice (to compare their results); pipesim times one")
    elif "--rerun-mode" in a:
        no_effect.append("--rerun-mode")
    # Python's garbage collector (megatron/training/training.py): --manual-gc turns the
    # automatic one off and collects once before training, then every --manual-gc-interval
    # iterations (0, Megatron-LM's default: never) inside the loop, and around evaluation
    # (off with --no-manual-gc-eval), outside the training iteration
    if a.get("--manual-gc"):
        every = a.get("--manual-gc-interval", 0)
        if every:
            warnings.append(f"{src}: --manual-gc-interval {every}: a full garbage collection "
                            f"every {every} iterations, a host pause pipesim does not price")
        else:
            notes.append(f"{src}: --manual-gc: Python's automatic garbage collector off in "
                         "training, as pipesim assumes (it prices no collector's pauses)")
    if "--no-manual-gc-eval" in a:
        no_effect.append("--no-manual-gc-eval")
    if "--manual-gc-interval" in a and not a.get("--manual-gc"):
        no_effect.append("--manual-gc-interval")
    backend_name = a.get("--distributed-backend")
    if backend_name == "nccl":      # Megatron-LM's default
        no_effect.append("--distributed-backend")
    elif backend_name is not None:
        warnings.append(f"{src}: --distributed-backend {backend_name}: pipesim prices the "
                        "collectives and transfers on the system's links, as NCCL runs them")
    # the softmax's dtype: Megatron's fused scale-mask-softmax kernel (on unless
    # --no-masked-softmax-fusion) computes in fp32 inside either way, and a fused attention
    # kernel has no separate softmax (core/fusions/fused_softmax.py: the flag only casts the
    # unfused path's input). --apply-query-key-layer-scaling divides the softmax's scale by
    # the layer number (the kernels' own scale argument: dot_product_attention.py) and turns
    # the fp32 softmax on (transformer_config.py)
    unfused_softmax = not flash and a.get("--no-masked-softmax-fusion")
    fp32_flags = [f for f in ("--attention-softmax-in-fp32", "--apply-query-key-layer-scaling")
                  if a.get(f)]
    if not unfused_softmax:
        no_effect += fp32_flags
    if a.get("--no-masked-softmax-fusion"):
        if flash:
            no_effect.append("--no-masked-softmax-fusion")
        else:
            warnings.append(f"{src}: --no-masked-softmax-fusion: the unfused attention's "
                            "softmax is priced as Megatron's fused scale-mask-softmax kernel"
                            + (f" (and {fp32_flags[0]}'s fp32 copy is not counted)"
                               if fp32_flags else ""))
    if no_effect:
        notes.append(f"{src}: read, no effect on an iteration's time or memory: "
                     + ", ".join(no_effect))
    for flag in dict.fromkeys(other):
        if flag in BATCH_RAMPS:
            warnings.append(f"{src}: {flag}: the global batch changes over the run; "
                            f"pipesim times an iteration at --global-batch-size {gbs} "
                            f"({microbatches} microbatch{'es' if microbatches > 1 else ''})")
        elif flag not in NO_EFFECT:
            warnings.append(f"{src}: {flag}: not modelled by pipesim (ignored)")
    # Transformer Engine's FP8 (e4m3 everywhere, or hybrid: e5m2 gradients): the same
    # GEMMs and casts either way
    recipe = a.get("--fp8-recipe")
    fp8 = ""
    if a.get("--fp8-format") is not None:
        if precision != "bf16":
            refuse("--fp8-format", "--bf16 with it (Transformer Engine's FP8 runs beside bf16 "
                   "weights and activations)", precision)
        if recipe in ("mxfp8", "custom"):
            refuse("--fp8-recipe", "delayed, tensorwise or blockwise (mxfp8 is Blackwell's, "
                   "a custom one pipesim cannot price)", recipe)
        fp8 = recipe or "delayed"       # Megatron-Core's default recipe
        cast = "6 B an element: its amax read first" if fp8 == "tensorwise" else \
            "4 B an element"
        notes.append(f"{src}: --fp8-format {a['--fp8-format']}, recipe {fp8}: the transformer "
                     f"layers' linears run FP8 GEMMs on quantized operands (each input and "
                     f"output gradient cast, {cast}) and keep their inputs in FP8; the "
                     "attention, the norms and the LM head stay bf16")
    elif recipe is not None:
        notes.append(f"{src}: --fp8-recipe {recipe}: no effect without --fp8-format")
    if cp > 1:
        # Megatron-LM's context parallelism: 2 x cp chunks of each sequence, TE's attention
        if seq % (2 * cp):
            refuse("--seq-length", f"a multiple of 2 x --context-parallel-size {cp}", seq)
        if not flash:
            refuse("--context-parallel-size", "1 without Transformer Engine's fused attention "
                   "(Megatron-LM runs context parallelism only with it)", cp)
    launch = LaunchSettings(
        source=src, tp=tp, pp=pp, vpp=vpp, dp=dp, ep=ep, etp=0 if etp == tp else etp,
        cp=cp, seq=seq, micro_batch=micro,
        global_batch=gbs,
        microbatches=microbatches, gpus=gpus, sequence_parallel=sp, precision=precision,
        flash_attention=flash, recompute=recompute, recompute_granularity=gran,
        recompute_method=method, recompute_num_layers=nrec,
        schedule=schedule,
        decoder_first_pipeline_num_layers=first, decoder_last_pipeline_num_layers=last,
        stage_layers=None if counts is None else tuple(counts),
        account_for_embedding_in_pipeline_split=emb, account_for_loss_in_pipeline_split=loss,
        use_distributed_optimizer=bool(a.get("--use-distributed-optimizer")),
        overlap_grad_reduce=bool(a.get("--overlap-grad-reduce")),
        overlap_param_gather=bool(a.get("--overlap-param-gather")),
        tp_comm_overlap=bool(a.get("--tp-comm-overlap")), grad_reduce_dtype=grad_dtype,
        ddp_bucket_size=bucket, fp16_loss_scale=precision == "fp16", p2p=p2p, fp8=fp8,
        optimizer_post_validation=post_validation, zero_bubble_max_pending=pending,
        grad_accumulation_fusion=not a.get("--no-gradient-accumulation-fusion"),
        vocab_divisor=divisor, rope_fusion=rope_fusion, rotary_percent=rotary,
        rank_order=rank_order,
        log_num_zeros_in_grad=bool(a.get("--log-num-zeros-in-grad")),
        log_params_norm=bool(a.get("--log-params-norm")), bias_gelu_fusion=bias_gelu_fusion,
        cross_entropy_fusion=cross_entropy_fusion,
        calculate_per_token_loss=bool(a.get("--calculate-per-token-loss")),
        router_fp32=router_fp32)
    return ModelInput(src, shape, launch, tuple(warnings), tuple(notes))


def _zero_bubble(a: dict, src: str, pp: int, vpp: int, layers: int, first, last, refuse,
                 warnings: list[str], notes: list[str]) -> tuple[str, int, bool, int | None]:
    """(schedule, virtual stages, post-validation, pending backwards) of the launch, with the
    zero-bubble fork's flags read as its megatron/arguments.py reads them (tag
    zero-bubble-v0.1.0): ``--zero-bubble-v-schedule`` (which turns ``--enable-zero-bubble`` on)
    runs its V schedule in the memory setup asked, two chunks a rank; ``--enable-zero-bubble``
    alone the schedule its runtime lays out for the profiled costs under
    ``--zero-bubble-max-pending-backward`` forwards' memory (p: ZB-1p, 2p: ZB-2p, the fork's
    own help), pipesim's zb-greedy; ``--enable-optimizer-post-validation`` is turned off
    without zero bubble."""
    schedule = "interleaved-1f1b" if vpp > 1 else "1f1b"
    zb_v = bool(a.get("--zero-bubble-v-schedule"))
    zb = zb_v or bool(a.get("--enable-zero-bubble"))
    post = bool(a.get("--enable-optimizer-post-validation"))
    if not zb:
        unused = [f for f in ("--enable-optimizer-post-validation",
                              "--zero-bubble-max-pending-backward",
                              "--zero-bubble-v-schedule-mem-setup") if a.get(f) is not None]
        if unused:
            notes.append(f"{src}: {', '.join(unused)}: no effect without --enable-zero-bubble "
                         f"(the zero-bubble fork turns {'it' if len(unused) == 1 else 'them'} "
                         "off)")
        return schedule, vpp, False, None
    flag = "--zero-bubble-v-schedule" if zb_v else "--enable-zero-bubble"
    if pp < 2:
        refuse(flag, "--pipeline-model-parallel-size above 1 (the zero-bubble fork's rule)", pp)
    if vpp > 1:
        refuse(flag, "no virtual stages with it (the fork runs its own schedule; "
               "--zero-bubble-v-schedule places two chunks a rank)", f"{vpp} virtual stages")
    if a.get("--use-distributed-optimizer") and (a.get("--overlap-grad-reduce")
                                                 or a.get("--overlap-param-gather")):
        refuse(flag, "no --overlap-grad-reduce or --overlap-param-gather with the distributed "
               "optimizer (the zero-bubble fork's rule)", "an overlap")
    if zb_v:
        if first is not None or last is not None:
            refuse("--zero-bubble-v-schedule", "the layers evenly over the stages (the fork's "
                   "rule), not --decoder-first/last-pipeline-num-layers",
                   first if first is not None else last)
        if layers % pp or (layers // pp) % 2:
            refuse("--zero-bubble-v-schedule", f"an even number of layers on each of the {pp} "
                   "stages (the fork's rule)", layers)
        setup = a.get("--zero-bubble-v-schedule-mem-setup") or "zb"
        schedule = ZB_V_SCHEDULES[setup]
        built = ("laid out over the run's own costs, as the fork lays it out over its "
                 "profiled ones" if setup == "zb" else "the fork's own order")
        notes.append(f"{src}: --zero-bubble-v-schedule (memory setup {setup}): {schedule}, "
                     f"{built}, two chunks a rank in a V")
        return schedule, 2, post, None
    pending = a.get("--zero-bubble-max-pending-backward") or "auto"
    if pending == "auto":
        warnings.append(f"{src}: --zero-bubble-max-pending-backward auto (the fork's default, "
                        "a memory limit set from the GPU's free memory as it runs): run as "
                        f"zb-greedy under {pp} forwards' memory, ZB-1p's limit")
        return "zb-greedy", vpp, post, pp
    try:
        n = int(pending)
    except ValueError:
        refuse("--zero-bubble-max-pending-backward", "a whole number or auto", pending)
    if n < 1:
        refuse("--zero-bubble-max-pending-backward", "a positive whole number or auto", n)
    name = {pp: " (ZB-1p)", 2 * pp: " (ZB-2p)"}.get(n, "")
    notes.append(f"{src}: --enable-zero-bubble --zero-bubble-max-pending-backward {n}{name}: "
                 "zb-greedy, the fork's own layout for the run's F / I / W costs and memory "
                 f"under {n} forwards' activations")
    return "zb-greedy", vpp, post, n


def _layout_counts(layout: str, src: str) -> list[int]:
    """Transformer layers per stage of ``--pipeline-model-parallel-layout`` (stages split by
    ``|`` in virtual-stage order; ``t`` a layer, ``t*n`` n of them, ``E`` / ``L`` the embedding
    and the loss; commas cosmetic)."""
    out = []
    for stage in layout.split("|"):
        n = 0
        for item in stage.replace(",", " ").split():
            name, star, times = item.partition("*")
            try:
                k = int(times) if star else 1
            except ValueError:
                k = -1
            if name not in ("t", "E", "L", "m") or k < 0:
                raise ConfigError(f"{src}: --pipeline-model-parallel-layout: expected stages "
                                  f"of E, t, t*N, L split by '|', found {item!r}")
            n += k if name == "t" else 0
        out.append(n)
    return out
