"""The pipeline bubble a simulation produced, measured the way SimAI's formula counts it.

SimAI adds one bubble to a representative rank's busy time. The simulated counterpart, per rank:
the pipeline phase of the first iteration (from its start to the end of the last compute action
on any rank) minus the rank's own compute-stream busy time in it. Iteration-level rows and DP
collectives after the pipeline phase are not bubble, so they are left out; point-to-point
transfer waits inside it are (SimAI counts them in a separate, by default zero, term).
"""

from __future__ import annotations

from operator import sub
from typing import Any

from ..engine.columns import ActionColumns
from ..engine.records import RunRecords
from ..schedules.schedule import Schedule
from .sums import added


def pipeline_bubble(rec: RunRecords, schedule: Schedule, iteration: int = 0,
                    busy: list[float] | None = None) -> dict[str, Any]:
    """``{"span_ns", "per_rank_ns", "mean_ns", "max_ns", "min_ns"}`` of one iteration of the
    run of ``schedule`` that recorded ``rec`` (a result's ``records`` and ``schedule``).
    ``busy``: each rank's compute-stream time in it, when the caller has summed it (the
    summary has, in the same order: the same numbers)."""
    start = rec.iteration_bounds[iteration][0]
    given = busy is not None
    if busy is None:
        busy = [0.0] * schedule.pp
    if isinstance(rec.actions, ActionColumns):    # the time columns, read in place
        end = None
        for r, acts in enumerate(schedule.ranks):
            lo = iteration * len(acts)
            ends = rec.actions.end[r][lo:lo + len(acts)]
            if not given:   # a loop's additions in its order, made in C
                busy[r] = added(map(sub, ends, rec.actions.start[r][lo:lo + len(acts)]),
                                busy[r])
            if len(ends):
                top = max(ends)
                end = top if end is None else max(end, top)
    else:
        acts = [a for a in rec.actions if a.iteration == iteration]
        end = max(a.end for a in acts)
        if not given:
            for a in acts:
                busy[a.rank] += a.end - a.start
    span = end - start
    per_rank = [span - b for b in busy]
    return {
        "span_ns": span,
        "per_rank_ns": per_rank,
        "mean_ns": sum(per_rank) / len(per_rank),
        "max_ns": max(per_rank),
        "min_ns": min(per_rank),
    }
