"""Run a schedule's per-rank op lists (after the comm pass) on real numpy arrays.

Every rank walks its own list in order; a receive waits until the matching send has put its
array in the channel (keyed like the comm pass's ``Transfer.key``: data, consuming stage,
microbatch). The interpreter goes round-robin: each rank runs while its next op can run; when no
rank can and some are unfinished, that is a deadlock (:class:`ExecutionDeadlock`, naming every
blocked rank and the receive it waits on).

Nothing is ever guessed: a compute whose input has not arrived, a backward without its forward's
activations, a W without its I, a send of something not computed, or anything left over at the
end (an unreceived send, an unreleased stash, an incomplete gradient) is a
:class:`~simulator.errors.ScheduleError` naming rank, position and action.

F stashes each layer's input and output (and, on a pipeline's last stage, the loss gradient);
I turns that stash into what W needs (each layer's input and pre-activation gradient); W and B
release it. Stash entries are what the activation peaks count.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Sequence

import numpy as np

from ..errors import DeadlockError, ScheduleError, Wait
from ..schedules.action import Action
from ..schedules.comm_pass import ACTIVATION, GRADIENT, Compute, Op, Transfer, op_lists
from ..schedules.schedule import Schedule
from ..schedules.validate import check_place
from ..schedules.action import Kind
from .model import Activations, Model, Params, forward, input_grad, mse, mse_grad, weight_grad
from .semantics import Training, training_of


@dataclass(frozen=True)
class RankStats:
    """What one rank did and held at most (counted after every action)."""

    rank: int
    peak_microbatches: int   # distinct microbatches with a live stash entry
    peak_activations: int    # live (stage, microbatch) stash entries
    peak_bytes: int          # bytes of the arrays in those entries
    actions: int
    transfers: int


@dataclass(frozen=True)
class Execution:
    losses: tuple[float, ...]            # per minibatch: mean over its microbatches
    grads: tuple[Params, ...]            # per minibatch, per layer
    final_params: Params                 # per layer, after every applied update
    ranks: tuple[RankStats, ...]
    peak_weight_versions: tuple[int, ...]  # per chunk: versions needed at once (latest + in use)
    ops: int                             # ops executed, all ranks


_NAMES = {ACTIVATION: "activation", GRADIENT: "gradient"}


class ExecutionDeadlock(DeadlockError):
    """No rank can go on. The executor has no clock, so ``time_ns`` is 0 and unused."""

    def __init__(self, waits: list[Wait], status: dict[int, str], executed: int) -> None:
        super().__init__(waits, 0.0)
        detail = "; ".join(f"rank {w.rank} waits on {w.op} from rank {w.peer} "
                           f"({status[w.peer]})" for w in waits)
        self.args = (f"deadlock in the numeric executor after {executed} ops: {detail}",)


@dataclass
class _Stash:
    kind: str                 # "F" (forward activations) or "I" (what W needs)
    version: int
    action: str               # the action that created or last changed it
    acts: Activations | None = None
    keep: list | None = None
    dy: np.ndarray | None = None  # loss gradient, on a pipeline's last stage
    nbytes: int = 0


@dataclass
class _Rank:
    rank: int
    ops: tuple[Op, ...]
    pc: int = 0
    position: int = 0         # index of the next action in the schedule's list for this rank
    inbox: dict = field(default_factory=dict)    # key -> array, ready for a local compute
    outbox: dict = field(default_factory=dict)   # key -> array, computed, waiting for its send
    stash: dict = field(default_factory=dict)    # (stage, microbatch) -> _Stash
    per_mb: Counter = field(default_factory=Counter)
    held_bytes: int = 0
    peak_mb: int = 0
    peak_act: int = 0
    peak_bytes: int = 0
    transfers: int = 0

    @property
    def finished(self) -> bool:
        return self.pc >= len(self.ops)


def execute(schedule: Schedule, model: Model, xs: Sequence[np.ndarray],
            ts: Sequence[np.ndarray], *, lr: float = 0.1,
            programs: Sequence[Sequence[Op]] | None = None) -> Execution:
    """Train ``model`` on microbatches ``xs``/``ts`` as ``schedule`` orders it.

    A compute-only ``schedule`` is lowered by the comm pass; a lowered one runs with its own
    receives and sends. ``programs`` replaces the op lists (to test hand-broken programs).
    """
    return _Executor(schedule, model, xs, ts, lr, programs).run()


class _Executor:
    def __init__(self, schedule: Schedule, model: Model, xs, ts, lr: float, programs) -> None:
        self.s = schedule
        self.model = model
        self.xs, self.ts = xs, ts
        self.lr = lr
        self.training: Training = training_of(schedule)
        _check_layout(schedule, model, len(xs))
        if programs is None:
            programs = op_lists(schedule)
        if len(programs) != schedule.pp:
            raise ScheduleError(f"expected one op list per rank ({schedule.pp}), "
                                f"found {len(programs)}")
        self.ranks = [_Rank(r, tuple(ops)) for r, ops in enumerate(programs)]
        self.prev = [schedule.prev_stage(st) for st in range(schedule.n_stages)]
        self.next = [schedule.next_stage(st) for st in range(schedule.n_stages)]
        n_chunks = len(model.bounds)
        self.versions: list[list[Params]] = [[model.chunk_params(c)] for c in range(n_chunks)]
        self.in_use: Counter = Counter()           # (chunk, version) -> live stash entries
        self.peak_versions = [1] * n_chunks
        self.acc: dict[tuple[int, int], tuple[Params, set[int]]] = {}
        self.grads: dict[int, dict[int, Params]] = {}
        self.losses = [0.0] * self.training.iterations
        self.loss_stage: dict[int, int] = {}       # microbatch -> stage that computed its loss
        self.channel: dict[tuple, tuple[int, np.ndarray]] = {}
        self.done: dict[tuple[int, str, int], tuple[int, int]] = {}
        self.executed = 0

    # -- interpreter -------------------------------------------------------------------------
    def run(self) -> Execution:
        progress = True
        while progress:
            progress = False
            for rank in self.ranks:
                while not rank.finished and self._step(rank):
                    progress = True
        blocked = [r for r in self.ranks if not r.finished]
        if blocked:
            waits = [Wait(r.rank, str(r.ops[r.pc]), r.ops[r.pc].src_rank, 0.0) for r in blocked]
            status = {}
            for r in self.ranks:
                status[r.rank] = ("finished" if r.finished
                                  else f"itself blocked on {r.ops[r.pc]}")
            raise ExecutionDeadlock(waits, status, self.executed)
        self._check_leftovers()
        return self._result()

    def _step(self, rank: _Rank) -> bool:
        """Run ``rank``'s next op if it can run now; False if it must wait (a receive)."""
        op = rank.ops[rank.pc]
        if isinstance(op, Transfer):
            if op.op in ("recv", "wait"):     # a blocking receive, or the wait of a posted one
                if not self._recv(rank, op):
                    return False
            elif op.op == "send":
                self._send(rank, op)
            if op.op != "irecv":              # posting a receive moves nothing yet
                rank.transfers += 1
        else:
            self._compute(rank, op)
        rank.pc += 1
        self.executed += 1
        return True

    def _recv(self, rank: _Rank, op: Transfer) -> bool:
        item = self.channel.get(op.key)
        if item is None:
            return False
        src, array = item
        if src != op.src_rank:
            raise ScheduleError(f"receives from rank {op.src_rank}, but rank {src} sent it",
                                rank.rank, None, str(op))
        del self.channel[op.key]
        if op.key in rank.inbox:
            raise ScheduleError("received twice before being used", rank.rank, None, str(op))
        rank.inbox[op.key] = array
        return True

    def _send(self, rank: _Rank, op: Transfer) -> None:
        array = rank.outbox.pop(op.key, None)
        if array is None:
            producer = f"{op.src_stage}{'F' if op.data == ACTIVATION else 'B/I'}{op.microbatch}"
            raise ScheduleError(f"sends data this rank has not computed ({producer} has not run "
                                f"here, or its output was already sent)", rank.rank, None,
                                str(op))
        if op.key in self.channel:
            raise ScheduleError("sent twice before the first copy was received", rank.rank,
                                None, str(op))
        self.channel[op.key] = (rank.rank, array)

    # -- compute ---------------------------------------------------------------------------
    def _compute(self, rank: _Rank, op: Compute) -> None:
        positions = range(rank.position, rank.position + len(op.actions))
        for pos, a in zip(positions, op.actions):   # both halves of a pair start together
            self._require(rank, pos, a)
        for pos, a in zip(positions, op.actions):
            self.done[a.key] = (rank.rank, pos)
            {Kind.F: self._forward, Kind.B: self._backward, Kind.I: self._backward,
             Kind.W: self._weight}[a.kind](rank, pos, a)
            self._measure(rank, self.s.stage_chunk[a.stage])
        rank.position += len(op.actions)

    def _require(self, rank: _Rank, pos: int, a: Action) -> None:
        """Raise unless everything ``a`` reads is on this rank now."""
        def fail(message: str) -> None:
            raise ScheduleError(message, rank.rank, pos, str(a))

        if a.key in self.done:
            r0, p0 = self.done[a.key]
            fail(f"already ran at rank {r0} position {p0}")
        st, m = a.stage, a.microbatch
        chunk = self.s.stage_chunk[st]
        entry = rank.stash.get((st, m))
        if a.kind == Kind.F:
            v = self.training.weight_version[m]
            if v >= len(self.versions[chunk]):
                fail(f"needs weight version {v} of chunk {chunk}, but only versions "
                     f"0..{len(self.versions[chunk]) - 1} exist here: the update of minibatch "
                     f"{v - 1} waits for all its backwards on chunk {chunk}")
            src = self.prev[st]
            if src is not None and (ACTIVATION, st, m) not in rank.inbox:
                fail(f"needs the activation of {src}F{m}, which has not reached rank "
                     f"{rank.rank}{self._local_hint(rank, src, 'F', m)}")
            return
        if a.kind in (Kind.B, Kind.I):
            if entry is None:
                fail(f"no activations of stage {st} microbatch {m} on this rank: "
                     f"{self._absent_forward(st, m)}")
            if entry.kind != Kind.F:
                fail(f"stage {st} microbatch {m} already ran its input gradient ({entry.action})")
            src = self.next[st]
            if src is not None and (GRADIENT, st, m) not in rank.inbox:
                fail(f"needs the gradient from stage {src}'s backward for microbatch {m}, which "
                     f"has not reached rank {rank.rank}"
                     f"{self._local_hint(rank, src, 'B/I', m)}")
            return
        if entry is None or entry.kind != Kind.I:
            fail(f"weight gradient before its input gradient {st}I{m}: nothing stashed for W of "
                 f"stage {st} microbatch {m}"
                 + ("" if entry is None else f" (only the forward's activations, from "
                                             f"{entry.action})"))

    def _local_hint(self, rank: _Rank, src: int, kind: str, m: int) -> str:
        if self.s.placement[src] == rank.rank:
            return f" (stage {src} is on this rank and has not run {src}{kind}{m} yet)"
        return ""

    def _absent_forward(self, st: int, m: int) -> str:
        if (st, Kind.F, m) not in self.done:
            return f"its forward {st}F{m} has not run"
        key = (st, Kind.B, m) if (st, Kind.B, m) in self.done else (st, Kind.W, m)
        r0, p0 = self.done.get(key, self.done[(st, Kind.F, m)])
        return f"already released by {key[0]}{key[1]}{key[2]} at rank {r0} position {p0}"

    def _forward(self, rank: _Rank, pos: int, a: Action) -> None:
        st, m = a.stage, a.microbatch
        chunk = self.s.stage_chunk[st]
        v = self.training.weight_version[m]
        x = self.xs[m] if self.prev[st] is None else rank.inbox.pop((ACTIVATION, st, m))
        y, acts = forward(self.versions[chunk][v], x)
        entry = _Stash(Kind.F, v, str(a), acts=acts)
        dst = self.next[st]
        if dst is None:
            if m in self.loss_stage:
                raise ScheduleError(f"microbatch {m} reaches the loss a second time (first at "
                                    f"stage {self.loss_stage[m]}): it ran through two pipelines",
                                    rank.rank, pos, str(a))
            self.loss_stage[m] = st
            scale = 1.0 / self.training.microbatches_per_iteration
            self.losses[self.training.minibatch(m)] += scale * mse(y, self.ts[m])
            entry.dy = mse_grad(y, self.ts[m], scale)
        else:
            self._output(rank, (ACTIVATION, dst, m), y)
        entry.nbytes = sum(arr.nbytes for arr in acts.inputs + acts.outputs)
        entry.nbytes += 0 if entry.dy is None else entry.dy.nbytes
        self._hold(rank, (st, m), entry, chunk)

    def _backward(self, rank: _Rank, pos: int, a: Action) -> None:
        st, m = a.stage, a.microbatch
        chunk = self.s.stage_chunk[st]
        entry = rank.stash[(st, m)]
        dy = entry.dy if self.next[st] is None else rank.inbox.pop((GRADIENT, st, m))
        dx, keep = input_grad(self.versions[chunk][entry.version], entry.acts, dy)
        dst = self.prev[st]
        if dst is not None:
            self._output(rank, (GRADIENT, dst, m), dx)
        if a.kind == Kind.B:
            self._release(rank, (st, m), chunk)
            self._accumulate(rank, pos, a, weight_grad(keep))
        else:
            rank.held_bytes -= entry.nbytes
            entry.kind, entry.action, entry.keep = Kind.I, str(a), keep
            entry.acts = entry.dy = None
            entry.nbytes = sum(x.nbytes + g.nbytes for x, g in keep)
            rank.held_bytes += entry.nbytes

    def _weight(self, rank: _Rank, pos: int, a: Action) -> None:
        st, m = a.stage, a.microbatch
        chunk = self.s.stage_chunk[st]
        entry = self._release(rank, (st, m), chunk)
        self._accumulate(rank, pos, a, weight_grad(entry.keep))

    def _output(self, rank: _Rank, key: tuple, array: np.ndarray) -> None:
        """Hand ``array`` to a stage on this rank directly, or queue it for its send."""
        box = rank.inbox if self.s.placement[key[1]] == rank.rank else rank.outbox
        box[key] = array

    # -- stash, versions and gradients ------------------------------------------------------
    def _hold(self, rank: _Rank, key: tuple[int, int], entry: _Stash, chunk: int) -> None:
        rank.stash[key] = entry
        rank.per_mb[key[1]] += 1
        rank.held_bytes += entry.nbytes
        self.in_use[(chunk, entry.version)] += 1

    def _release(self, rank: _Rank, key: tuple[int, int], chunk: int) -> _Stash:
        entry = rank.stash.pop(key)
        rank.per_mb[key[1]] -= 1
        if rank.per_mb[key[1]] == 0:
            del rank.per_mb[key[1]]
        rank.held_bytes -= entry.nbytes
        self.in_use[(chunk, entry.version)] -= 1
        return entry

    def _measure(self, rank: _Rank, chunk: int) -> None:
        """Peaks after an action of ``chunk``: only that chunk's weight versions and their
        use can have changed (looking at every chunk after every action was O(P^2 M): a
        P = 1000 verify ran past 10 s)."""
        rank.peak_act = max(rank.peak_act, len(rank.stash))
        rank.peak_mb = max(rank.peak_mb, len(rank.per_mb))
        rank.peak_bytes = max(rank.peak_bytes, rank.held_bytes)
        latest = len(self.versions[chunk]) - 1
        live = 1 + sum(1 for v in range(latest) if self.in_use[(chunk, v)] > 0)
        self.peak_versions[chunk] = max(self.peak_versions[chunk], live)

    def _accumulate(self, rank: _Rank, pos: int, a: Action, grads: Params) -> None:
        """Add one microbatch's weight gradient; a complete minibatch updates the chunk (SGD)."""
        chunk = self.s.stage_chunk[a.stage]
        i = self.training.minibatch(a.microbatch)
        total, seen = self.acc.setdefault((chunk, i), ([(np.zeros_like(dw), np.zeros_like(db))
                                                        for dw, db in grads], set()))
        if a.microbatch in seen:
            raise ScheduleError(f"chunk {chunk} already has the weight gradient of microbatch "
                                f"{a.microbatch} (from another stage computing the same chunk)",
                                rank.rank, pos, str(a))
        seen.add(a.microbatch)
        for (tw, tb), (dw, db) in zip(total, grads):
            tw += dw
            tb += db
        if len(seen) < self.training.microbatches_per_iteration:
            return
        history = self.versions[chunk]
        if len(history) != i + 1:
            raise ScheduleError(f"minibatch {i}'s gradient of chunk {chunk} is complete while "
                                f"the chunk has {len(history) - 1} updates (expected {i})",
                                rank.rank, pos, str(a))
        self.grads.setdefault(i, {})[chunk] = total
        history.append([(w - self.lr * dw, b - self.lr * db)
                        for (w, b), (dw, db) in zip(history[-1], total)])
        del self.acc[(chunk, i)]

    # -- end of run --------------------------------------------------------------------------
    def _check_leftovers(self) -> None:
        """Everything must be used up: lost data first, since it explains what follows."""
        for key, (src, _) in sorted(self.channel.items()):
            data, dst, m = key
            raise ScheduleError(f"sent {dst}{data}{m} to rank {self.s.placement[dst]}, which "
                                f"never received it", src, None, f"send {dst}{data}{m}")
        for rank in self.ranks:
            for (data, dst, m) in sorted(rank.outbox):
                raise ScheduleError(f"computed the {_NAMES[data]} for stage {dst} microbatch {m} "
                                    f"but never sent it", rank.rank, None, f"send {dst}{data}{m}")
        for rank in self.ranks:
            for (data, dst, m) in sorted(rank.inbox):
                raise ScheduleError(f"the {_NAMES[data]} for {dst}{data}{m} arrived on this rank "
                                    f"but no action used it", rank.rank, None, f"{dst}{data}{m}")
        for rank in self.ranks:
            for (st, m), entry in sorted(rank.stash.items()):
                missing = (f"{st}W{m}" if entry.kind == Kind.I
                           else f"{st}B{m} (or {st}I{m} and {st}W{m})")
                raise ScheduleError(f"stage {st} microbatch {m} still holds its stash from "
                                    f"{entry.action} after the rank's last action: missing "
                                    f"{missing}", rank.rank, None, missing.split()[0])
        for (chunk, i), (_, seen) in sorted(self.acc.items()):
            want = range(i * self.training.microbatches_per_iteration,
                         (i + 1) * self.training.microbatches_per_iteration)
            absent = [m for m in want if m not in seen]
            raise ScheduleError(f"chunk {chunk} has weight gradients of {len(seen)} of "
                                f"{len(want)} microbatches of minibatch {i}; missing microbatch "
                                f"{absent[0]}" + (f" and {len(absent) - 1} more"
                                                  if len(absent) > 1 else ""))
        for i in range(self.training.iterations):
            for c in range(len(self.versions)):
                if c not in self.grads.get(i, {}):
                    raise ScheduleError(f"chunk {c} never ran a weight gradient for minibatch "
                                        f"{i}")

    def _result(self) -> Execution:
        grads = []
        for i in range(self.training.iterations):
            grads.append([g for c in range(len(self.versions)) for g in self.grads[i][c]])
        final = [p for history in self.versions for p in history[-1]]
        stats = tuple(
            RankStats(r.rank, r.peak_mb, r.peak_act, r.peak_bytes, r.position, r.transfers)
            for r in self.ranks)
        return Execution(tuple(self.losses), tuple(grads), final, stats,
                         tuple(self.peak_versions), self.executed)


def _check_layout(schedule: Schedule, model: Model, n_data: int) -> None:
    """The structure the executor relies on; anything finer is found while running."""
    n_chunks = schedule.n_chunks
    if len(model.bounds) != n_chunks:
        raise ScheduleError(f"the model is cut into {len(model.bounds)} chunks, the schedule's "
                            f"stage_chunk uses {n_chunks}")
    for i, pipe in enumerate(schedule.pipelines):
        chunks = [schedule.stage_chunk[st] for st in pipe]
        if chunks != list(range(n_chunks)):
            raise ScheduleError(f"pipelines[{i}] (stages {list(pipe)}) computes chunks {chunks}; "
                                f"expected chunks 0..{n_chunks - 1} in order (the whole model)")
    if n_data != schedule.microbatches:
        raise ScheduleError(f"{n_data} microbatches of data for a schedule of "
                            f"{schedule.microbatches}")
    for rank, acts in enumerate(schedule.ranks):
        for pos, a in enumerate(acts):
            check_place(schedule, rank, pos, a)
