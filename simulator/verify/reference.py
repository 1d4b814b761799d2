"""Single-device training: the numbers a pipeline schedule must reproduce.

Each minibatch is one full batch (its microbatches stacked), so the reference shares no
per-microbatch arithmetic with the executor: only the layer maths of ``model`` (itself checked
against finite differences in the tests).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .model import Model, Params, forward, input_grad, mse, mse_grad, weight_grad


@dataclass(frozen=True)
class ReferenceRun:
    losses: tuple[float, ...]     # per minibatch
    grads: tuple[Params, ...]     # per minibatch, per layer
    final_params: Params          # after one SGD step per minibatch


def loss_and_grads(params: Params, x: np.ndarray, t: np.ndarray) -> tuple[float, Params]:
    """Mean squared error over the whole batch and its gradient for every layer."""
    y, acts = forward(params, x)
    _, keep = input_grad(params, acts, mse_grad(y, t))
    return mse(y, t), weight_grad(keep)


def sgd_step(params: Params, grads: Params, lr: float) -> Params:
    return [(w - lr * dw, b - lr * db) for (w, b), (dw, db) in zip(params, grads)]


def train(model: Model, xs: list[np.ndarray], ts: list[np.ndarray], microbatches_per_iteration: int,
          lr: float, staleness: int = 0) -> ReferenceRun:
    """SGD over consecutive minibatches; minibatch i's gradient is taken at W(max(i-staleness, 0)).

    ``staleness`` 0 is ordinary training; 1 is PipeDream-2BW's W(t+1) = W(t) - lr grad f(W(t-1)).
    """
    m = microbatches_per_iteration
    history: list[Params] = [list(model.params)]
    losses, grads = [], []
    for i in range(len(xs) // m):
        x = np.concatenate(xs[i * m:(i + 1) * m])
        t = np.concatenate(ts[i * m:(i + 1) * m])
        loss, g = loss_and_grads(history[max(i - staleness, 0)], x, t)
        losses.append(loss)
        grads.append(g)
        history.append(sgd_step(history[-1], g, lr))
    return ReferenceRun(tuple(losses), tuple(grads), history[-1])
