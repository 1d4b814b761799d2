"""Regenerate ``zb_greedy.json``: the zero-bubble fork's own scheduler's layouts (the tests do
not need the fork).

Run from the repository root with a checkout (or bare git directory) of
sail-sg/zero-bubble-pipeline-parallelism, never committed here:

    python3 tests/schedules/golden/make_zb_greedy_golden.py --zb-repo ZB

For every case below this runs the fork's greedy (``Graph.manual_order`` of
``megatron/core/pipeline_parallel/zerobubble/scheduler/zb.py`` over its eight switch
settings, the shortest longest-stage span kept, as its ``initial_solution`` does), loaded by
``benchmarks/bench_synthesis.py``'s loader, and records each stage's F / B / W order by
completion time (its ``create_scheduled_nodes``; its B is pipesim's I) and the span. A variant
that raises, or leaves an action unplaced (the fork's zero-filled time table), is skipped; a
case where every variant fails is recorded as failing. The costs are uniform over the stages,
as the fork's runtime makes them (the median of the ranks' profiled times); memory is per stage
(what an F, B and W add), the limit ``max_pending`` times the larger of the first two stages' F.
"""

from __future__ import annotations

import argparse
import json
import random
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))
COMMAND = "python3 tests/schedules/golden/make_zb_greedy_golden.py --zb-repo ZB"
OUT = HERE / "zb_greedy.json"


def cases() -> list[dict]:
    out = []

    def add(pp, m, f, i, w, comm, memory, pending):
        out.append({"pp": pp, "microbatches": m, "f": f, "i": i, "w": w, "comm": comm,
                    "memory": memory, "max_pending": pending})

    unit = lambda pp: [[1, 0, -1]] * pp   # noqa: E731  (memory in forwards, an I frees nothing)
    # unit costs and memory: the fork's ZB-1p and ZB-2p limits, beside ZB-H1 / ZB-H2
    for pp in (2, 4, 8):
        for m in (1, 2, pp, 2 * pp + 1, 3 * pp):
            for pending in (pp, 2 * pp):
                add(pp, m, 1, 1, 1, 0, unit(pp), pending)
    # the held-out runs' profile shapes (Qi et al. Table 9, rounded to 0.1 ms): 1.5B and 14.6B,
    # an I that keeps about 40 % of a stash until its W, the last stage's loss on top
    add(8, 24, 185, 181, 93, 6, [[2, -1, -1]] + [[3, -2, -1]] * 6 + [[3, -2, -1]], 8)
    add(8, 24, 185, 181, 93, 6, [[2, -1, -1]] + [[3, -2, -1]] * 6 + [[3, -2, -1]], 16)
    add(16, 48, 113, 112, 81, 4, [[5, -3, -2]] + [[8, -5, -3]] * 15, 16)
    add(16, 48, 113, 112, 81, 4, [[5, -3, -2]] + [[8, -5, -3]] * 15, 32)
    # seeded random cases: costs, p2p delay, memory and limits
    rng = random.Random(20261202)
    for _ in range(40):
        pp = rng.choice((2, 3, 4, 5, 8))
        m = rng.choice((1, 2, 3, pp, 2 * pp, 3 * pp + 1))
        f, i, w = rng.choice((1, 2, 5, 10)), rng.choice((1, 2, 5, 10)), rng.choice((1, 3, 9))
        comm = rng.choice((0, 1, 3))
        stash = [rng.choice((4, 6, 10)) for _ in range(pp)]
        kept = [rng.choice((1, 2, s)) for s in stash]
        memory = [[s, k - s, -k] for s, k in zip(stash, kept)]
        add(pp, m, f, i, w, comm, memory, rng.choice((1, 2, pp, 2 * pp, pp + 1)))
    return out


def fork_layout(zb, graph_mod, case: dict):
    pp, m = case["pp"], case["microbatches"]
    mem = case["memory"]
    cfg = graph_mod.GraphConfig(
        mem_f=[x[0] for x in mem], mem_b=[x[1] for x in mem], mem_w=[x[2] for x in mem],
        max_mem=[case["max_pending"] * max(x[0] for x in mem[:2])] * pp,
        cost_f=[float(case["f"])] * pp, cost_b=[float(case["i"])] * pp,
        cost_w=[float(case["w"])] * pp, cost_comm=float(case["comm"]), n_stages=pp, n_micro=m)
    g = zb.Graph.build_graph(pp, m, cfg)
    best = None
    for early in (True, False):
        for prioritize_b in (True, False):
            for no_bubble_greedy in (True, False):
                try:
                    _, t, span = g.manual_order(allow_bubble_before_first_b=early,
                                                prioritize_b=prioritize_b,
                                                no_bubble_greedy=no_bubble_greedy)
                except (ValueError, AssertionError, IndexError):
                    continue
                if any(t[g.get_id(k, s, b)] == 0 for k in range(3) for s in range(pp)
                       for b in range(m)):
                    continue
                if best is None or span < best[0]:
                    best = (span, t)
    if best is None:
        return None
    span, t = best
    names = "FIW"
    ranks = []
    for s in range(pp):
        acts = sorted((t[g.get_id(k, s, b)], k, b) for k in range(3) for b in range(m))
        ranks.append([f"{s}{names[k]}{b}" for _, k, b in acts])
    return {"ranks": ranks, "span": span}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--zb-repo", type=Path, required=True,
                    help="checkout or bare git dir of sail-sg/zero-bubble-pipeline-parallelism")
    args = ap.parse_args()
    from bench_synthesis import load_zb

    zb, graph_mod = load_zb(args.zb_repo)
    commit = subprocess.run(["git", "-C", str(args.zb_repo), "rev-parse", "HEAD"],
                            capture_output=True, text=True, check=True).stdout.strip()
    rows = []
    for case in cases():
        got = fork_layout(zb, graph_mod, case)
        rows.append({**case, **(got if got is not None else {"fails": True})})
    doc = {"source": "sail-sg/zero-bubble-pipeline-parallelism, megatron/core/pipeline_parallel/"
                     "zerobubble/scheduler/zb.py (Graph.manual_order, initial_solution)",
           "commit": commit, "command": COMMAND, "cases": rows}
    OUT.write_text(json.dumps(doc, separators=(",", ":")) + "\n")
    print(f"wrote {OUT.relative_to(ROOT)}: {len(rows)} cases, "
          f"{sum(1 for r in rows if r.get('fails'))} failing")
    return 0


if __name__ == "__main__":
    sys.exit(main())
