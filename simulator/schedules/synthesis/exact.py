"""An exact MILP for small problems: the optimal makespan under the cap, or a proof that none
is below a target. Optional — needs SciPy (its ``milp`` is the HiGHS solver); nothing else in
pipesim imports it. The benchmark uses it to tell a loose lower bound from a weak schedule.

Model (disjunctive, big-M): a start time per action, every dependency of :mod:`.evaluate`
(``comm`` between ranks), for each pair of actions of one rank a binary "a before b", and for
each forward the cap: 1 + (forwards of the rank before it) - (Ws/Bs of the rank before it) <= K.
Every backward is split (I, W): a fused B is never faster in this model. Microbatches are
interchangeable, so stage 0 runs its forwards in microbatch order (symmetry breaking).
The solver's ``time_limit`` is wall-clock, so only a proven status ("optimal", "infeasible") is
a result; "unknown" means the limit ran out.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import combinations

from ..deps import F, I, W
from .evaluate import Problem


@dataclass(frozen=True)
class ExactResult:
    status: str            # "optimal", "infeasible" (nothing below the target), or "unknown"
    makespan: float | None
    orders: list[list[int]] | None


def solve(prob: Problem, cap: int, upper: float, time_limit: float = 60.0) -> ExactResult:
    """Minimise the makespan subject to makespan <= ``upper`` (e.g. a known schedule's)."""
    # deferred (start-up)
    import numpy as np
    from scipy.optimize import Bounds, LinearConstraint, milp
    from scipy.sparse import lil_matrix

    S, M = prob.n_stages, prob.m
    SM = S * M
    acts = [x for k in (F, I, W) for x in range(k * SM, (k + 1) * SM)]   # a kind's codes
    col = {a: n for n, a in enumerate(acts)}
    n_t = len(acts)
    cost = prob.cost
    rank_of = {a: prob.placement[(a % SM) // M] for a in acts}
    per_rank = [[a for a in acts if rank_of[a] == r] for r in range(prob.pp)]

    def before_fixed(a: int, b: int) -> bool | None:
        """True/False when the dependencies already order a and b (same stage, microbatch)."""
        ka, sa = divmod(a, SM)
        kb, sb = divmod(b, SM)
        if sa == sb:
            return ka < kb
        return None

    pairs = []
    for r in range(prob.pp):
        for a, b in combinations(per_rank[r], 2):
            if before_fixed(a, b) is None:
                pairs.append((a, b))
    ycol = {p: n_t + 1 + n for n, p in enumerate(pairs)}
    n_var = n_t + 1 + len(pairs)
    C = n_t
    big = upper + max(cost[a] for a in acts)
    rows, lo, hi = [], [], []

    def row(coefs: dict[int, float], low: float, high: float) -> None:
        rows.append(coefs)
        lo.append(low)
        hi.append(high)

    for a in acts:
        row({C: 1.0, col[a]: -1.0}, cost[a], np.inf)          # C >= t_a + c_a
        for d, c in prob.split_needs(a):
            row({col[a]: 1.0, col[d]: -1.0}, cost[d] + c, np.inf)

    def y(a: int, b: int):
        """(column, sign, constant): [a before b] = const + sign * y."""
        fixed = before_fixed(a, b)
        if fixed is not None:
            return None, 0.0, 1.0 if fixed else 0.0
        if (a, b) in ycol:
            return ycol[(a, b)], 1.0, 0.0
        return ycol[(b, a)], -1.0, 1.0

    for (a, b) in pairs:
        v = ycol[(a, b)]
        row({col[b]: 1.0, col[a]: -1.0, v: -big}, cost[a] - big, np.inf)  # y=1: a before b
        row({col[a]: 1.0, col[b]: -1.0, v: big}, cost[b], np.inf)         # y=0: b before a
    for r in range(prob.pp):
        for a in per_rank[r]:
            if a // SM != F:
                continue
            coefs: dict[int, float] = {}
            const = 1.0
            for b in per_rank[r]:
                if b == a or b // SM == I:
                    continue
                sign = 1.0 if b // SM == F else -1.0
                v, sv, c0 = y(b, a)
                const += sign * c0
                if v is not None:
                    coefs[v] = coefs.get(v, 0.0) + sign * sv
            row(coefs, -np.inf, cap - const)
    for m in range(M - 1):   # symmetry: stage 0's forwards in microbatch order
        row({col[m + 1]: 1.0, col[m]: -1.0}, cost[m], np.inf)

    A = lil_matrix((len(rows), n_var))
    for n, coefs in enumerate(rows):
        for j, v in coefs.items():
            A[n, j] = v
    c = np.zeros(n_var)
    c[C] = 1.0
    integrality = np.zeros(n_var)
    integrality[n_t + 1:] = 1
    lb = np.zeros(n_var)
    ub = np.full(n_var, np.inf)
    ub[n_t + 1:] = 1
    ub[C] = upper
    res = milp(c, constraints=LinearConstraint(A.tocsr(), lo, hi), integrality=integrality,
               bounds=Bounds(lb, ub),
               # HiGHS' presolve called some feasible big-M models infeasible (seen with
               # SciPy 1.17 at a target equal to the optimum); without it the answers agree
               options={"time_limit": time_limit, "disp": False, "presolve": False})
    if res.status == 0:
        t = res.x[:n_t]
        orders = [sorted(per_rank[r], key=lambda a: (t[col[a]], a)) for r in range(prob.pp)]
        return ExactResult("optimal", prob.makespan(orders), orders)
    if res.status == 2:
        return ExactResult("infeasible", None, None)
    return ExactResult("unknown", None, None)
