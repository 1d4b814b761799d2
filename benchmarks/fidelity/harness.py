"""Run torch.distributed.pipelining for real and hold pipesim's predictions against it.

    python -m benchmarks.fidelity.harness --out DIR [--classes A,B] [--cases uniform,...]
        [--iterations 6] [--warmup 2] [--layer-ms 4] [--no-profile]
        [--backend nccl --device cuda] [--max-load L] [--wait-quiet SECONDS]
    python -m benchmarks.fidelity.harness --out DIR --reanalyse   # refit a finished run

P = 4 gloo processes on this machine's CPU, M = 8, every schedule class on every cost case
(``cases.py``), a barrier before each step. Writes into DIR:

- ``workloads/<case>.txt``: the same model as a pipesim workload (per-layer costs in ns);
- ``raw_times.json``: per rank, the start/end of every timed step (written before analysis);
- ``traces/<case>/<class>/rank<r>.json``: per-rank profiler Chrome traces of the timed steps
  (``ITER<k>`` spans; Schedule1F1B's compute labelled ``fidelity:<stage><kind><mb>``);
- ``results.json``: per (class, case) the per-iteration times, median / min / max / spread, the
  per-rank executed order (read back from the traces) and whether it equals pipesim's (for the
  multi-stage classes also with their sends and receives: pipesim's early-receive lowering), and
  pipesim's prediction from the per-layer costs, and per rank the compute busy time over its
  known cost;
- ``calibrations/<case>/<class>.yaml``: ``pipesim calibrate`` of each class's traces (what
  ``predict.py --results DIR`` needs, since the traces are too big to keep);
- ``table.md``: the same as a markdown table; ``prediction.md``: calibrated on one class,
  the others predicted, and leave-one-out (``predict.py``).

An iteration's time is the last rank's end minus the first rank's start of that step.
Needs torch (``pip install -e ".[validate]"``).
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import sys
import time
from pathlib import Path

from .cases import BASE_NS, CASES, CLASSES, USER_PATTERN, M, P, Case, make_cases, workload_text


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _usage_error(message: str) -> None:
    print(message, file=sys.stderr)
    raise SystemExit(2)


def _names(text: str, known: dict, what: str) -> list[str]:
    names = [n.strip() for n in text.split(",") if n.strip()]
    if not names:
        _usage_error(f"--{what}: expected a comma-separated list of: {', '.join(known)}")
    for n in names:
        if n not in known:
            _usage_error(f"--{what}: unknown {n!r}; expected some of: {', '.join(known)}")
    return names


def run_live(out: Path, classes: list[str], cases: list[str], *, iterations: int, warmup: int,
             profile: bool, timeout_s: int, verbose: bool, backend: str = "gloo",
             device: str = "cpu", base_ns: int = BASE_NS) -> dict[str, dict]:
    """Spawn the P rank processes; return {"<class>/<case>": {"iter_ns": [[start, end]...] per
    rank, "trace_dir": ...}} merged over ranks."""
    import torch.multiprocessing as mp

    from .live import worker

    plan = {"out": str(out), "classes": classes, "cases": cases, "iterations": iterations,
            "warmup": warmup, "profile": profile, "timeout_s": timeout_s, "verbose": verbose,
            "backend": backend, "device": device, "base_ns": base_ns}
    mp.spawn(worker, args=(P, _free_port(), plan), nprocs=P, join=True)
    per_rank = [json.loads((out / f"rank{r}.times.json").read_text()) for r in range(P)]
    merged: dict[str, dict] = {}
    for key in per_rank[0]:
        merged[key] = {"iter_ns": [pr[key]["iter_ns"] for pr in per_rank],
                       "trace_dir": (str(Path(per_rank[0][key]["trace"]).parent)
                                     if per_rank[0][key]["trace"] else None)}
    for r in range(P):
        (out / f"rank{r}.times.json").unlink()
    return merged


def iteration_times_ms(iter_ns: list[list[list[int]]]) -> list[float]:
    """Per step: max over ranks of its end minus min over ranks of its start, in ms."""
    n = len(iter_ns[0])
    return [(max(r[k][1] for r in iter_ns) - min(r[k][0] for r in iter_ns)) / 1e6
            for k in range(n)]


def stats(times: list[float]) -> dict:
    med = statistics.median(times)
    return {"median_ms": med, "min_ms": min(times), "max_ms": max(times),
            "spread_pct": 100.0 * (max(times) - min(times)) / med if med else 0.0}


def predict_ms(workload: Path, cls_name: str) -> float:
    """pipesim's iteration time from the per-layer costs alone (default system)."""
    from simulator import simulate

    cls = CLASSES[cls_name]
    res = simulate(str(workload), schedule=cls.pipesim, pp=P, microbatches=M, vpp=cls.vpp)
    return res.makespan_ns / 1e6


def from_traces(out: Path, trace_dir: str, case: Case) -> dict:
    """What the traces say: the per-rank compute order (and whether every step agrees), and
    each rank's compute busy time over its known cost (median over steps): how much longer
    the known work took on this machine (sleep wake-ups, CPU contention)."""
    from simulator.calibration import read_traces, trace_files

    ts = read_traces(trace_files([out / trace_dir]), label_pattern=USER_PATTERN)
    orders = [ts.orders(k) for k in range(ts.n_iterations)]
    costs = case.stage_costs(ts.n_stages)
    known = [sum((c.fwd_ns + c.ig_ns + c.wg_ns) * ts.microbatches
                 for s, c in enumerate(costs) if ts.placement[s] == r) for r in range(ts.pp)]
    busy = [statistics.median(ts.timelines(k)[r]["busy_ns"] for k in range(ts.n_iterations))
            for r in range(ts.pp)]
    steps = [[rt.iterations[k].steps() for rt in ts.ranks] for k in range(ts.n_iterations)]
    return {"order": orders[0], "same_every_iteration": all(o == orders[0] for o in orders),
            "steps": steps[0], "steps_same_every_iteration": all(x == steps[0] for x in steps),
            "busy_over_known": [b / k for b, k in zip(busy, known)],
            "trace_iteration_ms": [t / 1e6 for t in ts.iteration_times_ns()]}


def calibrate_into(out: Path, trace_dir: str, case: str, cls_name: str) -> dict:
    """Fit a calibration to one class's traces; write it to calibrations/<case>/<class>.yaml
    and return the fitted figures."""
    from simulator.calibration import read_traces, trace_files
    from simulator.calibration.fit import fit

    ts = read_traces(trace_files([out / trace_dir]), label_pattern=USER_PATTERN)
    cal = fit(ts, out / "workloads" / f"{case}.txt")
    path = out / "calibrations" / case / f"{cls_name}.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(cal.to_yaml())
    return {"file": str(path.relative_to(out)), "overhead_ns": cal.overhead_ns,
            "exchange_ns": cal.exchange_ns, "latency_ns": cal.latency_ns,
            "prologue_ns": cal.prologue_ns, "epilogue_ns": cal.epilogue_ns,
            "replayed_ms": cal.replayed_iteration_ns / 1e6,
            "trace_median_ms": cal.measured_iteration_ns / 1e6}


def pipesim_order(cls_name: str) -> list[list[str]]:
    from simulator.schedules import registry

    cls = CLASSES[cls_name]
    return registry.generate(cls.pipesim, P, M, cls.vpp).as_strings()


def pipesim_steps(cls_name: str) -> list[list[str]]:
    """pipesim's lowered lists under torch's multi-stage rules (receives posted early)."""
    from simulator.schedules import registry
    from simulator.schedules.comm_pass import add_communication

    cls = CLASSES[cls_name]
    sched = registry.generate(cls.pipesim, P, M, cls.vpp)
    return add_communication(sched, early_receives=True).step_strings()


def analyse(out: Path, merged: dict[str, dict], base_ns: int = BASE_NS) -> dict[str, dict]:
    cases = make_cases(base_ns)
    results: dict[str, dict] = {}
    for key, m in merged.items():
        cls_name, case = key.split("/")
        times = iteration_times_ms(m["iter_ns"])
        cls = CLASSES[cls_name]
        row = {"class": cls_name, "case": case, "pipesim_schedule": cls.pipesim, "vpp": cls.vpp,
               "iteration_ms": times, **stats(times)}
        row["pipesim_ms"] = predict_ms(out / "workloads" / f"{case}.txt", cls_name)
        row["error_pct"] = 100.0 * (row["pipesim_ms"] - row["median_ms"]) / row["median_ms"]
        row["pipesim_command"] = (f"pipesim run workloads/{case}.txt -s {cls.pipesim} "
                                  f"--vpp {cls.vpp}")
        if m["trace_dir"]:
            got = from_traces(out, m["trace_dir"], cases[case])
            row["executed_order"] = got["order"]
            row["order_same_every_iteration"] = got["same_every_iteration"]
            row["busy_over_known"] = got["busy_over_known"]
            row["order_equals_pipesim"] = got["order"] == pipesim_order(cls_name)
            if cls.multi:    # the multi-stage runtime labels its sends and receives too
                row["lowered_order_equals_pipesim"] = (
                    got["steps_same_every_iteration"]
                    and got["steps"] == pipesim_steps(cls_name))
            row["trace_dir"] = m["trace_dir"]
            row["calibration"] = calibrate_into(out, m["trace_dir"], case, cls_name)
        results[key] = row
    return results


def rankings(results: dict[str, dict]) -> dict[str, dict[str, list[str]]]:
    """Per case: the classes fastest first, measured and predicted."""
    out = {}
    for case in dict.fromkeys(r["case"] for r in results.values()):
        rows = [r for r in results.values() if r["case"] == case]
        out[case] = {"measured": [r["class"] for r in sorted(rows, key=lambda r: r["median_ms"])],
                     "pipesim": [r["class"] for r in sorted(rows, key=lambda r: r["pipesim_ms"])]}
    return out


def table(results: dict[str, dict]) -> str:
    lines = ["| class | pipesim | case | measured median (ms) | min–max (ms) | spread % | "
             "pipesim (ms) | error % | busy / known | order = pipesim | with sends and "
             "receives = pipesim |",
             "|---|---|---|---:|---:|---:|---:|---:|---:|---|---|"]
    for r in results.values():
        sched = r["pipesim_schedule"] + (f" --vpp {r['vpp']}" if r["vpp"] > 1 else "")
        order = {True: "yes", False: "NO"}.get(r.get("order_equals_pipesim"), "–")
        lowered = {True: "yes", False: "NO"}.get(r.get("lowered_order_equals_pipesim"), "–")
        ratio = r.get("busy_over_known")
        ratio = f"{statistics.median(ratio):.3f}" if ratio else "–"
        lines.append(f"| {r['class']} | {sched} | {r['case']} | {r['median_ms']:.1f} | "
                     f"{r['min_ms']:.1f}–{r['max_ms']:.1f} | {r['spread_pct']:.1f} | "
                     f"{r['pipesim_ms']:.1f} | {r['error_pct']:+.1f} | {ratio} | {order} | "
                     f"{lowered} |")
    lines.append("")
    for case, rk in rankings(results).items():
        lines.append(f"- {case}: measured {' < '.join(rk['measured'])}; "
                     f"pipesim {' < '.join(rk['pipesim'])}")
    return "\n".join(lines) + "\n"


def wait_for_quiet(max_load: float, seconds: float, poll_s: float = 5.0) -> float:
    """Wait (up to ``seconds``) until the 1-minute load average is at most ``max_load``;
    return the seconds waited."""
    t0 = time.monotonic()
    while os.getloadavg()[0] > max_load and time.monotonic() - t0 < seconds:
        time.sleep(min(poll_s, max(0.0, seconds - (time.monotonic() - t0))))
    return time.monotonic() - t0


def load_warnings(before: float, after: float, max_load: float, waited: float) -> list[str]:
    """What the machine's load says about the measured medians (other work on the machine
    delays the ranks' wake-ups, which the loop-placed classes pay at more transfers on their
    critical path: docs/validation.md, run to run)."""
    out = []
    if before > max_load:
        out.append(f"load average {before:.2f} at the start (above {max_load:g}"
                   + (f" after waiting {waited:.0f} s" if waited >= 1 else "")
                   + "): other work on this machine slows the loop-placed classes more than the "
                   "others; compare this table only with runs at a similar load")
    elif after > max_load + 1.0:
        out.append(f"load average rose to {after:.2f} during the run (started at {before:.2f}): "
                   "other work on this machine may have slowed some classes more than others")
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.fidelity.harness",
                                 description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True, type=Path, help="output folder")
    ap.add_argument("--classes", default=",".join(CLASSES), help="torch schedule classes")
    ap.add_argument("--cases", default=",".join(CASES), help="cost cases")
    ap.add_argument("--iterations", type=int, default=6, help="timed steps (>= 5 for the table)")
    ap.add_argument("--warmup", type=int, default=2, help="untimed steps before them")
    ap.add_argument("--layer-ms", type=float, default=BASE_NS / 1e6,
                    help="known time of one layer's forward (and of each backward half) in the "
                         "uniform case")
    ap.add_argument("--no-profile", action="store_true", help="time without the profiler")
    ap.add_argument("--timeout", type=int, default=300, help="gloo timeout, seconds")
    ap.add_argument("--backend", choices=("gloo", "nccl"), default="gloo")
    ap.add_argument("--device", choices=("cpu", "cuda"), default="cpu",
                    help="cuda: rank r on GPU r (with --backend nccl); not run on the CPU CI")
    ap.add_argument("--max-load", type=float, default=None,
                    help="1-minute load average above which the run is flagged (default: half "
                         "the CPUs); other work slows the loop-placed classes more than the "
                         "others, so a loaded run's table is not comparable")
    ap.add_argument("--wait-quiet", type=float, default=0.0, metavar="SECONDS",
                    help="wait up to this long for the load to fall to --max-load first")
    ap.add_argument("--quiet", action="store_true")
    ap.add_argument("--reanalyse", action="store_true",
                    help="redo the analysis of the finished run in --out (its raw_times.json "
                         "and traces) with this checkout's pipesim, without running torch")
    a = ap.parse_args(argv)
    if a.reanalyse:
        return reanalyse(a.out, quiet=a.quiet)
    classes = _names(a.classes, CLASSES, "classes")
    cases = _names(a.cases, CASES, "cases")
    if a.iterations < 1:
        _usage_error(f"--iterations: expected a positive number, got {a.iterations}")
    if a.warmup < 0:
        _usage_error(f"--warmup: expected a number >= 0, got {a.warmup}")
    if not 0.01 <= a.layer_ms <= 1000:
        _usage_error(f"--layer-ms: expected a time in ms from 0.01 to 1000, got {a.layer_ms:g}")
    max_load = a.max_load if a.max_load is not None else 0.5 * (os.cpu_count() or 1)
    if a.max_load is not None and a.max_load <= 0:
        _usage_error(f"--max-load: expected a load average > 0, got {a.max_load:g}")
    if a.wait_quiet < 0:
        _usage_error(f"--wait-quiet: expected seconds >= 0, got {a.wait_quiet:g}")
    if a.device == "cuda":
        import torch

        if torch.cuda.device_count() < P:
            _usage_error(f"--device cuda: expected {P} CUDA devices, torch "
                         f"{torch.__version__} sees {torch.cuda.device_count()}")
    base_ns = int(round(a.layer_ms * 1e6))
    cases_run = make_cases(base_ns)
    out: Path = a.out
    (out / "workloads").mkdir(parents=True, exist_ok=True)
    for case in cases:
        (out / "workloads" / f"{case}.txt").write_text(workload_text(cases_run[case]))
    waited = wait_for_quiet(max_load, a.wait_quiet)
    t0 = time.perf_counter()
    load_before = os.getloadavg()
    try:
        merged = run_live(out, classes, cases, iterations=a.iterations, warmup=a.warmup,
                          profile=not a.no_profile, timeout_s=a.timeout, verbose=not a.quiet,
                          backend=a.backend, device=a.device, base_ns=base_ns)
    except Exception as e:   # a rank process died: its error's last line says why
        lines = [ln for ln in str(e).strip().splitlines() if ln.strip()] or [type(e).__name__]
        print(f"live run failed: {lines[-1].strip()}", file=sys.stderr)
        return 1
    load_after = os.getloadavg()
    warnings = load_warnings(load_before[0], load_after[0], max_load, waited)
    for w in warnings:
        print(f"warning: {w}", file=sys.stderr)
    (out / "raw_times.json").write_text(json.dumps(merged))   # kept even if the analysis fails
    results = analyse(out, merged, base_ns)
    import torch

    doc = {"P": P, "M": M, "iterations": a.iterations, "warmup": a.warmup,
           "profiled": not a.no_profile, "backend": a.backend, "device": a.device,
           "layer_ns": base_ns,
           "torch": torch.__version__, "cpus": os.cpu_count(),
           "loadavg_1min": [load_before[0], load_after[0]], "max_load": max_load,
           "warnings": warnings,
           "wall_s": time.perf_counter() - t0,
           "results": results, "rankings": rankings(results)}
    return write_outputs(out, doc, quiet=a.quiet)


def write_outputs(out: Path, doc: dict, *, quiet: bool) -> int:
    """results.json, table.md and (from profiled runs) prediction.md / .json; exit 1 if an
    executed order differs from pipesim's."""
    results = doc["results"]
    (out / "results.json").write_text(json.dumps(doc, indent=1))
    load = doc["loadavg_1min"]
    md = (f"torch {doc['torch']}, {doc['backend']} on {doc['device']}, P={doc['P']}, "
          f"M={doc['M']}, layer {doc['layer_ns'] / 1e6:g} ms per pass, "
          f"{doc['iterations']} timed steps after {doc['warmup']} warm-up; {doc['cpus']} CPUs, "
          f"load average {load[0]:.1f} before, {load[1]:.1f} after\n\n"
          + "".join(f"**warning:** {w}\n\n" for w in doc.get("warnings", []))
          + table(results))
    (out / "table.md").write_text(md)
    if not quiet:
        print(md)
    if doc["profiled"]:
        from . import predict

        predict.main(["--results", str(out), "--json", str(out / "prediction.json"),
                      "--md", str(out / "prediction.md")] + (["--quiet"] if quiet else []))
    bad = [k for k, r in results.items() if r.get("order_equals_pipesim") is False
           or r.get("lowered_order_equals_pipesim") is False]
    if bad:
        print(f"executed order differs from pipesim's: {', '.join(bad)}", file=sys.stderr)
        return 1
    return 0


def reanalyse(out: Path, *, quiet: bool) -> int:
    """Redo a finished run's analysis (calibrations, predictions, tables) from its
    raw_times.json and traces with this checkout's pipesim; the measured times, load and
    settings stay those of the run."""
    need = [out / "results.json", out / "raw_times.json", out / "traces"]
    missing = [str(p) for p in need if not p.exists()]
    if missing:
        _usage_error(f"--reanalyse: {', '.join(missing)} not found; expected a harness output "
                     "folder with its traces")
    doc = json.loads((out / "results.json").read_text())
    merged = json.loads((out / "raw_times.json").read_text())
    doc["results"] = analyse(out, merged, doc["layer_ns"])
    doc["rankings"] = rankings(doc["results"])
    return write_outputs(out, doc, quiet=quiet)


if __name__ == "__main__":
    sys.exit(main())
