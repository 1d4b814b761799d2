"""Issue 23's engine targets, whole processes, CPU seconds (user + sys of the child, from
``resource.getrusage(RUSAGE_CHILDREN)``), best of ``--repeats`` (3) runs, interleaved:

- ``evaluator``: ``pipesim run W --engine evaluator --max-actions 0 --json -`` on the 1M
  one-layer-action case (32 ranks, M = 15,625, 1F1B, pp_comm 0: ``scaling.one_layer_workload_text``);
- ``simpy``: the same with ``--engine simpy``;
- ``bare``: a bare SimPy loop of 1,000,000 timeouts (``timing.bare_loop``), whole process
  (interpreter start and ``import simpy`` included) and the loop alone (``perf_counter`` /
  ``process_time`` inside the child);
- ``validate``: ``validate()`` of the library 1F1B schedule at that size, in-process CPU;
- ``plan`` (with ``--plan``): ``pipesim plan`` on the 1,207-candidate case of docs/planning.md
  (a GPT with 96 layers from the model flags, 1,024 GPUs, H100), wall and CPU of the child
  tree, best of ``--plan-repeats`` (1).

Targets (issue 23): evaluator <= 1.0 s CPU and <= 1.5x the bare loop's process; simpy and
plan no slower than before. Each tree's bytecode is compiled first and the children may read
it (``PYTHONDONTWRITEBYTECODE`` is dropped from their environment), as an installed package
runs: otherwise every child compiles the sources again (~0.15 s of each run here). ``--baseline DIR`` (a checkout of the code before, e.g. ``git
archive COMMIT | tar -x -C DIR``) runs the same commands from it, interleaved with this tree's,
so a shared machine's load hits both alike. Prints one JSON object; ``--out FILE`` writes it.

    python benchmarks/bench_core.py [--repeats 3] [--plan] [--baseline DIR] [--out FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from benchmarks.scaling import one_layer_workload_text  # noqa: E402

P, M = 32, 15625          # 2 x 32 x 15,625 = 1,000,000 F/B actions
BARE_N = 1_000_000

BARE_CHILD = """
import time, sys
c0, w0 = time.process_time(), time.perf_counter()
sys.path.insert(0, {repo!r})
from benchmarks.timing import bare_loop
c1, w1 = time.process_time(), time.perf_counter()
bare_loop({n})
print(time.process_time() - c1, time.perf_counter() - w1)
"""

VALIDATE_CHILD = """
import gc, time, sys
sys.path.insert(0, {repo!r})
from simulator.schedules import registry
from simulator.schedules.validate import validate
gc.disable()
s = registry.generate("1f1b", {p}, {m}, 1)
best = None
for _ in range(3):
    c = time.process_time()
    validate(s)
    c = time.process_time() - c
    best = c if best is None else min(best, c)
print(best)
"""


def _env(tree: Path) -> dict:
    env = dict(os.environ, PYTHONPATH=str(tree))
    env.pop("PYTHONDONTWRITEBYTECODE", None)     # read the compiled bytecode (module doc)
    return env


def compile_tree(tree: Path) -> None:
    """Compile ``tree``'s bytecode once, as an install does."""
    subprocess.run([sys.executable, "-m", "compileall", "-q", "simulator", "benchmarks"],
                   cwd=tree, env=_env(tree), check=True, capture_output=True)


def child(cmd: list[str], tree: Path = REPO) -> tuple[float, float, str]:
    """(CPU of the child tree, wall, stdout) of one run of ``tree``'s code."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t = time.perf_counter()
    proc = subprocess.run(cmd, cwd=tree, env=_env(tree), capture_output=True, text=True)
    wall = time.perf_counter() - t
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed: {proc.stderr.strip()[-400:]}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return cpu, wall, proc.stdout


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--plan", action="store_true")
    ap.add_argument("--plan-repeats", type=int, default=1)
    ap.add_argument("--baseline", type=Path, help="a checkout of the code before")
    ap.add_argument("--out", type=Path)
    args = ap.parse_args(argv)
    trees = {"this": REPO}
    if args.baseline:
        trees = {"baseline": args.baseline.resolve(), "this": REPO}
    out: dict = {"date": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
                 "commit": subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO,
                                          capture_output=True, text=True).stdout.strip(),
                 "python": platform.python_version(), "load_before": os.getloadavg()[0],
                 "case": f"{P} ranks, one layer per stage, 1F1B, M = {M}: "
                         f"{2 * P * M:,} actions",
                 "bytecode": "compiled before the runs (compileall), read by every child"}
    for tree in trees.values():
        compile_tree(tree)
    with tempfile.TemporaryDirectory() as tmp:
        w = Path(tmp) / "one_layer_1m.txt"
        w.write_text(one_layer_workload_text(P, M))
        results = interleaved(trees, w, args, Path(tmp))
    out.update(results if len(trees) > 1 else results["this"])
    out["load_after"] = os.getloadavg()[0]
    text = json.dumps(out, indent=1)
    print(text)
    if args.out:
        args.out.write_text(text + "\n")
    return 0


def interleaved(trees: dict, w: Path, args, tmp: Path) -> dict:
    """Each tree's figures, their runs interleaved repeat by repeat."""
    runs: dict = {name: {"evaluator": [], "simpy": [], "bare": []} for name in trees}
    out: dict = {name: {} for name in trees}
    for _ in range(args.repeats):
        for name, tree in trees.items():
            one_round(tree, w, runs[name], out[name])
    for name, tree in trees.items():
        summarize(runs[name], out[name])
        _, _, stdout = child([sys.executable, "-c", VALIDATE_CHILD.format(repo=str(tree), p=P,
                                                                         m=M)], tree)
        out[name]["validate_library_1m_cpu_s"] = round(float(stdout), 3)
    if args.plan:
        for _ in range(args.plan_repeats):
            for name, tree in trees.items():
                d = tmp / name
                d.mkdir(exist_ok=True)
                got = plan(sys.executable, d, 1, tree)
                best = out[name].get("plan")
                if best is None or got["wall_s"] < best["wall_s"]:
                    out[name]["plan"] = got
    return out


def one_round(tree: Path, w: Path, runs: dict, makespans: dict) -> None:
    py = sys.executable
    for engine in ("evaluator", "simpy"):
        cpu, wall, stdout = child([py, "-m", "simulator", "run", str(w), "--engine", engine,
                                   "--max-actions", "0", "--json", "-"], tree)
        runs[engine].append((cpu, wall))
        makespans.setdefault("makespan_ns", {})[engine] = json.loads(stdout)["makespan_ns"]
    cpu, wall, stdout = child([py, "-c", BARE_CHILD.format(repo=str(tree), n=BARE_N)], tree)
    loop_cpu, loop_wall = map(float, stdout.split())
    runs["bare"].append((cpu, wall, loop_cpu, loop_wall))


def summarize(runs: dict, out: dict) -> None:
    for name, rows in runs.items():
        best = min(rows)
        out[name] = {"cpu_s": round(best[0], 3), "wall_s": round(best[1], 3),
                     "all_cpu_s": [round(r[0], 3) for r in rows]}
        if name == "bare":
            out[name]["loop_cpu_s"] = round(min(r[2] for r in rows), 3)
            out[name]["loop_wall_s"] = round(min(r[3] for r in rows), 3)
    out["evaluator_vs_bare_process"] = round(out["evaluator"]["cpu_s"] / out["bare"]["cpu_s"], 2)
    out["evaluator_vs_bare_loop"] = round(out["evaluator"]["cpu_s"]
                                          / out["bare"]["loop_cpu_s"], 2)


def plan(py: str, tmp: Path, repeats: int, tree: Path = REPO) -> dict:
    """``pipesim plan`` on the model flags case (1,207 candidates), best of ``repeats``."""
    dest = tmp / "plan.json"
    argv = [py, "-m", "simulator", "plan", "--model", "gpt", "--layers", "96", "--hidden",
            "12288", "--heads", "96", "--seq", "2048", "--gpu", "h100", "--gpus", "1024",
            "--out", str(tmp), "--global-batch-size", "256", "--system",
            "configs/system/h100.yaml", "--max-work", "0", "--json", str(dest)]
    rows = []
    for _ in range(repeats):
        cpu, wall, _ = child(argv, tree)
        rows.append((wall, cpu))
    data = json.loads(dest.read_text())
    best = min(rows)
    return {"candidates": len(data["candidates"]), "wall_s": round(best[0], 2),
            "cpu_s": round(min(r[1] for r in rows), 2),
            "best": data["best"]["key"], "best_makespan_ns": data["best"]["makespan_ns"]}


if __name__ == "__main__":
    sys.exit(main())
