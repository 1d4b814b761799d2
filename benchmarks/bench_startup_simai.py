"""Whole-process ``pipesim run workload_analytical.txt`` (SimAI's example file) against SimAI 1.6's C++
analytical simulator on the same file (issue 16, parts 3 and 4): pipesim installed from a wheel
with bytecode, as a user installs it; the two run in turn (A B A B ...) and the ratio is taken
pair by pair, so it holds while the shared machine's speed drifts. Then where pipesim's process
time goes (``python -X importtime`` of a run, a cProfile of a first run) and the start-up targets,
each with its figure and verdict.

    python benchmarks/bench_startup_simai.py --simai PATH/SimAI_analytical [--append]
    SIMAI_ANALYTICAL=PATH python benchmarks/bench_startup_simai.py
    python benchmarks/bench_startup_simai.py --pipesim VENV/bin/pipesim   # an existing install

Without a SimAI binary the comparison is against the figure recorded in issue 16 (0.085-0.090 s
median wall for SimAI_analytical -O3 on this machine). Without ``--pipesim`` a wheel is built
from this checkout's HEAD commit and installed, with its dependencies, into a fresh venv under a
temp dir.

What was compared: SimAI release 1.6 (commit f5efb5a9), its analytical binary built with -O3,
given by the user (this project neither contains SimAI nor says how to build it). It runs from
its checkout's root (it reads ``example/workload_analytical.txt`` and writes ``results/``) as
``SimAI_analytical -w example/workload_analytical.txt -g 9216 -nv 360 -nic 48.5 -n_p_s 8
-g_p_s 8 -r x-``. pipesim runs the same file: ``--workload PATH``, by default the copy in
``../shared/workloads-real/`` beside the checkout, else the one in the SimAI checkout.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
from datetime import datetime, timezone
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from benchmarks import startup
from benchmarks.markdown import append_section, dated_result, table, verdict

WORKLOAD = REPO.parent / "shared" / "workloads-real" / "workload_analytical.txt"
SIMAI_ARGS = ["-w", "example/workload_analytical.txt", "-g", "9216", "-nv", "360", "-nic", "48.5",
              "-n_p_s", "8", "-g_p_s", "8", "-r", "x-"]
RECORDED_SIMAI_S = (0.085, 0.090)    # issue 16: SimAI_analytical -O3, median wall, this machine
TARGET_RATIO = 1.0
HEAVY = ("numpy", "pandas", "matplotlib", "rich", "yaml", "pyarrow")

# the first run's phases, by (file suffix, function): cumulative, imports made inside included
PHASES = (("read + parse + layout", "workload/parser.py", "load_workload"),
          ("validate schedule", "schedules/validate.py", "validate"),
          ("runtime setup", "engine/runtime.py", "__init__"),
          ("SimPy run", "engine/runtime.py", "run"),
          ("summary", "metrics/summary.py", "summarize"),
          ("  SimAI terms", "metrics/simai.py", "simai_pipeline_terms"),
          ("report text", "cli/report.py", "render_run"))

# The report goes to a UTF-8 file, as a real run's stdout is: an io.StringIO (no encoding) would
# send it through click.echo and time click's import as part of the run.
PROFILE_CHILD = r"""
import cProfile, contextlib, json, os, pstats, sys
pr = cProfile.Profile()
pr.enable()
from simulator.cli.main import main
with open(os.devnull, "w", encoding="utf-8") as sink, contextlib.redirect_stdout(sink):
    rc = main(["run", sys.argv[1]])
pr.disable()
stats = pstats.Stats(pr).stats
rows = [[f, line, name, cc, nc, tt, ct] for (f, line, name), (cc, nc, tt, ct, _) in stats.items()]
print(json.dumps({"rc": rc, "rows": rows}))
"""

ORIGIN_CHILD = r"""
import importlib.util, json, sys
out = {}
for name in sys.argv[1:]:
    try:
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError):
        spec = None
    origin = (spec.origin or "") if spec else ""
    out[name] = "site-packages" in origin or "dist-packages" in origin
print(json.dumps(out))
"""


# -- the pipesim install -------------------------------------------------------------------

def install_from_wheel(where: Path) -> Path:
    """Build a wheel of this checkout's HEAD commit (the one the report names; uncommitted edits
    are not measured) and install it into a fresh venv at ``where`` with its dependencies (pip
    compiles the bytecode as it installs); returns its ``pipesim`` script."""
    src = where / "src"
    src.mkdir(parents=True)
    archive = subprocess.run(["git", "archive", "HEAD"], cwd=REPO, capture_output=True,
                             check=True).stdout
    subprocess.run(["tar", "-x", "-C", str(src)], input=archive, check=True)
    wheels = where / "wheels"
    subprocess.run([sys.executable, "-m", "pip", "wheel", str(src), "-w", str(wheels),
                    "--no-deps", "-q"], check=True, cwd=src)
    venv = where / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    py = venv / "bin" / "python"
    wheel = next(wheels.glob("pipesim-*.whl"))
    subprocess.run([str(py), "-m", "pip", "install", "-q", str(wheel)], check=True)
    ensure_bytecode(py)
    return venv / "bin" / "pipesim"


def ensure_bytecode(py: Path) -> None:
    """Compile the installed package if it has no bytecode (PYTHONDONTWRITEBYTECODE installs)."""
    code = "import simulator, os; print(os.path.dirname(simulator.__file__))"
    out = subprocess.run([str(py), "-I", "-c", code], capture_output=True, text=True, check=True,
                         env=_clean_env())
    pkg = Path(out.stdout.strip())
    if not (pkg / "__pycache__").is_dir():
        subprocess.run([str(py), "-m", "compileall", "-q", str(pkg)], check=True)


def script_python(script: Path) -> Path:
    """The interpreter a console script runs under (its ``#!`` line)."""
    first = script.read_text(errors="replace").splitlines()[0]
    if not first.startswith("#!"):
        raise SystemExit(f"--pipesim: {script} has no #! line naming its Python")
    return Path(first[2:].strip().split()[0])


def _clean_env() -> dict[str, str]:
    """The environment without PYTHONPATH (the installed copy, not this checkout, must load;
    the ``-c`` children also run with ``-I``, so the working directory is not on their path)."""
    return {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}


# -- SimAI ---------------------------------------------------------------------------------

def simai_checkout(binary: Path, given: str | None) -> Path:
    """The SimAI checkout to run from: ``given``, else the nearest parent of the binary that
    holds ``example/workload_analytical.txt``."""
    if given:
        root = Path(given)
    else:
        root = next((p for p in binary.resolve().parents
                     if (p / "example" / "workload_analytical.txt").is_file()), None)
        if root is None:
            raise SystemExit(f"--simai: no parent of {binary} holds example/workload_analytical"
                             ".txt; give the checkout with --simai-dir")
    if not (root / "example" / "workload_analytical.txt").is_file():
        raise SystemExit(f"--simai-dir: {root} has no example/workload_analytical.txt")
    (root / "results").mkdir(exist_ok=True)    # SimAI writes its CSV there and fails without it
    return root


# -- where the time goes -------------------------------------------------------------------

def import_breakdown(py: Path, script: Path, workload: Path = WORKLOAD) -> dict:
    """``-X importtime`` of one run (the least disturbed of three: the smallest total), self
    time by owner."""
    runs = []
    for _ in range(3):
        proc = subprocess.run([str(py), "-X", "importtime", str(script), "run", str(workload)],
                              capture_output=True, text=True, env=_clean_env(), cwd=REPO,
                              check=False)
        if proc.returncode != 0:
            raise RuntimeError(f"-X importtime run exited {proc.returncode}")
        entries = startup.parse_importtime(proc.stderr)
        runs.append((sum(e.self_us for e in entries), entries))
    total_us, entries = min(runs, key=lambda r: r[0])
    tops = sorted({e.name.split(".")[0] for e in entries})
    origin = json.loads(subprocess.run([str(py), "-I", "-c", ORIGIN_CHILD, *tops],
                                       capture_output=True, text=True, check=True,
                                       env=_clean_env()).stdout)
    own = sum(e.self_us for e in entries if e.name.split(".")[0] == "simulator")
    third = {}
    for e in entries:
        top = e.name.split(".")[0]
        if top != "simulator" and origin.get(top):
            third[top] = third.get(top, 0) + e.self_us
    names = {e.name for e in entries}
    return {"total_ms": total_us / 1e3, "simulator_ms": own / 1e3,
            "third_party_ms": {k: v / 1e3 for k, v in sorted(third.items(), key=lambda x: -x[1])},
            "stdlib_ms": (total_us - own - sum(third.values())) / 1e3,
            "modules": len(entries),
            "heavy": [h for h in HEAVY if any(n == h or n.startswith(h + ".") for n in names)],
            "metadata": "importlib.metadata" in names,
            "external": [(e.name, e.parent, e.cumulative_us / 1e3)
                         for e in startup.external_imports(entries)[:8]]}


def first_run_profile(py: Path, workload: Path = WORKLOAD) -> dict:
    """cProfile of ``main(["run", workload])`` in a fresh process: imports and phases."""
    proc = subprocess.run([str(py), "-I", "-c", PROFILE_CHILD, str(workload)],
                          capture_output=True, text=True, env=_clean_env(), cwd=REPO,
                          check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"profile child exited {proc.returncode}: {proc.stderr[-300:]}")
    data = json.loads(proc.stdout.splitlines()[-1])
    rows = data["rows"]
    total = max(r[6] for r in rows)
    imports = sum(r[6] for r in rows if r[2] == "_find_and_load")
    phases = []
    for label, suffix, func in PHASES:
        found = [r[6] for r in rows if r[0].replace("\\", "/").endswith(suffix) and r[2] == func]
        phases.append((label, max(found) if found else None))
    own = sorted((r for r in rows if "/simulator/" in r[0].replace("\\", "/")),
                 key=lambda r: -r[5])[:6]
    return {"total_s": total, "imports_s": imports, "phases": phases,
            "own": [(f"{r[0].replace(chr(92), '/').split('/simulator/')[-1]}:{r[1]} {r[2]}",
                     r[4], r[5]) for r in own]}


# -- the report ----------------------------------------------------------------------------

def _ms(s: float | None) -> str:
    return "-" if s is None else f"{s * 1e3:.1f} ms"


def _spread(values: list[float], fmt: str = "{:.3f}") -> str:
    return (f"{fmt.format(statistics.median(values))} "
            f"({fmt.format(min(values))}-{fmt.format(max(values))})")


def _peak(runs: list, floor_mb: float) -> str:
    """A child's peak RSS, or that it is at this process's own (a forked child starts as a copy
    of its parent, so the kernel cannot report less)."""
    peak = max(r.peak_mb for r in runs)
    return f"<= {floor_mb:.1f} MB (floor)" if peak <= floor_mb + 0.1 else f"{peak:.1f} MB"


def report(res: dict) -> tuple[str, list[tuple[str, str, bool]]]:
    a, b, floor = res["pipesim"], res["simai"], res["floor"]
    floor_mb = res.get("parent_peak_mb", 0.0)
    lines = [f"## Start-up vs SimAI_analytical {res['when']}, {res['commit']}", "",
             f"Whole process, `pipesim run workload_analytical.txt` (pipesim "
             f"installed from a wheel with bytecode, {res['install']}) against "
             + (f"SimAI_analytical -O3 (`{' '.join(['SimAI_analytical', *SIMAI_ARGS])}` from its "
                f"checkout) on the same file, {len(a)} interleaved pairs after a warm-up pair"
                if b else "the SimAI_analytical -O3 figure recorded in issue 16 "
                f"({RECORDED_SIMAI_S[0]}-{RECORDED_SIMAI_S[1]} s median wall; no binary given)")
             + f"; output {res['output']}. `python benchmarks/bench_startup_simai.py`. Python "
             f"{res['python']}, load average {res['load']:.2f} on {os.cpu_count()} CPUs. "
             "Figures: median (min-max).", ""]
    rows = [["pipesim run", _spread([r.wall_s for r in a]), _spread([r.cpu_s for r in a]),
             _peak(a, floor_mb)]]
    if b:
        rows.append(["SimAI_analytical -O3", _spread([r.wall_s for r in b]),
                     _spread([r.cpu_s for r in b]), _peak(b, floor_mb)])
        rows.append(["ratio pipesim / SimAI, pair by pair",
                     _spread(startup.pair_ratios(a, b, "wall_s"), "{:.2f}x"),
                     _spread(startup.pair_ratios(a, b, "cpu_s"), "{:.2f}x"), ""])
    rows.append(["`python -c pass` (interpreter + site)", _spread([r.wall_s for r in floor]),
                 _spread([r.cpu_s for r in floor]), ""])
    lines += [table(["process", "wall s", "CPU s", "peak RSS (max)"], rows), ""]

    imp, prof = res["imports"], res["profile"]
    third = ", ".join(f"{k} {v:.1f}" for k, v in imp["third_party_ms"].items())
    lines += ["Where pipesim's process goes. `-X importtime` of a run (self times summed, "
              f"{imp['modules']} modules): **{imp['total_ms']:.1f} ms** = simulator "
              f"{imp['simulator_ms']:.1f} + third-party {sum(imp['third_party_ms'].values()):.1f}"
              f" ({third}) + stdlib {imp['stdlib_ms']:.1f} ms. Biggest imports made by "
              "simulator modules (cumulative): "
              + ", ".join(f"{n} ({p}) {ms:.1f} ms" for n, p, ms in imp["external"]) + ".", "",
              ("cProfile of a first run in a fresh process (profiler overhead included): "
               f"{_ms(prof['total_s'])} in `main`, of which imports {_ms(prof['imports_s'])}; "
               "phases (cumulative, imports made inside them included):"), ""]
    lines += [table(["phase", "time"], [[p, _ms(t)] for p, t in prof["phases"]]), ""]
    lines += [table(["function (own time)", "calls", "own"],
                    [[f"`{n}`", f"{c:,}", _ms(t)] for n, c, t in prof["own"]]), ""]

    med_a = startup.median_of(a, "wall_s")
    if b:
        ratio = statistics.median(startup.pair_ratios(a, b, "wall_s"))
        cpu_ratio = statistics.median(startup.pair_ratios(a, b, "cpu_s"))
        first = ((f"whole-process `pipesim run` <= {TARGET_RATIO:.1f}x SimAI_analytical -O3 "
                  "(wall, median of pair ratios)"),
                 (f"{ratio:.2f}x wall ({med_a:.3f} s vs {startup.median_of(b, 'wall_s'):.3f} s)"
                  f"; {cpu_ratio:.2f}x CPU"), ratio <= TARGET_RATIO)
    else:
        lo, hi = RECORDED_SIMAI_S
        first = ((f"whole-process `pipesim run` <= {TARGET_RATIO:.1f}x SimAI_analytical -O3 "
                  f"(recorded {lo}-{hi} s)"),
                 f"{med_a:.3f} s wall = {med_a / hi:.2f}-{med_a / lo:.2f}x", med_a <= lo)
    targets = [first,
               ("`run` path imports none of " + ", ".join(HEAVY),
                "none" if not imp["heavy"] else ", ".join(imp["heavy"]), not imp["heavy"]),
               ("SimPy's `importlib.metadata` version lookup off the `run` path",
                "not imported" if not imp["metadata"] else "imported", not imp["metadata"])]
    lines += [table(["target (issue 16)", "measured", "verdict"],
                    [[t, m, verdict(ok)] for t, m, ok in targets])]
    return "\n".join(lines) + "\n", targets


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--simai", default=os.environ.get("SIMAI_ANALYTICAL"),
                    help="SimAI_analytical binary (default: $SIMAI_ANALYTICAL)")
    ap.add_argument("--simai-dir", help="SimAI checkout to run it from (default: found from "
                                        "the binary's path)")
    ap.add_argument("--pipesim", default=os.environ.get("PIPESIM_BIN"),
                    help="an installed pipesim script (default: $PIPESIM_BIN, else a wheel of "
                         "this checkout installed into a temp venv)")
    ap.add_argument("--output", choices=("pipe", "devnull"), default="pipe",
                    help="where both commands' output goes: read through a pipe and thrown away "
                         "(default; how issue 16's figures were taken) or /dev/null")
    ap.add_argument("--workload", default=str(WORKLOAD),
                    help="SimAI's workload_analytical.txt (default: ../shared/workloads-real/)")
    ap.add_argument("--pairs", type=int, default=15, help="counted pairs (default 15)")
    ap.add_argument("--append", action="store_true",
                    help="save the report (default: a new dated file in benchmarks/results/)")
    ap.add_argument("--out", default=None, help="with --append: the markdown file to append to")
    args = ap.parse_args(argv)
    if args.pairs < 1:
        ap.error(f"--pairs: expected an integer >= 1, got {args.pairs}")
    workload = Path(args.workload)
    if not workload.is_file():
        ap.error(f"--workload: {workload} is not a file (SimAI's example/workload_analytical.txt)")

    tmp = None
    try:
        if args.pipesim:
            script = Path(args.pipesim)
            if not script.is_file():
                ap.error(f"--pipesim: {script} is not a file")
            install = f"as given ({script})"
        else:
            tmp = Path(tempfile.mkdtemp(prefix="pipesim-startup-"))
            print(f"building a wheel and a venv under {tmp} ...", file=sys.stderr)
            script = install_from_wheel(tmp)
            install = "HEAD's wheel in a fresh venv"
        py = script_python(script)
        ensure_bytecode(py)
        a_cmd = ([str(script), "run", str(workload)], REPO)
        b_cmd = None
        if args.simai:
            binary = Path(args.simai)
            if not (binary.is_file() and os.access(binary, os.X_OK)):
                ap.error(f"--simai: {binary} is not an executable file")
            b_cmd = ([str(binary.resolve()), *SIMAI_ARGS], simai_checkout(binary, args.simai_dir))
        runs_a, runs_b = startup.interleaved(a_cmd, b_cmd, args.pairs,
                                             pipe=args.output == "pipe")
        floor, _ = startup.interleaved(([str(py), "-c", "pass"], REPO), None, args.pairs)
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO,
                                capture_output=True, text=True, check=False).stdout.strip() or "?"
        res = {"pipesim": runs_a, "simai": runs_b, "floor": floor, "install": install,
               "output": ("read through a pipe and thrown away" if args.output == "pipe"
                          else "written to /dev/null"),
               "when": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
               "commit": commit, "python": platform.python_version(),
               "load": os.getloadavg()[0],
               "parent_peak_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0,
               "imports": import_breakdown(py, script, workload),
               "profile": first_run_profile(py, workload)}
    finally:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)
    text, targets = report(res)
    print(text)
    for name, measured, ok in targets:
        print(f"{verdict(ok):7s} {name}: {measured}")
    if args.append:
        out = Path(args.out) if args.out else dated_result("startup-simai")
        append_section(out, text)
        print(f"appended to {out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
