"""Read the allocator's ``[memory]`` events of a PyTorch profiler Chrome trace (one rank).

A trace recorded with ``profile_memory=True`` holds one instant event per allocation and free:
``args.Bytes`` (negative for a free), ``args["Total Allocated"]`` (the allocator's count after
it), ``Total Reserved``, ``Device Type`` / ``Device Id``. This module attributes every one of
them to the pipelining action spans :mod:`.traces` reads (``PP:...``, GPipe's ``Forward <mb>``,
user labels) and to the steps (``ProfilerStep#k`` or ``ITER...`` spans) and gives per rank:

- the level of memory over time, and which basis it stands on: ``absolute`` (the allocator's
  own ``Total Allocated``) or ``deltas`` (the running sum of ``Bytes`` from 0 at the trace's
  first event). CUDA's caching allocator counts every allocation, so its total is absolute;
  the CPU allocator only counts what was allocated while a profiler ran, so its total is
  absolute only when the profiler covered the process from its start (the first event's total
  equals its own bytes); otherwise the deltas are used: the memory held before the trace
  began is not in them;
- the peak over the steps and over the whole trace, and the static bytes (the level when the
  first step starts: weights, and what the runtime keeps across steps);
- per action: the level at its start, the net bytes it keeps at its end, the bytes freed and
  allocated inside it, and its transient (the highest level inside it above the start), with
  medians per (stage, kind) over microbatches and steps (the halves of an overlapped F/B pair
  share one span: they are left out of the per-(stage, kind) medians and kept in ``actions``).

Bad input raises :class:`TraceError` (one line, exit 2): no memory events (how to record
them), events of several devices without ``device``, a truncated or damaged file.
"""

from __future__ import annotations

import bisect
import re
from dataclasses import dataclass
from os import PathLike
from pathlib import Path
from statistics import median

from .traces import TraceError, _load_json, _ns, read_rank

_DEVICE_NAMES = {0: "cpu", 1: "cuda", 12: "xpu", 13: "mps", 15: "hpu", 20: "privateuseone"}


def device_name(device_type: int, device_id: int) -> str:
    name = _DEVICE_NAMES.get(device_type, f"device-type-{device_type}")
    return name if device_type == 0 else f"{name}:{device_id}"


@dataclass(frozen=True, slots=True)
class ActionMemory:
    """What one action span did to the memory level (bytes)."""

    stage: int
    kind: str
    microbatch: int | None
    iteration: int
    start_bytes: int      # level just before the span
    kept_bytes: int       # level at its end minus start_bytes (negative: it freed more)
    freed_bytes: int      # sum of the frees inside the span (positive)
    allocated_bytes: int  # sum of the allocations inside the span
    transient_bytes: int  # highest level inside the span minus start_bytes (>= 0)
    paired: bool = False  # half of an overlapped F/B pair (the pair's span)


@dataclass(frozen=True)
class RankMemory:
    path: str
    rank: int
    device: str
    basis: str                   # "absolute" or "deltas"
    peak_bytes: int              # highest level inside the steps
    peak_whole_bytes: int        # highest level over the whole trace
    static_bytes: int            # level when the first step starts
    step_peaks: tuple[int, ...]  # per step, its highest level
    step_start_bytes: tuple[int, ...]
    step_end_bytes: tuple[int, ...]
    actions: tuple[ActionMemory, ...]
    n_events: int

    def per_action(self) -> dict[tuple[int, str], dict[str, float]]:
        """(stage, kind) -> medians of kept, freed, allocated and transient bytes over its
        unpaired actions, and the number of samples."""
        groups: dict[tuple[int, str], list[ActionMemory]] = {}
        for a in self.actions:
            if not a.paired:
                groups.setdefault((a.stage, a.kind), []).append(a)
        return {k: {"kept": float(median(a.kept_bytes for a in v)),
                    "freed": float(median(a.freed_bytes for a in v)),
                    "allocated": float(median(a.allocated_bytes for a in v)),
                    "transient": float(median(a.transient_bytes for a in v)),
                    "samples": len(v)}
                for k, v in sorted(groups.items())}


def _events(path: Path, data: dict) -> list[tuple[int, int, int, int, int]]:
    """[(ts_ns, bytes, total, device_type, device_id)] of the ``[memory]`` events, in file
    order (checked)."""
    out = []
    for i, ev in enumerate(data["traceEvents"]):
        if not isinstance(ev, dict) or ev.get("name") != "[memory]":
            continue
        args = ev.get("args")
        vals = [args.get(k) if isinstance(args, dict) else None
                for k in ("Bytes", "Total Allocated", "Device Type", "Device Id")]
        ts = ev.get("ts")
        if not all(isinstance(v, int) and not isinstance(v, bool) for v in vals) or \
                not isinstance(ts, (int, float)) or isinstance(ts, bool) or ts != ts:
            raise TraceError(f"{path}: [memory] event #{i}: expected a number 'ts' and integer "
                             "args 'Bytes', 'Total Allocated', 'Device Type', 'Device Id', "
                             f"found ts={ts!r}, args={args!r}")
        out.append((_ns(ts), vals[0], vals[1], vals[2], vals[3]))
    return out


def read_memory(path: str | PathLike, data: dict | None = None, *, rank: int | None = None,
                label_pattern: str | re.Pattern | None = None,
                device: str | None = None, rank_trace=None) -> RankMemory:
    """One rank's memory from its trace; ``device`` ("cpu", "cuda:0") picks one device when
    the trace holds events of several; ``rank_trace``: its actions, already read
    (traces.read_rank)."""
    p = Path(path)
    if data is None:
        data = _load_json(p)
    if rank is None:
        info = data.get("distributedInfo")
        r = info.get("rank") if isinstance(info, dict) else None
        rank = r if isinstance(r, int) else 0
    events = _events(p, data)
    if not events:
        raise TraceError(f"{p}: expected the allocator's [memory] events, found none; record "
                         "the trace with torch.profiler.profile(..., profile_memory=True), "
                         "started before the model is built")
    devices = sorted({(e[3], e[4]) for e in events})
    names = [device_name(*d) for d in devices]
    if device is None:
        if len(devices) > 1:
            raise TraceError(f"{p}: [memory] events of {len(devices)} devices "
                             f"({', '.join(names)}); expected one device per trace, or name one "
                             f"(device={names[-1]!r})")
        chosen = devices[0]
    else:
        if device not in names:
            raise TraceError(f"{p}: device {device!r}: expected one of the trace's memory "
                             f"devices: {', '.join(names)}")
        chosen = devices[names.index(device)]
        events = [e for e in events if (e[3], e[4]) == chosen]
    events.sort(key=lambda e: e[0])       # stable: same-time events keep the file's order

    first = events[0]
    absolute = chosen[0] != 0 or first[2] == first[1]
    levels: list[int] = []
    run = 0
    for _, b, total, _, _ in events:
        run += b
        levels.append(total if absolute else run)
    times = [e[0] for e in events]
    base = first[2] - first[1] if absolute else 0   # level before the first event

    def level_before(t: int) -> int:
        i = bisect.bisect_left(times, t)
        return levels[i - 1] if i > 0 else base

    def level_at_end(t: int) -> int:
        i = bisect.bisect_right(times, t)
        return levels[i - 1] if i > 0 else base

    def inside(s: int, e: int) -> tuple[int, int]:
        return bisect.bisect_left(times, s), bisect.bisect_right(times, e)

    rt = rank_trace or read_rank(p, data, rank=rank, label_pattern=label_pattern)
    actions: list[ActionMemory] = []
    step_peaks, step_starts, step_ends = [], [], []
    for k, it in enumerate(rt.iterations):
        lo, hi = inside(it.start_ns, it.end_ns)
        start = level_before(it.start_ns)
        step_starts.append(start)
        step_ends.append(level_at_end(it.end_ns))
        step_peaks.append(max([start] + levels[lo:hi]))
        for a in it.actions:
            lo, hi = inside(a.start_ns, a.end_ns)
            s0 = level_before(a.start_ns)
            sizes = [events[i][1] for i in range(lo, hi)]
            actions.append(ActionMemory(
                a.stage, a.kind, a.microbatch, k, s0, level_at_end(a.end_ns) - s0,
                -sum(b for b in sizes if b < 0), sum(b for b in sizes if b > 0),
                max([s0] + levels[lo:hi]) - s0, a.pair is not None))
    return RankMemory(
        path=str(p), rank=rank, device=device_name(*chosen),
        basis="absolute" if absolute else "deltas",
        peak_bytes=max(step_peaks) if rt.marked else max(levels + [base]),
        peak_whole_bytes=max(levels + [base]),
        static_bytes=step_starts[0] if rt.marked else base,
        step_peaks=tuple(step_peaks), step_start_bytes=tuple(step_starts),
        step_end_bytes=tuple(step_ends), actions=tuple(actions), n_events=len(events))
