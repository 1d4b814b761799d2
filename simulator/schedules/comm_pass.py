"""The communication pass (zero-bubble runtime's post-processing): schedules list compute only;
this adds the point-to-point receives and sends each rank must do, and which link each uses.

For every action, a receive is placed right before it when its input comes from another rank,
and a send right after it when its output goes to another rank (stages on the same rank hand data
over locally, without a transfer). An overlapped F/B pair receives both inputs before it starts
and sends both outputs after it ends. This is the naive order of source document 001; the
runtime decides whether a send blocks.

With ``early_receives`` (torch's multi-stage runtime, ``_add_send_recv``) a receive is split in
two: ``irecv`` posts it as early as possible - in the receiver's list at the moment the sender's
compute is placed, walking the ranks in lock-step, rank 0 first - and ``wait`` waits for it just
before the compute that needs it. A rank's next step is placed only once all its receives are
posted, which is torch's rule too, so the lowered lists equal torch's. An overlapped pair
becomes its two halves in turn (F, then B), each after its own ``wait``, as torch runs
``OVERLAP_F_B`` by default.
"""

from __future__ import annotations

from typing import NamedTuple

from ..errors import ScheduleError
from .action import Action
from .schedule import Schedule
from .action import Kind

ACTIVATION = Kind.F  # data for a forward: the previous stage's output
GRADIENT = Kind.B    # data for a backward: the next stage's input gradient


class Compute(NamedTuple):
    """One compute step: a single action, or the two halves of an overlapped pair."""

    actions: tuple[Action, ...]

    def __str__(self) -> str:
        return "+".join(str(a) for a in self.actions)


class Transfer(NamedTuple):
    """A receive or send of one tensor between stages on different ranks.

    ``data`` is ACTIVATION or GRADIENT; ``dst_stage`` is the stage that consumes it, so a send and
    its matching receive have equal ``(data, dst_stage, microbatch)``.
    """

    op: str  # "recv" or "send"; with early receives "irecv" (post) and "wait"
    data: str
    src_stage: int
    dst_stage: int
    microbatch: int
    src_rank: int
    dst_rank: int

    @property
    def key(self) -> tuple[str, int, int]:
        return (self.data, self.dst_stage, self.microbatch)

    @property
    def peer(self) -> int:
        return self.src_rank if self.op == "recv" else self.dst_rank

    def __str__(self) -> str:
        kind = Kind.F if self.data == ACTIVATION else Kind.B
        arrow = f"{self.src_stage}->{self.dst_stage}"
        return f"{self.op} {self.dst_stage}{kind}{self.microbatch} ({arrow})"


Op = Compute | Transfer


def _peer(schedule: Schedule, a: Action, rank: int, op: str) -> list[Transfer]:
    """The receive (``op="recv"``) or send (``"send"``) action ``a`` needs, if it crosses ranks.

    A forward takes activations from the previous stage and gives them to the next; a
    gradient-carrying backward (B or I) runs the other way; W moves no data.
    """
    if a.kind == Kind.F:
        data, upstream = ACTIVATION, schedule.prev_stage
        downstream = schedule.next_stage
    elif a.kind in (Kind.B, Kind.I):
        data, upstream = GRADIENT, schedule.next_stage
        downstream = schedule.prev_stage
    else:
        return []
    other = (upstream if op == "recv" else downstream)(a.stage)
    if other is None or schedule.placement[other] == rank:
        return []
    peer = schedule.placement[other]
    if op == "recv":
        return [Transfer("recv", data, other, a.stage, a.microbatch, peer, rank)]
    return [Transfer("send", data, a.stage, other, a.microbatch, rank, peer)]


def _steps(actions: tuple[Action, ...]) -> list[tuple[Action, ...]]:
    """Group consecutive actions that share a ``pair`` number into one step."""
    steps: list[tuple[Action, ...]] = []
    i = 0
    while i < len(actions):
        a = actions[i]
        if a.pair is not None and i + 1 < len(actions) and actions[i + 1].pair == a.pair:
            steps.append((a, actions[i + 1]))
            i += 2
        else:
            steps.append((a,))
            i += 1
    return steps


def add_communication(schedule: Schedule,
                      early_receives: bool = False) -> tuple[tuple[Op, ...], ...]:
    """Per rank, the compute steps with their receives and sends, in execution order."""
    if early_receives:
        return _early_receives(schedule)
    programs = []
    for rank, actions in enumerate(schedule.ranks):
        ops: list[Op] = []
        for step in _steps(actions):
            for a in step:
                ops.extend(_peer(schedule, a, rank, "recv"))
            ops.append(Compute(step))
            for a in step:
                ops.extend(_peer(schedule, a, rank, "send"))
        programs.append(tuple(ops))
    return tuple(programs)


def _early_receives(schedule: Schedule) -> tuple[tuple[Op, ...], ...]:
    """torch's ``_add_send_recv``: rounds over the ranks in order; a rank places its next step
    when every receive it needs is posted, then its sends, and posts the matching receives at
    the end of the receivers' lists."""
    P = len(schedule.ranks)
    steps = [_steps(actions) for actions in schedule.ranks]
    out: list[list[Op]] = [[] for _ in range(P)]
    posted: list[set] = [set() for _ in range(P)]
    nxt = [0] * P
    left = sum(len(s) for s in steps)
    while left:
        progress = False
        for rank in range(P):
            if nxt[rank] == len(steps[rank]):
                continue
            step = steps[rank][nxt[rank]]
            recvs = [t for a in step for t in _peer(schedule, a, rank, "recv")]
            if any(t.key not in posted[rank] for t in recvs):
                continue
            ops = out[rank]
            # an overlapped pair runs as torch's OVERLAP_F_B does by default: each half in
            # turn, each after waiting for its own input
            for a in step:
                for t in _peer(schedule, a, rank, "recv"):
                    posted[rank].discard(t.key)
                    ops.append(t._replace(op="wait"))
                if len(step) > 1:
                    ops.append(Compute((a,)))
            if len(step) == 1:
                ops.append(Compute(step))
            for a in step:
                for t in _peer(schedule, a, rank, "send"):
                    ops.append(t)
                    out[t.dst_rank].append(t._replace(op="irecv"))
                    posted[t.dst_rank].add(t.key)
            nxt[rank] += 1
            left -= 1
            progress = True
        if not progress:
            stuck = ", ".join(f"rank {r} at {'+'.join(map(str, steps[r][nxt[r]]))}"
                              for r in range(P) if nxt[r] < len(steps[r]))
            raise ScheduleError(f"cannot post receives early: no rank can go on ({stuck})")
    return tuple(tuple(ops) for ops in out)
