"""Hanayo wave-like pipeline (Liu et al., SC'23): W waves over S = 2PW stages, one model copy.

Placement: the stages zig-zag over the ranks, down 0..P-1 and back up P-1..0 in every wave
(stage s on rank s mod 2P if that is < P, else 2P-1 - s mod 2P; PyTorch's "v" style), so a
wave is a V and vpp = 2W stages per rank. Backward is full B, as in the paper.

Order. The paper publishes no order for a general M, only figures (M = P) and the rule that
forwards run as early as the memory bound allows. Two constructions follow that rule; both are
built and the one with the shorter makespan at unit costs (F = 1, B = 2, free communication) is
kept (``meta["construction"]``):

- "folded-interleaved": the zig-zag over P ranks is the loop placement over 2P *virtual* ranks
  folded in half (virtual ranks q and 2P-1-q share rank min(q, 2P-1-q)). On the virtual ranks we
  take Megatron's interleaved 1F1B (W chunks each, PyTorch's group size N = M // max(1, M // 2P),
  warm-up 2(2P-q-1) + (W-1)N), time it at unit costs, and each rank runs its two virtual ranks'
  actions in order of their virtual start times (ties: the down-leg virtual rank first); an
  order sorted by the start times of a valid timeline cannot deadlock. For M >= 2P it idles
  3(P-1) units per rank at M = 2P and a little more beyond (P = 8: 23), for every W.
- "greedy": a list schedule at unit costs, forwards first with a 1F1B-like memory bound (see
  :func:`greedy_ranks`). It wins for M <= P (the paper's figures) and when M is not a multiple of
  max(1, M // 2P).

Where this deviates from the paper: the folded order can hold more activations than 1F1B (up to
twice at M = 2kP, more for odd group sizes) where the paper reports memory close to 1F1B; the
bubble ratio still falls roughly like 1/W as the paper reports.
"""

from __future__ import annotations

import heapq
from collections import deque

from ...errors import ConfigError
from ..action import Action, Kind
from ..deps import dependents_table, needs_table, neighbour_stages, ready
from ..registration import fb_sizes, register
from ..schedule import Schedule, loop_placement
from .interleaved_1f1b import interleaved_order

_COST = {Kind.F: 1, Kind.B: 2, Kind.I: 1, Kind.W: 1}


def wave_placement(pp: int, waves: int) -> tuple[int, ...]:
    """Stage s -> rank, zig-zagging down and up the ranks once per wave."""
    return tuple(_fold(s % (2 * pp), pp) for s in range(2 * pp * waves))


def _fold(virtual_rank: int, pp: int) -> int:
    return virtual_rank if virtual_rank < pp else 2 * pp - 1 - virtual_rank


def unit_start_times(schedule: Schedule) -> dict[tuple[int, str, int], int]:
    """Start time of every action when each rank runs its list in order as soon as what it
    needs (:mod:`..deps`) is there, with F = 1, B = 2, I = W = 1 and free communication.

    A blocked rank waits on the action it needs and is looked at again only when that action
    is done, so the work is linear in the actions (scanning every rank until none moved took
    ~200 us an action at P 24, M 1: one microbatch in flight moves one rank a pass)."""
    s = schedule
    rule = needs_table(*neighbour_stages(s.pipelines, s.n_stages))
    done: dict[tuple[int, str, int], int] = {}
    start: dict[tuple[int, str, int], int] = {}
    clock = [0] * s.pp
    pos = [0] * s.pp
    waiting: dict[tuple[int, str, int], list[int]] = {}
    runnable = deque(range(s.pp))
    while runnable:
        r = runnable.popleft()
        acts = s.ranks[r]
        while pos[r] < len(acts):
            a = acts[pos[r]]
            t, missing = _start_or_wait(rule[(a.stage, a.kind)], a.microbatch, done, clock[r])
            if missing is not None:     # wait for whichever of them comes
                for st, kind in missing:
                    waiting.setdefault((st, kind, a.microbatch), []).append(r)
                break
            start[a.key] = t
            clock[r] = done[a.key] = t + _COST[a.kind]
            pos[r] += 1
            runnable.extend(waiting.pop(a.key, ()))
    stuck = [r for r in range(s.pp) if pos[r] < len(s.ranks[r])]
    if stuck:
        r = stuck[0]
        raise ConfigError(f"hanayo: the order is stuck at rank {r} position {pos[r]} "
                          f"({s.ranks[r][pos[r]]})")
    return start


def _start_or_wait(need, microbatch: int, done: dict, free: int):
    """(when the action starts, None) if each of its needs ran (the rank free at ``free``;
    ``done`` maps an action to its end), else (None, the first need not met)."""
    t = free
    for alternatives in need:
        for st, kind in alternatives:
            end = done.get((st, kind, microbatch))
            if end is not None:
                if end > t:
                    t = end
                break
        else:
            return None, alternatives
    return t, None


def unit_makespan(schedule: Schedule) -> int:
    start = unit_start_times(schedule)
    return max(start[a.key] + _COST[a.kind] for acts in schedule.ranks for a in acts)


def group_size(pp: int, microbatches: int) -> int:
    """PyTorch's interleaved group size on the 2P virtual ranks, or ConfigError."""
    rounds = max(1, microbatches // (2 * pp))
    if microbatches % rounds:
        raise ConfigError(f"--microbatches: hanayo's folded order with --pp {pp} runs "
                          f"microbatches in groups over 2 x pp = {2 * pp} virtual ranks and "
                          f"needs M to be a multiple of max(1, M // {2 * pp}) = {rounds}, "
                          f"got {microbatches}")
    return microbatches // rounds


def folded_ranks(pp: int, microbatches: int, waves: int) -> tuple[tuple[Action, ...], ...]:
    """The "folded-interleaved" order (module docstring)."""
    virtual = 2 * pp
    n = group_size(pp, microbatches)
    total = waves * microbatches
    vranks = tuple(
        tuple(interleaved_order(q, virtual, waves, microbatches, n,
                                min(2 * (virtual - q - 1) + (waves - 1) * n, total)))
        for q in range(virtual))
    vsched = Schedule("hanayo-virtual", virtual, waves, microbatches,
                      loop_placement(virtual, waves), vranks)
    start = unit_start_times(vsched)
    ranks = []
    for r in range(pp):
        merged = [(start[a.key], q, i, a) for q in (r, virtual - 1 - r)
                  for i, a in enumerate(vranks[q])]
        merged.sort(key=lambda x: x[:3])
        ranks.append(tuple(x[3] for x in merged))
    return tuple(ranks)


def greedy_ranks(pp: int, microbatches: int, waves: int) -> tuple[tuple[Action, ...], ...]:
    """Forwards as early as a 1F1B-like memory bound allows, timed with F = 1, B = 2.

    An idle rank alternates: after a backward (or at the start) it runs a ready forward if it has
    one, otherwise a ready backward. Among forwards the oldest microbatch goes first; among
    backwards the oldest microbatch, then the latest stage. A rank starts a new microbatch only
    while it holds fewer than 2PW + r + 1 stage activations (1F1B's P microbatches of a rank's
    layers, plus the warm-up skew of rank r); microbatches it has started always go on, so their
    later stages can pass the bound (by a few activations: 20 for 17 at P=4, W=2). That cannot
    deadlock: microbatches are started on the first down leg only, in rank order, and
    rank P-1 never has to start one it holds elsewhere, so it always drains.
    """
    place = wave_placement(pp, waves)
    rule = needs_table(*neighbour_stages((tuple(range(len(place))),), len(place)))
    # what an action's end may make ready, of the kinds this order runs (F and B)
    woken = {key: tuple(x for x in named if x[1] in (Kind.F, Kind.B))
             for key, named in dependents_table(rule).items()}
    ended: dict[tuple[int, str, int], int] = {}
    limit = [2 * pp * waves + r + 1 for r in range(pp)]
    # ready forwards of microbatches the rank has started (always allowed) and of new ones
    # (allowed while it holds fewer than its limit): heaps, so a step costs log M, not M. A
    # ready forward's class cannot change while it waits: a rank's stages of one microbatch
    # become ready one after the other, so the first one is the one that starts it.
    ready_old: list[list[tuple[int, int]]] = [[] for _ in range(pp)]   # (microbatch, stage)
    ready_new: list[list[tuple[int, int]]] = [[] for _ in range(pp)]
    ready_b: list[list[tuple[int, int]]] = [[] for _ in range(pp)]     # (microbatch, -stage)
    started: list[set[int]] = [set() for _ in range(pp)]
    held = [0] * pp
    busy_until = [0] * pp
    last_kind = [Kind.B] * pp
    orders: list[list[Action]] = [[] for _ in range(pp)]
    events: list[tuple[int, int, str, int]] = []     # (finish time, stage, kind, microbatch)
    ready_new[0] = [(m, 0) for m in range(microbatches)]   # sorted: already a heap
    push, pop = heapq.heappush, heapq.heappop
    remaining = 2 * len(place) * microbatches
    t = 0
    # only a rank that came free or was handed work at t can start something at t (visiting
    # every rank at every event time cost O(P) an action: 24 s at P 2000, M 1); ranks are
    # still visited in order, so the orders are the same
    wake = set(range(pp))
    while remaining:
        while events and events[0][0] <= t:
            end, stage, kind, m = pop(events)
            ended[(stage, kind, m)] = end
            wake.add(place[stage])
            for st, k in woken[(stage, kind)]:
                if ready(rule[(st, k)], m, ended, t):
                    r = place[st]
                    if k == Kind.F:
                        push(ready_old[r] if m in started[r] else ready_new[r], (m, st))
                    else:
                        push(ready_b[r], (m, -st))
                    wake.add(r)
        visit, wake = sorted(wake), set()
        for r in visit:
            if busy_until[r] > t:
                continue
            old, new = ready_old[r], ready_new[r]
            pick = old if old else None
            if new and held[r] < limit[r] and (pick is None or new[0] < pick[0]):
                pick = new
            if pick is not None and (last_kind[r] == Kind.B or not ready_b[r]):
                m, stage = pop(pick)
                kind = Kind.F
                started[r].add(m)
                held[r] += 1
            elif ready_b[r]:
                m, neg = pop(ready_b[r])
                stage, kind = -neg, Kind.B
                held[r] -= 1
            else:
                continue
            busy_until[r] = t + _COST[kind]
            last_kind[r] = kind
            orders[r].append(Action(stage, kind, m))
            push(events, (busy_until[r], stage, kind, m))
            remaining -= 1
        if remaining:
            assert events, "hanayo greedy: no work in flight (cannot happen: see docstring)"
            t = events[0][0]
    return tuple(tuple(o) for o in orders)


def resolve_waves(vpp: int, waves: object) -> int:
    """``waves`` wins over the default --vpp 2; otherwise vpp must be even and gives W = vpp/2."""
    if waves is None:
        if vpp % 2:
            raise ConfigError(f"--vpp: hanayo holds 2 stages per rank per wave, so --vpp must be "
                              f"even (2 x waves), got {vpp}")
        return vpp // 2
    if isinstance(waves, bool) or not isinstance(waves, int) or waves < 1:
        raise ConfigError(f"waves: expected a positive whole number of waves, got {waves!r}")
    if vpp not in (2, 2 * waves):
        raise ConfigError(f"--vpp {vpp} disagrees with waves {waves} (hanayo has vpp = 2 x "
                          f"waves = {2 * waves})")
    return waves


@register("hanayo", summary="Hanayo wave-like pipeline: W waves zig-zag over the ranks "
          "(vpp = 2W stages per rank), full backward, one model copy; option waves",
          formula="none (about (P-1)/(2WM+P-1))", default_vpp=2, variable_vpp=True,
          aliases=("wave", "wave-like"), sizes=fb_sizes,
          # building it walks its actions four times (the virtual order's start times, the
          # greedy order, two candidates' makespans): 30-55 us an action from P 4 to 8000 and
          # M 1 to 500 (was up to 1.4 ms at P 4000, M 1, before its walks woke only the ranks
          # an event touched), and the run's own cost comes on top
          work=lambda pp, m, v, actions: 4 * actions)
def generate(pp: int, microbatches: int, vpp: int = 2, waves: int | None = None,
             **_: object) -> Schedule:
    w = resolve_waves(vpp, waves)
    placement = wave_placement(pp, w)
    builders = [("greedy", greedy_ranks)]
    if microbatches % max(1, microbatches // (2 * pp)) == 0:
        builders.insert(0, ("folded-interleaved", folded_ranks))
    best: tuple[int, Schedule] | None = None
    for name, build in builders:
        cand = Schedule("hanayo", pp, 2 * w, microbatches, placement,
                        build(pp, microbatches, w), meta={"waves": w, "construction": name})
        makespan = unit_makespan(cand)
        if best is None or makespan < best[0]:
            best = (makespan, cand)
    return best[1]
