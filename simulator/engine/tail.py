"""The iteration's tail: the data-parallel (DP) collectives, what a rank runs after its last
action, and the barrier that ends the iteration. Both walks call it - the SimPy engine's
step-by-step walk (``runtime``) and the evaluator's walk (``evaluator_async``, which the
engine's lookahead also runs) - so a rule written here holds for both, in one float order.

Compiled once per program (:func:`compile_tail`: per rank, its share of the once-per-iteration
rows, a :class:`RankTail`, inside a :class:`TailPlan`). Each run starts a :class:`Tail` from the
plan (:meth:`TailPlan.start`), which keeps every rank's DP stream and the iteration's latest
end, and writes the collective records, ``rank_finish`` and ``iteration_bounds``.

The interface the walks use, three calls, each answering in durations from the walk's own
clock (a walk adds them as ``now + d``: the SimPy engine as one timeout, the evaluator by the
same addition, so the two agree to the last bit):

- :meth:`Tail.dp` ``(r, it, start, items, stretch)``: an action that started at ``start``
  (stretched by ``stretch``: slow ranks, jitter) issues the DP collectives of the layers whose
  last microbatch it ran; each goes on rank ``r``'s communication stream, first in first out,
  when its gradient is ready.
- :meth:`Tail.finish` ``(r, it, now) -> (busy, records)``: what rank ``r`` runs after its last
  action at ``now`` (its share of the once-per-iteration rows, then their DP collectives);
  ``busy`` is how long its compute stream stays busy from ``now``, ``records`` the collective
  records to append once the walk is there.
- :meth:`Tail.arrive` ``(r, it, end) -> (last, wait) | None``: rank ``r`` is at the barrier at
  ``end``; the last one in gets the latest arrival and how long after it every rank goes on
  (the latest collective end plus its update, or the last rank's own end).

Megatron-LM's data parallelism (a :class:`~simulator.engine.options.DDPSettings`, written
here once for both walks): the layers' weight gradients go into buckets per chunk, filled in
backward order (last layer first), a bucket closing once it holds ``bucket_size`` parameters
(Megatron's rule, ``param_and_grad_buffer.py``); its collective (an all-reduce, or a
reduce-scatter with the distributed optimizer, of the parameters x the reduction's dtype) is one
:class:`DPCollective` issued when the layer that fills it has its last microbatch's gradient
(:meth:`TailPlan.chunk_costs` puts the buckets where the rows' own collectives were, so
:meth:`Tail.dp` issues them). Without ``--overlap-grad-reduce`` the chunk is one bucket, issued
by :meth:`Tail.finish` after the rank's last action and waited for there (blocking, as
Megatron's ``finalize_model_grads`` does). With a tied word embedding (the header's
``embedding_sync_params``) and more than one stage, its gradient is then all-reduced between the
first and the last rank (``finalize_model_grads`` again), once both are done and their streams
are free, before the step (not recorded as a collective: it is in the iteration's end). After
the barrier - the optimizer's gradient-norm
all-reduce over the model-parallel ranks makes every rank wait for the last - each rank runs
its optimizer step (memory-bound: ``step_bytes_per_param`` per parameter, 1/DP of them with the
distributed optimizer, and the zeroing of the whole gradient buffer, ``grad_bytes`` a parameter,
over the GPU's HBM bandwidth) and the distributed optimizer's
parameter all-gather (one per bucket, in the weights' dtype); the iteration ends when the
slowest rank is done. With ``--overlap-param-gather`` the all-gather runs behind the next
iteration's first forward: only what exceeds the rank's forward of one microbatch shows.
With FSDP2 resharding after every forward (no pipeline: :meth:`~.options.DDPSettings.reshards`)
every weight-carrying backward issues its buckets, not only the last, and no all-gather follows
the step: each F gathers its layers' weights itself, and each I and B too with
reshard_after_forward (costs.py ``gathers``, priced per layer by :func:`fsdp_gathers`).

A new rule of the tail changes only this module: bucketed DP (Megatron's gradient buckets:
:meth:`Tail.dp` holds layers until their bucket is full), a distributed optimizer
(reduce-scatter in :meth:`Tail.dp`, the all-gather after the step in :meth:`Tail.finish`), or
an optimizer step of a given duration per rank after its DP collectives (:meth:`Tail.dp` and
:meth:`Tail.finish` keep the rank's latest collective end, :meth:`Tail.finish` returns ``busy``
up to it plus the step; a new :class:`RankTail` field carries the step's duration from
:func:`compile_tail`). tests/engine/test_tail.py adds that step in a subclass and checks that
both walks give one timeline.
"""

from __future__ import annotations

from typing import NamedTuple

from ..errors import ConfigError
from ..schedules.schedule import Schedule
from ..system.collectives import group_size, ring_time_ns
from ..system.config import SystemConfig
from ..system.topology import LinkModel
from ..workload.iteration_rows import rank_iteration_rows
from ..workload.model import CommGroup, CommType, Header, Layer, Partition
from .costs import WEIGHT_GRADIENT, ChunkCosts, DPCollective, chunk_costs
from .records import CollectiveRecord, RunRecords

_INF = float("inf")

# the zero-bubble fork's pre-step message: the partially reduced found-inf flag and squared
# gradient norm, one fp32 each (megatron/core/optimizer/optimizer.py, send_pre_step)
PRESTEP_BYTES = 8


# a NamedTuple, not a dataclass: start-up (simulator/__init__.py)
class RankTail(NamedTuple):
    """What the once-per-iteration rows (AICB's DP/optimizer rows) cost one rank."""

    compute_ns: float
    dp: tuple[DPCollective, ...]   # ready_offset: from the start of the rows' compute
    layer_ops: int


NO_ROWS = RankTail(0.0, (), 0)


def rank_tail(layers: tuple[Layer, ...], header: Header, system: SystemConfig,
              links: LinkModel, tp_overlap: bool = False) -> RankTail:
    """The cost of a rank's once-per-iteration rows ``layers``: their forward then their
    backward, and the DP collectives of their weight gradients."""
    if not layers:
        return NO_ROWS
    c = chunk_costs(layers, {}, header, system, links, tp_overlap)
    dps = tuple(DPCollective(d.layer, c.F.duration + d.ready_offset, d.duration, d.update_ns,
                             d.nbytes) for d in c.dp_after_B)
    return RankTail(c.F.duration + c.B.duration, dps, c.F.layer_ops + c.B.layer_ops)


# a NamedTuple, not a dataclass: start-up (simulator/__init__.py)
class Bucket(NamedTuple):
    """One of Megatron's gradient buckets: the layers (file-order indices) whose gradients it
    holds, in backward order, the last one filling it."""

    group: CommGroup
    layers: tuple[int, ...]
    params: float
    update_ns: float


def chunk_buckets(layers: tuple[Layer, ...], grad_bytes_in_file: float,
                  size: int | None) -> tuple[Bucket, ...]:
    """The buckets of one chunk: its layers' parameters (a row's weight-gradient collective
    bytes / the file's bytes per gradient) taken last layer first, a bucket per group (DP, and
    the experts' DP-over-EP) closing once it holds ``size`` parameters (None: one bucket)."""
    out: list[Bucket] = []
    open_: dict[CommGroup, list] = {}
    for layer in reversed(layers):
        comm = layer.wg_comm
        if not comm.active or comm.group not in (CommGroup.DP, CommGroup.DP_EP):
            continue
        b = open_.setdefault(comm.group, [[], 0.0, 0.0])
        b[0].append(layer.index)
        b[1] += comm.bytes / grad_bytes_in_file
        b[2] += float(layer.update_time)
        if size is not None and b[1] >= size:
            out.append(Bucket(comm.group, tuple(b[0]), b[1], b[2]))
            del open_[comm.group]
    out += [Bucket(g, tuple(b[0]), b[1], b[2]) for g, b in open_.items()]
    return tuple(out)


# a NamedTuple, not a dataclass: start-up (simulator/__init__.py)
class RankDDP(NamedTuple):
    """Megatron's data parallelism on one rank: the buckets reduced after its last action
    (without ``--overlap-grad-reduce``), its optimizer step, its parameter all-gathers and its
    forward of one microbatch (what hides them with ``--overlap-param-gather``)."""

    blocking: tuple[tuple[int, DPCollective], ...]   # (chunk, collective)
    step_ns: float
    gather_ns: float
    forward_ns: float
    params: float

    def after_barrier(self, overlap_param_gather: bool) -> float:
        """How long the rank runs after the barrier: the step, then what of its all-gather
        shows."""
        gather = self.gather_ns
        if overlap_param_gather:
            gather = gather - self.forward_ns if gather > self.forward_ns else 0.0
        return self.step_ns + gather


# a NamedTuple, not a dataclass: start-up (simulator/__init__.py)
class MegatronDDP(NamedTuple):
    """The compiled data parallelism: per chunk its bucket collectives, per rank a
    :class:`RankDDP`."""

    settings: object                                   # DDPSettings
    chunk_dp: tuple[tuple[DPCollective, ...], ...]     # issued during the backward
    ranks: tuple[RankDDP, ...]
    bandwidth_gbs: float                               # HBM, bytes per ns; 0: step not priced
    embedding_ns: float = 0.0       # the tied embedding's all-reduce, first and last rank
    embedding_bytes: int = 0
    # with post-validation, per rank the arrival of the partial global state (found-inf flag
    # and gradient norm, 8 bytes) sent by the rank before it (0.0 for the first)
    prestep_ns: tuple[float, ...] = ()


def _collective(kind: CommType, group: CommGroup, nbytes: float, header: Header,
                links: LinkModel, rank: int) -> float:
    n = group_size(group, header, links.placement.pp)
    return ring_time_ns(kind, nbytes, n, links.collective(group, kind, rank))


def _shards(header: Header, system: SystemConfig, links: LinkModel) -> tuple[int, int]:
    """(shard ranks, replicas) of FSDP: ``memory.shard_ranks`` of the data-parallel ranks
    (``--fsdp N``; all of them by default), hybrid sharding replicating over the rest."""
    dp = group_size(CommGroup.DP, header, links.placement.pp)
    n = system.memory.shard_ranks or dp
    n = n if 0 < n < dp and dp % n == 0 else dp
    return n, dp // n


def _fsdp_gather(nbytes: float, header: Header, system: SystemConfig, links: LinkModel,
                 rank: int) -> float:
    """FSDP's all-gather of ``nbytes`` over its shard group (the innermost data-parallel
    ranks), so hybrid sharding's gathers stay on the shard group's links."""
    n, replicas = _shards(header, system, links)
    return ring_time_ns(CommType.ALLGATHER, nbytes, n,
                        links.collective(CommGroup.DP, CommType.ALLGATHER, rank,
                                         ranks=n if replicas > 1 else None))


def _fsdp_reduce(nbytes: float, header: Header, system: SystemConfig, links: LinkModel,
                 rank: int) -> float:
    """FSDP's gradient reduction of ``nbytes``: a reduce-scatter over the shard group, then
    with hybrid sharding an all-reduce of the shard over the replicas (FSDP2's HSDP, one
    after the other), each on its group's links."""
    n, replicas = _shards(header, system, links)
    if replicas == 1:
        return _collective(CommType.REDUCESCATTER, CommGroup.DP, nbytes, header, links, rank)
    return (ring_time_ns(CommType.REDUCESCATTER, nbytes, n, links.collective(
                CommGroup.DP, CommType.REDUCESCATTER, rank, ranks=n))
            + ring_time_ns(CommType.ALLREDUCE, nbytes / n, replicas, links.collective(
                CommGroup.DP, CommType.ALLREDUCE, rank, ranks=replicas, stride=n)))


def compile_ddp(schedule: Schedule, partition: Partition, header: Header,
                system: SystemConfig, links: LinkModel, ddp, costs) -> MegatronDDP:
    """Megatron's buckets for every chunk and the step / all-gather of every rank."""
    in_file = system.memory.grad_bytes(header.grad_bytes_per_param)
    dp = links.placement.dp
    size = ddp.bucket_size(dp)
    # FSDP2 resharding: each forward gathers its own weights (fsdp_gathers), none after the step
    reshards = ddp.reshards(schedule.pp)
    reduce = CommType.REDUCESCATTER if ddp.distributed_optimizer else CommType.ALLREDUCE
    rank_of = {schedule.stage_chunk[s]: r for r in range(schedule.pp)
               for s in schedule.stages_of(r)}
    bandwidth = system.memory.bandwidth_gbs
    chunk_dp: list[tuple[DPCollective, ...]] = []
    per_rank: list[list] = [[[], 0.0, 0.0, 0.0, 0.0] for _ in range(schedule.pp)]
    for c, layers in enumerate(partition.chunks):
        r = rank_of.get(c, 0)
        acc = per_rank[r]
        acc[3] += costs[c].F.duration
        out = []
        for b in chunk_buckets(layers, in_file, size):
            n = group_size(b.group, header, links.placement.pp)
            nbytes = b.params * ddp.grad_bytes
            d = DPCollective(b.layers[-1], 0.0,
                             _fsdp_reduce(nbytes, header, system, links, r)
                             if ddp.fsdp and b.group is CommGroup.DP else
                             _collective(reduce, b.group, nbytes, header, links, r),
                             b.update_ns, int(round(nbytes)))
            if n > 1:
                out.append(d)
            # the step on the rank's shard: FSDP's over its shard group (hybrid sharding
            # replicates the optimizer state over the replicas), the distributed optimizer's
            # over the whole DP
            shard = (_shards(header, system, links)[0] if ddp.fsdp and b.group is CommGroup.DP
                     else n if ddp.distributed_optimizer else 1)
            if bandwidth > 0:
                # the step on the rank's shard, and the zeroing of its whole gradient buffer;
                # FSDP2 gathering once an iteration (with a pipeline) copies its weights out of
                # the gather and its gradients into the reduce-scatter once, counted here
                copies = (ddp.fsdp_copy_out_bytes_per_param + ddp.fsdp_copy_in_bytes_per_param
                          if ddp.fsdp and not reshards and b.group is CommGroup.DP and n > 1
                          else 0.0)
                acc[1] += b.params * (ddp.step_bytes_per_param / shard
                                      + ddp.unsharded_step_bytes_per_param
                                      + (ddp.grad_bytes if ddp.zeroes_buffer else 0.0)
                                      + copies) / bandwidth
            if ddp.distributed_optimizer and n > 1 and not reshards:
                nbytes = b.params * ddp.param_bytes
                acc[2] += (_fsdp_gather(nbytes, header, system, links, r) if ddp.fsdp else
                           _collective(CommType.ALLGATHER, b.group, nbytes, header, links, r))
            acc[4] += b.params
        if ddp.overlap_grad_reduce:
            chunk_dp.append(tuple(out))
        else:
            chunk_dp.append(())
            acc[0] += [(c, d) for d in out]
    ranks = tuple(RankDDP(tuple(a[0]), a[1], a[2], a[3], a[4]) for a in per_rank)
    emb_ns, emb_bytes = 0.0, 0
    last = schedule.pp - 1
    if header.embedding_sync_params > 0 and last > 0:
        # Megatron's finalize_model_grads: after the gradients' data-parallel sync, the tied
        # word embedding's gradient (the first stage's table, the last stage's LM head copy)
        # all-reduced over the embedding group, those two ranks, on the link between them
        emb_bytes = int(round(header.embedding_sync_params * ddp.grad_bytes))
        emb_ns = ring_time_ns(CommType.ALLREDUCE, emb_bytes, 2, links.p2p(0, last))
    prestep: tuple[float, ...] = ()
    if ddp.post_validation:
        if not schedule.flush:
            raise ConfigError(f"--optimizer-post-validation: expected a schedule with a flush, "
                              f"got {schedule.name} (its minibatches already run as one "
                              "continuous schedule)")
        prestep = (0.0,) + tuple(links.p2p(r - 1, r).transfer_ns(PRESTEP_BYTES)
                                 for r in range(1, schedule.pp))
    return MegatronDDP(ddp, tuple(chunk_dp), ranks, bandwidth, emb_ns, emb_bytes, prestep)



def fsdp_gathers(schedule: Schedule, partition: Partition, header: Header,
                 system: SystemConfig, links: LinkModel, ddp
                 ) -> list[dict[int, tuple[float, float, float]]] | None:
    """Per chunk, for each layer FSDP2 resharding after every forward gathers in each F (and I
    and B; :meth:`~.options.DDPSettings.reshards`; costs.py's ``gathers``): the all-gather's
    time, the layer's parameters (its gradient collective's bytes over the file's bytes a
    parameter) in the gathered dtype over FSDP's shard group (:func:`_fsdp_gather`); its
    copy-out's and the reduce-scatter's copy-in's time on the compute stream, their bytes a
    parameter (:class:`~.options.DDPSettings`) over the GPU's elementwise HBM rate. None when
    the run does not reshard."""
    if ddp is not None and ddp.fsdp and ddp.reshard == "always" and schedule.pp > 1:
        raise ConfigError(f"--fsdp-reshard-after-forward always: expected default or never "
                          f"with a pipeline (pp {schedule.pp}): FSDP2 resharding after every "
                          "forward under torch's PipelineStage is not modelled")
    if ddp is None or not ddp.reshards(schedule.pp):
        return None
    in_file = system.memory.grad_bytes(header.grad_bytes_per_param)
    bandwidth = system.memory.bandwidth_gbs
    out = []
    for layers in partition.chunks:
        times = {}
        for layer in layers:
            comm = layer.wg_comm
            if comm.active and group_size(comm.group, header, links.placement.pp) > 1:
                params = comm.bytes / in_file
                times[layer.index] = (
                    _fsdp_gather(params * ddp.param_bytes, header, system, links, 0),
                    params * ddp.fsdp_copy_out_bytes_per_param / bandwidth if bandwidth else 0.0,
                    params * ddp.fsdp_copy_in_bytes_per_param / bandwidth if bandwidth else 0.0)
        out.append(times)
    return out


def compile_tail(schedule: Schedule, partition: Partition, header: Header,
                 system: SystemConfig, links: LinkModel, ddp=None,
                 costs: list[ChunkCosts] | None = None, tp_overlap: bool = False) -> "TailPlan":
    """Every rank's share of the once-per-iteration rows (the chunks it runs decide it), and
    with ``ddp`` (a :class:`~simulator.engine.options.DDPSettings`; ``costs``: the chunks'
    costs) Megatron's data parallelism."""
    by_share: dict[tuple[int, ...], RankTail] = {}
    ranks: list[RankTail] = []
    for r in range(schedule.pp):
        chunks = tuple(sorted({schedule.stage_chunk[s] for s in schedule.stages_of(r)}))
        rows = by_share.get(chunks)
        if rows is None:
            own = rank_iteration_rows(partition, chunks, schedule.pp)
            rows = by_share[chunks] = rank_tail(own, header, system, links, tp_overlap)
        ranks.append(rows)
    if ddp is None:
        return TailPlan(tuple(ranks))
    if costs is None:
        from .costs import partition_costs

        costs = partition_costs(partition, header, system, links, tp_overlap)
    return TailPlan(tuple(ranks), compile_ddp(schedule, partition, header, system, links, ddp,
                                              costs))


def _at_gradient(cost, bucket: DPCollective) -> DPCollective:
    """``bucket`` ready when its filling layer's weight gradient is done in ``cost``."""
    for seg in cost.segments:
        if seg.state == WEIGHT_GRADIENT and seg.layer == bucket.layer:
            return bucket._replace(ready_offset=seg.offset + seg.duration)
    return bucket._replace(ready_offset=cost.duration)


def issue_dp(rank: int, it: int, free: float, start: float,
             items, stretch: float, append) -> tuple[float, float]:
    """Issue ``items`` ((chunk, ready offset, :class:`DPCollective`)) on ``rank``'s
    communication stream, free from ``free``: each starts when its gradient is ready (``start +
    offset x stretch``) and the stream is free, first in first out, and is recorded by
    ``append``. Returns when the stream is free again and the latest end plus its layer's
    update (0.0 without items)."""
    done = 0.0
    for chunk, offset, d in items:
        ready = start + offset * stretch
        s = free if free > ready else ready
        free = s + d.duration
        append(CollectiveRecord(rank, chunk, d.layer, it, d.nbytes, ready, s, free))
        x = free + d.update_ns
        if x > done:
            done = x
    return free, done


# a NamedTuple, not a dataclass: start-up (simulator/__init__.py)
class TailPlan(NamedTuple):
    """The compiled tail of a program: per rank, its :class:`RankTail`."""

    ranks: tuple[RankTail, ...]
    ddp: MegatronDDP | None = None

    @property
    def layer_ops(self) -> int:
        return sum(rows.layer_ops for rows in self.ranks)

    def chunk_costs(self, costs: list[ChunkCosts]) -> list[ChunkCosts]:
        """``costs`` with Megatron's bucket collectives in place of the rows' own (unchanged
        without ``ddp``)."""
        if self.ddp is None:
            return costs
        return [c._replace(dp_after_W=tuple(_at_gradient(c.W, d) for d in dps),
                           dp_after_B=tuple(_at_gradient(c.B, d) for d in dps))
                for c, dps in zip(costs, self.ddp.chunk_dp)]

    def start(self, rec: RunRecords) -> "Tail":
        """One run's tail, writing into ``rec`` (its ``rank_finish`` already sized)."""
        return Tail(self.ranks, rec, self.ddp)


# a plain class, not a dataclass: start-up (simulator/__init__.py); one run's state
class Tail:
    """One run's iteration tail (see the module docstring)."""

    __slots__ = ("ranks", "rec", "free", "cand", "finished", "_append", "ddp", "after",
                 "alone", "own", "pending")

    def __init__(self, ranks: tuple[RankTail, ...], rec: RunRecords,
                 ddp: MegatronDDP | None = None) -> None:
        P = len(ranks)
        self.ranks = ranks
        self.rec = rec
        self.ddp = ddp
        # what every rank runs after the barrier: the slowest rank's step and all-gather
        self.after = 0.0 if ddp is None else max(
            (d.after_barrier(ddp.settings.overlap_param_gather) for d in ddp.ranks),
            default=0.0)
        self.free = [0.0] * P          # each rank's communication stream is free from then
        self.cand = -_INF              # the latest end of the iteration so far
        self.finished = 0              # ranks at the barrier
        self._append = rec.collectives.append
        # post-validation: no barrier; each rank's latest collective end (its own step waits
        # for it), and per iteration not yet ended [ready, pre-step start, went on] per rank
        self.alone = ddp is not None and ddp.settings.post_validation
        self.own = [-_INF] * P
        self.pending: dict[int, list] = {}

    def dp(self, r: int, it: int, start: float, items, stretch: float) -> None:
        """Rank ``r``'s action that started at ``start`` issues ``items`` ((chunk, ready
        offset, :class:`DPCollective`), the offsets stretched by ``stretch``)."""
        self.free[r], done = issue_dp(r, it, self.free[r], start, items, stretch, self._append)
        if done > self.cand:
            self.cand = done
        if done > self.own[r]:
            self.own[r] = done

    def finish(self, r: int, it: int, now: float) -> tuple[float, list | tuple]:
        """Rank ``r`` ran its last action of iteration ``it`` by ``now``: its rows' compute,
        then their DP collectives, each ready ``ready_offset`` after the compute starts.
        Returns how long the compute stream is busy from ``now`` (0.0: not at all) and the
        collective records, for the walk to append when it gets there."""
        rows = self.ranks[r]
        compute, dps = rows.compute_ns, rows.dp
        blocking = self.ddp.ranks[r].blocking if self.ddp is not None else ()
        if not (compute > 0 or dps or blocking):
            return 0.0, ()
        records: list = []
        self.free[r], done = issue_dp(r, it, self.free[r], now,
                                      [(-1, d.ready_offset, d) for d in dps], 1.0,
                                      records.append)
        if done > self.cand:
            self.cand = done
        if done > self.own[r]:
            self.own[r] = done
        busy = compute if compute > 0 else 0.0
        if blocking:
            # Megatron without --overlap-grad-reduce: every bucket after the rank's last
            # action (and its rows' compute), the rank waiting until they are done
            self.free[r], done = issue_dp(r, it, self.free[r], now,
                                          [(c, busy, d) for c, d in blocking], 1.0,
                                          records.append)
            if done > self.cand:
                self.cand = done
            if done > self.own[r]:
                self.own[r] = done
            if done - now > busy:
                busy = done - now
        return busy, records

    def arrive_alone(self, r: int, it: int, end: float) -> list[tuple[int, float]]:
        """Rank ``r`` ends iteration ``it`` at ``end``, under the zero-bubble fork's optimizer
        post-validation (``--enable-optimizer-post-validation``): no barrier. A rank steps
        once its own collectives are done and the partially reduced global state (found-inf
        flag, gradient norm) has come from the rank before it (``pre_step``'s
        ``recv_pre_step``: the first rank needs none), then goes on with the next iteration;
        the validation sent back through the ranks during the next iteration's first forwards
        is not waited for. The tied embedding's all-reduce holds each of its two ranks for its
        own time after the rank's end (the fork issues it at the start of the last weight-
        gradient flush, ``WeightGradStore.clear``, "so that the rank 0 won't be blocked").
        Returns ``(rank, when it goes on)`` for every rank that goes on now: ``r``, and the
        ranks after it that were waiting for it. The iteration ends when its last rank goes
        on."""
        rec = self.rec
        rec.rank_finish[it][r] = end
        ddp = self.ddp
        P = len(self.ranks)
        ready = end if end > self.own[r] else self.own[r]
        self.own[r] = -_INF
        if ddp.embedding_ns > 0 and r in (0, P - 1) and P > 1:
            s = ready if ready > self.free[r] else self.free[r]
            ready = self.free[r] = s + ddp.embedding_ns
        state = self.pending.get(it)
        if state is None:
            state = self.pending[it] = [[None] * P, [None] * P, []]
        readies, pres, went = state
        readies[r] = ready
        out: list[tuple[int, float]] = []
        q = r
        while q < P and readies[q] is not None and (q == 0 or pres[q - 1] is not None):
            p = readies[q]
            if q:
                x = pres[q - 1] + ddp.prestep_ns[q]
                if x > p:
                    p = x
            pres[q] = p
            go = p + ddp.ranks[q].after_barrier(ddp.settings.overlap_param_gather)
            out.append((q, go))
            went.append(go)
            q += 1
        if len(went) == P:
            del self.pending[it]
            bounds = rec.iteration_bounds
            bounds.append((bounds[-1][1] if bounds else 0.0, max(went)))
        return out

    def arrive(self, r: int, it: int, end: float) -> tuple[float, float] | None:
        """Rank ``r`` is at the barrier of iteration ``it`` at ``end``. None until the last
        rank is in; then ``(last, wait)``: every rank goes on at ``last + wait`` (the latest
        arrival, then the latest collective end plus update, or the latest arrival itself)."""
        rec = self.rec
        finish = rec.rank_finish[it]
        finish[r] = end
        if end > self.cand:
            self.cand = end
        self.finished += 1
        if self.finished < len(self.ranks):
            return None
        cand = self.cand
        ddp = self.ddp
        if ddp is not None and ddp.embedding_ns > 0:
            # the tied embedding's all-reduce: once the first and the last rank are done and
            # their communication streams are free; the step's gradient norm waits for it
            p = len(self.ranks) - 1
            a, b = self.free[0], self.free[p]
            s = a if a > b else b
            for x in (finish[0], finish[p]):
                if x > s:
                    s = x
            e = s + ddp.embedding_ns
            self.free[0] = self.free[p] = e
            if e > cand:
                cand = e
        cand = cand + self.after        # Megatron's step and all-gather after the barrier
        bounds = rec.iteration_bounds
        bounds.append((bounds[-1][1] if bounds else 0.0, cand))
        self.finished = 0
        self.cand = -_INF
        last = max(finish)
        return last, cand - last
