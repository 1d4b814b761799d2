"""Splitting rows into contiguous chunks (by rows, or by whole layers), and which rows a
recompute replays.

Remainder layers go to the first chunks (ASTRA-sim guide, Part 3). Activation recompute follows
ASTRA-sim's HYBRID_TRANSFORMER_FWD_IN_BCKWD: when the backward pass reaches a layer listed in
``checkpoint_initiates``, the layers from the nearest checkpoint below it up to (not including) it
are recomputed first. A recompute never reaches into another chunk: it starts at the chunk's
first layer if the checkpoint lies on an earlier stage (that stage's activations are not here).
"""

from __future__ import annotations

from bisect import bisect_left
from typing import NamedTuple

from ..errors import ConfigError
from .model import Layer


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


# a NamedTuple, not a dataclass: start-up (simulator/__init__.py)
class LayerRows(NamedTuple):
    """Where the transformer layers are among the rows a model-layout file splits into chunks:
    ``head`` rows before the first layer (the embedding), ``spans`` [start, stop) of each layer,
    the rows from ``tail`` on after the last (the LM head and loss)."""

    head: int
    spans: tuple[tuple[int, int], ...]
    tail: int


def row_bounds_from_layers(found: LayerRows, n_rows: int, layers: list[tuple[int, int]]
                           ) -> list[tuple[int, int]]:
    """[start, stop) rows of each chunk holding the given layers: the head rows go with the
    first chunk, the tail rows with the last."""
    out = []
    spans = found.spans
    for c, (a, b) in enumerate(layers):
        # a first chunk of no layers holds the head rows alone, a last one the tail rows
        start = 0 if c == 0 else spans[a][0] if a < len(spans) else found.tail
        stop = n_rows if c == len(layers) - 1 else spans[b - 1][1] if b > 0 else found.head
        out.append((start, stop))
    return out
