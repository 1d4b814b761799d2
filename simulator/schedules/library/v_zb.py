"""``v-zb``: V-ZB, the V schedule the zero-bubble fork lays out for its own run.

Under ``--zero-bubble-v-schedule`` in its default memory setup ``zb`` (the fork's README: ZBV),
the fork's runtime (sail-sg/zero-bubble-pipeline-parallelism, tag zero-bubble-v0.1.0:
``zb_schedules.py`` calling ``v_schedule.PipelineGraph(...).get_v_schedule()``) does not run a
fixed order. After a few profiled iterations it lays out each rank's F, B (pipesim's I) and W
over two chunks in V placement with a greedy list scheduler: one forward, input-gradient and
weight-gradient time for every rank (each rank's mean over its two chunks, then the upper
median over the ranks), one p2p delay, and a memory limit of 2P forwards' activations, every F
adding a forward's activations, every W freeing what the deferred weight gradients keep and
every B the rest. It tries four variants (whether a W may fill a gap before a forward, and
before a backward of the chunk that comes back up) and keeps the one whose largest per-rank idle
time is smallest; each variant is rerun with the previous pass's idle times as the ones it
accepts, for as long as that lowers the largest. ``tests/schedules/test_v_zb.py`` checks this
module against the fork's own scheduler, order for order.

Two chains run through every rank: leg 0 goes from rank 0 to rank P-1 (the F of the chunk
going down, then the I of the chunk coming back up) and leg 1 from rank P-1 back to rank 0
(the F of the chunk coming back up, the I of the chunk going down), as the fork counts them.

The fork prices memory by Korthikanti's formula without flash attention (34h + 5as a token for
F, 32h freed by W), whatever its run; pipesim takes the run's own memory model, which is that
formula for a run without flash attention. Without the run's memory (a bare ``-s v-zb``), an F
holds one unit and its W frees it.
"""

from __future__ import annotations

from collections import deque
from typing import TYPE_CHECKING

from ...errors import ConfigError
from ..action import Action, Kind
from ..registration import register
from ..schedule import Schedule, v_placement
from .zb_greedy import layout_work, upper_median

if TYPE_CHECKING:   # a dataclass module: imported when a layout is made, not at start-up
    from ..stage_costs import StageCosts

F, B, W = 0, 1, 2


class ForkFails(Exception):
    """The fork's scheduler stops (one of its assertions) or would never finish."""


class _Pass:
    """One greedy pass of the fork's V scheduler over ``pp`` ranks and ``m`` microbatches."""

    def __init__(self, pp: int, m: int, cost: tuple[float, float, float], comm: float,
                 mem: tuple[float, float, float], limit: float, fill_f: bool, fill_b: bool,
                 accepted: list[float] | None) -> None:
        self.pp, self.m, self.cost, self.comm = pp, m, cost, comm
        self.mem, self.limit, self.fill_f, self.fill_b = mem, limit, fill_f, fill_b
        self.accepted = accepted if accepted is not None else [-1.0] * pp
        self.most_accepted = max(self.accepted)
        self.count = [[[0, 0] for _ in range(3)] for _ in range(pp)]   # [rank][kind][leg]
        self.end: dict[tuple[int, int, int, int], float] = {}          # (kind, leg, rank, mb)
        self.free_at = [0.0] * pp
        self.held = [0.0] * pp
        self.idle = [0.0] * pp
        self.pending_w: list[deque] = [deque() for _ in range(pp)]
        self.order: list[list[tuple[int, int, int]]] = [[] for _ in range(pp)]

    def ended(self, key: tuple[int, int, int, int] | None) -> float:
        """When the action ``key`` ends; -1 while it is not placed, as the fork's table reads.
        ``None`` is the fork's id -1, which its table reads as its last entry: the W of leg 1
        on the last rank, last microbatch."""
        if key is None:
            key = (W, 1, self.pp - 1, self.m - 1)
        return self.end.get(key, -1.0)

    def most_idle(self, rank: int = -1) -> float:
        most = max(0.0, *self.idle)
        if rank >= 0:
            most = max(most, self.most_accepted - self.accepted[rank])
        return most

    def put(self, kind: int, leg: int, rank: int) -> None:
        cost = self.cost[kind]
        t = own = self.free_at[rank] + cost
        mb = self.count[rank][kind][leg]
        if mb >= self.m or self.held[rank] + self.mem[kind] > self.limit:
            raise ForkFails
        if kind == W:
            if (B, leg, rank, mb) not in self.end:
                raise ForkFails
        elif (kind, leg) != (F, 0):
            before = (F, 1) if (kind, leg) == (B, 0) else (kind, 0)
            if (before[0], before[1], rank, mb) not in self.end:
                raise ForkFails
        if kind != W:
            if leg == 1 and rank < self.pp - 1:
                t = max(t, self.ended((kind, 1, rank + 1, mb)) + self.comm + cost)
            if leg == 0 and rank > 0:
                if (kind, 0, rank - 1, mb) not in self.end:
                    raise ForkFails
                t = max(t, self.end[(kind, 0, rank - 1, mb)] + self.comm + cost)
        if self.count[rank][F][0] > 0:
            self.idle[rank] += t - own
        self.end[(kind, leg, rank, mb)] = t
        self.free_at[rank] = t
        self.held[rank] += self.mem[kind]
        self.order[rank].append((kind, leg, mb))
        if kind == B:
            self.pending_w[rank].append(leg)
        self.count[rank][kind][leg] += 1

    def put_w(self, rank: int) -> None:
        if not self.pending_w[rank]:
            raise ForkFails
        self.put(W, self.pending_w[rank].popleft(), rank)

    def fill(self, rank: int, before: tuple | None, fill: bool) -> None:
        """Ws before the next action on ``rank``, whose input is ``before`` (None: it has
        none): each that ends by the time the input arrives, then one more when the wait is
        longer than the rank's lead over the most idle rank (with ``fill``)."""
        w, c = self.cost[W], self.comm
        while self.pending_w[rank] and before is not None and \
                self.ended(before) + c >= self.free_at[rank] + w:
            self.put_w(rank)
        if self.pending_w[rank] and self.ended(before) + c - self.free_at[rank] > \
                self.most_idle(rank) - self.idle[rank]:
            if fill:
                self.put_w(rank)

    def warm_up(self) -> None:
        pp, m, cost, c = self.pp, self.m, self.cost, self.comm
        f_mem = self.mem[F]
        for r in range(pp):
            self.put(F, 0, r)
        for r in range(pp - 1, -1, -1):
            if r < pp - 1:
                turn = self.ended((F, 1, r + 1, 0)) + c
                while (self.held[r] + f_mem * (2 + 2 * r) <= self.limit
                       and self.free_at[r] + cost[F] <= turn and self.count[r][F][0] < m):
                    for j in range(r + 1):
                        self.put(F, 0, j)
            self.put(F, 1, r)
        leg = 0
        for r in range(1, pp):
            n = self.count
            while (n[r][F][0] + n[r][F][1] < n[r - 1][F][0] + n[r - 1][F][1]
                   or n[r][F][1] <= n[r - 1][F][1] < m):
                placed = False
                for j in range(pp - 1, r - 1, -1):
                    if n[j][F][leg] < m:
                        self.put(F, leg, j)
                        placed = True
                leg = 1 - leg
                if not placed and all(n[j][F][leg] >= m for j in range(r, pp)):
                    raise ForkFails      # the fork's loop would spin for ever here

    def backwards(self) -> None:
        pp, m, n = self.pp, self.m, self.count
        for r in range(pp):
            while self.held[r] + self.mem[B] > self.limit:
                self.put_w(r)
        legs1, legs0 = [], []
        for r in range(pp):
            if n[r][B][1] >= n[r][B][0]:
                legs0.append(r)
            elif r == pp - 1 or (B, 1, r + 1, n[r][B][1]) in self.end or n[r][B][0] >= m:
                legs1.append(r)
            else:
                legs0.append(r)
        for r, leg in [(r, 1) for r in reversed(legs1)] + [(r, 0) for r in legs0]:
            before = None
            if leg == 1 and r < pp - 1:
                before = (B, 1, r + 1, n[r][B][1])
            if leg == 0 and r > 0:
                before = (B, 0, r - 1, n[r][B][0])
            self.fill(r, before, leg == 1 or self.fill_b)
            self.put(B, leg, r)

    def forwards(self) -> None:
        pp, m, n = self.pp, self.m, self.count
        for r in range(pp):
            if n[r][F][1] >= m:
                continue
            leg = None
            if n[r][F][1] >= n[r][F][0]:
                leg = 0
            elif r == pp - 1 or (F, 1, r + 1, n[r][F][1]) in self.end:
                leg = 1
            elif n[r][F][0] < m and (r == 0 or (F, 0, r - 1, n[r][F][0]) in self.end):
                leg = 0
            if leg is None:
                continue
            while self.held[r] + self.mem[F] > self.limit:
                self.put_w(r)
            before = None
            if leg == 0 and r > 0:
                before = (F, 0, r - 1, n[r][F][0])
            if leg == 1 and r < pp - 1:
                before = (F, 1, r + 1, n[r][F][1])
            self.fill(r, before, self.fill_f)
            self.put(F, leg, r)

    def run(self) -> float:
        """Place every action; the largest per-rank idle time."""
        self.warm_up()
        for _ in range(2 * self.m):
            self.backwards()
            self.forwards()
        for r in range(self.pp):
            while self.pending_w[r]:
                self.put_w(r)
        if any(len(o) != 6 * self.m for o in self.order):
            raise ForkFails
        return self.most_idle()


def _best_pass(pp: int, m: int, cost, comm, mem, limit, fill_f: bool, fill_b: bool) -> _Pass:
    """The fork's pass and its reruns: each takes the previous pass's idle times as accepted,
    and is kept while it lowers the largest."""
    best = _Pass(pp, m, cost, comm, mem, limit, fill_f, fill_b, None)
    most = best.run()
    while True:
        again = _Pass(pp, m, cost, comm, mem, limit, fill_f, fill_b, list(best.idle))
        again_most = again.run()
        if again_most >= most:
            return best
        best, most = again, again_most


def _upper_median_of_rank_means(values: tuple[float, ...], pp: int) -> float:
    return upper_median([(values[r] + values[2 * pp - 1 - r]) / 2 for r in range(pp)])


def v_zb_layout(pp: int, microbatches: int, costs: StageCosts
                ) -> tuple[tuple[tuple[Action, ...], ...], float]:
    """The fork's layout for ``costs`` (2P virtual stages, model order): per rank its actions,
    and the largest per-rank idle time it kept."""
    cost = tuple(max(_upper_median_of_rank_means(x, pp), 1.0)
                 for x in (costs.f, costs.i, costs.w))
    comm = max(costs.comm, 1.0)
    if costs.memory:
        f_mem = _upper_median_of_rank_means(tuple(x[0] for x in costs.memory), pp)
        w_mem = _upper_median_of_rank_means(tuple(x[2] for x in costs.memory), pp)
    else:
        f_mem, w_mem = 1.0, -1.0
    mem = (f_mem, -f_mem - w_mem, w_mem)
    best = None
    try:
        for fill_b in (True, False):
            for fill_f in (True, False):
                lay = _best_pass(pp, microbatches, cost, comm, mem, 2 * pp * f_mem, fill_f, fill_b)
                if best is None or lay.most_idle() < best.most_idle():
                    best = lay
    except ForkFails:
        raise ConfigError(f"v-zb: P={pp}, M={microbatches}: the zero-bubble fork's V scheduler "
                          "finds no layout for these costs (it stops here); use zb-v, v-half "
                          "or v-min") from None
    kinds = (Kind.F, Kind.I, Kind.W)
    ranks = []
    for r, order in enumerate(best.order):
        up = 2 * pp - 1 - r
        # leg 0 is the down chunk's F and the up chunk's backward; leg 1 the other two
        ranks.append(tuple(Action((r if leg == 0 else up) if kind == F else
                                  (up if leg == 0 else r), kinds[kind], mb)
                           for kind, leg, mb in order))
    return tuple(ranks), best.most_idle()


@register("v-zb", needs_costs=True, default_vpp=2, megatron="zero-bubble-v", aliases=("vzb",),
          work=layout_work,
          summary="V-ZB: the zero-bubble fork's own V schedule (--zero-bubble-v-schedule, "
                  "memory setup zb): its greedy over the run's F/I/W costs and memory, two "
                  "chunks per rank in a V")
def generate(pp: int, microbatches: int, vpp: int = 2, stage_costs: StageCosts | None = None,
             **_: object) -> Schedule:
    if vpp != 2:
        raise ConfigError(f"--vpp: v-zb runs exactly 2 chunks per rank (V placement), "
                          f"got --vpp {vpp}")
    from ..stage_costs import StageCosts
    from ..synthesis.costs import costs_option

    costs = (costs_option(stage_costs, 2 * pp, "v-zb", f"--pp {pp} x --vpp 2")
             or StageCosts.unit(2 * pp))
    ranks, idle = v_zb_layout(pp, microbatches, costs)
    return Schedule("v-zb", pp, 2, microbatches, v_placement(pp), ranks=ranks,
                    meta={"idle": idle})
