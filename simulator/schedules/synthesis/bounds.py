"""A provable lower bound on the makespan of any schedule of a :class:`Problem` under a cap K.

Two families, both per rank r, both derived in docs/planning.md:

1. *Heads and tails.* In the one-microbatch graph (F(0) -> ... -> F(S-1) -> I(S-1) -> ... -> I(0),
   each I(s) -> W(s), ``comm`` on every edge between ranks), an action of kind k at stage s
   cannot start before the longest path into it (its head h) and leaves at least the longest
   path out of it (its tail q) after its end. For any set J of the rank's action classes
   (kind, stage) — each class holding M actions of equal cost — the rank cannot start J before
   min h, must run all of J, and after the last of J ends at least min q remains:
   ``makespan >= min h + M * sum(cost) + min q``. All subsets are tried (at most 2^6).
2. *Memory.* A rank whose first forward starts at t0 runs no backward before t0 + delta (a
   microbatch's round trip from its first stage on the rank to its nearest input gradient
   there), and in that window it can only run forwards — at most K of them (each holds an
   activation until its W or B). Symmetrically, after its last forward ends a rank waits at
   least eps for that microbatch's input gradient and has at most the backwards of the K-1
   other held activations to fill the wait. Whatever of delta and eps is not filled is idle:
   ``makespan >= t0 + work + idle_start + idle_end`` (idle_end only when the rank has more than
   K forwards: then its first backward comes before its last forward, so the two idles are
   disjoint).
3. *Slots.* Each activation stage s holds lives at least L(s) = (end of W(s)) - (start of F(s))
   in the one-microbatch graph, inside [t0, makespan], and at most K live at once on a rank:
   ``makespan >= t0 + M * sum over the rank's stages of L(s) / K``.

A fused B = I + W ends no earlier than the I it contains, so the bound holds for schedules that
fuse some or all backwards too.
"""

from __future__ import annotations

from itertools import combinations

from ..deps import F, I, W
from .evaluate import Problem


def heads_tails(prob: Problem) -> tuple[list[list[float]], list[list[float]]]:
    """``head[kind][s]`` and ``tail[kind][s]`` for kinds F, I, W (indexed by their codes) of
    one microbatch."""
    c, S = prob.costs, prob.n_stages
    f, i, w = c.f, c.i, c.w
    fc, bc = prob.fwd_comm, prob.bwd_comm
    hF = [0.0] * S
    for s in range(1, S):
        hF[s] = hF[s - 1] + f[s - 1] + fc[s - 1]
    hI = [0.0] * S
    hI[S - 1] = hF[S - 1] + f[S - 1]
    for s in range(S - 2, -1, -1):
        hI[s] = max(hF[s] + f[s], hI[s + 1] + i[s + 1] + bc[s + 1])
    hW = [hI[s] + i[s] for s in range(S)]
    tI = [0.0] * S
    for s in range(S):
        tI[s] = max(w[s], bc[s] + i[s - 1] + tI[s - 1] if s > 0 else 0.0)
    tF = [0.0] * S
    for s in range(S - 1, -1, -1):
        tF[s] = i[s] + tI[s]
        if s + 1 < S:
            tF[s] = max(tF[s], fc[s] + f[s + 1] + tF[s + 1])
    heads: list[list[float]] = [[]] * 3
    tails: list[list[float]] = [[]] * 3
    heads[F], heads[I], heads[W] = hF, hI, hW
    tails[F], tails[I], tails[W] = tF, tI, [0.0] * S
    return heads, tails


def heads_tails_cache(prob: Problem):
    cached = getattr(prob, "_heads_tails", None)
    if cached is None:
        cached = heads_tails(prob)
        prob._heads_tails = cached
    return cached


def rank_bounds(prob: Problem, cap: int | None = None) -> list[float]:
    """The best bound of each rank (the makespan bound is their maximum)."""
    heads, tails = heads_tails_cache(prob)
    c, M = prob.costs, prob.m
    costs = {F: c.f, I: c.i, W: c.w}
    out = []
    for r in range(prob.pp):
        stages = [s for s in range(prob.n_stages) if prob.placement[s] == r]
        classes = [(heads[k][s], M * costs[k][s], tails[k][s]) for k in (F, I, W) for s in stages]
        best = 0.0
        for n in range(1, len(classes) + 1):
            for sub in combinations(classes, n):
                best = max(best, min(x[0] for x in sub) + sum(x[1] for x in sub)
                           + min(x[2] for x in sub))
        if cap is not None:
            best = max(best, _memory_bound(prob, r, stages, heads, cap))
        out.append(best)
    return out


def _memory_bound(prob: Problem, r: int, stages: list[int], heads, cap: int) -> float:
    c, M = prob.costs, prob.m
    hF, hI = heads[F], heads[I]
    first = min(stages)          # every microbatch enters the rank at its lowest stage
    t0 = hF[first]
    work = M * sum(c.f[s] + c.i[s] + c.w[s] for s in stages)
    n_fwd = M * len(stages)
    fwds = sorted((c.f[s] for s in stages for _ in range(M)), reverse=True)
    delta = min(hI[s] for s in stages) - t0
    idle_start = max(0.0, delta - sum(fwds[:min(cap, n_fwd)]))
    idle_end = 0.0
    if n_fwd > cap:
        eps = min(hI[s] - hF[s] - c.f[s] for s in stages)
        grads = sorted((c.i[s] + c.w[s] for s in stages for _ in range(M)), reverse=True)
        idle_end = max(0.0, eps - sum(grads[:max(cap - 1, 0)]))
    # after the rank's last I only Ws are left (every F is followed by its I), one per held
    # activation; the upstream chain of that I (its tail) must fit after it too
    tails = heads_tails_cache(prob)[1][I]
    ws = sorted((c.w[s] for s in stages for _ in range(M)), reverse=True)
    idle_tail = max(0.0, min(tails[s] for s in stages) - sum(ws[:min(cap, n_fwd)]))
    slots = M * sum(hI[s] + c.i[s] + c.w[s] - hF[s] for s in stages) / cap
    return max(t0 + work + idle_start + idle_end + idle_tail, t0 + slots)


def lower_bound(prob: Problem, cap: int | None = None) -> float:
    """No schedule of ``prob`` whose ranks each hold at most ``cap`` activations ends earlier."""
    return max(rank_bounds(prob, cap))
