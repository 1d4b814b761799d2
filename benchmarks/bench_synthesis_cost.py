"""What each step of ``auto``'s synthesis costs, in action evaluations: the unit its budget
(``-O max_evaluations``, :func:`simulator.schedules.synthesis.search.synthesis_work`) counts in.

For each case (P:M:v:costs, costs ``unit`` or ``made-up``: f 1.0, i 1.05, w 0.8 per stage, the
first stage's forward 1.2, the last stage 1.6 / 1.7 / 1.1, comm 0.03) it times, in CPU time
(``process_time``: robust to a shared machine's load), one evaluation of a greedy start by
``Problem.times`` (repeated for half a second), then the whole ``synthesize`` with each step's
own CPU time, and prints each step per call and per action in evaluations, and the estimate
against the measured whole. ``--worst`` makes no start meet the lower bound (the case the
estimate counts: every start, every local-search move); without it the search stops at the first
start that meets it.

    python benchmarks/bench_synthesis_cost.py --worst 8:32:1:unit 32:256:1:made-up
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import simulator.schedules.synthesis.search as search  # noqa: E402
from simulator.schedules.synthesis.costs import StageCosts  # noqa: E402

STEPS = ("greedy", "local_search", "fuse")


def made_up(n_stages: int) -> StageCosts:
    f, i, w = [1.0] * n_stages, [1.05] * n_stages, [0.8] * n_stages
    f[-1], i[-1], w[-1], f[0] = 1.6, 1.7, 1.1, 1.2
    return StageCosts(tuple(f), tuple(i), tuple(w), 0.03)


def timed_steps() -> tuple[dict[str, float], dict[str, int]]:
    """Wrap the search's steps so each adds its CPU time and call count."""
    spent: dict[str, float] = {}
    calls: dict[str, int] = {}
    for name in STEPS:
        inner = getattr(search, name)

        def wrapper(*args, _inner=inner, _name=name, **kw):
            t = time.process_time()
            out = _inner(*args, **kw)
            spent[_name] = spent.get(_name, 0.0) + time.process_time() - t
            calls[_name] = calls.get(_name, 0) + 1
            return out
        setattr(search, name, wrapper)
    return spent, calls


def seconds_per_evaluation(prob, orders) -> float:
    t, k = time.process_time(), 0
    while time.process_time() - t < 0.5:
        prob.times(orders)
        k += 1
    return (time.process_time() - t) / k / sum(map(len, orders))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("cases", nargs="+", help="P:M:v:unit|made-up, e.g. 32:256:1:made-up")
    ap.add_argument("--worst", action="store_true", help="no start meets the lower bound")
    args = ap.parse_args()
    greedy = search.greedy
    if args.worst:
        search.meets = lambda makespan, bound: False
    spent, calls = timed_steps()
    for case in args.cases:
        pp_s, m_s, v_s, kind = case.split(":")
        pp, m, vpp = int(pp_s), int(m_s), int(v_s)
        costs = None if kind == "unit" else made_up(pp * vpp)
        prob = search.problem_for(pp, m, vpp, costs)
        n = 3 * pp * vpp * m
        policy = (search.V_POLICIES if vpp == 2 else search.POLICIES)[0]
        ev = seconds_per_evaluation(prob, greedy(prob, pp * vpp, policy))
        spent.clear()
        calls.clear()
        t = time.process_time()
        search.synthesize(pp, m, vpp, costs)
        total = time.process_time() - t
        estimate = search.synthesis_work(pp, m, vpp, search.DEFAULT_ITERATIONS, costs is None)
        per = ", ".join(f"{k} {spent[k] / ev / n / calls[k]:.2f} x{calls[k]}" for k in spent)
        moves = 3 * search.search_moves(n, search.DEFAULT_ITERATIONS)
        move = (f", a move {spent['local_search'] / ev / n / moves:.2f}"
                if "local_search" in spent and moves else "")
        print(f"{case:>16}  evaluation {ev * 1e6:.3f} us/action  synthesize {total:.2f} s = "
              f"{total / ev / 1e6:.1f}M evaluations, estimate {estimate / 1e6:.1f}M "
              f"(x{estimate * ev / total:.2f}); per call per action: {per}{move}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
