"""V-Min: the controllable-memory V schedule with about a third of 1F1B's activation memory
(Qi et al. 2024); same construction as V-Half (see ``v_half.py``), tighter building block."""

from __future__ import annotations

from ..registration import register
from ..schedule import Schedule, v_placement
from .v_half import build_work, check, controllable_memory_ranks, v_min_pattern


@register("v-min", megatron="zero-bubble-v",
          summary="V-Min (controllable-memory V schedule): about a third of 1F1B's "
          "activation memory; the zero-bubble fork's own order (--zero-bubble-v-schedule)",
          default_vpp=2, aliases=("vmin",), work=build_work)
def generate(pp: int, microbatches: int, vpp: int = 2, **_: object) -> Schedule:
    check("v-min", vpp)
    return Schedule("v-min", pp, 2, microbatches, v_placement(pp),
                    controllable_memory_ranks(pp, microbatches, v_min_pattern(pp)))
