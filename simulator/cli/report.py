"""Plain-text report of a run (what ``pipesim run`` prints): no heavy imports, aligned columns."""

from __future__ import annotations

from ..metrics.types import RunSummary
from ..units import fmt_bytes, fmt_pct, fmt_time, table

__all__ = ["render_run", "fmt_time", "fmt_bytes", "fmt_pct", "table"]


def _simai_lines(d: RunSummary) -> list[str]:
    lines = []
    if d.pipeline_bubble_ns is not None:
        pb = d.pipeline_bubble_ns
        lines.append(f"  pipeline bubble     {fmt_time(pb.mean_ns)} per rank (mean, up to the "
                     "last compute; the DP/optimizer tail excluded)")
    if d.simai is not None:
        s = d.simai
        lines.append(f"  SimAI's formula     {fmt_time(s['bubble_ns'])} as SimAI computes it "
                     f"(pp {s['pp']}, ga {s['ga']}, vpp {s['vpp']}); "
                     f"{fmt_time(s['bubble_at_schedule_ns'])} at this run's P, M, v")
    return lines


def _memory_lines(d: RunSummary) -> list[str]:
    """The largest rank's peak, when, in which action, and what it is made of."""
    if not d.ranks:
        return [f"  peak memory         {fmt_bytes(d.peak_memory_bytes)} (largest stage)"]
    top = max(d.ranks, key=lambda s: (s.peak_memory_bytes, -s.rank))
    where = (f"in {top.peak_memory_action} at {fmt_time(top.peak_memory_time_ns)}"
             if top.peak_memory_action else "its static memory")
    b = top.peak_memory_breakdown
    parts = ", ".join(f"{name.replace('_', ' ')} {fmt_bytes(value)}"
                      for name, value in zip(b._fields, b) if value)
    return [f"  peak memory         {fmt_bytes(top.peak_memory_bytes)} (rank {top.rank}, {where})",
            f"    made of           {parts or 'nothing'}"]


def _tail_lines(d: RunSummary) -> list[str]:
    """When most of the bubble ratio is the DP/optimizer tail (a P = 1 run, a run its DP
    all-reduce dominates), say so beside it: "bubble ratio 100 %" over "pipeline bubble 0 ns"
    read as a contradiction. Nothing is printed when the pipeline part is the larger."""
    pb = d.pipeline_bubble_ns
    if pb is None or not d.makespan_ns:
        return []
    pipe = pb.mean_ns / d.makespan_ns
    tail = d.bubble_ratio - pipe
    if tail <= pipe or tail < 0.00005:
        return []
    return [f"    of which          {fmt_pct(tail)} is the DP/optimizer tail after the last "
            f"compute, {fmt_pct(max(0.0, pipe))} the pipeline bubble"]


def render_run(d: RunSummary) -> str:
    lines = [
        f"pipesim: {d.schedule} on {d.workload} ({d.layout} layout)",
        f"  P={d.pp} stages, v={d.vpp}, M={d.microbatches} microbatches, "
        f"{d.iterations} iteration(s)",
        "",
        f"  iteration time      {fmt_time(d.makespan_ns)}",
    ]
    if d.iteration_time_stats_ns is not None:
        st = d.iteration_time_stats_ns
        lines.append(f"    spread            p50 {fmt_time(st.p50)}, p99 {fmt_time(st.p99)}, "
                     f"min {fmt_time(st.min)}, max {fmt_time(st.max)}")
    if d.steady_iteration_ns is not None:
        lines.append(f"    steady state      {fmt_time(d.steady_iteration_ns)} (the iterations "
                     "after the first, whose fill the next ones overlap)")
    theory = d.theoretical_bubble_ratio
    formula = d.theoretical_formula or "closed form"
    # a schedule laid out for its run's costs (auto, zb-greedy) has no formula to set beside it
    theory_text = ("no closed form" if theory is None
                   else f"closed form at uniform costs, {formula}: {fmt_pct(theory)}")
    if d.theoretical_bubble_basis == "own":
        bubble_lines = [
            f"  bubble ratio        {fmt_pct(d.bubble_ratio)} of the iteration time",
            f"  per-stage bubble    {fmt_pct(d.bubble_ratio_own)} of each stage's own span   "
            f"({theory_text})"]
    else:
        bubble_lines = [f"  bubble ratio        {fmt_pct(d.bubble_ratio)}   ({theory_text})"]
    lines += bubble_lines + _tail_lines(d) + [
        *_simai_lines(d),
        f"  utilisation         {fmt_pct(d.utilization)}",
        f"  forward / backward  {fmt_time(d.forward_ns)} / {fmt_time(d.backward_ns)} "
        f"busy, {fmt_time(d.forward_bubble_ns)} / {fmt_time(d.backward_bubble_ns)} idle "
        "(sum over stages)",
        f"  peak in flight      {d.peak_inflight_microbatches} microbatches",
        f"  p2p traffic         {fmt_bytes(d.p2p_bytes)}; DP collectives "
        f"{fmt_bytes(d.dp_collective_bytes)}",
        *_memory_lines(d),
        f"  layer ops           {d.layer_ops}",
    ]
    lines.append("")
    rows = []
    for s in d.ranks:
        layers = ",".join(f"{a}-{b}" for a, b in s.layers)
        rows.append([
            str(s.rank), layers, fmt_time(s.busy_ns), fmt_time(s.idle_ns),
            fmt_pct(s.bubble_ratio), fmt_pct(s.bubble_ratio_own),
            f"{s.warmup}/{s.steady}/{s.cooldown}",
            str(s.peak_inflight_microbatches), fmt_bytes(s.peak_memory_bytes),
            fmt_bytes(s.bytes_sent), fmt_bytes(s.bytes_received),
        ])
    lines.append(table(["stage", "layers", "busy", "idle", "bubble", "bubble(own)",
                        "warm/steady/cool", "peak mb", "peak mem", "sent", "received"], rows,
                       left=(1,)))
    warnings = d.warnings
    if warnings:
        lines.append("")
        lines.append(f"warnings ({len(warnings)}): numbers above rest on these assumptions")
        for w in warnings:
            fix = f" [set {w.option}]" if w.option else ""
            lines.append(f"  ! {w.message}{fix}")
    notes = d.notes
    if notes:
        lines.append("")
        lines += [f"  note: {n}" for n in notes]
    return "\n".join(lines)


def render_runtimes(verdicts) -> str:
    """Which runtimes run this configuration, and the rule each refusal breaks."""
    lines = ["", "runtimes (would they run it?)"]
    for name, v in verdicts.items():
        text = (f"yes, {v.how}" + (f" ({v.rule})" if v.rule else "")) if v.accepts \
            else f"no: {v.rule}"
        lines.append(f"  {name:<11}{text}")
    return "\n".join(lines)
