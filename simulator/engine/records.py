"""What a run records: one row per action, transfer and collective (and per layer state when
asked). Plain named tuples: cheap to create in the hot loop, easy to export."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, NamedTuple

if TYPE_CHECKING:
    from .network import LinkStats


class ActionRecord(NamedTuple):
    rank: int
    stage: int
    kind: str          # F, B, I, W
    microbatch: int
    iteration: int
    start: float       # ns
    end: float
    phase: str         # Warmup, Steady, Cooldown
    chunk: int         # model chunk (layer range) the stage computes
    pair: int | None   # overlapped F/B pair number, if any


class TransferRecord(NamedTuple):
    src_rank: int
    dst_rank: int
    src_stage: int
    dst_stage: int
    data: str          # "F" activation, "B" gradient
    microbatch: int
    iteration: int
    nbytes: int
    issued: float
    start: float
    end: float


class CollectiveRecord(NamedTuple):
    """A weight-gradient (DP) collective on a rank's communication stream."""

    rank: int
    chunk: int
    layer: int
    iteration: int
    nbytes: int
    ready: float
    start: float
    end: float         # collective done; the layer's update_time follows


class LayerRecord(NamedTuple):
    """One Workload-FSM state of one layer (recorded only with ``trace_layers``)."""

    rank: int
    stage: int
    microbatch: int
    iteration: int
    layer: int
    state: str         # Forward_Pass, Input_Gradient, Weight_Gradient, Forward_In_BackPass
    start: float
    end: float


# a plain class, not a dataclass: start-up (simulator/__init__.py)
class RunRecords:
    """Everything one run recorded (both engines make one)."""

    __slots__ = ("actions", "transfers", "collectives", "layers", "memory", "peak_memory",
                 "memory_peaks", "memory_model", "static_memory", "iteration_bounds",
                 "rank_finish", "links", "layer_ops")

    def __init__(self, actions: Sequence[ActionRecord] | None = None,
                 transfers: Sequence[TransferRecord] | None = None) -> None:
        # lists, or time columns (columns.py) read as the same sequence of records
        self.actions: Sequence[ActionRecord] = [] if actions is None else actions
        self.transfers: Sequence[TransferRecord] = [] if transfers is None else transfers
        self.collectives: list[CollectiveRecord] = []
        self.layers: list[LayerRecord] = []
        # (rank, t, bytes), recorded with trace_layers (a trace's memory counter); the peaks
        # are always kept
        self.memory: list[tuple[int, float, float]] = []
        self.peak_memory: list[float] = []              # per rank
        self.memory_peaks: list = []                    # per rank: memory_use.MemoryPeak
        self.memory_model: object = None                # the engine/memory.MemoryModel applied
        self.static_memory: list[float] = []            # per rank
        self.iteration_bounds: list[tuple[float, float]] = []
        self.rank_finish: list[list[float]] = []        # [iteration][rank]
        self.links: dict[tuple[int, int], LinkStats] = {}
        self.layer_ops = 0
