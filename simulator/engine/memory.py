"""What each rank holds in memory: static weights and optimizer state, plus stashed activations.

- Static, per rank: for every chunk it runs, the rows' parameters × ``bytes_per_param``; a row's
  parameters are ``params_per_layer`` when given, else its weight-gradient all-reduce or
  reduce-scatter bytes ÷ ``grad_bytes_per_param`` (one gradient per parameter; all-gathers of
  the same weights are not counted again). A schedule
  that keeps several weight versions (PipeDream-2BW: ``meta["weight_versions"]``) holds the extra
  versions of the weights (``grad_bytes_per_param`` bytes per parameter each).
- Activations, per (stage, microbatch): allocated when its forward starts, freed when its last
  weight-carrying backward (W, or B when the backward is not split) ends. A transformer layer
  stashes ``activation_bytes_per_layer``, or ``activation_factor × pp_comm``, spread evenly over
  its rows (one row per layer in the model layout; AICB's sub-layer rows); a row that will be
  recomputed keeps nothing, except the first row of a recompute range, which keeps its input
  (``pp_comm`` bytes).
"""

from __future__ import annotations

from dataclasses import dataclass

from ..schedules.schedule import Schedule
from ..system.config import MemoryConfig
from ..workload.iteration_rows import rank_iteration_rows
from ..workload.model import CommType, Header, Layer, Partition


@dataclass(frozen=True)
class MemoryModel:
    static_bytes: tuple[float, ...]       # per rank
    activation_bytes: tuple[float, ...]   # per chunk, per microbatch in flight

    def describe(self) -> dict:
        return {"static_bytes": list(self.static_bytes),
                "activation_bytes_per_chunk": list(self.activation_bytes)}


def _params(layer: Layer, cfg: MemoryConfig) -> float:
    """Parameters behind a row: its gradient reduction (all-reduce or reduce-scatter) moves one
    gradient per parameter; an all-gather of the same weights must not count them again."""
    if cfg.params_per_layer > 0:
        return cfg.params_per_layer
    comm = layer.wg_comm
    if comm.active and comm.type in (CommType.ALLREDUCE, CommType.REDUCESCATTER):
        return comm.bytes / cfg.grad_bytes_per_param
    return 0.0


def build_memory_model(schedule: Schedule, partition: Partition, header: Header,
                       cfg: MemoryConfig) -> MemoryModel:
    per_layer = cfg.activation_bytes_per_layer or cfg.activation_factor * header.pp_comm
    per_row = per_layer / partition.rows_per_layer
    recompute = partition.recompute or tuple({} for _ in partition.chunks)
    acts = []
    for c, layers in enumerate(partition.chunks):
        dropped: set[int] = set()
        kept_inputs: set[int] = set()
        for positions in recompute[c].values():
            if positions:
                kept_inputs.add(positions[0])
                dropped.update(positions[1:])
        total = 0.0
        for pos in range(len(layers)):
            if pos in kept_inputs:
                total += header.pp_comm
            elif pos not in dropped:
                total += per_row
        acts.append(total)
    versions = int(schedule.meta.get("weight_versions", 1) or 1)
    static = []
    for r in range(schedule.pp):
        chunks = sorted({schedule.stage_chunk[s] for s in schedule.stages_of(r)})
        params = sum(_params(layer, cfg) for c in chunks for layer in partition.chunks[c])
        params += sum(_params(layer, cfg)
                      for layer in rank_iteration_rows(partition, chunks, schedule.pp))
        static.append(params * cfg.bytes_per_param
                      + (versions - 1) * params * cfg.grad_bytes_per_param)
    return MemoryModel(tuple(static), tuple(acts))
