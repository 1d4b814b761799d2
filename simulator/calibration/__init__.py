"""Calibration from real runs. So far: reading PyTorch profiler traces of a pipeline.

``read_traces(paths, label_pattern=None)`` -> :class:`TraceSet`, one trace file per rank:

- ``ranks[r].iterations[k].actions``: the ordered :class:`TraceAction` s (stage, kind,
  microbatch, start/end, busy = operator time, pair) - compute and communication;
- ``pp``, ``vpp``, ``microbatches``, ``placement`` inferred from the labels;
  ``require(pp=, vpp=, microbatches=)`` checks them against a workload;
- ``orders()`` / ``to_schedule()``: the executed order (pipesim notation / a Schedule);
- ``samples(stage, kind)`` and ``median_busy_ns()``: per-(stage, kind) action times to fit;
- ``timelines(k)``: per rank busy, idle and end time of an iteration (to hold a replay against);
- ``iteration_times_ns()``: the measured iteration times.

Bad traces raise :class:`TraceError` (a ConfigError: one line, exit 2).
"""

from .traces import (COMM_KINDS, COMPUTE_KINDS, Iteration, RankTrace, TraceAction, TraceError,
                     TraceSet, compile_pattern, read_rank, read_traces, trace_files)

__all__ = ["COMM_KINDS", "COMPUTE_KINDS", "Iteration", "RankTrace", "TraceAction", "TraceError",
           "TraceSet", "compile_pattern", "read_rank", "read_traces", "trace_files"]
