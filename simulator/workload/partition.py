"""Which layers each model chunk (virtual stage) runs: :func:`partition`, for either layout.

Either layout splits whole transformer layers (:mod:`.stage_layers` finds them among the rows):
the model layout its rows (the whole model once), the embedding rows with the first chunk and the
LM head / loss rows with the last; an AICB stage trace its recovered model (:mod:`.aicb`). A file
whose rows carry no layer structure has one layer per row, so it splits by rows
(:mod:`.chunks`). Either way AICB's whole-model DP/optimizer rows run once per iteration
(:mod:`.iteration_rows`).
"""

from __future__ import annotations

from ..errors import ConfigError
from .aicb import chunk_layers, partition_aicb
from .chunks import chunk_bounds, recompute_plan
from .iteration_rows import chunk_shares, model_rows
from .stage_layers import (LayerRows, PipelineSplit, check_stage_count, default_chunk_layers,
                           layer_bounds, layer_rows, row_bounds_from_layers, with_split)
from .model import Partition, Workload

__all__ = ["partition", "partition_model", "check_chunks", "model_rows", "chunk_bounds",
           "recompute_plan", "with_recompute", "chunk_layer_positions", "RECOMPUTE_MODES",
           "RECOMPUTE_METHODS"]


def partition(workload: Workload, n_chunks: int) -> Partition:
    """Layers of each of ``n_chunks`` model chunks, per the workload's layout."""
    if workload.layout == "aicb" and workload.aicb is not None:
        return partition_aicb(workload, n_chunks)
    return partition_model(workload, n_chunks)


def partition_model(workload: Workload, n_chunks: int) -> Partition:
    layers, iteration = model_rows(workload)
    check_chunks(workload, n_chunks)
    found = layer_rows(layers)
    counts = workload.header.stage_layers or default_chunk_layers(len(found.spans), n_chunks)
    bounds = row_bounds_from_layers(found, len(layers), layer_bounds(counts))
    chunks = tuple(tuple(layers[a:b]) for a, b in bounds)
    h = workload.header
    recompute = tuple(recompute_plan(c, h.checkpoints, h.checkpoint_initiates) for c in chunks)
    share = chunk_shares(chunks, 1) if iteration else ()
    return Partition(chunks=chunks, recompute=recompute, iteration_layers=iteration,
                     iteration_share=share)


def check_chunks(workload: Workload, n_chunks: int, split: PipelineSplit = PipelineSplit(),
                 pp: int = 1) -> None:
    """Refuse, from the sizes alone, a split that leaves a chunk without rows or cuts a layer.

    Where a rule sets the layers per chunk (the runtimes' options ``split`` at ``pp`` x
    ``n_chunks / pp``, or the header's ``stage_layers:``) it decides, and a first or last chunk of
    no layers is allowed where it holds the embedding or the LM head / loss rows
    (:func:`.stage_layers.empty_chunk`); else the even split needs a whole layer a chunk."""
    if n_chunks < 1:
        raise ConfigError(f"number of pipeline stages must be >= 1, got {n_chunks}")
    check_stage_count(workload, n_chunks)
    if split.given:
        with_split(workload, pp, max(1, n_chunks // pp), split)   # refuses what it refuses
        return
    if workload.header.stage_layers:
        return   # whole layers by construction; check_stage_count checked the counts
    if workload.layout == "aicb" and workload.aicb is not None:
        chunk_layers(workload.aicb, n_chunks, workload.path)   # raises when too many
        return
    layers, iteration = model_rows(workload)
    found = layer_rows(layers)
    if n_chunks > len(found.spans) and len(found.spans) < len(layers):
        raise ConfigError(_cut_message(workload.path, layers, found, n_chunks))
    if n_chunks > len(layers):
        extra = (f" (and {len(iteration)} iteration-level rows that run once per iteration)"
                 if iteration else "")
        raise ConfigError(
            f"{workload.path}: cannot split {len(layers)} layer rows{extra} into {n_chunks} "
            f"pipeline chunks (pp x vpp); every chunk needs at least one layer")


def _cut_message(path: str, rows, found: LayerRows, n_chunks: int) -> str:
    """The refusal of more chunks than whole layers, naming the first layer an even split of
    the rows would cut."""
    n = len(found.spans)
    # the even split's chunk starts, c * base + min(c, extra) (chunk_bounds's rule), only as
    # far as the rows go: at pp x vpp = 2^41 a list of every chunk's bounds was 2^41 tuples
    base, extra = divmod(len(rows), n_chunks)
    cuts = {c * base + min(c, extra) for c in range(min(n_chunks, len(rows)) + 1)}
    k, (a, b) = next(((k, s) for k, s in enumerate(found.spans)
                      if any(s[0] < c < s[1] for c in cuts)), (0, found.spans[0]))
    return (f"{path}: pp x vpp = {n_chunks} chunks would cut transformer layer {k} (rows "
            f"{rows[a].name}..{rows[b - 1].name}, lines {rows[a].line}-{rows[b - 1].line}); "
            f"the file's {n} transformer layers make at most {n} chunks of whole layers: "
            f"expected pp x vpp <= {n}")


RECOMPUTE_MODES = ("file", "none", "full")
# Megatron-LM's --recompute-method: how --recompute full groups a chunk's transformer layers
RECOMPUTE_METHODS = ("uniform", "block")


def with_recompute(part: Partition, workload: Workload, mode: str, method: str = "uniform",
                   num_layers: int = 1) -> Partition:
    """``part`` with activation recompute as asked: ``file`` (the header's checkpoint lists, as
    read), ``none`` (nothing recomputed), ``full`` (Megatron-LM's full activation checkpointing
    of each chunk's transformer layers; a layer is its rows in the model layout, its sub-layer
    rows in an AICB stage trace). ``full`` groups the layers of each chunk (a virtual stage is
    one transformer block in Megatron-LM, so the count restarts in every chunk) by ``method``:

    - ``uniform``: groups of ``num_layers`` consecutive layers (the last may be shorter); a
      group keeps only its input and re-runs its whole forward just before its backward.
    - ``block``: the first ``num_layers`` layers each keep their input and re-run their own
      forward; the others keep their activations and re-run nothing.

    A plan maps the position of a group's last row (the backward reaches it first) to the
    positions its recompute re-runs."""
    if mode == "file":
        return part
    if mode == "none":
        return part._replace(recompute=tuple({} for _ in part.chunks))
    if mode != "full":
        raise ConfigError(f"--recompute: expected one of {', '.join(RECOMPUTE_MODES)}, "
                          f"got {mode!r}")
    if method not in RECOMPUTE_METHODS:
        raise ConfigError(f"--recompute-method: expected one of {', '.join(RECOMPUTE_METHODS)}, "
                          f"got {method!r}")
    if num_layers < 1:
        raise ConfigError(f"--recompute-num-layers: expected a positive integer, got "
                          f"{num_layers!r}")
    return part._replace(recompute=tuple(_grouped_plan(layers, method, num_layers)
                                         for layers in chunk_layer_positions(part, workload)))


def chunk_layer_positions(part: Partition, workload: Workload) -> list[list[tuple[int, ...]]]:
    """Per chunk, its transformer layers in order, each as the positions of its rows in the
    chunk (rows of no layer, such as the embedding or the LM head, are in none)."""
    if workload.layout == "aicb" and workload.aicb is not None:
        layer_spans = workload.aicb.layer_spans
    else:
        # the model layout: the transformer layers found among the rows (stage_layers' rule),
        # so a layer of several rows recomputes as one and keeps one input, as Megatron does
        from .stage_layers import layer_rows

        rows_in_order = tuple(r for c in part.chunks for r in c)
        layer_spans = [(rows_in_order[a].index, rows_in_order[b - 1].index + 1)
                       for a, b in layer_rows(rows_in_order).spans]
    span_of = {k: span for span in layer_spans for k in range(*span)}
    out = []
    for rows in part.chunks:
        if not span_of:
            out.append([(pos,) for pos in range(len(rows))])
            continue
        pos_of = {r.index: p for p, r in enumerate(rows)}
        seen: set[tuple[int, int]] = set()
        layers = []
        for r in rows:
            span = span_of.get(r.index)
            if span is None or span in seen:
                continue
            seen.add(span)
            layers.append(tuple(pos_of[k] for k in range(*span) if k in pos_of))
        out.append(layers)
    return out


def _grouped_plan(layers: list[tuple[int, ...]], method: str,
                  n: int) -> dict[int, tuple[int, ...]]:
    if method == "uniform":
        groups = [sum(layers[g:g + n], ()) for g in range(0, len(layers), n)]
    else:
        groups = layers[:n]
    return {g[-1]: g for g in groups if g}
