"""1F1B (Megatron non-interleaved, PipeDream-Flush).

Rank r runs ``min(P-r-1, M)`` warm-up forwards, ``M - warmup`` steady steps of one F then one B,
then ``warmup`` cool-down backwards. M < P is legal (ranks just warm up less).
"""

from __future__ import annotations

from ...errors import ConfigError
from ..action import Action, Kind
from ..registry import fb_sizes, register
from ..schedule import Schedule, loop_placement


def _closed_form(pp: int, microbatches: int, vpp: int) -> float:
    return (pp - 1) / (microbatches + pp - 1)


def one_f_one_b_order(rank: int, pp: int, microbatches: int, stage: int | None = None) -> list[Action]:
    """Megatron's order for one rank (stage defaults to the rank)."""
    s = rank if stage is None else stage
    warmup = min(pp - rank - 1, microbatches)
    acts = [Action(s, Kind.F, m) for m in range(warmup)]
    for i in range(microbatches - warmup):
        acts.append(Action(s, Kind.F, warmup + i))
        acts.append(Action(s, Kind.B, i))
    acts += [Action(s, Kind.B, m) for m in range(microbatches - warmup, microbatches)]
    return acts


@register("1f1b", summary="1F1B (PipeDream-Flush / Megatron): warm-up, one F one B, cool-down; "
          "holds at most P microbatches", closed_form=_closed_form, formula="(P-1)/(M+P-1)",
          aliases=("pipedream-flush", "one-f-one-b"), sizes=fb_sizes)
def generate(pp: int, microbatches: int, vpp: int = 1, **_: object) -> Schedule:
    if vpp != 1:
        raise ConfigError(f"--vpp: 1f1b runs one chunk per rank, got --vpp {vpp}; "
                          "use interleaved-1f1b for virtual stages")
    ranks = tuple(tuple(one_f_one_b_order(r, pp, microbatches)) for r in range(pp))
    return Schedule("1f1b", pp, 1, microbatches, loop_placement(pp, 1), ranks)
