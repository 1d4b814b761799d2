"""GPipe: all forwards, then all backwards in microbatch order (fill / drain)."""

from __future__ import annotations

from ...errors import ConfigError
from ..action import Action, Kind
from ..registration import fb_sizes, register
from ..schedule import Schedule, loop_placement


def _closed_form(pp: int, microbatches: int, vpp: int) -> float:
    return (pp - 1) / (microbatches + pp - 1)


@register("gpipe", summary="GPipe: all forwards then all backwards; holds M microbatches",
          closed_form=_closed_form, formula="(P-1)/(M+P-1)", sizes=fb_sizes,
          torch_class="GPipe")
def generate(pp: int, microbatches: int, vpp: int = 1, **_: object) -> Schedule:
    if vpp != 1:
        raise ConfigError(f"--vpp: gpipe runs one chunk per rank, got --vpp {vpp}")
    ranks = []
    for r in range(pp):
        acts = [Action(r, Kind.F, m) for m in range(microbatches)]
        acts += [Action(r, Kind.B, m) for m in range(microbatches)]
        ranks.append(tuple(acts))
    return Schedule("gpipe", pp, 1, microbatches, loop_placement(pp, 1), tuple(ranks))
