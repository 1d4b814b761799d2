"""Read PyTorch profiler Chrome traces of a pipeline run: per rank, per iteration, the actions.

What torch 2.13/2.14 records (design notes §6):

- the multi-stage runtime (``_PipelineScheduleRuntime``: Interleaved1F1B, LoopedBFS,
  InterleavedZeroBubble, ZBVZeroBubble, DualPipeV, CSV-loaded schedules) wraps every action in
  ``record_function("PP:<action>")``: compute ``PP:3F1`` / ``PP:0I2`` / ``PP:5W0``, an overlapped
  pair ``PP:(0F7;7B3)OVERLAP_F_B``, communication ``PP:2SEND_F1`` / ``PP:3RECV_B0`` and the
  bookkeeping ``PP:1UNSHARD`` / ``PP:1RESHARD`` / ``PP:1REDUCE_GRAD``;
- ``ScheduleGPipe`` records ``Forward <mb>`` / ``Backward <mb>`` (its one stage is the rank);
- ``Schedule1F1B`` records nothing: label the compute yourself and pass a ``label_pattern``
  (a regex with named groups ``kind`` and ``mb``, and ``stage`` unless the stage is the rank).

A span includes the wait for incoming data; the work shows as the operator events nested in it
on the same thread, so each action carries ``busy_ns`` (the union of those events, the
communication ops ``c10d::*`` / ``gloo:*`` / ``nccl:*`` left out) beside its span. On a GPU
trace (one with ``kernel`` / ``gpu_memcpy`` / ``gpu_memset`` events) the work is on the device:
an action's busy time is the union of the device intervals of what it launched (the
``cuda_runtime`` / ``cuda_driver`` events nested in its span, matched to device events by
``args.correlation``; NCCL kernels, which wait for the peer, left out), and its end is the
last of those intervals' ends when that is later than the span's (the CPU runs ahead of the
device). The ``gpu_user_annotation`` copies of the labels on the device timeline are not read
as actions. A ``SEND_*`` / ``RECV_*`` span keeps its transfer's ``gloo:send`` / ``gloo:recv``
annotation (from the post to the return of the wait on it), which is how the calibration sees
when a receive's data came (``transfers``; gloo only: NCCL's wait returns before its data
lands). Iterations are
``ProfilerStep#k`` spans, else spans whose name starts with ``ITER``; a trace with neither is
one iteration. Actions outside every iteration span are dropped (warm-up, set-up).

Times are the trace's own clock in ns (``ts`` µs × 1000); the profiler of every process on one
machine reads the same clock, so ranks compare directly.

Bad input raises :class:`TraceError` (a ``ConfigError``: one line, exit 2) naming the file
and what was expected.
"""

from __future__ import annotations

import bisect
import json
import re
import zlib
from collections import Counter
from dataclasses import dataclass
from functools import cached_property
from os import PathLike
from pathlib import Path
from statistics import median
from typing import Iterable, Sequence

from ..errors import ConfigError
from ..input_file import MAX_TRACE_BYTES, InputFileError, read_input_bytes
from ..schedules.action import Action
from ..schedules.schedule import Schedule

COMPUTE_KINDS = ("F", "B", "I", "W")
COMM_KINDS = ("SEND_F", "RECV_F", "SEND_B", "RECV_B")
OTHER_KINDS = ("UNSHARD", "RESHARD", "REDUCE_GRAD")

_PP_SINGLE = re.compile(r"^(\d+)(F|B|I|W|SEND_F|RECV_F|SEND_B|RECV_B|UNSHARD|RESHARD|REDUCE_GRAD)"
                        r"(\d*)$")
_PP_OVERLAP = re.compile(r"^\((.*)\)OVERLAP_F_B$")
_GPIPE = re.compile(r"^(Forward|Backward) (\d+)$")
_STEP = re.compile(r"^ProfilerStep#(\d+)$")
_COMM_PREFIXES = ("c10d::", "gloo:", "nccl:", "record_param_comms")
_DEVICE_CATS = ("kernel", "gpu_memcpy", "gpu_memset")
_LAUNCH_CATS = ("cuda_runtime", "cuda_driver")
_DEVICE_COMM_PREFIXES = ("ncclKernel", "ncclDevKernel")
_NOT_LABELS = ("gpu_user_annotation",) + _DEVICE_CATS


class TraceError(ConfigError):
    """A trace file (or a set of them) that cannot be read as a pipeline run."""


@dataclass(frozen=True, slots=True)
class TraceAction:
    """One labelled span of a rank: ``<stage><kind><microbatch>`` and its times (ns).

    The two halves of an overlapped F/B pair carry the same ``pair`` number (counted per rank
    and iteration from 0, as pipesim numbers them) and both the pair's whole span and busy time:
    torch runs them one after the other inside one span.
    """

    stage: int
    kind: str
    microbatch: int | None
    start_ns: int
    end_ns: int
    busy_ns: int
    pair: int | None = None
    label: str = ""
    # a SEND_* / RECV_* span's transfer as the backend annotates it (``gloo:send`` /
    # ``gloo:recv``, which start at the post and end when the runtime's wait on it returned):
    # (post, completion) in ns; None elsewhere or where the trace has no such annotation
    comm: tuple[int, int] | None = None

    @property
    def span_ns(self) -> int:
        return self.end_ns - self.start_ns

    @property
    def wait_ns(self) -> int:
        """Span time with no operator running: waiting for data (or runtime overhead)."""
        return max(0, self.span_ns - self.busy_ns)

    @property
    def is_compute(self) -> bool:
        return self.kind in COMPUTE_KINDS

    def action(self) -> Action:
        """pipesim's :class:`Action` (compute kinds only)."""
        if not self.is_compute or self.microbatch is None:
            raise ValueError(f"{self.label or self.kind} is not a compute action")
        return Action(self.stage, self.kind, self.microbatch, self.pair)


@dataclass(frozen=True)
class Iteration:
    index: int
    start_ns: int
    end_ns: int
    actions: tuple[TraceAction, ...]

    @cached_property
    def compute(self) -> tuple[TraceAction, ...]:
        return tuple(a for a in self.actions if a.is_compute)

    def order(self) -> list[str]:
        """The compute order as pipesim writes it (``0F7@0`` for a pair's half)."""
        return [str(a.action()) for a in self.compute]

    def steps(self) -> list[str]:
        """The lowered order in torch's notation (``3F1``, ``2SEND_F1``,
        ``(0F7;7B3)OVERLAP_F_B``): compute and communication, an overlapped pair once, the
        FSDP / REDUCE_GRAD bookkeeping left out. Empty of communication where the runtime
        labels none (GPipe, 1F1B)."""
        out: list[str] = []
        for a in self.actions:
            if a.kind in OTHER_KINDS:
                continue
            if a.pair is not None:
                if out and out[-1] == a.label[3:]:
                    continue
                out.append(a.label[3:])
            elif a.label.startswith("PP:"):
                out.append(a.label[3:])
            else:
                out.append(str(a.action()) if a.is_compute else a.label)
        return out

    def busy_ns(self) -> int:
        """Operator time of the compute actions (an overlapped pair counted once)."""
        seen: set[int] = set()
        total = 0
        for a in self.compute:
            if a.pair is not None:
                if a.pair in seen:
                    continue
                seen.add(a.pair)
            total += a.busy_ns
        return total


@dataclass(frozen=True)
class RankTrace:
    rank: int
    path: str
    iterations: tuple[Iteration, ...]
    marked: bool = True   # iterations from ProfilerStep#k / ITER spans (else the whole trace)


@dataclass(frozen=True)
class TraceSet:
    """A whole run: one :class:`RankTrace` per rank, with P, v and M inferred from the labels."""

    ranks: tuple[RankTrace, ...]
    pp: int
    vpp: int
    microbatches: int
    placement: tuple[int, ...]   # placement[stage] = rank
    split_backward: bool         # I/W seen (zero-bubble schedules)

    @property
    def n_stages(self) -> int:
        return len(self.placement)

    @property
    def n_iterations(self) -> int:
        return len(self.ranks[0].iterations)

    def iteration_times_ns(self) -> list[int]:
        """Per iteration: last rank's end minus first rank's start (the iteration spans)."""
        out = []
        for k in range(self.n_iterations):
            its = [r.iterations[k] for r in self.ranks]
            out.append(max(i.end_ns for i in its) - min(i.start_ns for i in its))
        return out

    def timelines(self, iteration: int = 0) -> list[dict[str, int]]:
        """Per rank: compute busy, idle and end time of one iteration, in ns from its start.

        The start is the earliest rank's iteration span; ``end`` is the rank's last compute
        action's end and ``idle = end - busy`` (what a replay is held against).
        """
        t0 = min(r.iterations[iteration].start_ns for r in self.ranks)
        out = []
        for r in self.ranks:
            it = r.iterations[iteration]
            end = max(a.end_ns for a in it.compute) - t0
            busy = it.busy_ns()
            out.append({"rank": r.rank, "busy_ns": busy, "idle_ns": end - busy, "end_ns": end})
        return out

    def require(self, *, pp: int | None = None, vpp: int | None = None,
                microbatches: int | None = None, against: str = "the workload") -> None:
        """Raise a one-line :class:`TraceError` unless P, v and M equal the given ones."""
        for name, have, want in (("pp", self.pp, pp), ("vpp", self.vpp, vpp),
                                 ("microbatches", self.microbatches, microbatches)):
            if want is not None and have != want:
                raise TraceError(f"{_where([r.path for r in self.ranks])}: the traces show "
                                 f"{name} {have} (P={self.pp}, v={self.vpp}, "
                                 f"M={self.microbatches}); expected {name} {want} as in "
                                 f"{against}")

    def orders(self, iteration: int = 0) -> list[list[str]]:
        """Per rank, the compute order of one iteration (pipesim's notation)."""
        return [r.iterations[iteration].order() for r in self.ranks]

    def to_schedule(self, name: str = "trace", iteration: int = 0) -> Schedule:
        """The executed order as a pipesim :class:`Schedule` (to replay or compare): one step
        per ``PP:`` span, an overlapped pair's span one OVERLAP_F_B step."""
        steps = tuple(_steps(r.iterations[iteration].compute) for r in self.ranks)
        return Schedule(name=name, pp=self.pp, vpp=self.vpp, microbatches=self.microbatches,
                        placement=self.placement, steps=steps)

    def samples(self, stage: int, kind: str, *, busy: bool = True,
                paired: bool | None = False) -> list[int]:
        """Every measured time of (stage, kind) over microbatches and iterations, in ns.

        ``busy`` picks the operator time (else the span); ``paired`` False leaves out the halves
        of overlapped pairs (their time is the pair's), True keeps only them, None keeps both.
        """
        out = []
        for r in self.ranks:
            for it in r.iterations:
                for a in it.actions:
                    if a.stage != stage or a.kind != kind:
                        continue
                    if paired is not None and (a.pair is not None) != paired:
                        continue
                    out.append(a.busy_ns if busy else a.span_ns)
        return out

    def median_busy_ns(self) -> dict[tuple[int, str], float]:
        """(stage, kind) -> median busy time of its unpaired compute actions, in ns."""
        keys = sorted({(a.stage, a.kind) for r in self.ranks for it in r.iterations
                       for a in it.compute if a.pair is None})
        return {k: float(median(self.samples(*k))) for k in keys}


def _steps(compute: tuple[TraceAction, ...]) -> tuple[Action, ...]:
    """The steps of one rank's compute spans: the two halves of a pair are read from one span,
    one after the other (the reader keeps them together), so they make one OVERLAP_F_B step."""
    out: list[Action] = []
    i = 0
    while i < len(compute):
        a = compute[i]
        if a.pair is not None and i + 1 < len(compute) and compute[i + 1].pair == a.pair:
            out.append(Action.overlap(a.action(), compute[i + 1].action()))
            i += 2
        else:
            out.append(a.action())
            i += 1
    return tuple(out)


# --- reading ---------------------------------------------------------------------------------


def _gunzip(raw: bytes, path: Path, limit: int) -> bytes:
    """The gzip data decompressed, refused once it passes ``limit`` bytes (a small file can
    hold gigabytes of zeros)."""
    out = bytearray()
    while raw:
        d = zlib.decompressobj(16 + zlib.MAX_WBITS)
        try:
            out += d.decompress(raw, limit + 1 - len(out))
        except zlib.error:
            raise TraceError(f"{path}: expected a gzip-compressed Chrome trace, the gzip data "
                             "is truncated or damaged") from None
        if len(out) > limit:
            raise TraceError(f"{path}: decompresses to more than {limit >> 20} MiB, the limit "
                             "for a trace") from None
        if not d.eof:
            raise TraceError(f"{path}: expected a gzip-compressed Chrome trace, the gzip data "
                             "is truncated or damaged") from None
        raw = d.unused_data.lstrip(b"\0")   # the next member, as gzip.decompress reads them
    return bytes(out)


def _load_json(path: Path) -> dict:
    try:
        raw = read_input_bytes(path, MAX_TRACE_BYTES)
    except InputFileError as e:
        if e.found == "No such file or directory":
            raise TraceError(f"{path}: no such trace file") from None
        raise TraceError(f"{path}: cannot read the trace ({e.problem})") from None
    if raw[:2] == b"\x1f\x8b":
        raw = _gunzip(raw, path, MAX_TRACE_BYTES)
    try:
        data = json.loads(raw)
    except UnicodeDecodeError:
        raise TraceError(f"{path}: expected a Chrome trace JSON (UTF-8 text), found binary "
                         "data") from None
    except json.JSONDecodeError as e:
        early = e.pos >= len(raw.rstrip()) or e.msg.startswith("Unterminated")
        what = "ends early (truncated?)" if early else "is not valid JSON"
        raise TraceError(f"{path}:{e.lineno}:{e.colno}: expected a complete Chrome trace JSON "
                         f"({{\"traceEvents\": [...]}}), the file {what}: {e.msg}") from None
    if isinstance(data, list):
        data = {"traceEvents": data}
    if not isinstance(data, dict) or not isinstance(data.get("traceEvents"), list):
        raise TraceError(f"{path}: expected a Chrome trace JSON object with a \"traceEvents\" "
                         "list")
    return data


def compile_pattern(pattern: str | re.Pattern | None) -> re.Pattern | None:
    """Check a user label pattern: named groups ``kind`` and ``mb`` (``stage`` optional)."""
    if pattern is None or isinstance(pattern, re.Pattern):
        rx = pattern
    else:
        try:
            rx = re.compile(pattern)
        except re.error as e:
            raise TraceError(f"--label-pattern: expected a regular expression, {pattern!r} does "
                             f"not compile: {e}") from None
    if rx is not None and not {"kind", "mb"} <= set(rx.groupindex):
        raise TraceError(f"--label-pattern: expected named groups (?P<kind>...) and "
                         f"(?P<mb>...) (and (?P<stage>...) unless the stage is the rank), found "
                         f"{rx.pattern!r}")
    return rx


def _parse_label(name: str, rank: int, user: re.Pattern | None, path: Path
                 ) -> list[tuple[int, str, int | None, bool]] | None:
    """[(stage, kind, mb, paired)] a label stands for, or None when it is no pipeline label."""
    if name.startswith("PP:"):
        body = name[3:]
        m = _PP_OVERLAP.match(body)
        if m:
            halves = [_PP_SINGLE.match(s.strip()) for s in m.group(1).split(";")]
            if len(halves) != 2 or not all(h and h.group(3) for h in halves):
                raise TraceError(f"{path}: label {name!r}: expected an overlapped pair like "
                                 "'PP:(0F7;7B3)OVERLAP_F_B'")
            return [(int(h.group(1)), h.group(2), int(h.group(3)), True) for h in halves]
        m = _PP_SINGLE.match(body)
        if not m:
            raise TraceError(f"{path}: label {name!r}: expected 'PP:<stage><kind><microbatch>' "
                             "(kind F, B, I, W, SEND_F, RECV_F, SEND_B, RECV_B) or "
                             "'PP:<stage>UNSHARD/RESHARD/REDUCE_GRAD'")
        kind = m.group(2)
        mb = int(m.group(3)) if m.group(3) else None
        if (kind in OTHER_KINDS) != (mb is None):
            raise TraceError(f"{path}: label {name!r}: "
                             + ("expected no microbatch after " + kind if mb is not None
                                else "expected a microbatch number after " + kind))
        return [(int(m.group(1)), kind, mb, False)]
    m = _GPIPE.match(name)
    if m:
        return [(rank, "F" if m.group(1) == "Forward" else "B", int(m.group(2)), False)]
    if user is not None:
        m = user.search(name)
        if m:
            kind = m.group("kind")
            if kind not in COMPUTE_KINDS:
                raise TraceError(f"{path}: label {name!r}: --label-pattern group 'kind' must be "
                                 f"one of F, B, I, W, found {kind!r}")
            stage = m.group("stage") if "stage" in user.groupindex else None
            try:
                return [(rank if stage is None else int(stage), kind, int(m.group("mb")), False)]
            except ValueError:
                raise TraceError(f"{path}: label {name!r}: --label-pattern groups 'stage' and "
                                 "'mb' must match numbers") from None
    return None


def _ns(us: float) -> int:
    """µs -> ns, exact for the epoch-scale timestamps profilers write (a float product loses
    the last ~200 ns there)."""
    if isinstance(us, int):
        return us * 1000
    whole = int(us)
    return whole * 1000 + int(round((float(us) - whole) * 1000))


def _is_work(ev: dict) -> bool:
    name = ev.get("name", "")
    return ev.get("cat") in ("cpu_op", "user_annotation", "python_function") and \
        not name.startswith(_COMM_PREFIXES)


def _union(intervals: list[tuple[int, int]]) -> int:
    total = 0
    cur_s = cur_e = None
    for s, e in sorted(intervals):
        if cur_e is None or s > cur_e:
            if cur_e is not None:
                total += cur_e - cur_s
            cur_s, cur_e = s, e
        elif e > cur_e:
            cur_e = e
    if cur_e is not None:
        total += cur_e - cur_s
    return total


def read_rank(path: str | PathLike, data: dict | None = None, *, rank: int = 0,
              label_pattern: str | re.Pattern | None = None) -> RankTrace:
    """One rank's trace; ``rank`` is used for labels without a stage (GPipe, user patterns)."""
    p = Path(path)
    if data is None:
        data = _load_json(p)
    user = compile_pattern(label_pattern)
    events = [e for e in data["traceEvents"]
              if isinstance(e, dict) and e.get("ph") == "X" and "ts" in e and "dur" in e]
    for i, e in enumerate(events):
        if not all(isinstance(e[k], (int, float)) and not isinstance(e[k], bool)
                   and e[k] == e[k] for k in ("ts", "dur")) or e["dur"] < 0:
            raise TraceError(f"{p}: event {e.get('name', '?')!r}: expected numbers 'ts' and "
                             f"'dur' >= 0 (µs), found ts={e['ts']!r}, dur={e['dur']!r}")
    labels: list[tuple[dict, list]] = []
    steps: list[tuple[int, int, int]] = []   # (k, start, end)
    iters: list[tuple[int, int, int]] = []
    label_ids: set[int] = set()
    for ev in events:
        name = ev.get("name", "")
        if not isinstance(name, str) or ev.get("cat") in _NOT_LABELS:
            continue
        m = _STEP.match(name)
        if m:
            steps.append((int(m.group(1)), _ns(ev["ts"]), _ns(ev["ts"]) + _ns(ev["dur"])))
            label_ids.add(id(ev))
            continue
        if name.startswith("ITER"):
            iters.append((len(iters), _ns(ev["ts"]), _ns(ev["ts"]) + _ns(ev["dur"])))
            label_ids.add(id(ev))
            continue
        parsed = _parse_label(name, rank, user, p)
        if parsed is not None:
            labels.append((ev, parsed))
            label_ids.add(id(ev))
    if not labels:
        hint = "" if user is not None else " (Schedule1F1B records none: label the compute " \
                                             "and give --label-pattern)"
        raise TraceError(f"{p}: expected pipelining labels ('PP:<action>', 'Forward <mb>' / "
                         f"'Backward <mb>'{' or --label-pattern' if user is None else ''}), "
                         f"found none{hint}")

    # per thread, the work events sorted by start, to find what each span contains
    work: dict[tuple, tuple[list[int], list[tuple[int, int]]]] = {}
    for ev in sorted((e for e in events if id(e) not in label_ids and _is_work(e)),
                     key=lambda e: e["ts"]):
        starts, spans = work.setdefault((ev.get("pid"), ev.get("tid")), ([], []))
        s = _ns(ev["ts"])
        starts.append(s)
        spans.append((s, s + _ns(ev["dur"])))

    device = _device_work(events)
    # per thread, the backend's send / receive annotations by start (a transfer's post and
    # the return of the wait on it; they outlast the PP:SEND / PP:RECV span that posts them)
    comms: dict[tuple, tuple[list[int], list[tuple[int, int]]]] = {}
    # gloo's only: NCCL's wait returns once the stream is ordered, not when the data came
    for ev in sorted((e for e in events if e.get("cat") == "user_annotation"
                      and e.get("name") in ("gloo:send", "gloo:recv")),
                     key=lambda e: e["ts"]):
        starts, spans = comms.setdefault((ev.get("pid"), ev.get("tid")), ([], []))
        s = _ns(ev["ts"])
        starts.append(s)
        spans.append((s, s + _ns(ev["dur"])))

    def comm_of(ev: dict, start: int, end: int) -> tuple[int, int] | None:
        starts, spans = comms.get((ev.get("pid"), ev.get("tid")), ([], []))
        i = bisect.bisect_left(starts, start)
        return spans[i] if i < len(starts) and starts[i] <= end else None

    def busy(ev: dict, start: int, end: int) -> tuple[int, int]:
        """(busy time, end): the nested operators' union on a CPU trace; on a GPU trace the
        union of the device intervals the span launched, and the later of its end and theirs."""
        key = (ev.get("pid"), ev.get("tid"))
        if device is not None:
            starts, corrs = device[1].get(key, ([], []))
            lo = bisect.bisect_left(starts, start)
            hi = bisect.bisect_right(starts, end)
            spans = [iv for c in corrs[lo:hi] for iv in device[0].get(c, ())]
            return _union(spans), max([end] + [e for _, e in spans])
        starts, spans = work.get(key, ([], []))
        lo = bisect.bisect_left(starts, start)
        hi = bisect.bisect_right(starts, end)
        return _union([(s, e) for s, e in spans[lo:hi] if e <= end]), end

    bounds = sorted(steps) if steps else iters
    if not bounds:
        bounds = [(0, -(1 << 62), 1 << 62)]
    per_iter: list[list[TraceAction]] = [[] for _ in bounds]
    b_starts = [b[1] for b in bounds]
    for ev, parsed in sorted(labels, key=lambda x: (x[0]["ts"], -x[0]["dur"])):
        start = _ns(ev["ts"])
        end = start + _ns(ev["dur"])
        k = bisect.bisect_right(b_starts, start) - 1
        if k < 0 or start > bounds[k][2]:
            continue
        b, end = busy(ev, start, end)
        pair = None
        if parsed[0][3]:
            pair = sum(1 for a in per_iter[k] if a.pair is not None) // 2
        comm = comm_of(ev, start, end) if parsed[0][1] in COMM_KINDS else None
        for stage, kind, mb, _paired in parsed:
            per_iter[k].append(TraceAction(stage, kind, mb, start, end, b, pair, ev["name"],
                                           comm))
    if steps or iters:
        its = tuple(Iteration(i, b[1], b[2], tuple(acts))
                    for i, (b, acts) in enumerate(zip(bounds, per_iter)))
    else:
        acts = per_iter[0]
        its = (Iteration(0, min(a.start_ns for a in acts), max(a.end_ns for a in acts),
                         tuple(acts)),)
    its = tuple(it for it in its if it.actions)
    if not its:
        raise TraceError(f"{p}: expected pipelining labels inside the iteration spans "
                         "(ProfilerStep#k / ITER...), found none there")
    return RankTrace(rank, str(p), its, bool(steps or iters))


def _device_work(events: list[dict]) -> tuple[dict, dict] | None:
    """On a GPU trace: ({correlation: [(start, end)] of its device work, NCCL kernels left
    out}, {(pid, tid): (launch starts, their correlations)} sorted by start); None on a CPU
    trace."""
    by_corr: dict[int, list[tuple[int, int]]] = {}
    seen = False
    for ev in events:
        if ev.get("cat") not in _DEVICE_CATS:
            continue
        seen = True
        args = ev.get("args")
        corr = args.get("correlation") if isinstance(args, dict) else None
        if corr is None or str(ev.get("name", "")).startswith(_DEVICE_COMM_PREFIXES):
            continue
        s = _ns(ev["ts"])
        by_corr.setdefault(corr, []).append((s, s + _ns(ev["dur"])))
    if not seen:
        return None
    launches: dict[tuple, tuple[list[int], list[int]]] = {}
    for ev in sorted((e for e in events if e.get("cat") in _LAUNCH_CATS), key=lambda e: e["ts"]):
        args = ev.get("args")
        corr = args.get("correlation") if isinstance(args, dict) else None
        if corr in by_corr:
            starts, corrs = launches.setdefault((ev.get("pid"), ev.get("tid")), ([], []))
            starts.append(_ns(ev["ts"]))
            corrs.append(corr)
    return by_corr, launches


def _declared_rank(data: dict) -> tuple[int | None, int | None]:
    info = data.get("distributedInfo")
    if not isinstance(info, dict):
        return None, None
    rank, world = info.get("rank"), info.get("world_size")
    return (rank if isinstance(rank, int) else None, world if isinstance(world, int) else None)


def read_traces(paths: Sequence[str | PathLike], *,
                label_pattern: str | re.Pattern | None = None) -> TraceSet:
    """Read one trace per rank and check they form one pipeline run.

    The rank is ``distributedInfo.rank`` when every file has it, else the file's position.
    """
    if not paths:
        raise TraceError("calibrate: expected one profiler trace per pipeline rank, got none")
    user = compile_pattern(label_pattern)
    loaded = [(Path(p), _load_json(Path(p))) for p in paths]
    declared = [_declared_rank(d) for _, d in loaded]
    if all(r is not None for r, _ in declared):
        seen: dict[int, Path] = {}
        for (p, _), (r, _) in zip(loaded, declared):
            if r in seen:
                raise TraceError(f"{p}: distributedInfo.rank {r} again (also in {seen[r]}); "
                                 "expected one trace per rank")
            seen[r] = p
        worlds = {w for _, w in declared if w is not None}
        world = max(worlds | {max(seen) + 1})
        missing = [r for r in range(world) if r not in seen]
        if missing:
            raise TraceError(f"{_where([p for p, _ in loaded])}: missing the trace of rank "
                             f"{missing[0]}: expected one trace per rank 0..{world - 1}, found "
                             f"ranks {', '.join(map(str, sorted(seen)))}")
        order = sorted(range(len(loaded)), key=lambda i: declared[i][0])
    else:
        order = list(range(len(loaded)))
    ranks = tuple(read_rank(loaded[i][0], loaded[i][1], rank=r, label_pattern=user)
                  for r, i in enumerate(order))
    return _check(ranks)


def _where(paths: Sequence[str | PathLike]) -> str:
    """How an error names a set of traces: their folder, or the first file and '...'."""
    parents = {Path(p).parent for p in paths}
    if len(parents) == 1 and len(paths) > 1:
        return f"{parents.pop()}/"
    return str(paths[0]) + (" ..." if len(paths) > 1 else "")


def _check(ranks: tuple[RankTrace, ...]) -> TraceSet:
    P = len(ranks)
    where = {}
    for r in ranks:
        for it in r.iterations:
            for a in it.actions:
                prev = where.setdefault(a.stage, r)
                if prev.rank != r.rank:
                    raise TraceError(f"{r.path}: stage {a.stage} also runs on rank {prev.rank} "
                                     f"({prev.path}); expected each stage on one rank")
    compute_stages = {a.stage for r in ranks for it in r.iterations for a in it.compute}
    n_stages = max(where) + 1
    absent = [s for s in range(n_stages) if s not in compute_stages]
    if absent:
        raise TraceError(f"{_where([r.path for r in ranks])}: no compute action of stage {absent[0]}; expected "
                         f"stages 0..{n_stages - 1} over the {P} traces")
    if n_stages % P:
        raise TraceError(f"{_where([r.path for r in ranks])}: {n_stages} stages do not divide over {P} ranks; "
                         "expected the same number of stages on every rank (a missing trace?)")
    v = n_stages // P
    for r in ranks:
        own = sorted(s for s, rr in where.items() if rr.rank == r.rank)
        if len(own) != v:
            raise TraceError(f"{r.path}: rank {r.rank} runs stages {own}; expected {v} stage(s) "
                             f"per rank ({n_stages} stages over {P} ranks)")
    n_iter = {len(r.iterations) for r in ranks}
    if len(n_iter) != 1:
        r = min(ranks, key=lambda r: len(r.iterations))
        raise TraceError(f"{r.path}: {len(r.iterations)} iteration(s); expected "
                         f"{max(n_iter)} like the other ranks")
    M = 1 + max(a.microbatch for r in ranks for it in r.iterations for a in it.compute)
    split = any(a.kind in ("I", "W") for r in ranks for it in r.iterations for a in it.compute)
    for r in ranks:
        for it in r.iterations:
            counts = Counter((a.stage, a.kind, a.microbatch) for a in it.compute)
            dup = [k for k, c in counts.items() if c > 1]
            if dup:
                s, kind, mb = dup[0]
                hint = "" if r.marked else (" (no ProfilerStep#k or ITER... spans: the whole "
                                            "trace is read as one iteration)")
                raise TraceError(f"{r.path}: iteration {it.index}: {s}{kind}{mb} twice; expected "
                                 f"each action once per iteration{hint}")
            for s in (s for s, rr in where.items() if rr.rank == r.rank):
                for kind in ("F", "W" if split else "B"):
                    have = {mb for (st, k, mb) in counts if st == s and k == kind}
                    if split and kind == "W":
                        have |= {mb for (st, k, mb) in counts if st == s and k == "B"}
                    if have != set(range(M)):
                        miss = min(set(range(M)) - have)
                        raise TraceError(f"{r.path}: iteration {it.index}: no {s}{kind}{miss}; "
                                         f"expected microbatches 0..{M - 1} on every stage")
    placement = tuple(where[s].rank for s in range(n_stages))
    return TraceSet(ranks, P, v, M, placement, split)


def trace_files(paths: Iterable[str | PathLike]) -> list[Path]:
    """Expand directories into their ``*.json`` / ``*.json.gz`` files, sorted by name."""
    out: list[Path] = []
    for p in map(Path, paths):
        if p.is_dir():
            out.extend(sorted(q for q in p.iterdir()
                              if q.name.endswith((".json", ".json.gz"))))
        else:
            out.append(p)
    return out
