"""Model layout: split the rows (the whole model once) into contiguous chunks.

Remainder layers go to the first chunks (ASTRA-sim guide, Part 3). Activation recompute follows
ASTRA-sim's HYBRID_TRANSFORMER_FWD_IN_BCKWD: when the backward pass reaches a layer listed in
``checkpoint_initiates``, the layers from the nearest checkpoint below it up to (not including) it
are recomputed first. A recompute never reaches into another chunk: it starts at the chunk's
first layer if the checkpoint lies on an earlier stage (that stage's activations are not here).
"""

from __future__ import annotations

from bisect import bisect_left

from ..errors import ConfigError
from .iteration_rows import chunk_shares, split_named
from .model import Layer, Partition, Workload


def chunk_bounds(n_layers: int, n_chunks: int) -> list[tuple[int, int]]:
    """[start, stop) of each chunk; the first ``n_layers % n_chunks`` chunks get one more."""
    if n_chunks < 1:
        raise ConfigError(f"number of pipeline stages must be >= 1, got {n_chunks}")
    base, extra = divmod(n_layers, n_chunks)
    bounds = []
    start = 0
    for c in range(n_chunks):
        size = base + (1 if c < extra else 0)
        bounds.append((start, start + size))
        start += size
    return bounds


def recompute_plan(layers: tuple[Layer, ...], checkpoints: tuple[int, ...],
                   initiates: tuple[int, ...]) -> dict[int, tuple[int, ...]]:
    """Position of an initiating layer -> positions recomputed before its input gradient.

    Positions are indices into ``layers`` (one chunk); checkpoint/initiate numbers are file-order
    layer indices.
    """
    if not initiates:
        return {}
    index_to_pos = {layer.index: pos for pos, layer in enumerate(layers)}
    ckpts = sorted(set(checkpoints))
    plan: dict[int, tuple[int, ...]] = {}
    for init in initiates:
        pos = index_to_pos.get(init)
        if pos is None:
            continue
        k = bisect_left(ckpts, init)  # checkpoints strictly below `init`
        start_index = ckpts[k - 1] if k > 0 else layers[0].index
        start_pos = index_to_pos.get(start_index, 0)
        if start_index < layers[0].index:
            start_pos = 0
        if start_pos < pos:
            plan[pos] = tuple(range(start_pos, pos))
    return plan


def model_rows(workload: Workload) -> tuple[tuple[Layer, ...], tuple[Layer, ...]]:
    """(the rows split into chunks, AICB's iteration rows) of a model-layout file: AICB's model
    files put whole-model DP/optimizer rows before and after the layers (see
    :mod:`.iteration_rows`); they run once per iteration, not on the first or last stage."""
    layers = workload.layers
    found = split_named(layers)
    if found is None:
        return layers, ()
    pre, post = found
    return layers[pre:len(layers) - post], layers[:pre] + layers[len(layers) - post:]


def partition_model(workload: Workload, n_chunks: int) -> Partition:
    layers, iteration = model_rows(workload)
    check_chunks(workload, n_chunks)
    chunks = tuple(tuple(layers[a:b]) for a, b in chunk_bounds(len(layers), n_chunks))
    h = workload.header
    recompute = tuple(recompute_plan(c, h.checkpoints, h.checkpoint_initiates) for c in chunks)
    share = chunk_shares(chunks, 1) if iteration else ()
    return Partition(chunks=chunks, recompute=recompute, iteration_layers=iteration,
                     iteration_share=share)


def check_chunks(workload: Workload, n_chunks: int) -> None:
    """Refuse, from the sizes alone, a split that leaves a chunk without layers."""
    if n_chunks < 1:
        raise ConfigError(f"number of pipeline stages must be >= 1, got {n_chunks}")
    if workload.layout == "aicb" and workload.aicb is not None:
        from .aicb import chunk_layers

        chunk_layers(workload.aicb, n_chunks, workload.path)   # raises when too many
        return
    layers, iteration = model_rows(workload)
    if n_chunks > len(layers):
        extra = (f" (and {len(iteration)} iteration-level rows that run once per iteration)"
                 if iteration else "")
        raise ConfigError(
            f"{workload.path}: cannot split {len(layers)} layer rows{extra} into {n_chunks} "
            f"pipeline chunks (pp x vpp); every chunk needs at least one layer")
