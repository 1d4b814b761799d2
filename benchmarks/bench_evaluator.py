"""The exact evaluator against the SimPy engine on issue 16's case: 32 ranks, one layer per
stage, 1F1B, pp_comm 0, M microbatches (2 x 32 x M F/B actions), from 10k to 1M actions.

Each (size, engine) point runs in a fresh interpreter so its peak RSS is its own. A point builds
the schedule and the Runtime (shared by the engines: the compiled program), then times one run:
CPU (``process_time``, robust to the shared machine's load) and wall time, and the peak-RSS
growth over the run (``ru_maxrss`` before and after: the records the run keeps). The engines:
``evaluator`` (what ``--engine evaluator`` runs: the asynchronous walk, ``evaluator_async``)
and ``simpy``. Their records are reduced to a digest of every action's and transfer's exact
times: equal digests mean 0 ns difference. The exponent is the least-squares slope of log CPU
time against log actions.

    python benchmarks/bench_evaluator.py                # 10k, 100k, 300k, 1M actions
    python benchmarks/bench_evaluator.py --quick        # small sizes, a few seconds
    python benchmarks/bench_evaluator.py --append       # also save it under benchmarks/results/
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import platform
import resource
import subprocess
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
P = 32
SIZES = (156, 1563, 4688, 15625)       # microbatches: 9,984 / 100,032 / 300,032 / 1,000,000
QUICK_SIZES = (16, 64, 256)
TARGET_S, TARGET_MB = 0.5, 100.0       # evaluator at 1M actions (issue 16)


def _rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0   # Linux: KiB


def _digest(rec) -> str:
    """Every action's and transfer's exact times, per rank in the engine's order."""
    h = hashlib.sha256()
    acts: dict[int, list] = {}
    for a in rec.actions:
        acts.setdefault(a.rank, []).append((a.stage, a.kind, a.microbatch, a.iteration,
                                            a.start, a.end))
    trs: dict[int, list] = {}
    for t in rec.transfers:
        trs.setdefault(t.src_rank, []).append((t.dst_rank, t.data, t.microbatch, t.issued,
                                               t.start, t.end))
    for part in (acts, trs):
        for r in sorted(part):
            h.update(repr(part[r]).encode())
    h.update(repr((rec.iteration_bounds, rec.rank_finish, rec.peak_memory)).encode())
    return h.hexdigest()[:16]


def point(microbatches: int, engine: str) -> dict:
    """One measurement in this process (the child's side)."""
    import gc

    from simulator.engine.evaluator import evaluate
    from simulator.engine.runtime import Runtime
    from simulator.schedules import registry
    from simulator.system.config import load_system
    from simulator.workload import uniform_workload
    from simulator.workload.partition import partition

    system = load_system(None)
    wl = uniform_workload(P, 1000, 1000, 1000, pp=P, ga=microbatches, pp_comm=0)
    gc.disable()    # as simulate() runs the engines
    t0 = time.process_time()
    sched = registry.generate("1f1b", P, microbatches, 1)
    runtime = Runtime(sched, partition(wl, sched.n_chunks), wl.header, system)
    setup = time.process_time() - t0
    del sched
    rss0 = _rss_mb()
    c0, w0 = time.process_time(), time.perf_counter()
    if engine == "simpy":
        rec = runtime.run()
    else:
        rec = evaluate(runtime)
    cpu, wall = time.process_time() - c0, time.perf_counter() - w0
    rss1 = _rss_mb()
    # the floor of any walk of the compiled steps: each step's index and action, nothing else
    c0 = time.process_time()
    for r, prog in enumerate(runtime.program.compiled):
        for i, a in zip(prog.steps, runtime.program.schedule.ranks[r]):
            pass
    walk = time.process_time() - c0
    return {"engine": engine, "walk_cpu_s": walk, "microbatches": microbatches,
            "actions": len(rec.actions),
            "setup_cpu_s": setup, "cpu_s": cpu, "wall_s": wall, "rss_before_mb": rss0,
            "rss_after_mb": rss1, "makespan_ns": rec.iteration_bounds[-1][1],
            "digest": _digest(rec)}


def run_point(microbatches: int, engine: str) -> dict:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        p for p in (str(REPO), os.environ.get("PYTHONPATH", "")) if p))
    proc = subprocess.run([sys.executable, str(Path(__file__).resolve()), "--point",
                           str(microbatches), engine], cwd=REPO, env=env, capture_output=True,
                          text=True, timeout=1800)
    if proc.returncode != 0:
        last = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        raise RuntimeError(f"point M={microbatches} {engine} failed: {last}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def fit_exponent(xs: list[float], ys: list[float]) -> float:
    """Least-squares slope of log y against log x."""
    lx = [math.log(x) for x in xs]
    ly = [math.log(y) for y in ys]
    mx, my = sum(lx) / len(lx), sum(ly) / len(ly)
    return (sum((a - mx) * (b - my) for a, b in zip(lx, ly))
            / sum((a - mx) ** 2 for a in lx))


def report(rows: list[tuple[dict, dict]], quick: bool) -> str:
    from benchmarks.markdown import table, verdict

    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO,
                            capture_output=True, text=True).stdout.strip() or "?"
    now = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    load = os.getloadavg()[0]
    lines = [f"## Evaluator vs SimPy engine {now}{' (quick)' if quick else ''}, {commit}", "",
             f"Issue 16's case: {P} ranks, one layer per stage, 1F1B, pp_comm 0; each point a "
             f"fresh process (`python benchmarks/bench_evaluator.py`). Python "
             f"{platform.python_version()}, load average {load:.2f} on {os.cpu_count()} CPUs. "
             "CPU = `process_time` of the engine's run alone (the schedule and the Runtime's "
             "compiled program are built first and shared by the engines: `setup`); RSS = "
             "growth of peak RSS over the run (the records it keeps); `peak` = the "
             "evaluator process's peak RSS; `same` = equal digests "
             "of every action's and transfer's exact times in both (0 ns difference); "
             "`floor` = CPU to loop over every rank's step indices and actions doing nothing, "
             "the floor of any walk of them.", ""]
    body = []
    for ev, sp in rows:
        body.append([f"{ev['actions']:,}", f"{ev['setup_cpu_s']:.2f} s",
                     f"{ev['walk_cpu_s']:.3f} s",
                     f"{ev['cpu_s']:.3f} s", f"{ev['wall_s']:.3f} s",
                     f"{ev['rss_after_mb'] - ev['rss_before_mb']:.0f} MB",
                     f"{ev['rss_after_mb']:.0f} MB",
                     f"{sp['cpu_s']:.3f} s", f"{sp['wall_s']:.3f} s",
                     f"{sp['rss_after_mb'] - sp['rss_before_mb']:.0f} MB",
                     f"{sp['cpu_s'] / ev['cpu_s']:.2f}x",
                     "yes" if ev["digest"] == sp["digest"] else "NO"])
    lines.append(table(["actions", "setup CPU", "floor", "evaluator CPU", "wall", "RSS", "peak",
                        "SimPy run CPU", "wall", "RSS", "vs SimPy", "same"],
                       body))
    acts = [ev["actions"] for ev, _ in rows]
    e_exp = fit_exponent(acts, [ev["cpu_s"] for ev, _ in rows])
    s_exp = fit_exponent(acts, [sp["cpu_s"] for _, sp in rows])
    big_ev, big_sp = rows[-1]
    rss_big = big_ev["rss_after_mb"] - big_ev["rss_before_mb"]
    same = all(ev["digest"] == sp["digest"] for ev, sp in rows)
    full = big_ev["actions"] >= 1_000_000

    def judge(ok: bool) -> str:
        return verdict(ok) if full else "- (the 1M point only)"

    lines += ["", f"Fitted exponent (CPU time vs actions, {acts[0]:,}-{acts[-1]:,}): evaluator "
              f"{e_exp:.3f}, SimPy run {s_exp:.3f}.",
              "",
              table(["target (issue 16)", "measured", "verdict"], [
                  [f"evaluator <= {TARGET_S} s at {big_ev['actions']:,} actions",
                   f"{big_ev['cpu_s']:.3f} s CPU", judge(big_ev["cpu_s"] <= TARGET_S)],
                  [f"evaluator <= {TARGET_MB:.0f} MB at {big_ev['actions']:,} actions",
                   f"{rss_big:.0f} MB over the run", judge(rss_big <= TARGET_MB)],
                  ["0 ns difference from the SimPy engine",
                   "every point identical" if same else "DIFFERS",
                   verdict(same)],
              ])]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="small sizes (seconds)")
    ap.add_argument("--append", action="store_true",
                    help="save the report (default: a new dated file in benchmarks/results/)")
    ap.add_argument("--out", default=None, help="with --append: the markdown file to append to")
    ap.add_argument("--point", nargs=2, metavar=("M", "ENGINE"), help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.point:
        print(json.dumps(point(int(args.point[0]), args.point[1])))
        return 0
    sys.path.insert(0, str(REPO))
    rows = []
    for m in (QUICK_SIZES if args.quick else SIZES):
        ev, sp = (run_point(m, e) for e in ("evaluator", "simpy"))
        print(f"M={m}: {ev['actions']:,} actions: evaluator {ev['cpu_s']:.3f} s CPU "
              f"(+{ev['rss_after_mb'] - ev['rss_before_mb']:.0f} MB), SimPy run "
              f"{sp['cpu_s']:.3f} s CPU (+{sp['rss_after_mb'] - sp['rss_before_mb']:.0f} MB), "
              f"same: {ev['digest'] == sp['digest']}", file=sys.stderr)
        rows.append((ev, sp))
    text = report(rows, args.quick)
    print(text)
    if args.append:
        from benchmarks.markdown import append_section, dated_result

        append_section(Path(args.out) if args.out else dated_result("evaluator"), text)
    return 0 if all(ev["digest"] == sp["digest"] for ev, sp in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
