"""The runtime: one long-lived SimPy process per pipeline rank runs that rank's Workload FSM over
its op list (compute steps with the receives and sends the comm pass added).

Per rank there are two streams. The compute stream runs actions back to back; an action's
layers go through Forward_Pass / Forward_In_BackPass / Input_Gradient / Weight_Gradient with
their blocking TP/EP collectives, and the whole action costs one SimPy timeout (per-layer times
are derived, see ``costs``). The communication stream carries each layer's weight-gradient (DP)
collective, issued when the last microbatch's weight gradient of that layer is done (gradient
accumulation), first in first out. Point-to-point semantics follow ``EngineOptions.p2p``; a
receive waits on a bare event that fires when the data lands.

An iteration ends when every rank has finished its actions and every DP collective and layer
update is done; with a flush the next iteration starts then (the optimizer step is a barrier).
If the event queue empties while a rank still waits, the run is a deadlock: reported with what
every blocked rank waits for.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass, field

import simpy

from ..errors import DeadlockError, OutOfMemoryError, Wait
from ..metrics.phases import COOLDOWN, WARMUP, phase_labels
from ..schedules.comm_pass import Compute, Transfer, add_communication
from ..schedules.schedule import Schedule
from ..system.config import SystemConfig
from ..system.topology import LinkModel
from ..workload.model import Header, Partition
from .costs import ChunkCosts, DPCollective, chunk_costs, partition_costs
from .memory import MemoryModel, build_memory_model
from .network import LinkStats, Network, fire_at
from .options import EngineOptions
from .records import ActionRecord, CollectiveRecord, LayerRecord, TransferRecord

log = logging.getLogger("pipesim.engine")

_RECV, _COMPUTE, _SEND, _BATCH = 0, 1, 2, 3
_KIND_WORD = {"F": "forward", "B": "backward", "I": "input-gradient backward",
              "W": "weight-gradient backward"}


@dataclass
class RunRecords:
    actions: list[ActionRecord] = field(default_factory=list)
    transfers: list[TransferRecord] = field(default_factory=list)
    collectives: list[CollectiveRecord] = field(default_factory=list)
    layers: list[LayerRecord] = field(default_factory=list)
    memory: list[tuple[int, float, float]] = field(default_factory=list)  # (rank, t, bytes),
    # recorded with trace_layers (a trace's memory counter); the peaks are always kept
    peak_memory: list[float] = field(default_factory=list)               # per rank
    static_memory: list[float] = field(default_factory=list)             # per rank
    iteration_bounds: list[tuple[float, float]] = field(default_factory=list)
    rank_finish: list[list[float]] = field(default_factory=list)  # [iteration][rank]
    links: dict[tuple[int, int], LinkStats] = field(default_factory=dict)
    layer_ops: int = 0


@dataclass(frozen=True)
class _StepCost:
    """Timing of a compute step, shared by every step with the same stages, kinds and roles."""

    duration: float          # without variation
    compute: float           # the part variation scales
    comm: float              # blocking collectives inside the step
    paired: bool
    shares: tuple  # per action: (start fraction, end fraction, chunk, ActionCost, DP kind|None)
    dp: tuple[tuple[int, float, DPCollective], ...]  # (chunk, offset in step, collective)
    fwd_chunks: tuple[int, ...]
    alloc: float             # activation bytes allocated when the step starts
    free: float              # activation bytes freed when it ends
    phases: tuple[str, ...]  # Warmup / Steady / Cooldown of each action


@dataclass
class _Channel:
    """Rendezvous state of one tensor (blocking / batched modes)."""

    arrival: simpy.Event
    sent: simpy.Event
    recv_posted: bool = False
    pending: tuple | None = None   # a send waiting for its receive: (rank, dst, nbytes, t, it)


class Runtime:
    def __init__(self, schedule: Schedule, partition: Partition, header: Header,
                 system: SystemConfig, *, iterations: int = 1, pp_comm: int | None = None,
                 options: EngineOptions | None = None) -> None:
        self.schedule = schedule
        self.partition = partition
        self.header = header
        self.system = system
        self.iterations = iterations
        self.options = options or EngineOptions()
        self.trace_layers = self.options.trace_layers
        self.pp_comm = header.pp_comm if pp_comm is None else pp_comm
        self.links = LinkModel(header, system, schedule.pp)
        self.costs: list[ChunkCosts] = partition_costs(partition, header, system, self.links)
        self.memory: MemoryModel = build_memory_model(schedule, partition, header, system.memory)
        self.iter_cost = self._iteration_layers_cost()
        self.programs = add_communication(schedule)
        self.labels = [phase_labels(acts) for acts in schedule.ranks]
        self.compiled = [self._compile(r) for r in range(schedule.pp)]
        self.layer_ops_per_iteration = sum(
            share[3].layer_ops for prog in self.compiled for op in prog if op[0] == _COMPUTE
            for share in op[1].shares) + schedule.pp * self.iter_cost[2]

    # -- compile ---------------------------------------------------------------------------
    def _iteration_layers_cost(self) -> tuple[float, tuple[DPCollective, ...], int]:
        """(compute-stream ns, DP collectives, layer ops) of the once-per-iteration rows."""
        layers = self.partition.iteration_layers
        if not layers:
            return (0.0, (), 0)
        c = chunk_costs(layers, {}, self.header, self.system, self.links)
        total = c.F.duration + c.B.duration
        dps = tuple(DPCollective(d.layer, c.F.duration + d.ready_offset, d.duration, d.update_ns,
                                 d.nbytes) for d in c.dp_after_B)
        return (total, dps, c.F.layer_ops + c.B.layer_ops)

    def _compile(self, rank: int) -> list[tuple]:
        """The rank's op list as tuples: (_COMPUTE, cost, actions), (_RECV, key, src, None, op),
        (_SEND, key, dst, bytes, op), (_BATCH, ops)."""
        actions = self.schedule.ranks[rank]
        labels = self.labels[rank]
        # the last weight-carrying backward of each stage on this rank issues its DP collectives
        split = {(a.stage, a.microbatch) for a in actions if a.kind == "W"}
        weight_bwd = [a.kind == "W" or (a.kind == "B" and (a.stage, a.microbatch) not in split)
                      for a in actions]
        # (with no flush, e.g. 2BW, each minibatch of the continuous schedule reduces its own)
        per_minibatch = self.schedule.meta.get("microbatches_per_iteration") or 0
        last_wb: dict[tuple[int, int], int] = {}
        for i, a in enumerate(actions):
            if weight_bwd[i]:
                minibatch = a.microbatch // per_minibatch if per_minibatch else 0
                last_wb[(a.stage, minibatch)] = i
        last = set(last_wb.values())
        cache: dict[tuple, _StepCost] = {}
        ops: list[tuple] = []
        pos = 0   # compute steps appear in the order of the rank's actions
        for op in self.programs[rank]:
            if type(op) is Compute:
                n = len(op.actions)
                key = tuple((a.stage, a.kind, weight_bwd[pos + k], pos + k in last,
                             labels[pos + k]) for k, a in enumerate(op.actions))
                cost = cache.get(key)
                if cost is None:
                    cost = cache[key] = self._step_cost(key)
                ops.append((_COMPUTE, cost, op.actions))
                pos += n
            elif op.op == "recv":
                ops.append((_RECV, op.key, op.src_rank, None, op))
            else:
                ops.append((_SEND, op.key, op.dst_rank, self.pp_comm, op))
        mode = self.options.p2p
        if mode == "async":
            return ops
        # blocking: every transfer is a rendezvous of its own; batched: adjacent transfers
        # (Megatron's send_forward_recv_backward and friends) are posted and complete together
        out: list[tuple] = []
        for op in ops:
            if op[0] == _COMPUTE:
                out.append(op)
            elif mode == "batched" and out and out[-1][0] == _BATCH:
                out[-1] = (_BATCH, out[-1][1] + (op,))
            else:
                out.append((_BATCH, (op,)))
        return out

    def _step_cost(self, key: tuple) -> _StepCost:
        """``key``: per action (stage, kind, carries weights, issues the DP collectives, phase)."""
        chunk_of = self.schedule.stage_chunk
        costs = [self.costs[chunk_of[stage]].of(kind) for stage, kind, *_ in key]
        total = sum(c.duration for c in costs)
        comm = sum(c.comm for c in costs)
        paired = len(costs) > 1
        # an overlapped pair: communication hides under the other half's compute
        duration = max(total - comm, comm) if paired else total
        shares = []
        dp = []
        acc = 0.0
        alloc = free = 0.0
        for (stage, kind, weights, issues_dp, _), c in zip(key, costs):
            lo = acc / total if total else 0.0
            acc += c.duration
            hi = acc / total if total else 0.0
            chunk = chunk_of[stage]
            shares.append((lo, hi, chunk, c, kind if issues_dp else None))
            if kind == "F":
                alloc += self.memory.activation_bytes[chunk]
            if weights:
                free += self.memory.activation_bytes[chunk]
            if issues_dp:
                offset = lo * duration
                scale = (duration / total) if total else 0.0
                for d in self.costs[chunk].dp_after(kind):
                    dp.append((chunk, offset + d.ready_offset * scale, d))
        fwd_chunks = tuple(chunk_of[stage] for stage, kind, *_ in key if kind == "F")
        return _StepCost(duration, total - comm, comm, paired, tuple(shares), tuple(dp),
                         fwd_chunks, alloc, free, tuple(k[4] for k in key))

    # -- run -------------------------------------------------------------------------------
    def run(self) -> RunRecords:
        env = self.env = simpy.Environment()
        self.rec = RunRecords()
        self.net = Network(env, self.links)
        self.mailbox: dict = {}
        self.channels: dict = {}
        self.waiting: dict[int, Wait | None] = {}
        self.finished = 0
        P = self.schedule.pp
        self.dp_free = [0.0] * P          # communication stream per rank
        self.dp_done_chunk: dict[tuple[int, int], float] = {}
        self.iter_end_candidates: list[float] = []
        self.barrier = env.event()
        self.debug = log.isEnabledFor(logging.DEBUG)
        self.rec.rank_finish = [[0.0] * P for _ in range(self.iterations)]
        self.mem = list(self.memory.static_bytes)
        self.rec.static_memory = list(self.memory.static_bytes)
        self.rec.peak_memory = list(self.mem)
        for r in range(P):
            self.rec.memory.append((r, 0.0, self.mem[r]))
            self._check_memory(r, 0.0, "holding its weights and optimizer state")
        procs = [env.process(self._rank(r)) for r in range(P)]
        env.run()
        stuck = [r for r, p in enumerate(procs) if p.is_alive]
        if stuck:
            raise DeadlockError([self._wait_of(r) for r in stuck], env.now)
        self.rec.links = self.net.links
        self.rec.layer_ops = self.layer_ops_per_iteration * self.iterations
        return self.rec

    def _wait_of(self, rank: int) -> Wait:
        w = self.waiting.get(rank)
        if w is None:
            return Wait(rank, "the iteration barrier", None, self.env.now)
        if isinstance(w, Wait):
            return w
        op, since = w   # a receive, recorded cheaply in the hot loop
        return Wait(rank, str(op[4]), op[2], since)

    def _variation(self, rank: int):
        """Per-step compute factors for one rank: slow-rank factor × lognormal(mean 1)."""
        opts = self.options
        slow = 1.0
        for r, f in opts.slow_ranks:
            if r == rank:
                slow *= f
        if opts.jitter_sigma <= 0:
            return None if slow == 1.0 else slow
        import numpy as np  # only for jitter: keeps `pipesim run` start-up light

        rng = np.random.default_rng([opts.seed, rank])
        sigma = opts.jitter_sigma
        mu = -0.5 * sigma * sigma
        return (rng, mu, sigma, slow)

    def _rank(self, rank: int):
        env = self.env
        program = self.compiled[rank]
        mailbox = self.mailbox
        rec_actions = self.rec.actions.append
        debug = self.debug
        variation = self._variation(rank)
        dp_done = self.dp_done_chunk
        trace_layers = self.trace_layers
        layer_by_layer = self.options.layer_by_layer
        # without a flush (2BW) a forward runs on the stashed older weight version: no wait
        fwd_waits = self.schedule.flush
        for it in range(self.iterations):
            for op in program:
                code = op[0]
                if code == _COMPUTE:
                    _, cost, acts = op
                    phases = cost.phases
                    for chunk in (cost.fwd_chunks if fwd_waits else ()):
                        # Forward_Pass waits for its chunk's pending weight-gradient collective
                        ready = dp_done.get((rank, chunk), 0.0)
                        if ready > env.now:
                            yield env.timeout(ready - env.now)
                    start = env.now
                    if cost.alloc:
                        self._allocate(rank, cost.alloc, acts, start)
                    if debug:
                        self._log(rank, acts, phases, start, True)
                    if layer_by_layer:
                        yield from self._layers(rank, it, cost)
                    else:
                        duration = cost.duration
                        if variation is not None:
                            duration = self._vary(cost, variation)
                        if duration > 0:
                            yield env.timeout(duration)
                    end = env.now
                    span = end - start
                    for a, phase, (lo, hi, chunk, acost, _) in zip(acts, phases, cost.shares):
                        s0 = start + lo * span
                        rec_actions(ActionRecord(rank, a.stage, a.kind, a.microbatch, it, s0,
                                                 start + hi * span, phase, chunk, a.pair))
                        if trace_layers:
                            self._record_layers(rank, a, it, s0, (hi - lo) * span, acost)
                    if cost.free:
                        self.mem[rank] -= cost.free
                        if trace_layers:
                            self.rec.memory.append((rank, end, self.mem[rank]))
                    if cost.dp and not layer_by_layer:
                        self._issue_dp(rank, it, start, cost.dp, span / cost.duration
                                       if cost.duration else 1.0)
                    if debug:
                        self._log(rank, acts, phases, end, False)
                elif code == _RECV:
                    key = (it,) + op[1]
                    ev = mailbox.get(key)
                    if ev is None:
                        ev = mailbox[key] = env.event()
                    if ev.callbacks is not None:   # not yet processed: wait for the data
                        self.waiting[rank] = (op, env.now)
                        yield ev
                        self.waiting[rank] = None
                    del mailbox[key]
                elif code == _SEND:
                    mkey = (it,) + op[1]
                    ev = mailbox.get(mkey)
                    if ev is None:
                        ev = mailbox[mkey] = env.event()
                    self._transfer(rank, op[2], op[3], op[4], it, ev)
                else:
                    yield from self._batch(rank, it, op[1])
            yield from self._end_iteration(rank, it)

    def _layers(self, rank: int, it: int, cost: _StepCost):
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
                    self._issue_dp(rank, it, env.now, ((chunk, 0.0, d),), 1.0)

    def _vary(self, cost: _StepCost, variation) -> float:
        if isinstance(variation, float):
            factor = variation
        else:
            rng, mu, sigma, slow = variation
            factor = slow * math.exp(rng.normal(mu, sigma))
        if cost.paired:
            return max(cost.compute * factor, cost.comm)
        return cost.compute * factor + cost.comm

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
            if op[0] == _RECV:
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
                what = _describe(op)
                if len(ops) > 1:
                    what += " in batch [" + ", ".join(_describe(o) for o in ops) + "]"
                self.waiting[rank] = Wait(rank, what, op[2], self.env.now)
                yield ev
                self.waiting[rank] = None
        for op in ops:
            if op[0] == _RECV:
                self.channels.pop((it,) + op[1], None)

    # -- iteration end, DP stream, memory ----------------------------------------------------
    def _end_iteration(self, rank: int, it: int):
        env = self.env
        compute, dps, _ = self.iter_cost
        if compute > 0 or dps:
            start = env.now
            if compute > 0:
                yield env.timeout(compute)
            self._issue_dp(rank, it, start, tuple((-1, d.ready_offset, d) for d in dps), 1.0)
        if self.debug:
            log.debug("t=%.0f [PP_COMPLETE] Stage %d finished all microbatches", env.now, rank)
        self.rec.rank_finish[it][rank] = env.now
        self.iter_end_candidates.append(env.now)
        self.finished += 1
        barrier = self.barrier
        if self.finished == self.schedule.pp:
            end = max(self.iter_end_candidates)
            start = self.rec.iteration_bounds[-1][1] if self.rec.iteration_bounds else 0.0
            self.rec.iteration_bounds.append((start, end))
            self.finished = 0
            self.iter_end_candidates = []
            self.barrier = env.event()
            fire_at(env, barrier, end - env.now)
        if self.schedule.flush or it == self.iterations - 1:
            self.waiting[rank] = Wait(rank, "the iteration barrier", None, env.now)
            yield barrier
            self.waiting[rank] = None

    def _issue_dp(self, rank: int, it: int, start: float,
                  items: tuple[tuple[int, float, DPCollective], ...], stretch: float) -> None:
        free = self.dp_free[rank]
        done = 0.0
        for chunk, offset, d in items:
            ready = start + offset * stretch
            s = free if free > ready else ready
            free = s + d.duration
            self.rec.collectives.append(CollectiveRecord(rank, chunk, d.layer, it, d.nbytes,
                                                         ready, s, free))
            done = max(done, free + d.update_ns)
            if chunk >= 0:
                key = (rank, chunk)
                self.dp_done_chunk[key] = max(self.dp_done_chunk.get(key, 0.0), free + d.update_ns)
        self.dp_free[rank] = free
        self.iter_end_candidates.append(done)

    def _allocate(self, rank: int, nbytes: float, acts: tuple, now: float) -> None:
        self.mem[rank] += nbytes
        m = self.mem[rank]
        if self.trace_layers:
            self.rec.memory.append((rank, now, m))
        if m > self.rec.peak_memory[rank]:
            self.rec.peak_memory[rank] = m
        if self.options.memory_limit_bytes is not None:
            self._check_memory(rank, now, "starting " + "+".join(str(a) for a in acts))

    def _check_memory(self, rank: int, now: float, what: str) -> None:
        limit = self.options.memory_limit_bytes
        m = self.mem[rank]
        if limit is not None and m > limit:
            raise OutOfMemoryError(
                f"rank {rank} out of memory at t={now:.0f} ns {what}: needs {m:.0f} bytes, "
                f"limit {limit:.0f} bytes ({m - limit:.0f} bytes over)")

    def _record_layers(self, rank: int, a, it: int, start: float, span: float, cost) -> None:
        scale = span / cost.duration if cost.duration else 0.0
        for seg in cost.segments:
            s = start + seg.offset * scale
            self.rec.layers.append(LayerRecord(rank, a.stage, a.microbatch, it, seg.layer,
                                               seg.state, s, s + seg.duration * scale))

    # -- document 000's debug lines ---------------------------------------------------------
    def _log(self, rank: int, acts: tuple, phases: tuple, now: float, starting: bool) -> None:
        for a, phase in zip(acts, phases):
            if not starting:
                tag = "PP_FWD_DONE" if a.kind == "F" else "PP_BWD_DONE"
                log.debug("t=%.0f [%s] Stage %d completed %s for microbatch %d", now, tag, rank,
                          _KIND_WORD[a.kind], a.microbatch)
                continue
            if phase == WARMUP:
                tag = "WARMUP"
            elif phase == COOLDOWN:
                tag = "COOLDOWN"
            else:
                tag = "STEADY-1F" if a.kind == "F" else "STEADY-1B"
            chunk = f" (virtual stage {a.stage})" if self.schedule.n_stages > self.schedule.pp else ""
            log.debug("t=%.0f [%s] Stage %d starting %s for microbatch %d%s", now, tag, rank,
                      _KIND_WORD[a.kind], a.microbatch, chunk)


def _describe(op: tuple) -> str:
    return str(op[4])
