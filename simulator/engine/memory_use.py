"""The memory model (:mod:`.memory`) applied over a finished run's executed order: every rank's
peak, what it is made of, when and in which action it occurs, and an overflow of the memory
limit (an OutOfMemoryError naming the first in time; at one instant, the lowest rank).

Memory changes only at action boundaries, in each rank's own order, so a rank's level is a
running sum over its actions, whatever engine timed them (one place for every engine). For
action k the level after its start is ``L0 = before + start`` (a forward's stash), after its
end ``L1 = L0 + end`` (frees, an I's kept gradients, a stage's parameter gradients at its first
backward, tensors sent to another rank), and its peak ``max(L0, L1) + transient``. Runtime
buffers are released after that: at the step's end, or (``until_sent``) after the first action
of the sender that ends no earlier than the transfer.

Every action of one (stage, role) changes memory alike, so a rank's changes are a table lookup
per action plus a few corrections (gradients, releases) at known positions; the sums run in C
(``accumulate``, ``map``): the run path loads no numpy, and a million actions cost ~0.1 s.
"""

from __future__ import annotations

from bisect import bisect_left
from collections import Counter
from typing import NamedTuple
from itertools import accumulate
from operator import add, attrgetter

from ..errors import OutOfMemoryError
from ..schedules.action import Kind
from ..schedules.phases import rank_kinds, rank_stages
from .columns import ActionColumns
from .memory import CATEGORIES, MemoryModel
from .records import RunRecords

_stage = attrgetter("stage")
DYNAMIC = ("activations", "gradients", "runtime_buffers")


# a NamedTuple, not a dataclass: start-up (simulator/__init__.py)
class MemoryPeak(NamedTuple):
    """One rank's peak: its bytes by category, when, and the action it occurs in (None: the
    static memory alone)."""

    rank: int
    bytes: float
    time_ns: float
    action: str | None
    breakdown: dict        # {category: bytes}, summing to ``bytes``


class _Role(NamedTuple):
    """What every action of one (stage, role) does to memory."""

    start: float            # activations, at its start
    act_end: float          # activations, at its end
    buf_end: float          # runtime buffers (sent, kept), at its end
    transient: float


def _roles(model: MemoryModel, stage: int) -> dict[str, _Role]:
    """Roles: F; I (and a B whose weights a W computes: ``b``); W; a full B (``B``)."""
    m = model.stages[stage]
    # the backward that frees the stash (W, or a full B) leaves a kept output behind it
    return {
        "F": _Role(m.stash, 0.0, 0.0, m.f_transient),
        "I": _Role(0.0, m.i_keeps - m.i_frees, m.send_backward, m.i_transient),
        "b": _Role(0.0, m.i_keeps - m.i_frees, m.send_backward, m.b_transient),
        "W": _Role(0.0, m.i_frees - m.stash - m.i_keeps, m.send_forward + m.kept_output,
                   m.w_transient),
        "B": _Role(0.0, -m.stash, m.send_backward + m.send_forward + m.kept_output,
                   m.b_transient),
    }


class _RankUse:
    """One rank's levels over its executed actions (all iterations, or as many as ran)."""

    def __init__(self, model: MemoryModel, schedule, rank: int, iterations: int,
                 done: int, send_ends: dict | None, ends) -> None:
        actions = schedule.ranks[rank]
        n = len(actions)
        kinds = rank_kinds(schedule, rank)
        if "B" in kinds and "W" in kinds:
            split = {(a.stage, a.microbatch) for a in actions if a.kind == Kind.W}
            kinds = "".join("b" if a.kind == Kind.B and (a.stage, a.microbatch) in split
                            else k for a, k in zip(actions, kinds))
        stages = rank_stages(schedule, rank)
        only = next(iter(stages), 0)
        if len(stages) == 1:
            roles = _roles(model, only)
            codes = kinds              # a str: indexed, sliced and counted like a list
        else:
            roles = {(s, k): r for s in stages for k, r in _roles(model, s).items()}
            codes = list(zip(map(_stage, actions), kinds))
        self.roles, self.n, self.actions = roles, n, actions
        self.codes = (codes * iterations)[:done]
        # per-role totals: the change over the action, and its top above the level before
        total = {c: r.start + r.act_end + r.buf_end for c, r in roles.items()}
        top = {c: r.start + max(0.0, r.act_end + r.buf_end) + r.transient
               for c, r in roles.items()}
        # no role moves a byte (a workload without memory figures): the level never moves
        self.flat = not any(x for r in roles.values() for x in (r.start, r.act_end, r.buf_end,
                                                                r.transient))
        if self.flat:
            self.total = [0.0] * len(self.codes)
            self.top = [0.0] * len(self.codes)
        else:
            self.total = list(map(total.__getitem__, self.codes))
            self.top = list(map(top.__getitem__, self.codes))
        # corrections at known positions: {position: bytes} by category, at the end
        self.grads: dict[int, float] = {}
        self.release: dict[int, float] = {}        # runtime buffers, after the action
        self.grad_release: dict[int, float] = {}   # gradients, after the action
        firsts: dict[int, int] = {}                # stage -> its first weight backward
        if len(stages) == 1:
            found = [k for k in (kinds.find("W"), kinds.find("B")) if k >= 0]
            if found:
                firsts[only] = min(found)
        else:
            for k in range(n):
                if kinds[k] in "WB" and actions[k].stage not in firsts:
                    firsts[actions[k].stage] = k
                    if len(firsts) == len(stages):
                        break
        for it in range(iterations if model.gradients_per_step else 1):
            step = 0.0
            for stage, k in firsts.items():
                g = model.stages[stage].gradients
                if g and it * n + k < done:
                    self.grads[it * n + k] = g
                    step += g
            last = (it + 1) * n - 1
            if model.gradients_per_step and step and last < done:
                self.grad_release[last] = -step
        sent = {c: r.buf_end for c, r in roles.items()}
        single = len(stages) == 1
        kept = {c: model.stages[only if single else c[0]].kept_output
                if (c if single else c[1]) in ("W", "B") else 0.0 for c in roles}
        if isinstance(codes, str):   # the letters' counts, in order of first use (Counter's)
            counts = {c: codes.count(c) for c in sorted(set(codes), key=codes.find)}
        else:
            counts = Counter(codes)
        per_iter_sent = sum(sent[c] * k for c, k in counts.items())
        per_iter_kept = sum(kept[c] * k for c, k in counts.items())
        held_to_end = per_iter_kept + (per_iter_sent - per_iter_kept
                                       if model.sends_held == "step_end" else 0.0)
        for it in range(iterations):
            last = (it + 1) * n - 1
            if n and last < done and held_to_end:
                self.release[last] = self.release.get(last, 0.0) - held_to_end
        if model.sends_held == "until_sent" and send_ends is not None:
            self._release_when_sent(rank, iterations, done, sent, kept, codes, send_ends, ends)
        self.flat = self.flat and not (self.grads or self.release or self.grad_release)
        for k, g in self.grads.items():
            r = roles[self.codes[k]]
            self.total[k] += g
            self.top[k] = r.start + max(0.0, r.act_end + r.buf_end + g) + r.transient
        for k, x in (*self.release.items(), *self.grad_release.items()):
            self.total[k] += x

    def _release_when_sent(self, rank, iterations, done, sent, kept, codes, send_ends,
                           ends) -> None:
        n = self.n
        for k, code in enumerate(codes):
            nbytes = sent[code] - kept[code]
            if not nbytes:
                continue
            a = self.actions[k]
            data = "F" if a.kind == Kind.F else "B"
            for it in range(iterations):
                pos = it * n + k
                if pos >= done:
                    break
                t = send_ends.get((rank, a.stage, data, a.microbatch, it))
                last = min((it + 1) * n - 1, done - 1)
                at = last if t is None else min(bisect_left(ends, t, pos), last)
                self.release[at] = self.release.get(at, 0.0) - nbytes

    def levels(self, base: float) -> tuple[list[float], list[float]]:
        """(the level before each action, its peak)."""
        if self.flat:   # what the running sums below give when every change is 0.0
            n = len(self.total)
            b = base + 0.0
            return ([base] + [b] * (n - 1) if n else []), [b] * n
        before = list(accumulate(self.total[:-1], initial=base)) if self.total else []
        return before, list(map(add, before, self.top))

    def parts_before(self, k: int) -> dict[str, float]:
        """Bytes by dynamic category after the actions before position k."""
        counts = Counter(self.codes[:k])
        roles = self.roles
        act = sum((roles[c].start + roles[c].act_end) * n for c, n in counts.items())
        buf = sum(roles[c].buf_end * n for c, n in counts.items())
        buf += sum(x for p, x in self.release.items() if p < k)
        grads = sum(g for p, g in (*self.grads.items(), *self.grad_release.items()) if p < k)
        return {"activations": act, "gradients": grads, "runtime_buffers": buf}


def _times(records: RunRecords, rank: int):
    acts = records.actions
    if isinstance(acts, ActionColumns):
        return acts.start[rank], acts.end[rank]
    mine = [a for a in acts if a.rank == rank]
    return [a.start for a in mine], [a.end for a in mine]


def account(model: MemoryModel, schedule, records: RunRecords, iterations: int,
            limit: float | None = None, samples: bool = False) -> list[MemoryPeak]:
    """Every rank's peak (also written to ``records.peak_memory`` / ``static_memory``, and with
    ``samples`` the level after every change to ``records.memory``); raises OutOfMemoryError at
    the first action in time that takes a rank over ``limit`` bytes. A run that stopped part
    way (a deadlock) is accounted over the actions it finished."""
    send_ends = None
    if model.sends_held == "until_sent":
        send_ends = {(t.src_rank, t.src_stage, t.data, t.microbatch, t.iteration): t.end
                     for t in records.transfers}
    peaks, overflows, traces = [], [], []
    for r in range(schedule.pp):
        starts, ends = _times(records, r)
        use = _RankUse(model, schedule, r, iterations, len(starts), send_ends, ends)
        base = model.static_bytes[r]
        before, top = use.levels(base)
        peaks.append(_peak(r, model, use, base, before, top, starts, ends))
        if limit is not None:
            over = _first_over(r, use, base, before, top, starts, ends, limit)
            if over is not None:
                overflows.append(over)
        if samples:
            traces.append((r, base, use, before, starts, ends))
    if overflows:
        raise min(overflows, key=lambda o: (o[0], o[1]))[2]
    records.memory_model = model
    records.static_memory = list(model.static_bytes)
    records.peak_memory = [p.bytes for p in peaks]
    if samples:
        records.memory = _samples(traces)
    return peaks


def _label(use: _RankUse, k: int) -> str:
    """The action at position k (any iteration), with its overlapped partner."""
    a = use.actions[k % use.n]
    if a.pair is None:
        return str(a)
    return "+".join(str(b) for b in use.actions if b.pair == a.pair)


def _ends_higher(use: _RankUse, k: int) -> bool:
    """Whether action k's level is higher after it ends than after it starts."""
    role = use.roles[use.codes[k]]
    return role.act_end + role.buf_end + use.grads.get(k, 0.0) > 0


def _peak(r: int, model: MemoryModel, use: _RankUse, base: float, before, top, starts,
          ends) -> MemoryPeak:
    static = dict(model.static_parts[r])
    best = max(top, default=base)
    if best <= base:
        return MemoryPeak(r, base, 0.0, None, static)
    k = top.index(best)
    role = use.roles[use.codes[k]]
    at_end = _ends_higher(use, k)
    parts = use.parts_before(k)
    parts["activations"] += role.start + (role.act_end if at_end else 0.0)
    if at_end:
        parts["runtime_buffers"] += role.buf_end
        parts["gradients"] += use.grads.get(k, 0.0)
    out = {c: static.get(c, 0.0) + parts.get(c, 0.0) for c in CATEGORIES}
    out["transient"] = role.transient
    return MemoryPeak(r, best, ends[k] if at_end else starts[k], _label(use, k), out)


def _first_over(r: int, use: _RankUse, base: float, before, top, starts, ends,
                limit: float):
    """(time, rank, OutOfMemoryError) of rank r's first overflow, or None: at the start of the
    action whose stash does not fit, while it runs (its transient), or as it ends (what it
    keeps)."""
    if base > limit:
        return 0.0, r, _oom(r, 0.0, "holding its weights and optimizer state", base, limit)
    if max(top, default=base) <= limit:
        return None
    k = next(i for i, v in enumerate(top) if v > limit)
    role = use.roles[use.codes[k]]
    name = _label(use, k)
    l0 = before[k] + role.start
    l1 = l0 + role.act_end + role.buf_end + use.grads.get(k, 0.0)
    if l0 > limit:
        return starts[k], r, _oom(r, starts[k], "starting " + name, l0, limit)
    if l1 > limit:
        return ends[k], r, _oom(r, ends[k], "ending " + name, l1, limit)
    return starts[k], r, _oom(r, starts[k], "running " + name, top[k], limit)


def _oom(rank: int, now: float, what: str, m: float, limit: float) -> OutOfMemoryError:
    return OutOfMemoryError(
        f"rank {rank} out of memory at t={now:.0f} ns {what}: needs {m:.0f} bytes, "
        f"limit {limit:.0f} bytes ({m - limit:.0f} bytes over)")


def _samples(traces) -> list[tuple[int, float, float]]:
    """(rank, time, bytes) after every change, in time order (ranks in order at equal times)."""
    out = []
    for r, base, use, before, starts, ends in traces:
        out.append((r, 0.0, float(base)))
        for k, code in enumerate(use.codes):
            role = use.roles[code]
            if role.start:
                out.append((r, float(starts[k]), before[k] + role.start))
            if use.total[k] - role.start:
                out.append((r, float(ends[k]), before[k] + use.total[k]))
    out.sort(key=lambda x: (x[1], x[0]))
    return out


def memory_timeline(schedule, records: RunRecords,
                    iterations: int) -> list[tuple[int, float, float]]:
    """(rank, time, bytes) after every change of a finished run: the samples it recorded, or
    the same computed again from its memory model (a run records them only when asked)."""
    if records.memory or getattr(records, "memory_model", None) is None:
        return list(records.memory)
    copy = RunRecords(actions=records.actions, transfers=records.transfers)
    account(records.memory_model, schedule, copy, iterations, samples=True)
    return copy.memory
