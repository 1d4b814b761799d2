"""The two records every model input produces: the model's shape (what ``pipesim generate``'s
model flags say) and the launch's parallel and batch settings (what Megatron-LM's or
torchtitan's settings say). ``generate`` and ``plan`` take them from the flags or from any of
the readers, and only from here.

NamedTuples (start-up: ``pipesim run`` imports no dataclasses); change one with ``_replace``.
"""

from __future__ import annotations

from typing import NamedTuple

ARCHS = ("gpt", "llama", "moe")     # the generator's models (simulator.workload.generator)


class ModelShape(NamedTuple):
    """A transformer's shape in the generator's terms. ``arch``: gpt (LayerNorm, GELU MLP,
    biases, multi-head attention), llama (RMSNorm, SwiGLU, grouped-query attention), moe (llama
    attention and top-k SwiGLU experts). ``ffn`` is one expert's for moe; None in ``ffn`` /
    ``vocab`` / ``kv_heads`` means the generator's default for the arch."""

    arch: str
    layers: int
    hidden: int
    heads: int
    ffn: int | None = None
    vocab: int | None = None
    kv_heads: int | None = None
    experts: int = 1
    topk: int = 2
    tied_embeddings: bool = False        # the LM head shares the embedding's weights
    max_positions: int | None = None     # the longest sequence the model was built for
    shared_ffn: int = 0                  # moe: the shared experts' FFN every token visits

    def spec_fields(self) -> dict:
        """The generator's ModelSpec keywords (without ``seq`` / ``micro_batch``)."""
        return dict(arch=self.arch, layers=self.layers, hidden=self.hidden, heads=self.heads,
                    ffn=self.ffn, vocab=self.vocab, kv_heads=self.kv_heads,
                    experts=self.experts, topk=self.topk,
                    tied_embeddings=self.tied_embeddings,
                    **({"shared_ffn": self.shared_ffn} if self.shared_ffn else {}))


class LaunchSettings(NamedTuple):
    """A launch's parallel, batch and runtime settings (Megatron-LM's meanings). Counts are per
    data-parallel group where Megatron's are: ``microbatches`` = global / (micro x dp).
    ``recompute`` is pipesim's mode (none, full) the launch's recompute maps to."""

    source: str | None = None            # the launch file ("--megatron-args FILE"); None: flags
    tp: int = 1
    pp: int = 1
    vpp: int = 1
    dp: int = 1
    ep: int = 1
    etp: int = 0                         # the experts' tensor parallelism (0: tp)
    cp: int = 1                          # context parallelism (generator.ParallelSpec.cp)
    seq: int | None = None
    micro_batch: int = 1
    global_batch: int | None = None      # sequences per iteration, all DP groups
    microbatches: int = 1
    gpus: int | None = None
    sequence_parallel: bool = False
    precision: str = "fp32"              # bf16, fp16 or fp32
    flash_attention: bool = False
    recompute: str = "none"
    recompute_granularity: str | None = None     # full | selective | op (torchtitan's op SAC)
    recompute_method: str | None = None
    recompute_num_layers: int | None = None
    schedule: str | None = None          # pipesim's name of the launch's schedule
    schedule_csv: str | None = None      # torchtitan's pipeline_parallel_schedule_csv
    # whole-layer placement (Megatron-LM's names; torchtitan's first/last "less layers")
    decoder_first_pipeline_num_layers: int | None = None
    decoder_last_pipeline_num_layers: int | None = None
    account_for_embedding_in_pipeline_split: bool = False
    account_for_loss_in_pipeline_split: bool = False
    layers_per_stage: int | None = None  # torchtitan's pipeline_parallel_layers_per_stage
    stage_layers: tuple[int, ...] | None = None   # transformer layers per stage, stage order
    # data parallelism and overlaps (Megatron-LM's names; engine/tail.py and costs.py price
    # them once model_inputs.run_option_values maps them onto the run's options)
    use_distributed_optimizer: bool = False
    overlap_grad_reduce: bool = False
    overlap_param_gather: bool = False
    tp_comm_overlap: bool = False
    grad_reduce_dtype: str = "fp32"      # the gradient reduction's dtype: fp32, bf16, fp16
    ddp_bucket_size: int | None = None   # parameters per bucket; None: Megatron's default
    fp16_loss_scale: bool = False        # --fp16: the step unscales and checks the gradients
    optimizer_post_validation: bool = False   # the zero-bubble fork's: no barrier before the step
    log_num_zeros_in_grad: bool = False   # the step counts the gradients' zeros
    log_params_norm: bool = False         # each iteration takes the parameters' norm
    calculate_per_token_loss: bool = False   # the reduced gradients divided by the tokens
    # the zero-bubble fork's --zero-bubble-max-pending-backward: zb-greedy's max_pending
    zero_bubble_max_pending: int | None = None
    p2p: str | None = None               # --no-overlap-p2p-communication (interleaved): batched
    fsdp: int = 0                        # torchtitan's FSDP2 shard degree (0: no FSDP)
    fsdp_reshard_after_forward: str = "default"   # its policy: default, always, never
    fp8: str = ""                        # --fp8-recipe with --fp8-format ("": no FP8)
    grad_accumulation_fusion: bool = True   # off: --no-gradient-accumulation-fusion
    vocab_divisor: int = 128             # --make-vocab-size-divisible-by
    rope_fusion: bool = True             # off: --no-rope-fusion
    rotary_percent: float = 1.0          # --rotary-percent
    bias_gelu_fusion: bool = True        # off: --no-bias-gelu-fusion (a gpt MLP with biases)
    cross_entropy_fusion: bool = False   # --cross-entropy-loss-fusion (its native impl)
    router_fp32: bool = False            # --moe-router-dtype fp32 under Transformer Engine
    runtime: str = "megatron"            # whose model code runs (activations.MODEL_RUNTIMES)
    # the ranks' order on the cluster (system.config.PLACEMENT_ORDERS): a Megatron-LM launch
    # states it (tp-dp-pp, tp-pp-dp with --use-tp-pp-dp-mapping); None: the system's
    rank_order: str | None = None

    def code_fields(self) -> dict:
        """The generator's ParallelSpec keywords for the launch's choices among Megatron-LM's
        kernels: its weight-gradient accumulation, vocabulary padding, RoPE, bias + GELU, the
        router's dtype and the loss's fusion."""
        return dict(grad_accumulation_fusion=self.grad_accumulation_fusion,
                    main_grad_bytes=4 if self.grad_reduce_dtype == "fp32" else 2,
                    vocab_divisor=self.vocab_divisor, rope_fusion=self.rope_fusion,
                    rotary_percent=self.rotary_percent, bias_gelu_fusion=self.bias_gelu_fusion,
                    router_fp32=self.router_fp32, cross_entropy_fusion=self.cross_entropy_fusion)


class ModelInput(NamedTuple):
    """What one reader (or the flags) gave: the shape, the launch (None when the source states
    none: a config.json), and what it could not express (``warnings``) or derived by a
    documented rule (``notes``), each a line that names the source."""

    source: str
    shape: ModelShape
    launch: LaunchSettings | None = None
    warnings: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()
