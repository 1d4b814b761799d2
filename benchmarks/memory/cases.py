"""What the memory harness runs: the model shapes and the schedules (no torch import here).

The model is a stack of pre-LN MLP blocks, ``x + fc2(gelu(fc1(layer_norm(x))))``: real layers
whose forward keeps real activations for the backward (the input of each of LayerNorm, fc1,
GELU and fc2, LayerNorm's statistics) and whose backward works on several of them at once.
P = 4 ranks, 16 blocks split evenly over the P·v stages, float32. The ``transformer`` shape
stacks Megatron-style pre-LN GPT layers instead (attention with its scores, softmax and dropout;
``TRANSFORMERS``): the case pipesim predicts from the model's shape alone.
"""

from __future__ import annotations

from dataclasses import dataclass

P = 4                  # pipeline ranks
LAYERS = 16            # blocks of the whole model
BYTES_PER_ELEMENT = 4  # float32
MICROBATCHES = (8, 12)


@dataclass(frozen=True)
class Shape:
    name: str
    summary: str
    hidden: int
    rows: int                      # rows of one microbatch
    ffn: tuple[int, ...]           # per block: the MLP's inner width as a multiple of hidden
    heads: int = 0                 # > 0: transformer layers with this many attention heads
    seq: int = 0                   # a transformer's sequence length (rows = seq x batch)
    bool_masks: bool = False       # dropout through torch.native_dropout: 1-byte masks
    kv_heads: int = 0              # > 0: grouped-query attention with this many K/V heads

    @property
    def batch(self) -> int:
        """Sequences per microbatch (transformer shapes)."""
        return self.rows // self.seq

    @property
    def pp_comm(self) -> int:
        """Bytes of one activation (or its gradient) sent between two stages."""
        return self.rows * self.hidden * BYTES_PER_ELEMENT

    @property
    def loss_saved(self) -> int:
        """Bytes the harness's loss, ``((out - target) ** 2).mean()`` (live.py), saves for its
        backward per microbatch: ``out - target``, one output (the power's input)."""
        return self.pp_comm

    @property
    def qkv(self) -> int:
        """Outputs of a transformer layer's fused QKV: h for Q, one head's width for each K
        and V head."""
        kv = self.kv_heads or self.heads
        return self.hidden + 2 * kv * (self.hidden // self.heads)

    def params(self, block: int) -> int:
        """Parameters of one block: LayerNorm (2h), fc1 (h·f + f), fc2 (f·h + h); a
        transformer layer adds a LayerNorm (2h), QKV (h·q + q, q = ``qkv``) and the projection
        (h² + h)."""
        h, f = self.hidden, self.hidden * self.ffn[block]
        mlp = 2 * h + h * f + f + f * h + h
        if not self.heads:
            return mlp
        q = self.qkv
        return mlp + 2 * h + h * q + q + h * h + h

    def blocks_of_stage(self, stage: int, n_stages: int) -> range:
        per = LAYERS // n_stages
        return range(stage * per, (stage + 1) * per)


def _shape(name: str, summary: str, hidden: int, rows: int, heavy: str = "") -> Shape:
    """``heavy``: "first" or "last" gives that quarter of the blocks an MLP of 8h."""
    q = LAYERS // P
    ffn = tuple(8 if (heavy == "last" and i >= LAYERS - q) or (heavy == "first" and i < q)
                else 4 for i in range(LAYERS))
    return Shape(name, summary, hidden, rows, ffn)


SHAPES: dict[str, Shape] = {s.name: s for s in (
    _shape("uniform", "16 blocks, hidden 64, MLP 4h, 32 rows per microbatch", 64, 32),
    _shape("heavy-last", "as uniform, the last quarter of the blocks (stage 3 at v = 1) with an "
                         "MLP of 8h", 64, 32, heavy="last"),
    _shape("h128", "16 blocks, hidden 128, MLP 4h, 32 rows per microbatch", 128, 32),
    _shape("heavy-first", "as uniform, the first quarter of the blocks (stage 0 at v = 1) with "
                          "an MLP of 8h", 64, 32, heavy="first"),
)}

# Megatron-style pre-LN GPT layers (no embedding or LM head: float input, mean-squared loss),
# predicted from their shape alone (benchmarks/memory/shape_only.py)
TRANSFORMER_SEQ, TRANSFORMER_BATCH, TRANSFORMER_HEADS, DROPOUT = 128, 1, 4, 0.1
TRANSFORMER_KV_HEADS = 2
TRANSFORMERS: dict[str, Shape] = {s.name: s for s in (
    Shape("transformer", f"16 pre-LN GPT layers, hidden 256, {TRANSFORMER_HEADS} heads, "
          f"s = {TRANSFORMER_SEQ}, b = {TRANSFORMER_BATCH}, MLP 4h, dropout {DROPOUT}", 256,
          TRANSFORMER_SEQ * TRANSFORMER_BATCH, (4,) * LAYERS, TRANSFORMER_HEADS,
          TRANSFORMER_SEQ),
    # the same, its dropout keeping 1-byte masks as torch's CUDA kernel (and Megatron's count)
    # does: on the CPU F.dropout keeps a 4-byte scaled noise tensor in place of the mask
    Shape("transformer-bool-masks", "as transformer, dropout through torch.native_dropout "
          "(1-byte masks, as on CUDA)", 256, TRANSFORMER_SEQ * TRANSFORMER_BATCH, (4,) * LAYERS,
          TRANSFORMER_HEADS, TRANSFORMER_SEQ, bool_masks=True),
    # grouped-query attention (2 K/V heads for 4 query heads, each K/V head repeated for its
    # group's query heads before the scores), 1-byte dropout masks
    Shape("transformer-gqa", f"as transformer-bool-masks, grouped-query attention: "
          f"{TRANSFORMER_HEADS} query heads, {TRANSFORMER_KV_HEADS} K/V heads", 256,
          TRANSFORMER_SEQ * TRANSFORMER_BATCH, (4,) * LAYERS, TRANSFORMER_HEADS,
          TRANSFORMER_SEQ, bool_masks=True, kv_heads=TRANSFORMER_KV_HEADS),
)}
ALL_SHAPES: dict[str, Shape] = {**SHAPES, **TRANSFORMERS}


@dataclass(frozen=True)
class Sched:
    """One schedule on torch's runtime: a torch class, or a pipesim schedule loaded from its
    CSV into ``_PipelineScheduleRuntime`` (``csv`` True)."""

    name: str           # torch class name, or the pipesim schedule name for a CSV
    pipesim: str        # pipesim schedule name (``auto``: pipesim's synthesised schedule)
    vpp: int
    placement: str      # "loop" (stage s on rank s mod P) or "v" (rank r: stages r, 2P-1-r)
    csv: bool = False

    @property
    def multi(self) -> bool:
        """Runs on torch's multi-stage runtime (_PipelineScheduleRuntime)."""
        return self.vpp > 1 or self.csv


SCHEDULES: dict[str, Sched] = {s.name: s for s in (
    Sched("ScheduleGPipe", "gpipe", 1, "loop"),
    Sched("Schedule1F1B", "1f1b", 1, "loop"),
    Sched("ScheduleInterleaved1F1B", "interleaved-1f1b", 2, "loop"),
    Sched("ScheduleLoopedBFS", "looped-bfs", 2, "loop"),
    Sched("ScheduleInterleavedZeroBubble", "zb-h1", 2, "loop"),
    Sched("ScheduleZBVZeroBubble", "zb-v", 2, "v"),
    Sched("ScheduleDualPipeV", "dualpipe-v", 2, "v"),
    Sched("zb-h2", "zb-h2", 1, "loop", csv=True),
    Sched("v-half", "v-half", 2, "v", csv=True),
    Sched("v-min", "v-min", 2, "v", csv=True),
    Sched("hanayo", "hanayo", 2, "v", csv=True),
    Sched("auto", "auto", 1, "loop", csv=True),
)}

# Schedule1F1B records no label: the harness wraps its stage's compute in these spans
USER_LABEL = "mem:{stage}{kind}{mb}"
USER_PATTERN = r"^mem:(?P<stage>\d+)(?P<kind>[FBIW])(?P<mb>\d+)$"


def stages_of_rank(s: Sched, rank: int, pp: int = P) -> list[int]:
    """Global stage indices rank ``rank`` holds, in increasing order."""
    if s.vpp == 1:
        return [rank]
    if s.placement == "v":
        return sorted((rank, 2 * pp - 1 - rank))
    return [rank + k * pp for k in range(s.vpp)]


def pipesim_schedule(s: Sched, microbatches: int, pp: int = P):
    """pipesim's Schedule object of ``s`` (what its CSV holds)."""
    if s.pipesim == "auto":
        from simulator.schedules.synthesis import synthesize
        return synthesize(pp, microbatches, s.vpp, None, None).schedule
    from simulator.schedules import registry
    return registry.generate(s.pipesim, pp, microbatches, s.vpp)


def workload_text(shape: Shape, microbatches: int, pp: int = P) -> str:
    """The model as a pipesim workload (model layout, 1 ms per pass: memory does not need
    times). A shape whose blocks differ gives each row its parameters as its weight-gradient
    all-reduce (2 bytes per parameter, pipesim's default ``grad_bytes_per_param``)."""
    header = (f"HYBRID_TRANSFORMER model_parallel_NPU_group: 1 ep: 1 pp: {pp} vpp: 1 "
              f"ga: {microbatches} all_gpus: {pp} pp_comm: {shape.pp_comm}")
    rows = [header, str(LAYERS)]
    sized = len(set(shape.ffn)) > 1
    for i in range(LAYERS):
        ig = 0 if i == 0 else 1_000_000
        wg = f"ALLREDUCE\t{2 * shape.params(i)}" if sized else "NONE\t0"
        rows.append(f"block{i}\t-1\t1000000\tNONE\t0\t{ig}\tNONE\t0\t1000000\t{wg}\t0")
    return "\n".join(rows) + "\n"
