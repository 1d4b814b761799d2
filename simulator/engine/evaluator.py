"""The exact critical-path evaluator: the SimPy engine's timeline without an event queue.

The planner screens thousands of configurations; for them the SimPy run is mostly event-queue
overhead. With fixed costs (slow ranks, seeded jitter and the runtime profile's overheads
included: each rank draws its factors in its own op order, as the engine does), asynchronous
point-to-point and FIFO links, a rank's timeline depends only on its own op list and on when
the data it receives was sent: a link is only ever booked by its source rank, in that rank's op
order, so FIFO booking order cannot depend on how ranks interleave and ties at equal times
cannot change a result. The walk over each rank's compact op list (``evaluator_async``) then
gives the same times, computed with the engine's float expressions (equal to the nanosecond,
compared with ``==``), the same records per rank in the same order, and the engine's
DeadlockError with the same waits and time. Memory is accounted after the walk
(``memory_use``), as for the engine.

The SimPy engine is the reference for every point-to-point mode; this walk is the one fast
path. Where it does not apply (blocking, batched and torch's rendezvous rules, fair link
sharing, the layer-by-layer reference path, the debug log, several iterations without a flush,
an unchecked list's microbatch beyond the count), :func:`run` runs the SimPy engine and says why.
A generic sweep over op tuples covered the rendezvous modes until issue 23, at 1.0-3.0x the
SimPy engine's speed on those runs (benchmarks/results/2026-11-26-core-*.json): not worth a
second timing model.
"""

from __future__ import annotations

from ..errors import DeadlockError
from .eventlog import debug_enabled
from .evaluator_async import walk
from .records import RunRecords
from .runtime import Runtime


def unsupported(runtime: Runtime) -> str | None:
    """Why the evaluator cannot give the SimPy engine's timeline for ``runtime``, or None."""
    program = runtime.program
    if program.links.topology.sharing != "fifo":
        return f"{program.links.topology.sharing} link sharing"
    if program.p2p != "async":      # the mode compiled (the option's, or the profile's)
        return f"--p2p {program.p2p}"
    if runtime.options.layer_by_layer:
        return "--layer-by-layer (the reference path)"
    if not program.schedule.flush and runtime.iterations > 1:
        return "several iterations of a schedule without a flush"
    if debug_enabled():
        return "the debug event log"
    return None


BEYOND_THE_COUNT = "a microbatch beyond the schedule's count (an unchecked list)"


def evaluate(runtime: Runtime) -> RunRecords:
    """The :class:`~simulator.engine.runtime.RunRecords` that ``runtime.run()`` would return.
    Raises ValueError where :func:`unsupported`; an unchecked list the walk cannot hold runs
    on the engine."""
    reason = unsupported(runtime)
    if reason is not None:
        raise ValueError(f"the evaluator does not cover {reason}")
    rec = _walk(runtime)
    return runtime.run() if rec is None else rec


def run(runtime: Runtime) -> tuple[RunRecords, str | None]:
    """``(records, None)`` when the evaluator computed them; else ``(records, why)`` with the
    SimPy engine's records and why it ran them (a note for the user)."""
    reason = unsupported(runtime)
    if reason is None:
        rec = _walk(runtime)
        if rec is not None:
            return rec, None
        reason = BEYOND_THE_COUNT
    return runtime.run(), f"the evaluator does not cover {reason}"


def _walk(runtime: Runtime) -> RunRecords | None:
    """The walk's records with memory accounted, or None (an unchecked list's microbatch
    beyond the count). A deadlock under a memory limit is the engine's to report (an overflow
    before it comes first)."""
    try:
        rec = walk(runtime.program, runtime.options, runtime.iterations)
    except DeadlockError:
        if runtime.options.memory_limit_bytes is not None:
            return runtime.run()        # memory accounted there
        raise
    return None if rec is None else runtime.account_memory(rec)
