"""Record the small memory traces the memory-trace tests read (needs torch 2.13).

    python tests/data/memtraces/record.py [heavy-last | retention]

Runs the memory harness's live path (benchmarks/memory: P = 4 gloo processes on CPU, freshly
spawned, so the profiler covers each process from its start and ``Total Allocated`` is
absolute) for ScheduleZBVZeroBubble on the ``uniform`` shape (16 pre-LN MLP blocks, hidden 64,
32 rows per microbatch, 2 blocks per stage) at M = 8: one profiled warm-up step, then the steps
``ITER0`` and ``ITER1``. Writes ``<class>/rank<r>.json.gz`` beside this script, trimmed: the
operator events (``cpu_op``) and flow events are dropped; the ``[memory]`` events (with their
``args``), the label and step spans, the metadata events and the top-level keys are kept as
torch wrote them. ``MANIFEST.json``: torch version, case, per rank the weights and data bytes.
With ``heavy-last``: the same for that shape (its last quarter of blocks with an MLP of 8h, so
its stages have rows of two sizes), into ``heavy-last/``. With ``retention``: the
``RETENTION`` runs (Interleaved1F1B with ``return_outputs=False``, 1F1B with ``True``), the
operators with weights kept with their shapes (``record_shapes=True``), each rank's measured
peak in the manifest.
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

from simulator.calibration.memory_trace import read_memory  # noqa: E402

SCHEDULE, SHAPE, M = "ScheduleZBVZeroBubble", "uniform", 8
WARMUP, ITERATIONS = 1, 2


# the operators with weights (simulator/calibration/forward_ops.py): kept, with their shapes
WEIGHT_OPS = ("aten::linear", "aten::layer_norm")
# the retention traces (tests/calibration/test_memory_retention.py): (folder, schedule,
# return_outputs), the uniform shape at M = 8, operator shapes recorded
RETENTION = (("return-outputs-false", "ScheduleInterleaved1F1B", False),
             ("return-outputs-true", "Schedule1F1B", True))


def trim(data: dict, ops: bool = False) -> dict:
    """Drop the flow events and the operators (``ops``: keep those with weights)."""
    keep = []
    for ev in data["traceEvents"]:
        if ev.get("ph") in ("s", "f") or ev.get("cat") == "python_function":
            continue
        if ev.get("cat") == "cpu_op" and not (ops and ev.get("name") in WEIGHT_OPS):
            continue
        keep.append(ev)
    return {**data, "traceEvents": keep}


def main(shape: str = SHAPE) -> None:
    if shape == "retention":
        for folder, schedule, ro in RETENTION:
            record(SHAPE, schedule, HERE / folder, return_outputs=ro, ops=True)
        return
    record(shape, SCHEDULE, HERE if shape == SHAPE else HERE / shape)


def record(shape: str, schedule: str, home: Path, *, return_outputs: bool = True,
           ops: bool = False) -> None:
    import torch

    from benchmarks.memory.cases import USER_PATTERN
    from benchmarks.memory.harness import configs, run_live

    home.mkdir(exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix="pipesim-memtraces-"))
    try:
        cfgs = configs(tmp, [schedule], [shape], [M])
        merged = run_live(tmp, cfgs, warmup=WARMUP, iterations=ITERATIONS, timeout_s=120,
                          verbose=True, return_outputs=return_outputs)
        ranks = merged[cfgs[0]["key"]]
        dst = home / schedule
        if dst.exists():
            shutil.rmtree(dst)
        dst.mkdir()
        for r, info in enumerate(ranks):
            data = trim(json.loads((tmp / info["trace"]).read_text()), ops)
            with gzip.open(dst / f"rank{r}.json.gz", "wt", compresslevel=9) as out:
                json.dump(data, out, separators=(",", ":"))
        manifest = {"torch": torch.__version__, "schedule": schedule, "shape": shape, "P": 4,
                    "M": M, "warmup": WARMUP, "iterations": ITERATIONS,
                    **({"return_outputs": return_outputs,
                        "label_pattern": USER_PATTERN if schedule == "Schedule1F1B" else None,
                        "peak_bytes": [read_memory(dst / f"rank{r}.json.gz",
                                                   label_pattern=USER_PATTERN
                                                   if schedule == "Schedule1F1B" else None
                                                   ).peak_bytes for r in range(len(ranks))]}
                       if ops else {}),
                    "ranks": [{k: info[k] for k in ("stages", "weight_bytes", "data_bytes")}
                              for info in ranks]}
        (home / "MANIFEST.json").write_text(json.dumps(manifest, indent=1) + "\n")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main(*sys.argv[1:2])
