"""Record the small profiler traces the calibration tests read (needs torch 2.13).

    python tests/data/traces/record.py

Runs the fidelity harness's live path (benchmarks/fidelity: P = 4 gloo processes on CPU, M = 8,
the ``uniform`` cost case at the default layer time) for every schedule class, 2 warm-up and
5 profiled steps each (the target's median of at least 5 steps), and writes ``<class>/rank<r>.json.gz`` beside this script. To keep the
files small each trace is trimmed: the flow events (``s``/``f``) and every event's ``args`` are
dropped; names, categories, threads, ``ts``/``dur``, the metadata events and the top-level keys
(``distributedInfo`` ...) are kept as torch wrote them. ``MANIFEST.json`` records the torch
version, the layer time, the classes, the measured step times and the machine's load average
before and after (a loaded machine slows the loop-placed classes more than the others).
"""

from __future__ import annotations

import gzip
import json
import os
import shutil
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[2]))   # the repository root: benchmarks.fidelity

CLASSES = ["ScheduleGPipe", "Schedule1F1B", "ScheduleInterleaved1F1B", "ScheduleLoopedBFS",
           "ScheduleInterleavedZeroBubble", "ScheduleZBVZeroBubble", "ScheduleDualPipeV"]
CASE = "uniform"
WARMUP, ITERATIONS = 2, 5


def trim(data: dict) -> dict:
    keep = []
    for ev in data["traceEvents"]:
        if ev.get("ph") in ("s", "f"):
            continue
        ev = {k: v for k, v in ev.items() if k != "args" or ev.get("ph") == "M"}
        keep.append(ev)
    return {**data, "traceEvents": keep}


def main() -> None:
    import torch

    from benchmarks.fidelity.cases import BASE_NS
    from benchmarks.fidelity.harness import iteration_times_ms, run_live

    tmp = Path(tempfile.mkdtemp(prefix="pipesim-traces-"))
    load_before = os.getloadavg()[0]
    try:
        merged = run_live(tmp, CLASSES, [CASE], iterations=ITERATIONS, warmup=WARMUP, profile=True,
                          timeout_s=120, verbose=True)
        manifest = {"torch": torch.__version__, "case": CASE, "layer_ns": BASE_NS, "P": 4,
                    "M": 8, "warmup": WARMUP, "iterations": ITERATIONS,
                    "loadavg_1min": [round(load_before, 2), None], "classes": {}}
        for cls in CLASSES:
            dst = HERE / cls
            if dst.exists():
                shutil.rmtree(dst)
            dst.mkdir()
            src = tmp / merged[f"{cls}/{CASE}"]["trace_dir"]
            for f in sorted(src.glob("rank*.json")):
                data = trim(json.loads(f.read_text()))
                with gzip.open(dst / (f.name + ".gz"), "wt", compresslevel=9) as out:
                    json.dump(data, out, separators=(",", ":"))
            manifest["classes"][cls] = {
                "iteration_ms": iteration_times_ms(merged[f"{cls}/{CASE}"]["iter_ns"])}
        manifest["loadavg_1min"][1] = round(os.getloadavg()[0], 2)
        (HERE / "MANIFEST.json").write_text(json.dumps(manifest, indent=1) + "\n")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
