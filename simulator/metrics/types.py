"""The typed summary of a run: what ``pipesim run --json`` prints, the sweep table's columns and
the JSON Schema are all derived from these classes (plain frozen dataclasses: no validation
library on the ``run`` path, where start-up matters).

``RunSummary.to_dict()`` is the JSON. Per-rank rows are ``ranks``; the old name ``stages`` is
written beside it for one release (deprecated: they are ranks, and a rank can run several
virtual stages). Item access (``summary["makespan_ns"]``) reads the JSON form, for code written
against the dict this used to be.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from functools import cached_property
from typing import Any

from ..diagnostics import RunWarning

SCHEMA_VERSION = "2"


@dataclass(frozen=True, slots=True)
class MemoryBreakdown:
    """What a rank holds at its peak, in bytes (docs/model.md, Memory); sums to the peak."""

    weights: int = field(metadata={"help": "parameters (and extra weight versions)"})
    gradients: int = field(metadata={"help": "parameter gradients"})
    optimizer: int = field(metadata={"help": "optimizer state (and the fp32 master copy)"})
    activations: int = field(metadata={"help": "stashed activations, and I's gradients for W"})
    transient: int = field(metadata={"help": "the running action's working memory"})
    runtime_buffers: int = field(
        metadata={"help": "sent tensors not yet released, receive buffers, kept outputs"})


@dataclass(frozen=True, slots=True)
class RankSummary:
    """One pipeline rank, averaged over iterations."""

    rank: int = field(metadata={"help": "pipeline rank"})
    virtual_stages: tuple[int, ...] = field(metadata={"help": "global virtual stages it runs"})
    layers: tuple[tuple[int, int], ...] = field(
        metadata={"help": "[first, last] layer index of each of its chunks"})
    busy_ns: float = field(metadata={"help": "compute-stream busy time per iteration"})
    idle_ns: float = field(metadata={"help": "iteration time minus busy time"})
    bubble_ratio: float = field(metadata={"help": "idle / iteration time"})
    bubble_ratio_own: float = field(
        metadata={"help": "idle within its own first-to-last action span, over that span"})
    warmup: int = field(metadata={"help": "warm-up forwards"})
    steady: int = field(metadata={"help": "steady-state forwards"})
    cooldown: int = field(metadata={"help": "cool-down backwards"})
    peak_inflight_microbatches: int = field(
        metadata={"help": "most microbatches whose activations it holds at once"})
    peak_inflight_activations: int = field(
        metadata={"help": "most (stage, microbatch) activations it holds at once"})
    bytes_sent: int = field(metadata={"help": "point-to-point bytes sent per iteration"})
    bytes_received: int = field(metadata={"help": "point-to-point bytes received per iteration"})
    static_memory_bytes: int = field(metadata={"help": "weights and optimizer state"})
    peak_memory_bytes: int = field(
        metadata={"help": "the most it holds at once: static, activations, transient, buffers"})
    peak_memory_breakdown: MemoryBreakdown = field(metadata={"help": "the peak by part"})
    peak_memory_time_ns: float = field(metadata={"help": "when the peak first occurs"})
    peak_memory_action: str | None = field(
        metadata={"help": "the action running at the peak (null: static memory alone)"})
    forward_ns: float = field(metadata={"help": "time in forward actions"})
    backward_ns: float = field(metadata={"help": "time in backward actions (B, I, W)"})
    forward_bubble_ns: float = field(metadata={"help": "idle time charged to forwards"})
    backward_bubble_ns: float = field(metadata={"help": "idle time charged to backwards"})


@dataclass(frozen=True, slots=True)
class LinkSummary:
    """One directed point-to-point link, per iteration."""

    src_rank: int = field(metadata={"help": "sending rank"})
    dst_rank: int = field(metadata={"help": "receiving rank"})
    bytes: int = field(metadata={"help": "bytes moved"})
    transfers: int = field(metadata={"help": "transfers"})
    busy_ns: float = field(metadata={"help": "time the link was moving data"})


@dataclass(frozen=True, slots=True)
class IterationStats:
    """Spread of iteration times (with more than one iteration)."""

    mean: float = field(metadata={"help": "mean, ns"})
    p50: float = field(metadata={"help": "median, ns"})
    p99: float = field(metadata={"help": "99th percentile, ns"})
    min: float = field(metadata={"help": "shortest, ns"})
    max: float = field(metadata={"help": "longest, ns"})


@dataclass(frozen=True, slots=True)
class PipelineBubble:
    """The first iteration's pipeline phase minus each rank's compute (metrics.bubble)."""

    span_ns: float = field(metadata={"help": "start of the iteration to the last compute"})
    per_rank_ns: tuple[float, ...] = field(metadata={"help": "bubble of each rank"})
    mean_ns: float = field(metadata={"help": "mean over ranks"})
    max_ns: float = field(metadata={"help": "largest"})
    min_ns: float = field(metadata={"help": "smallest"})


@dataclass(frozen=True)
class RunSummary:
    """One simulation, per iteration (the mean over iterations where there are several)."""

    schema_version: str = field(metadata={"help": "version of this JSON's shape"})
    schedule: str = field(metadata={"help": "schedule that ran"})
    pp: int = field(metadata={"help": "pipeline ranks"})
    vpp: int = field(metadata={"help": "chunks (virtual stages) per rank"})
    microbatches: int = field(metadata={"help": "microbatches per iteration"})
    iterations: int = field(metadata={"help": "iterations simulated"})
    workload: str = field(metadata={"help": "workload file"})
    layout: str = field(metadata={"help": "model or aicb"})
    makespan_ns: float = field(metadata={"help": "iteration time (mean over iterations)"})
    iteration_times_ns: tuple[float, ...] = field(metadata={"help": "each iteration's time"})
    bubble_ratio: float = field(metadata={"help": "mean over ranks of idle / iteration time"})
    bubble_ratio_own: float = field(metadata={"help": "mean over ranks of the own-span ratio"})
    theoretical_bubble_ratio: float | None = field(
        metadata={"help": "the schedule's closed form at uniform costs (null if none)"})
    theoretical_formula: str = field(metadata={"help": "that closed form, written out"})
    theoretical_bubble_basis: str = field(
        metadata={"help": "makespan, or own (each stage's own span)"})
    utilization: float = field(metadata={"help": "1 - bubble_ratio"})
    forward_ns: float = field(metadata={"help": "forward time summed over ranks"})
    backward_ns: float = field(metadata={"help": "backward time summed over ranks"})
    forward_bubble_ns: float = field(metadata={"help": "idle charged to forwards, summed"})
    backward_bubble_ns: float = field(metadata={"help": "idle charged to backwards, summed"})
    layer_ops: int = field(metadata={"help": "layer-level F/IG/WG executions simulated"})
    p2p_bytes: int = field(metadata={"help": "point-to-point bytes per iteration"})
    dp_collective_bytes: int = field(metadata={"help": "DP collective bytes per iteration"})
    total_comm_bytes: int = field(metadata={"help": "p2p_bytes + dp_collective_bytes"})
    peak_inflight_microbatches: int = field(metadata={"help": "the most any rank holds"})
    peak_memory_bytes: int = field(metadata={"help": "the largest rank's peak"})
    p2p_mode: str = field(metadata={"help": "point-to-point semantics that ran"})
    engine_used: str = field(metadata={"help": "simpy or evaluator"})
    ranks: tuple[RankSummary, ...] = field(metadata={"help": "per pipeline rank"})
    links: tuple[LinkSummary, ...] = field(metadata={"help": "per directed link"})
    warnings: tuple[RunWarning, ...] = field(default=(), metadata={
        "help": "assumptions behind the numbers (docs/model.md, What pipesim assumes)"})
    notes: tuple[str, ...] = field(default=(), metadata={
        "help": "information that changes no number"})
    iteration_time_stats_ns: IterationStats | None = field(
        default=None, metadata={"help": "spread of iteration times (several iterations)"})
    pipeline_bubble_ns: PipelineBubble | None = field(
        default=None, metadata={"help": "the simulated pipeline bubble of the first iteration"})
    simai: dict[str, Any] | None = field(
        default=None, metadata={"help": "SimAI's analytical terms (AICB-layout files)"})
    minibatches: int | None = field(
        default=None, metadata={"help": "minibatches run as one stream (2BW)"})
    time_per_minibatch_ns: float | None = field(default=None, metadata={"help": "2BW"})
    schedule_meta: dict[str, Any] | None = field(
        default=None, metadata={"help": "the generator's parameters (e.g. group_size)"})

    def to_dict(self) -> dict[str, Any]:
        """The JSON form: nested objects as dicts, tuples as lists, bytes as integers, absent
        optional parts left out, ``stages`` (deprecated) beside ``ranks``."""
        return dict(self._json)

    @cached_property
    def _json(self) -> dict[str, Any]:
        out = {}
        for f in fields(self):
            value = getattr(self, f.name)
            if value is None and f.default is None:
                continue
            out[f.name] = to_json(value, f.name)
        out["stages"] = [dict(r, stage=r["rank"]) for r in out["ranks"]]
        return out

    def __getitem__(self, key: str) -> Any:
        return self._json[key]

    def get(self, key: str, default: Any = None) -> Any:
        return self._json.get(key, default)


def to_json(value: Any, key: str = "") -> Any:
    """A summary value as JSON: dataclasses as dicts, tuples as lists, byte counts as integers,
    whole ``*_ns`` floats as integers."""
    if hasattr(value, "__dataclass_fields__"):
        return {f.name: to_json(getattr(value, f.name), f.name) for f in fields(value)}
    if isinstance(value, (list, tuple)):
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
