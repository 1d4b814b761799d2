"""Zero-bubble handcrafted schedules (Qi et al., "Zero Bubble Pipeline Parallelism", ICLR 2024).

The backward is split into I (gradient for the input: on the critical path, the previous stage
waits for it) and W (gradient for the weights: nobody waits, so it can fill idle time).

- ``zb-h1`` (ZB1P): 1F1B with B split into I then W, rank r deferring its first W by r steps so
  the deferred Ws fill the cool-down; peak activations as 1F1B. With v > 1 chunks per rank it is
  PyTorch's ``ScheduleInterleavedZeroBubble`` (warm-up ``(P-r-1) + (v-1)N``, groups of N as in
  interleaved-1f1b). Orders are action for action PyTorch 2.13's runtime order (v = 1 included).
- ``zb-h2`` (ZB2P; no PyTorch class): up to 2P-1 microbatches awaiting their W on a rank
  (rank r warms up with 2(P-r)-1 forwards) and W filling every gap, laid out as the paper's
  heuristic does under F = I = W (see :func:`zb_h2_orders`). For M >= 2P-1 each rank is busy
  without a gap from its first action to its last (the paper's parallelogram: rank r runs from
  r·F to r·F + 3M·F): its bubble, (P-1)(F+I-2W), is 0. The global makespan, 3M+P-1 under unit
  costs, still holds the (P-1)·F it takes the first forward to reach the last rank.
"""

from __future__ import annotations

from ...errors import ConfigError
from ..action import Action, Kind
from ..deps import dependents_table, needs_table, neighbour_stages, ready
from ..registration import register
from ..schedule import Schedule, loop_placement
from .interleaved_1f1b import interleaved_order, resolve_group_size


def _zb_h1_closed_form(pp: int, microbatches: int, vpp: int) -> float:
    return (pp - 1) / (3 * vpp * microbatches + pp - 1)


@register("zb-h1",
          summary="ZB-H1 / ZB1P zero bubble (PyTorch InterleavedZeroBubble): 1F1B with B split "
                  "into I and W, Ws deferred into the cool-down; 1F1B's memory; --vpp > 1 "
                  "interleaves chunks",
          closed_form=_zb_h1_closed_form,
          formula="(P-1)/(3vM+P-1)",
          variable_vpp=True, aliases=("zb1p", "zbh1", "interleaved-zero-bubble", "interleavedzerobubble"),
          torch_class="InterleavedZeroBubble")
def generate_zb_h1(pp: int, microbatches: int, vpp: int = 1, group_size: int | None = None,
                   **_: object) -> Schedule:
    n = resolve_group_size(pp, microbatches, vpp, group_size, "zb-h1")
    total = vpp * microbatches
    ranks = tuple(
        tuple(interleaved_order(r, pp, vpp, microbatches, n,
                                min((pp - r - 1) + (vpp - 1) * n, total),
                                split_backward=True, w_delay=r))
        for r in range(pp))
    return Schedule("zb-h1", pp, vpp, microbatches, loop_placement(pp, vpp), ranks,
                    meta={"group_size": n})


def zb_h2_orders(pp: int, microbatches: int) -> list[list[Action]]:
    """Every rank's order, as the zero-bubble heuristic lays it out under F = I = W = 1.

    A list scheduler on integer time: each free rank takes its next I if what it needs
    (:mod:`..deps`) has arrived, else its next F if it has arrived and fewer than 2P-1
    microbatches await their W, else its oldest pending W, else idles. Rank r thus warms up
    with 2(P-r)-1 forwards and fills every gap with W; for M >= 2P-1 no rank idles between its
    first and last action.

    What a rank takes at t depends only on what ended by t and on its own counts, so a rank is
    looked at only when its own action ends or one its actions need ends (the rule's
    dependents): visiting every rank at every t cost O(P) per time step.
    """
    m, limit = microbatches, 2 * pp - 1
    rule = needs_table(*neighbour_stages((tuple(range(pp)),), pp))
    woken_by = {key: tuple(sorted({st for st, _ in named}))     # stage r is rank r
                for key, named in dependents_table(rule).items()}
    done_at: dict[tuple[int, str, int], int] = {}
    count = {kind: [0] * pp for kind in "FIW"}
    orders: list[list[Action]] = [[] for _ in range(pp)]
    free_at = [0] * pp
    woken = set(range(pp))      # the ranks to look at, at t (every action takes one unit)
    w_left = pp * m
    t = 0
    while w_left:
        later: set[int] = set()
        for r in woken:     # in any order: no rank sees what another takes at t
            if free_at[r] > t:
                continue  # still busy
            f, i, w = count[Kind.F][r], count[Kind.I][r], count[Kind.W][r]
            if i < f and ready(rule[(r, Kind.I)], i, done_at, t):
                kind = Kind.I
            elif f < m and f - w < limit and ready(rule[(r, Kind.F)], f, done_at, t):
                kind = Kind.F
            elif w < i and ready(rule[(r, Kind.W)], w, done_at, t):
                kind = Kind.W
                w_left -= 1
            else:
                continue
            mb = count[kind][r]
            count[kind][r] += 1
            done_at[(r, kind, mb)] = free_at[r] = t + 1
            orders[r].append(Action(r, kind, mb))
            later.add(r)
            later.update(woken_by[(r, kind)])
        woken = later
        t += 1
    return orders


def _zb_h2_closed_form(pp: int, microbatches: int, vpp: int) -> float:
    return 0.0


@register("zb-h2",
          summary="ZB-H2 / ZB2P zero bubble: up to 2P-1 microbatches in flight, W fills the "
                  "warm-up and cool-down; every rank busy from its first to its last action",
          closed_form=_zb_h2_closed_form,
          # as the zero-bubble paper counts it: each rank's idle time between its own first and
          # last action at F=I=W (B=2); the global makespan is still 3M+P-1 units
          formula="0 per stage (M >= 2P-1)",
          aliases=("zb2p", "zbh2"), closed_form_basis="own",
          # its construction costs about P/12 engine actions per action (1.2 ms an action at
          # P 1000, 2.6 ms at P 3000, 16 us at P 8)
          work=lambda pp, m, v, actions: actions * (1 + pp // 12))
def generate_zb_h2(pp: int, microbatches: int, vpp: int = 1, **_: object) -> Schedule:
    if vpp != 1:
        raise ConfigError(f"--vpp: zb-h2 runs one chunk per rank, got --vpp {vpp}; use zb-v for "
                          "two chunks per rank")
    ranks = tuple(tuple(acts) for acts in zb_h2_orders(pp, microbatches))
    return Schedule("zb-h2", pp, 1, microbatches, loop_placement(pp, 1), ranks)
