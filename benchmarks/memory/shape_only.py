"""pipesim's per-rank peak from the transformer case's shape alone (no traces), held against
what the allocator measured.

    python -m benchmarks.memory.shape_only [--results DIR] [--markdown OUT.md] [--json OUT.json]

The workload is what ``pipesim generate --model gpt --no-flash-attention --precision fp32``
(with ``--kv-heads`` for a grouped-query shape) writes for the harness's transformer shape (``cases.TRANSFORMERS``), its transformer layer rows
alone (the harness's model has no embedding or LM head): parameters from the rows'
weight-gradient all-reduces (fp32 gradients, 4 B per parameter), the stash from the header's
``activation_bytes`` (Korthikanti et al.'s count in fp32, dropout masks 1 B an element).
The system names what the harness ran: fp32 weights and gradients, SGD without momentum (no
optimizer state), what its mean-squared loss saves on the last stage (``out - target``:
``memory.loss_keeps_bytes``, ``Shape.loss_saved``), torch's runtime rules (``--p2p torch``);
nothing is fitted. Compared: each rank's peak less the training data handed to the first stage
(left out on both sides). Needs no torch.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from benchmarks.memory.cases import LAYERS, P, SCHEDULES, TRANSFORMERS, Shape, \
    pipesim_schedule  # noqa: E402
from benchmarks.memory.predict import ranking_agrees, report  # noqa: E402
from simulator import simulate  # noqa: E402
from simulator.system.config import system_from_dict  # noqa: E402
from simulator.workload.generator import ModelSpec, ParallelSpec, activation_bytes, \
    header_line, layer_rows, render_rows  # noqa: E402
from simulator.workload.gpus import gpu_preset  # noqa: E402
from simulator.workload.parser import parse_workload_text  # noqa: E402

# what the harness ran, named as a user names it: no trace, no fitted number
SYSTEM = {"memory": {"precision": "fp32", "optimizer": "sgd",
                     # generate writes a row's weight-gradient all-reduce as fp32 gradients
                     "grad_bytes_per_param": 4}}
TOLERANCE_PCT = 15.0


def specs(shape: Shape, microbatches: int) -> tuple[ModelSpec, ParallelSpec]:
    model = ModelSpec("gpt", LAYERS, shape.hidden, shape.heads, shape.seq, shape.batch,
                      ffn=shape.hidden * shape.ffn[0], kv_heads=shape.kv_heads or None)
    par = ParallelSpec(pp=P, ga=microbatches, flash_attention=False, precision="fp32")
    return model, par


def workload_text(shape: Shape, microbatches: int) -> str:
    """``pipesim generate``'s header and transformer layer rows for ``shape`` (times from the
    A100 roofline: memory does not need them)."""
    model, par = specs(shape, microbatches)
    gpu = gpu_preset("a100")
    return render_rows(header_line(model, par, "model"), layer_rows(model, par) * LAYERS, gpu)


def predict(shape: str, microbatches: int, name: str) -> tuple[list[float], list[str]]:
    """Per-rank peaks, and the run's warning codes and notes."""
    wl = parse_workload_text(workload_text(TRANSFORMERS[shape], microbatches), f"<{shape}>")
    sh = TRANSFORMERS[shape]
    system = system_from_dict({"memory": {**SYSTEM["memory"], "loss_keeps_bytes": sh.loss_saved}},
                              "shape-only")
    r = simulate(wl, pipesim_schedule(SCHEDULES[name], microbatches), system, pp=P,
                 microbatches=microbatches, p2p="torch").to_dict()
    return ([x["peak_memory_bytes"] for x in r["ranks"]],
            [w["code"] for w in r.get("warnings", [])] + list(r.get("notes", [])))


def run(results: dict) -> list[dict]:
    rows = []
    for key, config in results.items():
        shape, _, name = key.split("/")
        if shape not in TRANSFORMERS:
            continue
        m = config["microbatches"]
        measured = [r["peak_bytes"] - r["data_bytes"] for r in config["ranks"]]
        pred, _ = predict(shape, m, name)
        rows.append({"shape": shape, "microbatches": m, "schedule": name, "measured": measured,
                     "predicted": pred,
                     "error_pct": [100.0 * (p - q) / q for p, q in zip(pred, measured)]})
    return rows


def summary(rows: list[dict]) -> dict:
    """Per shape: ranks within the tolerance, the median and worst signed error, per class the
    range."""
    out = {}
    for shape in dict.fromkeys(r["shape"] for r in rows):
        mine = [r for r in rows if r["shape"] == shape]
        errs = sorted(e for r in mine for e in r["error_pct"])
        per_class: dict[str, list[float]] = {}
        for r in mine:
            per_class.setdefault(r["schedule"], []).extend(r["error_pct"])
        out[shape] = {"ranks": len(errs),
                      "within": sum(abs(e) <= TOLERANCE_PCT for e in errs),
                      "tolerance_pct": TOLERANCE_PCT,
                      "median_error_pct": errs[len(errs) // 2],
                      "worst_error_pct": max(errs, key=abs),
                      "per_class": {k: [min(v), max(v)] for k, v in per_class.items()},
                      "ranking": {f"m{m}": list(ranking_agrees(rows, shape, m))
                                  for m in sorted({r["microbatches"] for r in mine})}}
    return out


def markdown(rows: list[dict]) -> str:
    kib = lambda b: f"{b / 1024:.0f}"  # noqa: E731
    lines = ["From the model's shape alone (no traces); peaks per rank r0 / r1 / r2 / r3 in KiB, "
             "the data handed to the first stage left out.", "",
             "| shape | M | schedule | measured | predicted | error % |",
             "|---|---:|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['shape']} | {r['microbatches']} | {r['schedule']} | "
                     f"{' / '.join(map(kib, r['measured']))} | "
                     f"{' / '.join(map(kib, r['predicted']))} | "
                     f"{' / '.join(f'{e:+.1f}' for e in r['error_pct'])} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    found = sorted((REPO / "benchmarks" / "results").glob("memory-*transformer*"))
    ap.add_argument("--results", default=str(found[-1]) if found else None)
    ap.add_argument("--markdown")
    ap.add_argument("--json")
    args = ap.parse_args(argv)
    results = json.loads((Path(args.results) / "results.json").read_text())
    rows = run(results)
    text = markdown(rows)
    s = summary(rows)
    raw = Path(args.results) / "raw.json"
    blocks = json.loads(raw.read_text())["blocks"] if raw.is_file() else {}
    for shape in s:
        model, par = specs(TRANSFORMERS[shape], 8)
        s[shape]["stash_counted_bytes"] = activation_bytes(model, par)
        if shape in blocks:     # one layer's forward measured alone (its output included)
            s[shape]["stash_measured_bytes"] = blocks[shape][0]["stash_bytes"]
    return report(text, s, rows, args.markdown, args.json)


if __name__ == "__main__":
    sys.exit(main())
