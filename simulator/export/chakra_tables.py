"""A run's action and transfer records as numpy columns, the shape the Chakra exporter encodes.

The engine keeps records as time columns (``engine/columns.py``): every field but the times
follows from the schedule's per-rank order, so here those fields are the schedule's, tiled
once per iteration (no record built per action), beside the engine's own time arrays. Records
kept as plain tuples (some point-to-point modes) are read one by one into the same columns, in
the same order. Every column runs over all ranks, rank after rank; ``bounds[r]:bounds[r + 1]``
is rank ``r``'s part.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..engine.columns import ActionColumns, TransferColumns
from ..schedules.ops import peer

NO_PAIR = -1        # ``pair`` of an action that is not half of an overlapped pair


@dataclass
class Actions:
    """Every rank's actions in execution order (iteration after iteration of its schedule)."""

    bounds: np.ndarray  # P + 1 offsets
    stage: np.ndarray
    kind: np.ndarray    # index into ``kinds``
    kinds: list         # str
    microbatch: np.ndarray
    chunk: np.ndarray
    pair: np.ndarray    # NO_PAIR for none
    iteration: np.ndarray
    start: np.ndarray   # float64, ns
    end: np.ndarray
    passes: list | None = None   # per rank, one pass of its schedule (stage, kind, microbatch)


@dataclass
class Sends:
    """Every source rank's transfers, each rank's in the order the run made them."""

    bounds: np.ndarray
    dst_rank: np.ndarray
    src_stage: np.ndarray
    dst_stage: np.ndarray
    data: np.ndarray    # index into ``datas``
    datas: list         # str, sorted: "B" (gradient), "F" (activation)
    microbatch: np.ndarray
    iteration: np.ndarray
    nbytes: np.ndarray
    issued: np.ndarray

    @property
    def src_rank(self) -> np.ndarray:
        return np.repeat(np.arange(len(self.bounds) - 1), np.diff(self.bounds))


def _i64(values) -> np.ndarray:
    return np.asarray(values, dtype=np.int64)


def _tiled(values: list, total: int) -> np.ndarray:
    """``values`` once per iteration, ``total`` of them (the last pass may stop early)."""
    if not values or not total:
        return np.zeros(0, np.int64)
    return np.resize(_i64(values), total)


def _iterations(n: int, total: int) -> np.ndarray:
    return np.arange(total, dtype=np.int64) // n if n else np.zeros(0, np.int64)


def _names(values: set) -> tuple[list, dict]:
    """Distinct kinds (``Kind``, a str enum, or str) as sorted plain strings, and each value's
    index among them (a dict keyed by the values themselves: no Python ``__str__`` per record)."""
    names = sorted({str(v) for v in values})
    return names, {v: names.index(str(v)) for v in values}


def _distinct(one: dict) -> bool:
    """Whether a pass names each (stage, kind, microbatch) once."""
    if not len(one["stage"]):
        return True
    key = ((one["stage"] * (int(one["kind"].max()) + 1) + one["kind"])
           * (int(one["microbatch"].max()) + 1) + one["microbatch"])
    if int(key.max()) < 8 * len(key) + 1024 and int(key.min()) >= 0:
        return int(np.bincount(key).max()) <= 1
    key = np.sort(key)
    return not bool((key[1:] == key[:-1]).any())


def _floats(seq) -> np.ndarray:
    return np.frombuffer(seq, dtype=np.float64) if not isinstance(seq, list) \
        else np.asarray(seq, dtype=np.float64)


def _join(parts: list[dict], names: tuple) -> dict:
    return {k: np.concatenate([p[k] for p in parts]) if parts else np.zeros(0, np.int64)
            for k in names}


def action_tables(result) -> Actions:
    """Every rank's actions in the order the rank executed them."""
    sched = result.schedule
    acts = result.records.actions
    P = sched.pp
    per_rank: list[dict] = []
    if isinstance(acts, ActionColumns):
        chunk_of = sched.stage_chunk
        kinds_of, code = _names({a.kind for ops in sched.ranks for a in ops})
        for r in range(P):
            ops = sched.ranks[r]
            total = len(acts.start[r])
            one = {"stage": _i64([a.stage for a in ops]),
                   "microbatch": _i64([a.microbatch for a in ops]),
                   "kind": _i64([code[a.kind] for a in ops]),
                   "pair": _i64([NO_PAIR if a.pair is None else a.pair for a in ops])}
            one["chunk"] = _i64(chunk_of)[one["stage"]] if len(ops) else _i64([])
            per_rank.append({k: np.resize(v, total) if total else v[:0]
                             for k, v in one.items()})
            per_rank[-1].update({
                "iteration": _iterations(len(ops), total), "start": _floats(acts.start[r]),
                "end": _floats(acts.end[r]), "_n": total, "_pass": one})
    if per_rank and not all(_distinct(p["_pass"]) for p in per_rank):
        per_rank = []       # an action met twice in a pass: read from the records
    if not per_rank:
        # records one by one: in the schedule's order per iteration (ties: by start)
        positions = [{(a.stage, str(a.kind), a.microbatch): i for i, a in enumerate(ops)}
                     for ops in sched.ranks]
        by_rank: list[list] = [[] for _ in range(P)]
        for a in acts:
            by_rank[a.rank].append(a)
        kinds_of, code = _names({a.kind for a in acts})
        for r, recs in enumerate(by_rank):
            pos = positions[r]
            recs.sort(key=lambda a: (a.iteration,
                                     pos.get((a.stage, str(a.kind), a.microbatch), 0), a.start))
            per_rank.append({
                "stage": _i64([a.stage for a in recs]),
                "kind": _i64([code[a.kind] for a in recs]),
                "microbatch": _i64([a.microbatch for a in recs]),
                "chunk": _i64([a.chunk for a in recs]),
                "pair": _i64([NO_PAIR if a.pair is None else a.pair for a in recs]),
                "iteration": _i64([a.iteration for a in recs]),
                "start": _floats([a.start for a in recs]),
                "end": _floats([a.end for a in recs]), "_n": len(recs)})
    bounds = np.zeros(P + 1, np.int64)
    bounds[1:] = np.cumsum([p["_n"] for p in per_rank])
    cols = _join(per_rank, ("stage", "kind", "microbatch", "chunk", "pair", "iteration"))
    times = {k: np.concatenate([p[k] for p in per_rank]) if per_rank else np.zeros(0)
             for k in ("start", "end")}
    return Actions(bounds, cols["stage"], cols["kind"], kinds_of, cols["microbatch"],
                   cols["chunk"], cols["pair"], cols["iteration"], times["start"], times["end"],
                   [p.get("_pass") for p in per_rank])


def _pass_sends(sched, rank: int, one: dict, kinds: list) -> dict | None:
    """One pass's sends on ``rank``, from its actions: those that send by the one rule every
    encoding reads (``ops.peer``), in action order (the transfer columns keep their times in
    this order)."""
    stage, kind = one["stage"], one["kind"]
    key = stage * len(kinds) + kind
    uniq, inverse = np.unique(key, return_inverse=True)
    table = np.full((len(uniq), 3), -1, np.int64)        # data (F 1, B 0), other stage, rank
    for i, k in enumerate(uniq.tolist()):
        st, kd = divmod(k, len(kinds))
        got = peer(sched, st, kinds[kd], rank, False)
        if got is not None:
            data, other, other_rank = got
            table[i] = (1 if str(data) == "F" else 0, other, other_rank)
    row = table[inverse.reshape(-1)]
    sends = np.flatnonzero(row[:, 0] >= 0)
    return {"dst_rank": row[sends, 2], "src_stage": stage[sends], "dst_stage": row[sends, 1],
            "data": row[sends, 0], "microbatch": one["microbatch"][sends]}


def send_tables(result, acts: Actions | None = None) -> Sends:
    """Every source rank's transfers, each rank's in the order the run made them (from the
    actions' passes, ``acts``, when the run's transfers are columns of whole passes)."""
    P = result.schedule.pp
    trs = result.records.transfers
    per_rank: list[dict] = []
    if isinstance(trs, TransferColumns) and acts is not None and acts.passes \
            and all(p is not None for p in acts.passes):
        datas = ["B", "F"]
        for r in range(P):
            one = _pass_sends(result.schedule, r, acts.passes[r], acts.kinds)
            total = len(trs.issued[r])
            n = len(one["dst_rank"])
            n_acts = len(acts.passes[r]["stage"])
            its = (acts.bounds[r + 1] - acts.bounds[r]) // n_acts if n_acts else 0
            if n * its != total:
                per_rank = []        # not whole passes: read the records
                break
            row = {k: np.resize(v, total) if total else v[:0] for k, v in one.items()}
            row.update({"iteration": _iterations(n, total),
                        "nbytes": np.full(total, int(trs.nbytes), np.int64),
                        "issued": _floats(trs.issued[r]), "_n": total})
            per_rank.append(row)
    if not per_rank and isinstance(trs, TransferColumns):
        passes = [trs.pass_records(r) for r in range(P)]
        datas, code = _names({t.data for one in passes for t in one})
        for r, one in enumerate(passes):
            total = len(trs.issued[r])
            per_rank.append({
                "dst_rank": _tiled([t.dst_rank for t in one], total),
                "src_stage": _tiled([t.src_stage for t in one], total),
                "dst_stage": _tiled([t.dst_stage for t in one], total),
                "data": _tiled([code[t.data] for t in one], total),
                "microbatch": _tiled([t.microbatch for t in one], total),
                "iteration": _iterations(len(one), total),
                "nbytes": np.full(total, int(trs.nbytes), np.int64),
                "issued": _floats(trs.issued[r]), "_n": total})
    elif not isinstance(trs, TransferColumns):
        by_rank: list[list] = [[] for _ in range(P)]
        for t in trs:
            by_rank[t.src_rank].append(t)
        datas, code = _names({t.data for t in trs})
        for recs in by_rank:
            per_rank.append({
                "dst_rank": _i64([t.dst_rank for t in recs]),
                "src_stage": _i64([t.src_stage for t in recs]),
                "dst_stage": _i64([t.dst_stage for t in recs]),
                "data": _i64([code[t.data] for t in recs]),
                "microbatch": _i64([t.microbatch for t in recs]),
                "iteration": _i64([t.iteration for t in recs]),
                "nbytes": _i64([int(t.nbytes) for t in recs]),
                "issued": _floats([t.issued for t in recs]), "_n": len(recs)})
    bounds = np.zeros(P + 1, np.int64)
    bounds[1:] = np.cumsum([p["_n"] for p in per_rank])
    cols = _join(per_rank, ("dst_rank", "src_stage", "dst_stage", "data", "microbatch",
                            "iteration", "nbytes"))
    issued = np.concatenate([p["issued"] for p in per_rank]) if per_rank else np.zeros(0)
    return Sends(bounds, cols["dst_rank"], cols["src_stage"], cols["dst_stage"], cols["data"],
                 datas, cols["microbatch"], cols["iteration"], cols["nbytes"], issued)
