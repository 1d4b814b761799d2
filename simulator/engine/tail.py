"""The iteration's tail: the data-parallel (DP) collectives, what a rank runs after its last
action, and the barrier that ends the iteration. Both walks call it - the SimPy engine's
step-by-step walk (``runtime``) and the evaluator's walk (``evaluator_async``, which the
engine's lookahead also runs) - so a rule written here holds for both, in one float order.

Compiled once per program (:func:`compile_tail`: per rank, its share of the once-per-iteration
rows, a :class:`RankTail`, inside a :class:`TailPlan`). Each run starts a :class:`Tail` from the
plan (:meth:`TailPlan.start`), which keeps every rank's DP stream and the iteration's latest
end, and writes the collective records, ``rank_finish`` and ``iteration_bounds``.

The interface the walks use, three calls, each answering in durations from the walk's own
clock (a walk adds them as ``now + d``: the SimPy engine as one timeout, the evaluator by the
same addition, so the two agree to the last bit):

- :meth:`Tail.dp` ``(r, it, start, items, stretch)``: an action that started at ``start``
  (stretched by ``stretch``: slow ranks, jitter) issues the DP collectives of the layers whose
  last microbatch it ran; each goes on rank ``r``'s communication stream, first in first out,
  when its gradient is ready.
- :meth:`Tail.finish` ``(r, it, now) -> (busy, records)``: what rank ``r`` runs after its last
  action at ``now`` (its share of the once-per-iteration rows, then their DP collectives);
  ``busy`` is how long its compute stream stays busy from ``now``, ``records`` the collective
  records to append once the walk is there.
- :meth:`Tail.arrive` ``(r, it, end) -> (last, wait) | None``: rank ``r`` is at the barrier at
  ``end``; the last one in gets the latest arrival and how long after it every rank goes on
  (the latest collective end plus its update, or the last rank's own end).

A new rule of the tail changes only this module: bucketed DP (Megatron's gradient buckets:
:meth:`Tail.dp` holds layers until their bucket is full), a distributed optimizer
(reduce-scatter in :meth:`Tail.dp`, the all-gather after the step in :meth:`Tail.finish`), or
an optimizer step of a given duration per rank after its DP collectives (:meth:`Tail.dp` and
:meth:`Tail.finish` keep the rank's latest collective end, :meth:`Tail.finish` returns ``busy``
up to it plus the step; a new :class:`RankTail` field carries the step's duration from
:func:`compile_tail`). tests/engine/test_tail.py adds that step in a subclass and checks that
both walks give one timeline.
"""

from __future__ import annotations

from typing import NamedTuple

from ..schedules.schedule import Schedule
from ..system.config import SystemConfig
from ..system.topology import LinkModel
from ..workload.iteration_rows import rank_iteration_rows
from ..workload.model import Header, Layer, Partition
from .costs import DPCollective, chunk_costs
from .records import CollectiveRecord, RunRecords

_INF = float("inf")


# a NamedTuple, not a dataclass: start-up (simulator/__init__.py)
class RankTail(NamedTuple):
    """What the once-per-iteration rows (AICB's DP/optimizer rows) cost one rank."""

    compute_ns: float
    dp: tuple[DPCollective, ...]   # ready_offset: from the start of the rows' compute
    layer_ops: int


NO_ROWS = RankTail(0.0, (), 0)


def rank_tail(layers: tuple[Layer, ...], header: Header, system: SystemConfig,
              links: LinkModel) -> RankTail:
    """The cost of a rank's once-per-iteration rows ``layers``: their forward then their
    backward, and the DP collectives of their weight gradients."""
    if not layers:
        return NO_ROWS
    c = chunk_costs(layers, {}, header, system, links)
    dps = tuple(DPCollective(d.layer, c.F.duration + d.ready_offset, d.duration, d.update_ns,
                             d.nbytes) for d in c.dp_after_B)
    return RankTail(c.F.duration + c.B.duration, dps, c.F.layer_ops + c.B.layer_ops)


def compile_tail(schedule: Schedule, partition: Partition, header: Header,
                 system: SystemConfig, links: LinkModel) -> "TailPlan":
    """Every rank's share of the once-per-iteration rows (the chunks it runs decide it)."""
    by_share: dict[tuple[int, ...], RankTail] = {}
    ranks: list[RankTail] = []
    for r in range(schedule.pp):
        chunks = tuple(sorted({schedule.stage_chunk[s] for s in schedule.stages_of(r)}))
        rows = by_share.get(chunks)
        if rows is None:
            own = rank_iteration_rows(partition, chunks, schedule.pp)
            rows = by_share[chunks] = rank_tail(own, header, system, links)
        ranks.append(rows)
    return TailPlan(tuple(ranks))


def issue_dp(rank: int, it: int, free: float, start: float,
             items, stretch: float, append) -> tuple[float, float]:
    """Issue ``items`` ((chunk, ready offset, :class:`DPCollective`)) on ``rank``'s
    communication stream, free from ``free``: each starts when its gradient is ready (``start +
    offset x stretch``) and the stream is free, first in first out, and is recorded by
    ``append``. Returns when the stream is free again and the latest end plus its layer's
    update (0.0 without items)."""
    done = 0.0
    for chunk, offset, d in items:
        ready = start + offset * stretch
        s = free if free > ready else ready
        free = s + d.duration
        append(CollectiveRecord(rank, chunk, d.layer, it, d.nbytes, ready, s, free))
        x = free + d.update_ns
        if x > done:
            done = x
    return free, done


# a NamedTuple, not a dataclass: start-up (simulator/__init__.py)
class TailPlan(NamedTuple):
    """The compiled tail of a program: per rank, its :class:`RankTail`."""

    ranks: tuple[RankTail, ...]

    @property
    def layer_ops(self) -> int:
        return sum(rows.layer_ops for rows in self.ranks)

    def start(self, rec: RunRecords) -> "Tail":
        """One run's tail, writing into ``rec`` (its ``rank_finish`` already sized)."""
        return Tail(self.ranks, rec)


# a plain class, not a dataclass: start-up (simulator/__init__.py); one run's state
class Tail:
    """One run's iteration tail (see the module docstring)."""

    __slots__ = ("ranks", "rec", "free", "cand", "finished", "_append")

    def __init__(self, ranks: tuple[RankTail, ...], rec: RunRecords) -> None:
        P = len(ranks)
        self.ranks = ranks
        self.rec = rec
        self.free = [0.0] * P          # each rank's communication stream is free from then
        self.cand = -_INF              # the latest end of the iteration so far
        self.finished = 0              # ranks at the barrier
        self._append = rec.collectives.append

    def dp(self, r: int, it: int, start: float, items, stretch: float) -> None:
        """Rank ``r``'s action that started at ``start`` issues ``items`` ((chunk, ready
        offset, :class:`DPCollective`), the offsets stretched by ``stretch``)."""
        self.free[r], done = issue_dp(r, it, self.free[r], start, items, stretch, self._append)
        if done > self.cand:
            self.cand = done

    def finish(self, r: int, it: int, now: float) -> tuple[float, list | tuple]:
        """Rank ``r`` ran its last action of iteration ``it`` by ``now``: its rows' compute,
        then their DP collectives, each ready ``ready_offset`` after the compute starts.
        Returns how long the compute stream is busy from ``now`` (0.0: not at all) and the
        collective records, for the walk to append when it gets there."""
        rows = self.ranks[r]
        compute, dps = rows.compute_ns, rows.dp
        if not (compute > 0 or dps):
            return 0.0, ()
        records: list = []
        self.free[r], done = issue_dp(r, it, self.free[r], now,
                                      [(-1, d.ready_offset, d) for d in dps], 1.0,
                                      records.append)
        if done > self.cand:
            self.cand = done
        return (compute if compute > 0 else 0.0), records

    def arrive(self, r: int, it: int, end: float) -> tuple[float, float] | None:
        """Rank ``r`` is at the barrier of iteration ``it`` at ``end``. None until the last
        rank is in; then ``(last, wait)``: every rank goes on at ``last + wait`` (the latest
        arrival, then the latest collective end plus update, or the latest arrival itself)."""
        rec = self.rec
        finish = rec.rank_finish[it]
        finish[r] = end
        if end > self.cand:
            self.cand = end
        self.finished += 1
        if self.finished < len(self.ranks):
            return None
        cand = self.cand
        bounds = rec.iteration_bounds
        bounds.append((bounds[-1][1] if bounds else 0.0, cand))
        self.finished = 0
        self.cand = -_INF
        last = max(finish)
        return last, cand - last
