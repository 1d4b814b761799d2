"""Kernel-level compute prices: each op of a layer timed by what bounds it on one GPU.

An op is one kernel (or one fused kernel) of a training step on one GPU:

- ``gemm``: an (optionally batched) M x N x K matrix product. cuBLAS splits the output into
  tiles, one thread block per tile; the blocks run in waves of one tile per SM (NVIDIA, "Matrix
  Multiplication Background User's Guide", §2.3 and §3: tile and wave quantization). The math
  time is whole waves x one tile's FLOPs over one SM's share of the dense tensor peak, at the
  fraction cuBLAS sustains on large aligned GEMMs; the memory time is the operands' and the
  output's bytes over HBM bandwidth; the op takes the larger (roofline). cuBLAS's heuristics pick
  the tile: the cheapest of the preset's tile shapes is taken.
- ``flash``: a FlashAttention kernel, its FLOPs (causal: the half of the score matrix it
  computes) over the tensor peak at the fraction the kernel's benchmark measured at its
  sequence length.
- ``memory``: a bandwidth-bound kernel (norms, softmax, dropout, activations, residual adds,
  the embedding lookup, the cross-entropy's passes): its bytes over HBM bandwidth at the
  fraction an elementwise kernel reaches.

A row's column is its kernels' times plus, for each, the GPU's gap between two queued kernels
(``kernel_gap_ns``, measured on a profiler trace).

Every preset constant names its source in :mod:`.kernel_presets`. None is fitted to an
end-to-end training table.
"""

from __future__ import annotations

from typing import NamedTuple

PHASES = ("fwd", "ig", "wg")      # a row's compute columns: forward, input grad, weight grad


class Op(NamedTuple):
    """One kernel of a row, before it is priced. ``kind`` is gemm, flash or memory."""

    name: str
    phase: str               # fwd, ig or wg
    kind: str
    m: int = 0               # gemm: output rows
    n: int = 0               # gemm: output columns
    k: int = 0               # gemm: reduction length
    batch: int = 1           # gemm: independent products (batched GEMM)
    dtype_bytes: int = 2     # gemm: bytes of an operand element
    out_bytes: int = 0       # gemm: bytes per output element moved (read + write); 0: dtype
    flops: int = 0           # flash: the kernel's FLOPs
    seq: int = 0             # flash: its sequence length (the rate depends on it)
    nbytes: int = 0          # memory: bytes read and written


class Priced(NamedTuple):
    """An op with its time on one GPU: what bounds it and the figures that decided it."""

    op: Op
    ns: int
    bound: str               # math, memory
    flops: int
    nbytes: int
    tile: tuple[int, int] | None = None
    tiles: int = 0
    waves: int = 0


def gemm(name: str, phase: str, m: int, n: int, k: int, batch: int = 1, dtype_bytes: int = 2,
         out_bytes: int = 0) -> Op:
    return Op(name, phase, "gemm", m=m, n=n, k=k, batch=batch, dtype_bytes=dtype_bytes,
              out_bytes=out_bytes)


def flash(name: str, phase: str, flops: int, seq: int) -> Op:
    return Op(name, phase, "flash", flops=flops, seq=seq)


def memory(name: str, phase: str, nbytes: int) -> Op:
    return Op(name, phase, "memory", nbytes=nbytes)


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


def price(op: Op, gpu) -> Priced:
    """``op``'s time on ``gpu`` (a :class:`.kernel_presets.KernelPreset`), whole ns."""
    hbm = gpu.hbm_tbps * 1e3 * gpu.hbm_fraction          # bytes per ns
    if op.kind == "memory":
        return Priced(op, round(op.nbytes / hbm), "memory", 0, op.nbytes)
    if op.kind == "flash":
        # a recomputed forward runs the forward kernel, whichever column holds it
        fwd = op.phase == "fwd" or op.name.endswith("_recompute")
        f, b = gpu.flash_fractions(op.seq)
        frac = f if fwd else b
        return Priced(op, round(op.flops / (gpu.tensor_tflops * 1e3 * frac)), "math",
                      op.flops, 0)
    if op.kind != "gemm":
        raise ValueError(f"unknown op kind {op.kind!r}")
    m, n, k, b = op.m, op.n, op.k, op.batch
    flops = 2 * m * n * k * b
    if flops == 0:
        return Priced(op, 0, "math", 0, 0)
    peak = gpu.peak_tflops(op.dtype_bytes) * 1e3 * gpu.gemm_fraction_of(op.dtype_bytes)
    if peak <= 0:
        raise ValueError(f"{gpu.key} has no tensor cores for {op.dtype_bytes}-byte operands")
    per_sm = peak / gpu.sms
    best = None
    for tm, tn in gpu.tiles:
        tiles = _cdiv(m, tm) * _cdiv(n, tn) * b
        waves = _cdiv(tiles, gpu.sms)
        # a last partial wave costs a whole one; a wave of fewer tiles than SMs still takes one
        # tile's time on each busy SM
        t = waves * 2 * tm * tn * k / per_sm
        if best is None or t < best[0]:
            best = (t, (tm, tn), tiles, waves)
    out = op.out_bytes or op.dtype_bytes
    nbytes = b * ((m * k + k * n) * op.dtype_bytes + m * n * out)
    t_mem = nbytes / hbm
    t_math, tile, tiles, waves = best
    if t_mem > t_math:
        return Priced(op, round(t_mem), "memory", flops, nbytes, tile, tiles, waves)
    return Priced(op, round(t_math), "math", flops, nbytes, tile, tiles, waves)


def launched(p: Priced) -> bool:
    """Whether the op runs a kernel: a product or pass over nothing launches none."""
    return p.ns > 0


def row_times(ops, gpu) -> tuple[tuple[int, int, int], list[Priced]]:
    """The (fwd, ig, wg) ns of a row whose kernels are ``ops``: the sum of each phase's ops, and
    for each kernel the GPU's gap before it starts (the queue is never empty inside a row:
    the host launches ahead of the GPU)."""
    priced = [price(o, gpu) for o in ops]
    t = [0, 0, 0]
    for p in priced:
        if launched(p):
            t[PHASES.index(p.op.phase)] += p.ns + gpu.kernel_gap_ns
    return (t[0], t[1], t[2]), priced
