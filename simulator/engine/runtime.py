"""The runtime: one long-lived SimPy process per pipeline rank runs that rank's Workload FSM over
its op list (compute steps with the receives and sends the comm pass added).

Per rank there are two streams. The compute stream runs actions back to back; an action's
layers go through Forward_Pass / Forward_In_BackPass / Input_Gradient / Weight_Gradient with
their blocking TP/EP collectives, and the whole action costs one SimPy timeout (per-layer times
are derived, see ``costs``). The communication stream carries each layer's weight-gradient (DP)
collective, issued when the last microbatch's weight gradient of that layer is done (gradient
accumulation), first in first out. Point-to-point sends are asynchronous (isend): the sender
books the link and goes on; the receiver waits on a bare event that fires when the data lands.

An iteration ends when every rank has finished its actions and every DP collective and layer
update is done; with a flush the next iteration starts then (the optimizer step is a barrier).
If the event queue empties while a rank still waits, the run is a deadlock: reported with what
every blocked rank waits for.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

import simpy
from simpy.events import NORMAL

from ..errors import DeadlockError, Wait
from ..metrics.phases import COOLDOWN, WARMUP, phase_labels
from ..schedules.comm_pass import Compute, Transfer, add_communication
from ..schedules.schedule import Schedule
from ..system.config import SystemConfig
from ..workload.model import Header, Partition
from .costs import ChunkCosts, DPCollective, partition_costs
from .network import Network
from .records import ActionRecord, CollectiveRecord, LayerRecord, TransferRecord

log = logging.getLogger("pipesim.engine")

_RECV, _COMPUTE, _SEND = 0, 1, 2
_KIND_WORD = {"F": "forward", "B": "backward", "I": "input-gradient backward",
              "W": "weight-gradient backward"}


def _fire_at(env: simpy.Environment, event: simpy.Event, delay: float) -> None:
    """Trigger a bare event ``delay`` ns from now (what ``Timeout`` does, for an existing event)."""
    event._ok = True
    event._value = None
    env.schedule(event, NORMAL, delay)


@dataclass
class RunRecords:
    actions: list[ActionRecord] = field(default_factory=list)
    transfers: list[TransferRecord] = field(default_factory=list)
    collectives: list[CollectiveRecord] = field(default_factory=list)
    layers: list[LayerRecord] = field(default_factory=list)
    iteration_bounds: list[tuple[float, float]] = field(default_factory=list)
    rank_finish: list[list[float]] = field(default_factory=list)  # [iteration][rank]
    links: dict = field(default_factory=dict)
    layer_ops: int = 0


@dataclass
class _Step:
    """A compiled compute op: one action or an overlapped pair."""

    duration: float
    parts: tuple  # ((action, phase, start_fraction, end_fraction, chunk, ActionCost), ...)
    dp: tuple[tuple[int, float, DPCollective], ...]  # (chunk, offset in step, collective)
    fwd_chunks: tuple[int, ...]
    label: str


class Runtime:
    def __init__(self, schedule: Schedule, partition: Partition, header: Header,
                 system: SystemConfig, *, iterations: int = 1, pp_comm: int | None = None,
                 trace_layers: bool = False) -> None:
        self.schedule = schedule
        self.partition = partition
        self.header = header
        self.system = system
        self.iterations = iterations
        self.pp_comm = header.pp_comm if pp_comm is None else pp_comm
        self.trace_layers = trace_layers
        self.costs: list[ChunkCosts] = partition_costs(partition, header, system)
        self.iter_cost = self._iteration_layers_cost()
        self.programs = add_communication(schedule)
        self.labels = [phase_labels(acts) for acts in schedule.ranks]
        self.compiled = [self._compile(r) for r in range(schedule.pp)]
        self.layer_ops_per_iteration = sum(
            part[5].layer_ops for prog in self.compiled for op in prog if op[0] == _COMPUTE
            for part in op[1].parts) + schedule.pp * self.iter_cost[2]

    # -- compile ---------------------------------------------------------------------------
    def _iteration_layers_cost(self) -> tuple[float, tuple[DPCollective, ...], int]:
        """(compute-stream ns, DP collectives, layer ops) of the once-per-iteration rows."""
        layers = self.partition.iteration_layers
        if not layers:
            return (0.0, (), 0)
        from .costs import chunk_costs

        c = chunk_costs(layers, {}, self.header, self.system)
        total = c.F.duration + c.B.duration
        dps = tuple(DPCollective(d.layer, c.F.duration + d.ready_offset, d.duration, d.update_ns,
                                 d.nbytes) for d in c.dp_after_B)
        return (total, dps, c.F.layer_ops + c.B.layer_ops)

    def _compile(self, rank: int) -> list[tuple]:
        sched = self.schedule
        actions = sched.ranks[rank]
        labels = self.labels[rank]
        phase_of = {id(a): labels[i] for i, a in enumerate(actions)}
        # the last weight-carrying backward of each stage on this rank issues its DP collectives
        last_wb: dict[int, int] = {}
        split = {(a.stage, a.microbatch) for a in actions if a.kind == "W"}
        for i, a in enumerate(actions):
            if a.kind == "W" or (a.kind == "B" and (a.stage, a.microbatch) not in split):
                last_wb[a.stage] = i
        last_ids = {id(actions[i]) for i in last_wb.values()}
        ops: list[tuple] = []
        for op in self.programs[rank]:
            if isinstance(op, Transfer):
                if op.op == "recv":
                    ops.append((_RECV, op.key, op.src_rank, str(op)))
                else:
                    nbytes = self.pp_comm
                    ops.append((_SEND, op.key, op.dst_rank, nbytes, op))
                continue
            ops.append((_COMPUTE, self._step(op, phase_of, last_ids)))
        return ops

    def _step(self, op: Compute, phase_of: dict, last_ids: set) -> _Step:
        chunk_of = self.schedule.stage_chunk
        costs = [self.costs[chunk_of[a.stage]].of(a.kind) for a in op.actions]
        total = sum(c.duration for c in costs)
        if len(costs) > 1:  # overlapped pair: communication hides under the other half's compute
            comm = sum(c.comm for c in costs)
            duration = max(total - comm, comm)
        else:
            duration = total
        parts = []
        dp = []
        acc = 0.0
        for a, c in zip(op.actions, costs):
            lo = acc / total if total else 0.0
            acc += c.duration
            hi = acc / total if total else 0.0
            chunk = chunk_of[a.stage]
            parts.append((a, phase_of[id(a)], lo, hi, chunk, c))
            if id(a) in last_ids:
                offset = lo * duration
                scale = (duration / total) if total else 0.0
                for d in self.costs[chunk].dp_after(a.kind):
                    dp.append((chunk, offset + d.ready_offset * scale, d))
        fwd_chunks = tuple(chunk_of[a.stage] for a in op.actions if a.kind == "F")
        return _Step(duration, tuple(parts), tuple(dp), fwd_chunks, str(op))

    # -- run -------------------------------------------------------------------------------
    def run(self) -> RunRecords:
        env = self.env = simpy.Environment()
        self.rec = RunRecords()
        self.net = Network(self.system)
        self.mailbox: dict = {}
        self.waiting: dict[int, Wait | None] = {}
        self.finished = 0
        self.dp_free = [0.0] * self.schedule.pp          # communication stream per rank
        self.dp_done_chunk: dict[tuple[int, int], float] = {}
        self.iter_end_candidates: list[float] = []
        self.barrier = env.event()
        self.debug = log.isEnabledFor(logging.DEBUG)
        self.rec.rank_finish = [[0.0] * self.schedule.pp for _ in range(self.iterations)]
        procs = [env.process(self._rank(r)) for r in range(self.schedule.pp)]
        env.run()
        stuck = [r for r, p in enumerate(procs) if p.is_alive]
        if stuck:
            waits = [self.waiting.get(r) or Wait(r, "an unknown event", None, env.now) for r in stuck]
            raise DeadlockError(waits, env.now)
        self.rec.links = self.net.links
        self.rec.layer_ops = self.layer_ops_per_iteration * self.iterations
        return self.rec

    def _rank(self, rank: int):
        env = self.env
        program = self.compiled[rank]
        mailbox = self.mailbox
        rec_actions = self.rec.actions.append
        debug = self.debug
        for it in range(self.iterations):
            for op in program:
                code = op[0]
                if code == _COMPUTE:
                    step: _Step = op[1]
                    for chunk in step.fwd_chunks:   # Forward_Pass waits for a pending WG collective
                        ready = self.dp_done_chunk.get((rank, chunk), 0.0)
                        if ready > env.now:
                            yield env.timeout(ready - env.now)
                    start = env.now
                    if debug:
                        self._log_start(rank, step, start)
                    if step.duration > 0:
                        yield env.timeout(step.duration)
                    end = env.now
                    span = end - start
                    for a, phase, lo, hi, chunk, cost in step.parts:
                        s0 = start + lo * span
                        rec_actions(ActionRecord(rank, a.stage, a.kind, a.microbatch, it, s0,
                                                 start + hi * span, phase, chunk, a.pair))
                        if self.trace_layers:
                            self._record_layers(rank, a, it, s0, (hi - lo) * span, cost)
                    if step.dp:
                        self._issue_dp(rank, it, start, step.dp)
                    if debug:
                        self._log_end(rank, step, end)
                elif code == _RECV:
                    key = (it,) + op[1]
                    ev = mailbox.get(key)
                    if ev is None:
                        ev = mailbox[key] = env.event()
                    if ev.callbacks is not None:   # not yet processed: wait for the data
                        self.waiting[rank] = Wait(rank, op[3], op[2], env.now)
                        yield ev
                        self.waiting[rank] = None
                    del mailbox[key]
                else:  # _SEND
                    _, key, dst, nbytes, t = op
                    now = env.now
                    start, end = self.net.transfer(rank, dst, nbytes, now)
                    self.rec.transfers.append(TransferRecord(
                        rank, dst, t.src_stage, t.dst_stage, t.data, t.microbatch, it, nbytes,
                        now, start, end))
                    mkey = (it,) + key
                    ev = mailbox.get(mkey)
                    if ev is None:
                        mailbox[mkey] = env.timeout(end - now)
                    else:
                        _fire_at(env, ev, end - now)
            yield from self._end_iteration(rank, it)

    def _end_iteration(self, rank: int, it: int):
        env = self.env
        compute, dps, _ = self.iter_cost
        if compute > 0 or dps:
            start = env.now
            if compute > 0:
                yield env.timeout(compute)
            self._issue_dp(rank, it, start, tuple((-1, d.ready_offset, d) for d in dps))
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
            _fire_at(env, barrier, end - env.now)
        if self.schedule.flush or it == self.iterations - 1:
            yield barrier

    def _issue_dp(self, rank: int, it: int, start: float,
                  items: tuple[tuple[int, float, DPCollective], ...]) -> None:
        free = self.dp_free[rank]
        done = 0.0
        for chunk, offset, d in items:
            ready = start + offset
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

    def _record_layers(self, rank: int, a, it: int, start: float, span: float, cost) -> None:
        scale = span / cost.duration if cost.duration else 0.0
        for seg in cost.segments:
            s = start + seg.offset * scale
            self.rec.layers.append(LayerRecord(rank, a.stage, a.microbatch, it, seg.layer,
                                               seg.state, s, s + seg.duration * scale))

    # -- document 000's debug lines ---------------------------------------------------------
    def _log_start(self, rank: int, step: _Step, now: float) -> None:
        for a, phase, *_ in step.parts:
            if phase == WARMUP:
                tag = "WARMUP"
            elif phase == COOLDOWN:
                tag = "COOLDOWN"
            else:
                tag = "STEADY-1F" if a.kind == "F" else "STEADY-1B"
            chunk = f" (virtual stage {a.stage})" if self.schedule.n_stages > self.schedule.pp else ""
            log.debug("t=%.0f [%s] Stage %d starting %s for microbatch %d%s", now, tag, rank,
                      _KIND_WORD[a.kind], a.microbatch, chunk)

    def _log_end(self, rank: int, step: _Step, now: float) -> None:
        for a, *_ in step.parts:
            tag = "PP_FWD_DONE" if a.kind == "F" else "PP_BWD_DONE"
            log.debug("t=%.0f [%s] Stage %d completed %s for microbatch %d", now, tag, rank,
                      _KIND_WORD[a.kind], a.microbatch)

