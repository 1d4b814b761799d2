"""Per-stage costs in the zero-bubble paper's model, as plain data.

Each virtual stage ``s`` has a forward ``f[s]``, an input-gradient backward ``i[s]`` and a
weight-gradient backward ``w[s]`` (a fused backward costs ``i[s] + w[s]``); an activation or a
gradient moving between two ranks arrives a fixed ``comm`` after it was produced (no link
contention). Costs are in one arbitrary time unit; lists are in global virtual-stage order.
Where a run gives them, ``memory`` holds the bytes each stage's F, I and W allocate (positive)
or free (negative) for one microbatch: the zero-bubble scheduler's memory model (its
``mem_f``, ``mem_b``, ``mem_w``), which the fork's greedy keeps under a limit.

It lives with the schedules (not in ``planning``) so that ``api`` can build one from a run's
workload and system and hand it to a cost-aware generator without importing the planning layer.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class StageCosts:
    f: tuple[float, ...]
    i: tuple[float, ...]
    w: tuple[float, ...]
    comm: float = 0.0
    # per stage (F, I, W) bytes of one microbatch, from the run's memory model; None: not given
    memory: tuple[tuple[float, float, float], ...] | None = None

    @property
    def n_stages(self) -> int:
        return len(self.f)

    def b(self, stage: int) -> float:
        """A fused backward: input and weight gradients in one action."""
        return self.i[stage] + self.w[stage]

    @classmethod
    def unit(cls, n_stages: int) -> "StageCosts":
        """F = I = W = 1, no communication: what ``auto`` assumes without ``--stage-costs``."""
        ones = (1,) * n_stages
        return cls(ones, ones, ones, 0)
