"""``zb-greedy``: the schedule the zero-bubble fork's runtime computes for its own run.

Qi et al.'s implementation (sail-sg/zero-bubble-pipeline-parallelism, tag zero-bubble-v0.1.0:
``megatron/core/pipeline_parallel/auto_schedule.py``; today ``zerobubble/scheduler/zb.py``) does
not run a fixed ZB-H1 or ZB-H2 layout under ``--enable-zero-bubble``. After a few profiled
iterations it lays out F, B (pipesim's I) and W with a greedy list scheduler over the profiled
times, each the median over the ranks ("uniform f/b/w timing"), one p2p delay, and a memory
limit of ``--zero-bubble-max-pending-backward`` forwards' activations (the larger of the first
two stages' F), every F, I and W adding or freeing its measured bytes. It tries eight variants
(three switches) and keeps the one whose longest stage span (first F to last W) is shortest.
This module reproduces that behaviour for the run's own per-stage costs and memory
(:class:`~..stage_costs.StageCosts`, given by the run); ``tests/schedules/test_zb_greedy.py``
checks it against the fork's own scheduler, order for order.

With F = I = W and memory in forwards (an I frees nothing), the limits p and 2p give ZB-H1's
and ZB-H2's orders; with the real costs and an I that frees most of a stash, the fork's ZB-1p
and ZB-2p start more forwards and place the Ws where its time model sees gaps.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from ...errors import ConfigError
from ..action import Action, Kind
from ..registration import register
from ..schedule import Schedule, loop_placement

if TYPE_CHECKING:   # a dataclass module: imported when a layout is made, not at start-up
    from ..stage_costs import StageCosts

F, I, W = 0, 1, 2
_KINDS = (Kind.F, Kind.I, Kind.W)


class CannotFit(Exception):
    """A variant that cannot keep its memory under the limit (the fork raises and stops)."""


class _Layout:
    """One variant's greedy pass: per stage the counts placed of each kind, the time the
    stage is free, its memory and its accumulated idle time, every placed action's end."""

    def __init__(self, pp: int, m: int, cost: tuple, mem: tuple, limit: float, comm: float,
                 early_first: bool, input_first: bool, fill_gaps: bool) -> None:
        self.pp, self.m, self.cost, self.mem, self.limit, self.comm = pp, m, cost, mem, limit, comm
        self.early_first, self.input_first, self.fill_gaps = early_first, input_first, fill_gaps
        self.done = [[0] * pp for _ in range(3)]     # placed, per kind and stage
        self.free_at = [0.0] * pp
        self.held = [0.0] * pp
        self.idle = [0.0] * pp
        self.end: dict[tuple[int, int, int], float] = {}

    def ended(self, kind: int, stage: int, mb: int) -> float:
        # an action not placed yet reads 0, as the fork's zero-filled table does; the final
        # check turns a variant that relied on one into a failed variant
        return self.end.get((kind, stage, mb), 0.0)

    def place(self, stage: int, kind: int) -> None:
        mb = self.done[kind][stage]
        cost = self.cost[kind]
        t = self.free_at[stage] + cost
        own = t
        if kind == F and stage > 0:
            t = max(t, self.ended(F, stage - 1, mb) + self.comm + cost)
        if kind == I and stage < self.pp - 1:
            t = max(t, self.ended(I, stage + 1, mb) + self.comm + cost)
        if self.done[F][stage] > 0:
            self.idle[stage] += t - own
        self.free_at[stage] = t
        self.end[(kind, stage, mb)] = t
        self.held[stage] += self.mem[stage][kind]
        self.done[kind][stage] += 1

    def most_idle(self) -> float:
        return max(self.idle)

    def pending_w(self, stage: int) -> bool:
        return self.done[W][stage] < self.done[I][stage]

    def make_room(self, stage: int, kind: int) -> None:
        """Ws until the next ``kind`` fits under the limit."""
        while self.held[stage] + self.mem[stage][kind] > self.limit:
            if not self.pending_w(stage):
                raise CannotFit
            self.place(stage, W)

    def fill_before(self, stage: int, arrives: float) -> None:
        """Ws in the time before an input ``arrives``: each that ends by then, and one more
        that overruns it when the wait is within the most idle stage's lead (with gap filling
        on) or beyond it."""
        w = self.cost[W]
        while self.pending_w(stage) and self.free_at[stage] + w <= arrives:
            self.place(stage, W)
        if self.pending_w(stage) and self.free_at[stage] < arrives:
            if arrives - self.free_at[stage] <= self.most_idle() - self.idle[stage]:
                if self.fill_gaps:
                    self.place(stage, W)
            else:
                self.place(stage, W)

    def warm_up(self) -> None:
        """Microbatch 0: one F on every stage, then from the last stage back the forwards each
        stage can run before the first backward reaches it, within the limit; never more
        than the stage before it starts."""
        pp, m, cost, comm = self.pp, self.m, self.cost, self.comm
        for j in range(pp):
            self.place(j, F)
        extra = [0] * pp
        reach = 0.0
        for j in range(pp - 1, -1, -1):
            if j == pp - 1:
                reach = self.ended(F, j, 0) + cost[I]
                continue
            held, busy = self.held[j], self.free_at[j]
            while (self.done[F][j] + extra[j] < m
                   and held + self.mem[j][F] <= self.limit):
                if self.early_first:
                    if busy + cost[F] > reach + comm:
                        break
                elif busy >= reach + comm:
                    break
                held += self.mem[j][F]
                busy += cost[F]
                extra[j] += 1
            reach = max(busy, reach + comm) + cost[I]
        for j in range(1, pp):
            while (extra[j] > 0 and extra[j] >= extra[j - 1]
                   and self.done[F][j] + extra[j] < m):
                extra[j] -= 1
        for j in range(pp):
            for _ in range(extra[j]):
                self.place(j, F)
        for j in range(pp - 1, -1, -1):
            self.place(j, I)

    def wants_forward(self, j: int) -> bool:
        """Whether stage ``j`` starts its next forward this round; with ``input_first`` a
        stage two or more forwards ahead of the next one holds back when the next stage's
        backward would otherwise wait."""
        if self.done[F][j] >= self.m:
            return False
        if not (self.input_first and j + 1 < self.pp
                and self.done[F][j] >= self.done[F][j + 1] + 2):
            return True
        cost = self.cost
        due = self.free_at[j + 1] + cost[F] + cost[I] + self.comm
        if self.free_at[j] >= due:
            return False
        ws, held, n = 0.0, self.held[j] + self.mem[j][F], 0
        while held > self.limit and self.done[W][j] + n < self.done[I][j]:
            ws += cost[W]
            held += self.mem[j][W]
            n += 1
        if self.free_at[j] + cost[F] + ws <= due:
            return True
        return not due - self.free_at[j] <= self.most_idle() - self.idle[j]

    def steady(self, mb: int) -> None:
        pp = self.pp
        go = [self.wants_forward(j) for j in range(pp)]
        for j in range(pp - 2, -1, -1):       # a stage starts a forward only if the next does
            go[j] = go[j] and go[j + 1]
        for j in range(pp):
            if not go[j]:
                continue
            self.make_room(j, F)
            if j > 0:
                self.fill_before(j, self.ended(F, j - 1, self.done[F][j]) + self.comm)
            self.place(j, F)
        for j in range(pp - 1, -1, -1):
            self.make_room(j, I)
            if j + 1 < pp:
                self.fill_before(j, self.ended(I, j + 1, mb) + self.comm)
            if j == 0 and self.done[F][j] == self.m:
                while self.pending_w(j):
                    self.place(j, W)
            self.place(j, I)

    def run(self) -> float:
        for mb in range(self.m):
            if mb == 0:
                self.warm_up()
            else:
                self.steady(mb)
        for j in range(self.pp):
            while self.done[W][j] < self.m:
                self.place(j, W)
        self.check()
        cost = self.cost
        return max(self.ended(W, j, self.m - 1) - self.ended(F, j, 0) + cost[F]
                   for j in range(self.pp))

    def check(self) -> None:
        """Every action placed, and after what it needs (the fork asserts the second; a
        layout that skipped a forward, which the fork's table would read as ending at 0, is
        no layout either)."""
        c, comm = self.cost, self.comm
        if len(self.end) != 3 * self.pp * self.m:
            raise CannotFit
        for j in range(self.pp):
            for mb in range(self.m):
                f, i, w = (self.ended(k, j, mb) for k in (F, I, W))
                if i < f + c[I] or w < i + c[W]:
                    raise CannotFit
                if j > 0 and f < self.ended(F, j - 1, mb) + comm + c[F]:
                    raise CannotFit
                if j < self.pp - 1 and i < self.ended(I, j + 1, mb) + comm + c[I]:
                    raise CannotFit

    def orders(self) -> tuple[tuple[Action, ...], ...]:
        """Per stage its actions by end time (ties: F, I, W, then microbatch)."""
        out = []
        for j in range(self.pp):
            acts = sorted((self.end[(k, j, mb)], k, mb) for k in (F, I, W) for mb in range(self.m))
            out.append(tuple(Action(j, _KINDS[k], mb) for _, k, mb in acts))
        return tuple(out)


def upper_median(xs) -> float:
    # the fork's: sorted(x)[len(x) // 2], the upper median
    return sorted(xs)[len(xs) // 2]


def greedy_layout(pp: int, microbatches: int, costs: StageCosts,
                  max_pending: float) -> tuple[tuple[tuple[Action, ...], ...], float]:
    """The fork's layout: per rank its actions, and the longest stage span it kept."""
    f, i, w = upper_median(costs.f), upper_median(costs.i), upper_median(costs.w)
    memory = costs.memory or tuple((1.0, 0.0, -1.0) for _ in range(pp))
    limit = max_pending * max(m[F] for m in memory[:2])
    best = None
    for early_first in (True, False):
        for input_first in (True, False):
            for fill_gaps in (True, False):
                lay = _Layout(pp, microbatches, (f, i, w), memory, limit, costs.comm,
                              early_first, input_first, fill_gaps)
                try:
                    span = lay.run()
                except CannotFit:
                    continue
                if best is None or span < best[0]:
                    best = (span, lay)
    if best is None:
        raise ConfigError(f"zb-greedy: max_pending={max_pending:g}: no layout keeps the memory "
                          f"under {max_pending:g} forwards' activations (the zero-bubble fork's "
                          "scheduler stops here); give a larger max_pending")
    return best[1].orders(), best[0]


def _pending(value: object, pp: int) -> float:
    if value is None:
        return float(pp)
    try:
        n = float(value)
    except (TypeError, ValueError):
        raise ConfigError(f"zb-greedy: max_pending: expected a positive number of forwards "
                          f"(e.g. {pp} for ZB-1p, {2 * pp} for ZB-2p), found {value!r}") from None
    if not math.isfinite(n) or n <= 0:
        raise ConfigError(f"zb-greedy: max_pending: expected a positive number of forwards "
                          f"(e.g. {pp} for ZB-1p, {2 * pp} for ZB-2p), found {value!r}")
    return n


def layout_work(pp: int, microbatches: int, vpp: int, actions: int) -> int:
    """Laying out and running it, in engine actions: the fork's greedy passes cost 16-29 us an
    action (zb-greedy and v-zb, P 8-64, measured on a loaded 2-core machine), 1.5-2 engine
    actions of about 14 us, and the run one more."""
    return 3 * actions


@register("zb-greedy", needs_costs=True, default_vpp=1, megatron="zero-bubble", work=layout_work,
          summary="the zero-bubble fork's own schedule (--enable-zero-bubble): its greedy over "
                  "the run's F/I/W costs and memory under a limit of max_pending forwards "
                  "(-O max_pending=N; default P: ZB-1p, 2P: ZB-2p)")
def generate(pp: int, microbatches: int, vpp: int = 1, max_pending: object = None,
             stage_costs: StageCosts | None = None, **_: object) -> Schedule:
    if vpp != 1:
        raise ConfigError(f"zb-greedy: --vpp {vpp}: the zero-bubble fork's greedy lays out one "
                          "stage a rank (expected --vpp 1)")
    from ..stage_costs import StageCosts
    from ..synthesis.costs import costs_option

    n = _pending(max_pending, pp)
    costs = costs_option(stage_costs, pp, "zb-greedy", f"--pp {pp}") or StageCosts.unit(pp)
    ranks, span = greedy_layout(pp, microbatches, costs, n)
    return Schedule("zb-greedy", pp, 1, microbatches, loop_placement(pp, 1), ranks=ranks,
                    meta={"max_pending": n, "span": span})
