"""Calibrate pipesim's memory model on ONE torch class's measurements, predict every other
class's per-rank peak, and hold the predictions against the measured peaks.

    python -m benchmarks.memory.predict [--results DIR] [--on ScheduleZBVZeroBubble]
        [--markdown OUT.md] [--json OUT.json]

For each shape of the harness run in DIR (default: the newest under benchmarks/results/memory-*)
the calibration class's per-(stage, kind) kept and transient bytes (what
``simulator.calibration.memory_trace`` read from its profiler trace, M = 8) are fitted by
``simulator.calibration.memory_fit``; every (class, M) of that shape is then simulated on
torch's runtime rules (``--p2p torch``: single-stage for GPipe and 1F1B, multi-stage for the
rest, CSV schedules included) with the model's parameters, fp32 weights and gradients and no
optimizer state, as the harness ran. Compared: each rank's peak less the training data handed
to the first stage (left out on both sides, as pipesim does not model the data). A shape whose
blocks differ in size (heavy-last) gives each row its parameters in the workload, and the fit
(on that shape's own traces, whose stages have both sizes) its bytes per parameter. Needs no
torch.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from benchmarks.memory.cases import ALL_SHAPES, LAYERS, P, SCHEDULES, SHAPES, \
    pipesim_schedule, workload_text  # noqa: E402
from simulator import simulate  # noqa: E402
from simulator.calibration.memory_fit import fit_memory  # noqa: E402
from simulator.system.config import system_from_dict  # noqa: E402
from simulator.workload.partition import partition  # noqa: E402
from simulator.workload.parser import parse_workload_text  # noqa: E402

KINDS = "FBIW"


def _per_action(config: dict) -> dict[tuple[int, str], tuple[float, float]]:
    out = {}
    for rank in config["ranks"]:
        for key, v in rank["per_action"].items():
            stage, kind = key[:-1], key[-1]
            if stage.isdigit() and kind in KINDS:
                out[(int(stage), kind)] = (v["kept"], v["transient"])
    return out


def loss_outside(results: dict, shape: str, on: str) -> int:
    """What the loss keeps after the last stage's forward span in class ``on``'s traces
    (M = 8), as the run recorded it (memory_retention); a run recorded before that reading
    takes the harness's loss rule where torch computes the loss after the span (its
    single-stage schedules: ``Shape.loss_saved``) and 0 on the multi-stage runtime, which
    computes it inside (the forward's kept bytes then hold it)."""
    from simulator.calibration.fit import runtime_of
    found = results[f"{shape}/m8/{on}"].get("retention") or {}
    if "loss_outside" in found:
        return found["loss_outside"] or 0
    single = runtime_of(SCHEDULES[on].pipesim) == "torch-single"
    return ALL_SHAPES[shape].loss_saved if single else 0


def calibration(results: dict, shape: str, on: str) -> dict:
    """The ``memory:`` section fitted on class ``on`` of ``shape`` (M = 8)."""
    config = results[f"{shape}/m8/{on}"]
    sched = SCHEDULES[on]
    n_stages = P * sched.vpp
    layers = {s: LAYERS // n_stages for s in range(n_stages)}
    wl = parse_workload_text(workload_text(ALL_SHAPES[shape], 8), f"<{shape}>")
    rows = partition(wl, n_stages).chunks
    keeps = {int(k): v for k, v in config.get("split_backward_keeps", {}).items()}
    wts = {int(k): v for k, v in config.get("weight_transients", {}).items()}
    return fit_memory(_per_action(config), layers, {0}, ALL_SHAPES[shape].pp_comm, rows,
                      split_keeps=keeps, w_transients=wts,
                      loss_outside=loss_outside(results, shape, on))


def runtime_of_traces(results: dict, shape: str, on: str) -> dict:
    """The ``runtime:`` retention keys class ``on``'s traces (M = 8) show, as ``pipesim
    calibrate`` writes them (simulator.calibration.fit.retention_section); {} where the run
    recorded none."""
    from simulator.calibration.fit import retention_section, runtime_of
    found = results[f"{shape}/m8/{on}"].get("retention")
    if not found:
        return {}
    name = SCHEDULES[on].pipesim
    return retention_section(found, runtime_of(name), name)


def predict(results: dict, shape: str, m: int, name: str, memory: dict,
            runtime: dict | None = None) -> list[float]:
    """Per-rank peaks of class ``name`` at M = ``m`` with the fitted ``memory`` section and
    the ``runtime`` retention keys (``kept_outputs``, ``sends_held``, ``recv_buffers``)."""
    s = SCHEDULES[name]
    sh = ALL_SHAPES[shape]
    wl = parse_workload_text(workload_text(sh, m), f"<{shape}>")
    params = {"params_per_layer": sh.params(0)} if len(set(sh.ffn)) == 1 else {}
    system = system_from_dict({"memory": {**memory, "precision": "fp32", "optimizer": "sgd",
                                          **params}, "runtime": dict(runtime or {})},
                              "predict")
    r = simulate(wl, pipesim_schedule(s, m), system, pp=P, microbatches=m, p2p="torch")
    return [x["peak_memory_bytes"] for x in r.to_dict()["ranks"]]


def run(results: dict, on: str) -> list[dict]:
    rows = []
    for shape in SHAPES:
        memory = calibration(results, shape, on)
        for key, config in results.items():
            sh, mtag, name = key.split("/")
            if sh != shape:
                continue
            measured = [r["peak_bytes"] - r["data_bytes"] for r in config["ranks"]]
            row = {"shape": shape, "microbatches": config["microbatches"], "schedule": name,
                   "calibrated_on": name == on and config["microbatches"] == 8,
                   "measured": measured, "predicted": None, "error_pct": None}
            if memory is not None:
                pred = predict(results, shape, config["microbatches"], name, memory)
                row["predicted"] = pred
                row["error_pct"] = [100.0 * (p - q) / q for p, q in zip(pred, measured)]
            rows.append(row)
    return rows


def ranking_agrees(rows: list[dict], shape: str, m: int) -> tuple[int, int]:
    """Pairs of classes ranked by their largest rank's peak as measured (pairs measured
    within 1 % of each other are not counted)."""
    mine = [r for r in rows if r["shape"] == shape and r["microbatches"] == m and r["predicted"]]
    good = total = 0
    for i, a in enumerate(mine):
        for b in mine[i + 1:]:
            ma, mb = max(a["measured"]), max(b["measured"])
            if abs(ma - mb) <= 0.01 * max(ma, mb):
                continue
            total += 1
            good += (ma < mb) == (max(a["predicted"]) < max(b["predicted"]))
    return good, total


def markdown(rows: list[dict], on: str) -> str:
    kib = lambda b: f"{b / 1024:.0f}"  # noqa: E731
    lines = [f"Calibrated on {on} (M = 8) of each shape; peaks per rank r0 / r1 / r2 / r3 in KiB, "
             "the data handed to the first stage left out.", "",
             "| shape | M | schedule | measured | predicted | error % |", "|---|---:|---|---|---|---|"]
    for r in rows:
        pred = " / ".join(map(kib, r["predicted"])) if r["predicted"] else "not predicted"
        err = (" / ".join(f"{e:+.1f}" for e in r["error_pct"]) if r["error_pct"] else "–")
        mark = " (calibration)" if r["calibrated_on"] else ""
        lines.append(f"| {r['shape']} | {r['microbatches']} | {r['schedule']}{mark} | "
                     f"{' / '.join(map(kib, r['measured']))} | {pred} | {err} |")
    return "\n".join(lines) + "\n"


def summary(rows: list[dict]) -> dict:
    errs = [abs(e) for r in rows if r["error_pct"] and not r["calibrated_on"]
            for e in r["error_pct"]]
    out = {"ranks_predicted": len(errs),
           "within_5pct": sum(e <= 5.0 for e in errs),
           "median_abs_error_pct": sorted(errs)[len(errs) // 2] if errs else None,
           "max_abs_error_pct": max(errs) if errs else None, "ranking": {}}
    for shape in SHAPES:
        for m in (8, 12):
            good, total = ranking_agrees(rows, shape, m)
            if total:
                out["ranking"][f"{shape}/m{m}"] = [good, total]
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    # the MLP shapes' runs (memory-*-transformer holds the shape-only case, read by shape_only.py)
    found = sorted((REPO / "benchmarks" / "results").glob("memory-*-cpu-gloo"))
    ap.add_argument("--results", default=str(found[-1]) if found else None)
    ap.add_argument("--on", default="ScheduleZBVZeroBubble", choices=sorted(SCHEDULES))
    ap.add_argument("--markdown")
    ap.add_argument("--json")
    args = ap.parse_args(argv)
    results = json.loads((Path(args.results) / "results.json").read_text())
    rows = run(results, args.on)
    text = markdown(rows, args.on)
    s = summary(rows)
    return report(text, s, rows, args.markdown, args.json)


def report(text: str, summary: dict, rows: list, markdown: str | None, json_path: str | None
           ) -> int:
    """Print the table and its summary; write them where --markdown and --json say."""
    print(text)
    print(json.dumps(summary, indent=1))
    if markdown:
        Path(markdown).write_text(text)
    if json_path:
        Path(json_path).write_text(json.dumps({"summary": summary, "rows": rows}, indent=1)
                                   + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
