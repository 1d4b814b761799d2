"""DualPipe (DeepSeek-V3): bidirectional pipeline with overlapped forward/backward pairs.

The model's P chunks run in two directions at once: the forward-direction pipeline enters at rank
0 (chunk k on rank k) and the reverse-direction pipeline enters at rank P-1 (chunk k on rank
P-1-k), so every rank holds two chunks and the parameters are stored twice. Here that is
2P stages: stages 0..P-1 are the forward direction, stage P+k is step k of the reverse direction
(on rank P-1-k, computing chunk k, so ``stage_chunk`` pairs it with stage k).

Microbatches: DeepSeek splits the M microbatches in two halves, one per direction, each numbered
from 0. Here the forward direction carries microbatches 0..M/2-1 and the reverse direction
M/2..M-1 (reverse chunk c is microbatch M/2+c).

Order: the 8 steps of ``DualPipe.step`` in deepseek-ai/DualPipe (dualpipe/dualpipe.py). Ranks in
the second half swap the roles of their two chunks ("phase ^= is_in_second_half"), so every
rank's order is the one of rank min(r, P-1-r). A backward run with zero-bubble enabled is I now
plus a W popped later, first in first out. DeepSeek requires P even, M even and M >= 2P.
"""

from __future__ import annotations

from ...errors import ConfigError
from ..action import Action
from ..registration import register
from ..schedule import Schedule, v_placement
from .dualpipe_v import RankOrder


def _closed_form(pp: int, microbatches: int, vpp: int) -> float:
    # DeepSeek's bubble (PP/2-1)(F&B + B - 3W), PP = P ranks; unit costs F=W=1, B=2, F&B=3:
    # P-2 idle units against 2 chunks x M/2 microbatches x (F+B) = 3M units of work per rank.
    bubble = pp - 2
    return bubble / (3 * microbatches + bubble)


def dualpipe_order(rank: int, pp: int, microbatches: int) -> list[Action]:
    """DeepSeek's DualPipe order for one rank, pairs as OVERLAP_F_B steps."""
    half_ranks = pp // 2
    h = min(rank, pp - 1 - rank)                 # position within the half
    middle = h == half_ranks - 1
    fwd_stage, rev_stage = rank, 2 * pp - 1 - rank
    # DeepSeek's "phase 0/1": for the first half of the ranks phase 0 is the forward direction,
    # for the second half it is the reverse direction.
    c0, c1 = (fwd_stage, rev_stage) if rank < half_ranks else (rev_stage, fwd_stage)
    o = RankOrder({fwd_stage: 0, rev_stage: microbatches // 2})
    for _ in range((half_ranks - h - 1) * 2):                  # 1: nF0
        o.forward(c0)
    for _ in range(h + 1):                                     # 2: nF0F1
        o.forward(c0)
        o.forward(c1)
    for _ in range(half_ranks - h - 1):                        # 3: nB1W1F1 (zero bubble)
        o.backward(c1, split=True)
        o.weight()
        o.forward(c1)
    for i in range(microbatches // 2 - pp + h + 1):            # 4: nF0B1F1B0
        if i == 0 and middle:
            o.forward(c0)                                      # not overlapped: less bubble
            o.backward(c1)
        else:
            o.overlapped(c0, c1)
        o.overlapped(c1, c0)
    for _ in range(half_ranks - h - 1):                        # 5: nB1F1B0
        o.backward(c1)
        o.overlapped(c1, c0)
    split = False
    for i in range(h + 1):                                     # 6: nB1B0, second half split
        if i == (h + 1) // 2 and h % 2 == 1:
            split = True
        o.backward(c1, split=split)
        if i == (h + 1) // 2 and h % 2 == 0:
            split = True
        o.backward(c0, split=split)
    for _ in range(half_ranks - h - 1):                        # 7: nWB0 (zero bubble)
        o.weight()
        o.backward(c0, split=True)
    for _ in range(h + 1):                                     # 8: nW
        o.weight()
    return o.acts


def check_dualpipe(pp: int, microbatches: int, vpp: int) -> None:
    if vpp != 2:
        raise ConfigError(f"--vpp: dualpipe runs exactly 2 chunks per rank (one per direction), "
                          f"got --vpp {vpp}")
    if pp % 2:
        raise ConfigError(f"--pp: dualpipe needs an even number of ranks, got {pp}")
    if microbatches % 2 or microbatches < 2 * pp:
        raise ConfigError(f"--microbatches: dualpipe needs an even number of microbatches, at "
                          f"least 2 x pp = {2 * pp}, got {microbatches}")


def _sizes(pp: int, microbatches: int, vpp: int, options: dict) -> tuple[int, int]:
    """Both directions share the P chunks (two model copies); at most F, I, W per stage-mb."""
    return pp, 3 * 2 * pp * microbatches


@register("dualpipe", summary="DualPipe (DeepSeek-V3): bidirectional, microbatches enter at both "
          "ends, overlapped F/B pairs, 2x parameters; needs P even, M even, M >= 2P",
          closed_form=_closed_form, formula="(P-2)/(3M+P-2)", default_vpp=2, sizes=_sizes,
          shares_weights=True,
          # overlapped F/B pairs hide collectives and microbatches enter at both ends: neither
          # term of the planner's bound holds
          lower_bound=False)
def generate(pp: int, microbatches: int, vpp: int = 2, **_: object) -> Schedule:
    check_dualpipe(pp, microbatches, vpp)
    ranks = tuple(tuple(dualpipe_order(r, pp, microbatches)) for r in range(pp))
    return Schedule(
        "dualpipe", pp, 2, microbatches, v_placement(pp), ranks,
        pipelines=(tuple(range(pp)), tuple(range(pp, 2 * pp))),
        stage_chunk=tuple(range(pp)) * 2,
        meta={"parameter_copies": 2,
              "directions": {"forward": (0, microbatches // 2),
                             "reverse": (microbatches // 2, microbatches)}},
    )
