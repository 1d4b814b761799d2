"""A run's action and transfer records as per-rank lists, the shape the Chakra exporter walks.

The engine keeps records as time columns (``engine/columns.py``): every field but the times
follows from the schedule's per-rank order, so here those fields are the schedule's, repeated
once per iteration (list repetition, no record built per action), beside the engine's own time
arrays. Records kept as plain tuples (some point-to-point modes) are read one by one into the
same lists, in the same order.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..engine.columns import ActionColumns, TransferColumns


@dataclass
class RankActions:
    """One rank's actions in execution order (iteration after iteration of its schedule)."""

    stage: list
    kind: list          # str
    microbatch: list
    chunk: list
    pair: list
    iteration: list
    start: object       # a sequence of float (an array('d') when read from columns)
    end: object


@dataclass
class RankSends:
    """One source rank's transfers in the order the run made them."""

    dst_rank: list
    src_stage: list
    dst_stage: list
    data: list         # str: "F" (activation) or "B" (gradient)
    microbatch: list
    iteration: list
    nbytes: list
    issued: object


def _repeat(values: list, n: int, total: int) -> list:
    """``values`` once per iteration, ``total`` of them (the last pass may stop early)."""
    if not values:
        return []
    times = -(-total // len(values))
    return (values * times)[:total]


def _plain(kinds: list) -> list[str]:
    """Kinds (``Kind``, a str enum) as plain strings."""
    as_str = {k: str(k) for k in set(kinds)}
    return [as_str[k] for k in kinds]


def _iterations(n: int, total: int) -> list:
    out: list = []
    for it in range(-(-total // n) if n else 0):
        out += [it] * n
    return out[:total]


def action_tables(result) -> list[RankActions]:
    """Per rank, its actions in the order the rank executed them."""
    sched = result.schedule
    acts = result.records.actions
    P = sched.pp
    # (Kind's own __str__ is a Python call: a dict maps each kind to its plain string)
    if isinstance(acts, ActionColumns) and all(
            len({(a.stage, a.kind, a.microbatch) for a in ops}) == len(ops)
            for ops in sched.ranks):
        out = []
        chunk_of = sched.stage_chunk
        for r in range(P):
            ops = sched.ranks[r]
            total = len(acts.start[r])
            n = len(ops)
            out.append(RankActions(
                _repeat([a.stage for a in ops], n, total),
                _repeat(_plain([a.kind for a in ops]), n, total),
                _repeat([a.microbatch for a in ops], n, total),
                _repeat([chunk_of[a.stage] for a in ops], n, total),
                _repeat([a.pair for a in ops], n, total),
                _iterations(n, total), acts.start[r], acts.end[r]))
        return out
    # records one by one: in the schedule's order per iteration (ties: by start)
    positions = [{(a.stage, str(a.kind), a.microbatch): i for i, a in enumerate(ops)}
                 for ops in sched.ranks]
    by_rank: list[list] = [[] for _ in range(P)]
    for a in acts:
        by_rank[a.rank].append(a)
    out = []
    for r, recs in enumerate(by_rank):
        pos = positions[r]
        recs.sort(key=lambda a: (a.iteration, pos.get((a.stage, str(a.kind), a.microbatch), 0),
                                 a.start))
        out.append(RankActions([a.stage for a in recs], [str(a.kind) for a in recs],
                               [a.microbatch for a in recs], [a.chunk for a in recs],
                               [a.pair for a in recs], [a.iteration for a in recs],
                               [a.start for a in recs], [a.end for a in recs]))
    return out


def send_tables(result) -> list[RankSends]:
    """Per source rank, its transfers in the order the run made them."""
    P = result.schedule.pp
    trs = result.records.transfers
    out = []
    if isinstance(trs, TransferColumns):
        for r in range(P):
            one = trs.pass_records(r)
            total = len(trs.issued[r])
            n = len(one)
            out.append(RankSends(
                _repeat([t.dst_rank for t in one], n, total),
                _repeat([t.src_stage for t in one], n, total),
                _repeat([t.dst_stage for t in one], n, total),
                _repeat(_plain([t.data for t in one]), n, total),
                _repeat([t.microbatch for t in one], n, total),
                _iterations(n, total), [trs.nbytes] * total, trs.issued[r]))
        return out
    by_rank: list[list] = [[] for _ in range(P)]
    for t in trs:
        by_rank[t.src_rank].append(t)
    for recs in by_rank:
        out.append(RankSends([t.dst_rank for t in recs], [t.src_stage for t in recs],
                             [t.dst_stage for t in recs], [str(t.data) for t in recs],
                             [t.microbatch for t in recs], [t.iteration for t in recs],
                             [t.nbytes for t in recs], [t.issued for t in recs]))
    return out
