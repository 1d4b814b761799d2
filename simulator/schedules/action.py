"""One step of a rank's schedule, in PyTorch's notation (``torch.distributed.pipelining``'s
``_Action``): ``<stage><kind><microbatch>``.

``stage`` is the global virtual stage (0 .. n_stages-1). Compute kinds: F forward, B full
backward, I backward for inputs only, W backward for weights only. Communication kinds, which
only a lowered schedule holds (:func:`~.comm_pass.add_communication`): SEND_F / RECV_F move a
forward's activation, SEND_B / RECV_B a backward's input gradient; ``2SEND_F1`` is stage 2
sending microbatch 1's activation, ``3RECV_F1`` is stage 3 receiving it. An overlapped F/B pair
(DualPipe) is one action of kind OVERLAP_F_B whose ``sub`` are its two halves, written as torch
writes it, ``(0F7;7B3)OVERLAP_F_B`` (its own stage and microbatch are placeholders, -1, as in
torch).

``pair`` is the per-compute-action view of a pair (``Schedule.ranks``): both halves carry the
pair's number, counted per rank from 0, and print as ``0F7@0``. That spelling is still read as
input (deprecated, for one release): two consecutive actions with one number form a pair.
"""

from __future__ import annotations

import re
from enum import Enum
from operator import itemgetter
from typing import NamedTuple

from ..errors import ScheduleError


class Kind(str, Enum):
    """What an action does. A ``str`` enum: ``Kind.F == "F"``, and it prints as ``F``."""

    F = "F"   # forward
    B = "B"   # full backward (input and weight gradients); torch's FULL_BACKWARD
    I = "I"   # noqa: E741 -- backward for inputs only (torch's name)
    W = "W"   # backward for weights only
    SEND_F = "SEND_F"     # send a forward's output to the next stage
    RECV_F = "RECV_F"     # receive (post the receive of) the previous stage's output
    SEND_B = "SEND_B"     # send a backward's input gradient to the previous stage
    RECV_B = "RECV_B"     # receive (post the receive of) the next stage's input gradient
    OVERLAP_F_B = "OVERLAP_F_B"   # an F and a B/I run as one step (``sub``)

    # str's own (C) hash and equality: kinds key dicts on the engine's per-action path
    __hash__ = str.__hash__
    __eq__ = str.__eq__

    def __str__(self) -> str:
        return self.value

    def __format__(self, spec: str) -> str:
        return format(self.value, spec)


FORWARD, BACKWARD, INPUT_GRAD, WEIGHT_GRAD = Kind.F, Kind.B, Kind.I, Kind.W
COMPUTE_KINDS = (Kind.F, Kind.B, Kind.I, Kind.W)
KINDS = COMPUTE_KINDS   # the kinds an action of the compute view (``Schedule.ranks``) has
COMM_KINDS = (Kind.SEND_F, Kind.RECV_F, Kind.SEND_B, Kind.RECV_B)
SENDS = frozenset((Kind.SEND_F, Kind.SEND_B))
RECVS = frozenset((Kind.RECV_F, Kind.RECV_B))
_COMM_SET = frozenset(COMM_KINDS)

_ACTION_RE = re.compile(r"^\s*(\d+)\s*([FBIW])\s*(\d+)\s*(?:@\s*(\d+))?\s*$")
_COMM_RE = re.compile(r"^\s*(\d+)\s*(SEND_F|RECV_F|SEND_B|RECV_B)\s*(\d+)\s*$")
_OVERLAP_RE = re.compile(r"^\s*\((.*)\)\s*OVERLAP_F_B\s*$")


# a NamedTuple, not a dataclass: start-up (simulator/__init__.py); torch's _Action is one too
class Action(NamedTuple):
    """One step of a rank's order: a compute (F, B, I, W) or a transfer (SEND_F, ...) of
    ``microbatch`` on global virtual ``stage``. A change is ``a._replace(pair=1)``."""

    stage: int
    kind: Kind
    microbatch: int
    pair: int | None = None

    # the sub-actions: none (an overlapped pair is an :class:`Overlap`; a class attribute, so a
    # plain action stays a 4-tuple: a schedule holds millions of them)
    sub = ()

    def __str__(self) -> str:
        if self.sub:
            return "(" + ";".join(h.plain for h in self.sub) + f"){self.kind}"
        text = f"{self.stage}{self.kind}{self.microbatch}"
        return text if self.pair is None else f"{text}@{self.pair}"

    @property
    def plain(self) -> str:
        """torch's spelling: no pair number (``0F7``, ``2SEND_F1``, ``(0F7;7B3)OVERLAP_F_B``)."""
        if self.sub:
            return str(self)
        return f"{self.stage}{self.kind}{self.microbatch}"

    @property
    def key(self) -> tuple[int, Kind, int]:
        """Identity of the work, ignoring pairing."""
        return (self.stage, self.kind, self.microbatch)

    @property
    def is_backward(self) -> bool:
        return self.kind in (Kind.B, Kind.I, Kind.W)

    @property
    def is_comm(self) -> bool:
        return self.kind in _COMM_SET

    @property
    def halves(self) -> tuple["Action", ...]:
        """The compute actions this step runs: an overlapped pair's two, else itself."""
        return self.sub if self.sub else (self,)

    @staticmethod
    def overlap(first: "Action", second: "Action") -> "Overlap":
        """An overlapped pair (torch's OVERLAP_F_B), halves in the order they are written."""
        return Overlap(-1, Kind.OVERLAP_F_B, -1, None, (first, second))

    @classmethod
    def parse(cls, text: str) -> "Action":
        """torch's spelling of any action (``3F1``, ``2SEND_F1``, ``(0F7;7B3)OVERLAP_F_B``), or
        a pair's half in the deprecated ``4F3@1``."""
        m = _ACTION_RE.match(text)
        if m:
            pair = m.group(4)
            return cls(int(m.group(1)), Kind(m.group(2)), int(m.group(3)),
                       None if pair is None else int(pair))
        m = _COMM_RE.match(text)
        if m:
            return cls(int(m.group(1)), Kind(m.group(2)), int(m.group(3)))
        m = _OVERLAP_RE.match(text)
        if m:
            halves = [h.strip() for h in m.group(1).split(";") if h.strip()]
            if len(halves) != 2:
                raise ScheduleError(f"an OVERLAP_F_B action holds two actions '(xFm;yBn)', "
                                    f"found {len(halves)} in {text!r}")
            first, second = (_compute(h, text) for h in halves)
            return cls.overlap(first, second)
        raise ScheduleError(
            f"expected an action like '3F1', '0B2', '1I0', '2W5' or '4F3@1', found {text!r}"
        )


class Overlap(Action):
    """An action with sub-actions: torch's OVERLAP_F_B, ``sub`` its F and B/I halves, held as
    the tuple's fifth item (so two overlaps with different halves differ, and a plain action
    stays four items)."""

    __slots__ = ()
    _fields = Action._fields + ("sub",)
    _field_defaults = {**Action._field_defaults, "sub": ()}
    sub = property(itemgetter(4), doc="the F and B/I halves, in the order they are written")

    def __new__(cls, stage: int, kind: Kind, microbatch: int, pair: int | None = None,
                sub: tuple[Action, ...] = ()) -> "Overlap":
        return tuple.__new__(cls, (stage, kind, microbatch, pair, tuple(sub)))

    @classmethod
    def _make(cls, iterable) -> "Overlap":
        return cls(*iterable)

    def _replace(self, **changes) -> "Overlap":
        return Overlap(**{**self._asdict(), **changes})

    def __repr__(self) -> str:
        return "Overlap(" + ", ".join(f"{n}={v!r}" for n, v in zip(self._fields, self)) + ")"


def _compute(half: str, text: str) -> Action:
    m = _ACTION_RE.match(half)
    if not m or m.group(4) is not None:
        raise ScheduleError(f"an OVERLAP_F_B action holds compute actions like '0F7', found "
                            f"{half!r} in {text!r}")
    return Action(int(m.group(1)), Kind(m.group(2)), int(m.group(3)))
