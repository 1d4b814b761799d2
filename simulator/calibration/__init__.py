"""Calibration from real runs: reading PyTorch profiler traces of a pipeline (``traces``).

``read_traces(paths)`` gives a :class:`TraceSet`: per rank, per iteration, the ordered actions
with their spans and busy (operator) times, and P, v, M and the stage placement inferred from
the labels. Fitting a runtime model to it builds on this API.
"""

from .traces import (COMM_KINDS, COMPUTE_KINDS, Iteration, RankTrace, TraceAction, TraceError,
                     TraceSet, compile_pattern, read_rank, read_traces, trace_files)

__all__ = ["COMM_KINDS", "COMPUTE_KINDS", "Iteration", "RankTrace", "TraceAction", "TraceError",
           "TraceSet", "compile_pattern", "read_rank", "read_traces", "trace_files"]
