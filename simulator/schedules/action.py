"""One step of a rank's schedule, in PyTorch's notation ``<stage><kind><microbatch>``.

``stage`` is the global virtual stage (0 .. n_stages-1). Kinds: F forward, B full backward,
I backward for inputs only, W backward for weights only. ``pair`` numbers an overlapped F/B pair
(DualPipe): both halves carry the same ``pair`` and are written ``5F3@2``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import Enum

from ..errors import ScheduleError

class Kind(str, Enum):
    """What an action computes. A ``str`` enum: ``Kind.F == "F"``, and it prints as ``F``."""

    F = "F"   # forward
    B = "B"   # full backward (input and weight gradients)
    I = "I"   # noqa: E741 -- backward for inputs only (torch's name)
    W = "W"   # backward for weights only

    # str's own (C) hash and equality: kinds key dicts on the engine's per-action path
    __hash__ = str.__hash__
    __eq__ = str.__eq__

    def __str__(self) -> str:
        return self.value

    def __format__(self, spec: str) -> str:
        return format(self.value, spec)


FORWARD, BACKWARD, INPUT_GRAD, WEIGHT_GRAD = Kind.F, Kind.B, Kind.I, Kind.W
KINDS = tuple(Kind)

_ACTION_RE = re.compile(r"^\s*(\d+)\s*([FBIW])\s*(\d+)\s*(?:@\s*(\d+))?\s*$")


@dataclass(frozen=True, slots=True)
class Action:
    stage: int
    kind: Kind
    microbatch: int
    pair: int | None = None

    def __str__(self) -> str:
        text = f"{self.stage}{self.kind}{self.microbatch}"
        return text if self.pair is None else f"{text}@{self.pair}"

    @property
    def key(self) -> tuple[int, Kind, int]:
        """Identity of the work, ignoring pairing."""
        return (self.stage, self.kind, self.microbatch)

    @property
    def is_backward(self) -> bool:
        return self.kind != Kind.F

    @classmethod
    def parse(cls, text: str) -> "Action":
        m = _ACTION_RE.match(text)
        if not m:
            raise ScheduleError(
                f"expected an action like '3F1', '0B2', '1I0', '2W5' or '4F3@1', found {text!r}"
            )
        pair = m.group(4)
        return cls(int(m.group(1)), Kind(m.group(2)), int(m.group(3)),
                   None if pair is None else int(pair))
