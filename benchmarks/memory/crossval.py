"""Cross-validation of the memory calibration: calibrate on each torch class in turn, predict
every other, for every model shape and M the harness ran, once per ``return_outputs``.

    python -m benchmarks.memory.crossval RESULTS_DIR [RESULTS_DIR ...] [--json OUT.json]
        [--markdown OUT.md]

Each RESULTS_DIR is a memory harness run (``results.json``; ``raw.json`` says which
``return_outputs`` it ran with, True when it does not say). Calibrating on class C of a shape
fits the ``memory:`` section on C's traces at M = 8 (``predict.calibration``) and takes the
runtime's retention from what C's traces show (``retention_of``), as ``pipesim calibrate``
does; then every class of that shape, at every M, is simulated (``predict.predict``). A cell
(C, D) of the 7 x 7 table is the largest |error| over D's ranks, shapes and M (the diagonal:
C's own M = 8, the calibration, and its M = 12). Also per calibration class: whether the
classes come out ranked by their largest rank as measured. Needs no torch.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from benchmarks.memory.cases import SCHEDULES  # noqa: E402
from benchmarks.memory.predict import calibration, predict, runtime_of_traces  # noqa: E402

CLASSES = tuple(n for n, s in SCHEDULES.items() if not s.csv)   # the 7 torch classes
SHORT = {"ScheduleGPipe": "GPipe", "Schedule1F1B": "1F1B", "ScheduleInterleaved1F1B": "I1F1B",
         "ScheduleLoopedBFS": "LBFS", "ScheduleInterleavedZeroBubble": "IZB",
         "ScheduleZBVZeroBubble": "ZBV", "ScheduleDualPipeV": "DPV"}
TOLERANCE_PCT = 5.0


def load(dirs: list[str]) -> dict[bool, dict]:
    """{return_outputs: {key: config}} over the runs, the torch classes only."""
    out: dict[bool, dict] = {}
    for d in dirs:
        p = Path(d)
        results = json.loads((p / "results.json").read_text())
        raw = p / "raw.json"
        ro = True
        if raw.is_file():
            ro = bool(json.loads(raw.read_text()).get("return_outputs", True))
        mine = out.setdefault(ro, {})
        for key, cfg in results.items():
            if cfg["schedule"] in CLASSES:
                mine[key] = {**cfg, "return_outputs": cfg.get("return_outputs", ro)}
    return out


def cells(results: dict, return_outputs: bool, before: bool = False
          ) -> tuple[dict, dict, list]:
    """({(on, predicted): worst |error| %}, {on: (ranked right, pairs)}, rows). ``before``:
    the calibration without what the traces show of the runtime's retention (torch's rules
    assumed) and without the forward's operators (an I's keeps only from a traced I)."""
    shapes = list(dict.fromkeys(c["shape"] for c in results.values()))
    worst: dict[tuple[str, str], float] = {}
    ranking: dict[str, list[int]] = {}
    rows = []
    for on in CLASSES:
        good = total = 0
        for shape in shapes:
            if f"{shape}/m8/{on}" not in results:
                continue
            if before:
                plain = {k: {**c, "split_backward_keeps": {}, "weight_transients": {}}
                         for k, c in results.items()}
                memory, runtime = calibration(plain, shape, on), {}
            else:
                memory, runtime = (calibration(results, shape, on),
                                   runtime_of_traces(results, shape, on))
            by_m: dict[int, list[tuple[float, float]]] = {}
            for key, cfg in results.items():
                if cfg["shape"] != shape:
                    continue
                m, name = cfg["microbatches"], cfg["schedule"]
                measured = [r["peak_bytes"] - r["data_bytes"] for r in cfg["ranks"]]
                pred = predict(results, shape, m, name, memory, runtime)
                errs = [100.0 * (p - q) / q for p, q in zip(pred, measured)]
                cell = (on, name)
                worst[cell] = max(worst.get(cell, 0.0), max(map(abs, errs)))
                rows.append({"calibrated_on": on, "shape": shape, "microbatches": m,
                             "schedule": name, "measured": measured, "predicted": pred,
                             "error_pct": errs})
                by_m.setdefault(m, []).append((max(measured), max(pred)))
            for pts in by_m.values():
                for i, (ma, pa) in enumerate(pts):
                    for mb, pb in pts[i + 1:]:
                        if abs(ma - mb) <= 0.01 * max(ma, mb):
                            continue
                        total += 1
                        good += (ma < mb) == (pa < pb)
        ranking[on] = [good, total]
    return worst, ranking, rows


def table(worst: dict, ranking: dict, return_outputs: bool) -> str:
    lines = [f"return_outputs={return_outputs}: worst |error| % per (calibrated on: row, "
             "predicted: column) over every shape, M and rank; ranked: class pairs ranked by "
             "their largest rank as measured (pairs measured within 1 % left out).", "",
             "| calibrated on | " + " | ".join(SHORT[c] for c in CLASSES) + " | ranked |",
             "|---|" + "---:|" * len(CLASSES) + "---:|"]
    for on in CLASSES:
        vals = [worst.get((on, c)) for c in CLASSES]
        g, t = ranking.get(on, (0, 0))
        lines.append(f"| {SHORT[on]} | " + " | ".join(
            "–" if v is None else f"{v:.1f}" for v in vals) + f" | {g}/{t} |")
    return "\n".join(lines) + "\n"


def summary(worst: dict, ranking: dict) -> dict:
    top = max(worst.items(), key=lambda kv: kv[1]) if worst else None
    return {"worst_cell": {"calibrated_on": top[0][0], "predicted": top[0][1],
                           "abs_error_pct": top[1]} if top else None,
            "pairs_within": sum(v <= TOLERANCE_PCT for v in worst.values()),
            "pairs": len(worst), "tolerance_pct": TOLERANCE_PCT,
            "ranking": {k: list(v) for k, v in ranking.items()},
            "cells": {f"{a}|{b}": v for (a, b), v in worst.items()}}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("results", nargs="+", help="memory harness run folders")
    ap.add_argument("--json")
    ap.add_argument("--markdown")
    ap.add_argument("--before", action="store_true",
                    help="calibrate as before the retention and operator rules: torch's "
                         "retention rules assumed, an I's keeps only from a traced I")
    a = ap.parse_args(argv)
    out_text, out_json = [], {}
    for ro, results in sorted(load(a.results).items(), reverse=True):
        worst, ranking, rows = cells(results, ro, a.before)
        text = table(worst, ranking, ro)
        out_text.append(text)
        out_json[str(ro).lower()] = {**summary(worst, ranking), "rows": rows}
        print(text)
        s = out_json[str(ro).lower()]
        print(f"worst cell: calibrated on {s['worst_cell']['calibrated_on']}, predicted "
              f"{s['worst_cell']['predicted']}: {s['worst_cell']['abs_error_pct']:.2f} %; "
              f"{s['pairs_within']} of {s['pairs']} pairs within ±{TOLERANCE_PCT:g} %\n")
    if a.markdown:
        Path(a.markdown).write_text("\n".join(out_text))
    if a.json:
        Path(a.json).write_text(json.dumps(out_json, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
