"""Sweep throughput: points per second with 1 and 2 local workers (goal: >= 1.8x with 2).

Runs the same few-hundred-point sweep (workloads/gpt-24l.txt: 5 schedules x 3 pp x 4 M x 5 link
bandwidths = 300 points) once per worker count, each into a fresh folder, and prints a markdown
table. ``--jobs 1`` runs the points in this process (no worker start-up, no pickling): the
speed-up is against that, the honest baseline.

    python benchmarks/bench_sweep.py [--jobs 1 2] [--repeat 3]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from benchmarks import markdown as md  # noqa: E402
from simulator.sweep import expand, run_sweep, spec_from_dict  # noqa: E402

SPEC = {
    "name": "bench",
    "workload": str(REPO / "workloads" / "gpt-24l.txt"),
    "grid": {
        "schedule": ["gpipe", "1f1b", "interleaved-1f1b", "zb-v", "dualpipe-v"],
        "pp": [2, 4, 8],
        "microbatches": [8, 16, 32, 64],
        "system.links.bandwidth_gbps": [50, 100, 200, 400, 800],
    },
}


def measure(jobs: int, repeat: int) -> tuple[int, float, int]:
    """(points, best wall seconds over ``repeat`` runs, failed points)."""
    best = float("inf")
    n = failed = 0
    for _ in range(repeat):
        with tempfile.TemporaryDirectory() as tmp:
            spec = spec_from_dict(SPEC, "bench.yaml", tmp)
            t0 = time.perf_counter()
            outcome = run_sweep(spec, Path(tmp) / "out", jobs=jobs, parquet=True)
            best = min(best, time.perf_counter() - t0)
            n, failed = outcome.ran, outcome.failed
    return n, best, failed


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jobs", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--repeat", type=int, default=3, help="best of this many runs")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        total = len(expand(spec_from_dict(SPEC, "bench.yaml", tmp))[0])
    load = os.getloadavg()[0]
    rows = []
    base_rate = None
    for jobs in args.jobs:
        n, secs, failed = measure(jobs, args.repeat)
        rate = n / secs
        base_rate = base_rate or rate
        label = f"{jobs} (in-process)" if jobs == 1 else f"{jobs} processes"
        rows.append([label, n, failed, f"{secs:.2f}", f"{rate:.1f}", f"{rate / base_rate:.2f}x"])
    print(f"Sweep of {total} points on workloads/gpt-24l.txt; {os.cpu_count()} CPUs, Python "
          f"{sys.version.split()[0]}; best of {args.repeat} end-to-end runs (spec to parquet); "
          f"1-minute load average {load:.2f} before, {os.getloadavg()[0]:.2f} after.\n")
    print(md.table(["workers", "points", "failed", "wall (s)", "points/s", "speed-up"], rows))


if __name__ == "__main__":
    main()
