"""1F1B (Megatron non-interleaved, PipeDream-Flush).

Rank r runs ``min(P-r-1, M)`` warm-up forwards, ``M - warmup`` steady steps of one F then one B,
then ``warmup`` cool-down backwards. M < P is legal (ranks just warm up less).
"""

from __future__ import annotations

from array import array

from ...errors import ConfigError
from ..action import Action
from ..phases import known_rank_facts
from ..rank_actions import RankActions
from ..registration import fb_sizes, register
from ..schedule import Schedule, loop_placement


def _closed_form(pp: int, microbatches: int, vpp: int) -> float:
    return (pp - 1) / (microbatches + pp - 1)


def _kinds(rank: int, pp: int, microbatches: int) -> str:
    """Rank ``rank``'s kind letters: warm-up forwards, one F then one B, cool-down backwards."""
    warmup = min(pp - rank - 1, microbatches)
    return "F" * warmup + "FB" * (microbatches - warmup) + "B" * warmup


def _microbatches(rank: int, pp: int, microbatches: int) -> array:
    """The microbatch of each of :func:`_kinds`' actions: each kind takes 0, 1, 2, ... in
    turn."""
    warmup = min(pp - rank - 1, microbatches)
    steady = microbatches - warmup
    mbs = array("i", range(warmup)) + array("i", [0]) * (2 * steady) \
        + array("i", range(steady, microbatches))
    mbs[warmup:warmup + 2 * steady:2] = array("i", range(warmup, microbatches))
    mbs[warmup + 1:warmup + 2 * steady:2] = array("i", range(steady))
    return mbs


def one_f_one_b_rank(rank: int, pp: int, microbatches: int,
                     stage: int | None = None) -> RankActions:
    """Megatron's order for one rank (stage defaults to the rank), held as columns."""
    return RankActions(rank if stage is None else stage, _kinds(rank, pp, microbatches),
                       _microbatches(rank, pp, microbatches))


def one_f_one_b_order(rank: int, pp: int, microbatches: int,
                      stage: int | None = None) -> list[Action]:
    """Megatron's order for one rank (stage defaults to the rank), as actions."""
    return list(one_f_one_b_rank(rank, pp, microbatches, stage).actions())


@register("1f1b", summary="1F1B (PipeDream-Flush / Megatron): warm-up, one F one B, cool-down; "
          "holds at most P microbatches", closed_form=_closed_form, formula="(P-1)/(M+P-1)",
          aliases=("pipedream-flush", "one-f-one-b"), sizes=fb_sizes,
          torch_class="1F1B", megatron="1f1b", default_for="vpp=1")
def generate(pp: int, microbatches: int, vpp: int = 1, **_: object) -> Schedule:
    if vpp != 1:
        raise ConfigError(f"--vpp: 1f1b runs one chunk per rank, got --vpp {vpp}; "
                          "use interleaved-1f1b for virtual stages")
    ranks = tuple(one_f_one_b_rank(r, pp, microbatches) for r in range(pp))
    sched = Schedule("1f1b", pp, 1, microbatches, loop_placement(pp, 1), ranks)
    for r in range(pp):     # the kinds as laid out above: the compile and summary read them
        known_rank_facts(sched, r, ranks[r].kinds, frozenset((r,)), in_order=True)
    return sched
