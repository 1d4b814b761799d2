"""What a split backward's I keeps until its W (and what a W needs for a moment), read from the
forward's recorded operators (a profiler trace with ``record_shapes=True``: each ``cpu_op``
event's ``Input Dims`` and ``Input type``).

A weight's gradient is its output's gradient times its input; the input is in the forward's
stash already, so what an I adds and keeps until the W is the gradient at the output of every
operator with weights (Qi et al.'s zero-bubble split; torch's ``stage_backward_input`` keeps
them for ``stage_backward_weight``): per forward, the sum over those operators of their output's
elements times the element's bytes. The operators with weights, as ``torch.nn`` calls them:

- ``aten::linear`` (``nn.Linear``): input ``(..., k)``, weight ``(n, k)``: output ``(..., n)``;
- ``aten::layer_norm`` / ``aten::rms_norm`` with a weight (``elementwise_affine``): the
  input's shape;
- ``aten::embedding``: weight ``(v, d)``, indices ``(...)``: output ``(..., d)``.

An operator nested in one of these (``aten::addmm`` inside ``aten::linear``) is not counted
again. A W's working memory by the same operators: its widest weight's gradient (and its
bias's), held for a moment before it is added to ``.grad``. The same rule from a transformer layer's shape: ``workload.activations
.transformer_split_backward_bytes``. Needs no torch.
"""

from __future__ import annotations

import bisect
from math import prod
from os import PathLike
from pathlib import Path

from .traces import TraceError, _load_json, _ns, read_rank

DTYPE_BYTES = {"float": 4, "double": 8, "c10::Half": 2, "c10::BFloat16": 2, "half": 2,
               "bfloat16": 2, "c10::Float8_e4m3fn": 1, "c10::Float8_e5m2": 1}


def weight_output_elements(name: str, dims: list) -> int | None:
    """Elements at the output of operator ``name`` given its ``Input Dims``, None when it has
    no weight."""
    if name == "aten::linear" and len(dims) >= 2 and dims[0] and len(dims[1]) == 2:
        return prod(dims[0][:-1]) * dims[1][0]
    if name in ("aten::layer_norm", "aten::rms_norm") and dims and dims[0]:
        weight = dims[2] if len(dims) > 2 else []
        return prod(dims[0]) if weight else None
    if name == "aten::embedding" and len(dims) >= 2 and len(dims[0]) == 2:
        return prod(dims[1]) * dims[0][1]
    return None


def weight_gradient_bytes(ops: list[dict]) -> int:
    """The rule over one forward's operator events (``cpu_op``, time ordered): bytes of the
    gradients at the outputs of its operators with weights."""
    total = 0
    inside_until = -1.0
    for ev in ops:
        if ev["ts"] < inside_until:
            continue
        args = ev.get("args") or {}
        dims = args.get("Input Dims")
        if not isinstance(dims, list):
            continue
        n = weight_output_elements(ev.get("name", ""), dims)
        if n is None:
            continue
        types = args.get("Input type") or ["float"]
        total += n * DTYPE_BYTES.get(types[0], 4)
        inside_until = ev["ts"] + ev.get("dur", 0)
    return total


def weight_gradient_transient(ops: list[dict]) -> int:
    """What a W needs for a moment, by one forward's operators: its widest weight's gradient
    (and bias's) before it is added to ``.grad`` (the rule ``transformer_transient_bytes``
    gives a transformer layer by its shape)."""
    out = 0
    for ev in ops:
        args = ev.get("args") or {}
        dims = args.get("Input Dims")
        if ev.get("name") != "aten::linear" or not isinstance(dims, list) or len(dims) < 2:
            continue
        n = prod(dims[1]) + (prod(dims[2]) if len(dims) > 2 and dims[2] else 0)
        types = args.get("Input type") or ["float"]
        out = max(out, n * DTYPE_BYTES.get(types[0], 4))
    return out


def split_backward_keeps(path: str | PathLike, rank: int = 0, *, label_pattern=None,
                         data: dict | None = None, rank_trace=None) -> dict[int, int]:
    """Per stage of this rank's trace: what its I keeps until its W, by the rule, from the
    operators of the stage's first forward in the steps. Raises TraceError when the trace
    records no operator shapes."""
    return {s: weight_gradient_bytes(ops) for s, ops in forward_ops(
        path, rank, label_pattern=label_pattern, data=data, rank_trace=rank_trace).items()}


def weight_transients(path: str | PathLike, rank: int = 0, *, label_pattern=None,
                      data: dict | None = None, rank_trace=None) -> dict[int, int]:
    """Per stage of this rank's trace: a W's working memory by the rule
    (``weight_gradient_transient``) from the operators of the stage's first forward."""
    return {s: weight_gradient_transient(ops) for s, ops in forward_ops(
        path, rank, label_pattern=label_pattern, data=data, rank_trace=rank_trace).items()}


def forward_ops(path: str | PathLike, rank: int = 0, *, label_pattern=None,
                data: dict | None = None, rank_trace=None) -> dict[int, list[dict]]:
    """Per stage of this rank's trace, the operator events of its first forward in the steps
    (time ordered). Raises TraceError when the trace records no operator shapes."""
    p = Path(path)
    data = _load_json(p) if data is None else data
    rt = rank_trace or read_rank(p, data, rank=rank, label_pattern=label_pattern)
    ops = sorted((ev for ev in data.get("traceEvents", ())
                  if isinstance(ev, dict) and ev.get("cat") == "cpu_op"),
                 key=lambda ev: ev["ts"])
    if not any("Input Dims" in (ev.get("args") or {}) for ev in ops):
        raise TraceError(f"{p}: expected operator events with 'Input Dims'; record the trace "
                         "with torch.profiler.profile(..., record_shapes=True)")
    times = [_ns(ev["ts"]) for ev in ops]
    out: dict[int, list[dict]] = {}
    for it in rt.iterations:
        for a in it.actions:
            if a.kind != "F" or a.pair is not None or a.stage in out:
                continue
            lo, hi = bisect.bisect_left(times, a.start_ns), bisect.bisect_right(times, a.end_ns)
            out[a.stage] = ops[lo:hi]
    return out
