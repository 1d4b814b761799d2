"""The evaluator's walk for asynchronous point-to-point on FIFO links, step by step: the one
exact fast path (the SimPy engine is the reference for every mode; its lookahead runs this walk
on SimPy's queue).

A rank's compact list (:class:`~.program.RankOps`) is walked by step index. Per step-cost
index a plan tuple is built once: its costs, and its receive and send as slots (``2 x destination stage +
(data is a gradient)``) of the mailbox row of the action's microbatch. A step then makes no
tuple and reads no attribute beyond its action's microbatch; a plain step (one action, no
overhead, no DP collective, no variation: :func:`_plan`) takes a short path of its own. The
mailbox has a row (a list) per microbatch and a slot per tensor of an iteration: a slot holds
nothing, the arrival time of data sent and not yet received, or ``-1 - rank`` of the rank
blocked on it. Each rank is a generator that suspends only where it waits (a receive not sent
yet, the iteration barrier): its clock and memory stay in its frame. Times are gathered in
lists and packed into the rank's columns every ``_CHUNK`` steps.

The rules are the evaluator's (``evaluator``'s module docstring), with the same float
expressions: a receive that finds its data at ``got`` resumes at ``now + (got - now)``; a
receiver woken by its sender at ``e`` resumes at ``now + (e - now)`` if it was waiting since
before the send (``tr < now``) and else at ``tr + (e - tr)`` when ``e > tr``. The DP
collectives, the once-per-iteration rows and the barrier are the iteration's tail (``tail``),
which the SimPy engine's step-by-step walk calls too. Zero-byte sends are counted per link at
the end; a link is booked only by its source rank, in that rank's op order
(``LinkStats.book``). Slow ranks and jitter draw per rank in its own op order. Layer records (``trace_layers``) take the general step,
which derives them from each action's cost as the engine does. Microbatch numbers beyond the
schedule's count (an unchecked list) have no mailbox row: the SimPy engine takes them.
"""

from __future__ import annotations

import sys
from collections import Counter
from struct import pack as _pack

from ..errors import DeadlockError, Wait
from ..schedules.comm_pass import ACTIVATION, GRADIENT
from ..schedules.rank_actions import microbatches_of
from .columns import ActionColumns, TransferColumns
from .network import LinkStats
from .options import EngineOptions
from .program import Program, RankOps
from .records import LayerRecord, RunRecords
from .simpy_fast import fire_at
from .variation import RankVariation


def covers(program: Program, mode: str) -> bool:
    """The walk applies: asynchronous point-to-point (FIFO links checked by the caller) over
    compact op lists."""
    return mode == "async" and all(isinstance(p, RankOps) for p in program.compiled)


def walk(program: Program, options: EngineOptions, iterations: int, env=None):
    """The RunRecords of ``iterations`` iterations of ``program`` under ``options``, or None
    where a microbatch number is beyond the schedule's count (an unchecked list: the SimPy
    engine takes it). Raises the engine's DeadlockError.

    Without ``env`` the ranks that can go on are resumed from a worklist (the evaluator: no
    event queue). With a SimPy environment each rank's walk runs inside a SimPy process and
    a rank put back on the list is woken by an event at its clock, so the ranks resume in
    simulated-time order (the SimPy engine's lookahead walk: see ``runtime``)."""
    try:
        return _Walk(program, options, iterations).run(env)
    except IndexError:      # a microbatch past the mailbox's last row
        return None


class _Wakeups:
    """The walk's ready list as SimPy events: rank ``r`` put back on it is woken at its clock
    by the event its process waits on (made before the process lets the walk run, so a rank
    that puts itself back, the last one in at a barrier, finds it too)."""

    __slots__ = ("env", "clock", "events")

    def __init__(self, env, clock: list[float], P: int) -> None:
        self.env = env
        self.clock = clock
        self.events: list = [None] * P

    def append(self, r: int) -> None:
        env = self.env
        t = self.clock[r] - env.now
        fire_at(env, self.events[r], t if t > 0.0 else 0.0)

    def extend(self, ranks) -> None:
        for r in ranks:
            self.append(r)


def _process(env, walk, r: int, events: list):
    """Rank ``r``'s SimPy process: lets its walk run until it waits, then waits for the
    event that puts it back."""
    step = walk.__next__
    new = env.event
    while True:
        ev = events[r] = new()
        step()
        yield ev


# steps between two moves of a rank's times into its columns: few enough that the floats
# the lists hold stay in cache (32 ranks x 3 lists x 256 floats), a quarter faster than 4096
_CHUNK = 256


def _flush(columns: tuple, lists: tuple) -> None:
    """Move the times gathered in ``lists`` to the end of ``columns`` (``array('d')``s), as
    one block of packed doubles each."""
    for col, buf in zip(columns, lists):
        if buf:
            col.frombytes(_pack(f"{len(buf)}d", *buf))
            buf.clear()


def _slot(dst_stage: int, data: str) -> int:
    """A tensor's slot in its microbatch's mailbox row: 2 x destination stage + (data is a
    gradient)."""
    return 2 * dst_stage + (data != ACTIVATION)


def _tensor_of(slot: int) -> tuple[int, str]:
    """(destination stage, kind of the action that receives it) of a mailbox slot: the
    inverse of :func:`_slot`."""
    return slot // 2, (GRADIENT if slot % 2 else ACTIVATION)


def _plan(prog: RankOps, plain: bool) -> list[tuple]:
    """Per step-cost index: (total, receive slot, send slot, send peer, rest). ``rest`` is
    None for a fast step: one action over the whole step (shares 0 and 1) that takes time, no
    launch overhead, no DP collective, on a rank without variation (``plain``): the step
    needs nothing else; a slot is -1 when there is no receive / send. Else ``rest`` = (number
    of actions, cost, receives, sends), a receive being (position in the step, slot) and a
    send (position, slot, peer). A slot is 2 x destination stage + (data is a gradient)."""
    out = []
    for (cost, n, recvs, sends), acts in zip(prog.plan(), prog.examples):
        rs = tuple((k, _slot(acts[k].stage, data)) for k, data, other, peer in recvs)
        ss = tuple((k, _slot(other, data), peer) for k, data, other, peer in sends)
        fast = (plain and n == 1 and not cost.dp and not cost.pre and cost.total > 0
                and cost.shares[0][0] == 0.0 and cost.shares[0][1] == 1.0)
        out.append((cost.total, rs[0][1] if rs else -1, ss[0][1] if ss else -1,
                    ss[0][2] if ss else -1, None if fast else (n, cost, rs, ss)))
    return out


class _Walk:
    """One evaluation (see :func:`walk`)."""

    def __init__(self, program: Program, options: EngineOptions, iterations: int) -> None:
        self.program = program
        self.options = options
        self.iterations = iterations
        self.P = program.schedule.pp
        self.rec = RunRecords()

    def run(self, env=None):
        program = self.program
        P = self.P
        rec = self.rec
        rec.rank_finish = [[0.0] * P for _ in range(self.iterations)]
        self.tail = program.tail.start(rec)    # DP collectives, rows after the last action, barrier
        rec.actions = ActionColumns(program.schedule, program.labels)
        progs = program.compiled
        rec.transfers = TransferColumns(
            program.schedule, program.pp_comm,
            records=lambda r, times, it, nbytes: progs[r].send_records(r, times, it, nbytes))
        self.clock = [0.0] * P
        self.blocked: list = [None] * P   # a rank's Wait at the barrier
        # a row per microbatch, a slot per (data, destination stage): module docstring
        # one per iteration: without a barrier (post-validation) a rank may send into the
        # next iteration while its peer is still in this one
        self.boxes: dict[int, list[list]] = {}
        self.alone = self.tail.alone
        self.gone = 0                      # ranks past the last iteration (post-validation)
        self.ready = list(range(P - 1, -1, -1))
        self.done = False
        # each rank's walk; none returns (the last barrier leaves them suspended)
        walks = [self._rank(r) for r in range(P)]
        if env is None:
            ready = self.ready
            pop = ready.pop
            while ready:
                next(walks[pop()])
        else:
            wake = self.ready = _Wakeups(env, self.clock, P)
            for r in range(P):
                env.process(_process(env, walks[r], r, wake.events))
            env.run()
        if not self.done:
            self._deadlock()
        self._count_free_sends()
        rec.layer_ops = program.layer_ops_per_iteration * self.iterations
        return rec

    def _rank(self, r: int):
        """Rank ``r``'s walk: runs until it waits, suspends, resumes where it stopped.

        Times are appended to lists and moved into the rank's columns every ``_CHUNK`` steps
        (``_flush``): a list append costs a fraction of an array's, which converts each
        float through the argument parser. The evaluator's hot loop, kept whole on purpose:
        benchmarks/bench_evaluator.py's 1M-action point spends ~0.37 us per step here, and a
        Python call per step (a receive, a send or a step as a helper) would add ~0.1 us each;
        the set-up is :meth:`_links_of`."""
        program = self.program
        rec = self.rec
        prog: RankOps = program.compiled[r]
        actions = program.schedule.ranks[r]
        steps = prog.steps
        n_steps = len(steps)
        profile = program.profile
        prologue = profile.step_prologue_ns
        epilogue = profile.step_epilogue_ns
        var = RankVariation.of(self.options, r)
        layers = self._layers if self.options.trace_layers else None
        plan = _plan(prog, var is None and layers is None)
        clock = self.clock
        me = -1 - r                       # this rank's mark in a mailbox slot
        ready_append = self.ready.append
        tcols = rec.transfers
        instant = tcols.instant
        columns = (rec.actions.start[r], rec.actions.end[r], tcols.issued[r], tcols.start[r],
                   tcols.end[r])
        lists = ([], [], [], [], [])
        starts, ends, issued, t_starts, t_ends = lists
        book = {} if instant else self._links_of(r, prog)
        nbytes = program.pp_comm
        tail = self.tail
        for it in range(self.iterations):
            box = self.boxes.get(it)      # a fresh one every iteration
            if box is None:
                box = self.boxes[it] = self._mailbox()
            now = clock[r]
            if prologue:
                now = now + prologue
            mbs = iter(microbatches_of(actions))
            acts = iter(actions) if layers is not None else None   # every step general then
            for c in range(0, n_steps, _CHUNK):
                if c:
                    _flush(columns, lists)
                for i, mb in zip(steps[c:c + _CHUNK], mbs):
                    total, rb, sb, dst, rest = plan[i]
                    if rest is None:
                        # the common step, by itself: one action, its receive, compute, send
                        row = box[mb]
                        if rb >= 0:
                            got = row[rb]
                            if got is None:    # not sent yet: the sender wakes this rank
                                row[rb] = me
                                clock[r] = now
                                yield
                                now = clock[r]
                            else:
                                row[rb] = None
                                if got > now:
                                    now = now + (got - now)
                        start = now            # no launch overhead: now + 0.0
                        now = now + total
                        starts.append(start)   # start + 0.0 * span
                        # start + 1.0 * span: now itself when start >= total (Fast2Sum: the
                        # difference of now = fl(start + total) and the larger addend, start,
                        # is exact)
                        ends.append(now if start >= total else start + (now - start))
                        if sb < 0:
                            continue
                        issued.append(now)
                        if instant:
                            e = now
                        else:
                            s, e = book[dst](nbytes, now)
                            t_starts.append(s)
                            t_ends.append(e)
                        w = row[sb]
                        if w is None:
                            row[sb] = e
                            continue
                        if w >= 0:             # sent twice (an unchecked list): the last
                            row[sb] = e
                            continue
                        # the receiver resumes when the data lands, as the later party sees
                        # it: one already waiting is woken `e - now` after the send, one
                        # that comes later finds the arrival time and sleeps `e - tr`
                        row[sb] = None
                        w = -1 - w
                        tr = clock[w]
                        if tr < now:
                            clock[w] = now + (e - now)
                        elif e > tr:
                            clock[w] = tr + (e - tr)
                        ready_append(w)
                        continue
                    # any other step: a pair, shares, DP collectives, overheads, variation
                    n, cost, recvs, sends = rest
                    step_mbs = (mb,) if n == 1 else (mb, next(mbs))
                    for k, base in recvs:
                        row = box[step_mbs[k]]
                        got = row[base]
                        if got is None:
                            row[base] = me
                            clock[r] = now
                            yield
                            now = clock[r]
                        else:
                            row[base] = None
                            if got > now:
                                now = now + (got - now)
                    start = now + cost.pre     # the launch overhead (x + 0.0 == x)
                    if var is not None:        # overhead + duration, as the engine adds them
                        total = var.duration(cost) + cost.pre
                    if total > 0:
                        now = now + total
                    span = now - start
                    for k, sh in enumerate(cost.shares):
                        s0 = start + sh[0] * span
                        starts.append(s0)
                        ends.append(start + sh[1] * span)
                        if layers is not None:
                            layers(r, next(acts), it, s0, (sh[1] - sh[0]) * span, sh[3])
                    if cost.dp:
                        tail.dp(r, it, start, cost.dp,
                                span / cost.duration if cost.duration else 1.0)
                    for k, base, dst in sends:
                        row = box[step_mbs[k]]
                        issued.append(now)
                        if instant:
                            e = now
                        else:
                            s, e = book[dst](nbytes, now)
                            t_starts.append(s)
                            t_ends.append(e)
                        w = row[base]
                        if w is None or w >= 0:
                            row[base] = e
                        else:                  # as above
                            row[base] = None
                            w = -1 - w
                            tr = clock[w]
                            if tr < now:
                                clock[w] = now + (e - now)
                            elif e > tr:
                                clock[w] = tr + (e - tr)
                            ready_append(w)
            _flush(columns, lists)
            # end of the iteration: epilogue, the tail (once-per-iteration rows), the barrier
            if epilogue:
                now = now + epilogue
            busy, records = tail.finish(r, it, now)
            if busy:
                now = now + busy
            rec.collectives.extend(records)
            self._barrier(r, it, now)
            yield

    def _links_of(self, r: int, prog: RankOps) -> dict:
        """Per destination rank of rank ``r``'s sends, the booking of its link (only ``r``
        books it, in its op order): ``LinkStats.book``, the engine's FIFO rule. A table over
        every rank on every rank grew with P^2."""
        program, links = self.program, self.rec.links
        book: dict = {}
        for _, _, _, sends in prog.plan():
            for _, _, _, dst in sends:
                if dst not in book:
                    link = links[(r, dst)] = LinkStats(r, dst, program.links.p2p(r, dst))
                    book[dst] = link.book
        return book

    def _layers(self, rank: int, a, it: int, start: float, span: float, cost) -> None:
        """The layer records of action ``a`` run over ``[start, start + span]``: its cost's
        layer states in proportion, as the engine derives them."""
        scale = span / cost.duration if cost.duration else 0.0
        append = self.rec.layers.append
        for seg in cost.segments:
            s = start + seg.offset * scale
            append(LayerRecord(rank, a.stage, a.microbatch, it, seg.layer, seg.state, s,
                               s + seg.duration * scale))

    def _mailbox(self) -> list[list]:
        """An empty mailbox: a row of 2 x stages slots per microbatch."""
        slots = 2 * self.program.schedule.n_stages
        return [[None] * slots for _ in range(self.program.schedule.microbatches)]

    def _barrier(self, r: int, it: int, now: float) -> None:
        """Rank ``r`` ends iteration ``it`` at ``now``; the last one in releases everyone at
        ``last + wait`` (:meth:`~.tail.Tail.arrive`: the engine's timeout after the last
        arrival)."""
        P = self.P
        self.clock[r] = now
        if self.alone:
            self._step_alone(r, it, now)
            return
        self.blocked[r] = Wait(r, "the iteration barrier", None, now)
        released = self.tail.arrive(r, it, now)
        if released is None:
            return
        last, wait = released
        t_barrier = last + wait
        clock, blocked = self.clock, self.blocked
        for q in range(P):
            blocked[q] = None
            clock[q] = t_barrier
        # sends nobody received (an unchecked list) are dropped with the old mailbox
        del self.boxes[it]
        if it + 1 < self.iterations:
            self.ready.extend(range(P - 1, -1, -1))
        else:
            self.done = True

    def _step_alone(self, r: int, it: int, now: float) -> None:
        """Post-validation: rank ``r`` ends iteration ``it`` at ``now`` and goes on when its
        own step is done (:meth:`~.tail.Tail.arrive_alone`), with every rank after it that
        waited for its pre-step state."""
        self.blocked[r] = Wait(r, "the optimizer's pre-step state from the rank before it",
                               r - 1 if r else None, now)
        clock, blocked = self.clock, self.blocked
        last = it + 1 == self.iterations
        for q, t in self.tail.arrive_alone(r, it, now):
            blocked[q] = None
            clock[q] = now + (t - now)      # the engine's timeout from now, to the bit
            if last:
                self.gone += 1
            else:
                self.ready.append(q)
        if it not in self.tail.pending:       # every rank has gone on
            del self.boxes[it]
        if self.gone == self.P:
            self.done = True

    def _count_free_sends(self) -> None:
        """Zero-byte sends cost nothing: every one of a finished run is counted on its link
        (each step's sends, times the steps run)."""
        program = self.program
        if not self.rec.transfers.instant:
            return
        links = self.rec.links
        for r, prog in enumerate(program.compiled):
            per_dst: Counter = Counter()
            uses = _uses(prog)
            for i, (_, _, _, sends) in enumerate(prog.plan()):
                for _, _, _, peer in sends:
                    per_dst[peer] += uses[i]
            for dst in sorted(per_dst):
                link = links.get((r, dst))
                if link is None:
                    link = links[(r, dst)] = LinkStats(r, dst, program.links.p2p(r, dst))
                link.transfers += per_dst[dst] * self.iterations

    def _deadlock(self) -> None:
        """The engine's DeadlockError: every rank still waiting, on what, since when; the
        time is the latest clock (asynchronous transfers fire no event of their own). A rank
        waiting on a receive is found by its mark in the mailbox, its row and slot naming the
        tensor: microbatch, 2 x destination stage + (data is a gradient)."""
        waits = [b for b in self.blocked if b is not None]    # at the barrier
        for mb, row in ((mb, row) for box in self.boxes.values()
                        for mb, row in enumerate(box)):
            for base, mark in enumerate(row):
                if mark is None or mark >= 0:
                    continue
                r = -1 - mark
                t = self.program.compiled[r].receive(*_tensor_of(base), mb)
                waits.append(Wait(r, str(t), t.src_rank, self.clock[r]))
        waits.sort(key=lambda w: w.rank)
        raise DeadlockError(waits, max(self.clock))


def _uses(prog: RankOps) -> list[int]:
    """How many steps of each step-cost index one pass over ``prog`` runs. Fewer than 256
    indices (always, in practice): the low byte of each 4-byte index counted by
    ``bytes.count``, at memory speed; else a Counter."""
    steps = prog.steps
    n = len(prog.costs)
    if n <= 256 and steps.itemsize == 4 and sys.byteorder == "little":
        low = steps.tobytes()[0::4]
        return [low.count(i) for i in range(n)]
    c = Counter(steps)
    return [c.get(i, 0) for i in range(n)]
