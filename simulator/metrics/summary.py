"""From a run's records to the numbers people decide on.

Per pipeline stage (rank): busy and idle compute-stream time, two bubble ratios, phase counts,
peak in-flight microbatches, bytes sent and received, and document 004's PipelineStats (forward
and backward time and the idle time attributed to each: a gap before an action is charged to its
kind; the gap after a rank's last action to the backward side, as the drain). Overall: makespan
per iteration (mean over iterations), mean bubble ratio beside the schedule's closed form.

Two bubble ratios, named:
- ``bubble_ratio``: idle / makespan (the iteration time users see);
- ``bubble_ratio_own``: idle between the stage's own first action and its last action, over that
  span (what the zero-bubble authors report).
"""

from __future__ import annotations

from collections import defaultdict
from itertools import accumulate, chain, compress, count, islice
from operator import gt, le, sub
from typing import Any

from ..engine.columns import ActionColumns, TransferColumns
from ..schedules.action import Kind
from ..schedules.phases import (peak_inflight, phase_counts, rank_in_order, rank_kinds,
                                rank_stages)
from ..engine.records import RunRecords
from .bubble import pipeline_bubble
from .inputs import RunInputs
from .simai import simai_pipeline_terms
from .sums import added, mean
from .types import (SCHEMA_VERSION, IterationStats, LinkSummary, MemoryBreakdown,
                    PipelineBubble, RankSummary,
                    RunSummary)



def _percentile(values: list[float], q: float) -> float:
    s = sorted(values)
    if not s:
        return 0.0
    k = (len(s) - 1) * q
    lo = int(k)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (k - lo)


_FORWARD = bytes(1 if b == ord("F") else 0 for b in range(256))   # kind string -> F mask
_FLIP = bytes((1, 0)) + bytes(254)                                # that mask negated


class _Times:
    """One rank's compute-stream sums over its iterations, added in the order of the rank's
    actions exactly as a loop over them would add (the same float operations in the same
    order: the summary's numbers do not move by a rounding), but in C, over the time columns,
    instead of a Python statement per action.

    Per action: its duration goes to ``busy`` and to ``fwd`` or ``bwd``; the gap before it
    (its start minus the latest end so far, the iteration's start at first) to ``fwd_bub`` or
    ``bwd_bub`` when positive; after the last action, the gap to the iteration's end to
    ``bwd_bub`` (the drain). Own span: first start to last end, ``idle_own`` that minus the
    durations."""

    __slots__ = ("busy", "fwd", "bwd", "fwd_bub", "bwd_bub", "idle_own", "span_own",
                 "first_busy")

    def __init__(self) -> None:
        self.busy = self.fwd = self.bwd = self.fwd_bub = self.bwd_bub = 0.0
        self.idle_own = self.span_own = 0.0
        self.first_busy: float | None = None   # busy after the first iteration

    def add(self, forward, starts, ends, it_start: float, it_end: float) -> None:
        """One iteration: ``forward`` a truthy mask (one per action), ``starts``/``ends`` the
        actions' times in execution order."""
        n = min(len(forward), len(starts), len(ends))
        if n < len(starts) or n < len(ends):
            starts, ends = starts[:n], ends[:n]
        backward = (forward.translate(_FLIP) if isinstance(forward, bytes)
                    else [not f for f in forward])
        d = list(map(sub, ends, starts))
        self.busy = added(d, self.busy)
        if self.first_busy is None:
            self.first_busy = self.busy
        self.fwd = added(compress(d, forward), self.fwd)
        self.bwd = added(compress(d, backward), self.bwd)
        # the latest end before each action: on a compute stream the ends only grow, so it
        # is the previous action's end (checked; otherwise the running maximum)
        before = None
        if n == 0 or (it_start <= ends[0] and all(map(le, ends, islice(ends, 1, None)))):
            latest: Any = chain((it_start,), ends)
            last = ends[n - 1] if n else it_start
        else:
            latest = before = list(accumulate(chain((it_start,), ends), max))
            last = before[-1]
        # only positive gaps add anything: find them (s > t exactly when s - t > 0)
        for i in compress(count(), map(gt, starts, latest)):
            gap = starts[i] - (before[i] if before is not None
                               else ends[i - 1] if i else it_start)
            if forward[i]:
                self.fwd_bub += gap
            else:
                self.bwd_bub += gap
        self.bwd_bub += max(0.0, it_end - last)
        if n:
            own = ends[n - 1] - starts[0]
            self.span_own += own
            self.idle_own += own - sum(d)


def _peak_fields(rec, rank: int) -> dict:
    """A rank's peak by part, when and in which action (records without the engine's memory
    accounting, e.g. hand-built ones, give the peak as static memory)."""
    peaks = getattr(rec, "memory_peaks", None)
    if peaks:
        p = peaks[rank]
        parts = {k: round(v) for k, v in p.breakdown.items()}
        return {"peak_memory_breakdown": MemoryBreakdown(**parts),
                "peak_memory_time_ns": p.time_ns, "peak_memory_action": p.action}
    static = round(rec.peak_memory[rank]) if rec.peak_memory else 0
    return {"peak_memory_breakdown": MemoryBreakdown(static, 0, 0, 0, 0, 0),
            "peak_memory_time_ns": 0.0, "peak_memory_action": None}


def _bytes_per_rank(rec) -> tuple[dict[int, int], dict[int, int]]:
    """Bytes each rank sent and received over the whole run."""
    sent: dict[int, int] = defaultdict(int)
    received: dict[int, int] = defaultdict(int)
    if isinstance(rec.transfers, TransferColumns) and rec.links:
        # every transfer crosses exactly one link: the links' byte counts are its sums
        for ln in rec.links.values():
            sent[ln.src] += ln.bytes
            received[ln.dst] += ln.bytes
    else:
        for t in rec.transfers:
            sent[t.src_rank] += t.nbytes
            received[t.dst_rank] += t.nbytes
    return sent, received


def _rank_times(rec, r: int, kinds: str, cols: ActionColumns | None,
                per_rank_iter: dict[tuple[int, int], list]) -> _Times:
    """Rank ``r``'s compute-stream sums over every iteration: from the run's time columns,
    read in place (no record objects), or from its action records."""
    acc = _Times()
    if cols is not None:
        n = len(kinds)
        forward = kinds.encode("ascii").translate(_FORWARD)
        starts, ends = cols.start[r], cols.end[r]
    for it, (it_start, it_end) in enumerate(rec.iteration_bounds):
        if cols is not None:
            lo = it * n
            acc.add(forward, starts[lo:lo + n], ends[lo:lo + n], it_start, it_end)
        else:
            acts = per_rank_iter.get((r, it), ())   # a rank records in execution order
            acc.add([a.kind == Kind.F for a in acts], [a.start for a in acts],
                    [a.end for a in acts], it_start, it_end)
    return acc


def _rank_summary(sched, rec, partition, labels, r: int, kinds: str, acc: _Times,
                  makespan: float, k: int, sent: dict[int, int],
                  received: dict[int, int]) -> RankSummary:
    """Rank ``r``'s line of the summary, per iteration (``k`` iterations summed in ``acc``;
    ``labels`` its phase labels)."""
    busy = acc.busy / k
    idle = max(0.0, makespan - busy)
    counts = phase_counts(sched.ranks[r], labels, kinds)
    peak_mb, peak_act = peak_inflight(sched.ranks[r], kinds, rank_stages(sched, r),
                                      rank_in_order(sched, r))
    return RankSummary(
        rank=r,
        virtual_stages=sched.stages_of(r),
        layers=tuple(partition.layer_range(sched.stage_chunk[s])
                     for s in sched.stages_of(r)),
        busy_ns=busy,
        idle_ns=idle,
        bubble_ratio=idle / makespan if makespan else 0.0,
        bubble_ratio_own=(acc.idle_own / acc.span_own) if acc.span_own else 0.0,
        **counts,
        peak_inflight_microbatches=peak_mb,
        peak_inflight_activations=peak_act,
        bytes_sent=sent[r] // k,
        bytes_received=received[r] // k,
        static_memory_bytes=round(rec.static_memory[r]) if rec.static_memory else 0,
        peak_memory_bytes=round(rec.peak_memory[r]) if rec.peak_memory else 0,
        **_peak_fields(rec, r),
        forward_ns=acc.fwd / k,
        backward_ns=acc.bwd / k,
        forward_bubble_ns=acc.fwd_bub / k,
        backward_bubble_ns=acc.bwd_bub / k,
    )


def _theory(spec, sched) -> float | None:
    """The schedule's closed-form bubble ratio, when it has one for this shape."""
    if spec is not None and spec.closed_form is not None:
        try:
            return spec.closed_form(sched.pp, sched.microbatches, sched.vpp)
        except (ZeroDivisionError, ValueError):
            return None
    return None


def _overall(sched, rec, spec, stages: list[RankSummary], makespan: float,
             makespans: list[float], k: int) -> dict[str, Any]:
    """The run-wide figures of the summary, from the ranks' lines."""
    bubble = mean(s.bubble_ratio for s in stages) if stages else 0.0
    bubble_own = mean(s.bubble_ratio_own for s in stages) if stages else 0.0
    links = tuple(LinkSummary(ln.src, ln.dst, ln.bytes // k, ln.transfers // k, ln.busy_ns / k)
                  for ln in sorted(rec.links.values(), key=lambda x: (x.src, x.dst)))
    p2p_bytes = sum(ln.bytes for ln in links)
    dp_bytes = sum(c.nbytes for c in rec.collectives) // k
    return {
        "schema_version": SCHEMA_VERSION,
        "schedule": sched.name,
        "pp": sched.pp,
        "vpp": sched.vpp,
        "microbatches": sched.microbatches,
        "makespan_ns": makespan,
        "iteration_times_ns": tuple(makespans),
        "bubble_ratio": bubble,
        "bubble_ratio_own": bubble_own,
        "theoretical_bubble_ratio": _theory(spec, sched),
        "theoretical_formula": spec.formula if spec is not None else "",
        "theoretical_bubble_basis": spec.closed_form_basis if spec is not None else "makespan",
        "utilization": 1.0 - bubble,
        "forward_ns": sum(s.forward_ns for s in stages),
        "backward_ns": sum(s.backward_ns for s in stages),
        "forward_bubble_ns": sum(s.forward_bubble_ns for s in stages),
        "backward_bubble_ns": sum(s.backward_bubble_ns for s in stages),
        "layer_ops": rec.layer_ops,
        "p2p_bytes": p2p_bytes,
        "dp_collective_bytes": dp_bytes,
        "total_comm_bytes": p2p_bytes + dp_bytes,
        "peak_inflight_microbatches": max((s.peak_inflight_microbatches for s in stages),
                                          default=0),
        "peak_memory_bytes": max((s.peak_memory_bytes for s in stages), default=0),
        "ranks": tuple(stages),
        "links": links,
    }


def summarize(rec: RunRecords, inputs: RunInputs) -> RunSummary:
    """The summary of a run's records ``rec``, with what it reads of the run's ``inputs``."""
    sched = inputs.schedule
    n_it = len(rec.iteration_bounds)
    makespans = [e - s for s, e in rec.iteration_bounds]
    makespan = mean(makespans) if makespans else 0.0
    k = max(1, n_it)

    cols = rec.actions if isinstance(rec.actions, ActionColumns) else None
    per_rank_iter: dict[tuple[int, int], list] = defaultdict(list)
    if cols is None:
        for a in rec.actions:
            per_rank_iter[(a.rank, a.iteration)].append(a)
    sent, received = _bytes_per_rank(rec)

    stages = []
    first_busy: list[float] = []     # per rank, its compute time in the first iteration
    for r in range(sched.pp):
        kinds = rank_kinds(sched, r)
        acc = _rank_times(rec, r, kinds, cols, per_rank_iter)
        first_busy.append(0.0 if acc.first_busy is None else acc.first_busy)
        stages.append(_rank_summary(sched, rec, inputs.partition, inputs.phase_labels[r], r,
                                    kinds, acc, makespan, k, sent, received))

    out = _overall(sched, rec, inputs.spec, stages, makespan, makespans, k)
    workload = inputs.workload
    out.update(iterations=inputs.iterations, workload=workload.path, layout=workload.layout,
               p2p_mode=inputs.p2p_mode, engine_used=inputs.engine_used,
               warnings=tuple(inputs.warnings),
               notes=tuple(inputs.notes) + tuple(workload.warnings))
    if n_it > 1:
        from statistics import median  # deferred (start-up): it loads decimal and fractions
        out["iteration_time_stats_ns"] = IterationStats(
            makespan, median(makespans), _percentile(makespans, 0.99), min(makespans),
            max(makespans))
        if inputs.iterations_overlap:
            out["steady_iteration_ns"] = mean(makespans[1:])
    if n_it:
        pb = pipeline_bubble(rec, sched, busy=first_busy)
        out["pipeline_bubble_ns"] = PipelineBubble(pb["span_ns"], tuple(pb["per_rank_ns"]),
                                                   pb["mean_ns"], pb["max_ns"], pb["min_ns"])
        if workload.layout == "aicb":
            # SimAI's formula reads the rows as one stage over ga microbatches: only meaningful
            # for files in that layout
            simai = simai_pipeline_terms(workload, inputs.system)
            simai["bubble_at_schedule_ns"] = simai_pipeline_terms(
                workload, inputs.system, pp=sched.pp, ga=sched.microbatches,
                vpp=sched.vpp)["bubble_ns"]
            out["simai"] = simai
    if not sched.flush and sched.meta.get("iterations"):  # e.g. 2BW: minibatches run as one
        out["minibatches"] = sched.meta["iterations"]
        out["time_per_minibatch_ns"] = makespan / sched.meta["iterations"]
    if sched.meta:
        out["schedule_meta"] = {k2: v for k2, v in sched.meta.items()
                                if isinstance(v, (int, float, str, bool, list))}
    return RunSummary(**out)
