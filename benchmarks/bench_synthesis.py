"""Schedule synthesis against the zero-bubble repository's greedy scheduler, 1F1B and ZB-H1.

Every schedule is replayed in pipesim's own evaluator (simulator.schedules.synthesis.evaluate: the
zero-bubble paper's model — per-stage F/I/W costs, a fixed comm delay between ranks, no
contention), so the numbers compare orders, not implementations of a timer. The reference
scheduler is the greedy heuristic in sail-sg/zero-bubble-pipeline-parallelism
(megatron/core/pipeline_parallel/zerobubble/scheduler/zb.py, ``Graph.manual_order`` over its
eight flag combinations, the best kept by its own criterion — the longest stage span); it is
loaded from the file without importing Megatron (its ``torch``/``pulp`` imports are stubbed:
the greedy path uses neither). Its "B" is our I.

Given a checkout of that repository (never committed here) at ZB:

    python benchmarks/bench_synthesis.py --zb-repo ZB          # or ZB_REPO=ZB
    python benchmarks/bench_synthesis.py --zb-repo ZB --markdown  # the docs table

``--zb-repo`` may be a checkout or a bare git directory (files read with ``git show HEAD:``).
Without it the greedy column is left out. Exit 1 if ``auto`` loses to a baseline somewhere.
A second table (not with ``--quick``/``--no-v``) compares auto in V placement with the
registry's V schedules (ZB-V, V-Half, V-Min) the same way.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import subprocess
import sys
import tempfile
import time
import types
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from simulator.schedules.synthesis.bounds import lower_bound  # noqa: E402
from simulator.schedules.synthesis.costs import StageCosts  # noqa: E402
from simulator.schedules.synthesis.evaluate import Problem  # noqa: E402
from simulator.schedules.synthesis.search import synthesize  # noqa: E402
from simulator.schedules import registry  # noqa: E402

ZB_DIR = "megatron/core/pipeline_parallel/zerobubble/scheduler"
GRAPH_MOD = "megatron.core.pipeline_parallel.zerobubble.scheduler.graph"


def profiles(pp: int) -> dict[str, StageCosts]:
    """Per-stage costs (one unit = a tenth of a uniform stage's forward)."""
    def costs(f, i, w, comm=0):
        return StageCosts(tuple(f), tuple(i), tuple(w), comm)

    ones = [10] * pp
    return {
        "heavy-first": costs([15] + ones[1:], [15] + ones[1:], [12] + ones[1:]),
        "heavy-last": costs(ones[:-1] + [16], ones[:-1] + [18], ones[:-1] + [14]),
        "I!=W": costs(ones, [12] * pp, [6] * pp),
        "comm>0": costs(ones, ones, ones, 3),
    }


def _read(repo: Path, rel: str) -> str:
    if (repo / rel).is_file():
        return (repo / rel).read_text()
    return subprocess.run(["git", "-C", str(repo), "show", f"HEAD:{rel}"], check=True,
                          capture_output=True, text=True).stdout


def load_zb(repo: Path):
    """zb.py's module, loaded from a temporary copy with its imports satisfied by stubs."""
    tmp = Path(tempfile.mkdtemp(prefix="zbsched-"))
    for name in ("graph.py", "zb.py"):
        (tmp / name).write_text(_read(repo, f"{ZB_DIR}/{name}"))
    saved = dict(sys.modules)
    try:
        for pkg in ("megatron", "megatron.core", "megatron.core.pipeline_parallel",
                    "megatron.core.pipeline_parallel.zerobubble",
                    "megatron.core.pipeline_parallel.zerobubble.scheduler"):
            mod = types.ModuleType(pkg)
            mod.__path__ = []
            sys.modules[pkg] = mod
        for stub in ("torch", "pulp"):
            mod = types.ModuleType(stub)
            mod.Tensor = object
            mod.value = lambda x: x
            sys.modules[stub] = mod
        spec = importlib.util.spec_from_file_location(GRAPH_MOD, tmp / "graph.py")
        graph = importlib.util.module_from_spec(spec)
        sys.modules[GRAPH_MOD] = graph
        spec.loader.exec_module(graph)
        spec = importlib.util.spec_from_file_location("zb_greedy", tmp / "zb.py")
        zb = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(zb)
        return zb, graph
    finally:
        sys.modules.clear()
        sys.modules.update(saved)


def zb_greedy_orders(zb, graph_mod, prob: Problem, cap: int) -> list[list[int]] | None:
    """The greedy's per-stage orders as our action ids (its B = our I); None if it fails."""
    c, P, M = prob.costs, prob.pp, prob.m
    config = graph_mod.GraphConfig(
        mem_f=[1.0] * P, mem_b=[0.0] * P, mem_w=[-1.0] * P, max_mem=[float(cap)] * P,
        cost_f=[float(x) for x in c.f], cost_b=[float(x) for x in c.i],
        cost_w=[float(x) for x in c.w], cost_comm=float(c.comm), n_stages=P, n_micro=M)
    g = zb.Graph.build_graph(P, M, config)
    best = None
    for bubble in (True, False):          # initial_solution's loop, failures skipped
        for prio in (True, False):
            for nbg in (True, False):
                try:
                    order, _, span = g.manual_order(allow_bubble_before_first_b=bubble,
                                                    prioritize_b=prio, no_bubble_greedy=nbg)
                except (ValueError, AssertionError):
                    continue
                if best is None or span < best[0]:
                    best = (span, order)
    if best is None:
        return None
    order = best[1]
    SM = P * M
    out = []
    for s in range(P):
        ids = [(order[g.get_id(k, s, m)], k, m) for k in range(3) for m in range(M)]
        out.append([(k * P + s) * M + m for _, k, m in sorted(ids)])
    assert len(out) == P and SM
    return out


def replay(prob: Problem, name: str) -> tuple[float, int]:
    sched = registry.generate(name, prob.pp, prob.m, 1)
    orders = prob.encode_ranks(sched.ranks)
    return prob.makespan(orders), max(prob.peak_inflight(o) for o in orders)


def run(zb_repo: Path | None, sizes, markdown: bool, iterations: int) -> int:
    zb = load_zb(zb_repo) if zb_repo else None
    rows = []
    worst = 0
    for pp in sizes["pp"]:
        for m in sizes["m"]:
            for label, costs in profiles(pp).items():
                for cap_name, cap in (("P", pp), ("1.5P", pp * 3 // 2), ("2P", 2 * pp)):
                    prob = Problem(pp, m, costs)
                    lb = lower_bound(prob, cap)
                    base = {}
                    for name in ("1f1b", "zb-h1"):
                        ms, peak = replay(prob, name)
                        base[name] = ms if peak <= cap else None
                    greedy = None
                    if zb is not None:
                        orders = zb_greedy_orders(zb[0], zb[1], prob, cap)
                        if orders is not None:
                            ms = prob.makespan(orders)
                            peak = max(prob.peak_inflight(o) for o in orders)
                            greedy = (ms, peak)
                    t0 = time.perf_counter()
                    res = synthesize(pp, m, 1, costs, cap, iterations=iterations)
                    secs = time.perf_counter() - t0
                    others = [v for v in base.values() if v is not None]
                    if greedy is not None and greedy[1] <= cap:
                        others.append(greedy[0])
                    best_other = min(others) if others else None
                    if best_other is not None and res.makespan > best_other:
                        worst = 1
                    rows.append((pp, m, label, cap_name, cap, greedy, base["1f1b"],
                                 base["zb-h1"], res.makespan, lb, secs))
    _print(rows, markdown, zb is not None)
    return worst


def run_v(sizes, markdown: bool, iterations: int) -> int:
    """V placement (two chunks per rank): auto against the registry's V schedules; 1 if auto
    loses to one that fits the cap somewhere."""
    names = ("zb-v", "v-half", "v-min")
    head = ["P", "M", "costs", "cap K", *names, "auto", "bound", "gap", "auto s"]
    lines, gaps = [], []
    worst = 0
    for pp in sizes["pp"]:
        for m in sizes["m"]:
            for label, costs in profiles(2 * pp).items():
                for cap_name, cap in (("P", pp), ("1.5P", pp * 3 // 2), ("2P", 2 * pp)):
                    res_t = time.perf_counter()
                    res = synthesize(pp, m, 2, costs, cap, iterations=iterations)
                    secs = time.perf_counter() - res_t
                    prob = Problem(pp, m, costs, res.schedule.placement)
                    cells = []
                    for name in names:
                        sched = registry.generate(name, pp, m, 2)
                        orders = prob.encode_ranks(sched.ranks)
                        peak = max(prob.peak_inflight(o) for o in orders)
                        ms = prob.makespan(orders)
                        cells.append(_fmt(ms) + ("" if peak <= cap else f" (peak {peak})"))
                        if peak <= cap and res.makespan > ms:
                            worst = 1
                    gap = (res.makespan - res.lower_bound) / res.lower_bound
                    gaps.append(gap)
                    lines.append([str(pp), str(m), label, f"{cap_name}={cap}", *cells,
                                  _fmt(res.makespan), _fmt(res.lower_bound),
                                  f"{100 * gap:.2f}%", f"{secs:.1f}"])
    print("\nV placement (--vpp 2; K in chunk activations, 2P = ZB-V's memory)\n")
    _table(head, lines, markdown)
    at_bound = sum(1 for g in gaps if g <= 1e-12)
    print(f"\n{len(lines)} cases; auto at the lower bound in {at_bound}; mean gap to the bound "
          f"{100 * sum(gaps) / len(gaps):.2f}%, max {100 * max(gaps):.2f}%")
    return worst


def _table(head, lines, markdown: bool) -> None:
    if markdown:
        print("| " + " | ".join(head) + " |")
        print("|" + "---|" * len(head))
        for line in lines:
            print("| " + " | ".join(line) + " |")
    else:
        widths = [max(len(h), *(len(line[k]) for line in lines)) for k, h in enumerate(head)]
        print("  ".join(h.rjust(w) for h, w in zip(head, widths)))
        for line in lines:
            print("  ".join(x.rjust(w) for x, w in zip(line, widths)))


def _fmt(x) -> str:
    if x is None:
        return "-"
    return f"{x:g}"


def _print(rows, markdown: bool, with_greedy: bool) -> None:
    head = ["P", "M", "costs", "cap K", "zb greedy", "1f1b", "zb-h1", "auto", "bound",
            "gap", "auto s"]
    lines = []
    gaps = []
    for pp, m, label, cap_name, cap, greedy, f1b, zbh1, ours, lb, secs in rows:
        if greedy is None:
            g = "fails" if with_greedy else "n/a"
        else:
            g = _fmt(greedy[0]) + ("" if greedy[1] <= cap else f" (peak {greedy[1]} > K)")
        gap = (ours - lb) / lb
        gaps.append(gap)
        lines.append([str(pp), str(m), label, f"{cap_name}={cap}", g, _fmt(f1b), _fmt(zbh1),
                      _fmt(ours), _fmt(lb), f"{100 * gap:.2f}%", f"{secs:.1f}"])
    _table(head, lines, markdown)
    at_bound = sum(1 for g in gaps if g <= 1e-12)
    print(f"\n{len(rows)} cases; auto at the lower bound in {at_bound}; mean gap to the bound "
          f"{100 * sum(gaps) / len(gaps):.2f}%, max {100 * max(gaps):.2f}%")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--zb-repo", default=os.environ.get("ZB_REPO"),
                    help="checkout or bare git dir of sail-sg/zero-bubble-pipeline-parallelism "
                         "(default: $ZB_REPO)")
    ap.add_argument("--markdown", action="store_true", help="print a markdown table")
    ap.add_argument("--quick", action="store_true", help="P=4, M=8 only, no V section")
    ap.add_argument("--no-v", action="store_true", help="leave out the V-placement section")
    ap.add_argument("--iterations", type=int, default=None,
                    help="local-search moves per case (default: auto's default)")
    args = ap.parse_args(argv)
    sizes = {"pp": [4], "m": [8]} if args.quick else {"pp": [4, 8], "m": [8, 16, 24]}
    from simulator.schedules.synthesis.search import DEFAULT_ITERATIONS

    iterations = args.iterations or DEFAULT_ITERATIONS
    worst = run(Path(args.zb_repo) if args.zb_repo else None, sizes, args.markdown, iterations)
    if not args.quick and not args.no_v:
        worst |= run_v({"pp": [4, 8], "m": [8, 16]}, args.markdown, iterations)
    return worst


if __name__ == "__main__":
    sys.exit(main())
