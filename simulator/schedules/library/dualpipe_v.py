"""DualPipeV (DeepSeek's DualPipe "cut in half"), in PyTorch 2.13's ``ScheduleDualPipeV`` order.

V placement: rank r runs stage r and stage 2P-1-r. In the steady state each rank runs the forward
of one chunk overlapped with the backward of the other (one OVERLAP_F_B step, F half first; the
compute view numbers the pairs 0, 1, ... per rank), which hides the communication of one behind
the compute of the other. The warm-up and cool-down split some backwards into I and W
(zero-bubble style). Torch requires two chunks per rank and M >= 2P microbatches.
"""

from __future__ import annotations

from collections import deque

from ...errors import ConfigError
from ..action import Action, Kind
from ..registration import register
from ..schedule import Schedule, v_placement


def _closed_form(pp: int, microbatches: int, vpp: int) -> float:
    # DeepSeek's bubble (PP/2-1)(F&B + B - 3W) with PP = 2P stages; unit costs F=W=1, B=2, F&B=3:
    # 2(P-1) idle units against 2M x (F+B) = 6M units of work per rank.
    bubble = 2 * (pp - 1)
    return bubble / (6 * microbatches + bubble)


class RankOrder:
    """Builds one rank's steps, numbering microbatches per stage in issue order.

    ``first_mb[stage]`` is the first microbatch a stage sees (0 unless, as in bidirectional
    DualPipe, the stage belongs to a pipeline whose microbatches are numbered from M/2).
    """

    def __init__(self, first_mb: dict[int, int] | None = None) -> None:
        self.acts: list[Action] = []
        self.next_f: dict[int, int] = dict(first_mb or {})
        self.next_b: dict[int, int] = dict(first_mb or {})
        self.pending_w: deque[tuple[int, int]] = deque()
        self.pairs = 0

    def forward(self, stage: int, pair: int | None = None) -> None:
        mb = self.next_f.get(stage, 0)
        self.next_f[stage] = mb + 1
        self.acts.append(Action(stage, Kind.F, mb, pair))

    def backward(self, stage: int, split: bool = False, pair: int | None = None) -> None:
        """Full B, or (split) I now and its W queued for :meth:`weight`."""
        mb = self.next_b.get(stage, 0)
        self.next_b[stage] = mb + 1
        self.acts.append(Action(stage, Kind.I if split else Kind.B, mb, pair))
        if split:
            self.pending_w.append((stage, mb))

    def weight(self) -> None:
        """The oldest deferred W, if any (torch skips the slot when none is pending)."""
        if self.pending_w:
            stage, mb = self.pending_w.popleft()
            self.acts.append(Action(stage, Kind.W, mb))

    def overlapped(self, f_stage: int, b_stage: int) -> None:
        """One OVERLAP_F_B step: the forward of ``f_stage`` and the backward of ``b_stage``
        (halves numbered with the pair's index on this rank, as the compute view has them)."""
        self.forward(f_stage, self.pairs)
        self.backward(b_stage, pair=self.pairs)
        b = self.acts.pop()
        self.acts.append(Action.overlap(self.acts.pop(), b))
        self.pairs += 1


def dualpipe_v_order(rank: int, pp: int, microbatches: int) -> list[Action]:
    """Torch 2.13's DualPipeV order for one rank (its 8 steps), pairs as OVERLAP_F_B steps."""
    s0, s1 = rank, 2 * pp - 1 - rank
    o = RankOrder()
    for _ in range((pp - rank - 1) * 2):                 # 1: F0
        o.forward(s0)
    for _ in range(rank + 1):                            # 2: F0 F1
        o.forward(s0)
        o.forward(s1)
    for _ in range(pp - rank - 1):                       # 3: I1 W F1
        o.backward(s1, split=True)
        o.weight()
        o.forward(s1)
    for i in range(microbatches - 2 * pp + rank + 1):    # 4: (F0 B1) (F1 B0)
        if i == 0 and rank == pp - 1:
            o.forward(s0)                                # the turn: not overlapped, less bubble
            o.backward(s1)
        else:
            o.overlapped(s0, s1)
        o.overlapped(s1, s0)
    for _ in range(pp - rank - 1):                       # 5: B1 (F1 B0)
        o.backward(s1)
        o.overlapped(s1, s0)
    split = False
    for i in range(rank + 1):                            # 6: B1 B0, second half split
        if i == (rank + 1) // 2 and rank % 2 == 1:
            split = True
        o.backward(s1, split=split)
        if i == (rank + 1) // 2 and rank % 2 == 0:
            split = True
        o.backward(s0, split=split)
    for _ in range(pp - rank - 1):                       # 7: W I0
        o.weight()
        o.backward(s0, split=True)
    for _ in range(rank + 1):                            # 8: W
        o.weight()
    return o.acts


def check_dualpipe_v(pp: int, microbatches: int, vpp: int) -> None:
    if vpp != 2:
        raise ConfigError(f"--vpp: dualpipe-v runs exactly 2 chunks per rank (V placement), "
                          f"got --vpp {vpp}")
    if microbatches < 2 * pp:
        raise ConfigError(f"--microbatches: dualpipe-v needs at least as many microbatches as "
                          f"stages (2 x pp = {2 * pp}), got {microbatches}")


@register("dualpipe-v", summary="DualPipeV: V placement, overlapped F/B pairs, zero-bubble "
          "warm-up/cool-down; PyTorch ScheduleDualPipeV order; needs M >= 2P",
          closed_form=_closed_form, formula="2(P-1)/(6M+2(P-1))", default_vpp=2,
          aliases=("dualpipev",), torch_class="DualPipeV",
          # overlapped F/B pairs hide collectives: the planner's bound does not hold
          lower_bound=False)
def generate(pp: int, microbatches: int, vpp: int = 2, **_: object) -> Schedule:
    check_dualpipe_v(pp, microbatches, vpp)
    ranks = tuple(tuple(dualpipe_v_order(r, pp, microbatches)) for r in range(pp))
    return Schedule("dualpipe-v", pp, 2, microbatches, v_placement(pp), ranks)
