"""Per-chunk timings of the Workload FSM states, computed once before the run.

A layer's state costs: ``Forward_Pass`` = forward compute + its blocking forward collective (TP or
EP); ``Input_Gradient`` = input-gradient compute + its blocking collective; ``Weight_Gradient`` =
weight-gradient compute (its collective is non-blocking and goes to the DP stream);
``Forward_In_BackPass`` = a forward recomputed before an input gradient. An action's cost is the
sum over its chunk's layers, so the runtime advances time once per action while per-layer times
stay known (for traces, and for when each weight-gradient collective becomes ready).

Compute times are the rows' times x ``gpu.compute_scale`` x the runtime profile's per-layer
``layer_scale`` (F, I, W factors; collectives are not scaled).

With ``tp_overlap`` (Megatron-LM's ``--tp-comm-overlap``) a layer state's tensor-parallel
collective is pipelined with the state's GEMMs (the row's compute): the state lasts the longer
of the two (:func:`overlapped`), so the collective hides behind the GEMMs up to their length and
only what is longer shows. Without it the collective blocks (compute + collective). The
overlapped F/B pair of DualPipe(V) follows the same rule (``program.py``).

Within a full backward (B) each layer runs Weight_Gradient then Input_Gradient (ASTRA-sim's
order), last layer first; with split backward, I runs every Input_Gradient and W every
Weight_Gradient, last layer first.

With ``gathers`` (FSDP2 without a pipeline, :meth:`~.options.DDPSettings.reshards`) every F
action all-gathers each layer's weights before the layer's first state in it (``gathers``: the
gather's time per layer), and every I and B too with ``backward_gathers`` (FSDP2's
reshard_after_forward): the gathers run back to back on their own stream from the action's
start, in the order the action needs them (FSDP2 prefetches the next layer while one
computes), and a layer waits for its gather (an ``FSDP_All_Gather`` segment of the wait,
counted as blocking communication), then copies them out of the gather on the compute stream
(an ``FSDP_Copy_Out`` segment); each layer's weight gradient then also copies its gradients
into the reduce-scatter's input (FSDP2's copy-in, on the compute stream before the
reduce-scatter: part of its ``Weight_Gradient`` segment, so the collective is ready at its
end). A W needs no weights.
"""

from __future__ import annotations

from typing import NamedTuple

from ..system.collectives import collective_time_ns
from ..system.config import SystemConfig
from ..system.topology import LinkModel
from ..workload.layer_ops import ATTENTION_CORE_ROW
from ..workload.model import CommGroup, Header, Layer, Partition
from ..schedules.action import Kind

FORWARD_PASS = "Forward_Pass"
INPUT_GRADIENT = "Input_Gradient"
WEIGHT_GRADIENT = "Weight_Gradient"
FORWARD_IN_BACKPASS = "Forward_In_BackPass"
FSDP_ALL_GATHER = "FSDP_All_Gather"     # a layer waiting for its weights' all-gather
FSDP_COPY_OUT = "FSDP_Copy_Out"         # its gathered weights copied into its parameters


# a NamedTuple, not a dataclass: start-up (simulator/__init__.py)
class Segment(NamedTuple):
    """One FSM state of one layer inside an action: offset from the action start, duration."""

    layer: int      # file-order layer index
    state: str
    offset: float
    duration: float


class ActionCost(NamedTuple):
    duration: float
    comm: float                      # part of `duration` spent in blocking collectives
    segments: tuple[Segment, ...]
    layer_ops: int                   # layer-level F / IG / WG executions (recompute included)


class DPCollective(NamedTuple):
    """A weight-gradient collective a layer issues after its last microbatch."""

    layer: int
    ready_offset: float   # when, from the start of the issuing action, the WG compute is done
    duration: float
    update_ns: float
    nbytes: int


class ChunkCosts(NamedTuple):
    F: ActionCost
    I: ActionCost
    W: ActionCost
    B: ActionCost
    dp_after_W: tuple[DPCollective, ...]
    dp_after_B: tuple[DPCollective, ...]

    def of(self, kind: str) -> ActionCost:
        return getattr(self, kind)

    def dp_after(self, kind: str) -> tuple[DPCollective, ...]:
        return self.dp_after_W if kind == Kind.W else self.dp_after_B


def overlapped(compute: float, comm: float) -> float:
    """How long ``compute`` and a collective of ``comm`` pipelined with it take: the collective
    hides behind the compute up to the compute's length, never more."""
    return comm if comm > compute else compute


def _build(parts: list[tuple[int, str, float, float]]) -> ActionCost:
    segs = []
    add, segment = segs.append, Segment
    t = 0.0
    comm = 0.0
    for layer, state, compute, coll in parts:
        d = compute + coll
        add(segment(layer, state, t, d))
        t += d
        comm += coll
    return ActionCost(t, comm, tuple(segs), len(parts))


def _gathered(parts: list[tuple[int, str, float, float]],
              gathers: dict[int, tuple[float, float, float]]) -> ActionCost:
    """:func:`_build` with each layer's weights all-gathered first (module docstring): the
    gathers back to back from the action's start, a layer's first state waiting for its own,
    then its copy-out."""
    segs = []
    add, segment = segs.append, Segment
    t = comm = stream = 0.0
    ready: dict[int, float] = {}
    for layer, state, compute, coll in parts:
        at = ready.get(layer)
        copy = 0.0
        if at is None:
            gather, copy, _ = gathers.get(layer, (0.0, 0.0, 0.0))
            stream += gather
            at = ready[layer] = stream
        if at > t:
            wait = at - t
            add(segment(layer, FSDP_ALL_GATHER, t, wait))
            comm += wait
            t += wait
        if copy > 0:
            add(segment(layer, FSDP_COPY_OUT, t, copy))
            t += copy
        d = compute + coll
        add(segment(layer, state, t, d))
        t += d
        comm += coll
    return ActionCost(t, comm, tuple(segs), len(parts))


def cp_ring_exposed(header: Header, links: LinkModel) -> tuple[float, float] | None:
    """What context parallelism's K/V ring adds to an attention row's forward and input
    gradient (Transformer Engine's AttnFuncWithCPAndKVP2P): cp steps, each one block's
    attention with the next block's transfer to the ring neighbour behind it, waited for at the
    step's end, so each step lasts the longer of the two. The forward sends K and V in all steps
    but the last; the backward sends K and V in the first, K, V and their gradients in the
    middle ones, the gradients in the last (back to their owner). None at cp 1."""
    cp = header.cp
    if cp < 2 or header.cp_kv_bytes <= 0:
        return None
    link = links.ring_neighbour(cp)

    def shows(nbytes: float, step: float) -> float:
        t = nbytes * 8.0 / link.bandwidth_gbps + link.latency_ns
        return t - step if t > step else 0.0

    kv, f, b = header.cp_kv_bytes, header.cp_fwd_step_ns, header.cp_bwd_step_ns
    fwd = (cp - 1) * shows(kv, f)
    bwd = 2 * shows(kv, b) + (cp - 2) * shows(2 * kv, b)
    return fwd, bwd


def chunk_costs(layers: tuple[Layer, ...], recompute: dict[int, tuple[int, ...]],
                header: Header, system: SystemConfig, links: LinkModel | None = None,
                tp_overlap: bool = False,
                gathers: dict[int, tuple[float, float, float]] | None = None,
                backward_gathers: bool = True) -> ChunkCosts:
    scale = system.gpu.compute_scale
    links = links if links is not None else LinkModel(header, system)
    # the runtime profile's per-layer factors (F, I, W) on the compute, not the collectives
    layer_scale = system.runtime.layer_factors if system.runtime.layer_scale else None

    def factor(layer: Layer, kind: int) -> float:
        f = layer_scale(layer.index) if layer_scale is not None else None
        return scale if f is None else scale * f[kind]

    ring = cp_ring_exposed(header, links)

    def part(layer: Layer, state: str, compute: float, comm, forward: bool):
        t = collective_time_ns(comm, header, system, forward=forward, links=links)
        if tp_overlap and t > 0 and comm.group is CommGroup.TP:
            t = overlapped(compute, t) - compute   # what shows beyond the GEMMs
        if ring and layer.name == ATTENTION_CORE_ROW:
            t += ring[0] if forward else ring[1]
        return (layer.index, state, compute, t)

    def fwd(layer: Layer, state: str = FORWARD_PASS) -> tuple[int, str, float, float]:
        return part(layer, state, layer.fwd_compute * factor(layer, 0), layer.fwd_comm, True)

    def ig(layer: Layer) -> tuple[int, str, float, float]:
        return part(layer, INPUT_GRADIENT, layer.ig_compute * factor(layer, 1), layer.ig_comm,
                    False)

    # FSDP2's copy-in of each layer's gradients before its reduce-scatter (module docstring)
    copy_in = {i: v[2] for i, v in gathers.items()} if gathers else {}

    def wg(layer: Layer) -> tuple[int, str, float, float]:
        return (layer.index, WEIGHT_GRADIENT,
                layer.wg_compute * factor(layer, 2) + copy_in.get(layer.index, 0.0), 0.0)

    f_parts = [fwd(layer) for layer in layers]
    i_parts: list[tuple[int, str, float, float]] = []
    w_parts: list[tuple[int, str, float, float]] = []
    b_parts: list[tuple[int, str, float, float]] = []
    for pos in range(len(layers) - 1, -1, -1):
        layer = layers[pos]
        i, w = ig(layer), wg(layer)     # each once: B repeats I's and W's parts
        if pos in recompute:
            redo = [fwd(layers[p], FORWARD_IN_BACKPASS) for p in recompute[pos]]
            i_parts += redo
            b_parts += [w, *redo]
        else:
            b_parts.append(w)
        i_parts.append(i)
        w_parts.append(w)
        b_parts.append(i)
    F, I, W, B = _build(f_parts), _build(i_parts), _build(w_parts), _build(b_parts)
    if gathers:
        F = _gathered(f_parts, gathers)
        if backward_gathers:
            I, B = _gathered(i_parts, gathers), _gathered(b_parts, gathers)

    def dp_list(cost: ActionCost) -> tuple[DPCollective, ...]:
        by_index = {layer.index: layer for layer in layers}
        out = []
        for seg in cost.segments:
            if seg.state != WEIGHT_GRADIENT:
                continue
            layer = by_index[seg.layer]
            if not layer.wg_comm.active:
                continue
            out.append(DPCollective(layer.index, seg.offset + seg.duration,
                                    collective_time_ns(layer.wg_comm, header, system, links=links),
                                    float(layer.update_time), layer.wg_comm.bytes))
        return tuple(out)

    return ChunkCosts(F, I, W, B, dp_list(W), dp_list(B))


def partition_costs(partition: Partition, header: Header, system: SystemConfig,
                    links: LinkModel | None = None, tp_overlap: bool = False,
                    gathers: list[dict[int, tuple[float, float, float]]] | None = None,
                    backward_gathers: bool = True) -> list[ChunkCosts]:
    """Every chunk's costs; ``gathers``: per chunk, FSDP2's all-gather, copy-out and copy-in
    times per layer (:func:`.tail.fsdp_gathers`; gathered in the backward too with
    ``backward_gathers``)."""
    recompute = partition.recompute or tuple({} for _ in partition.chunks)
    return [chunk_costs(c, recompute[i], header, system, links, tp_overlap,
                        gathers[i] if gathers else None, backward_gathers)
            for i, c in enumerate(partition.chunks)]
