"""The engine's op tuples of a lowered schedule: :class:`Compute` steps and :class:`Transfer` s.

A lowered schedule (``comm_pass.add_communication``) holds torch's communication actions; the
engine and the numeric executor walk flat op tuples instead. This module turns one into the
other, and knows which transfer an action needs. It depends on the schedule only through its
``placement``, ``prev_stage``/``next_stage`` and ``steps``, so ``schedule.py`` can use it too.

Receives render two ways. Posted at use (``early=False``): each RECV is a blocking ``recv``.
Posted early (torch's multi-stage runtime): each RECV is an ``irecv`` that only posts the
receive, and a ``wait`` for each input a compute takes from another rank goes right before that
compute (torch waits there too); an overlapped pair then runs half by half, each half after its
own waits, as torch runs OVERLAP_F_B by default.
"""

from __future__ import annotations

from typing import Any, NamedTuple

from ..errors import ScheduleError
from .action import Action, Kind

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


def peer(schedule: Any, stage: int, kind: str, rank: int,
         recv: bool) -> tuple[str, int, int] | None:
    """Which transfer a compute action of ``stage`` and ``kind`` on ``rank`` needs: the one
    answer every encoding below the schedule reads (the comm pass, the op tuples, the compact
    lists, the deadlock messages). ``(data, other stage, its rank)`` of the tensor it receives
    (``recv``) or sends, or None when it crosses no rank.

    A forward takes activations from the previous stage and gives them to the next; a
    gradient-carrying backward (B or I) runs the other way; W moves no data. A peer stage on
    ``rank`` itself hands the data over locally: no transfer.
    """
    if kind == Kind.F:
        data, other = ACTIVATION, (schedule.prev_stage if recv else schedule.next_stage)(stage)
    elif kind in (Kind.B, Kind.I):
        data, other = GRADIENT, (schedule.next_stage if recv else schedule.prev_stage)(stage)
    else:
        return None
    if other is None or schedule.placement[other] == rank:
        return None
    return data, other, schedule.placement[other]


def transfers(schedule: Any, a: Action, rank: int, op: str) -> list[Transfer]:
    """The receive (``op="recv"``) or send (``"send"``) compute action ``a`` on ``rank`` needs,
    if it crosses ranks (:func:`peer`), as a :class:`Transfer`."""
    found = peer(schedule, a.stage, a.kind, rank, op == "recv")
    if found is None:
        return []
    data, other, other_rank = found
    if op == "recv":
        return [Transfer("recv", data, other, a.stage, a.microbatch, other_rank, rank)]
    return [Transfer("send", data, a.stage, other, a.microbatch, rank, other_rank)]


def comm_action(t: Transfer) -> Action:
    """The action that does ``t`` in a lowered schedule: a RECV at the consuming stage, a SEND
    at the producing one (torch's ``_add_send_recv`` names them so)."""
    if t.op == "send":
        return Action(t.src_stage, Kind.SEND_F if t.data == ACTIVATION else Kind.SEND_B,
                      t.microbatch)
    return Action(t.dst_stage, Kind.RECV_F if t.data == ACTIVATION else Kind.RECV_B,
                  t.microbatch)


def transfer_of(schedule: Any, a: Action, rank: int, position: int | None = None) -> Transfer:
    """The transfer comm action ``a`` on ``rank`` does (op ``recv`` or ``send``); a
    :class:`ScheduleError` naming rank, position and action if it names no transfer (a stage
    that does not exist, a pipeline end, a peer on the same rank)."""
    send = a.kind in (Kind.SEND_F, Kind.SEND_B)
    forward = a.kind in (Kind.SEND_F, Kind.RECV_F)
    n_stages = len(schedule.placement)
    if not 0 <= a.stage < n_stages:
        raise ScheduleError(f"stage {a.stage} does not exist (stages are 0..{n_stages - 1})",
                            rank, position, a.plain)
    if not 0 <= a.microbatch < schedule.microbatches:
        raise ScheduleError(f"microbatch {a.microbatch} does not exist (microbatches are "
                            f"0..{schedule.microbatches - 1})", rank, position, a.plain)
    if schedule.placement[a.stage] != rank:
        raise ScheduleError(f"stage {a.stage} runs on rank {schedule.placement[a.stage]} "
                            f"(placement), not on rank {rank}", rank, position, a.plain)
    if send:
        other = (schedule.next_stage if forward else schedule.prev_stage)(a.stage)
    else:
        other = (schedule.prev_stage if forward else schedule.next_stage)(a.stage)
    if other is None:
        end = "last" if forward == send else "first"
        raise ScheduleError(f"stage {a.stage} is its pipeline's {end} stage: there is no stage "
                            f"to {'send to' if send else 'receive from'}",
                            rank, position, a.plain)
    peer = schedule.placement[other]
    if peer == rank:
        raise ScheduleError(f"stage {other} is on this rank too: data between stages of one rank "
                            "is handed over locally, without a transfer",
                            rank, position, a.plain)
    data = ACTIVATION if forward else GRADIENT
    if send:
        return Transfer("send", data, a.stage, other, a.microbatch, rank, peer)
    return Transfer("recv", data, other, a.stage, a.microbatch, peer, rank)


def render(schedule: Any, rank: int, early: bool) -> tuple[Op, ...]:
    """Rank ``rank``'s op tuples of lowered ``schedule`` (see the module's docstring)."""
    return tuple(iter_ops(schedule, rank, early))


def iter_ops(schedule: Any, rank: int, early: bool):
    """:func:`render`'s op tuples, made as they are read (the engine's compiled form walks
    them again each time instead of keeping them)."""
    for pos, a in enumerate(schedule.steps[rank]):
        kind = a.kind
        if kind in (Kind.F, Kind.B, Kind.I, Kind.W) or a.sub:
            halves = a.sub or (a,)
            if not early:
                yield Compute(halves)
                continue
            for h in halves:
                for t in transfers(schedule, h, rank, "recv"):
                    yield t._replace(op="wait")
                yield Compute((h,))
        else:
            t = transfer_of(schedule, a, rank, pos)
            yield t._replace(op="irecv") if early and t.op == "recv" else t
