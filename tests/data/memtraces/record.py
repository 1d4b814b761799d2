"""Record the small memory traces the memory-trace tests read (needs torch 2.13).

    python tests/data/memtraces/record.py [heavy-last]

Runs the memory harness's live path (benchmarks/memory: P = 4 gloo processes on CPU, freshly
spawned, so the profiler covers each process from its start and ``Total Allocated`` is
absolute) for ScheduleZBVZeroBubble on the ``uniform`` shape (16 pre-LN MLP blocks, hidden 64,
32 rows per microbatch, 2 blocks per stage) at M = 8: one profiled warm-up step, then the steps
``ITER0`` and ``ITER1``. Writes ``<class>/rank<r>.json.gz`` beside this script, trimmed: the
operator events (``cpu_op``) and flow events are dropped; the ``[memory]`` events (with their
``args``), the label and step spans, the metadata events and the top-level keys are kept as
torch wrote them. ``MANIFEST.json``: torch version, case, per rank the weights and data bytes.
With ``heavy-last``: the same for that shape (its last quarter of blocks with an MLP of 8h, so
its stages have rows of two sizes), into ``heavy-last/``.
"""

from __future__ import annotations

import gzip
import json
import shutil
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[2]))   # the repository root: benchmarks.memory

SCHEDULE, SHAPE, M = "ScheduleZBVZeroBubble", "uniform", 8
WARMUP, ITERATIONS = 1, 2


def trim(data: dict) -> dict:
    keep = []
    for ev in data["traceEvents"]:
        if ev.get("ph") in ("s", "f") or ev.get("cat") in ("cpu_op", "python_function"):
            continue
        keep.append(ev)
    return {**data, "traceEvents": keep}


def main(shape: str = SHAPE) -> None:
    import torch

    from benchmarks.memory.harness import configs, run_live

    home = HERE if shape == SHAPE else HERE / shape
    home.mkdir(exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix="pipesim-memtraces-"))
    try:
        cfgs = configs(tmp, [SCHEDULE], [shape], [M])
        merged = run_live(tmp, cfgs, warmup=WARMUP, iterations=ITERATIONS, timeout_s=120,
                          verbose=True)
        ranks = merged[cfgs[0]["key"]]
        dst = home / SCHEDULE
        if dst.exists():
            shutil.rmtree(dst)
        dst.mkdir()
        for r, info in enumerate(ranks):
            data = trim(json.loads((tmp / info["trace"]).read_text()))
            with gzip.open(dst / f"rank{r}.json.gz", "wt", compresslevel=9) as out:
                json.dump(data, out, separators=(",", ":"))
        manifest = {"torch": torch.__version__, "schedule": SCHEDULE, "shape": shape, "P": 4,
                    "M": M, "warmup": WARMUP, "iterations": ITERATIONS,
                    "ranks": [{k: info[k] for k in ("stages", "weight_bytes", "data_bytes")}
                              for info in ranks]}
        (home / "MANIFEST.json").write_text(json.dumps(manifest, indent=1) + "\n")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main(*sys.argv[1:2])
