"""pipesim against published runs held out from the model's design
(benchmarks/data/published-runs-extra.json): other schedules (zero bubble, interleaved),
published peak memory, and another GPU (Megatron-Core's H100 weak-scaling table, TFLOP/s per
GPU by Megatron-LM's own FLOP formula, with its size trend).

Every run goes the way bench_published_runs.py takes the 18 runs of
../shared/published-runs/runs.json (the same workload_text and run_pipesim, so a change to how
that benchmark builds or runs a workload applies here too: re-run, do not re-write): the workload
generated from the run's shape, its stated ``stage_layers`` split, then ``pipesim run FILE
--layout model -s SCHEDULE --pp P --vpp V -m MICROBATCHES --system configs/system/<gpu>.yaml
--engine evaluator``. Nothing is tuned to these runs.

    python benchmarks/bench_heldout_runs.py
    python benchmarks/bench_heldout_runs.py --record benchmarks/results/DATE-heldout-runs.json

Prints, per run, predicted against measured throughput (samples per GPU per second: global
batch / (iteration time x GPUs)) and peak memory (GB, 10^9 bytes, the largest of the ranks);
median and worst |error| of each; per setting (one model, one microbatch count), each
schedule's speed-up over 1F1B in points (100 x (throughput / 1F1B's - 1)), predicted against
measured; whether the schedules of a setting are ranked as measured (every pair whose measured
throughputs differ ordered the same way); and, per run, the share of the predicted time that
data-parallel and tensor-parallel collectives and Megatron DDP's optimizer step take (the run
again with each made free: bench_published_runs.made_free_shares).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_published_runs as published  # noqa: E402  (the one way a run is built and run)

REPO = published.REPO
DEFAULT_RUNS = REPO / "benchmarks" / "data" / "published-runs-extra.json"
# the pipeline's point-to-point transfers made free: the flat links and, where the system has a
# cluster topology (configs/system/a100.yaml), its intra- and inter-node links, which carry the
# p2p there; the expressible held-out runs are TP 1 and DP 1, so no collective rides them
P2P_FREE = tuple(a for key in ("links", "topology.intra_node", "topology.inter_node")
                 for a in ("--set", f"{key}.bandwidth_gbps=1e9", "--set", f"{key}.latency_ns=0"))
BASELINE = "1F1B"      # the schedule speed-ups are taken over (published_schedule)


def load_runs(path: Path) -> list[dict]:
    """The runs of ``path``; one line naming the run and the field where one is missing."""
    doc = json.loads(path.read_text())
    need = ("id", "group", "layers", "hidden", "heads", "ffn", "vocab", "seq", "micro_batch",
            "global_batch", "tp", "pp", "dp", "vpp", "gpu", "precision", "schedule",
            "recompute", "sequence_parallel", "flash_attention", "measured", "source",
            "assumptions", "megatron_args", "gpus")
    for i, run in enumerate(doc["runs"]):
        for key in need:
            if key not in run:
                raise ValueError(f"{path}: run {i} ({run.get('id', '?')}): no field {key!r}")
        if "stage_layers" in run:
            if (len(run["stage_layers"]) != run["pp"] * run["vpp"]
                    or sum(run["stage_layers"]) != run["layers"]):
                raise ValueError(f"{path}: run {run['id']}: stage_layers must be pp x vpp "
                                 f"chunks summing to layers {run['layers']}")
    return doc["runs"]


def predict(run: dict, tmp: Path, shares: bool = True, what_if: tuple[str, ...] = ()) -> dict:
    """One run: predicted throughput, peak memory, bubble; with ``shares`` the DP and TP
    collectives' shares of the predicted time; ``what_if``: more ``pipesim run`` arguments
    for every run (``--set KEY=VALUE`` pairs: a sensitivity, not a prediction)."""
    if run.get("not_expressible"):
        return {"id": run["id"], "group": run["group"],
                "schedule": run.get("published_schedule", run["schedule"]),
                "measured": run["measured"], "exit": None,
                "error_text": "not expressible: " + run["not_expressible"]}
    if run.get("torchtitan_job"):
        res, text = run_torchtitan(run, tmp, what_if), None
    else:
        text = published.workload_text(run, "kernel")
        path = tmp / f"{run['id']}.txt"
        path.write_text(text)
        res = published.run_pipesim(path, run, what_if)
    row = {"id": run["id"], "group": run["group"],
           "schedule": run.get("published_schedule", run["schedule"]),
           "measured": run["measured"], "exit": res["exit"]}
    data = res["json"]
    if "out_of_memory" in run["measured"]:
        # the source's run ran out of memory: the check is that the prediction does too
        row["oom_as_measured"] = res["exit"] == 4
        return row
    if res["exit"] != 0 or not data:
        row["error_text"] = ("out of memory" if res["exit"] == 4
                             else f"exit {res['exit']}: {' '.join(res['error'])}")
        return row
    t = published.iteration_ns(data) / 1e9
    row["predicted_time_s"] = t
    row["bubble_ratio"] = data.get("bubble_ratio")
    row["predicted_samples_per_gpu_s"] = run["global_batch"] / (t * run["gpus"])
    row["predicted_peak_memory_gb"] = data["peak_memory_bytes"] / 1e9
    m = run["measured"]
    if "samples_per_gpu_s" in m:
        row["throughput_error"] = row["predicted_samples_per_gpu_s"] / m["samples_per_gpu_s"] - 1
    elif "tokens_per_gpu_s" in m:      # the source's count of tokens, no FLOP formula
        row["predicted_tokens_per_gpu_s"] = run["global_batch"] * run["seq"] / (t * run["gpus"])
        row["throughput_error"] = row["predicted_tokens_per_gpu_s"] / m["tokens_per_gpu_s"] - 1
    elif "model_tflops_per_gpu" in m:
        # the source's own FLOP count over the predicted time, against its figure
        row["predicted_tflops_per_gpu"] = megatron_flops(run) / (t * run["gpus"]) / 1e12
        row["throughput_error"] = row["predicted_tflops_per_gpu"] / m["model_tflops_per_gpu"] - 1
    if "peak_memory_gb" in m:
        row["memory_error"] = row["predicted_peak_memory_gb"] / m["peak_memory_gb"] - 1
    if "derived" in run and "bubble_rate" in run["derived"]:
        mid = data["ranks"][run["pp"] // 2]
        row["middle_rank_bubble"] = mid.get("bubble_ratio")
        row["bubble_as_source"] = bubble_as_source(data, mid)
        row["source_bubble_rate"] = run["derived"]["bubble_rate"]
    if "stage_ms" in m:
        row.update(stage_times(run, data))
    if shares and text is not None:
        for what, share in published.made_free_shares(text, path, run, tmp,
                                                      published.iteration_ns(data)).items():
            row[f"{what}_share"] = share
        # the pipeline's point-to-point transfers made free: links without cost
        other = published.run_pipesim(path, run, what_if + P2P_FREE)
        if other["exit"] == 0:
            row["p2p_share"] = (t - published.iteration_ns(other["json"]) / 1e9) / t
    return row


def run_torchtitan(run: dict, tmp: Path, what_if: tuple[str, ...] = ()) -> dict:
    """A run given as a torchtitan job: ``pipesim run --torchtitan JOB --gpus N`` on the run's
    GPU preset (the shape from the job's llama3 flavor, or the run's ``shape_flags``)."""
    job = tmp / f"{run['id']}.toml"
    job.write_text(run["torchtitan_job"])
    return published.invoke(["run", "--torchtitan", str(job), "--gpus", str(run["gpus"]),
                             *run.get("shape_flags", ()), "--system",
                             str(REPO / "configs" / "system" / f"{run['gpu']}.yaml"),
                             "--engine", "evaluator", "--max-actions", "0", "--json", "-",
                             *what_if])


def bubble_as_source(data: dict, mid: dict) -> float:
    """The bubble rate as the source computes it (its scheduler, zerobubble/scheduler/zb.py:
    the cost is the largest of the stages' own spans, each from its first F's start to its last
    W's end, so a stage's wait for its first input is not counted), against a middle rank's
    compute: 1 - busy / max own span."""
    spans = [r["busy_ns"] / (1 - r["bubble_ratio_own"]) for r in data["ranks"]
             if r["busy_ns"] and r["bubble_ratio_own"] < 1]
    return 1 - mid["busy_ns"] / max(spans)


def source_model_excess(runs: list[dict]) -> dict:
    """What the source's own numbers say of its runs, no pipesim in it: per schedule, the
    measured iteration (global batch / (samples per GPU per second x GPUs)) less the source's
    own model of it, m (T_F + T_B + T_W) / (1 - its bubble rate) with the setting's profiled
    times (its Table 9), per microbatch (ms): the runtime's cost the profile and the schedule
    leave out."""
    profiled = {r["group"]: r["measured"]["stage_ms"] for r in runs
                if "stage_ms" in r["measured"]}
    per: dict[str, list[float]] = {}
    for r in runs:
        ms = profiled.get(r["group"])
        if ms is None or "bubble_rate" not in r.get("derived", {}):
            continue
        m = r["global_batch"] // (r["micro_batch"] * r["dp"])
        measured = r["global_batch"] / (r["measured"]["samples_per_gpu_s"] * r["gpus"])
        model = m * (ms["F"] + ms["B"] + ms["W"]) / 1e3 / (1 - r["derived"]["bubble_rate"])
        per.setdefault(r.get("published_schedule", r["schedule"]), []).append(
            (measured - model) / m * 1e3)
    return {name: {"runs": len(v), "median_ms": statistics.median(v), "min_ms": min(v),
                   "max_ms": max(v)} for name, v in per.items()}


def megatron_flops(run: dict) -> float:
    """FLOPs of one iteration by Megatron-LM's num_floating_point_operations (core_r0.8.0, the
    runs' flops_formula "megatron"): 12 B s l h^2 ((1 + G/A + s/h) q/h + (f/h) k g + V/(2lh))."""
    if run.get("flops_formula") != "megatron":
        raise ValueError(f"run {run['id']}: model_tflops_per_gpu needs flops_formula megatron")
    B, s, l, h, V = run["global_batch"], run["seq"], run["layers"], run["hidden"], run["vocab"]
    heads, groups = run["heads"], run.get("kv_heads", run["heads"])
    q = (h // heads) * heads / h
    gated = 1.5 if run["model"] in ("llama", "moe") else 1.0
    return 12 * B * s * l * h * h * ((1 + groups / heads + s / h) * q
                                     + run["ffn"] / h * gated + V / (2 * l * h))


WEAK_SCALING = "mcore-h100-"   # Megatron-Core's H100 weak-scaling series (TFLOP/s per GPU)
TORCHTITAN = "titan-"           # torchtitan's FSDP2 table (docs/performance.md, 64 A100s)


def size_trend(rows: list[dict], prefix: str = WEAK_SCALING) -> dict:
    """Pairs of one weak-scaling series (ids starting ``prefix``) more than 3 % apart in
    measured TFLOP/s per GPU: how many the prediction orders as measured."""
    series = [r for r in rows if r["id"].startswith(prefix) and "predicted_tflops_per_gpu" in r]
    ok, pairs, wrong = published.ordered_pairs(
        series, lambda r: r["measured"]["model_tflops_per_gpu"],
        lambda r: r["predicted_tflops_per_gpu"])
    return {"pairs": pairs, "ordered": ok, "misordered": wrong}


def checkpointing_order(rows: list[dict]) -> dict:
    """torchtitan's table: within a setting (model, batch), the pairs of activation
    checkpointing modes more than 3 % apart in measured tokens per GPU per second, and how
    many the prediction orders as measured."""
    ok = pairs = 0
    wrong: list[str] = []
    by_group: dict[str, list[dict]] = {}
    for r in rows:
        if r["id"].startswith(TORCHTITAN) and "predicted_tokens_per_gpu_s" in r:
            by_group.setdefault(r["group"], []).append(r)
    for members in by_group.values():
        o, n, w = published.ordered_pairs(members, lambda r: r["measured"]["tokens_per_gpu_s"],
                                          lambda r: r["predicted_tokens_per_gpu_s"])
        ok, pairs, wrong = ok + o, pairs + n, wrong + w
    return {"pairs": pairs, "ordered": ok, "misordered": wrong}


def stage_times(run: dict, data: dict) -> dict:
    """A middle rank's compute per microbatch (ms): forward, and backward (input and weight
    gradients together), beside the source's profiled T_F and T_B + T_W; the errors."""
    micro = run["global_batch"] // (run["micro_batch"] * run["dp"])
    rank = data["ranks"][run["pp"] // 2]
    f = rank["forward_ns"] / micro / 1e6
    bw = rank["backward_ns"] / micro / 1e6
    ms = run["measured"]["stage_ms"]
    return {"predicted_stage_ms": {"F": f, "B+W": bw},
            "stage_f_error": f / ms["F"] - 1, "stage_bw_error": bw / (ms["B"] + ms["W"]) - 1}


def evaluate(runs: list[dict], shares: bool = True,
             what_if: tuple[str, ...] = ()) -> list[dict]:
    with tempfile.TemporaryDirectory() as tmp:
        return [predict(run, Path(tmp), shares, what_if) for run in runs]


def _abs_stats(values: list[float]) -> dict:
    if not values:
        return {"runs": 0, "median": None, "worst": None, "mean": None}
    a = [abs(v) for v in values]
    return {"runs": len(a), "median": statistics.median(a), "worst": max(a),
            "mean": statistics.mean(a)}


def speedups(rows: list[dict]) -> list[dict]:
    """Per setting and schedule other than 1F1B: the speed-up over the setting's 1F1B in
    points, measured and predicted, and their difference."""
    out = []
    by_group: dict[str, list[dict]] = {}
    for r in rows:
        if "samples_per_gpu_s" in r["measured"]:
            by_group.setdefault(r["group"], []).append(r)
    for group, members in by_group.items():
        base = next((r for r in members if r["schedule"] == BASELINE), None)
        if base is None or "predicted_samples_per_gpu_s" not in base:
            continue
        mb, pb = base["measured"]["samples_per_gpu_s"], base["predicted_samples_per_gpu_s"]
        for r in members:
            if r is base or "predicted_samples_per_gpu_s" not in r:
                continue
            meas = 100 * (r["measured"]["samples_per_gpu_s"] / mb - 1)
            pred = 100 * (r["predicted_samples_per_gpu_s"] / pb - 1)
            out.append({"group": group, "schedule": r["schedule"], "measured_points": meas,
                        "predicted_points": pred, "difference_points": pred - meas})
    return out


def rankings(rows: list[dict]) -> list[dict]:
    """Per setting: the schedules by measured and by predicted throughput (fastest first),
    and whether every pair whose measured throughputs differ is ordered as measured."""
    by_group: dict[str, list[dict]] = {}
    for r in rows:
        if "predicted_samples_per_gpu_s" in r and "samples_per_gpu_s" in r["measured"]:
            by_group.setdefault(r["group"], []).append(r)
    out = []
    for group, members in by_group.items():
        if len(members) < 2:
            continue      # one schedule: nothing to rank
        meas = sorted(members, key=lambda r: -r["measured"]["samples_per_gpu_s"])
        pred = sorted(members, key=lambda r: -r["predicted_samples_per_gpu_s"])
        pairs = wrong = 0
        misordered = []
        for i, a in enumerate(members):
            for b in members[i + 1:]:
                ma, mb = a["measured"]["samples_per_gpu_s"], b["measured"]["samples_per_gpu_s"]
                if ma == mb:
                    continue
                pairs += 1
                if (ma < mb) != (a["predicted_samples_per_gpu_s"]
                                 < b["predicted_samples_per_gpu_s"]):
                    wrong += 1
                    misordered.append(f"{a['schedule']} / {b['schedule']}")
        out.append({"group": group, "measured": [r["schedule"] for r in meas],
                    "predicted": [r["schedule"] for r in pred], "pairs": pairs,
                    "ordered": pairs - wrong, "as_measured": wrong == 0,
                    "misordered": misordered})
    return out


def summarize(rows: list[dict]) -> dict:
    """The figures the issue's held-out targets name: throughput and memory error (median /
    worst |error|), zero-bubble speed-ups over 1F1B (median / worst |difference| in points),
    the settings ranked as measured."""
    thr = [r["throughput_error"] for r in rows if "throughput_error" in r]
    mem = [r["memory_error"] for r in rows if "memory_error" in r]
    sp = speedups(rows)
    zb = [s["difference_points"] for s in sp if s["schedule"].startswith("ZB")]
    inter = [s["difference_points"] for s in sp if not s["schedule"].startswith("ZB")]
    rk = rankings(rows)
    bub = [r["bubble_as_source"] - r["source_bubble_rate"] for r in rows
           if r.get("bubble_as_source") is not None and "source_bubble_rate" in r]
    p2p = [r["p2p_share"] for r in rows if "p2p_share" in r]
    stage_f = [r["stage_f_error"] for r in rows if "stage_f_error" in r]
    stage_bw = [r["stage_bw_error"] for r in rows if "stage_bw_error" in r]
    by_schedule = {}
    for name in sorted({r["schedule"] for r in rows}):
        by_schedule[name] = _abs_stats([r["throughput_error"] for r in rows
                                        if r["schedule"] == name and "throughput_error" in r])
    return {
        "throughput": _abs_stats(thr) | {
            "out_of_memory": sum(1 for r in rows if r.get("error_text") == "out of memory"),
            "not_expressible": sum(1 for r in rows
                                   if r.get("error_text", "").startswith("not expressible")),
            "not_predicted": sum(1 for r in rows if "error_text" in r)},
        "throughput_by_schedule": by_schedule,
        "throughput_by_source": {
            "zero-bubble (A100)": _abs_stats([r["throughput_error"] for r in rows
                                              if r["id"].startswith("zb-")
                                              and "throughput_error" in r]),
            "Megatron-Core weak scaling (H100)": _abs_stats(
                [r["throughput_error"] for r in rows
                 if r["id"].startswith(WEAK_SCALING) and "throughput_error" in r]),
            "torchtitan FSDP2 (A100)": _abs_stats([r["throughput_error"] for r in rows
                                                   if r["id"].startswith(TORCHTITAN)
                                                   and "throughput_error" in r])},
        "out_of_memory_as_measured": {
            "runs": sum(1 for r in rows if "oom_as_measured" in r),
            "as_measured": sum(1 for r in rows if r.get("oom_as_measured"))},
        "weak_scaling_trend": size_trend(rows),
        "checkpointing_order": checkpointing_order(rows),
        "peak_memory": _abs_stats(mem),
        "bubble_as_source_minus_source": _abs_stats(bub) | {
            "signed_median": statistics.median(bub) if bub else None},
        "p2p_share": _abs_stats(p2p),
        "dp_share": _abs_stats([r["dp_share"] for r in rows if "dp_share" in r]),
        "tp_share": _abs_stats([r["tp_share"] for r in rows if "tp_share" in r]),
        "step_share": _abs_stats([r["step_share"] for r in rows if "step_share" in r]),
        "stage_forward": _abs_stats(stage_f) | {"signed_median": statistics.median(stage_f)
                                                if stage_f else None},
        "stage_backward": _abs_stats(stage_bw) | {"signed_median": statistics.median(stage_bw)
                                                  if stage_bw else None},
        "zb_speedup_points": _abs_stats(zb),
        "interleaved_speedup_points": _abs_stats(inter),
        "ranked_as_measured": {"settings": len(rk),
                               "as_measured": sum(1 for g in rk if g["as_measured"]),
                               "pairs": sum(g["pairs"] for g in rk),
                               "pairs_ordered": sum(g["ordered"] for g in rk)},
    }


def _pct(x) -> str:
    return "-" if x is None else f"{100 * x:.1f} %"


def report(rows: list[dict]) -> str:
    lines = ["| run | measured samples/GPU/s | predicted | error | measured GB | predicted GB "
             "| error | bubble, mean (as the source counts it) | source's bubble | p2p share |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        m = r["measured"]
        if "oom_as_measured" in r:
            lines.append(f"| {r['id']} | out of memory (measured) | "
                         + ("out of memory" if r["oom_as_measured"] else "fits")
                         + " | - | - | - | - | - | - | - |")
            continue
        if "error_text" in r:
            lines.append(f"| {r['id']} | {m.get('samples_per_gpu_s', '-')} | {r['error_text']} "
                         "| - | - | - | - | - | - | - |")
            continue
        lines.append(
            f"| {r['id']} | {m.get('samples_per_gpu_s', '-')} | "
            f"{r['predicted_samples_per_gpu_s']:.2f} | {_pct(r.get('throughput_error'))} | "
            f"{m.get('peak_memory_gb', '-')} | {r['predicted_peak_memory_gb']:.1f} | "
            f"{_pct(r.get('memory_error'))} | {_pct(r.get('bubble_ratio'))} "
            f"({_pct(r.get('bubble_as_source'))}) | {_pct(r.get('source_bubble_rate'))} | "
            f"{_pct(r.get('p2p_share'))} |")
    lines += ["", "| setting | schedule | measured speed-up over 1F1B | predicted | difference |",
              "|---|---|---:|---:|---:|"]
    for s in speedups(rows):
        lines.append(f"| {s['group']} | {s['schedule']} | {s['measured_points']:+.1f} | "
                     f"{s['predicted_points']:+.1f} | {s['difference_points']:+.1f} |")
    lines += ["", "| setting | measured order | predicted order | as measured |",
              "|---|---|---|---|"]
    for g in rankings(rows):
        lines.append(f"| {g['group']} | {' > '.join(g['measured'])} | "
                     f"{' > '.join(g['predicted'])} | "
                     f"{'yes' if g['as_measured'] else 'no: ' + ', '.join(g['misordered'])} |")
    lines += ["", summary_text(summarize(rows))]
    return "\n".join(lines)


def summary_text(s: dict) -> str:
    t, m, z, i, k = (s["throughput"], s["peak_memory"], s["zb_speedup_points"],
                     s["interleaved_speedup_points"], s["ranked_as_measured"])
    out = [f"throughput: median |error| {_pct(t['median'])}, worst {_pct(t['worst'])} over "
           f"{t['runs']} runs" + (f"; {t['out_of_memory']} predicted out of memory"
                                  if t["out_of_memory"] else "")
           + (f"; {t['not_expressible']} not expressible" if t["not_expressible"] else "")]
    for name, st in s["throughput_by_schedule"].items():
        out.append(f"  {name}: median {_pct(st['median'])}, worst {_pct(st['worst'])} "
                   f"({st['runs']} runs)")
    for name, st in s["throughput_by_source"].items():
        if st["runs"]:
            out.append(f"  {name}: median {_pct(st['median'])}, worst {_pct(st['worst'])} "
                       f"({st['runs']} runs)")
    tr = s["weak_scaling_trend"]
    if tr["pairs"]:
        out.append(f"  weak-scaling size trend (pairs > 3 % apart in measured TFLOP/s): "
                   f"{tr['ordered']} of {tr['pairs']} ordered as measured"
                   + (f"; misordered: {', '.join(tr['misordered'])}" if tr["misordered"]
                      else ""))
    ck = s["checkpointing_order"]
    if ck["pairs"]:
        out.append(f"  torchtitan's activation checkpointing modes (pairs > 3 % apart in "
                   f"measured tokens/GPU/s): {ck['ordered']} of {ck['pairs']} ordered as "
                   "measured" + (f"; misordered: {', '.join(ck['misordered'])}"
                                 if ck["misordered"] else ""))
    out.append(f"peak memory: median |error| {_pct(m['median'])}, worst {_pct(m['worst'])} "
               f"over {m['runs']} runs")
    oom = s["out_of_memory_as_measured"]
    if oom["runs"]:
        out.append(f"runs the source reports out of memory, predicted out of memory: "
                   f"{oom['as_measured']} of {oom['runs']}")
    for key, what in (("stage_forward", "forward"), ("stage_backward", "backward (B + W)")):
        st = s[key]
        if st["runs"]:
            out.append(f"a middle stage's {what} per microbatch against the profiled time: "
                       f"median {100 * st['signed_median']:+.1f} %, worst |error| "
                       f"{_pct(st['worst'])} over {st['runs']} settings")
    b = s["bubble_as_source_minus_source"]
    if b["runs"]:
        out.append(f"the bubble as the source computes it (the largest stage's own span) minus "
                   f"its computed bubble rate: median "
                   f"{100 * b['signed_median']:+.1f} points, worst |difference| "
                   f"{100 * b['worst']:.1f} over {b['runs']} runs")
    for key, what in (("p2p_share", "pipeline p2p"), ("dp_share", "DP collectives"),
                      ("tp_share", "TP collectives"),
                      ("step_share", "the optimizer steps (Megatron's DDP)")):
        st = s[key]
        if st["runs"]:
            out.append(f"share of the predicted time that {what} take (made free): median "
                       f"{_pct(st['median'])}, largest {_pct(st['worst'])}")
    if z["runs"]:
        out.append(f"zero-bubble speed-ups over 1F1B: median |difference| {z['median']:.1f} "
                   f"points, worst {z['worst']:.1f} over {z['runs']}")
    if i["runs"]:
        out.append(f"interleaved speed-ups over 1F1B: median |difference| {i['median']:.1f} "
                   f"points, worst {i['worst']:.1f} over {i['runs']}")
    out.append(f"schedules ranked as measured: {k['as_measured']} of {k['settings']} settings "
               f"({k['pairs_ordered']} of {k['pairs']} pairs)")
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    import datetime

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--runs", type=Path, default=DEFAULT_RUNS, help="the runs' JSON")
    ap.add_argument("--record", type=Path, default=None,
                    help="write the rows and the summary as JSON here (docs/make_validation.py "
                         "reads the newest benchmarks/results/*-heldout-runs.json)")
    ap.add_argument("--no-shares", action="store_true",
                    help="skip the runs with the DP / TP collectives made free")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                    help="a what-if: this system override (pipesim run --set) on every run, "
                         "e.g. runtime.action_overhead_ns.F=700000; a sensitivity of the "
                         "figures to one constant, never a prediction (needs --no-shares; "
                         "its record must not be named *-heldout-runs.json)")
    args = ap.parse_args(argv)
    if args.set and not args.no_shares:
        print("bench_heldout_runs: --set: needs --no-shares (the shares' runs take no what-if)",
              file=sys.stderr)
        return 2
    if args.set and args.record and args.record.name.endswith("-heldout-runs.json"):
        print(f"bench_heldout_runs: --record {args.record}: a what-if (--set) is not the "
              "prediction docs/validation.md reads; name it otherwise, e.g. "
              "DATE-heldout-whatif-NAME.json", file=sys.stderr)
        return 2
    if not args.runs.is_file():
        print(f"bench_heldout_runs: --runs: no file {args.runs}", file=sys.stderr)
        return 2
    try:
        runs = load_runs(args.runs)
    except (ValueError, KeyError, json.JSONDecodeError) as e:
        print(f"bench_heldout_runs: {e}", file=sys.stderr)
        return 2
    what_if = tuple(a for kv in args.set for a in ("--set", kv))
    if args.set:
        # a bad key or value is refused once, here, not by each of the runs
        from simulator.cli.run_impl import parse_assignments
        from simulator.errors import ConfigError
        from simulator.system.config import load_system

        try:
            for gpu in sorted({r["gpu"] for r in runs}):
                load_system(str(REPO / "configs" / "system" / f"{gpu}.yaml")).with_overrides(
                    parse_assignments(tuple(args.set), "--set"), "--set")
        except ConfigError as e:
            print(f"bench_heldout_runs: {e}", file=sys.stderr)
            return 2
    rows = evaluate(runs, shares=not args.no_shares, what_if=what_if)
    print(report(rows))
    if published.internal_errors(rows):
        return 1
    excess = source_model_excess(runs)
    for name, e in excess.items():
        print(f"the source's measured iteration less its own model of it ({name}): median "
              f"{e['median_ms']:.1f} ms a microbatch ({e['min_ms']:.1f} to {e['max_ms']:.1f}, "
              f"{e['runs']} runs)")
    if args.record:
        doc = {"date": datetime.date.today().isoformat(), "commit": published._commit(),
               "runs_file": str(args.runs.resolve().relative_to(REPO))
               if args.runs.resolve().is_relative_to(REPO) else str(args.runs),
               "rows": rows, "speedups": speedups(rows), "rankings": rankings(rows),
               "summary": summarize(rows), "source_model_excess": excess,
               **({"what_if": args.set} if args.set else {})}
        args.record.write_text(json.dumps(doc, indent=1) + "\n")
        print(f"wrote {args.record}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
