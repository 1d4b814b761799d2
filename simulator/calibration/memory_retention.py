"""What the pipeline runtime kept, read from the allocator's ``[memory]`` events of one traced
schedule (one trace per rank): the ``runtime.kept_outputs``, ``sends_held`` and
``recv_buffers`` a run of that runtime takes (engine/memory.py).

Each ``[memory]`` event carries the block's address (``args.Addr``), so an allocation is paired
with its free: a block's life. Per rank, the blocks of exactly one activation (``pp_comm``
bytes) that outlive the compute action that allocated them are followed to their free:

- **kept outputs**: the last stage's forward output is such a block. Freed after the
  microbatch's last backward of that stage (at the step's end or as the next ``step()``
  starts): the runtime keeps its outputs (``step_end``: torch's ``return_outputs=True``);
  freed within that backward: ``none``;
- **sends held**: an input gradient, made by the backward (B, or I) of a stage whose previous
  stage is on another rank, is sent there. Freed after the rank's last compute action of the
  step (or as the next ``step()`` starts): the send holds it to the step's end
  (``step_end``); freed during the step: until it is sent (``until_sent``);
- **receive buffers**: blocks of one activation allocated outside every compute action and
  still held when the trace ends (allocated once, kept across steps): their count per rank
  beside the count torch's rule gives for them (one per microbatch for an input from another
  rank and for a gradient from another rank: ``per_microbatch``; a same-rank neighbour's
  tensors are handed over by reference); none of them: ``none``.

Beside them, what the last stage's loss keeps outside its forward's span: torch's single-stage
schedules compute the loss after the forward's labelled span (``Forward <mb>``, or a user label
around ``forward_one_chunk``), the multi-stage runtime inside it. Per forward of the last stage,
the blocks allocated after its span and before the rank's next compute action that are freed by
that microbatch's backward (its B, I or W): a mean-squared loss's ``out - target`` (``0`` where
the loss runs inside the span, whose kept bytes then hold it: memory_fit reads those). The
median over the forwards is ``loss_outside``.

Where a trace shows nothing for a key (a single-stage class has no second stage on a rank, a
class on one runtime says nothing of the other's sends), the key is not found and the run
takes that runtime's known rule (runtime_profile.RETENTION). Needs no torch.
"""

from __future__ import annotations

import bisect
from os import PathLike
from pathlib import Path
from typing import NamedTuple

from .traces import TraceError, _load_json, _ns, read_rank


class Retention(NamedTuple):
    """What the traces show; a key is None where they show nothing of it."""

    kept_outputs: str | None
    sends_held: str | None
    recv_buffers: str | None
    evidence: tuple[str, ...]      # one line per key found (or not), what was seen
    loss_outside: int | None = None  # bytes the loss keeps after the last forward's span


class _Block(NamedTuple):
    start: int
    end: int | None      # None: still held when the trace ends
    nbytes: int


def _blocks(path: Path, data: dict) -> list[_Block]:
    """Every allocation's life, from the paired ``[memory]`` events (by address)."""
    events = []
    for ev in data.get("traceEvents", ()):
        if not isinstance(ev, dict) or ev.get("name") != "[memory]":
            continue
        args = ev.get("args") or {}
        addr, nbytes = args.get("Addr"), args.get("Bytes")
        if not isinstance(addr, int) or not isinstance(nbytes, int):
            raise TraceError(f"{path}: [memory] event without an integer 'Addr' and 'Bytes' "
                             f"(args {args!r}); expected torch's profiler memory events")
        events.append((_ns(ev["ts"]), nbytes, addr))
    events.sort(key=lambda e: e[0])
    open_: dict[int, tuple[int, int]] = {}
    out = []
    for t, nbytes, addr in events:
        if nbytes > 0:
            open_[addr] = (t, nbytes)
        elif addr in open_:
            t0, n = open_.pop(addr)
            out.append(_Block(t0, t, n))
    out += [_Block(t0, None, n) for t0, n in open_.values()]
    out.sort(key=lambda b: b.start)
    return out


class _Rank(NamedTuple):
    stages: frozenset
    blocks: list
    starts: list           # block start times, sorted (bisect)
    iterations: tuple      # of traces.Iteration


def _rank(path: Path, rank: int, label_pattern, data: dict | None = None,
          rt=None) -> _Rank:
    data = _load_json(path) if data is None else data
    rt = rt or read_rank(path, data, rank=rank, label_pattern=label_pattern)
    blocks = _blocks(path, data)
    stages = frozenset(a.stage for it in rt.iterations for a in it.actions if a.is_compute)
    return _Rank(stages, blocks, [b.start for b in blocks], rt.iterations)


def _outliving(r: _Rank, start: int, end: int, nbytes: int) -> list[_Block]:
    """Blocks of ``nbytes`` allocated inside [start, end] and still held at ``end``."""
    lo = bisect.bisect_left(r.starts, start)
    hi = bisect.bisect_right(r.starts, end)
    return [b for b in r.blocks[lo:hi] if b.nbytes == nbytes and (b.end is None or b.end > end)]


def read_retention(paths: list[str | PathLike], pp_comm: int, microbatches: int, *,
                   label_pattern=None, datas: list[dict] | None = None,
                   rank_traces: list | None = None) -> Retention:
    """The retention one traced run shows (module docstring); ``paths``: one trace per rank,
    in rank order (``datas``, ``rank_traces``: their content and actions, already read)."""
    ranks = [_rank(Path(p), i, label_pattern, datas[i] if datas else None,
                   rank_traces[i] if rank_traces else None) for i, p in enumerate(paths)]
    owner = {s: i for i, r in enumerate(ranks) for s in r.stages}
    if not owner:
        raise TraceError(f"{paths[0]}: no compute actions inside the steps; expected a "
                         "pipeline run's labelled actions")
    last = max(owner)
    evidence: list[str] = []

    kept, evidence_kept = _kept_outputs(ranks[owner[last]], owner[last], last, pp_comm)
    evidence.append(evidence_kept)
    sends, evidence_sends = _sends(ranks, owner, pp_comm)
    evidence.append(evidence_sends)
    recv, evidence_recv = _recv_buffers(ranks, owner, pp_comm, microbatches)
    evidence.append(evidence_recv)
    loss, evidence_loss = _loss_outside(ranks[owner[last]], owner[last], last)
    evidence.append(evidence_loss)
    return Retention(kept, sends, recv, tuple(evidence), loss)


def _last_compute_end(it) -> int:
    return max((a.end_ns for a in it.actions if a.is_compute), default=it.end_ns)


def _kept_outputs(r: _Rank, rank: int, stage: int, a: int) -> tuple[str | None, str]:
    held = seen = 0
    for it in r.iterations:
        tail = _last_compute_end(it)
        for x in it.actions:
            if x.stage != stage or x.kind != "F" or x.pair:
                continue
            seen += 1
            held += any(b.end is None or b.end > tail
                        for b in _outliving(r, x.start_ns, x.end_ns, a))
    if not seen:
        return None, f"kept_outputs: not seen (no forward of the last stage {stage} in the steps)"
    found = "step_end" if 2 * held > seen else "none"
    return found, (f"kept_outputs: {found}: on rank {rank}, {held} of {seen} forwards of the "
                   f"last stage {stage} leave a {a} B block held past the rank's last compute "
                   "action of the step" + (" (the outputs step() returns)"
                                           if found == "step_end" else
                                           " (return_outputs=False)"))


def _sends(ranks: list[_Rank], owner: dict, a: int) -> tuple[str | None, str]:
    to_end = during = 0
    for i, r in enumerate(ranks):
        for it in r.iterations:
            tail = _last_compute_end(it)
            for x in it.actions:
                if x.kind not in "BI" or x.pair or x.stage - 1 not in owner \
                        or owner[x.stage - 1] == i:
                    continue
                # the input gradient: a block of one activation that outlives the backward and
                # is not an I's kept gradient (those are freed by the W)
                w_end = max((y.end_ns for y in it.actions if y.kind == "W"
                             and y.stage == x.stage and y.microbatch == x.microbatch),
                            default=None)
                for b in _outliving(r, x.start_ns, x.end_ns, a):
                    if b.end is not None and w_end is not None and b.end <= w_end:
                        continue
                    if b.end is None or b.end > tail:
                        to_end += 1
                    else:
                        during += 1
                    break
    if not to_end + during:
        return None, ("sends_held: not seen (no backward sends an input gradient to another "
                      "rank)")
    found = "step_end" if to_end > during else "until_sent"
    return found, (f"sends_held: {found}: of {to_end + during} input gradients sent to "
                   f"another rank, {to_end} held past the rank's last compute action of the "
                   f"step, {during} freed during it")


def _recv_buffers(ranks: list[_Rank], owner: dict, a: int, m: int) -> tuple[str | None, str]:
    counts, rule = [], []
    for i, r in enumerate(ranks):
        inside = [(x.start_ns, x.end_ns) for it in r.iterations for x in it.actions
                  if x.is_compute]
        first = min((s for s, _ in inside), default=None)
        n = sum(1 for b in r.blocks if b.nbytes == a and b.end is None
                and (first is None or b.start < first))
        counts.append(n)
        rule.append(m * sum((s - 1 in owner and owner[s - 1] != i)
                            + (s + 1 in owner and owner[s + 1] != i) for s in r.stages))
    if not any(rule):
        return None, "recv_buffers: not seen (no stage receives from another)"
    found = "per_microbatch" if all(c >= k for c, k in zip(counts, rule)) else \
        "none" if not any(counts) else None
    shown = ", ".join(f"rank {i}: {c} (rule {k})" for i, (c, k) in enumerate(zip(counts, rule)))
    if found is None:
        return None, (f"recv_buffers: unclear: blocks of {a} B allocated before the first "
                      f"step's actions and held to the trace's end: {shown}")
    return found, (f"recv_buffers: {found}: blocks of {a} B allocated before the first step's "
                   f"actions and held to the trace's end: {shown}")


def _loss_outside(r: _Rank, rank: int, stage: int) -> tuple[int | None, str]:
    found = []
    for it in r.iterations:
        computes = sorted((x for x in it.actions if x.is_compute), key=lambda x: x.start_ns)
        for k, x in enumerate(computes):
            if x.stage != stage or x.kind != "F" or x.pair:
                continue
            nxt = next((y.start_ns for y in computes[k + 1:] if y.start_ns >= x.end_ns),
                       it.end_ns)
            backs = [(y.start_ns, y.end_ns) for y in computes if y.stage == stage
                     and y.microbatch == x.microbatch and y.kind in "BIW"]
            lo = bisect.bisect_right(r.starts, x.end_ns)
            hi = bisect.bisect_left(r.starts, nxt)
            found.append(sum(b.nbytes for b in r.blocks[lo:hi] if b.end is not None
                             and any(s <= b.end <= e for s, e in backs)))
    if not found:
        return None, (f"loss_outside: not seen (no forward of the last stage {stage} apart from "
                      "a backward in the steps)")
    found.sort()
    kept = found[len(found) // 2]
    return kept, (f"loss_outside: {kept} B: on rank {rank}, what runs between a forward of the "
                  f"last stage {stage} and the rank's next action keeps {kept} B until that "
                  f"microbatch's backward (median of {len(found)})"
                  + (" (the loss, outside the forward's span)" if kept else
                     " (the loss runs inside the forward's span)"))
