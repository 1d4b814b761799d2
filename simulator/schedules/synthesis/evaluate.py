"""Exact makespan of a schedule under the zero-bubble paper's model.

Every rank runs its list in order, one action at a time; an action starts when the rank is free
and its inputs are there: F(s, m) needs F(prev(s), m), I or B(s, m) needs F(s, m) and the input
gradient of next(s) (its I or B), W(s, m) needs I(s, m). A dependency between two ranks adds the
fixed ``comm``; none within a rank. Start times are then the longest path through this graph —
no contention, no jitter — which is what synthesis optimises and what the lower bound bounds.
A B ends at ``(start + i) + w``, the float an I and its W run back to back end at, so fusing
such a pair moves no other action on the rank.

Synthesis evaluates thousands of orders, so actions are small integers (:class:`Problem`
encodes and decodes them) and :meth:`Problem.times` is a plain loop.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from ..action import Action, Kind
from ..schedule import Schedule, loop_placement
from ..validate import validate
from .costs import StageCosts

F, I, W, B = 0, 1, 2, 3
KIND_CODE = {Kind.F: F, Kind.I: I, Kind.W: W, Kind.B: B}
KIND_NAME = "FIWB"


class Problem:
    """P ranks, M microbatches, the placement of the stages and their costs.

    Action id = ``(kind * n_stages + stage) * M + microbatch``.
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

    @classmethod
    def for_schedule(cls, schedule: Schedule, costs: StageCosts) -> "Problem":
        return cls(schedule.pp, schedule.microbatches, costs, schedule.placement)

    def encode(self, a: Action) -> int:
        return (KIND_CODE[a.kind] * self.n_stages + a.stage) * self.m + a.microbatch

    def decode(self, x: int) -> Action:
        km, mb = divmod(x, self.m)
        kind, stage = divmod(km, self.n_stages)
        return Action(stage, KIND_NAME[kind], mb)

    def encode_ranks(self, ranks: Sequence[Sequence[Action]]) -> list[list[int]]:
        return [[self.encode(a) for a in acts] for acts in ranks]

    def times(self, orders: Sequence[Sequence[int]]) -> list[float] | None:
        """End time of every action id (index = id; unused ids stay -1), or None on a deadlock.

        Assumes a complete order (every F and every backward once); :func:`evaluate` checks that.
        """
        S, M = self.n_stages, self.m
        SM = S * M
        SM2 = 2 * SM
        cost = self.cost
        fwd_comm, bwd_comm = self.fwd_comm, self.bwd_comm
        end = [-1.0] * (4 * SM)
        # time the input gradient of (s, m) is known: end of its I or B
        grad = [-1.0] * SM
        ptr = [0] * len(orders)
        free = [0.0] * len(orders)
        left = sum(len(o) for o in orders)
        while left:
            progress = False
            for r, order in enumerate(orders):
                p, t, n = ptr[r], free[r], len(order)
                while p < n:
                    x = order[p]
                    kind, sm = divmod(x, SM)
                    s = sm // M
                    if kind == 0:
                        if s > 0:
                            d = end[sm - M]
                            if d < 0:
                                break
                            d += fwd_comm[s - 1]
                            if d > t:
                                t = d
                    elif kind == 2:
                        d = grad[sm]
                        if d < 0:
                            break
                        if d > t:
                            t = d
                    else:
                        d = end[sm]
                        if d < 0:
                            break
                        if d > t:
                            t = d
                        if s + 1 < S:
                            d = grad[sm + M]
                            if d < 0:
                                break
                            d += bwd_comm[s + 1]
                            if d > t:
                                t = d
                    if kind == 3:   # (start + i) + w: the float its I then its W would end at
                        t += cost[x - SM2]
                        t += cost[x - SM]
                    else:
                        t += cost[x]
                    end[x] = t
                    if kind == 1 or kind == 3:
                        grad[sm] = t
                    p += 1
                if p != ptr[r]:
                    left -= p - ptr[r]
                    ptr[r], free[r] = p, t
                    progress = True
            if not progress:
                return None
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
            if kind == 0:
                held += 1
                if held > peak:
                    peak = held
            elif kind >= 2:
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
    ends = {a: end[prob.encode(a)] for acts in schedule.ranks for a in acts}
    starts = {a: e - prob.cost[prob.encode(a)] for a, e in ends.items()}
    return Evaluation(max(ends.values()), starts, ends,
                      tuple(prob.peak_inflight(o) for o in orders))
