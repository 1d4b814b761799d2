"""Run torch.distributed.pipelining for real and measure each rank's memory.

    python -m benchmarks.memory.harness --out DIR [--schedules A,B] [--shapes uniform,...]
        [--microbatches 8,12] [--warmup 1] [--iterations 2] [--keep-traces]
    python -m benchmarks.memory.harness --out DIR --reanalyse    # from DIR's traces again

P = 4 gloo processes on this machine's CPU; the 7 torch schedule classes and pipesim's CSV
schedules on torch's runtime (``cases.py``), M = 8 and 12, three model shapes. Each
configuration runs under its own memory profiler (``live.py``). Per rank, from the profiler's
``[memory]`` events (``simulator.calibration.memory_trace``): the peak of the allocator's
``Total Allocated`` over the labelled steps and over the whole run, the weights and the
non-weight peak (peak - weights - the training data handed to ``step()``), and per (stage,
kind) what an action keeps, frees and needs above its start. Beside them, pipesim's peak given
the measured per-block stash and parameter bytes. Writes into DIR: ``results.json``,
``table.md``, ``csv/`` (the pipesim CSVs torch ran), ``traces/`` (deleted unless
``--keep-traces``: ~1-3 MB per configuration and rank).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
from pathlib import Path

from ..fidelity.harness import _free_port, _names, _usage_error  # one argument reader
from .cases import ALL_SHAPES, LAYERS, MICROBATCHES, P, SCHEDULES, SHAPES, USER_PATTERN, \
    pipesim_schedule, \
    workload_text


def configs(out: Path, schedules: list[str], shapes: list[str], mbs: list[int]) -> list[dict]:
    """Every (shape, M, schedule), with the CSV a pipesim schedule runs from."""
    from simulator.schedules.csv_io import write_schedule_csv

    out_cfgs = []
    for shape in shapes:
        for m in mbs:
            for name in schedules:
                s = SCHEDULES[name]
                cfg = {"key": f"{shape}/m{m}/{name}", "schedule": name, "shape": shape,
                       "microbatches": m}
                if s.csv:
                    path = out / "csv" / f"{name}-m{m}.csv"
                    path.parent.mkdir(parents=True, exist_ok=True)
                    write_schedule_csv(pipesim_schedule(s, m), path)
                    cfg["csv"] = str(path)
                out_cfgs.append(cfg)
    return out_cfgs


def run_live(out: Path, cfgs: list[dict], *, warmup: int, iterations: int, timeout_s: int,
             verbose: bool, return_outputs: bool = True) -> dict[str, list[dict]]:
    """Spawn the P rank processes; return {key: [per-rank info]}."""
    import torch.multiprocessing as mp

    from .live import worker

    plan = {"out": str(out), "configs": cfgs, "warmup": warmup, "iterations": iterations,
            "timeout_s": timeout_s, "verbose": verbose, "return_outputs": return_outputs}
    mp.spawn(worker, args=(P, _free_port(), plan), nprocs=P, join=True)
    per_rank = [json.loads((out / f"rank{r}.info.json").read_text()) for r in range(P)]
    for r in range(P):
        (out / f"rank{r}.info.json").unlink()
    return {key: [pr[key] for pr in per_rank] for key in per_rank[0]}


def measure_blocks(shapes: list[str]) -> dict[str, list[dict]]:
    from .live import measure_block

    return {name: [measure_block(ALL_SHAPES[name], b) for b in range(LAYERS)] for name in shapes}


def predict(shape: str, m: int, sched: str, blocks: list[dict]) -> list[float] | None:
    """pipesim's per-rank peak from the measured per-block stash and parameter bytes (4 B per
    parameter for the weight and 4 B for its gradient); None where the blocks differ (pipesim's
    memory keys give every layer the same stash and parameters)."""
    import tempfile

    from simulator import simulate

    if len({(b["stash_bytes"], b["param_bytes"]) for b in blocks}) != 1:
        return None
    s = SCHEDULES[sched]
    b = blocks[0]
    system = {"memory": {"bytes_per_param": 8, "params_per_layer": b["param_bytes"] / 4,
                         "activation_bytes_per_layer": b["stash_bytes"]}}
    with tempfile.TemporaryDirectory() as d:
        wl = Path(d) / "w.txt"
        wl.write_text(workload_text(ALL_SHAPES[shape], m))
        res = simulate(str(wl), schedule=pipesim_schedule(s, m), system=system, pp=P,
                       microbatches=m, vpp=s.vpp)
    return [float(r["peak_memory_bytes"]) for r in res.to_dict()["ranks"]]


def analyse(out: Path, merged: dict[str, list[dict]], blocks: dict[str, list[dict]]) -> dict:
    from simulator.calibration.forward_ops import split_backward_keeps, weight_transients
    from simulator.calibration.memory_retention import read_retention
    from simulator.calibration.memory_trace import read_memory
    from simulator.calibration.traces import TraceError, read_rank

    results = {}
    for key, ranks in merged.items():
        shape, mtxt, sched = key.split("/")
        m = int(mtxt[1:])
        label = USER_PATTERN if sched == "Schedule1F1B" else None
        row = {"shape": shape, "microbatches": m, "schedule": sched,
               "pipesim_schedule": SCHEDULES[sched].pipesim, "vpp": SCHEDULES[sched].vpp,
               "ranks": []}
        paths = [out / info["trace"] for info in ranks]
        datas = [json.loads(path.read_text()) for path in paths]
        rts = [read_rank(path, d, rank=r, label_pattern=label)
               for r, (path, d) in enumerate(zip(paths, datas))]
        for r, info in enumerate(ranks):
            mem = read_memory(paths[r], datas[r], rank=r, label_pattern=label,
                              rank_trace=rts[r])
            peak = mem.peak_bytes
            row["ranks"].append({
                "rank": r, "stages": info["stages"], "weight_bytes": info["weight_bytes"],
                "data_bytes": info["data_bytes"], "peak_bytes": peak,
                "peak_whole_run_bytes": mem.peak_whole_bytes, "basis": mem.basis,
                "non_weight_peak_bytes": peak - info["weight_bytes"] - info["data_bytes"],
                "static_bytes": mem.static_bytes,
                "per_action": {f"{s}{k}": v for (s, k), v in mem.per_action().items()}})
        ret = read_retention(paths, ALL_SHAPES[shape].pp_comm, m, label_pattern=label,
                             datas=datas, rank_traces=rts)
        row["retention"] = {"kept_outputs": ret.kept_outputs, "sends_held": ret.sends_held,
                            "recv_buffers": ret.recv_buffers, "loss_outside": ret.loss_outside,
                            "evidence": list(ret.evidence)}
        try:    # traces recorded with record_shapes: the forward's operators
            keeps, wts = {}, {}
            for r, path in enumerate(paths):
                keeps.update(split_backward_keeps(path, r, label_pattern=label,
                                                  data=datas[r], rank_trace=rts[r]))
                wts.update(weight_transients(path, r, label_pattern=label, data=datas[r],
                                             rank_trace=rts[r]))
            row["split_backward_keeps"] = {str(k): v for k, v in sorted(keeps.items())}
            row["weight_transients"] = {str(k): v for k, v in sorted(wts.items())}
        except TraceError:
            pass
        pred = predict(shape, m, sched, blocks[shape])
        if pred is not None:
            for rr, p in zip(row["ranks"], pred):
                rr["pipesim_peak_bytes"] = p
                rr["pipesim_error_pct"] = 100.0 * (p - rr["peak_bytes"]) / rr["peak_bytes"]
                rr["pipesim_non_weight_bytes"] = p - rr["weight_bytes"]
        results[key] = row
    return results


def _kb(b: float) -> str:
    return f"{b / 1024:.0f}"


def table(results: dict, blocks: dict[str, list[dict]]) -> str:
    lines = ["Per rank r0 / r1 / r2 / r3, in KiB (1024 B). peak: the allocator's Total Allocated "
             "over the labelled steps; non-weight: peak - weights - the data handed to step(); "
             "pipesim: its peak given the measured per-block stash and parameters (8 B per "
             "parameter: weight + gradient; '–' where the blocks differ).", "",
             "| shape | M | schedule | peak | non-weight peak | pipesim peak | pipesim error % |",
             "|---|---:|---|---|---|---|---|"]
    for r in results.values():
        rk = r["ranks"]
        peak = " / ".join(_kb(x["peak_bytes"]) for x in rk)
        nw = " / ".join(_kb(x["non_weight_peak_bytes"]) for x in rk)
        if "pipesim_peak_bytes" in rk[0]:
            ps = " / ".join(_kb(x["pipesim_peak_bytes"]) for x in rk)
            err = " / ".join(f"{x['pipesim_error_pct']:+.0f}" for x in rk)
        else:
            ps = err = "–"
        lines.append(f"| {r['shape']} | {r['microbatches']} | {r['schedule']} | {peak} | {nw} | "
                     f"{ps} | {err} |")
    lines += ["", "Per block (measured alone): " + "; ".join(
        f"{name}: stash {sorted({b['stash_bytes'] for b in bl})} B, parameters "
        f"{sorted({b['param_bytes'] for b in bl})} B" for name, bl in blocks.items())]
    lines += ["", "Ranking by the largest rank's peak (smallest first):"]
    groups: dict[tuple, list] = {}
    for r in results.values():
        groups.setdefault((r["shape"], r["microbatches"]), []).append(r)
    for (shape, m), rows in groups.items():
        meas = sorted(rows, key=lambda r: max(x["peak_bytes"] for x in r["ranks"]))
        lines.append(f"- {shape}, M = {m}: " + " < ".join(
            f"{r['schedule']} ({_kb(max(x['peak_bytes'] for x in r['ranks']))})" for r in meas))
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.memory.harness",
                                 description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True, type=Path)
    ap.add_argument("--schedules", default=",".join(SCHEDULES))
    ap.add_argument("--shapes", default=",".join(SHAPES),
                    help=f"of {', '.join(ALL_SHAPES)} (default: the MLP shapes)")
    ap.add_argument("--microbatches", default=",".join(map(str, MICROBATCHES)))
    ap.add_argument("--warmup", type=int, default=1, help="profiled, unlabelled steps first")
    ap.add_argument("--iterations", type=int, default=2, help="labelled steps (ITER<k>)")
    ap.add_argument("--timeout", type=int, default=300, help="gloo timeout, seconds")
    ap.add_argument("--return-outputs", default="true", choices=("true", "false"),
                    help="what each step() is given: whether the last stage keeps its outputs "
                         "to return them (torch's default: true)")
    ap.add_argument("--keep-traces", action="store_true")
    ap.add_argument("--reanalyse", action="store_true",
                    help="redo the analysis from DIR's raw.json and traces (no torch run)")
    ap.add_argument("--quiet", action="store_true")
    a = ap.parse_args(argv)
    out = a.out
    if a.reanalyse:
        raw = json.loads((out / "raw.json").read_text())
        merged, blocks = raw["ranks"], raw["blocks"]
    else:
        schedules = _names(a.schedules, SCHEDULES, "schedules")
        shapes = _names(a.shapes, ALL_SHAPES, "shapes")
        try:
            mbs = [int(x) for x in a.microbatches.split(",") if x.strip()]
        except ValueError:
            _usage_error(f"--microbatches: expected comma-separated numbers, got "
                         f"{a.microbatches!r}")
        if not mbs or any(m < P for m in mbs):
            _usage_error(f"--microbatches: expected numbers >= {P}, got {a.microbatches!r}")
        if a.iterations < 1 or a.warmup < 1:
            _usage_error("--iterations and --warmup: expected at least 1 (the first step "
                         "allocates torch's buffers)")
        out.mkdir(parents=True, exist_ok=True)
        cfgs = configs(out, schedules, shapes, mbs)
        blocks = measure_blocks(shapes)
        ro = a.return_outputs == "true"
        merged = run_live(out, cfgs, warmup=a.warmup, iterations=a.iterations,
                          timeout_s=a.timeout, verbose=not a.quiet, return_outputs=ro)
        import torch
        (out / "raw.json").write_text(json.dumps(
            {"ranks": merged, "blocks": blocks, "torch": torch.__version__,
             "return_outputs": ro,
             "warmup": a.warmup, "iterations": a.iterations,
             "load_average": os.getloadavg()}, indent=1))
    results = analyse(out, merged, blocks)
    (out / "results.json").write_text(json.dumps(results, indent=1))
    text = table(results, blocks)
    (out / "table.md").write_text(text)
    if not a.quiet:
        print(text)
    if not a.keep_traces and not a.reanalyse and (out / "traces").exists():
        shutil.rmtree(out / "traces")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
