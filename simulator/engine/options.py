"""Run-time choices that are not part of the workload or the system, in the engine's terms.

A run's options are written and checked once, as :class:`simulator.run_options.RunOptions`;
:meth:`~simulator.run_options.RunOptions.engine_options` makes the one EngineOptions a run's
engine reads (bytes, a sigma, (rank, factor) pairs).
"""

from __future__ import annotations

from typing import NamedTuple

from ..errors import ConfigError
from ..system.runtime_profile import P2P_MODES   # re-exported: the modes p2p may name

__all__ = ["DDPSettings", "EngineOptions", "P2P_MODES", "parse_slow_rank"]

# Megatron-LM's default bucket: max(40,000,000, 1,000,000 x DP) parameters
# (megatron/core/distributed/distributed_data_parallel.py, DistributedDataParallel.__init__)
MEGATRON_BUCKET_MIN_PARAMS = 40_000_000
MEGATRON_BUCKET_PARAMS_PER_DP = 1_000_000
# Megatron-LM's mixed-precision optimizer step, bytes per parameter through HBM, each pass as its
# code runs it (megatron/optimizer/optimizer.py and clip_grads.py at commit 6985e58; the same
# passes in megatron/core/optimizer/optimizer.py today):
# - the gradient norm for --clip-grad (default 1.0): multi_tensor_l2norm reads each fp32 main
#   gradient, 4 B (the rescale that follows only when the norm exceeds the limit is not priced);
# - Adam (apex / Transformer Engine FusedAdam): reads the fp32 master weight, gradient and two
#   moments (16 B), writes the weight and the moments (12 B): 28 B;
# - _copy_main_params_to_model_params, a separate multi-tensor copy: reads the fp32 master
#   weight (4 B), writes the 2-byte training weight (2 B): 6 B.
# With the distributed optimizer each rank runs them on its 1/DP shard.
GRAD_NORM_BYTES_PER_PARAM = 4.0
ADAM_BYTES_PER_PARAM = 28.0
MAIN_TO_MODEL_COPY_BYTES_PER_PARAM = 6.0
ADAM_STEP_BYTES_PER_PARAM = (GRAD_NORM_BYTES_PER_PARAM + ADAM_BYTES_PER_PARAM
                             + MAIN_TO_MODEL_COPY_BYTES_PER_PARAM)          # 38 B
# and with --fp16, before them, the loss scaler's _unscale_main_grads_and_check_for_nan:
# torch._amp_foreach_non_finite_check_and_unscale_ reads and writes each fp32 main gradient
FP16_UNSCALE_BYTES_PER_PARAM = 8.0
# Megatron-LM's logging passes, each iteration after the step's own (megatron/core/optimizer/
# optimizer.py and megatron/training/training.py at d98e8a64dd):
# - --log-num-zeros-in-grad: count_zeros_fp32, torch.count_nonzero over each fp32 main gradient
#   the optimizer updates (the shard, with the distributed optimizer): 4 B read;
# - --log-params-norm: calc_params_l2_norm, multi_tensor_l2norm over the parameters, with
#   --bf16 their fp32 main copies (the shard, with the distributed optimizer), otherwise the
#   training weights themselves (fp16 or fp32, every one on the rank): their bytes read.
# Each ends in an all-reduce of one fp32 over the model-parallel (and, sharded, the DP) group:
# latency only, not priced.
COUNT_ZEROS_BYTES_PER_PARAM = 4.0
MAIN_PARAMS_NORM_BYTES_PER_PARAM = 4.0
# --calculate-per-token-loss: once the gradients are reduced, finalize_model_grads divides the
# whole gradient buffer by the tokens (megatron/core/distributed/finalize_model_grads.py,
# param_and_grad_buffer.py scale_gradients: grad_data *= scaling), every gradient of the rank
# read and written in the buffer's dtype; the token count's broadcast and all-reduce are one
# number each, not priced
PER_TOKEN_SCALE_PASSES = 2
# FSDP2 (torchtitan) keeps the weights in fp32 and casts each layer as it gathers it: its step
# is the norm and Adam on the shard, with no copy into separate training weights
FSDP_STEP_BYTES_PER_PARAM = GRAD_NORM_BYTES_PER_PARAM + ADAM_BYTES_PER_PARAM


# a NamedTuple, not a dataclass: start-up (simulator/__init__.py)
class DDPSettings(NamedTuple):
    """Megatron-LM's data parallelism (tail.py prices it): ``overlap_grad_reduce`` (buckets
    reduced as the backward fills them; else one bucket per chunk after the rank's last
    backward, blocking), ``distributed_optimizer`` (a reduce-scatter of the gradients, the step
    on 1/DP of the parameters, an all-gather of the parameters after it), ``overlap_param_gather``
    (that all-gather behind the next iteration's forward), ``grad_bytes`` (the reduction's dtype:
    4 fp32, 2 bf16/fp16), ``param_bytes`` (the all-gathered weights' dtype), ``bucket_params``
    (None: Megatron's default), ``step_bytes_per_param`` (the optimizer step's HBM traffic on
    the parameters it updates), ``post_validation`` (each rank steps as soon as its own
    gradients are reduced and the partial global state has come from the rank before it, and
    goes on with the next iteration: no barrier). Each iteration also zeroes the whole gradient
    buffer (``zero_grad_buffer()`` before the first forward), ``grad_bytes`` a parameter,
    unsharded."""

    overlap_grad_reduce: bool = False
    distributed_optimizer: bool = False
    overlap_param_gather: bool = False
    grad_bytes: float = 4.0
    param_bytes: float = 2.0
    bucket_params: int | None = None
    step_bytes_per_param: float = ADAM_STEP_BYTES_PER_PARAM
    # Megatron zeroes its whole gradient buffer each iteration; FSDP2 frees its sharded
    # gradients instead (the optimizer's zero_grad sets them to None): nothing to write
    zeroes_buffer: bool = True
    # torchtitan's FSDP2 (--fsdp) and its fsdp_reshard_after_forward policy (default,
    # always, never): without a pipeline every microbatch gathers (:meth:`reshards`)
    fsdp: bool = False
    reshard: str = "default"
    # the zero-bubble fork's --enable-optimizer-post-validation: no barrier before the step
    # (tail.py's Tail.arrive_alone)
    post_validation: bool = False
    # HBM traffic of the step on every parameter of the rank, sharded or not: --log-params-norm
    # over fp16 or fp32 training weights (MAIN_PARAMS_NORM_BYTES_PER_PARAM's note)
    unsharded_step_bytes_per_param: float = 0.0

    @property
    def fsdp_copy_out_bytes_per_param(self) -> float:
        """FSDP2's all-gather copy-out: after each gather, on the compute stream, its flat
        output is split into the layer's parameters (``foreach_all_gather_copy_out``:
        ``split_with_sizes_copy``; torch/distributed/fsdp/_fully_shard/_fsdp_collectives.py),
        each read and written in the gathered dtype."""
        return 2.0 * self.param_bytes

    @property
    def fsdp_copy_in_bytes_per_param(self) -> float:
        """FSDP2's reduce-scatter copy-in: before each reduce-scatter, on the compute stream,
        the layer's unsharded gradients (the gathered dtype) are chunk-concatenated into its
        input in the reduction's dtype (``foreach_reduce``: ``foreach_reduce_scatter_copy_in``,
        ``chunk_cat``, before the reduce-scatter stream waits for the compute stream)."""
        return self.param_bytes + self.grad_bytes

    def reshards(self, pp: int) -> bool:
        """Whether each microbatch gathers the weights (FSDP2 without a pipeline: its
        backward reshards them, FSDP2's reshard_after_backward): every forward all-gathers
        each layer, every backward reduce-scatters its gradients (torchtitan's gradient
        accumulation keeps the gradient sync on), and the backward gathers them again where
        :meth:`regathers_backward`. With a pipeline, torch's PipelineStage keeps them gathered
        and syncs on the last microbatch's backward only: the distributed optimizer's timing.
        """
        return self.fsdp and pp == 1

    def regathers_backward(self, pp: int) -> bool:
        """Whether each microbatch's backward gathers the layers again: FSDP2's
        reshard_after_forward, as torchtitan's policy sets it (default: on without pipeline
        parallelism, off with it; torchtitan/distributed/fsdp.py
        get_fsdp_reshard_after_forward_policy)."""
        return self.reshards(pp) and self.reshard != "never"

    def bucket_size(self, dp: int) -> int | None:
        """Parameters per bucket (None: one bucket per chunk, as Megatron does without
        ``--overlap-grad-reduce``)."""
        if not self.overlap_grad_reduce:
            return None
        if self.bucket_params is not None:
            return self.bucket_params
        return max(MEGATRON_BUCKET_MIN_PARAMS, MEGATRON_BUCKET_PARAMS_PER_DP * dp)


# a NamedTuple, not a dataclass: start-up (simulator/__init__.py)
class EngineOptions(NamedTuple):
    """``p2p``: ``async`` (isend/irecv: a send never waits for its receiver), ``blocking`` (a send
    completes when the matching receive is posted and the data is across; document 001's naive
    order, which deadlocks 1F1B), ``batched`` (Megatron's fused send/recv pairs,
    batch_isend_irecv: adjacent sends and receives are posted together and complete together),
    ``torch`` (torch.distributed.pipelining on gloo: rendezvous transfers, torch's single-stage
    rules for gpipe and 1f1b, its multi-stage rules - receives posted early, sends waited at the
    end of the step - for every other schedule; ``torch-single`` / ``torch-multi`` force one;
    see docs/model.md). None: the system's ``runtime.p2p`` (``async`` unless it says otherwise).

    ``jitter_sigma``: compute times scaled by seeded lognormal noise of mean 1; ``slow_ranks``:
    (rank, factor) pairs multiplying one rank's compute; ``memory_limit_bytes``: an overflow is an
    OutOfMemoryError. ``ddp``: Megatron-LM's data parallelism (:class:`DDPSettings`);
    ``tp_comm_overlap``: tensor-parallel collectives hidden behind the GEMMs they are pipelined
    with, never more than those take. ``p2p_scatter_gather``: each stage-to-stage transfer split
    over the stage's TP ranks and all-gathered on arrival (Megatron-LM of 2021-22). Not checked here: RunOptions checked the values it was made from.
    """

    p2p: str | None = None
    memory_limit_bytes: float | None = None
    jitter_sigma: float = 0.0
    seed: int = 0
    slow_ranks: tuple[tuple[int, float], ...] = ()
    trace_layers: bool = False
    layer_by_layer: bool = False   # reference path: one SimPy event per layer state (slower)
    ddp: DDPSettings | None = None  # None: each row's DP collective as the file states it
    tp_comm_overlap: bool = False   # TP collectives pipelined with their GEMMs (costs.py)
    p2p_scatter_gather: bool = False   # transfers split over TP, all-gathered (topology.py)


def parse_slow_rank(text: str) -> tuple[int, float]:
    """``"2:1.5"`` -> (2, 1.5)."""
    rank, sep, factor = text.partition(":")
    try:
        if not sep:
            raise ValueError
        r, f = int(rank), float(factor)
    except ValueError:
        raise ConfigError(f"--slow-rank: expected RANK:FACTOR like 2:1.5, got {text!r}") from None
    if r < 0 or not f > 0:
        raise ConfigError(f"--slow-rank: expected RANK >= 0 and FACTOR > 0, got {text!r}")
    return r, f
