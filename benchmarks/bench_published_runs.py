"""pipesim against published, measured GPU training runs (../shared/published-runs/runs.json).

Each run is tried as a user would, from its launch settings alone, nothing tuned: the workload
generated from the run's shape, precision and sequence parallelism, with a whole-layer
``stage_layers:`` split (layers / (pp x vpp) per chunk, the remainder on the first chunks), then
``pipesim run FILE --layout model -s SCHEDULE --pp P --vpp V -m MICROBATCHES --recompute R
--system configs/system/<gpu>.yaml --engine evaluator``. Selective recompute is generated with
``selective_recompute`` (the attention core's forward recomputed in the backward, its scores
not kept) and run with ``--recompute none`` (the rest of the layer keeps its activations).

    python benchmarks/bench_published_runs.py                  # the kernel-level model
    python benchmarks/bench_published_runs.py --compute flat   # one 0.50 efficiency (before)
    python benchmarks/bench_published_runs.py --record results/DATE-published-runs.json

Prints predicted against measured per run, mean / median / worst |error| per table, the size
trend (the pairs of runs more than 3 % apart in measured TFLOP/s per GPU, ordered as measured?),
and the share of each predicted time that the summary says is tensor- and data-parallel
communication not hidden behind compute.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import statistics
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

DEFAULT_RUNS = REPO.parent / "shared" / "published-runs" / "runs.json"
SCHEDULES = {"1f1b": "1f1b", "interleaved-1f1b": "interleaved-1f1b"}
FLAT_EFFICIENCY = 0.50     # gpus.py's A100 constant: the model before kernels


def stage_split(layers: int, chunks: int) -> list[int]:
    base, extra = divmod(layers, chunks)
    return [base + (1 if i < extra else 0) for i in range(chunks)]


def workload_text(run: dict, compute: str) -> str:
    from simulator.workload.generator import ModelSpec, ParallelSpec, render
    from simulator.workload.gpus import gpu_preset

    model = ModelSpec(run["model"], run["layers"], run["hidden"], run["heads"], run["seq"],
                      run["micro_batch"], ffn=run["ffn"], vocab=run["vocab"])
    ga = run["global_batch"] // (run["micro_batch"] * run["dp"])
    par = ParallelSpec(tp=run["tp"], pp=run["pp"], vpp=run["vpp"], ga=ga, dp=run["dp"],
                       sequence_parallel=run["sequence_parallel"],
                       flash_attention=run["flash_attention"], precision=run["precision"],
                       selective_recompute=run["recompute"] == "selective")
    eff = FLAT_EFFICIENCY if compute == "flat" else None
    text = render(model, par, gpu_preset(run["gpu"]), "model", eff)
    header, rest = text.split("\n", 1)
    split = " ".join(map(str, stage_split(run["layers"], run["pp"] * run["vpp"])))
    return f"{header} stage_layers: {split}\n{rest}"


def model_flops(run: dict) -> float:
    """The source's FLOPs per iteration (runs.json's flops_formulas)."""
    B, s, l, h, V = run["global_batch"], run["seq"], run["layers"], run["hidden"], run["vocab"]
    return 96 * B * s * l * h * h * (1 + s / (6 * h) + V / (16 * l * h))


def run_pipesim(path: Path, run: dict) -> dict:
    from simulator.cli.main import main

    ga = run["global_batch"] // (run["micro_batch"] * run["dp"])
    recompute = "full" if run["recompute"] == "full" else "none"
    args = ["run", str(path), "--layout", "model", "-s", SCHEDULES[run["schedule"]],
            "--pp", str(run["pp"]), "--vpp", str(run["vpp"]), "-m", str(ga),
            "--recompute", recompute, "--system", str(REPO / "configs" / "system" /
                                                      f"{run['gpu']}.yaml"),
            "--engine", "evaluator", "--json", "-"]
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(args)
        except SystemExit as e:
            code = e.code if isinstance(e.code, int) else 1
    data = json.loads(out.getvalue()) if out.getvalue().strip() else {}
    return {"exit": code, "json": data, "error": err.getvalue().strip().splitlines()[-1:],
            "args": args}


def comm_share(data: dict) -> dict:
    """Exposed TP and DP communication as shares of the makespan, where the summary has them."""
    share = {}
    ms = data.get("makespan_ns") or 0
    for key in ("exposed_tp_ns", "exposed_dp_ns"):
        if key in data and ms:
            share[key] = data[key] / ms
    return share


def evaluate(runs_path: Path, compute: str) -> list[dict]:
    runs = json.loads(runs_path.read_text())["runs"]
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for run in runs:
            path = Path(tmp) / f"{run['id']}.txt"
            path.write_text(workload_text(run, compute))
            res = run_pipesim(path, run)
            row = {"id": run["id"], "group": run["group"], "exit": res["exit"],
                   "error": res["error"], "measured": run["measured"]}
            data = res["json"]
            if res["exit"] == 0 and data:
                t = data["makespan_ns"] / 1e9
                row["predicted_time_s"] = t
                row["bubble_ratio"] = data.get("bubble_ratio")
                if "iteration_time_s" in run["measured"]:
                    row["metric"] = "iteration_time_s"
                    row["predicted"] = t
                else:
                    row["metric"] = "tflops_per_gpu"
                    row["predicted"] = model_flops(run) / (t * run["gpus"]) / 1e12
                m = run["measured"][row["metric"]]
                row["error"] = (row["predicted"] - m) / m
            elif res["exit"] == 4:
                row["predicted"] = None
                row["error_text"] = "out of memory"
            rows.append(row)
    return rows


def _stats(errs: list[float]) -> tuple[float, float, float]:
    a = [abs(e) for e in errs]
    return statistics.mean(a), statistics.median(a), max(a)


def size_trend(rows: list[dict], runs: list[dict]) -> tuple[int, int, list[str]]:
    """Pairs of Narayanan's runs more than 3 % apart in measured TFLOP/s per GPU: how many the
    prediction orders as measured."""
    nara = [r for r in rows if r["id"].startswith("nara") and r.get("predicted") is not None]
    ok, total, wrong = 0, 0, []
    for i, a in enumerate(nara):
        for b in nara[i + 1:]:
            ma, mb = a["measured"]["tflops_per_gpu"], b["measured"]["tflops_per_gpu"]
            if abs(ma - mb) / min(ma, mb) <= 0.03:
                continue
            total += 1
            if (ma < mb) == (a["predicted"] < b["predicted"]):
                ok += 1
            else:
                wrong.append(f"{a['id']} / {b['id']}")
    return ok, total, wrong


def report(rows: list[dict], compute: str) -> str:
    lines = [f"compute model: {compute}", "",
             "| run | measured | predicted | error | bubble |", "|---|---:|---:|---:|---:|"]
    for r in rows:
        metric = "s" if r["id"].startswith("kort") else "TFLOP/s"
        m = next(iter(r["measured"].values()))
        if r.get("predicted") is None:
            why = r.get("error_text") or f"exit {r['exit']}: {' '.join(r['error'])}"
            lines.append(f"| {r['id']} | {m} {metric} | {why} | - | - |")
            continue
        lines.append(f"| {r['id']} | {m} {metric} | {r['predicted']:.2f} {metric} | "
                     f"{100 * r['error']:+.1f} % | {100 * (r['bubble_ratio'] or 0):.1f} % |")
    lines.append("")
    for name, prefix in (("Korthikanti Table 5 (iteration time)", "kort"),
                         ("Narayanan Table 1 (TFLOP/s per GPU)", "nara")):
        errs = [r["error"] for r in rows if r["id"].startswith(prefix)
                and r.get("predicted") is not None]
        failed = sum(1 for r in rows if r["id"].startswith(prefix) and r.get("predicted") is None)
        if errs:
            mean, med, worst = _stats(errs)
            lines.append(f"{name}: mean |error| {100 * mean:.1f} %, median {100 * med:.1f} %, "
                         f"worst {100 * worst:.1f} % over {len(errs)} runs"
                         + (f"; {failed} not predicted" if failed else ""))
    ok, total, wrong = size_trend(rows, [])
    lines.append(f"size trend (Narayanan, pairs > 3 % apart): {ok} of {total} ordered as measured"
                 + (f"; misordered: {', '.join(wrong)}" if wrong else ""))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--runs", type=Path, default=DEFAULT_RUNS, help="runs.json")
    ap.add_argument("--compute", choices=("kernel", "flat"), default="kernel",
                    help="kernel: the per-op model; flat: one 0.50 efficiency (the model before)")
    ap.add_argument("--record", type=Path, default=None, help="write the rows as JSON here")
    args = ap.parse_args(argv)
    if not args.runs.is_file():
        print(f"bench_published_runs: --runs: no file {args.runs}", file=sys.stderr)
        return 2
    rows = evaluate(args.runs, args.compute)
    print(report(rows, args.compute))
    if args.record:
        args.record.write_text(json.dumps({"compute": args.compute, "rows": rows}, indent=1)
                               + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
