"""A schedule as plain data: per rank, the ordered compute actions it runs.

Generating an order (``library/``), checking it (``validate``), adding communication
(``comm_pass``) and timing it (``simulator.engine``) are separate steps.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property

from .action import Action, Kind


@dataclass(frozen=True)
class Schedule:
    """Per-rank action lists plus the stage layout they assume.

    - ``placement[s]`` is the rank that runs virtual stage ``s``.
    - ``pipelines`` are the stage sequences data flows through (stage k feeds k+1 within one);
      one pipeline ``0..n_stages-1`` unless a schedule feeds microbatches from both ends.
    - ``stage_chunk[s]`` is the model chunk (contiguous layer range) stage ``s`` computes;
      identity unless two stages share weights (bidirectional DualPipe).
    - ``flush``: the iteration ends with a pipeline flush (all but PipeDream-2BW).
    """

    name: str
    pp: int
    vpp: int
    microbatches: int
    placement: tuple[int, ...]
    ranks: tuple[tuple[Action, ...], ...]
    pipelines: tuple[tuple[int, ...], ...] = ()
    stage_chunk: tuple[int, ...] = ()
    flush: bool = True
    meta: dict = field(default_factory=dict, compare=False)

    def __post_init__(self) -> None:
        if not self.pipelines:
            object.__setattr__(self, "pipelines", (tuple(range(len(self.placement))),))
        if not self.stage_chunk:
            object.__setattr__(self, "stage_chunk", tuple(range(len(self.placement))))

    @property
    def n_stages(self) -> int:
        return len(self.placement)

    @property
    def n_chunks(self) -> int:
        return max(self.stage_chunk) + 1 if self.stage_chunk else 0

    def stages_of(self, rank: int) -> tuple[int, ...]:
        return tuple(s for s, r in enumerate(self.placement) if r == rank)

    @cached_property
    def _neighbours(self) -> tuple[dict[int, int | None], dict[int, int | None]]:
        prev: dict[int, int | None] = {}
        nxt: dict[int, int | None] = {}
        for pipe in self.pipelines:
            for i, stage in enumerate(pipe):
                prev.setdefault(stage, pipe[i - 1] if i > 0 else None)
                nxt.setdefault(stage, pipe[i + 1] if i + 1 < len(pipe) else None)
        return prev, nxt

    def prev_stage(self, stage: int) -> int | None:
        """The stage feeding ``stage`` its activations (None for a pipeline's first stage)."""
        return self._neighbours[0].get(stage)

    def next_stage(self, stage: int) -> int | None:
        """The stage ``stage`` sends its activations to (None for a pipeline's last stage)."""
        return self._neighbours[1].get(stage)

    @property
    def split_backward(self) -> bool:
        return any(a.kind in (Kind.I, Kind.W) for acts in self.ranks for a in acts)

    def as_strings(self) -> list[list[str]]:
        return [[str(a) for a in acts] for acts in self.ranks]


def loop_placement(pp: int, vpp: int) -> tuple[int, ...]:
    """Stage s on rank s mod pp (Megatron interleaved, looped BFS)."""
    return tuple(s % pp for s in range(pp * vpp))


def v_placement(pp: int) -> tuple[int, ...]:
    """Rank r holds stages r and 2pp-1-r (ZB-V, DualPipeV)."""
    return tuple(list(range(pp)) + list(range(pp - 1, -1, -1)))
