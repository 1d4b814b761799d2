"""What each rank holds in memory, as bytes per rank and per (stage, action kind).

The model is applied over a run's executed order by :mod:`.memory_use`; nothing here depends on
time. Its parts (docs/model.md, Memory):

- **static**, per rank, for every chunk it runs: a row's parameters are ``params_per_layer``
  when given, else its weight-gradient all-reduce or reduce-scatter bytes ÷
  ``grad_bytes_per_param`` (one gradient per parameter; all-gathers of the same weights are not
  counted again): the system's, else the header's (``pipesim generate`` writes 4, fp32
  gradients), else 2. Without ``memory.precision`` every parameter costs ``bytes_per_param``, held
  from the start and shown as weights and gradients (``grad_bytes_per_param`` each) and
  optimizer state (the rest). With it: weights in that dtype, an fp32 master copy in mixed
  precision and the optimizer's state (sharded over DP with ``zero`` >= 1) from the start, and
  the gradients (sharded with ``zero`` 2) from the stage's first backward on. A schedule that
  keeps several weight versions (PipeDream-2BW: ``meta["weight_versions"]``) holds the extra
  versions (``grad_bytes_per_param`` bytes per parameter each).
- **activations**, per (stage, microbatch): the stash is allocated when its forward starts and
  freed when its last weight-carrying backward (W, or B when the backward is not split) ends; an
  I frees ``memory.actions``' ``I.frees`` of it and keeps ``I.keeps`` until its W (by the shape:
  on torch's runtimes nothing and the header's ``split_backward_bytes``; elsewhere, where the
  header gives ``deferred_wgrad_bytes``, the whole stash and those bytes). A layer
  stashes ``activation_bytes_per_layer``, else the header's ``activation_bytes`` (what
  ``pipesim generate`` works out from the model's shape), else ``activation_factor × pp_comm``,
  spread evenly
  over its rows; a row that will be recomputed keeps nothing, except the first row of a
  recompute range, which keeps its input (``pp_comm`` bytes). ``F.keeps`` replaces the rows' sum.
  The last stage also keeps what its loss saves for the backward (``memory.loss_keeps_bytes``),
  held and freed with the stash.
- **transient**: an action's working memory above the higher of the levels before and after it:
  ``memory.actions``' ``transient``, else the header's ``f/b/i/w_transient_bytes`` (one
  transformer layer's, from the model's shape) for a chunk with transformer layer rows, else 0;
  a B or I that recomputes a range also holds the range's stash again while it runs.
- **runtime buffers** (``runtime.sends_held``, ``recv_buffers``, ``kept_outputs``): tensors sent
  to another rank (``pp_comm`` bytes each), receive buffers, the last stage's kept outputs (an
  output is part of its forward's stash until the backward frees that; a kept one stays from
  then to the step's end).
  Two stages of one rank hand tensors over by reference: nothing is counted for them.
"""

from __future__ import annotations

from typing import NamedTuple

from ..schedules.registry import torch_class_of
from ..schedules.schedule import Schedule
from ..system.config import MemoryConfig, SystemConfig
from ..system.memory_actions import (DTYPE_BYTES, MASTER_COPY_BYTES, OPTIMIZER_STATE_BYTES,
                                     action_bytes)
from ..system.topology import Placement
from ..workload.iteration_rows import rank_iteration_rows
from ..workload.model import CommGroup, CommType, Header, Layer, Partition

CATEGORIES = ("weights", "gradients", "optimizer", "activations", "transient",
              "runtime_buffers")


# a NamedTuple, not a dataclass: start-up (simulator/__init__.py)
class StageMemory(NamedTuple):
    """Bytes per microbatch of one global stage's actions."""

    stash: float             # F keeps it for the backward (the last stage's: its loss's too)
    f_transient: float
    i_frees: float           # of the stash, when the I ends
    i_keeps: float           # until the W
    i_transient: float
    b_transient: float
    w_transient: float
    gradients: float         # allocated when the stage's first backward ends (0: in static)
    send_forward: float      # an F's output, held by its send after its backward freed the stash
    send_backward: float     # an I's / B's input gradient, held by its send
    kept_output: float       # the last stage's output, kept from its backward to the step's end


class MemoryModel(NamedTuple):
    static_bytes: tuple[float, ...]       # per rank, held from the start
    activation_bytes: tuple[float, ...]   # per chunk, per microbatch in flight (the rows' stash)
    static_parts: tuple[dict, ...]        # per rank: {category: bytes} of static_bytes
    stages: tuple[StageMemory, ...]       # per global stage
    sends_held: str                       # none | until_sent | step_end
    gradients_per_step: bool = False      # freed at every step's end (torch's zero_grad)
    graph_freed: bool = False             # a split backward's I frees the stash (by the shape)

    def describe(self) -> dict:
        return {"static_bytes": list(self.static_bytes),
                "activation_bytes_per_chunk": list(self.activation_bytes)}


def layer_params(layer: Layer, cfg: MemoryConfig) -> float:
    """Parameters behind a row: its gradient reduction (all-reduce or reduce-scatter) moves one
    gradient per parameter; an all-gather of the same weights must not count them again."""
    if cfg.params_per_layer > 0:
        return cfg.params_per_layer
    comm = layer.wg_comm
    if comm.active and comm.type in (CommType.ALLREDUCE, CommType.REDUCESCATTER):
        return comm.bytes / cfg.grad_bytes()
    return 0.0


_LAYER_ROWS = ("attention", "mlp", "moe")   # a transformer layer's sub-layer rows, by name


def _sub_layer_rows(partition: Partition) -> float:
    """Rows that make one transformer layer: the AICB layout's, else the rows from one
    transformer row to the next row of the same name (``pipesim generate`` writes a layer as
    attention and MLP rows)."""
    if partition.rows_per_layer != 1.0:
        return partition.rows_per_layer
    names = [row.name for rows in partition.chunks for row in rows]
    firsts = [i for i, n in enumerate(names) if n.startswith(_LAYER_ROWS)]
    if not firsts:
        return 1.0
    again = names.index(names[firsts[0]], firsts[0] + 1) if names.count(
        names[firsts[0]]) > 1 else len(names)
    return float(sum(1 for n in names[firsts[0]:again] if n.startswith(_LAYER_ROWS)))


def _chunk_stash(partition: Partition, header: Header,
                 cfg: MemoryConfig) -> tuple[list[float], list[float]]:
    """Per chunk, what a microbatch's forward keeps, and the stash its largest recompute range
    re-creates inside the backward that recomputes it (0 without recompute)."""
    # the header's activation_bytes (the model's shape) is a transformer layer's: spread over
    # its sub-layer rows, other rows (embedding, head, loss) keep nothing
    by_shape = not cfg.activation_bytes_per_layer and header.activation_bytes > 0
    if by_shape:
        per_row = header.activation_bytes / _sub_layer_rows(partition)
    else:
        per_layer = cfg.activation_bytes_per_layer or cfg.activation_factor * header.pp_comm
        per_row = per_layer / partition.rows_per_layer
    recompute = partition.recompute or tuple({} for _ in partition.chunks)
    acts, again = [], []
    for c, layers in enumerate(partition.chunks):
        keeps = [per_row if not by_shape or row.name.startswith(_LAYER_ROWS) else 0.0
                 for row in layers]
        dropped: set[int] = set()
        kept_inputs: set[int] = set()
        for positions in recompute[c].values():
            if positions:
                kept_inputs.add(positions[0])
                dropped.update(positions[1:])
        acts.append(sum(header.pp_comm if pos in kept_inputs else 0.0 if pos in dropped
                        else keeps[pos] for pos in range(len(layers))))
        again.append(max((sum(keeps[p] for p in positions)
                          for positions in recompute[c].values()), default=0.0))
    return acts, again


def _chunk_split_keeps(partition: Partition, per_layer: int) -> list[float]:
    """Per chunk, what its layers' I keeps until their W by the model's shape: ``per_layer``
    bytes (a header's ``split_backward_bytes`` or ``deferred_wgrad_bytes``) per transformer
    layer, spread over its sub-layer rows."""
    if per_layer <= 0:
        return [0.0] * len(partition.chunks)
    per_row = per_layer / _sub_layer_rows(partition)
    return [per_row * sum(1 for row in rows if row.name.startswith(_LAYER_ROWS))
            for rows in partition.chunks]


def _static(params: float, cfg: MemoryConfig, versions: int, shard: int) -> tuple[dict, float]:
    """({category: bytes} held from the start, gradient bytes allocated at the first backward)
    for ``params`` parameters whose sharded state is split over ``shard`` ranks."""
    per_param = cfg.grad_bytes()
    extra = (versions - 1) * params * per_param
    if not cfg.precision:
        total = params * cfg.per_param_bytes
        weights = min(params * per_param, total)
        grads = min(params * per_param, total - weights)
        return {"weights": weights + extra, "gradients": grads,
                "optimizer": total - weights - grads}, 0.0
    dtype = DTYPE_BYTES[cfg.precision]
    state = OPTIMIZER_STATE_BYTES[cfg.optimizer or "adam"]
    state += MASTER_COPY_BYTES if cfg.precision != "fp32" else 0
    optimizer = params * state / (shard if cfg.zero >= 1 else 1)
    grads = params * DTYPE_BYTES[cfg.grad_dtype or cfg.precision] / (shard if cfg.zero >= 2
                                                                     else 1)
    weights = params * dtype / (shard if cfg.zero >= 3 else 1)
    return {"weights": weights + extra, "gradients": 0.0, "optimizer": optimizer}, grads


def _state(rows, cfg: MemoryConfig, versions: int, place: Placement) -> tuple[dict, float]:
    """:func:`_static` of ``rows``' parameters, each on its data-parallel group: an expert's
    (rows reduced over DP_EP) sharded over the expert-DP ranks of the stage's expert grid, as
    Megatron-LM's distributed optimizer shards them over the expert data-parallel group, the
    others over the data-parallel ranks (or ``memory.shard_ranks`` of them)."""
    dense = experts = 0.0
    for row in rows:
        if row.wg_comm.group is CommGroup.DP_EP:
            experts += layer_params(row, cfg)
        else:
            dense += layer_params(row, cfg)
    shard = cfg.shard_ranks or place.dp
    part, grads = _static(dense, cfg, versions, shard)
    if experts:
        more, more_grads = _static(experts, cfg, versions,
                                   min(shard, place.edp) if cfg.shard_ranks else place.edp)
        part = {c: part[c] + more[c] for c in part}
        grads += more_grads
    return part, grads


def _gathered(cfg: MemoryConfig, layer_params: float) -> tuple[float, float]:
    """With the weights sharded (zero 3, FSDP2): what a transformer layer's action holds above
    the sharded state, (forward, backward). FSDP2 all-gathers a layer's weights whole in the
    gather dtype before it computes and prefetches the next layer's behind it (torch's
    ``fully_shard``: implicit prefetching in backward, the next all-gather issued before the
    current layer's compute in forward), so two layers' weights are whole at once; the backward
    also holds the layer's whole gradient in the reduction's dtype until its reduce-scatter."""
    if cfg.zero < 3:
        return 0.0, 0.0
    weights = 2 * layer_params * DTYPE_BYTES[cfg.gather_dtype or cfg.precision]
    return weights, weights + layer_params * DTYPE_BYTES[cfg.grad_dtype or cfg.precision]


def build_memory_model(schedule: Schedule, partition: Partition, header: Header,
                       system: SystemConfig, p2p: str = "async",
                       pp_comm: int | None = None) -> MemoryModel:
    # the header's gradient bytes per parameter stand in when the system gives none
    cfg = system.memory._replace(
        grad_bytes_per_param=system.memory.grad_bytes(header.grad_bytes_per_param))
    pp_comm = header.pp_comm if pp_comm is None else pp_comm
    acts, recomputed = _chunk_stash(partition, header, cfg)
    # torch's runtime keeps a split backward's whole graph to its W (retain_graph=True); the
    # others free it at the I, as Megatron-LM's zero-bubble runtime does, and keep only what
    # the deferred weight-gradient GEMMs read, where the header says how much
    graph_freed = not p2p.startswith("torch") and header.deferred_wgrad_bytes > 0
    split_keeps = _chunk_split_keeps(partition, header.deferred_wgrad_bytes if graph_freed
                                     else header.split_backward_bytes)
    # a transformer layer's working memory by the shape (header), for a chunk with one
    shaped = [any(row.name.startswith(_LAYER_ROWS) for row in rows) for rows in partition.chunks]
    layer_transient = {"F": header.f_transient_bytes, "B": header.b_transient_bytes,
                       "I": header.i_transient_bytes, "W": header.w_transient_bytes}
    versions = int(schedule.meta.get("weight_versions", 1) or 1)
    place = Placement.of(header, system, schedule.pp)
    sends_held, recv_buffers, kept_outputs, gradients = system.runtime.retention(
        p2p, torch_class_of(schedule.name))
    # a transformer layer's weights per chunk, what FSDP gathers whole for one layer
    per_layer = _sub_layer_rows(partition)
    gathered = []
    for rows in partition.chunks:
        own = [layer_params(row, cfg) for row in rows if row.name.startswith(_LAYER_ROWS)]
        gathered.append(_gathered(cfg, sum(own) * per_layer / len(own)) if own else (0.0, 0.0))
    placement = schedule.placement
    stages = []
    for s in range(schedule.n_stages):
        chunk = schedule.stage_chunk[s]
        layers = len(partition.chunks[chunk])
        # per_param counts all the rows' parameters for what a stage keeps or frees, its
        # largest row's for a transient (an action works on one row at a time)
        row_params = [layer_params(layer, cfg) for layer in partition.chunks[chunk]]

        def given(kind: str, name: str, default: float = 0.0) -> float:
            params = max(row_params, default=0.0) if name == "transient" else sum(row_params)
            v = action_bytes(cfg.actions, s, kind, name, layers, params)
            if v is not None:
                return v
            if name == "transient":
                # one layer at a time: the layer's own; a backward that recomputes a range
                # holds the range's stash again while it runs; sharded weights gathered whole
                return ((float(layer_transient[kind]) if shaped[chunk] else 0.0)
                        + (recomputed[chunk] if kind in ("B", "I") else 0.0)
                        + gathered[chunk][0 if kind == "F" else 1])
            return default

        nxt, prev = schedule.next_stage(s), schedule.prev_stage(s)
        # a tensor handed to another rank is held by its send. On one rank, torch hands a
        # forward's output over by reference, kept until the next step replaces it (as a send
        # held to the step's end); a gradient replaces the stage's preallocated receive buffer
        # (counted in static memory), so it adds nothing (measured: benchmarks/memory)
        held_next = nxt is not None and (placement[nxt] != placement[s]
                                          or sends_held == "step_end")
        held_prev = prev is not None and placement[prev] != placement[s]
        _, grads = _state(partition.chunks[chunk], cfg, versions, place)
        # torch's first stage computes no input gradient: its I does nothing and its W is
        # the whole backward (stage.py: ``if not self.is_first``)
        torch_first = prev is None and p2p.startswith("torch")
        # torch's stage drops the last stage's output from its cache at the microbatch's first
        # backward, so where nothing keeps the outputs an I frees it (measured:
        # benchmarks/memory)
        output_at_i = pp_comm if nxt is None and p2p.startswith("torch") \
            and kept_outputs != "step_end" else 0.0
        # the loss's saved tensors live as long as the last stage's stash: the system's or a
        # calibration's figure, else the header's (the model's shape), whose working memory the
        # last stage's forward and backward (the I of a split one) hold one after the layers'
        loss = loss_f = loss_b = 0.0
        if nxt is None:
            loss = cfg.loss_keeps_bytes
            if cfg.loss_by_shape:
                loss = float(header.loss_keeps_bytes)
                loss_f, loss_b = header.loss_f_transient_bytes, header.loss_b_transient_bytes
        stages.append(StageMemory(
            stash=given("F", "keeps", acts[chunk]) + loss,
            f_transient=max(given("F", "transient"), loss_f),
            # a graph-freeing I runs the loss's backward, which releases what the loss kept
            i_frees=0.0 if torch_first else given(
                "I", "frees", acts[chunk] + loss if graph_freed else 0.0) + output_at_i,
            # by the shape: the I's own input gradient (among what it allocates) is counted as
            # held by its send, the gradient it received is the last row's output gradient
            # (a graph-freeing I's kept gradients are its linears' own, none of them received)
            i_keeps=0.0 if torch_first else given(
                "I", "keeps", split_keeps[chunk] if graph_freed else max(
                    0.0, split_keeps[chunk] - (pp_comm if prev is not None else 0.0))),
            i_transient=0.0 if torch_first else max(given("I", "transient"), loss_b),
            b_transient=max(given("B", "transient"), loss_b),
            w_transient=given("B" if torch_first else "W", "transient"), gradients=grads,
            # until_sent: a forward's output leaves with the stash, its transfer long done
            send_forward=pp_comm if held_next and sends_held == "step_end" else 0.0,
            send_backward=pp_comm if held_prev and sends_held != "none" else 0.0,
            kept_output=pp_comm if nxt is None and kept_outputs == "step_end" else 0.0))
    static, parts = [], []
    for r in range(schedule.pp):
        own = schedule.stages_of(r)
        chunks = sorted({schedule.stage_chunk[s] for s in own})
        rows = [row for c in chunks for row in partition.chunks[c]]
        part, _ = _state(rows + list(rank_iteration_rows(partition, chunks, schedule.pp)), cfg,
                         versions, place)
        if recv_buffers == "per_microbatch":
            part["runtime_buffers"] = sum(_buffers(schedule, s) for s in own) \
                * schedule.microbatches * pp_comm
        parts.append({c: part.get(c, 0.0) for c in CATEGORIES})
        static.append(sum(part.values()))
    return MemoryModel(tuple(static), tuple(acts), tuple(parts), tuple(stages), sends_held,
                       gradients == "per_step", graph_freed)


def _buffers(schedule: Schedule, stage: int) -> int:
    """Receive buffers per microbatch that torch allocates for ``stage`` (stage.py's
    _prepare_forward_infra / _prepare_backward_infra): one for the activation when its
    previous stage is on another rank (a same-rank one hands its tensor over by reference),
    one for the gradient when it has a next stage."""
    prev = schedule.prev_stage(stage)
    remote_prev = prev is not None and schedule.placement[prev] != schedule.placement[stage]
    return remote_prev + (schedule.next_stage(stage) is not None)
