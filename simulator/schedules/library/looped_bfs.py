"""Looped BFS (breadth-first pipeline, Lamy-Poirier 2022; PyTorch ``ScheduleLoopedBFS``).

Each rank holds v chunks (loop placement: stage s on rank s mod P) and runs every microbatch
through its first chunk, then its second, ...; backwards go last chunk first, microbatches in
reverse order. Holds all M·v activations, like GPipe, but the pipeline fills once per chunk pass
only when M < P. Orders are action for action PyTorch 2.13's.
"""

from __future__ import annotations

from ..action import Action, Kind
from ..registration import fb_sizes, register
from ..schedule import Schedule, loop_placement


def _closed_form(pp: int, microbatches: int, vpp: int) -> float:
    return (pp - 1) / (vpp * microbatches + pp - 1)


@register("looped-bfs",
          summary="Looped BFS (PyTorch LoopedBFS): v chunks per rank, all microbatches through "
                  "one chunk before the next; backwards in reverse",
          closed_form=_closed_form,
          formula="(P-1)/(vM+P-1)",
          default_vpp=2, variable_vpp=True, aliases=("bfs", "loopedbfs"), sizes=fb_sizes,
          torch_class="LoopedBFS")
def generate(pp: int, microbatches: int, vpp: int = 2, **_: object) -> Schedule:
    ranks = []
    for r in range(pp):
        stages = [c * pp + r for c in range(vpp)]
        acts = [Action(s, Kind.F, m) for s in stages for m in range(microbatches)]
        acts += [Action(s, Kind.B, m) for s in reversed(stages) for m in reversed(range(microbatches))]
        ranks.append(tuple(acts))
    return Schedule("looped-bfs", pp, vpp, microbatches, loop_placement(pp, vpp), tuple(ranks))
