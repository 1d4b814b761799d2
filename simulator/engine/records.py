"""What a run records: one row per action, transfer and collective (and per layer state when
asked). Plain named tuples: cheap to create in the hot loop, easy to export."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
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


@dataclass
class RunRecords:
    """Everything one run recorded (both engines make one)."""

    # lists, or time columns (columns.py) read as the same sequence of records
    actions: Sequence[ActionRecord] = field(default_factory=list)
    transfers: Sequence[TransferRecord] = field(default_factory=list)
    collectives: list[CollectiveRecord] = field(default_factory=list)
    layers: list[LayerRecord] = field(default_factory=list)
    memory: list[tuple[int, float, float]] = field(default_factory=list)  # (rank, t, bytes),
    # recorded with trace_layers (a trace's memory counter); the peaks are always kept
    peak_memory: list[float] = field(default_factory=list)               # per rank
    memory_peaks: list = field(default_factory=list)   # per rank: memory_use.MemoryPeak
    memory_model: object = None                       # the engine/memory.MemoryModel applied
    static_memory: list[float] = field(default_factory=list)             # per rank
    iteration_bounds: list[tuple[float, float]] = field(default_factory=list)
    rank_finish: list[list[float]] = field(default_factory=list)  # [iteration][rank]
    links: dict[tuple[int, int], LinkStats] = field(default_factory=dict)
    layer_ops: int = 0
