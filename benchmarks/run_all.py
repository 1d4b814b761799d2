"""Run every pipesim benchmark (issue 8) and report against its targets.

    python benchmarks/run_all.py            # full run (a few minutes), saved under benchmarks/results/
    python benchmarks/run_all.py --quick    # tiny sizes, a few seconds (what the smoke test runs)
    python benchmarks/run_all.py --sections c --no-append   # only the scaling series, print only

The scaling section (c) ends with issue 16's one-layer case: the whole `pipesim run` process on
1,000,000 F/B actions (CPU, peak RSS) and the SimPy engine against the evaluator from 10k to 1M
actions with fitted exponents, each target with its figure and verdict.

Prints one markdown section to stdout and saves it, dated, as
``benchmarks/results/<date>-<time>-run-all.md`` (``--out`` to append to another file,
``--no-append`` not at all). Exit 0, or 1 if a measurement failed (its
table row says why); missing a target is a result, not a failure.
"""

from __future__ import annotations

import argparse
import datetime as dt
import importlib.util
import os
import platform
import subprocess
import sys
from pathlib import Path
from typing import Callable

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from benchmarks import markdown as md  # noqa: E402
from benchmarks import profiling, scaling, startup, timing  # noqa: E402
from simulator.errors import PipesimError  # noqa: E402

DEFAULT_WORKLOAD = REPO.parent / "shared" / "workloads-real" / "workload_analytical.txt"

# issue 8's targets
RATIO_TARGET = 1.0          # simulate() time / bare SimPy loop of the same number of layer-ops
MILLION_S_TARGET = 5.0      # 1M layer-ops, tracing off
EXPONENT_TARGET = 1.05
RSS_TARGET_MB = 300.0
SIMAI_O3_S = 0.12           # SimAI -O3 on workload_analytical.txt, whole process (long-range goal)

# issue 16's targets: the 1M one-layer-action case
MILLION_CPU_TARGET = 3.0      # s, SimPy engine, whole simulate() / whole `pipesim run`
MILLION_RSS_TARGET = 300.0    # MB
EVALUATOR_S_TARGET = 0.5      # s, the evaluator's run at 1M actions
EVALUATOR_RSS_TARGET = 100.0  # MB

SECTIONS = ("ab", "c", "d", "profile")
# which scaling point each series is profiled at: the 1M point, and ~100k for event-heavy (its
# 1M point takes about a minute under cProfile; its time is linear in actions, so shares hold)
PROFILED_POINT = {"model": -1, "event-heavy": 2}


class Report:
    """Collects the markdown parts; a failed measurement becomes a line instead of a table."""

    def __init__(self) -> None:
        self.parts: list[str] = []
        self.failed = False

    def add(self, text: str) -> None:
        self.parts.append(text)

    def run(self, what: str, fn: Callable[[], str]) -> None:
        try:
            self.add(fn())
        except Exception as err:  # a benchmark that breaks must not hide the others
            self.failed = True
            self.add(f"FAILED ({what}): {type(err).__name__}: {err}")

    def text(self) -> str:
        return "\n\n".join(self.parts) + "\n"


def machine_line(mode: str) -> str:
    import simpy

    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    load = ", load average {:.2f} {:.2f} {:.2f}".format(*os.getloadavg()) if hasattr(
        os, "getloadavg") else ""
    return (f"Machine: {cpu}, {os.cpu_count()} CPUs{load}, {platform.system()} "
            f"{platform.release()}; Python {platform.python_version()}, SimPy "
            f"{simpy.__version__}. {mode}")


def revision() -> str:
    def git(*args: str) -> str:
        proc = subprocess.run(["git", *args], cwd=REPO, capture_output=True, text=True)
        return proc.stdout.strip() if proc.returncode == 0 else ""

    sha = git("rev-parse", "--short", "HEAD") or "unknown revision"
    dirty = git("status", "--porcelain", "--", "simulator")
    return sha + (" + uncommitted changes in simulator/" if dirty else "")


# -- (a) + (b) ------------------------------------------------------------------------------
def floor_and_workload(workload: Path | None, repeats: int,
                       bare_n: int) -> tuple[str, float, float | None]:
    """Table (a, b); also the bare loop's seconds per event and the default case's median."""
    bare_s, bare_times = timing.median_seconds(lambda: timing.bare_loop(bare_n), repeats)
    per_event = bare_s / bare_n
    header = ["case", "resolved as", "layer-ops", "SimPy events", f"median of {repeats}", "min",
              "layer-ops/s", "bare loop, same count", "ratio (target ≤ 1.0)",
              "per SimPy event vs bare"]
    rows = [["(a) bare SimPy loop, one `env.timeout` per event", "-", f"{bare_n:,} timeouts",
             f"{bare_n:,}", md.seconds(bare_s), md.seconds(min(bare_times)), md.rate(bare_n, bare_s) + " events", "-", "-",
             "1.0x"]]
    notes = []
    default_s = None
    if workload is None or not workload.exists():
        notes.append(f"(b) skipped: workload {workload} not found (give --workload).")
    else:
        cases = [("default `simulate(path)`", {})]
        cases.append(("`layout=\"model\"`", {"layout": "model"}))
        if importlib.util.find_spec("simulator.workload.aicb") is not None:
            cases.append(("`layout=\"aicb\"`", {"layout": "aicb"}))
        else:
            notes.append("`layout=\"aicb\"` skipped: simulator/workload/aicb.py is not there yet.")
        for label, kwargs in cases:
            try:
                t = timing.time_simulate(str(workload), repeats, **kwargs)
            except PipesimError as err:
                if not kwargs:
                    raise
                notes.append(f"{label} skipped: {err}")
                continue
            floor, _ = timing.median_seconds(lambda: timing.bare_loop(t.layer_ops), repeats)
            ratio = t.median_s / floor
            if not kwargs:
                default_s = t.median_s
            per_ev = (f"{(t.median_s / t.events) / per_event:.1f}x" if t.events else "-")
            rows.append([f"(b) {workload.name}, {label}", t.described, f"{t.layer_ops:,}",
                         f"{t.events:,}" if t.events else "?", md.seconds(t.median_s),
                         md.seconds(min(t.times)),
                         md.rate(t.layer_ops, t.median_s), md.seconds(floor),
                         f"{ratio:.2f} ({md.verdict(ratio <= RATIO_TARGET)})", per_ev])
    text = "### (a, b) simulate() against the bare SimPy floor\n\n" + md.table(header, rows)
    if notes:
        text += "\n\n" + "\n".join(f"- {n}" for n in notes)
    return text, per_event, default_s


# -- (c) ------------------------------------------------------------------------------------
def scaling_section(series: dict[str, list[tuple[int, int, int]]], repeats: int,
                    per_event: float) -> str:
    header = ["series", "pp", "microbatches", "layers", "layer-ops", "actions",
              "median wall (runs)", "median CPU", "layer-ops/s", "vs bare loop",
              "peak RSS (after import)"]
    rows = []
    fits = []
    for name, points in series.items():
        measured = [scaling.run_point(name, pp, m, n, repeats) for pp, m, n in points]
        for p in measured:
            rows.append([name, p.pp, p.microbatches, p.layers, f"{p.layer_ops:,}",
                         f"{p.actions:,}", f"{md.seconds(p.median_s)} ({len(p.times)})",
                         md.seconds(p.cpu_s), md.rate(p.layer_ops, p.median_s),
                         f"{p.median_s / (p.layer_ops * per_event):.2f}",
                         f"{p.rss_peak_mb:.0f} MB ({p.rss_base_mb:.0f} MB)"])
        ops = [p.layer_ops for p in measured]
        exp = scaling.fit_exponent(ops, [p.median_s for p in measured])
        exp_cpu = scaling.fit_exponent(ops, [p.cpu_s for p in measured])
        big = measured[-1]
        fits.append([name, f"{exp:.3f} ({md.verdict(exp <= EXPONENT_TARGET)})", f"{exp_cpu:.3f}",
                     f"{big.layer_ops:,}",
                     f"{md.seconds(big.median_s)} ({md.verdict(big.median_s <= MILLION_S_TARGET)})"
                     if big.layer_ops >= 900_000 else f"{md.seconds(big.median_s)} (not 1M)",
                     f"{big.rss_peak_mb:.0f} MB ({md.verdict(big.rss_peak_mb <= RSS_TARGET_MB)})"])
    fit_table = md.table(["series", "exponent, wall (target ≤ 1.05)", "exponent, CPU",
                          "largest point, layer-ops",
                          "time (target ≤ 5 s at 1M)", "peak RSS (target ≤ 300 MB)"], fits)
    return ("### (c) scaling with uniform_workload (tracing off, fresh process per point)\n\n"
            "`vs bare loop` = time / (layer-ops x the bare loop's time per event).\n\n"
            + md.table(header, rows) + "\n\n" + fit_table)


# -- (c), the one-layer case ---------------------------------------------------------------
def million_section(quick: bool) -> str:
    """Part of the scaling section (c). The one-layer case (32 ranks, 1F1B, pp_comm 0): the
    whole `pipesim run` process at 1M actions, and both engines from 10k to 1M actions with
    fitted exponents."""
    P = scaling.ONE_LAYER_P
    ms = scaling.QUICK_ENGINE_SERIES_M if quick else scaling.ENGINE_SERIES_M
    big_m = ms[-1] if quick else scaling.MILLION_M
    proc = scaling.whole_process_run(P, big_m)
    series = scaling.engine_series(ms)
    rows = []
    for engine, points in series.items():
        for p in points:
            rows.append([engine, f"{p['actions']:,}", md.seconds(p["cpu_s"]),
                         md.seconds(p["run_cpu_s"]),
                         f"{p['rss_peak_mb']:.0f} MB ({p['rss_base_mb']:.0f} MB)",
                         f"{p['run_mem_mb']:.1f} MB", f"{p['makespan_ns']:.0f}"])
    acts = [p["actions"] for p in series["simpy"]]
    exp = {e: scaling.fit_exponent(acts, [p["cpu_s"] for p in pts]) for e, pts in series.items()}
    exp_run = {e: scaling.fit_exponent(acts, [p["run_cpu_s"] for p in pts])
               for e, pts in series.items()}
    simpy_big, ev_big = series["simpy"][-1], series["evaluator"][-1]
    gap = max(abs(a["makespan_ns"] - b["makespan_ns"])
              for a, b in zip(series["simpy"], series["evaluator"]))
    at = f"{simpy_big['actions']:,} actions"
    full = simpy_big["actions"] >= 1_000_000

    def judged(value: float, target: float, text: str) -> str:
        return f"{text} ({md.verdict(value <= target) if full else 'not 1M'})"

    targets = [
        [f"`pipesim run` whole process, {proc.actions:,} actions: CPU",
         f"≤ {MILLION_CPU_TARGET} s",
         md.seconds(proc.cpu_s) + f" (wall {md.seconds(proc.wall_s)})",
         md.verdict(proc.cpu_s <= MILLION_CPU_TARGET) if proc.actions >= 1_000_000 else "not 1M"],
        [f"`pipesim run` whole process, {proc.actions:,} actions: peak RSS",
         f"≤ {MILLION_RSS_TARGET:.0f} MB", f"{proc.rss_mb:.0f} MB",
         md.verdict(proc.rss_mb <= MILLION_RSS_TARGET) if proc.actions >= 1_000_000
         else "not 1M"],
        [f"SimPy engine, simulate() + summary at {at}: CPU", f"≤ {MILLION_CPU_TARGET} s",
         md.seconds(simpy_big["cpu_s"]),
         judged(simpy_big["cpu_s"], MILLION_CPU_TARGET, "").strip(" ()")],
        [f"SimPy engine at {at}: peak RSS", f"≤ {MILLION_RSS_TARGET:.0f} MB",
         f"{simpy_big['rss_peak_mb']:.0f} MB",
         judged(simpy_big["rss_peak_mb"], MILLION_RSS_TARGET, "").strip(" ()")],
        ["SimPy engine, exponent of CPU vs actions (simulate() + summary)", "≤ 1.05",
         f"{exp['simpy']:.3f} (run alone {exp_run['simpy']:.3f})",
         md.verdict(exp["simpy"] <= 1.05)],
        [f"evaluator's run at {at}: CPU", f"≤ {EVALUATOR_S_TARGET} s",
         md.seconds(ev_big["run_cpu_s"]),
         judged(ev_big["run_cpu_s"], EVALUATOR_S_TARGET, "").strip(" ()")],
        [f"evaluator's run at {at}: memory it allocates (peak, records included)",
         f"≤ {EVALUATOR_RSS_TARGET:.0f} MB", f"{ev_big['run_mem_mb']:.1f} MB "
         f"(whole simulate() + summary process: {ev_big['rss_peak_mb']:.0f} MB peak RSS, the "
         "schedule's own actions included)",
         judged(ev_big["run_mem_mb"], EVALUATOR_RSS_TARGET, "").strip(" ()")],
        ["evaluator, exponent of CPU vs actions (simulate() + summary)", "-",
         f"{exp['evaluator']:.3f} (run alone {exp_run['evaluator']:.3f})", "-"],
        ["evaluator = SimPy engine (largest makespan difference over the points)", "0 ns",
         f"{gap:g} ns", md.verdict(gap == 0)],
    ]
    return (f"### (c) scaling, the one-layer case: {P} ranks, one layer per stage, 1F1B, v = 1, "
            "pp_comm 0 (fresh process per point)\n\n"
            + md.table(["target", "goal", "measured", "verdict"], targets) + "\n\n"
            "`simulate()` CPU = schedule build + validation + compile + run + summary; "
            "`run` = the engine alone on a compiled Runtime.\n\n"
            + md.table(["engine", "actions", "simulate() + summary CPU", "run CPU",
                        "peak RSS (after import)", "run's own allocations", "makespan ns"],
                       rows))


# -- (d) ------------------------------------------------------------------------------------
def startup_section(workload: Path | None, repeats: int, simulate_s: float | None) -> str:
    py = sys.executable
    base_cmd, shown = startup.pipesim_command()
    rows = []
    floor, floor_cpu = startup.wall_seconds([py, "-c", "pass"], repeats)
    rows.append(["`python -c pass` (interpreter floor)", md.seconds(floor), md.seconds(floor_cpu),
                 "-"])
    imp, imp_cpu = startup.wall_seconds([py, "-c", "import simulator"], repeats)
    rows.append(["`python -c \"import simulator\"`", md.seconds(imp), md.seconds(imp_cpu),
                 f"import simulator ≈ {md.seconds(imp - floor)} wall, "
                 f"{md.seconds(imp_cpu - floor_cpu)} CPU"])
    parts = ["### (d) whole process (subprocess, start-up included)"]
    if workload is not None and workload.exists():
        run_s, run_cpu = startup.wall_seconds(base_cmd + ["run", str(workload)], repeats)
        note = (f"{run_s / SIMAI_O3_S:.1f}x (wall), {run_cpu / SIMAI_O3_S:.1f}x (CPU) SimAI -O3's "
                f"{SIMAI_O3_S} s (long-range goal)")
        if simulate_s is not None:
            note += f"; in-process simulate() is {md.seconds(simulate_s)} of it"
        rows.append([f"`{shown} run {workload.name}`", md.seconds(run_s), md.seconds(run_cpu),
                     note])
        entries = startup.importtime(["-m", "simulator", "run", str(workload)])
    else:
        entries = startup.importtime(["-c", "import simulator"])
    parts.append(md.table(["command", f"median wall of {repeats}", "median CPU (user+sys)",
                           "note"], rows))
    top = sorted((e for e in entries if e.level == 0), key=lambda e: -e.cumulative_us)[:8]
    ext = startup.external_imports(entries)[:10]
    parts.append("`-X importtime` of the same run, top-level imports:\n\n" + md.table(
        ["module", "cumulative"], [[e.name, f"{e.cumulative_us / 1e3:.1f} ms"] for e in top]))
    parts.append("Outside packages imported directly by `simulator` modules (what lazy imports "
                 "could save):\n\n" + md.table(
                     ["module", "imported by", "cumulative"],
                     [[e.name, e.parent, f"{e.cumulative_us / 1e3:.1f} ms"] for e in ext]))
    return "\n\n".join(parts)


# -- profiles -------------------------------------------------------------------------------
def profile_section(label: str, fn: Callable[[], object]) -> str:
    def simulate_and_summarize() -> None:   # freeing the result is part of its cost
        fn().summary

    prof = profiling.profile_call(simulate_and_summarize)
    phase_rows = [[name, md.seconds(s), f"{100 * s / prof.total_s:.0f}%" if s is not None else "-"]
                  for name, s in prof.phases]
    hot_rows = [[f"`{where}`", f"{calls:,}", md.seconds(own), f"{100 * own / prof.total_s:.0f}%",
                 md.seconds(cum)] for where, calls, own, cum in prof.hotspots]
    return (f"#### Profile: {label} (cProfile, simulate() + summary, {md.seconds(prof.total_s)} "
            "under the profiler)\n\n"
            + md.table(["phase", "cumulative", "share"], phase_rows) + "\n\n"
            + md.table(["function (own time)", "calls", "own", "share", "cumulative"], hot_rows))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="tiny sizes, one repeat (smoke test)")
    ap.add_argument("--repeats", type=int, default=None, help="runs per median (default 5, quick 1)")
    ap.add_argument("--workload", type=Path, default=DEFAULT_WORKLOAD,
                    help=f"the real workload for (b), (d) and the profile (default {DEFAULT_WORKLOAD})")
    ap.add_argument("--out", type=Path, default=None,
                    help="markdown file to append to (default: a new dated file in benchmarks/results/)")
    ap.add_argument("--no-append", action="store_true", help="print only")
    ap.add_argument("--sections", default=",".join(SECTIONS),
                    help=f"comma-separated subset of {','.join(SECTIONS)} (default: all)")
    args = ap.parse_args(argv)
    if args.repeats is not None and args.repeats < 1:
        ap.error(f"--repeats: expected a positive integer, got {args.repeats}")
    wanted = [x.strip() for x in args.sections.split(",") if x.strip()]
    unknown = [x for x in wanted if x not in SECTIONS]
    if unknown or not wanted:
        ap.error(f"--sections: expected a comma-separated subset of {','.join(SECTIONS)}, "
                 f"found {args.sections!r}")
    repeats = args.repeats or (1 if args.quick else 5)
    series = scaling.QUICK_SERIES if args.quick else scaling.SERIES
    bare_n = 20_000 if args.quick else 1_000_000
    workload = args.workload if args.workload.exists() else None

    now = dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    rep = Report()
    rep.add(f"## Run {now} ({'quick' if args.quick else 'full'}), {revision()}")
    rep.add(machine_line(f"Repeats per median: {repeats}. Sections: {', '.join(wanted)}."))
    per_event: float | None = None
    simulate_s: float | None = None
    if "ab" in wanted:
        try:
            # these runs are short: triple the repeats for a steadier median on a shared machine
            text, per_event, simulate_s = floor_and_workload(args.workload, 3 * repeats, bare_n)
            rep.add(text)
        except Exception as err:  # reported like Report.run does
            rep.failed = True
            rep.add(f"FAILED ((a, b)): {type(err).__name__}: {err}")
    if "c" in wanted:
        if per_event is None:
            s, _ = timing.median_seconds(lambda: timing.bare_loop(bare_n), repeats)
            per_event = s / bare_n
        rep.run("(c)", lambda: scaling_section(series, repeats, per_event))
        rep.run("(c, one-layer case)", lambda: million_section(args.quick))
    if "d" in wanted:
        rep.run("(d)", lambda: startup_section(workload, repeats, simulate_s))
    if "profile" in wanted:
        from simulator import simulate
        from simulator.workload import uniform_workload

        rep.add("### Profiles")
        if workload is not None:
            rep.run(f"profile {workload.name}", lambda: profile_section(
                f"{workload.name}, default", lambda: simulate(str(workload))))
            rep.run(f"profile {workload.name} model", lambda: profile_section(
                f"{workload.name}, layout=\"model\"",
                lambda: simulate(str(workload), layout="model")))
        for name, points in series.items():
            pp, m, n = points[PROFILED_POINT[name]]
            rep.run(f"profile {name}", lambda pp=pp, m=m, n=n, name=name: profile_section(
                f"{name} series, pp={pp} M={m} layers={n}",
                lambda: simulate(uniform_workload(n, pp=pp, ga=m))))
    text = rep.text()
    sys.stdout.write(text)
    if not args.no_append:
        md.append_section(args.out or md.dated_result("run-all"), text)
    return 1 if rep.failed else 0


if __name__ == "__main__":
    sys.exit(main())
