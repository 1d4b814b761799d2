"""The exact critical-path evaluator: the SimPy engine's timeline without an event queue.

The planner screens thousands of configurations; for them the SimPy run is mostly event-queue
overhead. With fixed costs (slow ranks and seeded jitter included: each rank draws its factors
in its own op order, as the engine does), asynchronous point-to-point and FIFO links, a rank's
timeline depends only on its own op list and the arrival times of what it receives, so a sweep
over the compiled op lists gives the same times:

- each rank keeps a cursor and a clock and runs its ops until a receive whose data has not been
  sent yet; the sender, when it gets there, books its link and hands the receiver the arrival
  time (a worklist of ranks, not a time-ordered queue);
- a link (one direction of a rank pair) is only ever booked by its source rank, in that rank's
  op order: FIFO booking order cannot depend on how the ranks interleave, so ties at equal
  times cannot change a result;
- every time is computed with the engine's float expressions (``now + (arrival - now)`` where
  SimPy schedules a timeout of ``arrival - now``): equal to the nanosecond, compared with ``==``;
- the iteration barrier (flush) waits for every rank and every DP collective and update, as
  the engine's does.

The records are the engine's: every rank's actions, transfers, collectives and memory samples
in the same per-rank order (only the interleaving of different ranks in the lists differs, and
nothing reads it). A deadlock (no cursor can move) raises the engine's DeadlockError with the
same waits and time. Out of memory is rare and the engine's message names the first overflow in
time order: there the SimPy engine is run to raise it. Where the evaluator does not apply,
:func:`unsupported` says why and the caller runs the SimPy engine.
"""

from __future__ import annotations

import logging

from ..errors import DeadlockError, Wait
from .eventlog import log
from .network import LinkStats
from .program import COMPUTE, RECV, SEND
from .records import ActionRecord, CollectiveRecord, LayerRecord, TransferRecord
from .variation import RankVariation

_INF = float("inf")


class _Overflow(Exception):
    """A rank went over the memory limit: the SimPy engine reports it (see module docstring)."""


def unsupported(runtime) -> str | None:
    """Why the evaluator cannot give the SimPy engine's timeline for ``runtime``, or None."""
    o = runtime.options
    if runtime.links.topology.sharing != "fifo":
        return f"{runtime.links.topology.sharing} link sharing"
    if o.p2p != "async":
        return f"--p2p {o.p2p}"
    if o.layer_by_layer:
        return "--layer-by-layer (the reference path)"
    if not runtime.schedule.flush and runtime.iterations > 1:
        return "several iterations of a schedule without a flush"
    if log.isEnabledFor(logging.DEBUG):
        return "the debug event log"
    return None


def evaluate(runtime):
    """The :class:`~simulator.engine.runtime.RunRecords` that ``runtime.run()`` would return,
    computed by a sweep over ``runtime.compiled``. Raises ValueError where :func:`unsupported`."""
    reason = unsupported(runtime)
    if reason is not None:
        raise ValueError(f"the evaluator does not cover {reason}")
    try:
        return _Sweep(runtime).run()
    except _Overflow:
        return runtime.run()   # raises the engine's OutOfMemoryError


def _iter_rows(runtime, rank: int):
    rows = runtime.iter_rows
    return rows[rank] if isinstance(rows, (list, tuple)) else rows


class _Sweep:
    def __init__(self, runtime) -> None:
        from .runtime import RunRecords   # the engine's record type (imported late: no cycle)

        self.rt = runtime
        self.P = runtime.schedule.pp
        self.rec = RunRecords()

    def run(self):
        rt = self.rt
        P = self.P
        rec = self.rec
        iterations = rt.iterations
        options = rt.options
        limit = options.memory_limit_bytes
        trace_layers = rt.trace_layers
        mem = list(rt.memory.static_bytes)
        rec.static_memory = list(mem)
        peak = rec.peak_memory = list(mem)
        for r in range(P):
            rec.memory.append((r, 0.0, mem[r]))
            if limit is not None and mem[r] > limit:
                raise _Overflow
        rec.rank_finish = [[0.0] * P for _ in range(iterations)]
        bounds = rec.iteration_bounds
        actions = rec.actions
        act_append = actions.append
        tr_append = rec.transfers.append
        coll_append = rec.collectives.append
        mem_append = rec.memory.append
        links = rec.links
        link_model = rt.links

        compiled = rt.compiled
        variations = [RankVariation.of(options, r) for r in range(P)]
        rows = [_iter_rows(rt, r) for r in range(P)]
        dp_free = [0.0] * P
        clock = [0.0] * P
        pcs = [0] * P
        its = [0] * P
        blocked: list = [None] * P      # (op, since) of a waiting receive, or a barrier Wait
        mailbox: dict = {}              # (it, data, dst stage, mb) -> arrival time
        waiting: dict = {}              # same key -> the rank blocked on it
        ready = list(range(P - 1, -1, -1))
        finished = 0                    # ranks at the barrier of the current iteration
        cand = -_INF                    # latest iteration-end candidate of the iteration
        done_ranks = 0
        CollRec = CollectiveRecord
        ActRec = ActionRecord
        TrRec = TransferRecord

        while ready:
            r = ready.pop()
            prog = compiled[r]
            n = len(prog)
            i = pcs[r]
            now = clock[r]
            it = its[r]
            var = variations[r]
            m = mem[r]
            while True:
                if i == n:
                    # end of the iteration: the once-per-iteration rows, then the barrier
                    ir = rows[r]
                    compute, dps = ir.compute_ns, ir.dp
                    if compute > 0 or dps:
                        start = now
                        if compute > 0:
                            now = now + compute
                        free = dp_free[r]
                        done = 0.0
                        for d in dps:
                            rdy = start + d.ready_offset * 1.0
                            s = free if free > rdy else rdy
                            free = s + d.duration
                            coll_append(CollRec(r, -1, d.layer, it, d.nbytes, rdy, s, free))
                            x = free + d.update_ns
                            if x > done:
                                done = x
                        dp_free[r] = free
                        if done > cand:
                            cand = done
                    rec.rank_finish[it][r] = now
                    if now > cand:
                        cand = now
                    finished += 1
                    blocked[r] = Wait(r, "the iteration barrier", None, now)
                    clock[r] = now
                    mem[r] = m
                    if finished == P:
                        b0 = bounds[-1][1] if bounds else 0.0
                        bounds.append((b0, cand))
                        last = max(rec.rank_finish[it])
                        t_barrier = last + (cand - last)
                        finished = 0
                        cand = -_INF
                        nxt = it + 1
                        for q in range(P):
                            blocked[q] = None
                            clock[q] = t_barrier
                            pcs[q] = 0
                            its[q] = nxt
                        if nxt < iterations:
                            ready.extend(range(P - 1, -1, -1))
                        else:
                            done_ranks = P
                    break
                op = prog[i]
                code = op[0]
                if code == COMPUTE:
                    cost = op[1]
                    start = now
                    if cost.alloc:
                        m += cost.alloc
                        if trace_layers:
                            mem_append((r, start, m))
                        if m > peak[r]:
                            peak[r] = m
                        if limit is not None and m > limit:
                            raise _Overflow
                    duration = cost.duration if var is None else var.duration(cost)
                    if duration > 0:
                        now = now + duration
                    span = now - start
                    for a, phase, sh in zip(op[2], cost.phases, cost.shares):
                        s0 = start + sh[0] * span
                        act_append(ActRec(r, a.stage, a.kind, a.microbatch, it, s0,
                                          start + sh[1] * span, phase, sh[2], a.pair))
                        if trace_layers:
                            self._layers(r, a, it, s0, (sh[1] - sh[0]) * span, sh[3])
                    if cost.free:
                        m -= cost.free
                        if trace_layers:
                            mem_append((r, now, m))
                    if cost.dp:
                        stretch = span / cost.duration if cost.duration else 1.0
                        free = dp_free[r]
                        done = 0.0
                        for chunk, offset, d in cost.dp:
                            rdy = start + offset * stretch
                            s = free if free > rdy else rdy
                            free = s + d.duration
                            coll_append(CollRec(r, chunk, d.layer, it, d.nbytes, rdy, s, free))
                            x = free + d.update_ns
                            if x > done:
                                done = x
                        dp_free[r] = free
                        if done > cand:
                            cand = done
                elif code == RECV:
                    key = (it,) + op[1]
                    got = mailbox.pop(key, None)
                    if got is None:        # not sent yet: the sender wakes this rank
                        waiting[key] = r
                        blocked[r] = (op, now)
                        pcs[r] = i + 1
                        clock[r] = now
                        mem[r] = m
                        break
                    if got > now:
                        now = now + (got - now)
                elif code == SEND:
                    dst, nbytes, t = op[2], op[3], op[4]
                    link = links.get((r, dst))
                    if link is None:
                        link = links[(r, dst)] = LinkStats(r, dst, link_model.p2p(r, dst))
                    link.bytes += nbytes
                    link.transfers += 1
                    if nbytes <= 0:
                        s = e = now
                    else:
                        cfg = link.config
                        serial = nbytes * 8.0 / cfg.bandwidth_gbps
                        s = link.free_at if link.free_at > now else now
                        link.free_at = s + serial
                        link.busy_ns += serial
                        e = s + serial + cfg.latency_ns
                    tr_append(TrRec(r, dst, t.src_stage, t.dst_stage, t.data, t.microbatch, it,
                                    nbytes, now, s, e))
                    key = (it,) + op[1]
                    w = waiting.pop(key, None)
                    if w is None:
                        mailbox[key] = e
                    else:
                        # the receiver resumes when the data lands. The engine computes that
                        # time as the later party sees it: a receiver already waiting (in
                        # simulated time) is woken `e - now` after the send; one that comes
                        # later finds the arrival time and sleeps `e - tr`
                        tr = clock[w]
                        if tr < now:
                            clock[w] = now + (e - now)
                        elif e > tr:
                            clock[w] = tr + (e - tr)
                        blocked[w] = None
                        ready.append(w)
                else:
                    raise ValueError("the evaluator covers asynchronous point-to-point only")
                i += 1
        if done_ranks < P:
            self._deadlock(blocked, clock, its)
        rec.layer_ops = rt.layer_ops_per_iteration * iterations
        return rec

    def _deadlock(self, blocked, clock, its) -> None:
        """The engine's DeadlockError: every rank still running, what it waits for and since
        when; the time is the engine's clock when its queue ran dry (the latest rank clock)."""
        waits = []
        for r in range(self.P):
            b = blocked[r]
            if b is None:
                continue
            if isinstance(b, Wait):
                waits.append(b)
            else:
                op, since = b
                waits.append(Wait(r, str(op[4]), op[2], since))
        raise DeadlockError(waits, max(clock))

    def _layers(self, rank: int, a, it: int, start: float, span: float, cost) -> None:
        scale = span / cost.duration if cost.duration else 0.0
        append = self.rec.layers.append
        for seg in cost.segments:
            s = start + seg.offset * scale
            append(LayerRecord(rank, a.stage, a.microbatch, it, seg.layer, seg.state, s,
                               s + seg.duration * scale))
