"""One rank's compute actions held as columns: its one stage, the kind letters, the microbatches.

A library schedule at scale is a million actions; making them as :class:`Action` objects took
half a second of a 1M-action run whose engine, validator, memory model and summary read only
the kinds (a string), the stage and the microbatches. A :class:`RankActions` is what a
generator that knows those columns hands the :class:`~.schedule.Schedule` instead of a tuple:
it reads (and compares equal) as the tuple of actions, made the first time someone iterates it
or takes a slice, and those readers pay what the tuple cost before; the hot readers take the
columns (:func:`microbatches_of`, ``phases.rank_kinds``, ``rank_stages``).

Fast path `rank_columns` (docs/performance.md, "Fast paths"): it removes 33 % of `pipesim run
--engine evaluator`'s whole-process CPU on the 1M-action case against a tuple of Actions.
"""

from __future__ import annotations

import gc
from array import array
from collections.abc import Sequence
from itertools import repeat
from operator import attrgetter

from .action import Action, Kind

_microbatch = attrgetter("microbatch")
_KIND_OF = {k.value: k for k in (Kind.F, Kind.B, Kind.I, Kind.W)}
_ONE_BY_ONE = 4096


def make_actions(stage: int, kinds, microbatches) -> list[Action]:
    """``[Action(stage, k, m) for k, m in zip(kinds, microbatches)]``, made in C (allocated
    in this order, the order every later pass walks them in): each is the tuple
    ``(stage, k, m, None)`` given its class, as ``Action``'s own ``__new__`` would make it."""
    n = len(kinds)
    return list(map(tuple.__new__, repeat(Action, n),
                    zip(repeat(stage, n), kinds, microbatches, repeat(None, n))))


class RankActions(Sequence):
    """The actions ``Action(stage, Kind(kinds[i]), microbatches[i])``, held as columns (see the
    module's docstring). ``kinds`` holds compute letters only (F, B, I, W): no pair, no
    communication."""

    __slots__ = ("stage", "kinds", "microbatches", "_made", "_reads")

    def __init__(self, stage: int, kinds: str, microbatches: array) -> None:
        if len(kinds) != len(microbatches) or kinds.strip("FBIW"):
            raise ValueError("RankActions: one compute kind letter per microbatch")
        self.stage = stage
        self.kinds = kinds
        self.microbatches = microbatches
        self._made: tuple[Action, ...] | None = None
        self._reads = 0

    def actions(self) -> tuple[Action, ...]:
        """The actions as a tuple, made once."""
        if self._made is None:
            # a million small acyclic objects: the cyclic collector would only cost time
            enabled = gc.isenabled()
            gc.disable()
            try:
                self._made = tuple(make_actions(self.stage,
                                                list(map(_KIND_OF.__getitem__, self.kinds)),
                                                self.microbatches.tolist()))
            finally:
                if enabled:
                    gc.enable()
        return self._made

    def __len__(self) -> int:
        return len(self.kinds)

    def __getitem__(self, index):
        # a few reads (the phase scan, a step's example) make their actions one by one; a
        # reader that goes on past _ONE_BY_ONE gets the whole tuple, made in C
        if self._made is not None or isinstance(index, slice) or self._reads > _ONE_BY_ONE:
            return self.actions()[index]
        self._reads += 1
        return Action(self.stage, _KIND_OF[self.kinds[index]], self.microbatches[index])

    def __iter__(self):
        return iter(self.actions())

    def __eq__(self, other) -> bool:
        if isinstance(other, RankActions):
            return (self.stage == other.stage and self.kinds == other.kinds
                    and self.microbatches == other.microbatches)
        if isinstance(other, (tuple, list)):
            return len(other) == len(self) and self.actions() == tuple(other)
        return NotImplemented

    def __hash__(self) -> int:
        return hash(self.actions())      # as the equal tuple's

    def __reduce__(self):
        return RankActions, (self.stage, self.kinds, self.microbatches)

    def __repr__(self) -> str:
        return f"RankActions(stage {self.stage}, {len(self)} actions)"


def microbatches_of(actions):
    """The microbatch of each action, in order: the column itself when held as columns, else
    read off the actions as they are iterated."""
    if type(actions) is RankActions:
        return actions.microbatches
    return map(_microbatch, actions)
