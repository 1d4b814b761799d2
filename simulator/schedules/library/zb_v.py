"""ZB-V (zero-bubble V schedule, Qi et al. 2024 §6) in PyTorch 2.13's ScheduleZBVZeroBubble order.

Two chunks per rank in V placement: rank r runs stage r (going down) and stage 2P-1-r (coming
back up), so the last stage is on rank 0 next to the first. Backward is split into I (input
gradient, on the critical path) and W (weight gradient), and W fills what would be bubbles.
The order is torch's, action for action: torch pads to ``max(2P-1, M)`` microbatches so every
phase is full, then blanks the padding; here the padding is simply left out.
"""

from __future__ import annotations

from ...errors import ConfigError
from ..action import Action, Kind
from ..registration import register
from ..schedule import Schedule, v_placement


def _closed_form(pp: int, microbatches: int, vpp: int) -> float:
    # Unit costs F=I=W=1: each rank computes 2 chunks x M x 3 units. With M >= 3P/2 the only idle
    # time is the P-1 units the V needs to reach the turn; with fewer microbatches the warm-up
    # forwards run dry and the idle time is 4P-2-2M (found by timing torch's order, P 1..8).
    bubble = max(pp - 1, 4 * pp - 2 - 2 * microbatches)
    return bubble / (6 * microbatches + bubble)


def zb_v_order(rank: int, pp: int, microbatches: int) -> list[Action]:
    """Torch 2.13's ZB-V order for one rank (padding microbatches dropped)."""
    n = max(2 * pp - 1, microbatches)
    down, up = rank, 2 * pp - 1 - rank
    acts: list[Action] = []
    f = {down: 0, up: 0}   # next forward microbatch per stage
    i = {down: 0, up: 0}   # next input-gradient microbatch per stage
    w = {down: 0, up: 0}   # next weight-gradient microbatch per stage

    def emit(stage: int, kind: str) -> None:
        counter = {Kind.F: f, Kind.I: i, Kind.W: w}[kind]
        acts.append(Action(stage, kind, counter[stage]))
        counter[stage] += 1

    # Warm-up: fill the down leg, interleave the up leg, then the first I/W of the up leg.
    for _ in range(2 * (pp - rank) - 1):
        emit(down, Kind.F)
    for _ in range(rank):
        emit(up, Kind.F)
        emit(down, Kind.F)
    for _ in range(pp - rank):
        emit(up, Kind.F)
        emit(up, Kind.I)
        emit(up, Kind.W)
    # Steady: F/I/W on the down chunk, then on the up chunk, until all forwards are issued.
    while f[up] < f[down] or f[down] < n:
        if f[down] < n:
            emit(down, Kind.F)
        emit(down, Kind.I)
        emit(down, Kind.W)
        emit(up, Kind.F)
        emit(up, Kind.I)
        emit(up, Kind.W)
    # Cool-down: input gradients first (they feed other ranks), weight gradients last.
    for _ in range(rank):
        emit(down, Kind.I)
        emit(up, Kind.I)
    for _ in range(pp - rank):
        emit(down, Kind.I)
        emit(down, Kind.W)
    while w[up] < i[up]:
        emit(up, Kind.W)
    while w[down] < i[down]:
        emit(down, Kind.W)
    return [a for a in acts if a.microbatch < microbatches]


@register("zb-v", summary="ZB-V: two chunks per rank in a V, backward split into I and W; "
          "PyTorch ScheduleZBVZeroBubble order", closed_form=_closed_form,
          formula="b/(6M+b), b = max(P-1, 4P-2-2M)", default_vpp=2,
          aliases=("zbv", "zero-bubble-v", "zbvzerobubble"),
          work=lambda pp, m, v, actions: 6 * pp * max(2 * pp - 1, m),   # torch pads M to 2P-1
          torch_class="ZBVZeroBubble")
def generate(pp: int, microbatches: int, vpp: int = 2, **_: object) -> Schedule:
    if vpp != 2:
        raise ConfigError(f"--vpp: zb-v runs exactly 2 chunks per rank (V placement), "
                          f"got --vpp {vpp}")
    ranks = tuple(tuple(zb_v_order(r, pp, microbatches)) for r in range(pp))
    return Schedule("zb-v", pp, 2, microbatches, v_placement(pp), ranks)
