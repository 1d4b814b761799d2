"""The small numpy model verification trains: a stack of ``tanh(x @ W + b)`` layers and an MSE loss.

Layer widths differ from layer to layer (drawn from the seed), so a chunk boundary in the wrong
place, a transposed weight or a gradient routed to the wrong stage changes the numbers or fails
loudly instead of passing by symmetry. The backward is written as the two halves zero-bubble
schedules split it into: :func:`input_grad` (I: the gradient for the chunk's input, keeping what
the weight gradient needs) and :func:`weight_grad` (W); a full backward B is I then W.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..errors import ConfigError
from ..workload.partition import chunk_bounds

MIN_WIDTH, MAX_WIDTH = 4, 8  # layer widths are drawn from this range (inclusive)

Params = list[tuple[np.ndarray, np.ndarray]]  # per layer (W of shape (d_in, d_out), b of d_out)


@dataclass(frozen=True)
class Model:
    """Layer widths and initial parameters; ``bounds[c]`` is chunk c's [start, stop) layers."""

    widths: tuple[int, ...]
    params: tuple[tuple[np.ndarray, np.ndarray], ...]
    bounds: tuple[tuple[int, int], ...]

    @property
    def n_layers(self) -> int:
        return len(self.params)

    def chunk_params(self, chunk: int) -> Params:
        start, stop = self.bounds[chunk]
        return list(self.params[start:stop])


def check_layers(n_layers: int, n_chunks: int) -> None:
    """Every chunk needs a layer: said from the sizes, before the schedule is built."""
    if n_layers < n_chunks:
        raise ConfigError(f"--layers: the schedule has {n_chunks} model chunks and every chunk "
                          f"needs a layer; expected at least {n_chunks}, got {n_layers}")


def build_model(n_layers: int, n_chunks: int, seed: int = 0) -> Model:
    """A deterministic MLP of ``n_layers`` layers in ``n_chunks`` chunks (the simulator's split)."""
    check_layers(n_layers, n_chunks)
    rng = np.random.default_rng(seed)
    widths = tuple(int(w) for w in rng.integers(MIN_WIDTH, MAX_WIDTH + 1, size=n_layers + 1))
    params = tuple(
        (rng.standard_normal((d_in, d_out)) / np.sqrt(d_in), 0.1 * rng.standard_normal(d_out))
        for d_in, d_out in zip(widths[:-1], widths[1:]))
    return Model(widths, params, tuple(chunk_bounds(n_layers, n_chunks)))


def make_batch(model: Model, microbatches: int, rows: int, seed: int = 0
               ) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """Inputs and targets of every microbatch, ``rows`` samples each (whatever the schedule)."""
    rng = np.random.default_rng([seed, 1])
    xs = [rng.standard_normal((rows, model.widths[0])) for _ in range(microbatches)]
    ts = [0.5 * rng.standard_normal((rows, model.widths[-1])) for _ in range(microbatches)]
    return xs, ts


@dataclass
class Activations:
    """What a chunk's forward keeps for its backward: each layer's input and output."""

    inputs: list[np.ndarray]
    outputs: list[np.ndarray]


def forward(params: Params, x: np.ndarray) -> tuple[np.ndarray, Activations]:
    acts = Activations([], [])
    for w, b in params:
        acts.inputs.append(x)
        x = np.tanh(x @ w + b)
        acts.outputs.append(x)
    return x, acts


def input_grad(params: Params, acts: Activations, dy: np.ndarray
               ) -> tuple[np.ndarray, list[tuple[np.ndarray, np.ndarray]]]:
    """Gradient for the chunk's input, and per layer (input, pre-activation gradient) for W."""
    keep: list[tuple[np.ndarray, np.ndarray]] = [None] * len(params)  # type: ignore[list-item]
    for layer in range(len(params) - 1, -1, -1):
        y = acts.outputs[layer]
        g = dy * (1.0 - y * y)
        keep[layer] = (acts.inputs[layer], g)
        dy = g @ params[layer][0].T
    return dy, keep


def weight_grad(keep: list[tuple[np.ndarray, np.ndarray]]) -> Params:
    return [(x.T @ g, g.sum(axis=0)) for x, g in keep]


def mse(y: np.ndarray, t: np.ndarray) -> float:
    return float(np.mean((y - t) ** 2))


def mse_grad(y: np.ndarray, t: np.ndarray, scale: float = 1.0) -> np.ndarray:
    """d(scale * mse(y, t)) / dy."""
    return (2.0 * scale / y.size) * (y - t)
