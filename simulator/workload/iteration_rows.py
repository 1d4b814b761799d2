"""AICB's iteration-level rows (gradient/parameter collectives, optimizer) and their share per stage.

AICB writes rows that describe the whole model's DP and optimizer work once per iteration:
leading ``grad_*``/``moe_grad_norm*``/``embedding_grads``/``layernorm``/``norm`` rows and trailing
``cross_entropy*``/``optimizer*`` rows. Left in place, a re-pipelined model would put all of them
on the first (or last) stage: that stage would hold every parameter and reduce every gradient
while the others hold nothing. Instead they run once per iteration on every rank, each rank
doing its share, in proportion to the parameters of the chunks it runs:

- a chunk's parameter weight is the gradient bytes its rows reduce (weight-gradient ALLREDUCE or
  REDUCESCATTER); when no row of the model carries one (AICB's model files reduce everything in
  ``grad_norm``), the weight-gradient compute time, which is proportional to the parameters for
  GEMM layers; when that is zero too, the number of rows;
- the rows describe ``stages`` pipeline stages' worth of model (1 for a file that is the whole
  model; the header's ``pp`` for an AICB stage trace), so chunk c's share is
  ``stages * weight_c / sum(weights)``. When the run has exactly ``stages`` ranks the file's own
  split is kept: every rank runs the rows in full, as the trace's stage did.

A rank's iteration rows are the rows scaled by the sum of its chunks' shares: compute times and
collective bytes alike (each stage reduces its own parameters' gradients).
"""

from __future__ import annotations

import re

from .model import Comm, CommType, Layer, Partition

PRE_NAME = re.compile(r"^(grad_\w*|moe_grad_norm\d*|embedding_grads|layernorm|norm)$")
POST_NAME = re.compile(r"^(cross_entropy\d*|optimizer\d*)$")


def model_rows(workload) -> tuple[tuple[Layer, ...], tuple[Layer, ...]]:
    """(the rows split into chunks, AICB's iteration rows) of a model-layout file: AICB's model
    files put whole-model DP/optimizer rows before and after the layers; they run once per
    iteration, not on the first or last stage."""
    layers = workload.layers
    found = split_named(layers)
    if found is None:
        return layers, ()
    pre, post = found
    return layers[pre:len(layers) - post], layers[:pre] + layers[len(layers) - post:]


def split_named(rows: tuple[Layer, ...]) -> tuple[int, int] | None:
    """(leading, trailing) counts of AICB iteration rows in a model-layout file, or None when
    the file does not look like AICB's (no ``grad_*`` row before the model and no
    ``optimizer*`` row after it) or nothing would be left."""
    pre = 0
    while pre < len(rows) and PRE_NAME.match(rows[pre].name):
        pre += 1
    end = len(rows)
    while end > pre and POST_NAME.match(rows[end - 1].name):
        end -= 1
    if end <= pre:
        return None
    aicb = any(r.name.startswith("grad_") for r in rows[:pre]) or any(
        r.name.startswith("optimizer") for r in rows[end:])
    if not aicb:
        return None
    return pre, len(rows) - end


_GRADIENT_COLLECTIVES = (CommType.ALLREDUCE, CommType.REDUCESCATTER)  # read once, not per row


def _param_weight(layer: Layer) -> float:
    c = layer.wg_comm
    if c.active and c.type in _GRADIENT_COLLECTIVES:
        return float(c.bytes)
    return 0.0


def chunk_shares(chunks: tuple[tuple[Layer, ...], ...], stages: int) -> tuple[float, ...]:
    """Each chunk's share of the iteration rows (see the module docstring)."""
    n = len(chunks)
    for weight in (_param_weight, lambda r: float(r.wg_compute), lambda r: 1.0):
        w = [sum(weight(r) for r in c) for c in chunks]
        total = sum(w)
        if total > 0:
            return tuple(stages * x / total for x in w)
    return (stages / n,) * n if n else ()


def _scaled_comm(c: Comm, share: float) -> Comm:
    if not c.active:
        return c
    return c._replace(bytes=max(1, round(c.bytes * share)))


def scale_rows(rows: tuple[Layer, ...], share: float) -> tuple[Layer, ...]:
    """The rows as one rank runs them: times and bytes times ``share`` (whole ns and bytes)."""
    if share == 1.0:
        return rows
    out = []
    for r in rows:
        out.append(r._replace(
            fwd_compute=round(r.fwd_compute * share), ig_compute=round(r.ig_compute * share),
            wg_compute=round(r.wg_compute * share), fwd_comm=_scaled_comm(r.fwd_comm, share),
            ig_comm=_scaled_comm(r.ig_comm, share), wg_comm=_scaled_comm(r.wg_comm, share)))
    return tuple(out)


def rank_iteration_rows(partition: Partition, chunks, n_ranks: int) -> tuple[Layer, ...]:
    """The iteration rows as the rank running ``chunks`` (of ``n_ranks``) runs them."""
    if (not partition.iteration_share or not partition.iteration_layers
            or n_ranks == partition.iteration_stages):
        return partition.iteration_layers
    return scale_rows(partition.iteration_layers,
                      sum(partition.iteration_share[c] for c in set(chunks)))
