"""1F1B (Megatron non-interleaved, PipeDream-Flush).

Rank r runs ``min(P-r-1, M)`` warm-up forwards, ``M - warmup`` steady steps of one F then one B,
then ``warmup`` cool-down backwards. M < P is legal (ranks just warm up less).
"""

from __future__ import annotations

import gc
from collections import deque
from dataclasses import MISSING, fields
from itertools import repeat
from types import MemberDescriptorType

from ...errors import ConfigError
from ..action import Action, Kind
from ..phases import known_rank_facts
from ..registry import fb_sizes, register
from ..schedule import Schedule, loop_placement

# Action's fields are plain slots its generated __init__ sets (frozen: through
# object.__setattr__, about half a microsecond per action). With no __post_init__ the same
# objects are made by setting the slots from C, one field at a time over a whole run, the
# fields after (stage, kind, microbatch) to their defaults.
def _slot_plan() -> tuple[tuple, tuple] | None:
    fs = fields(Action)
    if hasattr(Action, "__post_init__") or [f.name for f in fs[:3]] != ["stage", "kind",
                                                                         "microbatch"]:
        return None
    slots = tuple(getattr(Action, f.name) for f in fs)
    if any(type(d) is not MemberDescriptorType for d in slots) or any(
            f.default is MISSING for f in fs[3:]):
        return None
    return slots, tuple(f.default for f in fs[3:])


_PLAN = _slot_plan()


def _actions(stage: int, kinds: list[Kind], microbatches: list[int]) -> list[Action]:
    """``[Action(stage, k, m) for k, m in zip(kinds, microbatches)]``, made in C (allocated
    in this order, the order every later pass walks them in)."""
    if _PLAN is None:
        return [Action(stage, k, m) for k, m in zip(kinds, microbatches)]
    slots, defaults = _PLAN
    n = len(kinds)
    acts = list(map(object.__new__, repeat(Action, n)))
    columns = (repeat(stage, n), kinds, microbatches) + tuple(repeat(d, n) for d in defaults)
    for slot, values in zip(slots, columns):
        deque(map(slot.__set__, acts, values), 0)
    return acts


def _closed_form(pp: int, microbatches: int, vpp: int) -> float:
    return (pp - 1) / (microbatches + pp - 1)


def one_f_one_b_order(rank: int, pp: int, microbatches: int, stage: int | None = None) -> list[Action]:
    """Megatron's order for one rank (stage defaults to the rank)."""
    s = rank if stage is None else stage
    warmup = min(pp - rank - 1, microbatches)
    steady = microbatches - warmup
    kinds = [Kind.F] * warmup + [Kind.F, Kind.B] * steady + [Kind.B] * warmup
    mbs = list(range(warmup)) + [0] * (2 * steady) + list(range(steady, microbatches))
    mbs[warmup:warmup + 2 * steady:2] = range(warmup, microbatches)   # one F then one B
    mbs[warmup + 1:warmup + 2 * steady:2] = range(steady)
    return _actions(s, kinds, mbs)


@register("1f1b", summary="1F1B (PipeDream-Flush / Megatron): warm-up, one F one B, cool-down; "
          "holds at most P microbatches", closed_form=_closed_form, formula="(P-1)/(M+P-1)",
          aliases=("pipedream-flush", "one-f-one-b"), sizes=fb_sizes)
def generate(pp: int, microbatches: int, vpp: int = 1, **_: object) -> Schedule:
    if vpp != 1:
        raise ConfigError(f"--vpp: 1f1b runs one chunk per rank, got --vpp {vpp}; "
                          "use interleaved-1f1b for virtual stages")
    # a million small acyclic objects at scale: the cyclic collector would only cost time
    enabled = gc.isenabled()
    gc.disable()
    try:
        ranks = tuple(tuple(one_f_one_b_order(r, pp, microbatches)) for r in range(pp))
    finally:
        if enabled:
            gc.enable()
    sched = Schedule("1f1b", pp, 1, microbatches, loop_placement(pp, 1), ranks)
    for r in range(pp):     # the kinds as laid out above: the compile and summary read them
        warmup = min(pp - r - 1, microbatches)
        known_rank_facts(sched, r, "F" * warmup + "FB" * (microbatches - warmup) + "B" * warmup,
                         frozenset((r,)), in_order=True)
    return sched
