"""CPU per action of `pipesim run`, per point-to-point mode: the figures behind
``simulator.preflight.P2P_ACTION_COST`` (how many times an action counts against --max-actions).

Each case runs the bundled gpt-24l workload (P = 4, M = 24, jitter 0.1: the dearer path) for as
many iterations as make about 200,000 actions, as a whole process; its CPU time (user + system)
less a one-iteration run's (start-up) over the actions is the cost per action. CPU time, not
wall time, so a loaded machine changes the figures little.

    python benchmarks/bench_run_cost.py [--actions 200000] [--json PATH]
"""

from __future__ import annotations

import argparse
import itertools
import json
import resource
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

CASES = (("gpipe", 1), ("1f1b", 1), ("zb-h1", 1), ("interleaved-1f1b", 3), ("zb-v", 2))
MODES = ("async", "blocking", "batched", "torch-single", "torch-multi")
BASE = [sys.executable, "-m", "simulator", "run", str(REPO / "workloads" / "gpt-24l.txt"),
        "--json", "/dev/null", "--max-actions", "0", "--pp", "4", "-m", "24"]


def cpu_of(args: list[str]) -> tuple[float, int]:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    code = subprocess.run(args, capture_output=True, cwd=REPO).returncode
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime), code


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--actions", type=int, default=200_000)
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args(argv)
    from simulator.preflight import P2P_ACTION_COST
    from simulator.schedules import registry

    start_up = min(cpu_of(BASE + ["--iterations", "1"])[0] for _ in range(3))
    rows = []
    for (name, v), mode in itertools.product(CASES, MODES):
        _, per_iteration = registry.get(name).size_of(4, 24, v, {})
        iterations = max(1, args.actions // per_iteration)
        cpu, code = cpu_of(BASE + ["-s", name, "--vpp", str(v), "--p2p", mode, "--iterations",
                                   str(iterations), "--jitter", "0.1"])
        if code not in (0, 4):   # this schedule deadlocks in this mode (exit 3)
            print(f"{name:18} {mode:13} exit {code}")
            continue
        actions = per_iteration * iterations
        us = (cpu - start_up) / actions * 1e6
        rows.append({"schedule": name, "p2p": mode, "actions": actions, "cpu_s": round(cpu, 3),
                     "us_per_action": round(us, 2), "counted_as": P2P_ACTION_COST[mode]})
        print(f"{name:18} {mode:13} {actions:8,} actions {cpu:6.2f} s CPU {us:6.1f} us/action "
              f"(counted {P2P_ACTION_COST[mode]}x)", flush=True)
    worst = {m: max((r["us_per_action"] for r in rows if r["p2p"] == m), default=None)
             for m in MODES}
    print("worst us/action:", worst)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({"start_up_cpu_s": round(start_up, 3), "rows": rows,
                                         "worst_us_per_action": worst}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
