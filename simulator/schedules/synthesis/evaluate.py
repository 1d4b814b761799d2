"""Exact makespan of a schedule under the zero-bubble paper's model.

Every rank runs its list in order, one action at a time; an action starts when the rank is free
and its inputs are there: F(s, m) needs F(prev(s), m), I or B(s, m) needs F(s, m) and the input
gradient of next(s) (its I or B), W(s, m) needs I(s, m). A dependency between two ranks adds the
fixed ``comm``; none within a rank. Start times are then the longest path through this graph —
no contention, no jitter — which is what synthesis optimises and what the lower bound bounds.
A B ends at ``(start + i) + w``, the float an I and its W run back to back end at, so fusing
such a pair moves no other action on the rank.

Synthesis evaluates thousands of orders, so actions are their :class:`~..deps.Codec` codes and
:meth:`Problem.times` is a plain loop over the rule's rows (:func:`~..deps.need_rows`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from ..action import Action
from ..deps import B, F, I, W, Codec, need_rows, neighbour_stages
from ..schedule import Schedule, loop_placement
from ..validate import validate
from .costs import StageCosts


class Problem:
    """P ranks, M microbatches, the placement of the stages and their costs.

    Actions are :class:`~..deps.Codec` codes (``codec``); the stages form one pipeline,
    0 .. n_stages-1.
    """

    def __init__(self, pp: int, microbatches: int, costs: StageCosts,
                 placement: Sequence[int] | None = None) -> None:
        self.pp = pp
        self.m = microbatches
        self.placement = tuple(placement if placement is not None else loop_placement(pp, 1))
        self.n_stages = len(self.placement)
        if costs.n_stages != self.n_stages:
            raise ValueError(f"{costs.n_stages} stage costs for {self.n_stages} stages")
        self.costs = costs
        self.vpp = self.n_stages // pp
        S, M = self.n_stages, microbatches
        self.codec = Codec(S, M)
        self.cost = [0.0] * (4 * S * M)
        for s in range(S):
            for kind, c in ((F, costs.f[s]), (I, costs.i[s]), (W, costs.w[s]),
                            (B, costs.i[s] + costs.w[s])):
                base = (kind * S + s) * M
                for m in range(M):
                    self.cost[base + m] = c
        # comm after stage s's forward reaches s+1 / after its input gradient reaches s-1
        self.fwd_comm = [costs.comm if s + 1 < S and self.placement[s + 1] != self.placement[s]
                         else 0.0 for s in range(S)]
        self.bwd_comm = [costs.comm if s > 0 and self.placement[s - 1] != self.placement[s]
                         else 0.0 for s in range(S)]
        # ``rule``: deps' rule over the codes' rows (need_rows), for the loops that time
        # actions (times, the search's fuse): per row the first code of its one need and of the
        # two that meet its other (the next stage's I, else its B: the input gradient), then the
        # comm each adds when it crosses ranks; the row "none" (codes from 4 x S x M) stands for
        # a need met at time 0
        rows = need_rows(*neighbour_stages((tuple(range(S)),), S))
        place = self.placement

        def base(need: list[int]) -> list[int]:
            return [row * M for row in need]

        def gap(need: list[int]) -> list[float]:
            return [costs.comm if n != rows.none and place[n % S] != place[row % S] else 0.0
                    for row, n in enumerate(need)]

        self.rule = (base(rows.one), gap(rows.one), base(rows.other), base(rows.either),
                     gap(rows.other))

    @classmethod
    def for_schedule(cls, schedule: Schedule, costs: StageCosts) -> "Problem":
        return cls(schedule.pp, schedule.microbatches, costs, schedule.placement)

    def encode_ranks(self, ranks: Sequence[Sequence[Action]]) -> list[list[int]]:
        encode = self.codec.encode
        return [[encode(a) for a in acts] for acts in ranks]

    def split_needs(self, x: int) -> list[tuple[int, float]]:
        """The codes action ``x`` needs where every backward is split (each input gradient is
        an I's), each with the comm it adds: the rule :meth:`times` walks."""
        row, mb = divmod(x, self.m)
        one, one_gap, grad, _, grad_gap = self.rule
        none = 4 * self.n_stages * self.m
        return [(need[row] + mb, gap[row]) for need, gap in ((one, one_gap), (grad, grad_gap))
                if need[row] != none]

    def times(self, orders: Sequence[Sequence[int]]) -> list[float] | None:
        """End time of every action code (index = code; unused codes stay -1), or None on a
        deadlock.

        Assumes a complete order (every F and every backward once); :func:`evaluate` checks that.
        """
        M = self.m
        SM = self.n_stages * M
        n = 4 * SM
        b_first = B * SM       # B's codes come last: (start + I's cost) + W's cost
        to_i, to_w = (B - I) * SM, (B - W) * SM
        cost = self.cost
        one, one_gap, grad, grad_b, grad_gap = self.rule
        none = n       # the row "none"'s codes, past the last: met at time 0 for every microbatch
        end = [-1.0] * n + [0.0] * M
        ptr = [0] * len(orders)
        free = [0.0] * len(orders)
        left = sum(len(o) for o in orders)
        while left:
            progress = False
            for r, order in enumerate(orders):
                p, t, n_r = ptr[r], free[r], len(order)
                while p < n_r:
                    x = order[p]
                    row, mb = divmod(x, M)
                    d = end[one[row] + mb]
                    if d < 0:
                        break
                    d += one_gap[row]
                    if d > t:
                        t = d
                    g = grad[row]
                    if g != none:                     # the input gradient: its I ...
                        d = end[g + mb]
                        if d < 0:
                            d = end[grad_b[row] + mb]     # ... or its B
                            if d < 0:
                                break
                        d += grad_gap[row]
                        if d > t:
                            t = d
                    if x >= b_first:   # (start + i) + w: the float its I then its W would end at
                        t += cost[x - to_i]
                        t += cost[x - to_w]
                    else:
                        t += cost[x]
                    end[x] = t
                    p += 1
                if p != ptr[r]:
                    left -= p - ptr[r]
                    ptr[r], free[r] = p, t
                    progress = True
            if not progress:
                return None
        del end[n:]
        return end

    def makespan(self, orders: Sequence[Sequence[int]]) -> float | None:
        end = self.times(orders)
        return None if end is None else max(end)

    def peak_inflight(self, order: Sequence[int]) -> int:
        """Most activations a rank holds: +1 at each F, -1 at each W or B."""
        SM = self.n_stages * self.m
        held = peak = 0
        for x in order:
            kind = x // SM
            if kind == F:
                held += 1
                if held > peak:
                    peak = held
            elif kind != I:
                held -= 1
        return peak


@dataclass(frozen=True)
class Evaluation:
    makespan: float
    start: dict[Action, float]
    end: dict[Action, float]
    peak_inflight: tuple[int, ...]


def evaluate(schedule: Schedule, costs: StageCosts) -> Evaluation:
    """Times of every action of ``schedule`` (validated first) under ``costs``."""
    validate(schedule)
    if schedule.has_overlap:
        raise ValueError(f"{schedule.name}: overlapped F/B pairs are outside this model")
    prob = Problem.for_schedule(schedule, costs)
    orders = prob.encode_ranks(schedule.ranks)
    end = prob.times(orders)
    assert end is not None, "a validated schedule cannot deadlock"
    encode = prob.codec.encode
    ends = {a: end[encode(a)] for acts in schedule.ranks for a in acts}
    starts = {a: e - prob.cost[encode(a)] for a, e in ends.items()}
    return Evaluation(max(ends.values()), starts, ends,
                      tuple(prob.peak_inflight(o) for o in orders))
