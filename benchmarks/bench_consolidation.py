"""Measure issue 23's targets (consolidate the core) on the checkout this file sits in.

Usage: ``python benchmarks/bench_consolidation.py [--json PATH] [--no-timings] [--repeats N]``.

What it measures, and how:

- **lines**: lines of ``.py`` files per folder of ``simulator/`` (each sub-package, and the
  package's top-level modules as ``simulator/*.py``), and the totals of ``tests/``,
  ``benchmarks/`` (``.py``) and ``docs/`` (every file but images).
- **long functions**: every ``def`` in ``simulator/`` (nested ones too) whose body spans more
  than 100 and more than 120 lines (``end_lineno - lineno + 1`` of the ``def`` statement,
  decorators excluded), listed longest first.
- **imports inside functions**: ``import`` / ``from ... import`` statements in ``simulator/``
  with a ``def`` around them (``ast``); how many carry a comment on their line or the line above,
  and how many of those comments say why (the words optional, start-up/startup, cycle/circular,
  heavy, lazy).
- **simulate's parameters**: ``inspect.signature(simulator.api.simulate)``.
- **result: Any**: parameters named ``result`` annotated ``Any`` in ``simulator/`` (``ast``).
- **docs**: lines of ``docs/performance.md`` and ``docs/validation.md``.
- **climbs back up** (the walk from the CLI to the engine): ``python -m simulator run
  workloads/gpt-24l.txt --json -`` runs in a child under ``sys.setprofile``; calls made while a
  module is being imported (decorators, class bodies) are left out. Modules are placed on the
  floors of ``tests/test_layers.py``'s ``LAYERS`` (0 = top, the CLI). The *walk* is the order in
  which the run first enters each ``simulator`` module; a *climb back up* is a step of that walk
  into a module on a higher floor than the module entered just before it (the run went down to
  read or decide something, then had to come back up before going on down: e.g. the workload
  parsed, then the system, then ``engine.options``, then the schedule registry, then
  ``preflight``). Also reported: ``upward_call_edges``, direct calls whose caller sits on a lower
  floor than the callee (callbacks, methods of objects built above), distinct (caller function,
  callee function) pairs, through stdlib/SimPy frames.
- **timings** (skipped with ``--no-timings``), whole processes, CPU = user + sys from
  ``wait4`` (children of the child included), median of ``--repeats`` interleaved runs:
  ``pipesim run --engine evaluator --max-actions 0 --json -`` on the one-layer case of
  ``benchmarks/scaling.py`` (32 ranks, one layer per stage, M = 15,625: 1,000,000 F/B actions),
  beside a process that runs a bare SimPy loop of 1,000,000 timeouts
  (``benchmarks/timing.py:bare_loop``); the same ``pipesim run`` with ``--engine simpy``;
  ``pipesim plan`` on the generated GPT-96 model flags (TP 1-8) at ``--gpus 1024
  --global-batch-size 256`` on the H100 preset (``benchmarks/bench_plan.py``'s third case, 1,207
  candidates when measured; ``--max-work 0``: the whole space; ``-j 1``: screened in the one
  process, so its CPU is all the work), once.
"""

from __future__ import annotations

import argparse
import ast
import datetime
import importlib.util
import inspect
import json
import os
import platform
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SIM = ROOT / "simulator"
WHY_WORDS = re.compile(r"optional|start-?up|cycle|circular|heavy|lazy", re.I)
WALK_ARGV = ["run", "workloads/gpt-24l.txt", "--json", "-"]


# -- static figures --------------------------------------------------------------------------
def _lines(path: Path) -> int:
    return len(path.read_text(errors="replace").splitlines())


def lines_per_folder() -> dict[str, int]:
    out: dict[str, int] = {}
    for path in sorted(SIM.rglob("*.py")):
        rel = path.relative_to(ROOT)
        key = "simulator/*.py" if len(rel.parts) == 2 else "/".join(rel.parts[:2]) + "/"
        out[key] = out.get(key, 0) + _lines(path)
    out["simulator (total)"] = sum(v for k, v in out.items())
    for folder, pattern in (("tests", "*.py"), ("benchmarks", "*.py"), ("docs", "*")):
        files = [p for p in (ROOT / folder).rglob(pattern)
                 if p.is_file() and p.suffix not in (".png", ".svg", ".jpg", ".pyc")]
        out[f"{folder}/"] = sum(_lines(p) for p in files)
    return out


def _parsed():
    for path in sorted(SIM.rglob("*.py")):
        yield path.relative_to(ROOT).as_posix(), path.read_text(), ast.parse(path.read_text())


def long_functions() -> dict:
    found = []
    for rel, _, tree in _parsed():
        stack = [(tree, "")]
        while stack:
            node, prefix = stack.pop()
            for child in ast.iter_child_nodes(node):
                if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                    name = f"{prefix}{child.name}"
                    if not isinstance(child, ast.ClassDef):
                        n = child.end_lineno - child.lineno + 1
                        if n > 100:
                            found.append({"function": f"{rel}:{name}", "line": child.lineno,
                                          "lines": n})
                    stack.append((child, name + "."))
                else:
                    stack.append((child, prefix))
    found.sort(key=lambda f: (-f["lines"], f["function"]))
    return {"over_100": len(found), "over_120": sum(f["lines"] > 120 for f in found),
            "list": found}


def imports_in_functions() -> dict:
    total = commented = why = 0
    per_file: dict[str, int] = {}
    for rel, text, tree in _parsed():
        lines = text.splitlines()
        inside: set[int] = set()
        for fn in ast.walk(tree):
            if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
                for node in ast.walk(fn):
                    if isinstance(node, (ast.Import, ast.ImportFrom)):
                        inside.add(node.lineno)
        for lineno in inside:
            total += 1
            per_file[rel] = per_file.get(rel, 0) + 1
            here = lines[lineno - 1]
            above = lines[lineno - 2].strip() if lineno >= 2 else ""
            comment = (here.split("#", 1)[1] if "#" in here else "") + (
                above[1:] if above.startswith("#") else "")
            if comment:
                commented += 1
                if WHY_WORDS.search(comment):
                    why += 1
    return {"count": total, "with_comment": commented, "comment_says_why": why,
            "per_file": dict(sorted(per_file.items(), key=lambda kv: (-kv[1], kv[0])))}


def result_any() -> dict:
    where = []
    for rel, _, tree in _parsed():
        for node in ast.walk(tree):
            if isinstance(node, ast.arg) and node.arg == "result" and node.annotation is not None:
                ann = ast.unparse(node.annotation).strip("'\"")
                if ann == "Any":
                    where.append(f"{rel}:{node.lineno}")
    return {"count": len(where), "where": where}


def simulate_parameters() -> dict:
    sys.path.insert(0, str(ROOT))
    from simulator.api import simulate

    params = list(inspect.signature(simulate).parameters)
    return {"count": len(params), "names": params}


# -- the walk from the CLI to the engine -------------------------------------------------------
def _layers():
    spec = importlib.util.spec_from_file_location("_layers", ROOT / "tests" / "test_layers.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.layer_of, mod.MODULES


def _trace_child() -> None:
    """Run ``pipesim run`` in this process under a profile hook; print the edges as JSON."""
    sys.path.insert(0, str(ROOT))
    os.chdir(ROOT)
    layer_of, modules = _layers()
    files = {str(path): name for name, path in modules.items()}
    edges: dict[tuple[str, str, str, str], int] = {}
    first: list[str] = []
    seen: set[str] = set()

    def module_of(code) -> str | None:
        return files.get(code.co_filename)

    def hook(frame, event, arg):
        if event != "call":
            return
        code = frame.f_code
        callee = module_of(code)
        if callee is None or code.co_name == "<module>":
            return
        up = frame.f_back
        while up is not None:
            if up.f_code.co_filename.startswith("<frozen importlib"):
                return                   # import-time code (decorators, class bodies): not the run
            up = up.f_back
        if callee not in seen:
            seen.add(callee)
            first.append(callee)
        back = frame.f_back
        while back is not None and module_of(back.f_code) is None:
            back = back.f_back          # through stdlib / SimPy frames to the simulator caller
        if back is None:
            return
        caller = module_of(back.f_code)
        if caller == callee:
            return
        key = (caller, back.f_code.co_name, callee, code.co_name)
        edges[key] = edges.get(key, 0) + 1

    from simulator.cli.main import main

    out = sys.stdout
    sys.stdout = open(os.devnull, "w")
    sys.setprofile(hook)
    try:
        code = main(WALK_ARGV)
    except SystemExit as stop:
        code = stop.code
    finally:
        sys.setprofile(None)
        sys.stdout = out
    upward = []
    for (caller, cfn, callee, fn), n in sorted(edges.items()):
        if layer_of(caller) > layer_of(callee):      # LAYERS is top first: larger = lower
            upward.append({"from": f"{caller}.{cfn}", "to": f"{callee}.{fn}", "calls": n,
                           "floors": [layer_of(caller), layer_of(callee)]})
    order = [(m, layer_of(m)) for m in first]
    climbs = [f"{a} (floor {la}) -> {b} (floor {lb})"
              for (a, la), (b, lb) in zip(order, order[1:]) if lb < la]
    json.dump({"argv": ["pipesim", *WALK_ARGV], "exit_code": code,
               "module_edges": len({(a, c) for a, _, c, _ in edges}),
               "climbs_back_up": len(climbs), "climbs": climbs,
               "first_entries": [f"{m} ({n})" for m, n in order],
               "upward_call_edges": len(upward),
               "upward_calls": sum(c["calls"] for c in upward), "upward": upward}, sys.stdout)


def walk() -> dict:
    done = subprocess.run([sys.executable, __file__, "--trace-walk"], cwd=ROOT,
                          capture_output=True, text=True, timeout=300)
    if done.returncode:
        raise RuntimeError(f"trace of the walk failed: {done.stderr.strip()[-2000:]}")
    return json.loads(done.stdout)


# -- timings ------------------------------------------------------------------------------------
def _process(cmd: list[str], timeout: float = 1800.0) -> tuple[float, float, str]:
    """(CPU s of the whole child, its descendants included; wall s; stdout)."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p))
    with tempfile.TemporaryFile("w+") as fo, tempfile.TemporaryFile("w+") as fe:
        t0 = time.perf_counter()
        proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=fo, stderr=fe)
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - t0
        fo.seek(0)
        fe.seek(0)
        out, err = fo.read(), fe.read()
    if os.waitstatus_to_exitcode(status) != 0:
        raise RuntimeError(f"{' '.join(cmd[:4])}... failed: {err.strip()[-500:]}")
    return usage.ru_utime + usage.ru_stime, wall, out


BARE = ("import sys, time; sys.path.insert(0, 'benchmarks'); from timing import bare_loop; "
        "c = time.process_time(); bare_loop(1_000_000); print(time.process_time() - c)")


def timings(repeats: int) -> dict:
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from scaling import MILLION_M, ONE_LAYER_P, one_layer_workload_text

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "one_layer_p32_m15625.txt"
        path.write_text(one_layer_workload_text(ONE_LAYER_P, MILLION_M))
        run = [sys.executable, "-m", "simulator", "run", str(path), "--max-actions", "0",
               "--json", "-"]
        ev, bare, bare_loop_cpu, simpy_runs, makespans = [], [], [], [], set()
        for _ in range(repeats):                     # interleaved: the load moves all alike
            cpu, wall, out = _process(run + ["--engine", "evaluator"])
            ev.append((cpu, wall))
            makespans.add(json.loads(out)["makespan_ns"])
            cpu, wall, out = _process([sys.executable, "-c", BARE])
            bare.append((cpu, wall))
            bare_loop_cpu.append(float(out))
            cpu, wall, out = _process(run + ["--engine", "simpy"])
            simpy_runs.append((cpu, wall))
            makespans.add(json.loads(out)["makespan_ns"])

        gen = Path(tmp) / "out"
        gen.mkdir()
        plan_cmd = [sys.executable, "-m", "simulator", "plan", "--model", "gpt", "--layers", "96",
                    "--hidden", "12288", "--heads", "96", "--seq", "2048", "--gpu", "h100",
                    "--gpus", "1024", "--out", str(gen), "--global-batch-size", "256",
                    "--system", "configs/system/h100.yaml", "--max-work", "0", "-j", "1",
                    "--json", str(Path(tmp) / "p.json")]
        pcpu, pwall, _ = _process(plan_cmd)
        plan = json.loads((Path(tmp) / "p.json").read_text())

    def med(pairs, i):
        return round(statistics.median(p[i] for p in pairs), 3)

    ev_cpu, bare_cpu = med(ev, 0), med(bare, 0)
    return {
        "one_layer_case": {"ranks": ONE_LAYER_P, "microbatches": MILLION_M,
                           "actions": 2 * ONE_LAYER_P * MILLION_M,
                           "makespans_ns": sorted(makespans)},
        "repeats": repeats,
        "evaluator_run_1m": {"cpu_s": ev_cpu, "wall_s": med(ev, 1),
                             "all_cpu_s": [round(c, 3) for c, _ in ev]},
        "bare_simpy_1m_timeouts_process": {"cpu_s": bare_cpu, "wall_s": med(bare, 1),
                                           "loop_alone_cpu_s": round(
                                               statistics.median(bare_loop_cpu), 3)},
        "evaluator_over_bare_loop": round(ev_cpu / bare_cpu, 3),
        "simpy_engine_run_1m": {"cpu_s": med(simpy_runs, 0), "wall_s": med(simpy_runs, 1),
                                "all_cpu_s": [round(c, 3) for c, _ in simpy_runs]},
        "plan_gpt96_model_flags": {"candidates": len(plan["candidates"]),
                                   "best": plan["best"]["key"],
                                   "best_makespan_ns": plan["best"]["makespan_ns"],
                                   "cpu_s": round(pcpu, 2),
                                   "wall_s": round(pwall, 2)},
    }


def _git(*args: str) -> str:
    return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True).stdout.strip()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--json", metavar="PATH", help="write the figures here ('-': stdout)")
    ap.add_argument("--no-timings", action="store_true", help="static figures and the walk only")
    ap.add_argument("--repeats", type=int, default=3, help="interleaved runs per timing (3)")
    ap.add_argument("--trace-walk", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.trace_walk:
        _trace_child()
        return 0
    perf = ROOT / "docs" / "performance.md"
    data = {
        "commit": _git("rev-parse", "--short", "HEAD"),
        "simulator_changed_since_commit": bool(_git("status", "--porcelain", "--", "simulator")),
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "machine": {"python": platform.python_version(), "cpus": os.cpu_count(),
                    "load_average": [round(x, 2) for x in os.getloadavg()]},
        "lines": lines_per_folder(),
        "long_functions": long_functions(),
        "imports_in_functions": imports_in_functions(),
        "simulate_parameters": simulate_parameters(),
        "result_any": result_any(),
        "docs_lines": {"docs/performance.md": _lines(perf) if perf.exists() else None,
                       "docs/validation.md": _lines(ROOT / "docs" / "validation.md")},
        "walk_cli_to_engine": walk(),
    }
    if not args.no_timings:
        data["timings"] = timings(args.repeats)
    text = json.dumps(data, indent=1)
    if args.json and args.json != "-":
        Path(args.json).write_text(text + "\n")
    else:
        print(text)
    w = data["walk_cli_to_engine"]
    print(f"simulator {data['lines']['simulator (total)']} lines; functions > 120 lines: "
          f"{data['long_functions']['over_120']}; imports in functions: "
          f"{data['imports_in_functions']['count']}; simulate parameters: "
          f"{data['simulate_parameters']['count']}; result: Any: {data['result_any']['count']}; "
          f"performance.md: {data['docs_lines']['docs/performance.md']} lines; climbs back up: "
          f"{w['climbs_back_up']}; upward call edges: {w['upward_call_edges']}", file=sys.stderr)
    if "timings" in data:
        t = data["timings"]
        print(f"1M evaluator run {t['evaluator_run_1m']['cpu_s']} s CPU = "
              f"{t['evaluator_over_bare_loop']}x a bare SimPy loop process "
              f"({t['bare_simpy_1m_timeouts_process']['cpu_s']} s); SimPy engine "
              f"{t['simpy_engine_run_1m']['cpu_s']} s; plan "
              f"{t['plan_gpt96_model_flags']['candidates']} candidates "
              f"{t['plan_gpt96_model_flags']['wall_s']} s wall", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
