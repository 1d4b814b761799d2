"""Scaling series: ``simulate()`` on uniform workloads from ~10k to ~1M layer-ops, each point in a
fresh interpreter so its peak RSS (``ru_maxrss``) is its own; the exponent of time vs layer-ops
is a least-squares fit on log-log.

The engine advances time once per action (a chunk's layers are summed up front), so time follows
actions (pp × microbatches × 2), not layer-ops. Two series bracket that: ``model`` grows pp,
microbatches and layers together (many layers per stage, like a real model), ``event-heavy``
keeps one layer per stage so every layer-op is nearly an action.

Run as ``python -m benchmarks.scaling PP M LAYERS REPEATS`` it measures one point and prints
one JSON line (what the parent reads).
"""

from __future__ import annotations

import json
import os
import resource
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
BUDGET_S = 20.0   # per point: stop repeating once this much time is spent (big points run once)

# (pp, microbatches, layers); layer-ops = 3 * layers * microbatches (F, IG, WG per layer)
SERIES: dict[str, list[tuple[int, int, int]]] = {
    "model": [(4, 8, 416), (8, 16, 624), (8, 32, 1040), (16, 64, 1568), (32, 128, 2624)],
    "event-heavy": [(8, 416, 8), (16, 624, 16), (16, 2080, 16), (32, 3136, 32),
                    (32, 10496, 32)],
}
QUICK_SERIES: dict[str, list[tuple[int, int, int]]] = {
    "model": [(2, 4, 32), (4, 8, 64), (4, 16, 128)],
    "event-heavy": [(4, 32, 4), (4, 128, 4), (8, 256, 8)],
}


@dataclass
class Point:
    series: str
    pp: int
    microbatches: int
    layers: int
    layer_ops: int
    actions: int
    median_s: float
    times: list[float]
    cpu_s: float            # median CPU time (user + sys) of the same runs: robust to load
    rss_base_mb: float      # peak RSS after imports and a tiny warm-up run
    rss_peak_mb: float      # peak RSS of the whole process


def _maxrss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0  # Linux: KiB


def measure_point(pp: int, microbatches: int, layers: int, repeats: int,
                  budget_s: float = BUDGET_S) -> dict:
    """In this process: warm up on a tiny case, then time up to ``repeats`` runs (tracing off),
    stopping early once ``budget_s`` seconds have been spent (at least one run)."""
    from simulator import simulate
    from simulator.workload import uniform_workload

    simulate(uniform_workload(2, pp=2, ga=2))           # lazy imports out of the timing
    base = _maxrss_mb()
    wl = uniform_workload(layers, pp=pp, ga=microbatches)
    times: list[float] = []
    cpu: list[float] = []
    result = None
    while len(times) < repeats and (not times or sum(times) < budget_s):
        result = None                                    # free the previous run's records first
        c0, t0 = time.process_time(), time.perf_counter()
        result = simulate(wl)
        times.append(time.perf_counter() - t0)
        cpu.append(time.process_time() - c0)
    return {"layer_ops": int(result.summary["layer_ops"]), "actions": len(result.records.actions),
            "times": times, "cpu": cpu, "rss_base_mb": base, "rss_peak_mb": _maxrss_mb()}


def run_point(series: str, pp: int, microbatches: int, layers: int, repeats: int,
              timeout: float = 900.0) -> Point:
    """Measure one point in a fresh interpreter."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        p for p in (str(REPO), os.environ.get("PYTHONPATH", "")) if p))
    cmd = [sys.executable, "-m", "benchmarks.scaling", str(pp), str(microbatches), str(layers),
           str(repeats)]
    proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=timeout)
    if proc.returncode != 0:
        last = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        raise RuntimeError(f"scaling point pp={pp} M={microbatches} layers={layers} failed "
                           f"(exit {proc.returncode}): {last}")
    data = json.loads(proc.stdout.strip().splitlines()[-1])
    return Point(series, pp, microbatches, layers, data["layer_ops"], data["actions"],
                 statistics.median(data["times"]), data["times"], statistics.median(data["cpu"]),
                 data["rss_base_mb"],
                 data["rss_peak_mb"])


def fit_exponent(ops: list[float], seconds: list[float]) -> float:
    """Slope of log(seconds) against log(ops), least squares (time ∝ ops^slope)."""
    if len(ops) < 2:
        raise ValueError(f"need at least two points to fit an exponent, got {len(ops)}")
    slope, _ = np.polyfit(np.log(ops), np.log(seconds), 1)
    return float(slope)


def main(argv: list[str]) -> int:
    pp, microbatches, layers, repeats = (int(x) for x in argv)
    print(json.dumps(measure_point(pp, microbatches, layers, repeats)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
