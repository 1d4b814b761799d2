"""The typed summary of a run: what ``pipesim run --json`` prints, the sweep table's columns and
the JSON Schema are all derived from these classes (NamedTuples: no validation library and no
``dataclasses`` on the ``run`` path, where start-up matters). Each field's JSON Schema
description is its ``Annotated`` text.

``RunSummary.to_dict()`` is the JSON. Per-rank rows are ``ranks``; the old name ``stages`` is
written beside it for one release (deprecated: they are ranks, and a rank can run several
virtual stages). Item access (``summary["makespan_ns"]``) reads the JSON form, for code written
against the dict this used to be.
"""

# no ``from __future__ import annotations`` here: a NamedTuple compiles each string annotation
# into a ForwardRef, which doubles what these classes cost at start-up (about 1 ms); every type
# below is defined before its use.
from functools import cached_property
from typing import Annotated, Any, NamedTuple

from ..diagnostics import RunWarning

SCHEMA_VERSION = "2"


# a NamedTuple, not a dataclass: start-up (simulator/__init__.py)
class MemoryBreakdown(NamedTuple):
    """What a rank holds at its peak, in bytes (docs/model.md, Memory); sums to the peak."""

    weights: Annotated[int, "parameters (and extra weight versions)"]
    gradients: Annotated[int, "parameter gradients"]
    optimizer: Annotated[int, "optimizer state (and the fp32 master copy)"]
    activations: Annotated[int, "stashed activations, and I's gradients for W"]
    transient: Annotated[int, "the running action's working memory"]
    runtime_buffers: Annotated[int, "sent tensors not yet released, receive buffers, kept outputs"]


# a NamedTuple, not a dataclass: start-up (simulator/__init__.py)
class RankSummary(NamedTuple):
    """One pipeline rank, averaged over iterations."""

    rank: Annotated[int, "pipeline rank"]
    virtual_stages: Annotated[tuple[int, ...], "global virtual stages it runs"]
    layers: Annotated[
        tuple[tuple[int, int], ...], "[first, last] layer index of each of its chunks"]
    busy_ns: Annotated[float, "compute-stream busy time per iteration"]
    idle_ns: Annotated[float, "iteration time minus busy time"]
    bubble_ratio: Annotated[float, "idle / iteration time"]
    bubble_ratio_own: Annotated[
        float, "idle within its own first-to-last action span, over that span"]
    warmup: Annotated[int, "warm-up forwards"]
    steady: Annotated[int, "steady-state forwards"]
    cooldown: Annotated[int, "cool-down backwards"]
    peak_inflight_microbatches: Annotated[
        int, "most microbatches whose activations it holds at once"]
    peak_inflight_activations: Annotated[
        int, "most (stage, microbatch) activations it holds at once"]
    bytes_sent: Annotated[int, "point-to-point bytes sent per iteration"]
    bytes_received: Annotated[int, "point-to-point bytes received per iteration"]
    static_memory_bytes: Annotated[int, "weights and optimizer state"]
    peak_memory_bytes: Annotated[
        int, "the most it holds at once: static, activations, transient, buffers"]
    peak_memory_breakdown: Annotated[MemoryBreakdown, "the peak by part"]
    peak_memory_time_ns: Annotated[float, "when the peak first occurs"]
    peak_memory_action: Annotated[
        str | None, "the action running at the peak (null: static memory alone)"]
    forward_ns: Annotated[float, "time in forward actions"]
    backward_ns: Annotated[float, "time in backward actions (B, I, W)"]
    forward_bubble_ns: Annotated[float, "idle time charged to forwards"]
    backward_bubble_ns: Annotated[float, "idle time charged to backwards"]


# a NamedTuple, not a dataclass: start-up (simulator/__init__.py)
class LinkSummary(NamedTuple):
    """One directed point-to-point link, per iteration."""

    src_rank: Annotated[int, "sending rank"]
    dst_rank: Annotated[int, "receiving rank"]
    bytes: Annotated[int, "bytes moved"]
    transfers: Annotated[int, "transfers"]
    busy_ns: Annotated[float, "time the link was moving data"]


# a NamedTuple, not a dataclass: start-up (simulator/__init__.py)
class IterationStats(NamedTuple):
    """Spread of iteration times (with more than one iteration)."""

    mean: Annotated[float, "mean, ns"]
    p50: Annotated[float, "median, ns"]
    p99: Annotated[float, "99th percentile, ns"]
    min: Annotated[float, "shortest, ns"]
    max: Annotated[float, "longest, ns"]


# a NamedTuple, not a dataclass: start-up (simulator/__init__.py)
class PipelineBubble(NamedTuple):
    """The first iteration's pipeline phase minus each rank's compute (metrics.bubble)."""

    span_ns: Annotated[float, "start of the iteration to the last compute"]
    per_rank_ns: Annotated[tuple[float, ...], "bubble of each rank"]
    mean_ns: Annotated[float, "mean over ranks"]
    max_ns: Annotated[float, "largest"]
    min_ns: Annotated[float, "smallest"]


# a NamedTuple, not a dataclass: start-up (simulator/__init__.py)
class _RunSummaryFields(NamedTuple):
    """RunSummary's fields (RunSummary adds the cached JSON form, which needs a ``__dict__``)."""

    schema_version: Annotated[str, "version of this JSON's shape"]
    schedule: Annotated[str, "schedule that ran"]
    pp: Annotated[int, "pipeline ranks"]
    vpp: Annotated[int, "chunks (virtual stages) per rank"]
    microbatches: Annotated[int, "microbatches per iteration"]
    iterations: Annotated[int, "iterations simulated"]
    workload: Annotated[str, "workload file"]
    layout: Annotated[str, "model or aicb"]
    makespan_ns: Annotated[float, "iteration time (mean over iterations)"]
    iteration_times_ns: Annotated[tuple[float, ...], "each iteration's time"]
    bubble_ratio: Annotated[float, "mean over ranks of idle / iteration time"]
    bubble_ratio_own: Annotated[float, "mean over ranks of the own-span ratio"]
    theoretical_bubble_ratio: Annotated[
        float | None, "the schedule's closed form at uniform costs (null if none)"]
    theoretical_formula: Annotated[str, "that closed form, written out"]
    theoretical_bubble_basis: Annotated[str, "makespan, or own (each stage's own span)"]
    utilization: Annotated[float, "1 - bubble_ratio"]
    forward_ns: Annotated[float, "forward time summed over ranks"]
    backward_ns: Annotated[float, "backward time summed over ranks"]
    forward_bubble_ns: Annotated[float, "idle charged to forwards, summed"]
    backward_bubble_ns: Annotated[float, "idle charged to backwards, summed"]
    layer_ops: Annotated[int, "layer-level F/IG/WG executions simulated"]
    p2p_bytes: Annotated[int, "point-to-point bytes per iteration"]
    dp_collective_bytes: Annotated[int, "DP collective bytes per iteration"]
    total_comm_bytes: Annotated[int, "p2p_bytes + dp_collective_bytes"]
    peak_inflight_microbatches: Annotated[int, "the most any rank holds"]
    peak_memory_bytes: Annotated[int, "the largest rank's peak"]
    p2p_mode: Annotated[str, "point-to-point semantics that ran"]
    engine_used: Annotated[str, "simpy or evaluator"]
    ranks: Annotated[tuple[RankSummary, ...], "per pipeline rank"]
    links: Annotated[tuple[LinkSummary, ...], "per directed link"]
    warnings: Annotated[
        tuple[RunWarning, ...],
        "assumptions behind the numbers (docs/model.md, What pipesim assumes)"] = ()
    notes: Annotated[tuple[str, ...], "information that changes no number"] = ()
    iteration_time_stats_ns: Annotated[
        IterationStats | None, "spread of iteration times (several iterations)"] = None
    pipeline_bubble_ns: Annotated[
        PipelineBubble | None, "the simulated pipeline bubble of the first iteration"] = None
    simai: Annotated[dict[str, Any] | None, "SimAI's analytical terms (AICB-layout files)"] = None
    minibatches: Annotated[int | None, "minibatches run as one stream (2BW)"] = None
    time_per_minibatch_ns: Annotated[float | None, "2BW"] = None
    schedule_meta: Annotated[
        dict[str, Any] | None, "the generator's parameters (e.g. group_size)"] = None
    steady_iteration_ns: Annotated[
        float | None, "the mean iteration after the first, where iterations overlap "
        "(--optimizer-post-validation): the first holds the pipeline's fill"] = None


# a NamedTuple subclass without __slots__: its cached JSON form lives in the instance __dict__ (a
# ``_replace``d copy starts without one)
class RunSummary(_RunSummaryFields):
    """One simulation, per iteration (the mean over iterations where there are several)."""

    def to_dict(self) -> dict[str, Any]:
        """The JSON form: nested objects as dicts, tuples as lists, bytes as integers, absent
        optional parts left out, ``stages`` (deprecated) beside ``ranks``."""
        return dict(self._json)

    @cached_property
    def _json(self) -> dict[str, Any]:
        out = {}
        optional = self._field_defaults
        for name, value in zip(self._fields, self):
            if value is None and name in optional and optional[name] is None:
                continue   # an absent optional part is left out
            out[name] = to_json(value, name)
        out["stages"] = [dict(r, stage=r["rank"]) for r in out["ranks"]]
        return out

    def __getitem__(self, key: str) -> Any:
        return self._json[key]

    def get(self, key: str, default: Any = None) -> Any:
        return self._json.get(key, default)


def to_json(value: Any, key: str = "") -> Any:
    """A summary value as JSON: records (NamedTuples) as dicts, other tuples and lists as lists,
    byte counts as integers, whole ``*_ns`` floats as integers."""
    if isinstance(value, tuple):
        names = getattr(value, "_fields", None)
        if names is not None:
            return {name: to_json(v, name) for name, v in zip(names, value)}
        return [to_json(v, key) for v in value]
    if isinstance(value, list):
        return [to_json(v, key) for v in value]
    if isinstance(value, dict):
        return {k: to_json(v, k) for k, v in value.items()}
    if isinstance(value, float) and value == value and value not in (float("inf"),
                                                                      float("-inf")):
        if "bytes" in key:
            return int(round(value))
        if value.is_integer() and key.endswith("_ns"):
            return int(value)
    return value


def run_schema() -> dict[str, Any]:
    """JSON Schema of ``pipesim run --json``."""
    from ..schema import schema_of  # deferred: only --json-schema needs it (start-up)

    stage = {"type": "array", "description": "deprecated alias of ranks (each row also has "
             "stage = rank); removed in the next release",
             "items": {"allOf": [{"$ref": "#/$defs/RankSummary"},
                                 {"type": "object", "properties": {"stage": {"type": "integer"}},
                                  "required": ["stage"]}]}}
    return schema_of(RunSummary, "pipesim run --json", extra={"stages": stage})
