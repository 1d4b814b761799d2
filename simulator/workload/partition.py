"""Which layers each model chunk (virtual stage) runs: :func:`partition`, for either layout.

The model layout splits the rows (the whole model once) into contiguous chunks
(:mod:`.chunks`); an AICB stage trace splits its recovered model (:mod:`.aicb`). Either way
AICB's whole-model DP/optimizer rows run once per iteration (:mod:`.iteration_rows`).
"""

from __future__ import annotations

from ..errors import ConfigError
from .chunks import chunk_bounds, recompute_plan
from .iteration_rows import chunk_shares, split_named
from .model import Layer, Partition, Workload

__all__ = ["partition", "partition_model", "check_chunks", "model_rows", "chunk_bounds",
           "recompute_plan"]


def partition(workload: Workload, n_chunks: int) -> Partition:
    """Layers of each of ``n_chunks`` model chunks, per the workload's layout."""
    if workload.layout == "aicb" and workload.aicb is not None:
        from .aicb import partition_aicb

        return partition_aicb(workload, n_chunks)
    return partition_model(workload, n_chunks)


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
