"""The evaluator's action and transfer records as columns.

A record's times are the only thing a run computes about it: its stage, kind, microbatch,
phase, chunk and pair (a transfer's ranks, stages and size) follow from the rank's op order,
which the schedule fixes. So the engine keeps, per rank, the times in ``array('d')`` columns
(8 bytes each, instead of a tuple of ten fields per record: about 40 MB instead of 290 MB at a
million actions) and these sequences yield the engine's :class:`ActionRecord` /
:class:`TransferRecord` tuples when read, in time order: actions as they end, transfers as they
are issued (the order in which a step-by-step run appends them), ranks in order at equal times.
Readers iterate, sort, count or index them, as they do lists.
"""

from __future__ import annotations

from array import array
from collections.abc import Sequence
from heapq import merge
from itertools import repeat
from operator import attrgetter

from ..schedules.comm_pass import Transfer, op_lists
from .records import ActionRecord, TransferRecord


class _Columns(Sequence):
    """A read-only sequence of records built from per-rank time columns.

    ``order`` (the step-by-step walk's): the rank of each record in the order the run made
    them, so reading gives the records in that order, as a list appended during the run would.
    Without it (the lookahead walk and the evaluator, whose ranks do not run in time order) the
    ranks' records, each rank's in time order already, are merged by ``_time``."""

    order: array | None = None
    _time = attrgetter("end")

    def _records(self, rank: int):
        raise NotImplementedError

    def _columns(self) -> list[array]:
        raise NotImplementedError

    def __len__(self) -> int:
        return sum(len(c) for c in self._columns())

    def __iter__(self):
        if self.order is None:
            yield from merge(*(self._records(r) for r in range(len(self._columns()))),
                             key=self._time)
            return
        nexts = [self._records(r).__next__ for r in range(len(self._columns()))]
        for r in self.order:
            yield nexts[r]()

    def __getitem__(self, index):
        return list(self)[index]

    def __eq__(self, other) -> bool:
        if isinstance(other, (list, tuple, _Columns)):
            return len(self) == len(other) and list(self) == list(other)
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"<{type(self).__name__}: {len(self)} records>"


class ActionColumns(_Columns):
    """Action records: per rank, the start and end of each action in execution order
    (iteration after iteration of ``schedule.ranks[rank]``)."""

    def __init__(self, schedule, labels: list[list[str]], ordered: bool = False) -> None:
        self.schedule = schedule
        self.labels = labels
        self.order = array("I") if ordered else None
        self.start = [array("d") for _ in range(schedule.pp)]
        self.end = [array("d") for _ in range(schedule.pp)]

    def _columns(self) -> list[array]:
        return self.start

    def _records(self, rank: int):
        acts = self.schedule.ranks[rank]
        labels = self.labels[rank]
        chunk_of = self.schedule.stage_chunk
        n = len(acts)
        new = tuple.__new__
        start, end = self.start[rank], self.end[rank]
        for it in range((len(start) + n - 1) // n if n else 0):   # iteration after iteration
            lo = it * n
            for a, label, s, e in zip(acts, labels, start[lo:lo + n], end[lo:lo + n]):
                yield new(ActionRecord, (rank, a.stage, a.kind, a.microbatch, it, s, e, label,
                                         chunk_of[a.stage], a.pair))


class TransferColumns(_Columns):
    """Asynchronous transfer records: per source rank, when each send was issued, started and
    arrived, in op order; the sends themselves are the comm pass's, rebuilt when read. Every
    send of a run has the same size; at 0 bytes a transfer starts and arrives when issued, and
    only that time is kept."""

    _time = attrgetter("issued")

    def __init__(self, schedule, nbytes: int, ordered: bool = False,
                 records=None) -> None:
        """``records(rank, times, iteration, nbytes)``: the records of one pass over a rank's
        sends in op order, times taken from the iterator ``times`` (the compiled program's
        :meth:`~simulator.engine.program.RankOps.send_records`: nothing kept, no second comm
        pass); None: rebuilt from the comm pass."""
        self.schedule = schedule
        self._records_of = records
        self.nbytes = nbytes
        self.order = array("I") if ordered else None
        self.instant = nbytes == 0
        self.issued = [array("d") for _ in range(schedule.pp)]
        self.start = [array("d") for _ in range(schedule.pp)]
        self.end = [array("d") for _ in range(schedule.pp)]
        self._sends: list | None = None

    def _columns(self) -> list[array]:
        return self.issued

    def pass_records(self, rank: int) -> list:
        """One pass over ``rank``'s sends as records of iteration 0 with times 0: the fields
        every iteration's records share (iteration ``it``'s ``k``-th record is the ``k``-th
        send of the pass), without building a record per transfer of the run."""
        if self._records_of is not None:
            return list(self._records_of(rank, repeat((0.0, 0.0, 0.0)), 0, self.nbytes))
        if self._sends is None:
            self._sends = _send_ops(self.schedule)
        return [TransferRecord(rank, t.dst_rank, t.src_stage, t.dst_stage, t.data, t.microbatch,
                               0, self.nbytes, 0.0, 0.0, 0.0) for t in self._sends[rank]]

    def _records(self, rank: int):
        if self._records_of is not None:
            yield from self._generated(rank)
            return
        if self._sends is None:
            self._sends = _send_ops(self.schedule)
        sends = self._sends[rank]
        n = len(sends)
        nbytes = self.nbytes
        new = tuple.__new__
        issued = self.issued[rank]
        times = (zip(issued, issued, issued) if self.instant
                 else zip(issued, self.start[rank], self.end[rank]))
        it = 0
        k = 0
        for i, s, e in times:
            if k == n:
                it += 1
                k = 0
            t = sends[k]
            k += 1
            yield new(TransferRecord, (rank, t.dst_rank, t.src_stage, t.dst_stage, t.data,
                                       t.microbatch, it, nbytes, i, s, e))

    def _generated(self, rank: int):
        """``_records`` from the compiled program, one pass over its sends per iteration."""
        issued = self.issued[rank]
        times = iter(zip(issued, issued, issued) if self.instant
                     else zip(issued, self.start[rank], self.end[rank]))
        it = 0
        total = len(issued)
        made = 0
        while made < total:
            before = made
            for rec in self._records_of(rank, times, it, self.nbytes):
                made += 1
                yield rec
            if made == before:     # a pass with no sends: nothing more to read
                return
            it += 1


def _send_ops(schedule) -> list[list]:
    """Per rank, the comm pass's sends in op order."""
    return [[op for op in prog if type(op) is Transfer and op.op == "send"]
            for prog in op_lists(schedule)]
