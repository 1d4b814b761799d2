"""Calibrate on one schedule's traces, predict the other classes, and leave-one-out.

    python -m benchmarks.fidelity.predict --traces tests/data/traces --workload W.txt
    python -m benchmarks.fidelity.predict --results benchmarks/fidelity/results/<run>

``--traces DIR``: one folder per torch class (``DIR/<class>/rank<r>.json[.gz]``) of one cost
case: every class is calibrated from its own traces (``pipesim calibrate``), measured medians
come from the traces' iteration spans. ``--results DIR``: a harness output folder whose
``calibrations/<case>/<class>.yaml`` the harness wrote from its traces (the traces themselves are
too big to keep); measured medians come from its ``results.json``.

Each calibration is applied as ``pipesim run W -s <schedule> --vpp <v> --calibration C`` does
(built-in system + the fragment) to every class. The source of the main table is
ScheduleInterleaved1F1B (a multi-stage schedule whose chunks differ from the single-stage
schedules' stages); leave-one-out uses every class as the source in turn. Per runtime: torch's
two runtimes calibrated apart (``pipesim calibrate`` given a multi-stage class's traces and a
single-stage one's), ``SOURCE`` + ``SINGLE_SOURCE`` for the table, and every pair of a
multi-stage and a single-stage class for the matrix of largest errors. No torch needed.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

from .cases import CLASSES, USER_PATTERN

SOURCE = "ScheduleInterleaved1F1B"
SINGLE_SOURCE = "Schedule1F1B"        # the single-stage runtime's class in the per-runtime table
SINGLE = ("ScheduleGPipe", "Schedule1F1B")
PER_RUNTIME_PCT = 5.0
TARGET_PCT = 3.0


def _stats(times_ms: list[float]) -> dict:
    med = statistics.median(times_ms)
    return {"iteration_ms": times_ms, "median_ms": med, "min_ms": min(times_ms),
            "max_ms": max(times_ms),
            "spread_pct": 100.0 * (max(times_ms) - min(times_ms)) / med}


def from_traces(folder: Path, workload: Path, classes=None) -> tuple[dict, dict]:
    """({class: measured stats}, {class: calibration fragment}) from per-class trace folders."""
    from simulator.calibration import read_traces, trace_files
    from simulator.calibration.fit import fit

    measured, fragments = {}, {}
    for name in classes or CLASSES:
        ts = read_traces(trace_files([folder / name]), label_pattern=USER_PATTERN)
        measured[name] = _stats([t / 1e6 for t in ts.iteration_times_ns()])
        fragments[name] = fit(ts, workload).to_dict()
    return measured, fragments


def from_results(folder: Path, case: str) -> tuple[dict, dict]:
    """The same from a harness output folder (results.json + calibrations/<case>/)."""
    import yaml

    doc = json.loads((folder / "results.json").read_text())
    measured, fragments = {}, {}
    for key, row in doc["results"].items():
        cls, c = key.split("/")
        if c != case:
            continue
        measured[cls] = _stats(row["iteration_ms"])
        cal = folder / "calibrations" / case / f"{cls}.yaml"
        if cal.is_file():
            fragments[cls] = yaml.safe_load(cal.read_text())
    return measured, fragments


def combine(primary: dict, other: dict, schedules: tuple[str, str] | None = None) -> dict:
    """The calibration ``pipesim calibrate PRIMARY_DIR OTHER_DIR`` writes, from the two
    classes' own calibrations (each runtime's figures are fitted on its class alone, so this
    is the same file): ``primary`` with ``runtime.runtimes`` holding both fits' figures.
    ``schedules``: the two fits' pipesim schedule names, for calibrations written before
    ``calibrated_on`` was."""
    import copy

    from simulator.calibration.fit import runtime_of

    out = copy.deepcopy(primary)
    figs = {}
    for i, frag in enumerate((primary, other)):
        rt = frag["runtime"]
        sched = rt["calibrated_on"]["schedule"] if "calibrated_on" in rt else schedules[i]
        figs[runtime_of(sched)] = {
            **{k: rt[k] for k in ("action_overhead_ns", "step_prologue_ns", "step_epilogue_ns",
                                  "exchange_ns")},
            "latency_ns": frag["links"]["latency_ns"], "calibrated_on": sched}
    out["runtime"]["runtimes"] = dict(sorted(figs.items()))
    return out


def per_runtime(workload: Path, measured: dict, fragments: dict, classes,
                source: str = SOURCE, single: str = SINGLE_SOURCE) -> dict:
    """Both runtimes calibrated apart: per class the error of ``source`` + ``single`` (the
    first gives the compute), and for every pair of a multi-stage and a single-stage class
    the errors of every class."""
    pairs = {}
    for m in classes:
        for s in classes:
            if m in SINGLE or s not in SINGLE or m not in fragments or s not in fragments:
                continue
            frag = combine(fragments[m], fragments[s], (CLASSES[m].pipesim, CLASSES[s].pipesim))
            p = predict(workload, frag, classes)
            pairs[f"{m}+{s}"] = {c: _err(p[c], measured[c]["median_ms"]) for c in classes}
    return {"source": source, "single": single, "pairs": pairs}


def predict(workload: Path, fragment: dict | None, classes) -> dict[str, float]:
    """{class: iteration ms} under a calibration (None: per-layer costs, built-in system)."""
    from simulator import simulate
    from simulator.calibration.fit import calibrated_system

    system = None if fragment is None else calibrated_system(fragment)
    out = {}
    for name in classes:
        cls = CLASSES[name]
        out[name] = simulate(str(workload), schedule=cls.pipesim, system=system,
                             vpp=cls.vpp).makespan_ns / 1e6
    return out


def evaluate(case: str, workload: Path, measured: dict, fragments: dict,
             source: str = SOURCE, single: str = SINGLE_SOURCE) -> dict:
    """Per class: measured, per-layer prediction, calibrated prediction from ``source`` and
    errors; leave-one-out errors of every source; the rankings."""
    classes = [c for c in CLASSES if c in measured]
    layer = predict(workload, None, classes)
    preds = {src: predict(workload, frag, classes) for src, frag in fragments.items()}
    rows = []
    for c in classes:
        m = measured[c]
        row = {"class": c, **{k: m[k] for k in ("median_ms", "min_ms", "max_ms", "spread_pct")},
               "per_layer_ms": layer[c], "per_layer_err_pct": _err(layer[c], m["median_ms"])}
        if source in preds:
            p = preds[source][c]
            row.update(calibrated_ms=p, calibrated_err_pct=_err(p, m["median_ms"]))
        rows.append(row)
    loo = {src: {c: _err(p[c], measured[c]["median_ms"]) for c in classes}
           for src, p in preds.items()}
    return {"case": case, "source": source, "rows": rows, "loo": loo,
            "ranking": _ranking(measured, preds.get(source), classes),
            "per_runtime": per_runtime(workload, measured, fragments, classes, source, single)}


def _err(pred: float, meas: float) -> float:
    return 100.0 * (pred - meas) / meas


def _ranking(measured: dict, pred: dict | None, classes) -> dict:
    meas_order = sorted(classes, key=lambda c: measured[c]["median_ms"])
    out = {"measured": meas_order}
    if pred is None:
        return out
    out["predicted"] = sorted(classes, key=lambda c: pred[c])
    pairs = same = 0
    wrong = []
    for i, a in enumerate(meas_order):
        for b in meas_order[i + 1:]:
            ma, mb = measured[a]["median_ms"], measured[b]["median_ms"]
            if 100.0 * (mb - ma) / ma <= TARGET_PCT:
                continue
            pairs += 1
            if pred[a] < pred[b]:
                same += 1
            else:
                wrong.append((a, b))
    out.update(pairs=pairs, same=same, wrong=wrong)
    return out


def _short(c: str) -> str:
    return c.removeprefix("Schedule")


def markdown(ev: dict) -> list[str]:
    """One case's table, ranking and leave-one-out matrix."""
    src = ev["source"]
    lines = [f"| class | measured median (ms) | min–max (ms) | spread % | per-layer (ms) | "
             f"error % | calibrated on {_short(src)} (ms) | error % | error / spread |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in ev["rows"]:
        if "calibrated_ms" not in r:
            cal = "– | – | –"
        else:
            rel = (f"{abs(r['calibrated_err_pct']) / r['spread_pct']:.2f}"
                   if r["spread_pct"] > 0 else "–")
            cal = f"{r['calibrated_ms']:.1f} | {r['calibrated_err_pct']:+.1f} | {rel}"
        mark = " (source)" if r["class"] == src else ""
        lines.append(f"| {_short(r['class'])}{mark} | {r['median_ms']:.1f} | "
                     f"{r['min_ms']:.1f}–{r['max_ms']:.1f} | {r['spread_pct']:.1f} | "
                     f"{r['per_layer_ms']:.1f} | {r['per_layer_err_pct']:+.1f} | {cal} |")
    rk = ev["ranking"]
    lines += ["", f"- measured: {' < '.join(map(_short, rk['measured']))}"]
    if "predicted" in rk:
        lines.append(f"- calibrated: {' < '.join(map(_short, rk['predicted']))}")
        wrong = "; wrong: " + ", ".join(f"{_short(a)} < {_short(b)}" for a, b in rk["wrong"]) \
            if rk["wrong"] else ""
        lines.append(f"- pairs whose measured medians differ by > {TARGET_PCT:g} %: "
                     f"{rk['same']} of {rk['pairs']} ordered as measured{wrong}")
        others = [abs(r["calibrated_err_pct"]) for r in ev["rows"] if r["class"] != src]
        within = sum(1 for e in others if e <= TARGET_PCT)
        lines.append(f"- other classes within ±{TARGET_PCT:g} %: {within} of {len(others)} "
                     f"(largest |error| {max(others):.1f} %)")
    loo = ev["loo"]
    if loo:
        targets = [r["class"] for r in ev["rows"]]
        lines += ["", "Leave-one-out (error % of each target, calibrated on the row's class; "
                  "the diagonal is the fit itself):", "",
                  "| source \\ target | " + " | ".join(map(_short, targets)) +
                  " | mean abs (others) |",
                  "|---|" + "---:|" * (len(targets) + 1)]
        for s in targets:
            if s not in loo:
                continue
            errs = loo[s]
            others = [abs(errs[t]) for t in targets if t != s]
            lines.append(f"| {_short(s)} | " + " | ".join(f"{errs[t]:+.1f}" for t in targets)
                         + f" | {statistics.mean(others):.1f} |")
    return lines + per_runtime_markdown(ev)


def per_runtime_markdown(ev: dict) -> list[str]:
    """The per-runtime calibration's errors: the source pair's, then every pair's."""
    pr = ev.get("per_runtime")
    if not pr or not pr["pairs"]:
        return []
    targets = [r["class"] for r in ev["rows"]]
    key = f"{pr['source']}+{pr['single']}"
    lines = ["", "Per runtime (`pipesim calibrate` given a multi-stage class's traces and a "
             "single-stage one's: each runtime's transfer and launch figures fitted on its own "
             "class, the compute on the first; error % of each target):", "",
             "| multi-stage + single-stage source | " + " | ".join(map(_short, targets))
             + " | largest abs |", "|---|" + "---:|" * (len(targets) + 1)]
    for pair, errs in pr["pairs"].items():
        m, s = pair.split("+")
        mark = " (table's sources)" if pair == key else ""
        lines.append(f"| {_short(m)} + {_short(s)}{mark} | "
                     + " | ".join(f"{errs[t]:+.1f}" for t in targets)
                     + f" | {max(abs(e) for e in errs.values()):.1f} |")
    if key in pr["pairs"]:
        errs = pr["pairs"][key]
        within = sum(1 for e in errs.values() if abs(e) <= PER_RUNTIME_PCT)
        lines += ["", f"- calibrated on {_short(pr['source'])} + {_short(pr['single'])}: "
                  f"{within} of {len(errs)} classes within ±{PER_RUNTIME_PCT:g} % (largest "
                  f"|error| {max(abs(e) for e in errs.values()):.1f} %)"]
    return lines


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.fidelity.predict",
                                 description=__doc__.split("\n\n")[0])
    g = ap.add_mutually_exclusive_group(required=True)
    g.add_argument("--traces", type=Path, help="per-class trace folders of one case")
    g.add_argument("--results", type=Path, help="a harness output folder with calibrations/")
    ap.add_argument("--workload", type=Path, help="with --traces: the case's workload file")
    ap.add_argument("--case", default="uniform", help="with --traces: the case's name")
    ap.add_argument("--source", default=SOURCE, help="class calibrated on for the main table")
    ap.add_argument("--single-source", default=SINGLE_SOURCE,
                    help="single-stage class beside --source in the per-runtime table")
    ap.add_argument("--json", type=Path, help="also write the figures as JSON here")
    ap.add_argument("--md", type=Path, help="also write the tables as markdown here")
    ap.add_argument("--quiet", action="store_true", help="print nothing")
    a = ap.parse_args(argv)
    if a.source not in CLASSES:
        print(f"--source: expected one of {', '.join(CLASSES)}, got {a.source!r}",
              file=sys.stderr)
        return 2
    if a.single_source not in SINGLE:
        print(f"--single-source: expected one of {', '.join(SINGLE)}, got {a.single_source!r}",
              file=sys.stderr)
        return 2
    evs = []
    if a.traces:
        if a.workload is None:
            print("--workload: expected the workload file of the traced case", file=sys.stderr)
            return 2
        measured, frags = from_traces(a.traces, a.workload)
        evs.append(evaluate(a.case, a.workload, measured, frags, a.source, a.single_source))
    else:
        doc = json.loads((a.results / "results.json").read_text())
        for case in dict.fromkeys(r["case"] for r in doc["results"].values()):
            measured, frags = from_results(a.results, case)
            evs.append(evaluate(case, a.results / "workloads" / f"{case}.txt", measured, frags,
                                a.source, a.single_source))
    text = "".join(f"## {ev['case']}\n\n" + "\n".join(markdown(ev)) + "\n\n" for ev in evs)
    if not a.quiet:
        print(text, end="")
    if a.md:
        a.md.write_text(text)
    if a.json:
        a.json.write_text(json.dumps(evs, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
