"""The exact critical-path evaluator: the SimPy engine's timeline without an event queue.

The planner screens thousands of configurations; for them the SimPy run is mostly event-queue
overhead. With fixed costs (slow ranks, seeded jitter and the runtime profile's overheads
included: each rank draws its factors in its own op order, as the engine does) and FIFO links,
a rank's timeline depends only on its own op list and on when the data it exchanges is
booked, so a sweep over the compiled op lists gives the same times:

- each rank keeps a cursor and a clock and runs its ops until it needs something a peer has
  not produced yet; the peer, when it gets there, hands over the time and puts the rank back on
  a worklist (ranks are not visited in time order: no event queue);
- asynchronous point-to-point: a link (one direction of a rank pair) is only ever booked by its
  source rank, in that rank's op order, so FIFO booking order cannot depend on how ranks
  interleave and ties at equal times cannot change a result;
- blocking / batched point-to-point and torch's rules (rendezvous; posts never block, waits
  do): a transfer is booked when both sides have posted, at ``b = max(send posted, receive
  posted)``; bookings on a link are applied in order of ``b``. Two positive-size bookings on
  one link at the same ``b`` must be ordered the same way however SimPy interleaves the ranks
  at that instant: every post made at ``b`` for the first is followed, on its rank (ranks post
  in op order), by one for the second. Otherwise, or if bookings arrive out of order, SimPy's
  queue order would decide and the SimPy engine runs instead (:class:`_Ambiguous`; it did not
  arise on any registered schedule or random case of the tests);
- every time is computed with the engine's float expressions (``now + (arrival - now)`` where
  SimPy schedules a timeout of ``arrival - now``): equal to the nanosecond, compared with ``==``;
- the iteration barrier (flush) waits for every rank and every DP collective and update, as
  the engine's does.

The records are the engine's: every rank's actions, collectives and transfers
in the same per-rank order; the lists hold the ranks one after another instead of interleaved
(nothing reads that order). Actions and asynchronous transfers are kept as time columns
(``columns.py``). Rendezvous transfers are listed per source rank by booking time; two booked
at the same instant on different links may be listed the other way round (their times are
equal to the engine's either way). A deadlock (no cursor can move) raises the
engine's DeadlockError with the same waits and time. Memory is accounted after the walk
(``memory_use``), as for the engine.
Where the evaluator does not apply, :func:`unsupported` says why and the caller runs the SimPy
engine. Asynchronous runs without layer records take the step-by-step walk of
``evaluator_async`` (same rules, about 3.5x faster at a million actions); this module's sweep
over op tuples takes every other mode.
"""

from __future__ import annotations


from ..errors import DeadlockError, Wait
from .columns import ActionColumns, TransferColumns
from .evaluator_async import covers, walk
from .eventlog import debug_enabled
from .network import LinkStats
from .program import BATCH, COMPUTE, IRECV, RECV, SEND, TSEND, WAIT, WAITSENDS, AsyncOps
from .costs import issue_dp, iteration_rows
from .records import LayerRecord, RunRecords, TransferRecord
from .variation import RankVariation

_INF = float("inf")
COVERED_P2P = ("async", "blocking", "batched", "torch-single", "torch-multi")


class _Ambiguous(Exception):
    """Two bookings of one link whose order only SimPy's queue order decides."""


def p2p_mode(runtime) -> str:
    """The point-to-point mode the runtime compiled for (its options', or its profile's)."""
    return getattr(runtime, "p2p", None) or runtime.options.p2p


def unsupported(runtime) -> str | None:
    """Why the evaluator cannot give the SimPy engine's timeline for ``runtime``, or None."""
    o = runtime.options
    if runtime.links.topology.sharing != "fifo":
        return f"{runtime.links.topology.sharing} link sharing"
    mode = p2p_mode(runtime)
    if mode not in COVERED_P2P:
        return f"--p2p {mode}"
    profile = getattr(runtime, "profile", None)
    if mode.startswith("torch") and getattr(profile, "exchange_ns", 0.0) > 0:
        return "runtime.exchange_ns (two-way exchanges pair transfers in time order)"
    if o.layer_by_layer:
        return "--layer-by-layer (the reference path)"
    if not runtime.schedule.flush and runtime.iterations > 1:
        return "several iterations of a schedule without a flush"
    if debug_enabled():
        return "the debug event log"
    return None


def evaluate(runtime):
    """The :class:`~simulator.engine.runtime.RunRecords` that ``runtime.run()`` would return,
    computed by a sweep over ``runtime.compiled``. Raises ValueError where :func:`unsupported`."""
    reason = unsupported(runtime)
    if reason is not None:
        raise ValueError(f"the evaluator does not cover {reason}")
    try:
        return _sweep(runtime)
    except _Ambiguous:
        return runtime.run()   # the engine's queue order


def run(runtime):
    """``(records, None)`` when the evaluator computed them; else ``(records, why)`` with the
    SimPy engine's records and why it ran them (a note for the user)."""
    reason = unsupported(runtime)
    if reason is not None:
        return runtime.run(), f"the evaluator does not cover {reason}"
    try:
        return _sweep(runtime), None
    except _Ambiguous:
        return runtime.run(), ("two bookings of one link at one instant whose order only the "
                               "event queue decides")


def _sweep(runtime):
    """The records: asynchronous runs walk the compact lists step by step
    (``evaluator_async``), every other mode the op tuples. A deadlock under a memory limit
    is the engine's to report (an overflow before it comes first)."""
    try:
        return _walk_or_sweep(runtime)
    except DeadlockError:
        if runtime.options.memory_limit_bytes is not None:
            return runtime.run()
        raise


def _walk_or_sweep(runtime):
    if covers(runtime, p2p_mode(runtime)):
        rec = walk(runtime, [_iter_rows(runtime, r) for r in range(runtime.schedule.pp)])
        if rec is not None:
            return runtime.account_memory(rec)
    return runtime.account_memory(_Sweep(runtime).run())


def _iter_rows(runtime, rank: int):
    rows = runtime.iter_rows
    return rows[rank] if isinstance(rows, (list, tuple)) else rows


class _Channel:
    """One blocking / batched transfer: who posted which side when, and once both have, its
    booking and the times its two events fire."""

    __slots__ = ("send", "recv_t", "recv_rank", "arrival", "sent", "waiters", "send_post",
                 "recv_post")

    def __init__(self) -> None:
        self.send = None        # (rank, posted at, dst, bytes, transfer, iteration)
        self.recv_t = None      # receive posted at
        self.recv_rank = -1
        self.send_post = None   # the order in which each side was posted (see _book)
        self.recv_post = None
        self.arrival = None     # fire time of the arrival event (receiver side)
        self.sent = None        # fire time of the sent event (sender side)
        self.waiters = []       # ranks blocked on this channel


class _Sweep:
    def __init__(self, runtime) -> None:
        self.rt = runtime
        self.P = runtime.schedule.pp
        self.rec = RunRecords()
        self.latest = 0.0             # latest event time seen (the deadlock report's clock)
        self.last_booking: dict = {}  # link -> (b, posts at b) of its last booking
        self.seq = 0                  # posts, in the order they are made
        self.booked: list = []        # (src, b, sequence, record) of rendezvous transfers

    def run(self):
        rt = self.rt
        P = self.P
        rec = self.rec
        iterations = rt.iterations
        options = rt.options
        trace_layers = rt.trace_layers
        profile = getattr(rt, "profile", None)
        prologue = getattr(profile, "step_prologue_ns", 0.0) or 0.0
        epilogue = getattr(profile, "step_epilogue_ns", 0.0) or 0.0
        rec.rank_finish = [[0.0] * P for _ in range(iterations)]
        bounds = rec.iteration_bounds
        # records as columns of times (see columns.py); batched transfers stay tuples
        actions = rec.actions = ActionColumns(rt.schedule, rt.labels)
        if p2p_mode(rt) == "async":
            progs = rt.compiled     # records read through the compact lists' sends
            records = (lambda r, times, it, nbytes: progs[r].send_records(
                r, times, it, nbytes)) if all(isinstance(p, AsyncOps) for p in progs) else None
            transfers = rec.transfers = TransferColumns(rt.schedule, rt.pp_comm,
                                                        records=records)
            tcols = [(transfers.issued[r].append, transfers.start[r].append,
                      transfers.end[r].append) for r in range(P)]
        else:
            tcols = [(None, None, None)] * P
        acols = [(actions.start[r].append, actions.end[r].append) for r in range(P)]
        coll_append = rec.collectives.append
        links = rec.links
        link_model = rt.links

        compiled = rt.compiled
        pp_comm = rt.pp_comm              # what every send carries (the columns rely on it)
        variations = [RankVariation.of(options, r) for r in range(P)]
        rows = [_iter_rows(rt, r) for r in range(P)]
        dp_free = [0.0] * P
        clock = self.clock = [0.0] * P
        cursors: list = [None] * P     # each rank's iterator over its op list (None: restart)
        its = [0] * P
        blocked: list = [None] * P     # the receive a rank waits on (since: its clock), or a Wait
        pending: list = [None] * P     # a rank's unfinished wait: ("batch", state) or
        #                                ("waits", [(channel, op), ...]) (torch)
        torch = p2p_mode(rt).startswith("torch")
        tsends: list[dict] = [{} for _ in range(P)]   # torch: posted sends not waited for
        async_mode = p2p_mode(rt) == "async"
        # (data, dst stage, mb) -> arrival time; the iteration is left out of the key (a
        # flush separates iterations) and the box emptied at every barrier
        mailbox: dict = {}
        waiting: dict = {}             # same key -> the rank blocked on it
        out_links: list[dict] = [{} for _ in range(P)]   # per source rank: dst -> LinkStats
        free_sends: list[dict] = [{} for _ in range(P)]  # zero-byte sends per (src, dst)
        digest: dict = {}              # id(StepCost) -> the fields the loop reads
        self.channels: dict = {}       # blocking / batched / torch rendezvous
        channels = self.channels
        ready = list(range(P - 1, -1, -1))
        self.ready = ready
        finished = 0                   # ranks at the barrier of the current iteration
        cand = -_INF                   # latest iteration-end candidate of the iteration
        done_ranks = 0

        while ready:
            r = ready.pop()
            now = clock[r]
            it = its[r]
            var = variations[r]
            a_start, a_end = acols[r]
            zero_sends = free_sends[r]
            t_issued, t_start, t_end = tcols[r]
            ops = cursors[r]
            if ops is None:
                prog = compiled[r]     # compact lists: walked without Transfer objects
                ops = cursors[r] = (prog.walk(False) if isinstance(prog, AsyncOps)
                                    else iter(prog))
                if prologue:
                    now = now + prologue
            state = pending[r]
            if state is not None:      # resume inside a wait
                if state[0] == "batch":
                    t_done = self._wait_batch(r, now, state[1], blocked)
                else:
                    t_done = self._wait_all(r, now, state[1], blocked)
                if t_done is None:
                    continue
                now = t_done
                pending[r] = None
            for op in ops:
                code = op[0]
                if code == COMPUTE:
                    cost = op[1]
                    dg = digest.get(id(cost))
                    if dg is None:
                        dg = digest[id(cost)] = (
                            cost.pre, cost.total, cost.dp,
                            len(cost.shares) == 1 and not trace_layers, cost.shares[0])
                    pre, duration, dp, single, sh = dg
                    start = now + pre      # the launch overhead (x + 0.0 == x)
                    if var is not None:    # overhead + duration, as the engine adds them
                        duration = var.duration(cost) + pre
                    if duration > 0:
                        now = now + duration
                    span = now - start
                    if single:
                        a_start(start + sh[0] * span)
                        a_end(start + sh[1] * span)
                    else:
                        for a, sh in zip(op[2], cost.shares):
                            s0 = start + sh[0] * span
                            a_start(s0)
                            a_end(start + sh[1] * span)
                            if trace_layers:
                                self._layers(r, a, it, s0, (sh[1] - sh[0]) * span, sh[3])
                    if dp:
                        dp_free[r], done = issue_dp(
                            r, it, dp_free[r], start, dp,
                            span / cost.duration if cost.duration else 1.0, coll_append)
                        if done > cand:
                            cand = done
                elif code == RECV:
                    key = op[1]
                    got = mailbox.pop(key, None)
                    if got is None:        # not sent yet: the sender wakes this rank
                        waiting[key] = r
                        blocked[r] = op    # since: its clock
                        break
                    if got > now:
                        now = now + (got - now)
                elif code == SEND:
                    dst, nbytes = op[2], op[3]
                    if not nbytes:         # no cost at all: counted, applied at the end
                        e = now
                        zero_sends[dst] = zero_sends.get(dst, 0) + 1
                        t_issued(now)      # starts and arrives when issued
                        if nbytes != pp_comm:
                            raise ValueError("the evaluator expects every send to carry "
                                             "pp_comm bytes")
                    else:
                        link = out_links[r].get(dst)
                        if link is None:
                            link = links[(r, dst)] = out_links[r][dst] = LinkStats(
                                r, dst, link_model.p2p(r, dst))
                        s, e = link.book(nbytes, now)
                        if nbytes != pp_comm:
                            raise ValueError("the evaluator expects every send to carry "
                                             "pp_comm bytes")
                        t_issued(now)
                        t_start(s)
                        t_end(e)
                    key = op[1]
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
                elif code == BATCH:
                    state = self._post(r, it, now, op)
                    t_done = self._wait_batch(r, now, state, blocked)
                    if t_done is None:
                        pending[r] = ("batch", state)
                        now = clock[r]     # as far as its waits got
                        break
                    now = t_done
                # torch's steps (see rendezvous.py): posts never block, waits do
                elif code == IRECV:
                    key = (it,) + op[1]
                    ch = channels.get(key)
                    if ch is None:
                        ch = channels[key] = _Channel()
                    ch.recv_t = now
                    ch.recv_rank = r
                    ch.recv_post = self._post_id()
                    if ch.send is not None:
                        self._book(max(ch.send[1], now), ch, True)
                elif code == TSEND:
                    key = (it,) + op[1]
                    ch = channels.get(key)
                    if ch is None:
                        ch = channels[key] = _Channel()
                    ch.send = (r, now, op[2], op[3], op[4], it)
                    ch.send_post = self._post_id()
                    tsends[r][key] = (ch, op)
                    if ch.recv_t is not None:
                        self._book(max(now, ch.recv_t), ch, True)
                elif code == WAIT or code == WAITSENDS:
                    if code == WAIT:
                        items = [(channels[(it,) + op[1]], op)]
                    else:
                        items = [tsends[r].pop((it,) + k) for k in op[1]]
                    t_done = self._wait_all(r, now, items, blocked)
                    if t_done is None:
                        pending[r] = ("waits", items)
                        now = clock[r]
                        break
                    now = t_done
                else:
                    raise ValueError(f"the evaluator does not cover op code {code}")
            else:
                # end of the iteration: torch waits for its sends; epilogue, the
                # once-per-iteration rows, the barrier
                if torch and tsends[r]:
                    items = list(tsends[r].values())
                    tsends[r].clear()
                    t_done = self._wait_all(r, now, items, blocked)
                    if t_done is None:
                        pending[r] = ("waits", items)
                        continue
                    now = t_done
                if epilogue:
                    now = now + epilogue
                now, dp_free[r], done = iteration_rows(r, it, now, rows[r], dp_free[r],
                                                       coll_append)
                if done > cand:
                    cand = done
                rec.rank_finish[it][r] = now
                if now > cand:
                    cand = now
                finished += 1
                blocked[r] = Wait(r, "the iteration barrier", None, now)
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
                        cursors[q] = None
                        its[q] = nxt
                    mailbox.clear()   # sends nobody received (an unchecked schedule)
                    channels.clear()
                    if nxt < iterations:
                        ready.extend(range(P - 1, -1, -1))
                    else:
                        done_ranks = P
                    continue
            clock[r] = now
        for r in range(P):
            for dst, n in sorted(free_sends[r].items()):
                if n:
                    link = links.get((r, dst))
                    if link is None:
                        link = links[(r, dst)] = LinkStats(r, dst, link_model.p2p(r, dst))
                    link.transfers += n
        if done_ranks < P:
            self._deadlock(blocked, clock)
        if not async_mode:
            # transfers per source rank in booking order, as the engine appends them
            rec.transfers = [x[3] for x in sorted(self.booked)]
        rec.layer_ops = rt.layer_ops_per_iteration * iterations
        return rec

    # -- blocking / batched point-to-point ---------------------------------------------------
    def _post(self, rank: int, it: int, now: float, batch: tuple) -> list:
        """Post a batch's sends and receives at ``now``; book every transfer both of whose
        sides are now posted (in order of their booking times); return its wait state."""
        ops = batch[1]
        channels = self.channels
        waits = []
        complete = []
        for pos, op in enumerate(ops):
            key = (it,) + op[1]
            ch = channels.get(key)
            if ch is None:
                ch = channels[key] = _Channel()
            if op[0] == RECV:
                ch.recv_t = now
                ch.recv_rank = rank
                ch.recv_post = self._post_id()
                if ch.send is not None:
                    complete.append((max(ch.send[1], now), pos, ch))
                waits.append((op, ch, True))
            else:
                ch.send = (rank, now, op[2], op[3], op[4], it)
                ch.send_post = self._post_id()
                if ch.recv_t is not None:
                    complete.append((max(now, ch.recv_t), pos, ch))
                waits.append((op, ch, False))
        complete.sort(key=lambda c: (c[0], c[1]))
        for b, _, ch in complete:
            self._book(b, ch)
        return [batch, 0, waits, it]

    def _wait_batch(self, rank: int, now: float, state: list, blocked: list) -> float | None:
        """Wait for a posted batch's events in order, as the engine does: the time it is done,
        or None (with what it waits for recorded) while a peer has not posted yet."""
        batch, k, waits, it = state
        while k < len(waits):
            wop, ch, is_recv = waits[k]
            fire = ch.arrival if is_recv else ch.sent
            if fire is None:
                what = str(wop[4])
                ops = batch[1]
                if len(ops) > 1:
                    what += " in batch [" + ", ".join(str(o[4]) for o in ops) + "]"
                blocked[rank] = Wait(rank, what, wop[2], now)
                ch.waiters.append(rank)
                state[1] = k
                self.clock[rank] = now
                return None
            if fire > now:
                now = fire
            k += 1
        blocked[rank] = None
        for o in batch[1]:
            if o[0] == RECV:
                self.channels.pop((it,) + o[1], None)
        return now

    def _post_id(self) -> int:
        self.seq += 1
        return self.seq

    def _wait_all(self, rank: int, now: float, items: list, blocked: list) -> float | None:
        """torch: wait for these transfers' arrivals in order (a receive's, or the sends the
        rank waits for); the time it is done, or None while one is not booked yet (``items``
        keeps what is left)."""
        while items:
            ch, op = items[0]
            fire = ch.arrival
            if fire is None:
                blocked[rank] = op      # since: its clock
                ch.waiters.append(rank)
                self.clock[rank] = now
                return None
            if fire > now:
                now = fire
            del items[0]
        blocked[rank] = None
        return now

    def _book(self, b: float, ch: _Channel, torch: bool = False) -> None:
        """Book a transfer both sides of which are posted, at ``b`` (the later post), on its
        FIFO link. Bookings of one link must come in order of ``b``; two positive-size ones
        at the same ``b`` in the order the engine books them whatever order it runs the ranks
        in at that instant (below). Else the engine's queue order would decide:
        :class:`_Ambiguous` hands the run to the engine. torch records a transfer as issued
        when its send was posted; blocking / batched when it started."""
        src, ts, dst, nbytes, t, sit = ch.send
        tr = ch.recv_t
        links = self.rec.links
        link = links.get((src, dst))
        if link is None:
            link = links[(src, dst)] = LinkStats(src, dst, self.rt.links.p2p(src, dst))
        # the posts made at the booking instant: the engine books at the last of them
        last = []
        if ts == b:
            last.append((src, ch.send_post))
        if tr == b:
            last.append((ch.recv_rank, ch.recv_post))
        prev = self.last_booking.get((src, dst))
        if nbytes > 0 and prev is not None:
            pb, plast = prev
            # at one instant, this booking comes after the previous one in the engine however
            # the ranks interleave if each post of the previous one is followed, on its rank,
            # by a post of this one (posts are numbered in each rank's op order)
            if b < pb or (b == pb and not all(any(q == p and n > m for q, n in last)
                                              for p, m in plast)):
                raise _Ambiguous
        if nbytes > 0:
            self.last_booking[(src, dst)] = (b, last)
        s, e = link.book(nbytes, b)
        # listed per source rank by booking instant, then by the post that made the booking
        # (a rank's posts are in its op order; two ranks' at one instant in either order)
        self.booked.append((src, b, max(n for _, n in last), TransferRecord(
            src, dst, t.src_stage, t.dst_stage, t.data, t.microbatch, sit, nbytes,
            ts if torch else b, s, e)))
        latency = link.config.latency_ns if nbytes > 0 else 0.0
        ch.arrival = b + (e - b)
        ch.sent = b + (e - latency - b)
        if ch.arrival > self.latest:
            self.latest = ch.arrival
        if ch.sent > self.latest:
            self.latest = ch.sent
        if ch.waiters:
            self.ready.extend(ch.waiters)
            ch.waiters = []

    # -- reports ------------------------------------------------------------------------------
    def _deadlock(self, blocked, clock) -> None:
        """The engine's DeadlockError: every rank still running, what it waits for and since
        when; the time is the engine's clock when its queue ran dry (the latest event)."""
        waits = []
        for r in range(self.P):
            b = blocked[r]
            if b is None:
                continue
            if isinstance(b, Wait):
                waits.append(b)
            else:              # a receive, waited on since the rank's clock stopped
                prog = self.rt.compiled[r]
                t = prog.transfer_of(b) if isinstance(prog, AsyncOps) else b[4]
                waits.append(Wait(r, str(t), b[2], clock[r]))
        raise DeadlockError(waits, max(max(clock), self.latest))

    def _layers(self, rank: int, a, it: int, start: float, span: float, cost) -> None:
        scale = span / cost.duration if cost.duration else 0.0
        append = self.rec.layers.append
        for seg in cost.segments:
            s = start + seg.offset * scale
            append(LayerRecord(rank, a.stage, a.microbatch, it, seg.layer, seg.state, s,
                               s + seg.duration * scale))
