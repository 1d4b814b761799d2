"""The runtime: one long-lived SimPy process per pipeline rank runs that rank's Workload FSM over
its op list (compute steps with the receives and sends the comm pass added).

Per rank there are two streams. The compute stream runs actions back to back; an action's
layers go through Forward_Pass / Forward_In_BackPass / Input_Gradient / Weight_Gradient with
their blocking TP/EP collectives, and the whole action costs one SimPy timeout (per-layer times
are derived, see ``costs``). The communication stream carries each layer's weight-gradient (DP)
collective, issued when the last microbatch's weight gradient of that layer is done (gradient
accumulation), first in first out. Point-to-point semantics follow ``EngineOptions.p2p`` (or,
when that is None, the system's ``runtime.p2p``); a receive waits on a bare event that fires when
the data lands. The system's runtime profile adds a launch overhead before each action
(``StepCost.pre``, folded into the action's one timeout) and a prologue / epilogue per iteration;
torch's point-to-point rules live in ``rendezvous``.

An iteration ends when every rank has finished its actions and every DP collective and layer
update is done; with a flush the next iteration starts then (the optimizer step is a barrier).
The DP collectives, the rows after a rank's last action and that barrier are the iteration's
tail (``tail``), which the evaluator's walk calls too. A walk reads the compiled program as
``runtime.program`` (a :class:`~.program.Program`).
If the event queue empties while a rank still waits, the run is a deadlock: reported with what
every blocked rank waits for.

What is compiled once (``program.Program``: op lists, step costs, memory model, the tail,
labels) is kept apart from what a run changes (:class:`_Run`); a :class:`Runtime` pairs a
program with one run's options. Asynchronous runs on FIFO links take the lookahead walk
(:meth:`_Run._run_ahead`: a rank runs on its own clock while the data it needs has been sent,
and its SimPy process waits only for data not sent yet or at the barrier; the walk is the
evaluator's, ``evaluator_async``, driven by SimPy's queue); every other mode, and runs that
need every event in time order (logging, layer traces), walk the
op tuples step by step (``_rank``: one timeout per action). Both give the same timeline to the
nanosecond (tests/engine/test_lookahead.py). Actions (and asynchronous FIFO transfers) are
recorded as time columns (``columns``).

Fast path `lookahead` (docs/performance.md, "Fast paths"): it removes 74 % of `pipesim run`'s
whole-process CPU on the 1M-action case against the step-by-step walk. Fast path
`per_action_steps` (one timeout per action against ``_layers``' one per layer state,
``--layer-by-layer``): it removes 8.9 % of `pipesim run`'s CPU on a 96-layer model at pp 8.
"""

from __future__ import annotations


import simpy

from ..errors import DeadlockError, Wait
from ..schedules.comm_pass import Transfer
from ..schedules.schedule import Schedule
from ..system.config import SystemConfig
from ..workload.model import Header, Partition
from .columns import ActionColumns, TransferColumns
from .evaluator_async import walk
from .eventlog import debug_enabled, log_complete, log_step
from .memory_use import account
from .network import Network
from .options import EngineOptions
from .program import (BATCH, COMPUTE, IRECV, RECV, SEND, TSEND, WAIT, RankOps, Program,
                      StepCost)
from .records import LayerRecord, RunRecords, TransferRecord
from .rendezvous import Rendezvous
from .simpy_fast import fire_at
from .tail import Tail
from .variation import RankVariation


# a plain class, not a dataclass: start-up (simulator/__init__.py). One tensor's rendezvous
# state (blocking modes), never compared or printed.
class _Channel:
    """Rendezvous state of one tensor (blocking / batched modes)."""

    __slots__ = ("arrival", "sent", "recv_posted", "pending")

    def __init__(self, arrival: simpy.Event, sent: simpy.Event) -> None:
        self.arrival = arrival
        self.sent = sent
        self.recv_posted = False
        self.pending: tuple | None = None   # a send waiting for its receive: (rank, dst,
        #                                     nbytes, t, it)


class Runtime:
    """A compiled :class:`~simulator.engine.program.Program` and one run's options.

    The program (op lists, step costs, memory model, the tail, labels) is immutable and
    can be shared: ``Runtime.of(program, ...)`` runs it again with other options or another
    number of iterations without compiling anything. Each :meth:`run` builds its own state
    (:class:`_Run`: the SimPy environment, mailbox, network, records), so a Runtime can run any
    number of times."""

    def __init__(self, schedule: Schedule, partition: Partition, header: Header,
                 system: SystemConfig, *, iterations: int = 1, pp_comm: int | None = None,
                 options: EngineOptions | None = None, program: Program | None = None) -> None:
        options = options or EngineOptions()
        if program is None:
            program = Program.compile(schedule, partition, header, system, p2p=options.p2p,
                                      pp_comm=pp_comm, ddp=options.ddp,
                                      tp_comm_overlap=options.tp_comm_overlap,
                                      p2p_scatter_gather=options.p2p_scatter_gather)
        elif (options.p2p or program.profile.p2p) != program.p2p_option:
            raise ValueError(f"the program was compiled for --p2p {program.p2p_option}, the "
                             f"options ask for {options.p2p or program.profile.p2p}")
        if options.p2p != program.p2p_option:
            options = options._replace(p2p=program.p2p_option)
        self.program = program
        self.options = options
        self.iterations = iterations

    @classmethod
    def of(cls, program: Program, *, iterations: int = 1,
           options: EngineOptions | None = None) -> "Runtime":
        """Run an already compiled program (its p2p mode must be the options')."""
        options = options or EngineOptions(p2p=program.p2p_option)
        return cls(program.schedule, program.partition, program.header, program.system,
                   iterations=iterations, options=options, program=program)

    def run(self) -> RunRecords:
        """Run the program on SimPy (fresh state each call). A deadlocked run over the memory
        limit before it deadlocked reports the overflow, the first of the two in time."""
        try:
            return self.account_memory(_Run(self).run())
        except DeadlockError:
            if self.options.memory_limit_bytes is not None:
                self._overflow_before_deadlock()
            raise

    def _overflow_before_deadlock(self) -> None:
        """Raise the OutOfMemoryError of the actions a deadlocked run did finish, if any (the
        step-by-step walk, whose records are kept when it stops)."""
        run = _Run(self, look_ahead=False)
        try:
            run.run()
        except DeadlockError:
            account(self.program.memory, self.program.schedule, run.rec, self.iterations,
                    self.options.memory_limit_bytes)

    def account_memory(self, records: RunRecords) -> RunRecords:
        """The memory model over the run's executed order (:mod:`.memory_use`): every rank's
        peak and its parts into ``records``; an overflow of the limit raises."""
        records.memory_peaks = account(
            self.program.memory, self.program.schedule, records, self.iterations,
            self.options.memory_limit_bytes, samples=self.options.trace_layers)
        return records


class _Run:
    """The state of one SimPy run of a program: environment, network, mailbox, rendezvous
    channels, records. Made by :meth:`Runtime.run`, used once (``look_ahead`` False: the
    step-by-step walk, whose records stay in ``rec`` when it stops)."""

    def __init__(self, runtime: Runtime, look_ahead: bool = True) -> None:
        program = runtime.program
        self.runtime = runtime
        self.look_ahead = look_ahead
        self.schedule = program.schedule
        self.costs = program.costs
        self.profile = program.profile
        self.p2p = program.p2p
        self.links = program.links
        self.compiled = program.compiled
        self.layer_ops_per_iteration = program.layer_ops_per_iteration
        self.program_labels = program.labels
        self.pp_comm = program.pp_comm
        self.options = runtime.options
        self.iterations = runtime.iterations
        self.trace_layers = runtime.options.trace_layers

    def run(self) -> RunRecords:
        self.debug = debug_enabled()
        if self.look_ahead and self._can_look_ahead():
            rec = self._run_ahead()
            if rec is not None:
                return rec
        env = self.env = simpy.Environment()
        self.rec = RunRecords()
        self.net = Network(env, self.links)
        # actions (and, on FIFO links, asynchronous transfers) as time columns (columns.py):
        # a few bytes per record instead of a tuple of ten fields
        self.rec.actions = ActionColumns(self.schedule, self.program_labels, ordered=True)
        self.fifo_columns = self.p2p == "async" and not self.net.fair
        if self.fifo_columns:
            compiled = self.compiled
            self.rec.transfers = TransferColumns(
                self.schedule, self.pp_comm, ordered=True,
                records=lambda r, times, it, nbytes: compiled[r].send_records(r, times, it,
                                                                               nbytes))
        self.mailbox: dict = {}
        self.channels: dict = {}
        self.waiting: dict[int, Wait | None] = {}
        P = self.schedule.pp
        self.barrier = env.event()
        self.rdv = (None if self.fifo_columns else   # torch's modes only
                    Rendezvous(env, self.net, self.profile.exchange_ns, self.rec.transfers.append))
        self.rec.rank_finish = [[0.0] * P for _ in range(self.iterations)]
        # DP collectives, rows after the last action, barrier: the evaluator's walk's too
        self.tail: Tail = self.runtime.program.tail.start(self.rec)
        self.go: list = [None] * P         # post-validation: each rank's own release
        self.zero_sends: list = [None] * P
        procs = [env.process(self._rank(r)) for r in range(P)]
        env.run()
        for r, counts in enumerate(self.zero_sends):   # zero-byte sends: only counted
            for dst, n in enumerate(counts or ()):
                if n:
                    self.net._stats(r, dst).transfers += n
        stuck = [r for r, p in enumerate(procs) if p.is_alive]
        if stuck:
            raise DeadlockError([self._wait_of(r) for r in stuck], env.now)
        self.rec.links = self.net.links
        self.rec.layer_ops = self.layer_ops_per_iteration * self.iterations
        return self.rec

    def _can_look_ahead(self) -> bool:
        """Whether the lookahead walk gives this run's timeline (see :meth:`_run_ahead`):
        asynchronous point-to-point on FIFO links over compact op lists, without layer
        records or logging (their order is the events'), and with a flush between
        iterations."""
        return (self.p2p == "async" and self.links.topology.sharing != "fair"
                and not self.options.layer_by_layer and not self.debug
                and not self.trace_layers
                and all(isinstance(prog, RankOps) for prog in self.compiled)
                and (self.schedule.flush or self.iterations == 1))

    def _run_ahead(self) -> RunRecords | None:
        """The lookahead walk on SimPy: each rank's process runs its steps on its own clock
        while the data they need has been sent - on FIFO links a send's arrival time is known
        when it is posted, and a link is booked only by its source rank in its own op order,
        so nothing another rank does later can change it - and waits, as a SimPy event at its
        clock, only for data not sent yet and at the iteration barrier. The walk is the
        evaluator's (``evaluator_async``), with SimPy's queue instead of a worklist; its times
        use the expressions the step-by-step walk's timeouts compute, so the timeline is the
        same to the nanosecond (tests/engine/test_lookahead.py). None when the step-by-step
        walk must run instead: an unchecked list's microbatch beyond the count."""
        return walk(self.runtime.program, self.options, self.iterations, simpy.Environment())

    def _wait_of(self, rank: int) -> Wait:
        w = self.waiting.get(rank)
        if w is None:
            return Wait(rank, "the iteration barrier", None, self.env.now)
        if isinstance(w, Wait):
            return w
        op, since = w   # a receive, recorded cheaply in the hot loop
        return Wait(rank, str(op[4]), op[2], since)

    def _rank(self, rank: int):
        """Rank ``rank``'s SimPy process: its op list once per iteration, step by step (one
        timeout per compute step), then the iteration's end. Hot loop for the rendezvous modes
        (the asynchronous ones take the lookahead walk): the compute step and the receive stay
        inline; a send, torch's posts and waits, and an action's records are named steps."""
        env = self.env
        program = self.compiled[rank]
        mailbox = self.mailbox
        record = self._recorder(rank)
        send = self._sender(rank)
        debug = self.debug
        virtual = self.schedule.n_stages > self.schedule.pp
        variation = RankVariation.of(self.options, rank)
        layer_by_layer = self.options.layer_by_layer
        prologue = self.profile.step_prologue_ns
        epilogue = self.profile.step_epilogue_ns
        torch = self.p2p.startswith("torch")
        waiting = self.waiting
        # one run of one iteration: the mailbox needs no iteration in its keys
        one_box = self.iterations == 1
        for it in range(self.iterations):
            if prologue:
                yield env.timeout(prologue)
            sends: dict = {}     # torch: posted sends not waited for yet
            for op in program:
                code = op[0]
                if code == COMPUTE:
                    cost = op[1]
                    start = env.now + cost.pre     # the launch overhead (x + 0.0 == x)
                    if debug:
                        log_step(rank, op[2], cost.phases, start, True, virtual)
                    if layer_by_layer:
                        if cost.pre:
                            yield env.timeout(cost.pre)
                        yield from self._layers(rank, it, cost)
                    else:
                        duration = cost.total      # overhead + duration
                        if variation is not None:
                            duration = variation.duration(cost) + cost.pre
                        if duration > 0:
                            yield env.timeout(duration)
                    end = env.now
                    span = end - start
                    record(op[2], cost, it, start, span)
                    if cost.dp and not layer_by_layer:
                        self.tail.dp(rank, it, start, cost.dp, span / cost.duration
                                     if cost.duration else 1.0)
                    if debug:
                        log_step(rank, op[2], cost.phases, end, False, virtual)
                elif code == RECV:
                    # the mailbox holds the arrival time (fifo links), or an event to wait on
                    key = op[1] if one_box else (it,) + op[1]
                    got = mailbox.pop(key, None)
                    if got is None:            # nothing sent yet: wait for the sender
                        ev = mailbox[key] = env.event()
                        waiting[rank] = (op, env.now)
                        yield ev
                        waiting[rank] = None
                        del mailbox[key]
                    elif type(got) is float:
                        if got > env.now:
                            yield env.timeout(got - env.now)
                    elif got.callbacks is not None:
                        yield got
                elif code == SEND:
                    send(op, op[1] if one_box else (it,) + op[1], it)
                elif code == BATCH:
                    yield from self._batch(rank, it, op[1])
                else:    # torch's point-to-point (see ``rendezvous`` and ``program``)
                    yield from self._torch_op(rank, it, op, sends)
            if torch:
                for ev, sop in sends.values():     # torch waits for its sends at the end
                    yield from self._wait(rank, ev, sop)
            if epilogue:
                yield env.timeout(epilogue)
            yield from self._end_iteration(rank, it)

    def _recorder(self, rank: int):
        """``record(actions, cost, it, start, span)``: the action records of a compute step
        run over ``[start, start + span]`` (each action its share; layer records too when
        traced), into the rank's time columns."""
        a_start = self.rec.actions.start[rank].append
        a_end = self.rec.actions.end[rank].append
        a_order = self.rec.actions.order.append
        trace_layers = self.trace_layers

        def record(actions, cost, it: int, start: float, span: float) -> None:
            shares = cost.shares
            if len(shares) == 1 and not trace_layers:
                sh = shares[0]
                a_start(start + sh[0] * span)
                a_end(start + sh[1] * span)
                a_order(rank)
                return
            for a, (lo, hi, _, acost, _) in zip(actions, shares):
                s0 = start + lo * span
                a_start(s0)
                a_end(start + hi * span)
                a_order(rank)
                if trace_layers:
                    self._record_layers(rank, a, it, s0, (hi - lo) * span, acost)

        return record

    def _sender(self, rank: int):
        """``send(op, mailbox key, it)``: post a send. On FIFO links its arrival time is known
        now: booked, recorded in the transfer columns and left in the mailbox (or the waiting
        receiver woken then); on fair links a transfer whose arrival fires an event."""
        env, mailbox, net = self.env, self.mailbox, self.net
        if not self.fifo_columns:
            def send_fair(op: tuple, mkey: tuple, it: int) -> None:
                waiter = mailbox.get(mkey)
                if waiter is None:
                    waiter = mailbox[mkey] = env.event()
                self._transfer(rank, op[2], op[3], op[4], it, waiter)

            return send_fair
        tcols = self.rec.transfers
        t_issued = tcols.issued[rank].append
        t_start, t_end = tcols.start[rank].append, tcols.end[rank].append
        instant = tcols.instant
        t_order = tcols.order.append

        def send_fifo(op: tuple, mkey: tuple, it: int) -> None:
            waiter = mailbox.get(mkey)
            now = env.now
            start, end = net.book(rank, op[2], op[3])
            t_issued(now)
            t_order(rank)
            if not instant:
                t_start(start)
                t_end(end)
            if waiter is None:
                mailbox[mkey] = float(end)
            else:
                fire_at(env, waiter, end - now)

        return send_fifo

    def _torch_op(self, rank: int, it: int, op: tuple, sends: dict):
        """One of torch's steps (``rendezvous``): post a receive or a send (never blocks),
        wait for a receive, or wait for earlier sends."""
        code = op[0]
        rdv = self.rdv
        if code == IRECV:
            rdv.post_recv((it,) + op[1])
        elif code == WAIT:
            key = (it,) + op[1]
            yield from self._wait(rank, rdv.channels[key].arrival, op)
            del rdv.channels[key]
        elif code == TSEND:
            key = (it,) + op[1]
            sends[key] = (rdv.post_send(key, rank, op[2], op[3], op[4], it), op)
        else:   # WAITSENDS
            for key in op[1]:
                ev, sop = sends.pop((it,) + key)
                yield from self._wait(rank, ev, sop)

    def _wait(self, rank: int, ev, op: tuple):
        """Wait for ``ev`` unless it fired, recorded as waiting on ``op`` since now."""
        if ev.callbacks is not None:
            self.waiting[rank] = (op, self.env.now)
            yield ev
            self.waiting[rank] = None

    def _layers(self, rank: int, it: int, cost: StepCost):
        """The reference path: one SimPy timeout per layer state, each DP collective issued
        the moment its weight gradient ends. The fast path must give the same timeline."""
        env = self.env
        total = sum(share[3].duration for share in cost.shares)
        scale = cost.duration / total if total else 0.0
        for _, _, chunk, acost, dp_kind in cost.shares:
            dps = ({d.layer: d for d in self.costs[chunk].dp_after(dp_kind)}
                   if dp_kind is not None else {})
            for seg in acost.segments:
                if seg.duration > 0:
                    yield env.timeout(seg.duration * scale)
                d = dps.get(seg.layer) if seg.state == "Weight_Gradient" else None
                if d is not None:
                    self.tail.dp(rank, it, env.now, ((chunk, 0.0, d),), 1.0)

    def _transfer(self, rank: int, dst: int, nbytes: int, t: Transfer, it: int,
                  arrival: simpy.Event, sent: simpy.Event | None = None) -> None:
        issued = self.env.now
        append = self.rec.transfers.append

        def done(start: float, end: float) -> None:
            append(TransferRecord(rank, dst, t.src_stage, t.dst_stage, t.data, t.microbatch, it,
                                  nbytes, issued, start, end))

        self.net.send(rank, dst, nbytes, arrival, done, sent)

    # -- blocking / batched point-to-point -------------------------------------------------
    def _channel(self, key: tuple) -> _Channel:
        ch = self.channels.get(key)
        if ch is None:
            ch = self.channels[key] = _Channel(self.env.event(), self.env.event())
        return ch

    def _batch(self, rank: int, it: int, ops: tuple):
        """Post every send and receive of the batch, then wait until all have completed: a
        receive when its data has arrived, a send when its last byte has left."""
        waits = []
        for op in ops:
            ch = self._channel((it,) + op[1])
            if op[0] == RECV:
                ch.recv_posted = True
                if ch.pending is not None:
                    src, dst, nbytes, t, pit = ch.pending
                    ch.pending = None
                    self._transfer(src, dst, nbytes, t, pit, ch.arrival, ch.sent)
                waits.append((op, ch.arrival))
            else:
                if ch.recv_posted:
                    self._transfer(rank, op[2], op[3], op[4], it, ch.arrival, ch.sent)
                else:
                    ch.pending = (rank, op[2], op[3], op[4], it)
                waits.append((op, ch.sent))
        for op, ev in waits:
            if ev.callbacks is not None:
                what = str(op[4])
                if len(ops) > 1:
                    what += " in batch [" + ", ".join(str(o[4]) for o in ops) + "]"
                self.waiting[rank] = Wait(rank, what, op[2], self.env.now)
                yield ev
                self.waiting[rank] = None
        for op in ops:
            if op[0] == RECV:
                self.channels.pop((it,) + op[1], None)

    # -- iteration end, DP stream, memory ----------------------------------------------------
    def _end_iteration(self, rank: int, it: int):
        """The iteration's tail (``tail``: the rows after the last action, their DP
        collectives), then the barrier: the last rank in releases every rank."""
        env = self.env
        busy, records = self.tail.finish(rank, it, env.now)
        if busy:
            yield env.timeout(busy)
        self.rec.collectives.extend(records)
        if self.debug:
            log_complete(rank, env.now)
        if self.tail.alone:
            # post-validation: no barrier, the rank goes on once its own step is done
            go = self.go[rank] = env.event()
            for q, t in self.tail.arrive_alone(rank, it, env.now):
                fire_at(env, self.go[q], t - env.now)
            self.waiting[rank] = Wait(rank, "the optimizer's pre-step state from the rank "
                                      "before it", rank - 1 if rank else None, env.now)
            yield go
            self.waiting[rank] = None
            return
        barrier = self.barrier
        released = self.tail.arrive(rank, it, env.now)
        if released is not None:    # the last one in: env.now is the latest arrival
            self.barrier = env.event()
            fire_at(env, barrier, released[1])
        if self.schedule.flush or it == self.iterations - 1:
            self.waiting[rank] = Wait(rank, "the iteration barrier", None, env.now)
            yield barrier
            self.waiting[rank] = None

    def _record_layers(self, rank: int, a, it: int, start: float, span: float, cost) -> None:
        scale = span / cost.duration if cost.duration else 0.0
        for seg in cost.segments:
            s = start + seg.offset * scale
            self.rec.layers.append(LayerRecord(rank, a.stage, a.microbatch, it, seg.layer,
                                               seg.state, s, s + seg.duration * scale))

