"""The model the fidelity harness runs, as plain numbers (no torch needed).

One model of ``LAYERS`` tiny layers is run by every schedule class: P stages of LAYERS/P layers
for the single-stage classes, 2P chunks of LAYERS/(2P) layers for the multi-stage ones, so the
same per-layer costs describe both chunkings (what calibration has to carry from one to the
other). Each layer's forward, input-gradient and weight-gradient paths take a known time; the
first layer of the model has no input gradient (its input is the data, which needs none, and
torch computes none), so its ``ig`` cost is 0.
"""

from __future__ import annotations

from dataclasses import dataclass

P = 4                 # pipeline ranks
M = 8                 # microbatches per iteration
LAYERS = 16           # layers of the whole model: 4 per rank-stage, 2 per chunk at v = 2
HIDDEN = 16           # features per row of the activations
ROWS_PER_MB = 2       # rows of one microbatch
BYTES_PER_ELEMENT = 4  # float32
PP_COMM_BYTES = ROWS_PER_MB * HIDDEN * BYTES_PER_ELEMENT   # one activation / gradient transfer

# the harness's own compute labels where torch records none (Schedule1F1B), and their pattern
USER_LABEL = "fidelity:{stage}{kind}{mb}"
USER_PATTERN = r"^fidelity:(?P<stage>\d+)(?P<kind>[FBIW])(?P<mb>\d+)$"

BASE_NS = 4_000_000   # per layer and pass in the uniform case (--layer-ms)


@dataclass(frozen=True)
class LayerCost:
    fwd_ns: int
    ig_ns: int
    wg_ns: int


@dataclass(frozen=True)
class Case:
    name: str
    summary: str
    layers: tuple[LayerCost, ...]

    def stage_costs(self, n_stages: int) -> list[LayerCost]:
        """Summed (F, I, W) of each of ``n_stages`` equal chunks of the model."""
        per = LAYERS // n_stages
        out = []
        for s in range(n_stages):
            chunk = self.layers[s * per:(s + 1) * per]
            out.append(LayerCost(sum(c.fwd_ns for c in chunk), sum(c.ig_ns for c in chunk),
                                 sum(c.wg_ns for c in chunk)))
        return out


def _layers(scale: list[float], base_ns: int) -> tuple[LayerCost, ...]:
    out = []
    for i, k in enumerate(scale):
        ns = int(round(base_ns * k))
        out.append(LayerCost(ns, 0 if i == 0 else ns, ns))
    return tuple(out)


def make_cases(base_ns: int = BASE_NS) -> dict[str, Case]:
    """The three cost cases with ``base_ns`` per layer and pass (2x on the heavy quarter)."""
    q = LAYERS // P
    ms = f"{base_ns / 1e6:g} ms"
    return {
        "uniform": Case("uniform", f"every layer {ms} per pass",
                        _layers([1.0] * LAYERS, base_ns)),
        "heavy-last": Case("heavy-last", "the last quarter of the layers (stage 3 at v = 1) 2x",
                           _layers([1.0] * (LAYERS - q) + [2.0] * q, base_ns)),
        "heavy-first": Case("heavy-first", "the first quarter of the layers (stage 0 at v = 1) 2x",
                            _layers([2.0] * q + [1.0] * (LAYERS - q), base_ns)),
    }


CASES: dict[str, Case] = make_cases()


@dataclass(frozen=True)
class ScheduleClass:
    torch_name: str     # class in torch.distributed.pipelining
    pipesim: str        # pipesim schedule name
    vpp: int            # stages per rank
    placement: str      # "loop" (stage s on rank s mod P) or "v" (rank r: stages r and 2P-1-r)
    multi: bool         # runs on torch's multi-stage runtime (_PipelineScheduleRuntime)


CLASSES: dict[str, ScheduleClass] = {c.torch_name: c for c in (
    ScheduleClass("ScheduleGPipe", "gpipe", 1, "loop", False),
    ScheduleClass("Schedule1F1B", "1f1b", 1, "loop", False),
    ScheduleClass("ScheduleInterleaved1F1B", "interleaved-1f1b", 2, "loop", True),
    ScheduleClass("ScheduleLoopedBFS", "looped-bfs", 2, "loop", True),
    ScheduleClass("ScheduleInterleavedZeroBubble", "zb-h1", 2, "loop", True),
    ScheduleClass("ScheduleZBVZeroBubble", "zb-v", 2, "v", True),
    ScheduleClass("ScheduleDualPipeV", "dualpipe-v", 2, "v", True),
)}


def stages_of_rank(cls: ScheduleClass, rank: int, pp: int = P) -> list[int]:
    """Global stage indices rank ``rank`` holds, in increasing order."""
    if cls.vpp == 1:
        return [rank]
    if cls.placement == "v":
        return sorted((rank, 2 * pp - 1 - rank))
    return [rank + k * pp for k in range(cls.vpp)]


def workload_text(case: Case, pp: int = P, microbatches: int = M) -> str:
    """The pipesim workload file (model layout) of ``case``: one row per layer, costs in ns."""
    header = (f"HYBRID_TRANSFORMER model_parallel_NPU_group: 1 ep: 1 pp: {pp} vpp: 1 "
              f"ga: {microbatches} all_gpus: {pp} pp_comm: {PP_COMM_BYTES}")
    rows = [header, str(len(case.layers))]
    for i, c in enumerate(case.layers):
        rows.append(f"layer{i}\t-1\t{c.fwd_ns}\tNONE\t0\t{c.ig_ns}\tNONE\t0\t{c.wg_ns}\tNONE\t0\t0")
    return "\n".join(rows) + "\n"
