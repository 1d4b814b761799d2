"""Scaling series: ``simulate()`` on uniform workloads from ~10k to ~1M layer-ops, each point in a
fresh interpreter so its peak RSS (``ru_maxrss``) is its own; the exponent of time vs layer-ops
is a least-squares fit on log-log.

The engine advances time once per action (a chunk's layers are summed up front), so time follows
actions (pp × microbatches × 2), not layer-ops. Two series bracket that: ``model`` grows pp,
microbatches and layers together (many layers per stage, like a real model), ``event-heavy``
keeps one layer per stage so every layer-op is nearly an action.

Run as ``python -m benchmarks.scaling PP M LAYERS REPEATS`` it measures one point and prints
one JSON line (what the parent reads).

The million-action case (issue 16): 32 ranks, one layer per stage, M = 15,625, 1F1B, v = 1,
pp_comm 0, i.e. 32 x 15,625 x 2 = 1,000,000 F/B actions. :func:`whole_process_run` times the
whole ``pipesim run`` process on it (CPU = user + sys of the child, peak RSS its own, from
``wait4``); :func:`engine_series` runs ``simulate()`` + summary on the SimPy engine and on the
evaluator at 10k ... 1M actions, each point in a fresh interpreter
(``python -m benchmarks.scaling --engine-point ENGINE M``).
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


# -- the million-action case ---------------------------------------------------------------
ONE_LAYER_P = 32
MILLION_M = 15_625
ENGINE_SERIES_M = [156, 469, 1_563, 4_688, 15_625]      # 10k, 30k, 100k, 300k, 1M actions
QUICK_ENGINE_SERIES_M = [16, 32, 64]


def one_layer_workload_text(pp: int, microbatches: int) -> str:
    """An ASTRA-sim workload file: ``pp`` identical layers of 1000 ns per F, IG and WG and no
    collectives, one per stage, pp_comm 0."""
    rows = [f"HYBRID_TRANSFORMER_FWD_IN_BCKWD model_parallel_NPU_group: 1 ep: 1 pp: {pp} "
            f"vpp: 1 ga: {microbatches} all_gpus: {pp} checkpoints: 0 checkpoint_initiates: 0 "
            "pp_comm: 0", str(pp)]
    rows += [f"layer_{i}\t-1\t1000\tNONE\t0\t1000\tNONE\t0\t1000\tNONE\t0\t0"
             for i in range(pp)]
    return "\n".join(rows) + "\n"


@dataclass
class ProcessRun:
    actions: int
    cpu_s: float          # user + sys of the whole `pipesim run` process
    wall_s: float
    rss_mb: float         # its peak RSS
    makespan_ns: float


def whole_process_run(pp: int = ONE_LAYER_P, microbatches: int = MILLION_M,
                      timeout: float = 900.0) -> ProcessRun:
    """``pipesim run FILE --max-actions 0 --json -`` on the one-layer case, in a child process
    (``python -m simulator``, as the installed command runs it)."""
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / f"one_layer_p{pp}_m{microbatches}.txt"
        path.write_text(one_layer_workload_text(pp, microbatches))
        cmd = [sys.executable, "-m", "simulator", "run", str(path), "--max-actions", "0",
               "--json", "-"]
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(
            p for p in (str(REPO), os.environ.get("PYTHONPATH", "")) if p))
        out_path, err_path = Path(tmp) / "out.json", Path(tmp) / "err.txt"
        t0 = time.perf_counter()
        with out_path.open("w") as fo, err_path.open("w") as fe:
            proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=fo, stderr=fe)
            _, status, usage = os.wait4(proc.pid, 0)     # the child's own rusage
        wall = time.perf_counter() - t0
        code = os.waitstatus_to_exitcode(status)
        out, err = out_path.read_text(), err_path.read_text()
    if code != 0:
        last = (err.strip().splitlines() or ["no output"])[-1]
        raise RuntimeError(f"pipesim run failed (exit {code}): {last}")
    summary = json.loads(out)
    return ProcessRun(2 * pp * microbatches, usage.ru_utime + usage.ru_stime, wall,
                      usage.ru_maxrss / 1024.0, float(summary["makespan_ns"]))


def measure_engine_point(engine: str, microbatches: int) -> dict:
    """In this process: ``simulate()`` + summary on the one-layer case with ``engine`` (CPU,
    peak RSS), then the engine's run alone on a fresh Runtime (CPU)."""
    import gc

    from simulator import simulate
    from simulator.engine.evaluator import evaluate
    from simulator.engine.runtime import Runtime
    from simulator.schedules import registry
    from simulator.system.config import load_system
    from simulator.workload import uniform_workload
    from simulator.workload.partition import partition

    simulate(uniform_workload(2, pp=2, ga=2), engine=engine)    # lazy imports out of timing
    base = _maxrss_mb()
    wl = uniform_workload(ONE_LAYER_P, pp=ONE_LAYER_P, ga=microbatches, pp_comm=0)
    c0, t0 = time.process_time(), time.perf_counter()
    result = simulate(wl, engine=engine, max_actions=0)
    summary = result.summary
    cpu, wall = time.process_time() - c0, time.perf_counter() - t0
    rss = _maxrss_mb()
    used = summary.get("engine_used", engine)
    makespan = summary["makespan_ns"]
    actions = len(result.records.actions)
    del result, summary
    sched = registry.generate("1f1b", ONE_LAYER_P, microbatches, 1)
    runtime = Runtime(sched, partition(wl, sched.n_chunks), wl.header, load_system(None))
    gc.disable()
    c0 = time.process_time()
    rec = runtime.run() if engine == "simpy" else evaluate(runtime)
    run_cpu = time.process_time() - c0
    assert rec.iteration_bounds[-1][1] == makespan
    del rec
    # what the run itself allocates at its peak (records included; the schedule and the
    # compiled program are its input), traced in a second, untimed run
    import tracemalloc

    tracemalloc.start()
    rec = runtime.run() if engine == "simpy" else evaluate(runtime)
    run_mem = tracemalloc.get_traced_memory()[1] / 2 ** 20
    tracemalloc.stop()
    assert rec.iteration_bounds[-1][1] == makespan
    return {"engine": engine, "engine_used": used, "microbatches": microbatches,
            "actions": actions, "cpu_s": cpu, "wall_s": wall, "run_cpu_s": run_cpu,
            "rss_base_mb": base, "rss_peak_mb": rss, "makespan_ns": makespan,
            "run_mem_mb": run_mem}


def engine_point(engine: str, microbatches: int, timeout: float = 900.0) -> dict:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        p for p in (str(REPO), os.environ.get("PYTHONPATH", "")) if p))
    cmd = [sys.executable, "-m", "benchmarks.scaling", "--engine-point", engine,
           str(microbatches)]
    proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True,
                          timeout=timeout)
    if proc.returncode != 0:
        last = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        raise RuntimeError(f"engine point {engine} M={microbatches} failed "
                           f"(exit {proc.returncode}): {last}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def engine_series(ms: list[int]) -> dict[str, list[dict]]:
    """Both engines at each M (fresh interpreter per point); the caller reports whether their
    makespans agree."""
    out: dict[str, list[dict]] = {"simpy": [], "evaluator": []}
    for m in ms:
        for engine in out:
            out[engine].append(engine_point(engine, m))
    return out


def main(argv: list[str]) -> int:
    if argv and argv[0] == "--engine-point":
        print(json.dumps(measure_engine_point(argv[1], int(argv[2]))))
        return 0
    pp, microbatches, layers, repeats = (int(x) for x in argv)
    print(json.dumps(measure_point(pp, microbatches, layers, repeats)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
