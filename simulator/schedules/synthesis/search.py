"""Schedule synthesis: the schedule ``auto``.

For P ranks, M microbatches, one stage per rank (v = 1) or two in V placement (v = 2), per-stage
costs and a cap K on the activations a rank holds, find per-rank orders of F, I, W (B where the
split does not pay) with a small makespan under :mod:`.evaluate`'s model. Three steps:

1. *Construct* (:func:`greedy`): a list scheduler on simulated time in the spirit of the
   zero-bubble paper's heuristic — a free rank runs a ready input-gradient (critical path) or a
   forward while under its cap, and fills what would be idle time with pending Ws. Several
   variants (priority, per-rank warm-up cap, whether a W may delay an arriving I) plus the
   library's hand-made schedules that fit the cap (1F1B, ZB-H1, ZB-H2, ZB-V...) are scored;
   the best, the best of the other family (greedy vs hand-made) and the runner-up start step 2.
   The starts are built one at a time and the first that meets :func:`.bounds.lower_bound` ends
   the search there (it is optimal).
2. *Improve* (:func:`local_search`): move one action of one rank's list to another position,
   mostly actions on the critical path; keep the move when the makespan (then the sum of the
   ranks' finish times) does not get worse, the order does not deadlock and the cap holds.
   Seeded and bounded by an iteration count, never by the clock: same inputs, same schedule.
   Stops early when the makespan meets :func:`.bounds.lower_bound` (then it is optimal).
3. *Fuse*: an I directly followed by its W becomes one B when that does not lengthen the
   makespan (one action instead of two in the runtime).
"""

from __future__ import annotations

import heapq
import random
from dataclasses import dataclass
from typing import Iterator, Sequence

from ...errors import ConfigError, PipesimError
from ..deps import B, F, I, W
from ..registration import LIBRARY, ScheduleSpec
from ..schedule import Schedule, loop_placement, v_placement
from .bounds import heads_tails, lower_bound
from .costs import StageCosts, costs_option
from .evaluate import Problem

DEFAULT_ITERATIONS = 2000   # moves per starting point (three starts)
# moves x actions per start: caps the moves of big problems (each move re-times every action);
# 1.6M keeps the full 2000 moves on every case benchmarks/bench_synthesis.py runs (the largest:
# P = 8, M = 16 in V placement, 768 actions) and gives P = 32, M = 256 65 moves (about 1 s each
# start on 2 cores)
MOVE_BUDGET = 1_600_000
_INF = float("inf")


@dataclass(frozen=True)
class Policy:
    backward_first: bool = True   # a ready I before a ready F
    warm_extra: int | None = None  # rank r holds at most min(K, slope(P-r) + warm_extra); None: K
    w_guard: bool = False          # idle instead of starting a W an I would wait behind
    slope: int = 1                 # the per-rank cap is min(K, slope * (P - r) + warm_extra)
    warm_only: bool = False        # that cap holds only until the rank's first backward
    depth_first: bool = False      # among ready forwards, the later stage first (V: chunk 1)
    spare_one: bool = False        # V: a new microbatch needs one spare slot, not all of its own
    w_early: int = 0               # with held >= K - w_early, a pending W goes before a forward
    by_tail: bool = False          # a ready I or F by the longer remaining chain (HLFET)
    loose: bool = False            # V: no spare slot needed while a held microbatch has run
                                   # all its forwards on the rank (its Ws will free one)


def search_moves(n_actions: int, iterations: int) -> int:
    """Local-search moves per start: ``iterations``, fewer where the problem is big."""
    return max(0, min(iterations, MOVE_BUDGET // n_actions))


def min_cap(vpp: int) -> int:
    return 2 if vpp == 2 else 1


def problem_for(pp: int, microbatches: int, vpp: int, costs: StageCosts | None) -> Problem:
    placement = v_placement(pp) if vpp == 2 else loop_placement(pp, 1)
    return Problem(pp, microbatches, costs or StageCosts.unit(len(placement)), placement)


# -- step 1: construction ------------------------------------------------------------------

# One long function on purpose: greedy and its nested pick are the hot loop of synthesis
# (cProfile of `pipesim schedule auto --pp 8 -m 32 --vpp 2` at 5eef7f3: greedy 14.2 s of
# synthesize's 19.0 s cumulative, pick 10.9 s over 267,664 calls). Split into methods, every
# state read in pick becomes an attribute load; as closures over locals it is not.
def greedy(prob: Problem, cap: int, policy: Policy = Policy()) -> list[list[int]] | None:
    """Per-rank orders (action ids) from a list scheduler on simulated time; None if stuck.

    Time advances from event to event (a rank finishing, an input arriving). At each, every
    idle rank, lowest first, picks a ready action: an I (the one with the longest tail, then the
    lowest microbatch), else a forward it has room for (its microbatches in order; a microbatch
    entering a rank reserves a slot for each of its stages there, so V placement cannot fill a
    rank with chunk-0 activations whose chunk-1 forwards then find no room), else its oldest
    pending W. ``policy`` varies the priorities.
    """
    P, S, M = prob.pp, prob.n_stages, prob.m
    SM = S * M
    i_code, w_code = I * SM, W * SM   # the first I and W codes (an F's code is its (s, m))
    cost, place = prob.cost, prob.placement
    fwd_comm, bwd_comm = prob.fwd_comm, prob.bwd_comm
    _, tails = heads_tails(prob)
    stages_of = [[s for s in range(S) if place[s] == r] for r in range(P)]
    entry = [min(st) for st in stages_of]
    width = [len(st) for st in stages_of]
    caps = [cap if policy.warm_extra is None
            else max(min(cap, policy.slope * (P - r) + policy.warm_extra), width[r])
            for r in range(P)]
    f_end = [-1.0] * SM
    next_f = [0] * S
    # the input gradients a rank may run, as two heaps: those whose inputs arrive later
    # (ready time, F order, id) and those whose inputs are there ((-tail, microbatch, F order),
    # id); the F order breaks ties as the order the forwards were issued in
    waiting: list[list[tuple[float, int, int]]] = [[] for _ in range(P)]
    ready_i: list[list[tuple[tuple[float, int, int], int]]] = [[] for _ in range(P)]
    f_order = [0] * SM
    issued = 0
    i_tail = tails[I]
    pend_w: list[list[int]] = [[] for _ in range(P)]
    reserved = [0] * P
    held = [0] * P
    through = [0] * P            # held microbatches whose forwards on the rank are all done
    f_count: dict[tuple[int, int], int] = {}
    w_count: dict[tuple[int, int], int] = {}
    started = [False] * P       # has the rank run a backward yet
    free = [0.0] * P
    orders: list[list[int]] = [[] for _ in range(P)]
    total, done = 3 * SM, 0
    events: list[tuple[float, int]] = []   # (time, the rank it may wake)
    now = 0.0

    def f_ready(s: int) -> float:
        m = next_f[s]
        if s == 0:
            return 0.0
        e = f_end[(s - 1) * M + m]
        return _INF if e < 0 else e + fwd_comm[s - 1]

    def pick(r: int) -> int:
        wait, ready = waiting[r], ready_i[r]
        while wait and wait[0][0] <= now:
            _, order, sm = heapq.heappop(wait)
            heapq.heappush(ready, ((-i_tail[sm // M], sm % M, order), sm))
        best_i = ready[0][1] if ready else -1
        arrival = wait[0][0] if wait else _INF
        best_f, best_f_key = -1, None
        blocked = -1.0      # longest tail of a ready forward the cap keeps out
        for s in stages_of[r]:
            if next_f[s] >= M:
                continue
            limit = cap if policy.warm_only and started[r] else caps[r]
            if policy.loose:
                need = 2 if s == entry[r] and width[r] > 1 and not through[r] else 1
                room = held[r] + need <= limit
            elif policy.spare_one:
                room = held[r] + (2 if s == entry[r] and width[r] > 1 else 1) <= limit
            else:
                room = reserved[r] + (width[r] if s == entry[r] else 0) <= limit
            if not room:
                if policy.by_tail and f_ready(s) <= now:
                    blocked = max(blocked, tails[F][s])
                continue
            t = f_ready(s)
            if t <= now:
                key = (tails[F][s] if policy.depth_first else -tails[F][s], next_f[s])
                if best_f_key is None or key < best_f_key:
                    best_f, best_f_key = s, key
        if policy.by_tail:
            tail_i = i_tail[best_i // M] if best_i >= 0 else -1.0
            if best_f >= 0 and tails[F][best_f] > tail_i:
                return best_f * M + next_f[best_f]
            if blocked > tail_i and pend_w[r]:      # make room for the more critical forward
                return w_code + pend_w[r][0]
            if best_i >= 0:
                return i_code + best_i
        if best_i >= 0 and (policy.backward_first or best_f < 0):
            return i_code + best_i
        if best_f >= 0 and pend_w[r] and policy.w_early and held[r] >= cap - policy.w_early:
            return w_code + pend_w[r][0]
        if best_f >= 0:
            return best_f * M + next_f[best_f]
        if pend_w[r]:
            sm = pend_w[r][0]
            if policy.w_guard and arrival < now + cost[w_code + sm]:
                return -1
            return w_code + sm
        return -1

    # A rank's pick changes only when its own state does or an input it waits for arrives, so
    # at each event time only the ranks an event names are polled (ascending, as a pass over
    # all of them would reach them), plus, under w_guard, the idle ranks holding a W back: their
    # choice moves with the clock. An action of zero cost (or a zero comm) wakes a rank at the
    # same time: a higher one later in this pass, a lower one (or itself) in the next pass.
    guarded: set[int] = set()
    passing = list(range(P))
    while True:
        while passing:
            queue, queued, again = passing, set(passing), set()
            while queue:
                r = heapq.heappop(queue)
                if free[r] > now:
                    continue
                x = pick(r)
                if x < 0:
                    if policy.w_guard and pend_w[r]:
                        guarded.add(r)
                    continue
                guarded.discard(r)
                kind, sm = divmod(x, SM)
                t = now + cost[x]
                free[r] = t
                orders[r].append(x)
                done += 1
                wake = [(t, r)]
                s = sm // M
                if kind == F:
                    next_f[s] += 1
                    if s == entry[r]:
                        reserved[r] += width[r]
                    held[r] += 1
                    key = (r, sm % M)
                    f_count[key] = f_count.get(key, 0) + 1
                    if f_count[key] == width[r]:
                        through[r] += 1
                    f_end[sm] = t
                    f_order[sm] = issued
                    issued += 1
                    if s + 1 < S:
                        wake.append((t + fwd_comm[s], place[s + 1]))
                    else:   # the last stage's input gradient needs only this forward
                        heapq.heappush(waiting[r], (t, f_order[sm], sm))
                elif kind == I:
                    heapq.heappop(ready_i[r])   # pick returns the top of the ready heap
                    started[r] = True
                    pend_w[r].append(sm)
                    if s > 0:
                        t_in = t + bwd_comm[s]
                        wake.append((t_in, place[s - 1]))
                        up = sm - M      # the previous stage's input gradient can now be timed
                        fe = f_end[up]
                        heapq.heappush(waiting[place[s - 1]],
                                       (fe if fe > t_in else t_in, f_order[up], up))
                else:
                    pend_w[r].remove(sm)
                    reserved[r] -= 1
                    held[r] -= 1
                    key = (r, sm % M)
                    w_count[key] = w_count.get(key, 0) + 1
                    if w_count[key] == width[r]:   # its last W: it holds nothing here now
                        through[r] -= 1
                for t_w, r_w in wake:
                    if t_w > now:
                        heapq.heappush(events, (t_w, r_w))
                    elif r_w > r and r_w not in queued:
                        queued.add(r_w)
                        heapq.heappush(queue, r_w)
                    else:
                        again.add(r_w)
            passing = sorted(again)
        if done == total:
            break
        if not events:
            return None
        now = events[0][0]
        woken = set(guarded)
        while events and events[0][0] <= now:
            woken.add(heapq.heappop(events)[1])
        passing = sorted(woken)
    return orders


def meets(makespan: float, bound: float) -> bool:
    """Whether ``makespan`` is at the lower bound: within 1e-9 of it, relatively (the two are
    sums of the same costs in different orders, which round differently)."""
    return makespan <= bound + 1e-9 * abs(bound)


# -- step 2: local search ------------------------------------------------------------------

def _critical(prob: Problem, orders: Sequence[Sequence[int]],
              end: list[float]) -> list[tuple[int, int]]:
    """(rank, position) of the actions on one longest path, from the last back to the first."""
    M = prob.m
    none = 4 * prob.n_stages * M
    cost = prob.cost
    one, one_gap, grad_i, grad_b, grad_gap = prob.rule
    pos = {}
    for r, order in enumerate(orders):
        for p, x in enumerate(order):
            pos[x] = (r, p)
    x = max(range(len(end)), key=lambda k: end[k])
    path = []
    while True:
        r, p = pos[x]
        path.append((r, p))
        start = end[x] - cost[x]
        if start <= 0:
            break
        if p > 0 and end[orders[r][p - 1]] == start:
            x = orders[r][p - 1]
            continue
        row, mb = divmod(x, M)
        nxt = None
        if one[row] != none and end[one[row] + mb] + one_gap[row] == start:
            nxt = one[row] + mb
        elif grad_i[row] != none:   # the input gradient: the next stage's I, or its B
            g = grad_i[row] + mb if grad_i[row] + mb in pos else grad_b[row] + mb
            if end[g] + grad_gap[row] == start:
                nxt = g
        if nxt is None:
            break
        x = nxt
    return path


def _score(prob: Problem, orders) -> tuple[float, float] | None:
    end = prob.times(orders)
    if end is None:
        return None
    finish = [end[o[-1]] for o in orders if o]
    return (max(finish), sum(finish))


def local_search(prob: Problem, orders: list[list[int]], cap: int, iterations: int,
                 seed: int = 0, bound: float | None = None) -> list[list[int]]:
    """Improve ``orders`` by single-action moves; ``iterations`` moves tried, seeded."""
    rng = random.Random(seed)
    best = [list(o) for o in orders]
    best_score = _score(prob, best)
    assert best_score is not None
    cur, cur_score = [list(o) for o in best], best_score
    end = prob.times(cur)
    path = _critical(prob, cur, end)
    n_ranks = len(cur)
    for _ in range(iterations):
        if bound is not None and meets(best_score[0], bound):
            break
        if path and rng.random() < 0.7:
            r, p = path[rng.randrange(len(path))]
        else:
            r = rng.randrange(n_ranks)
            p = rng.randrange(len(cur[r]))
        order = cur[r]
        span = max(2, min(len(order) // 2, 12))
        q = p + rng.choice([d for d in range(-span, span + 1) if d])
        if not 0 <= q < len(order):
            continue
        x = order.pop(p)
        order.insert(q, x)
        ok = prob.peak_inflight(order) <= cap
        score = _score(prob, cur) if ok else None
        if score is not None and score <= cur_score:
            cur_score = score
            if score < best_score:
                best, best_score = [list(o) for o in cur], score
            end = prob.times(cur)
            path = _critical(prob, cur, end)
        else:
            order.pop(q)
            order.insert(p, x)
    return best


# -- step 3: fuse I + W into B -------------------------------------------------------------

def _splice(prev: list[int], nxt: list[int], before: int, later: int, first: int,
            last: int) -> None:
    """Put ``first`` .. ``last`` between ``before`` and ``later`` in a rank's linked order
    (-1: none there)."""
    if before >= 0:
        nxt[before] = first
    if later >= 0:
        prev[later] = last


def fuse(prob: Problem, orders: list[list[int]]) -> list[list[int]]:
    """Replace ``I(s, m) W(s, m)`` (adjacent) by ``B(s, m)`` wherever the makespan stays.

    The pairs are tried in rank order, each on the schedule left by the ones before, and a
    fused pair is kept only when the makespan is the same float as before. A trial re-times
    only the actions downstream of the pair (a fused B ends when its W did, to the bit, and
    hands its gradient on then), so trying every pair costs about one evaluation in all, not
    one each.
    """
    S, M = prob.n_stages, prob.m
    SM = S * M
    w_code, b_code = W * SM, B * SM           # the first W and B codes
    to_i, to_w = (B - I) * SM, (B - W) * SM    # a B's code to its I's and its W's
    i_to_w = (W - I) * SM
    cost = prob.cost
    end = prob.times(orders)
    assert end is not None
    target = max(end)
    n = 4 * SM
    prev, nxt = [-1] * n, [-1] * n
    present = [False] * n
    grad = [-1] * SM                 # the I or B that produces (s, m)'s input gradient
    for order in orders:
        for p, x in enumerate(order):
            present[x] = True
            if p:
                prev[x], nxt[order[p - 1]] = order[p - 1], x
            if x // SM in (I, B):
                grad[x % SM] = x
    at_target = sum(1 for x in range(n) if present[x] and end[x] == target)

    one, one_gap, grad_i, grad_b, grad_gap = prob.rule
    none, b_first = n, b_code
    end += [0.0] * M        # the row "none"'s codes, as in Problem.times

    def finish(x: int) -> float:      # as Problem.times times an action
        row, mb = divmod(x, M)
        t = end[prev[x]] if prev[x] >= 0 else 0.0
        d = end[one[row] + mb] + one_gap[row]
        if d > t:
            t = d
        g = grad_i[row]
        if g != none:                 # the input gradient: the next stage's I, or its B
            g += mb
            d = end[g if present[g] else grad_b[row] + mb] + grad_gap[row]
            if d > t:
                t = d
        if x >= b_first:
            return t + cost[x - to_i] + cost[x - to_w]
        return t + cost[x]

    def after(x: int) -> list[int]:   # the actions whose start reads x's end
        kind, sm = divmod(x, SM)
        s = sm // M
        out = [nxt[x]] if nxt[x] >= 0 else []
        if kind == F:
            if s + 1 < S:
                out.append(sm + M)
            out.append(grad[sm])
        elif kind != W:
            if present[w_code + sm]:
                out.append(w_code + sm)
            if s > 0:
                out.append(grad[sm - M])
        return out

    # the latest each action may end with the makespan still at most the target: a trial stops
    # as soon as one ends later (the rest of its ripple could only confirm that). Fusing only
    # adds work to a path, so these stay upper bounds after a pair is kept; ``slack`` (far above
    # a float sum's rounding, far below any cost) keeps a rounding from ever deciding.
    latest = _latest_ends(prob, present, after, target)
    slack = 1e-9 * target
    heappop, heappush = heapq.heappop, heapq.heappush
    retimed = 0      # by rejected trials since ``latest`` was derived: past one schedule's
                     # worth, derive it again (the kept pairs since have tightened it)
    n_actions = sum(map(len, orders))
    fused: set[int] = set()
    for order in orders:
        p = 0
        while p + 1 < len(order):
            x, y = order[p], order[p + 1]
            if x // SM != I or y != x + i_to_w:
                p += 1
                continue
            sm = x % SM
            bx = b_code + sm
            if retimed > n_actions:
                latest, retimed = _latest_ends(prob, present, after, target), 0
            # fuse: B takes x's place before and y's place after, and hands on the gradient
            before, later = prev[x], nxt[y]
            prev[bx], nxt[bx] = before, later
            _splice(prev, nxt, before, later, bx, bx)
            present[x] = present[y] = False
            present[bx] = True
            grad[sm] = bx
            count = at_target - (end[x] == target) - (end[y] == target)
            undo = [(bx, end[bx])]
            end[bx] = finish(bx)
            count += end[bx] == target
            over = end[bx] > target or end[bx] > latest[y] + slack   # B's successors hold W's
            # in time order (by the end each had before), so an action is re-timed once
            # whichever of its inputs moved
            work = [(end[z], z) for z in after(bx)]
            heapq.heapify(work)
            queued = {z for _, z in work}
            # finish() and after() inlined: this loop re-times about 30 actions a pair (an
            # accepted pair's delay ripples down its stage), and inlined `-s auto -m 10000` on
            # gpt-24l takes 0.92x the wall time (2.28 against 2.61 s, 5 interleaved pairs)
            while work and not over:
                z = heappop(work)[1]
                queued.discard(z)
                row, mb = divmod(z, M)
                pz = prev[z]
                t = end[pz] if pz >= 0 else 0.0
                d = end[one[row] + mb] + one_gap[row]
                if d > t:
                    t = d
                g = grad_i[row]
                if g != none:
                    g += mb
                    d = end[g if present[g] else grad_b[row] + mb] + grad_gap[row]
                    if d > t:
                        t = d
                t = t + cost[z - to_i] + cost[z - to_w] if z >= b_first else t + cost[z]
                old_end = end[z]
                if t == old_end:
                    continue
                undo.append((z, old_end))
                count += (t == target) - (old_end == target)
                end[z] = t
                if t > target or t > latest[z] + slack:   # then some action after it will too
                    over = True
                    break
                kind, sm2 = divmod(z, SM)
                u = nxt[z]
                if u >= 0 and u not in queued:
                    queued.add(u)
                    heappush(work, (end[u], u))
                if kind == F:
                    if sm2 // M + 1 < S:
                        u = sm2 + M
                        if u not in queued:
                            queued.add(u)
                            heappush(work, (end[u], u))
                    u = grad[sm2]
                    if u not in queued:
                        queued.add(u)
                        heappush(work, (end[u], u))
                elif kind != W:
                    u = w_code + sm2
                    if present[u] and u not in queued:
                        queued.add(u)
                        heappush(work, (end[u], u))
                    if sm2 >= M:
                        u = grad[sm2 - M]
                        if u not in queued:
                            queued.add(u)
                            heappush(work, (end[u], u))
            if not over and count > 0:
                at_target = count
                fused.add(x)
                p += 2
                continue
            retimed += len(undo)
            for z, t in reversed(undo):      # the makespan moved: put the pair back
                end[z] = t
            _splice(prev, nxt, before, later, x, y)
            present[x] = present[y] = True
            present[bx] = False
            grad[sm] = x
            p += 1
    out = []
    for order in orders:
        o, p = [], 0
        while p < len(order):
            x = order[p]
            if x in fused:
                o.append(b_code + x % SM)
                p += 2
            else:
                o.append(x)
                p += 1
        out.append(o)
    return out


def _latest_ends(prob: Problem, present: list[bool], after, target: float) -> list[float]:
    """Per action, the latest it may end with every path from it still ending by ``target``
    (inf for absent ids): the reverse longest path, in a reverse topological order (Kahn's)."""
    SM, M = prob.n_stages * prob.m, prob.m
    to_i, to_w = (B - I) * SM, (B - W) * SM
    cost, place, comm = prob.cost, prob.placement, prob.costs.comm
    n = 4 * SM
    latest = [_INF] * n
    succ = [after(x) if present[x] else [] for x in range(n)]
    waiting = [len(us) for us in succ]
    preds: list[list[int]] = [[] for _ in range(n)]
    for x in range(n):
        for u in succ[x]:
            preds[u].append(x)
    todo = [x for x in range(n) if present[x] and not waiting[x]]
    while todo:
        u = todo.pop()
        if latest[u] == _INF:
            latest[u] = target
        kind, sm = divmod(u, SM)
        dur = cost[u - to_i] + cost[u - to_w] if kind == B else cost[u]
        start = latest[u] - dur
        for x in preds[u]:
            gap = comm if place[(x % SM) // M] != place[sm // M] else 0.0
            if start - gap < latest[x]:
                latest[x] = start - gap
            waiting[x] -= 1
            if not waiting[x]:
                todo.append(x)
    return latest


# -- the whole search and the schedule `auto` ----------------------------------------------

# ZB-H1's warm-up (P - r forwards on rank r, then a ready forward before a ready I): with unit
# costs the one variant that meets the lower bound at P = 4..32, M = 4P..8P (measured on this
# module), so it goes first and the search usually stops there
ZB_H1_LIKE = Policy(False, 0, False, 1, True)
POLICIES = (ZB_H1_LIKE,) + tuple(p for p in tuple(
    Policy(bf, we, wg) for bf in (True, False) for we in (None, 0, 1, 2, 4)
    for wg in (False, True)) + tuple(
    Policy(bf, we, False, 2) for bf in (True, False) for we in (-2, -1, 0, 1, 2)) + tuple(
    Policy(bf, we, False, sl, True) for bf in (True, False) for sl in (1, 2)
    for we in (-2, -1, 0, 1, 2, 4)) if p != ZB_H1_LIKE)
V_POLICIES = tuple(
    Policy(True, we, False, sl, wo, df, adm == "spare", early, bt, adm == "loose")
    for bt in (True, False) for df in (True, False) for early in (0, 2)
    for we, sl, wo in ((None, 1, False), (0, 2, True), (0, 3, True), (1, 2, True))
    for adm in ("reserve", "spare", "loose"))


@dataclass(frozen=True)
class Synthesis:
    schedule: Schedule
    makespan: float
    lower_bound: float
    start: str                      # what the search started from ("greedy", "zb-h1", ...)
    start_makespan: float


def hand_made() -> list[ScheduleSpec]:
    """The library's schedules that need no costs, the search's starting points."""
    from .. import library  # noqa: F401  (registers them, whoever imported the search first)

    return [spec for spec in LIBRARY.values() if not spec.needs_costs]


def seeds(prob: Problem, cap: int) -> Iterator[tuple[str, list[list[int]]]]:
    """Starting orders, built as they are asked for: every greedy variant and every registered
    schedule that fits."""
    seen = set()
    for policy in (V_POLICIES if prob.vpp == 2 else POLICIES):
        orders = greedy(prob, cap, policy)
        if orders is not None:
            key = tuple(map(tuple, orders))
            if key not in seen:
                seen.add(key)
                yield "greedy", orders
    for spec in sorted(hand_made(), key=lambda s: s.name):
        name = spec.name
        try:
            sched = spec.generate(prob.pp, prob.m, prob.vpp)
        except PipesimError:   # a schedule that does not exist at this size is not a seed
            continue
        if (sched.placement != prob.placement or len(sched.pipelines) != 1 or not sched.flush
                or sched.microbatches != prob.m
                or sched.has_overlap):
            continue
        orders = prob.encode_ranks(sched.ranks)
        if max(prob.peak_inflight(o) for o in orders) <= cap and prob.times(orders) is not None:
            yield name, orders


def synthesize(pp: int, microbatches: int, vpp: int = 1, costs: StageCosts | None = None,
               cap: int | None = None, *, seed: int = 0,
               iterations: int = DEFAULT_ITERATIONS, max_evaluations: int = 0) -> Synthesis:
    """The best schedule found for these inputs (deterministic: same inputs, same schedule).

    ``max_evaluations`` (0: no limit) bounds the search past its first start: a first start that
    meets the lower bound ends the search (its cost is the start's and the fusing step's), one
    that does not leaves the whole search to run, refused then when it is above the limit
    (:func:`check_synthesis` refused beforehand what the first start alone would exceed)."""
    if vpp not in (1, 2):
        raise ConfigError(f"--vpp: auto builds one stage per rank (1) or two in V placement "
                          f"(2), got {vpp}")
    k = pp * vpp if cap is None else cap   # 1F1B's memory, in chunk activations
    lowest = min_cap(vpp)
    if k < lowest:
        what = "1 activation per rank" if lowest == 1 else "2 activations per rank in V mode " \
                                                            "(--vpp 2)"
        raise ConfigError(f"--max-in-flight: expected at least {what}, got {k}")
    prob = problem_for(pp, microbatches, vpp, costs)
    bound = lower_bound(prob, k)
    scored = []
    for n, (name, orders) in enumerate(seeds(prob, k)):
        score = _score(prob, orders)
        if score is not None:
            scored.append((score, n, name, orders))
            if meets(score[0], bound):   # optimal: no other start can end earlier
                break
        if n == 0 and max_evaluations > 0:   # the rest of the search is to run: its budget
            _refuse_above(pp, microbatches, vpp, iterations, max_evaluations, costs is None,
                          " and its first start does not meet the lower bound")
    scored.sort(key=lambda t: (t[0], t[1]))
    (start_score, _, start_name, start_orders) = scored[0]
    best = start_orders
    if not meets(start_score[0], bound) and iterations > 0:
        # improve the best start and the best of the other family (greedy vs hand-made):
        # the search from the second-best often ends lower than from the best
        first = scored[0]
        other = next((t for t in scored[1:] if (t[2] == "greedy") != (first[2] == "greedy")),
                     scored[1] if len(scored) > 1 else None)
        tries = [first] + ([other] if other is not None else [])
        tries += [t for t in scored[1:3] if t is not other][:3 - len(tries)]
        # each move re-evaluates every action: big problems get fewer moves (still a count)
        moves = search_moves(3 * prob.n_stages * prob.m, iterations)
        results = []
        for j, (_, _, _, orders) in enumerate(tries):
            res = local_search(prob, orders, k, moves, seed + j, bound)
            results.append((_score(prob, res), j, res))
        best = min(results, key=lambda t: (t[0], t[1]))[2]
    best = fuse(prob, best)
    ranks = tuple(tuple(prob.codec.decode(x) for x in o) for o in best)
    sched = Schedule("auto", pp, vpp, microbatches, prob.placement, ranks,
                     meta={"max_in_flight": k, "makespan": prob.makespan(best),
                           "lower_bound": bound})
    return Synthesis(sched, prob.makespan(best), bound, start_name, start_score[0])


# The most action evaluations a synthesis may take unless -O max_evaluations=N says otherwise:
# about 10 s on a 2-core machine (docs/performance.md), like the engine's --max-actions.
DEFAULT_MAX_EVALUATIONS = 30_000_000


def synthesis_work(pp: int, microbatches: int, vpp: int, iterations: int,
                   unit_costs: bool = False) -> int:
    """Action evaluations a synthesis of this size makes when no start meets the lower bound
    (one that does stops it at once), from the parameters alone, in units of one action timed by
    :meth:`.evaluate.Problem.times` (3 x stages x microbatches actions): every greedy start
    (:func:`seeds` runs every policy, 54 of them, 96 in V mode) costs
    :data:`GREEDY_EVALUATIONS` per action (:data:`GREEDY_EVALUATIONS_UNIT` with unit costs),
    each local-search move :data:`MOVE_EVALUATIONS` per action (three starts,
    :func:`search_moves` moves each), the fusing step :data:`FUSE_EVALUATIONS` x microbatches
    per action, and building the hand-made starts their engine actions."""
    n_stages = pp * vpp
    actions = 3 * n_stages * microbatches
    moves = search_moves(actions, iterations) if iterations > 0 else 0
    greedy, move, fuse_ = (GREEDY_EVALUATIONS_UNIT, MOVE_EVALUATIONS_UNIT, FUSE_EVALUATIONS_UNIT) \
        if unit_costs else (GREEDY_EVALUATIONS, MOVE_EVALUATIONS, FUSE_EVALUATIONS)
    starts = len(V_POLICIES if vpp == 2 else POLICIES) * greedy
    per_action = starts + 3 * moves * move + fuse_ * microbatches
    return round(actions * per_action) + SEED_EVALUATIONS_PER_ACTION * _seed_work(pp, microbatches,
                                                                                 vpp)


# The costs of the steps, in action evaluations per action, measured with
# benchmarks/bench_synthesis_cost.py (CPU time of each step over the time of one evaluation of
# the same problem, P = 8..32, M = 16..256, v = 1 and 2, unit and made-up stage costs;
# 2026-12-01, benchmarks/results/2026-12-01-auto-at-scale.md): a greedy start 8.5-9.7 (unit
# costs 6.3-6.5), whatever P; a local-search move 0.9-1.5 (one evaluation, two and the critical
# path when kept; unit costs 0.47-0.57: most moves break the cap and are not timed); fusing
# 0.45-1.2 x M (a kept pair re-times what its delayed gradient reaches; unit costs 0.2-0.3 x M);
# building a hand-made start 1.4-4.3 per engine action ScheduleSpec.work_of counts
GREEDY_EVALUATIONS = 9.5
GREEDY_EVALUATIONS_UNIT = 6.5
MOVE_EVALUATIONS = 1.2
MOVE_EVALUATIONS_UNIT = 0.55
FUSE_EVALUATIONS = 1.0
FUSE_EVALUATIONS_UNIT = 0.25
SEED_EVALUATIONS_PER_ACTION = 4
# Fusing a first start that meets the bound, measured the same way (2026-12-01,
# benchmarks/bench_synthesis_cost.py 16:48:1, 8:256:1 and 32:256:1 with made-up costs: 65, 67
# and 215 evaluations an action, 4-8 x P; unit costs at P = 8..32, M = 64..1024, v = 1 and 2:
# 7.5-15.4, whatever P and M)
FUSE_FIRST_EVALUATIONS_PER_RANK = 8.0
FUSE_FIRST_EVALUATIONS_UNIT = 11.0


# an engine action's time in action evaluations of the search (14 us against ~0.3 us)
EVALUATIONS_PER_ACTION = 40


def _seed_work(pp: int, microbatches: int, vpp: int) -> int:
    """What building the hand-made schedules tried as starting points costs, in engine
    actions (:meth:`~simulator.schedules.registration.ScheduleSpec.work_of`): ZB-H2 or Hanayo at
    P = 1000 cost more than the whole search."""
    total = 0
    for spec in hand_made():
        if not spec.variable_vpp and spec.default_vpp != vpp:
            continue   # refused at once by its generator
        _, actions = spec.size_of(pp, microbatches, vpp)
        total += spec.work_of(pp, microbatches, vpp, actions)
    return total


def first_start_work(pp: int, microbatches: int, vpp: int, unit_costs: bool = False) -> int:
    """Action evaluations of a synthesis whose first start meets the lower bound (then it
    stops): that greedy start and the fusing step, in the units of :func:`synthesis_work`.
    Fusing a greedy start at the bound re-times little: a kept pair's delayed gradient meets
    slack within a few ranks (:data:`FUSE_FIRST_EVALUATIONS_PER_RANK`), never more than the
    worst case's M evaluations an action."""
    if unit_costs:
        greedy = GREEDY_EVALUATIONS_UNIT
        fuse_ = min(FUSE_EVALUATIONS_UNIT * microbatches, FUSE_FIRST_EVALUATIONS_UNIT)
    else:
        greedy = GREEDY_EVALUATIONS
        fuse_ = min(FUSE_EVALUATIONS * microbatches, FUSE_FIRST_EVALUATIONS_PER_RANK * pp)
    return round(3 * pp * vpp * microbatches * (greedy + fuse_))


def check_synthesis(pp: int, microbatches: int, vpp: int, iterations: int,
                    limit: int | None, unit_costs: bool = False) -> int:
    """Refuse, before any of it is done, a synthesis whose first start alone would take more
    than ``limit`` action evaluations (default :data:`DEFAULT_MAX_EVALUATIONS`, 0 = none), and
    return the limit the rest of it is held to (0: none needed, the whole search fits): the
    search stops at a first start that meets the lower bound, and checks the rest only when
    that start does not (:func:`synthesize`)."""
    limit = DEFAULT_MAX_EVALUATIONS if limit is None else limit
    if limit <= 0 or min(pp, microbatches, vpp) < 1:
        return 0
    if synthesis_work(pp, microbatches, vpp, iterations, unit_costs) <= limit:
        return 0
    if first_start_work(pp, microbatches, vpp, unit_costs) > limit:
        _refuse_above(pp, microbatches, vpp, iterations, limit, unit_costs)
    return limit


def _refuse_above(pp: int, microbatches: int, vpp: int, iterations: int, limit: int,
                  unit_costs: bool, why: str = "") -> None:
    work = synthesis_work(pp, microbatches, vpp, iterations, unit_costs)
    if work > limit:
        raise ConfigError(
            f"-O max_evaluations: synthesizing auto with pp {pp}, vpp {vpp}, {microbatches} "
            f"microbatches{why} takes about {work:,} action evaluations, above the limit of "
            f"{limit:,} (about {_seconds(limit)} s); pass -O max_evaluations={work} (or 0 for no "
            "limit) to synthesize it anyway")


# one action evaluation: 0.29-0.40 us measured on this kind of machine (docs/performance.md)
EVALUATION_S = 1 / 3e6


def _seconds(evaluations: int) -> str:
    s = evaluations * EVALUATION_S
    return f"{s:.0f}" if s >= 10 else f"{s:.2g}"


def generate_auto(pp: int, microbatches: int, vpp: int = 1, max_in_flight: int | None = None,
                  stage_costs: StageCosts | str | None = None, seed: int = 0,
                  iterations: int = DEFAULT_ITERATIONS,
                  max_evaluations: int | None = None) -> Schedule:
    """Registry entry: ``stage_costs`` is a :class:`StageCosts`, a costs.yaml path or None
    (unit costs); ``max_evaluations`` caps the synthesis' work (see :func:`check_synthesis`)."""
    iterations = _int_option(iterations, "iterations")
    rest = 0
    if vpp in (1, 2):
        rest = check_synthesis(pp, microbatches, vpp, iterations,
                               None if max_evaluations is None
                               else _int_option(max_evaluations, "max_evaluations"),
                               unit_costs=stage_costs is None)
    stage_costs = costs_option(stage_costs, pp * vpp, "auto",
                               f"--pp {pp}" + (f" x --vpp {vpp}" if vpp > 1 else ""))
    if max_in_flight is not None:
        max_in_flight = _int_option(max_in_flight, "--max-in-flight")
    return synthesize(pp, microbatches, vpp, stage_costs, max_in_flight,
                      seed=_int_option(seed, "seed"), iterations=iterations,
                      max_evaluations=rest).schedule


def _int_option(value: object, option: str) -> int:
    try:
        return int(str(value), 10) if not isinstance(value, int) else value
    except ValueError:
        raise ConfigError(f"{option}: expected an integer, found {value!r}") from None
