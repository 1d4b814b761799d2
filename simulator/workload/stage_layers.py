"""Transformer layers, not rows: which rows make each layer, how many layers each chunk holds, and
the header's ``stage_layers:`` split.

A runtime (Megatron-LM, torchtitan) places whole transformer layers on stages; a file's rows are
finer (attention and MLP rows, AICB's sub-layer rows) and pipesim's default split is by rows.
This module finds the layers among the rows (the same rule that recovers an AICB stage's layers:
a repeated unit of rows, else one layer per ``attention*`` row; a file with neither has one layer
per row), so that a split can be set in layers (``stage_layers: 5 6 6 7``) and a row split can
be told in layers, or be said to cut one.
"""

from __future__ import annotations

from typing import NamedTuple

from ..errors import ConfigError, WorkloadError
from .iteration_rows import model_rows
from .model import Layer, Workload


# a NamedTuple, not a dataclass: start-up (simulator/__init__.py)
class LayerRows(NamedTuple):
    """Where the transformer layers are among the rows a model-layout file splits into chunks:
    ``head`` rows before the first layer (the embedding), ``spans`` [start, stop) of each layer,
    the rows from ``tail`` on after the last (the LM head and loss)."""

    head: int
    spans: tuple[tuple[int, int], ...]
    tail: int


def layer_rows(rows: tuple[Layer, ...]) -> LayerRows:
    from .aicb import _split_block   # the rule that recovers an AICB stage's layers

    head, spans, tail = _split_block(tuple(rows))
    if not spans:
        return LayerRows(0, tuple((i, i + 1) for i in range(len(rows))), len(rows))
    return LayerRows(head, tuple(spans), tail)


def n_model_layers(workload: Workload) -> int:
    """Transformer layers in the model the file describes."""
    if workload.layout == "aicb" and workload.aicb is not None:
        return workload.aicb.model_layers
    return len(layer_rows(model_rows(workload)[0]).spans)


def check_stage_layers(workload: Workload) -> None:
    """``stage_layers:`` must add up to the file's transformer layers (once the layout is
    known)."""
    counts = workload.header.stage_layers
    if not counts:
        return
    n = n_model_layers(workload)
    if sum(counts) != n:
        raise WorkloadError(workload.path, 1, workload.header.stage_layers_column or None,
                            "stage_layers", f"layer counts adding up to the file's {n} "
                            "transformer layers", f"{' '.join(map(str, counts))} "
                            f"(sum {sum(counts)})")


def check_stage_count(workload: Workload, n_chunks: int) -> None:
    """A run's pp x vpp must be the number of counts ``stage_layers:`` gives."""
    counts = workload.header.stage_layers
    check_stage_layers(workload)
    if counts and len(counts) != n_chunks:
        raise ConfigError(f"{workload.path}:1: stage_layers: gives {len(counts)} stages "
                          f"({' '.join(map(str, counts))}), the run has pp x vpp = {n_chunks}; "
                          "set --pp/--vpp to match or drop stage_layers: from the header")


def layer_bounds(counts: tuple[int, ...]) -> list[tuple[int, int]]:
    """[first, last) layer of each stage from its count."""
    out, at = [], 0
    for c in counts:
        out.append((at, at + c))
        at += c
    return out


def row_bounds_from_layers(found: LayerRows, n_rows: int, layers: list[tuple[int, int]]
                           ) -> list[tuple[int, int]]:
    """[start, stop) rows of each chunk holding the given layers: the head rows go with the
    first chunk, the tail rows with the last."""
    out = []
    for c, (a, b) in enumerate(layers):
        start = 0 if c == 0 else found.spans[a][0]
        stop = n_rows if c == len(layers) - 1 else found.spans[b - 1][1]
        out.append((start, stop))
    return out


class ChunkLayers(NamedTuple):
    """Transformer layers of each chunk of a partition, or where the split cuts a layer."""

    counts: tuple[int, ...]           # whole layers per chunk (model order)
    total: int                        # layers in the model
    embedding_chunk: int | None       # the chunk with the rows before the first layer
    head_chunk: int | None            # the chunk with the rows after the last layer
    cut: str | None = None            # set: the split cuts a layer (the counts are then empty)


def chunk_layers_of(workload: Workload, chunks: tuple[tuple[Layer, ...], ...]) -> ChunkLayers:
    """How many whole transformer layers each chunk holds (rows matched by their index)."""
    if workload.layout == "aicb" and workload.aicb is not None:
        st = workload.aicb
        rows = st.model
        spans = st.layer_spans
        head = spans[0][0] if spans else len(rows)
        tail = spans[-1][1] if spans else len(rows)
        found = LayerRows(head, tuple(spans), tail)
    else:
        rows = model_rows(workload)[0]
        found = layer_rows(rows)
    chunk_of = {}
    for c, chunk in enumerate(chunks):
        for r in chunk:
            chunk_of[r.index] = c
    pos = {r.index: p for p, r in enumerate(rows)}
    owner = [None] * len(rows)
    for idx, c in chunk_of.items():
        if idx in pos:
            owner[pos[idx]] = c
    counts = [0] * len(chunks)
    for k, (a, b) in enumerate(found.spans):
        held = {owner[p] for p in range(a, b)}
        if len(held) != 1:
            first = rows[a]
            where = sorted(c for c in held if c is not None)
            return ChunkLayers((), len(found.spans), None, None,
                               f"the split cuts transformer layer {k} (rows {rows[a].name}.."
                               f"{rows[b - 1].name}, lines {first.line}-{rows[b - 1].line}) "
                               f"between stages {' and '.join(map(str, where))}")
        counts[held.pop()] += 1
    emb = owner[0] if found.head > 0 else None
    head = owner[-1] if found.tail < len(rows) else None
    return ChunkLayers(tuple(counts), len(found.spans), emb, head)
