"""Chrome Trace Event JSON of a simulated run, for https://ui.perfetto.dev and chrome://tracing.

Layout of the trace:

- one process per rank (``pid = rank + 1``: Perfetto treats pid 0 as the kernel's idle task),
  named ``rank r (stage s)``, and a ``pipeline`` process on top with one slice per iteration;
- in a rank, thread 1 is the compute stream: a complete event (``ph: "X"``) per action, named in
  PyTorch's notation (``5F3``), with the per-layer Workload-FSM states as nested slices when the
  run recorded them (``trace_layers=True``); then the point-to-point send tracks (one per peer),
  the receive tracks, and the DP collective stream;
- a flow arrow (``ph: "s"`` / ``"f"``, ``bp: "e"``) from each send to its receive;
- counters (``ph: "C"``): microbatches and stage activations in flight per rank, and its memory
  (``engine/memory_use.py``: every change, the peak included).

Times. The format wants ``ts``/``dur`` in microseconds; Perfetto turns them into integer
nanoseconds, either by truncating ``value * 1000`` or by cutting the decimal text after the third
decimal, depending on its version. Every boundary is therefore rounded once to a whole
nanosecond (Perfetto's resolution) and written as a float both readings turn back into that same
integer, so slices that touch in the simulation touch in Perfetto, never overlap by a
nanosecond. Slices on one track must nest; communication that overlaps in time (a shared link,
latency after serialisation) is spread over as many tracks as it needs.
"""

from __future__ import annotations

import json
import math
from collections import defaultdict
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from ..engine.memory_use import memory_timeline
from ..errors import ConfigError
from ..result import SimulationResult
from ..schedules.action import Kind
from .gantt import iteration_bars
from .palette import KIND_NAMES

COMPUTE_TID = 1


# -- time -------------------------------------------------------------------------------------
def ns(t: float) -> int:
    """A simulated time as whole nanoseconds (round half to even)."""
    return int(round(t))


def us(q: int) -> float:
    """Microseconds that Perfetto reads back as exactly ``q`` ns, whichever way it parses."""
    v = q / 1000
    while v * 1000 < q:
        v = math.nextafter(v, math.inf)
    return v


def _slice(name: str, cat: str, pid: int, tid: int, q0: int, q1: int, args: dict) -> dict:
    return {"name": name, "cat": cat, "ph": "X", "ts": us(q0), "dur": us(q1 - q0), "pid": pid,
            "tid": tid, "args": args}


def assign_lanes(intervals: Sequence[tuple[int, int]]) -> list[int]:
    """Lane per interval so that intervals sharing a lane do not overlap (touching is fine):
    greedy in start order, first lane free by then. Returns lane numbers in input order."""
    order = sorted(range(len(intervals)), key=lambda i: (intervals[i][0], intervals[i][1]))
    ends: list[int] = []
    lane = [0] * len(intervals)
    for i in order:
        s, e = intervals[i]
        for k, last in enumerate(ends):
            if last <= s:
                ends[k] = e
                lane[i] = k
                break
        else:
            ends.append(e)
            lane[i] = len(ends) - 1
    return lane


# -- pieces -----------------------------------------------------------------------------------
def _layer_text(result: SimulationResult, chunk: int) -> str:
    first, last = result.partition.layer_range(chunk) if chunk >= 0 else (-1, -2)
    return f"{first}-{last}" if first >= 0 else ""


def _actions(result: SimulationResult) -> tuple[list[dict], dict]:
    """Compute slices; and (rank, iteration, stage, microbatch, kind class) -> (pid, tid, q0, q1)
    of each action, to anchor flows and layer slices."""
    events = []
    where: dict[tuple, tuple[int, int, int, int]] = {}
    layer_text: dict[int, str] = {}
    # a pair's halves are one OVERLAP_F_B step: name it as torch's profiler does
    overlap = {(r, h.pair): step.plain for r, steps in enumerate(result.schedule.steps)
               for step in steps if step.sub for h in step.sub}
    for a in result.records.actions:
        q0, q1 = ns(a.start), ns(a.end)
        text = layer_text.get(a.chunk)
        if text is None:
            text = layer_text[a.chunk] = _layer_text(result, a.chunk)
        args = {"stage": a.stage, "chunk": a.chunk, "microbatch": a.microbatch, "kind": a.kind,
                "pass": KIND_NAMES[a.kind], "layers": text, "phase": a.phase,
                "iteration": a.iteration}
        if a.pair is not None:
            args["pair"] = a.pair
            args["overlap"] = overlap.get((a.rank, a.pair), "")
        events.append(_slice(f"{a.stage}{a.kind}{a.microbatch}", "compute", a.rank + 1,
                             COMPUTE_TID, q0, q1, args))
        where[(a.rank, a.iteration, a.stage, a.microbatch, a.kind)] = (a.rank + 1, COMPUTE_TID,
                                                                       q0, q1)
    return events, where


def _layer_slices(result: SimulationResult, where: dict) -> list[dict]:
    """The FSM states of each action's layers, nested in the action's slice: each clamped into
    its parent and after its previous sibling (rounding must not break the nesting)."""
    names = {layer.index: layer.name for layer in _model_layers(result).values()}
    by_parent: dict[tuple, list] = defaultdict(list)
    kinds_of: dict[tuple, list[tuple[str, tuple]]] = defaultdict(list)
    for key, place in where.items():
        rank, it, stage, mb, kind = key
        kinds_of[(rank, it, stage, mb)].append((kind, place))
    for rec in result.records.layers:
        mid = ns((rec.start + rec.end) / 2)
        best = None
        for kind, place in kinds_of.get((rec.rank, rec.iteration, rec.stage, rec.microbatch), ()):
            if place[2] <= mid <= place[3]:
                best = place
                break
        if best is not None:
            by_parent[best].append(rec)
    events = []
    for (pid, tid, p0, p1), recs in by_parent.items():
        recs.sort(key=lambda r: (r.start, r.end))
        prev = p0
        for rec in recs:
            q0 = min(max(ns(rec.start), prev, p0), p1)
            q1 = min(max(ns(rec.end), q0), p1)
            prev = q1
            events.append(_slice(f"{rec.state} L{rec.layer}", "layer", pid, tid, q0, q1,
                                 {"layer": rec.layer, "name": names.get(rec.layer, ""),
                                  "state": rec.state, "microbatch": rec.microbatch,
                                  "iteration": rec.iteration}))
    return events


def _iteration_rows(result: SimulationResult) -> list[dict]:
    """Once-per-iteration rows (optimizer, grad norm) on the compute stream, when any ran."""
    return [_slice("iteration rows", "optimizer", b.rank + 1, COMPUTE_TID, ns(b.start),
                   ns(b.end), {}) for b in iteration_bars(result)]


class _Tracks:
    """Thread ids of a rank's communication tracks, numbered after the compute stream."""

    def __init__(self) -> None:
        self.names: dict[tuple[int, int], str] = {}
        self._ids: dict[tuple[int, tuple], int] = {}

    def tid(self, pid: int, key: tuple, name: str) -> int:
        tid = self._ids.get((pid, key))
        if tid is None:
            tid = self._ids[(pid, key)] = 2 + sum(1 for p, _ in self._ids if p == pid)
            self.names[(pid, tid)] = name
        return tid


def _lane_name(base: str, lane: int) -> str:
    return base if lane == 0 else f"{base} ({lane + 1})"


def _comm(result: SimulationResult, where: dict, tracks: _Tracks) -> list[dict]:
    """Send and receive slices of every transfer that takes time, flows from each send to its
    receive (between the compute slices that produce and consume the data when the transfer
    takes no time: Perfetto binds a flow to the slice open at its time, so it needs one), and the
    DP collective stream."""
    transfers = sorted(result.records.transfers,
                       key=lambda t: (t.iteration, t.start, t.src_rank, t.dst_rank, t.dst_stage,
                                      t.data, t.microbatch))
    spans = [(ns(t.start), ns(t.end)) for t in transfers]
    send_groups: dict[tuple[int, int], list[int]] = defaultdict(list)
    recv_groups: dict[tuple[int, int], list[int]] = defaultdict(list)
    for i, t in enumerate(transfers):
        if spans[i][1] > spans[i][0]:
            send_groups[(t.src_rank, t.dst_rank)].append(i)
            recv_groups[(t.dst_rank, t.src_rank)].append(i)
    send_place: dict[int, tuple[int, int]] = {}
    recv_place: dict[int, tuple[int, int]] = {}
    events = []
    for groups, place, word, arrow in ((send_groups, send_place, "send", "→"),
                                       (recv_groups, recv_place, "recv", "←")):
        for (rank, peer), idx in sorted(groups.items()):
            lanes = assign_lanes([spans[i] for i in idx])
            for i, lane in zip(idx, lanes):
                pid = rank + 1
                tid = tracks.tid(pid, (word, peer, lane),
                                 _lane_name(f"{word} {arrow} rank {peer}", lane))
                place[i] = (pid, tid)
                t = transfers[i]
                events.append(_slice(
                    f"{word} {t.dst_stage}{t.data}{t.microbatch}", "p2p", pid, tid, *spans[i],
                    {"src_rank": t.src_rank, "dst_rank": t.dst_rank, "src_stage": t.src_stage,
                     "dst_stage": t.dst_stage, "data": "activation" if t.data == Kind.F else
                     "gradient", "microbatch": t.microbatch, "iteration": t.iteration,
                     "bytes": t.nbytes, "queued_ns": t.start - t.issued}))
    for i, t in enumerate(transfers):
        a, b = spans[i]
        if i in send_place and b - a >= 3:
            # both ends strictly inside their slices, the start before the end
            src_ts, dst_ts = a + (b - a) // 3, a + 2 * (b - a) // 3
            src, dst = send_place[i], recv_place[i]
        else:   # (next to) no link time: from the producing action to the consuming one
            src_at = _producer(where, t.src_rank, t.iteration, t.src_stage, t.microbatch, t.data)
            dst_at = _producer(where, t.dst_rank, t.iteration, t.dst_stage, t.microbatch, t.data)
            if src_at is None or dst_at is None:
                continue
            src, dst = src_at[:2], dst_at[:2]
            src_ts = src_at[2] + (src_at[3] - src_at[2]) // 2
            dst_ts = dst_at[2] + (dst_at[3] - dst_at[2]) // 2
        events.append({"name": "p2p", "cat": "p2p", "ph": "s", "id": i + 1, "pid": src[0],
                       "tid": src[1], "ts": us(src_ts)})
        events.append({"name": "p2p", "cat": "p2p", "ph": "f", "bp": "e", "id": i + 1,
                       "pid": dst[0], "tid": dst[1], "ts": us(dst_ts)})
    events += _collectives(result, tracks)
    return events


def _producer(where: dict, rank: int, it: int, stage: int, mb: int, data: str):
    """The action of ``stage`` that makes (on the sender) or uses (on the receiver) the data of
    a transfer: the forward for activations, the B or I backward for gradients."""
    place = where.get((rank, it, stage, mb, data))
    if place is None and data == Kind.B:
        place = where.get((rank, it, stage, mb, Kind.I))
    return place


def _collectives(result: SimulationResult, tracks: _Tracks) -> list[dict]:
    layers = _model_layers(result)
    by_rank: dict[int, list] = defaultdict(list)
    for c in result.records.collectives:
        by_rank[c.rank].append(c)
    events = []
    for rank, colls in sorted(by_rank.items()):
        colls.sort(key=lambda c: (c.start, c.end))
        spans = [(ns(c.start), ns(c.end)) for c in colls]
        for c, span, lane in zip(colls, spans, assign_lanes(spans)):
            pid = rank + 1
            tid = tracks.tid(pid, ("dp", lane), _lane_name("DP collectives", lane))
            layer = layers.get(c.layer)
            op = (layer.wg_comm.type.value.lower() if layer is not None else "collective")
            events.append(_slice(f"{op} L{c.layer}", "dp", pid, tid, *span,
                                 {"layer": c.layer, "name": layer.name if layer else "",
                                  "chunk": c.chunk, "bytes": c.nbytes, "iteration": c.iteration,
                                  "queued_ns": c.start - c.ready}))
    return events


def counter_events(pid: int, name: str,
                   samples: Iterable[tuple[float, dict[str, float]]]) -> list[dict]:
    """``ph: "C"`` events of one counter: samples (time ns, {series: value}) in time order; at
    equal nanoseconds the last sample wins, and repeats of the current value are dropped."""
    latest: dict[int, dict[str, float]] = {}
    for t, values in samples:
        latest[ns(t)] = dict(values)
    events = []
    last = None
    for q in sorted(latest):
        if latest[q] != last:
            events.append({"name": name, "ph": "C", "ts": us(q), "pid": pid,
                           "args": latest[q]})
            last = latest[q]
    return events


def inflight_samples(result: SimulationResult, rank: int,
                     actions: Sequence[Any] | None = None) -> list[tuple[float, dict[str, int]]]:
    """Microbatches and (stage, microbatch) activations held by ``rank`` over time: held from
    the start of a forward to the end of its last weight-carrying backward (W, or B when the
    backward is not split), as the memory model and the summary's peak count them.
    ``actions``: the rank's action records, when the caller has them grouped already."""
    acts = actions if actions is not None else [a for a in result.records.actions
                                                if a.rank == rank]
    split = {(a.iteration, a.stage, a.microbatch) for a in acts if a.kind == Kind.W}
    changes = []   # (time, order, +1/-1, key); releases sort before acquires at equal times
    for a in acts:
        key = (a.iteration, a.stage, a.microbatch)
        if a.kind == Kind.F:
            changes.append((a.start, 1, +1, key))
        elif a.kind == Kind.W or (a.kind == Kind.B and key not in split):
            changes.append((a.end, 0, -1, key))
    changes.sort(key=lambda c: (c[0], c[1]))
    held: set[tuple] = set()
    per_mb: dict[tuple[int, int], int] = defaultdict(int)
    samples = [(0.0, {"microbatches": 0, "activations": 0})]
    for t, _, delta, key in changes:
        mb = (key[0], key[2])
        if delta > 0 and key not in held:
            held.add(key)
            per_mb[mb] += 1
        elif delta < 0 and key in held:
            held.discard(key)
            per_mb[mb] -= 1
            if per_mb[mb] == 0:
                del per_mb[mb]
        samples.append((t, {"microbatches": len(per_mb), "activations": len(held)}))
    return samples


def _counters(result: SimulationResult) -> list[dict]:
    events = []
    by_rank: dict[int, list] = defaultdict(list)
    for a in result.records.actions:
        by_rank[a.rank].append(a)
    for r in range(result.schedule.pp):
        events += counter_events(r + 1, "in flight", inflight_samples(result, r, by_rank[r]))
    memory = memory_timeline(result.schedule, result.records, result.iterations)
    per_rank: dict[int, list] = defaultdict(list)
    for rank, t, nbytes in memory:
        per_rank[rank].append((t, {"bytes": nbytes}))
    for rank, samples in sorted(per_rank.items()):
        samples.sort(key=lambda s: s[0])
        events += counter_events(rank + 1, "memory", samples)
    return events


def _metadata(result: SimulationResult, tracks: _Tracks, pipeline_pid: int) -> list[dict]:
    sched = result.schedule
    events = [
        {"name": "process_name", "ph": "M", "pid": pipeline_pid,
         "args": {"name": f"pipeline ({sched.name}, P={sched.pp}, M={sched.microbatches}, "
                          f"v={sched.vpp})"}},
        {"name": "process_sort_index", "ph": "M", "pid": pipeline_pid, "args": {"sort_index": 0}},
        {"name": "thread_name", "ph": "M", "pid": pipeline_pid, "tid": 1,
         "args": {"name": "iterations"}},
    ]
    for r in range(sched.pp):
        stages = sched.stages_of(r)
        word = "stage" if len(stages) == 1 else "stages"
        pid = r + 1
        events += [
            {"name": "process_name", "ph": "M", "pid": pid,
             "args": {"name": f"rank {r} ({word} {', '.join(map(str, stages))})"}},
            {"name": "process_sort_index", "ph": "M", "pid": pid, "args": {"sort_index": pid}},
            {"name": "thread_name", "ph": "M", "pid": pid, "tid": COMPUTE_TID,
             "args": {"name": "compute"}},
            {"name": "thread_sort_index", "ph": "M", "pid": pid, "tid": COMPUTE_TID,
             "args": {"sort_index": COMPUTE_TID}},
        ]
    for (pid, tid), name in sorted(tracks.names.items()):
        events += [
            {"name": "thread_name", "ph": "M", "pid": pid, "tid": tid, "args": {"name": name}},
            {"name": "thread_sort_index", "ph": "M", "pid": pid, "tid": tid,
             "args": {"sort_index": tid}},
        ]
    return events


def _iterations(result: SimulationResult, pid: int) -> list[dict]:
    s = result.summary
    events = []
    for i, (start, end) in enumerate(result.records.iteration_bounds):
        events.append(_slice(f"iteration {i}", "iteration", pid, 1, ns(start), ns(end),
                             {"iteration": i, "time_ns": end - start,
                              "schedule": result.schedule.name,
                              "bubble_ratio_mean": s.bubble_ratio,
                              "theoretical_bubble_ratio": s.theoretical_bubble_ratio}))
    return events


def _order(ev: dict) -> tuple:
    """Metadata first; then per track by start, a parent (longer) before what nests in it."""
    if ev["ph"] == "M":
        return (0, ev["pid"], ev.get("tid", 0), 0, 0)
    q = ns(ev["ts"] * 1000)
    return (1, ev["pid"], ev.get("tid", 0), q, -ns(ev.get("dur", 0.0) * 1000))


def build_trace(result: SimulationResult) -> dict:
    """The trace as a dict: ``{"traceEvents": [...], "displayTimeUnit": "ns"}``."""
    pipeline_pid = result.schedule.pp + 1
    tracks = _Tracks()
    compute, where = _actions(result)
    body = compute + _layer_slices(result, where) + _iteration_rows(result)
    body += _comm(result, where, tracks) + _counters(result) + _iterations(result, pipeline_pid)
    events = _metadata(result, tracks, pipeline_pid) + body
    events.sort(key=_order)
    # displayTimeUnit last: old Perfetto builds took a leading "ns" to mean ts in ns
    return {"traceEvents": events, "displayTimeUnit": "ns"}


def write_trace(result: SimulationResult, path: str | Path) -> Path:
    """``pipesim run --trace PATH``: write the trace of ``result`` as JSON."""
    out = Path(path)
    # json.dumps, not json.dump: dumps runs the C encoder (json.dump to a file does not), which
    # is several times faster on the half a million events of a P=64, M=512 run
    text = json.dumps(build_trace(result), separators=(",", ":"), ensure_ascii=False)
    try:
        with open(out, "w", encoding="utf-8") as fh:
            fh.write(text + "\n")
    except OSError as err:
        raise ConfigError(f"--trace: cannot write {str(path)!r}: {err.strerror or err}") from None
    return out


def _model_layers(result: SimulationResult) -> dict:
    """Layer index -> layer as the run numbers them (model order; the AICB layout re-indexes)."""
    part = result.partition
    layers = {layer.index: layer for chunk in part.chunks for layer in chunk}
    layers.update({layer.index: layer for layer in part.iteration_layers})
    return layers
