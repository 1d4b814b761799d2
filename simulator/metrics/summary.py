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
from statistics import mean, median
from typing import Any

from ..engine.columns import ActionColumns, TransferColumns
from ..schedules.phases import peak_inflight, phase_counts
from ..schedules.action import Kind
from .types import (SCHEMA_VERSION, IterationStats, LinkSummary, PipelineBubble, RankSummary,
                    RunSummary)


def _percentile(values: list[float], q: float) -> float:
    s = sorted(values)
    if not s:
        return 0.0
    k = (len(s) - 1) * q
    lo = int(k)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (k - lo)


def summarize(result: Any) -> RunSummary:
    sched = result.schedule
    rec = result.records
    n_it = len(rec.iteration_bounds)
    makespans = [e - s for s, e in rec.iteration_bounds]
    makespan = mean(makespans) if makespans else 0.0

    cols = rec.actions if isinstance(rec.actions, ActionColumns) else None
    per_rank_iter: dict[tuple[int, int], list] = defaultdict(list)
    if cols is None:
        for a in rec.actions:
            per_rank_iter[(a.rank, a.iteration)].append(a)

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

    stages = []
    for r in range(sched.pp):
        busy = idle_own = span_own = fwd = bwd = fwd_bub = bwd_bub = 0.0
        if cols is not None:       # the run's time columns, read in place (no record objects)
            forward = [a.kind == Kind.F for a in sched.ranks[r]]
            n = len(forward)
            starts, ends = cols.start[r], cols.end[r]
        for it, (it_start, it_end) in enumerate(rec.iteration_bounds):
            if cols is not None:
                lo = it * n
                times = list(zip(forward, starts[lo:lo + n], ends[lo:lo + n]))
            else:
                acts = per_rank_iter.get((r, it), ())   # a rank records in execution order
                times = [(a.kind == Kind.F, a.start, a.end) for a in acts]
            t = it_start
            for is_f, a_start, a_end in times:
                d = a_end - a_start
                gap = max(0.0, a_start - t)
                busy += d
                if is_f:
                    fwd += d
                    fwd_bub += gap
                else:
                    bwd += d
                    bwd_bub += gap
                t = max(t, a_end)
            bwd_bub += max(0.0, it_end - t)
            if times:
                own = times[-1][2] - times[0][1]
                span_own += own
                idle_own += own - sum(e - s for _, s, e in times)
        k = max(1, n_it)
        busy /= k
        idle = max(0.0, makespan - busy)
        counts = phase_counts(sched.ranks[r], result.phase_labels[r])
        peak_mb, peak_act = peak_inflight(sched.ranks[r])
        stages.append(RankSummary(
            rank=r,
            virtual_stages=sched.stages_of(r),
            layers=tuple(result.partition.layer_range(sched.stage_chunk[s])
                         for s in sched.stages_of(r)),
            busy_ns=busy,
            idle_ns=idle,
            bubble_ratio=idle / makespan if makespan else 0.0,
            bubble_ratio_own=(idle_own / span_own) if span_own else 0.0,
            **counts,
            peak_inflight_microbatches=peak_mb,
            peak_inflight_activations=peak_act,
            bytes_sent=sent[r] // k,
            bytes_received=received[r] // k,
            static_memory_bytes=round(rec.static_memory[r]) if rec.static_memory else 0,
            peak_memory_bytes=round(rec.peak_memory[r]) if rec.peak_memory else 0,
            forward_ns=fwd / k,
            backward_ns=bwd / k,
            forward_bubble_ns=fwd_bub / k,
            backward_bubble_ns=bwd_bub / k,
        ))

    bubble = mean(s.bubble_ratio for s in stages) if stages else 0.0
    bubble_own = mean(s.bubble_ratio_own for s in stages) if stages else 0.0
    spec = result.spec
    theory = None
    if spec is not None and spec.closed_form is not None:
        try:
            theory = spec.closed_form(sched.pp, sched.microbatches, sched.vpp)
        except (ZeroDivisionError, ValueError):
            theory = None
    fwd_total = sum(s.forward_ns for s in stages)
    bwd_total = sum(s.backward_ns for s in stages)
    fwd_bub = sum(s.forward_bubble_ns for s in stages)
    bwd_bub = sum(s.backward_bubble_ns for s in stages)
    k = max(1, n_it)
    links = tuple(LinkSummary(ln.src, ln.dst, ln.bytes // k, ln.transfers // k, ln.busy_ns / k)
                  for ln in sorted(rec.links.values(), key=lambda x: (x.src, x.dst)))
    p2p_bytes = sum(ln.bytes for ln in links)
    dp_bytes = sum(c.nbytes for c in rec.collectives) // k
    out: dict[str, Any] = {
        "schema_version": SCHEMA_VERSION,
        "schedule": sched.name,
        "pp": sched.pp,
        "vpp": sched.vpp,
        "microbatches": sched.microbatches,
        "iterations": result.iterations,
        "workload": result.workload.path,
        "layout": result.workload.layout,
        "makespan_ns": makespan,
        "iteration_times_ns": tuple(makespans),
        "bubble_ratio": bubble,
        "bubble_ratio_own": bubble_own,
        "theoretical_bubble_ratio": theory,
        "theoretical_formula": spec.formula if spec is not None else "",
        "theoretical_bubble_basis": spec.closed_form_basis if spec is not None else "makespan",
        "utilization": 1.0 - bubble,
        "forward_ns": fwd_total,
        "backward_ns": bwd_total,
        "forward_bubble_ns": fwd_bub,
        "backward_bubble_ns": bwd_bub,
        "layer_ops": rec.layer_ops,
        "p2p_bytes": p2p_bytes,
        "dp_collective_bytes": dp_bytes,
        "total_comm_bytes": p2p_bytes + dp_bytes,
        "peak_inflight_microbatches": max((s.peak_inflight_microbatches for s in stages),
                                          default=0),
        "peak_memory_bytes": max((s.peak_memory_bytes for s in stages), default=0),
        "p2p_mode": result.options.p2p if result.options else "async",
        "engine_used": getattr(result, "engine_used", "simpy"),
        "ranks": tuple(stages),
        "links": links,
        "warnings": tuple(getattr(result, "warnings", ())),
        "notes": tuple(result.notes) + tuple(result.workload.warnings),
    }
    if n_it > 1:
        out["iteration_time_stats_ns"] = IterationStats(
            makespan, median(makespans), _percentile(makespans, 0.99), min(makespans),
            max(makespans))
    if n_it:
        from .bubble import pipeline_bubble
        from .simai import simai_pipeline_terms

        pb = pipeline_bubble(result)
        out["pipeline_bubble_ns"] = PipelineBubble(pb["span_ns"], tuple(pb["per_rank_ns"]),
                                                   pb["mean_ns"], pb["max_ns"], pb["min_ns"])
        if result.workload.layout == "aicb":
            # SimAI's formula reads the rows as one stage over ga microbatches: only meaningful
            # for files in that layout
            simai = simai_pipeline_terms(result.workload, result.system)
            simai["bubble_at_schedule_ns"] = simai_pipeline_terms(
                result.workload, result.system, pp=sched.pp, ga=sched.microbatches,
                vpp=sched.vpp)["bubble_ns"]
            out["simai"] = simai
    if not sched.flush and sched.meta.get("iterations"):  # e.g. 2BW: minibatches run as one
        out["minibatches"] = sched.meta["iterations"]
        out["time_per_minibatch_ns"] = makespan / sched.meta["iterations"]
    if sched.meta:
        out["schedule_meta"] = {k2: v for k2, v in sched.meta.items()
                                if isinstance(v, (int, float, str, bool, list))}
    return RunSummary(**out)
