"""The communication pass (zero-bubble runtime's post-processing, torch's ``_add_send_recv``):
schedules list compute only; this lowers one to the same :class:`Schedule` type with the
point-to-point receives and sends each rank must do in its steps (RECV_F/RECV_B, SEND_F/SEND_B
actions, torch's), so the validator, the CSV writer and the numeric executor take it as it is.

A RECV posts the receive; the compute that consumes the data waits for it (torch's runtime does
the same). Stages on the same rank hand data over locally, without a transfer.

Default lowering, receives at use: a rank's RECVs right before the step that needs them, its
SENDs right after the step that produced the data, an overlapped pair receiving both inputs
before it and sending both outputs after it. This is the naive order of source document 001;
the runtime decides whether a send blocks.

With ``early_receives`` (torch's multi-stage runtime, ``_add_send_recv``) a receive is posted as
early as possible: in the receiver's list at the moment the sender's compute is placed, walking
the ranks in lock-step, rank 0 first. A rank's next step is placed only once all its receives
are posted, which is torch's rule too. torch walks lists that also hold its FSDP and gradient
bookkeeping (``_add_unshard_reshard``: UNSHARD / RESHARD around the stages in use, at most 3
active; ``_add_reduce_grad``: a REDUCE_GRAD after a stage's last backward); each takes a round
of the walk, so they are walked here too and then dropped: the lowered lists equal torch's
``pipeline_order_with_comms`` without them (tests/schedules/golden/lowered/).

The engine walks flat op tuples (:class:`Compute`, :class:`Transfer`): :func:`op_lists` renders
them from the lowered schedule (``ops.render``: a RECV is a blocking ``recv``, or with early
receives an ``irecv`` that posts and a ``wait`` before the consuming compute).
"""

from __future__ import annotations

from ..errors import ScheduleError
from .action import Action
from .ops import ACTIVATION, GRADIENT, Compute, Op, Transfer, comm_action, render, transfers
from .schedule import Schedule

__all__ = ["ACTIVATION", "GRADIENT", "Compute", "Op", "Transfer", "add_communication",
           "lowered_for", "op_lists"]

AT_USE, EARLY = "at-use", "early"   # meta["lowered"]: where the receives are posted


def add_communication(schedule: Schedule, early_receives: bool = False) -> Schedule:
    """``schedule`` lowered: per rank its steps with the RECV and SEND actions in them.

    A schedule lowered already is lowered again from its compute steps. The result's
    ``meta["lowered"]`` says where receives are posted (``"at-use"`` or ``"early"``)."""
    steps = schedule.compute_steps()
    if early_receives:
        lowered = _early_receives(schedule, steps)
    else:
        lowered = _at_use(schedule, steps)
    return Schedule(schedule.name, schedule.pp, schedule.vpp, schedule.microbatches,
                    schedule.placement, lowered, schedule.pipelines, schedule.stage_chunk,
                    schedule.flush,
                    {**schedule.meta, "lowered": EARLY if early_receives else AT_USE})


def op_lists(schedule: Schedule,
             early_receives: bool | None = None) -> tuple[tuple[Op, ...], ...]:
    """Per rank, the compute steps with their receives and sends as the engine's op tuples.

    A compute-only ``schedule`` is lowered first (receives at use, or early with
    ``early_receives``); a lowered one is rendered as it is, its receives as posted early or
    at use as ``early_receives`` says (by default as it was lowered)."""
    lowered, early = lowered_for(schedule, early_receives)
    return tuple(render(lowered, r, early) for r in range(lowered.pp))


def lowered_for(schedule: Schedule, early_receives: bool | None = None) -> tuple[Schedule, bool]:
    """(the lowered schedule :func:`op_lists` renders, whether its receives are posted early)."""
    if schedule.lowered:
        return schedule, (schedule.meta.get("lowered") == EARLY if early_receives is None
                          else early_receives)
    early = bool(early_receives)
    return add_communication(schedule, early), early


def _at_use(schedule: Schedule, steps) -> tuple[tuple[Action, ...], ...]:
    out = []
    for rank, acts in enumerate(steps):
        lowered: list[Action] = []
        put = lowered.append
        for step in acts:
            halves = step.sub or (step,)
            for a in halves:
                for t in transfers(schedule, a, rank, "recv"):
                    put(comm_action(t))
            put(step)
            for a in halves:
                for t in transfers(schedule, a, rank, "send"):
                    put(comm_action(t))
        out.append(tuple(lowered))
    return tuple(out)


MAX_ACTIVE_STAGES = 3      # torch's _add_unshard_reshard default


def _bookkeeping(steps, microbatches: int) -> list:
    """One rank's steps with ``None`` where torch's runtime list holds a bookkeeping action:
    ``_add_unshard_reshard`` (before each step, a RESHARD for every active stage not among the
    next ``MAX_ACTIVE_STAGES`` distinct stages to compute, an UNSHARD for every one of those not
    active; a RESHARD for each stage still active at the end), then ``_add_reduce_grad`` (after
    a step, a REDUCE_GRAD for each stage whose B and W actions reach ``microbatches``)."""
    n = len(steps)
    stages = [tuple(dict.fromkeys(a.stage for a in (st.sub or (st,)))) for st in steps]
    nxt_at = {s: -1 for t in stages for s in t}    # per stage: its next position >= i

    def next_stages(i: int) -> set[int]:
        found = []
        for s, p in nxt_at.items():
            if p < i:
                p = i
                while p < n and s not in stages[p]:
                    p += 1
                nxt_at[s] = p
            if p < n:
                found.append((p, stages[p].index(s), s))
        found.sort()
        if len(found) > MAX_ACTIVE_STAGES:     # an overlapped pair brings both its stages
            last = found[MAX_ACTIVE_STAGES - 1][0]
            found = [f for f in found if f[0] <= last]
        return {s for _, _, s in found}

    out: list = []
    active: set[int] = set()
    done: dict[int, int] = {}
    for i, step in enumerate(steps):
        want = next_stages(i)
        out.extend([None] * (len(active - want) + len(want - active)))
        active = want
        out.append(step)
        for a in step.sub or (step,):
            if a.kind in ("B", "W"):
                done[a.stage] = done.get(a.stage, 0) + 1
                if done[a.stage] == microbatches:
                    out.append(None)
    out.extend([None] * len(active))
    return out


def _early_receives(schedule: Schedule, steps) -> tuple[tuple[Action, ...], ...]:
    """torch's ``_add_send_recv``: rounds over the ranks in order; a rank places its next step
    when every receive it needs is posted, then its sends, and posts the matching receives at
    the end of the receivers' lists. A bookkeeping entry (``None``) takes its round and places
    nothing."""
    P = len(steps)
    seqs = [_bookkeeping(s, schedule.microbatches) for s in steps]
    out: list[list[Action]] = [[] for _ in range(P)]
    posted: list[set] = [set() for _ in range(P)]
    nxt = [0] * P
    left = sum(len(s) for s in seqs)
    while left:
        progress = False
        for rank in range(P):
            if nxt[rank] == len(seqs[rank]):
                continue
            step = seqs[rank][nxt[rank]]
            if step is None:
                nxt[rank] += 1
                left -= 1
                progress = True
                continue
            halves = step.sub or (step,)
            recvs = [t for a in halves for t in transfers(schedule, a, rank, "recv")]
            if any(t.key not in posted[rank] for t in recvs):
                continue
            for t in recvs:
                posted[rank].discard(t.key)
            out[rank].append(step)
            for a in halves:
                for t in transfers(schedule, a, rank, "send"):
                    out[rank].append(comm_action(t))
                    out[t.dst_rank].append(comm_action(t._replace(op="recv")))
                    posted[t.dst_rank].add(t.key)
            nxt[rank] += 1
            left -= 1
            progress = True
        if not progress:
            stuck = ", ".join(f"rank {r} at {seqs[r][nxt[r]].plain}"
                              for r in range(P) if nxt[r] < len(seqs[r]))
            raise ScheduleError(f"cannot post receives early: no rank can go on ({stuck})")
    return tuple(tuple(ops) for ops in out)
