"""The constants of the kernel-level compute model (:mod:`.kernels`), one preset per GPU.

Each constant names its source beside it. Peaks are dense (the datasheets' "with sparsity"
figures are twice these). Achieved fractions come from published kernel benchmarks, never from
an end-to-end training table:

[DS-A100]  NVIDIA A100 Tensor Core GPU datasheet / Ampere architecture whitepaper: 108 SMs,
           312 TFLOP/s dense FP16/BF16 tensor, 19.5 TFLOP/s FP32, 2,039 GB/s HBM2e (80 GB SXM).
[DS-H100]  NVIDIA H100 datasheet / Hopper architecture whitepaper: H100 SXM5 132 SMs, 989 TFLOP/s
           dense BF16/FP16 tensor, 1979 dense FP8, 67 TFLOP/s FP32, 3.35 TB/s HBM3.
[DS-H200]  NVIDIA H200 datasheet: the H100 SXM's compute (989 TFLOP/s dense BF16, 1979 FP8),
           4.8 TB/s HBM3e.
[MMB]      NVIDIA, "Matrix Multiplication Background User's Guide" (Deep Learning Performance
           documentation, DU-09799-001), §2.3: cuBLAS's typical tiles, 256x128 and 128x256 the
           most efficient, 128x128 next; §3: tile and wave quantization.
[MAMF]     S. Bekman, "Machine Learning Engineering", compute/accelerator: the Maximum Achievable
           Matmul FLOPS table (mamf-finder.py, BF16 torch.matmul over a scan of large shapes):
           A100 SXM 267.9 TFLOP/s = 85.9 % of 312 (CUDA 12.1); H100 SXM 792.1 = 80.1 % of 989
           (CUDA 12.1); H100/H200 SXM 794.5 = 80.3 % of 989. The best shape of a brute-force
           search (its README: "the highest achievable TFLOPS it registered"), which the book
           itself says an application's own shapes should not expect: an upper bound, not the
           rate a GPU sustains on a given large GEMM.
[MLI-A100] M. Li, mli/transformers-benchmarks, README's micro-benchmark table (micro_bench.ipynb,
           August 2022; the NGC PyTorch 22.07 container it recommends, CUDA 11.7): on an A100
           80GB SXM (2,039 GB/s), a @ b of two 8192 x 8192 FP16 matrices, the median of
           torch.utils.benchmark's blocked_autorange over at least 3 s: 230 TFLOP/s = 73.7 % of
           312 (TF32: 116 of 156, 74 %). The rate a large aligned GEMM sustains: divided by the
           tile model's wave efficiency at 8192^3 (2048 tiles of 256 x 128 in 19 waves of 108
           SMs: 0.998), a per-SM fraction of 0.739.
[SUST]     The H100 and H200 presets' sustained fraction: [MAMF]'s maximum for the GPU times the
           A100's sustained-to-maximum ratio, 0.739 / 0.859 = 0.860 ([MLI-A100] over [MAMF]); no
           published sustained-rate measurement of a large H100 GEMM was found, and a lent GPU
           measures it (benchmarks/bench_kernels_gpu.py).
[SUST-FP8] The H100 and H200 presets' FP8 GEMM fraction, derived as [SUST] is: [MAMF]'s FP8
           table (float8_e4m3fn torch matmul, the same search): H100 SXM 1402.6 TFLOP/s = 70.9 %
           of 1979, H200 SXM 1453.4 = 73.4 %; times the A100's sustained-to-maximum ratio 0.860:
           0.610 and 0.631. The datasheets' dense FP8 peak is 1979 TFLOP/s on both (3958 with
           sparsity); the A100 has no FP8 tensor cores.
[MLI-VEC]  M. Li, mli/transformers-benchmarks (as [MLI-A100], the same A100 80GB SXM and stack),
           README's micro-benchmark table, "Vector Multiplication": 0.202 TFLOP/s for a * 1.2 on
           a 4M-element FP32 vector (micro_bench.ipynb; one FLOP, 4 B read and 4 B written per
           element): 1.616 TB/s = 79.3 % of 2.039. The rate a PyTorch elementwise kernel, which
           reads and writes, sustains over HBM: what a training step's memory-bound kernels
           (norms, softmax, dropout, activations, residual adds) are. A read-only streaming
           kernel reaches more (NVIDIA developer forum, "Trouble to reach peak bandwidth of
           A100", 2025: 1.80 TB/s, 88 %), a bound no kernel of the step that also writes meets.
           The vector's 16 MB could partly stay in the A100's 40 MB L2; the rate it gives, below
           HBM's, is taken as HBM's.
[FA2]      T. Dao, "FlashAttention-2" (arXiv 2307.08691), §4.1: on A100 the forward reaches up to
           73 % of the tensor peak and the backward up to 63 % (head dim 128, long sequences);
           FLOPs counted as 4 s^2 d heads forward, 2.5x that backward, halved when causal.
[FA3]      J. Shah et al., "FlashAttention-3" (arXiv 2407.08608): on H100 SXM5 the BF16 forward
           reaches up to 740 TFLOP/s (75 %); the backward is 1.5-1.75x FlashAttention-2's, which
           runs at 35 % of the H100's peak (the paper's §1): 1.5 x 35 % = 0.52.
[TE-H100]  Transformer Engine's attention benchmark as its docs print it
           (docs/examples/attention/attention.ipynb, NVIDIA/TransformerEngine commit 88c0c91,
           2024-08; benchmarks/attention/benchmark_attention.py: the kernels' time from an nsys
           trace): on an H100 80GB HBM3, BF16, causal, batch 2, 32 heads (4 KV groups), head dim
           128, sequence 8192, cuDNN's fused attention forward + backward 7.4875 ms (flash-attn
           2's 11.8879): 3.5 x 1.0995e12 FLOPs, 514 TFLOP/s, 52.0 % of 989. It is the attention
           Megatron-LM runs on Hopper: Transformer Engine 1.8-1.9 disables FlashAttention "to give
           FusedAttention preference on Hopper+" (transformer_engine/pytorch/attention.py).
           Split into forward and backward as [FA3]'s
           rates are (0.75 : 0.52): both times 0.912, so that 3.5 FLOPs units take 1 / 0.520.
           The same table's causal case at sequence 2048 (batch 2, 16 heads, head dim 128:
           0.3664 ms = 3.5 x 3.436e10 FLOPs, 328 TFLOP/s, 33.2 % of 989), split the same way:
           both times 0.582, 0.437 / 0.303. Between the two sequence lengths the fractions
           follow log2(s) linearly; outside, the nearer one holds.
[GAP-A100] A PyTorch profiler (Kineto) trace of AlexNet forwards on an A100 (SXM4, 108 SMs;
           facebookresearch/HolisticTraceAnalysis's test trace, ../shared/traces-gpu/): between
           two kernels of one stream whose launch returned before the first ended (the GPU's
           queue not empty), the device waits 1-2 us, median 1.5 us over the 34 such pairs (the
           trace's timestamps are whole microseconds): the GPU's own cost of starting a kernel.
"""

from __future__ import annotations

import math
from typing import NamedTuple

from ..errors import ConfigError


class KernelPreset(NamedTuple):
    key: str
    sms: int                       # streaming multiprocessors
    tensor_tflops: float           # dense FP16/BF16 tensor-core peak
    fp32_tflops: float             # FP32 (non-tensor) peak: GEMMs in fp32
    gemm_fraction: float           # of the peak cuBLAS sustains on a large aligned GEMM
    hbm_tbps: float                # HBM bandwidth, TB/s
    hbm_fraction: float            # of it a streaming kernel reaches
    # (sequence length, forward fraction, backward fraction) of the tensor peak a
    # flash-attention kernel reaches, ascending in sequence length (flash_fractions)
    flash: tuple[tuple[int, float, float], ...]
    tiles: tuple[tuple[int, int], ...]   # the output tiles cuBLAS chooses among
    kernel_gap_ns: int             # the GPU's idle time between two queued kernels
    fp8_tflops: float = 0.0        # dense FP8 tensor-core peak (0: none, as on the A100)
    fp8_gemm_fraction: float = 0.0   # of it a large aligned FP8 GEMM sustains

    def peak_tflops(self, dtype_bytes: int) -> float:
        """The dense peak for operands of ``dtype_bytes`` (1: FP8 tensor; 2: FP16/BF16
        tensor; 4: FP32)."""
        if dtype_bytes == 1:
            return self.fp8_tflops
        return self.tensor_tflops if dtype_bytes <= 2 else self.fp32_tflops

    def gemm_fraction_of(self, dtype_bytes: int) -> float:
        """The sustained fraction of :meth:`peak_tflops` for operands of ``dtype_bytes``."""
        return self.fp8_gemm_fraction if dtype_bytes == 1 else self.gemm_fraction

    def flash_fractions(self, seq: int) -> tuple[float, float]:
        """The (forward, backward) fraction of the tensor peak a flash-attention kernel of
        sequence length ``seq`` reaches: the preset's points, linear in log2(seq) between two,
        the nearer end's outside them."""
        points = self.flash
        if seq <= points[0][0]:
            return points[0][1], points[0][2]
        for (s0, f0, b0), (s1, f1, b1) in zip(points, points[1:]):
            if seq <= s1:
                x = math.log2(seq / s0) / math.log2(s1 / s0)
                return f0 + (f1 - f0) * x, b0 + (b1 - b0) * x
        return points[-1][1], points[-1][2]


_TILES = ((256, 128), (128, 256), (128, 128))                     # [MMB] §2.3
_TE_H100 = ((2048, 0.437, 0.303), (8192, 0.684, 0.474))             # [TE-H100]

KERNELS: dict[str, KernelPreset] = {
    "a100": KernelPreset(
        "a100", sms=108, tensor_tflops=312.0, fp32_tflops=19.5,     # [DS-A100]
        gemm_fraction=0.739,                                         # [MLI-A100]
        hbm_tbps=2.039, hbm_fraction=0.793,                          # [DS-A100], [MLI-VEC]
        flash=((8192, 0.73, 0.63),),             # [FA2] A100 (its long-sequence rates, as 1 point)
        tiles=_TILES, kernel_gap_ns=1500),                           # [GAP-A100]
    "h100": KernelPreset(
        "h100", sms=132, tensor_tflops=989.0, fp32_tflops=67.0,     # [DS-H100]
        gemm_fraction=0.689,                             # [SUST]: 0.801 ([MAMF] H100) x 0.860
        # [DS-H100]; the elementwise fraction is [MLI-VEC]'s (no published H100 figure found):
        # a lent GPU measures it (benchmarks/bench_kernels_gpu.py times memory-bound kernels)
        hbm_tbps=3.35, hbm_fraction=0.793,
        flash=_TE_H100,
        # [GAP-A100]'s gap (no published H100 trace found): a lent GPU's trace measures it
        tiles=_TILES, kernel_gap_ns=1500,
        fp8_tflops=1979.0, fp8_gemm_fraction=0.610),   # [DS-H100]; [SUST-FP8]: 0.709 x 0.860
    "h200": KernelPreset(
        "h200", sms=132, tensor_tflops=989.0, fp32_tflops=67.0,     # [DS-H200] (H100's die)
        gemm_fraction=0.691,                       # [SUST]: 0.803 ([MAMF] H100/H200) x 0.860
        hbm_tbps=4.8, hbm_fraction=0.793,                            # [DS-H200], as h100
        flash=_TE_H100,                                              # (H100's die)
        tiles=_TILES, kernel_gap_ns=1500,                            # as h100
        fp8_tflops=1979.0, fp8_gemm_fraction=0.631),   # [DS-H200]; [SUST-FP8]: 0.734 x 0.860
}


def kernel_preset(key: str) -> KernelPreset:
    preset = KERNELS.get(key.lower())
    if preset is None:
        raise ConfigError(f"--gpu: expected one of {', '.join(KERNELS)}, found {key!r}")
    return preset
