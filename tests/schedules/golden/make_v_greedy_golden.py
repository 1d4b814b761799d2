"""Regenerate ``v_greedy.json``: the zero-bubble fork's V-Half and V-Min orders, as its runtime
lays them out under ``--zero-bubble-v-schedule --zero-bubble-v-schedule-mem-setup half|min``
(the tests do not need the fork).

Run from the repository root with a checkout (or bare git directory) of
sail-sg/zero-bubble-pipeline-parallelism, never committed here:

    python3 tests/schedules/golden/make_v_greedy_golden.py --zb-repo ZB

The fork's runtime at tag zero-bubble-v0.1.0 (``megatron/core/pipeline_parallel/
zb_schedules.py``, the V scheduler) builds these two setups with
``v_schedule_greedy.PipelineGraph(stages, microbatches, setup, 1000, 1000, 1000, 1)`` whatever
the profiled times, and runs each rank's ``get_schedule()`` list in order. This script loads
that module from the tag (it imports nothing of the fork) and records each rank's compute nodes
in that order: F as F, B as pipesim's I, W as W, chunk 0 on stage r and chunk 1 on stage
2P-1-r (the fork's V layout, ``ParallelTransformer``'s offsets).
"""

from __future__ import annotations

import contextlib
import io
import json
import sys
from pathlib import Path

from zb_fork import TAG, load, repo_argument, tag_commit, v_orders

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[2]
COMMAND = "python3 tests/schedules/golden/make_v_greedy_golden.py --zb-repo ZB"
OUT = HERE / "v_greedy.json"
MODULE = "megatron/core/pipeline_parallel/v_schedule_greedy.py"
SETUPS = {"half": "v-half", "min": "v-min"}


def cases() -> list[tuple[int, int]]:
    """(P, M): every P from 2 to 8 with few microbatches (the warm-up runs dry), about P, and
    2P and 3P + 1 (a steady state)."""
    return [(pp, m) for pp in range(2, 9) for m in sorted({1, 2, pp, pp + 1, 2 * pp, 3 * pp + 1})]


def fork_order(mod, pp: int, m: int, setup: str) -> list[list[str]]:
    with contextlib.redirect_stdout(io.StringIO()):   # it prints every node
        nodes = mod.PipelineGraph(pp, m, setup, 1000, 1000, 1000, 1).get_schedule()
    return v_orders(pp, nodes)


def main() -> int:
    repo = repo_argument(__doc__)
    mod = load(repo, MODULE, "v_schedule_greedy")
    commit = tag_commit(repo)
    rows = [{"schedule": name, "setup": setup, "pp": pp, "microbatches": m,
             "ranks": fork_order(mod, pp, m, setup)}
            for setup, name in SETUPS.items() for pp, m in cases()]
    doc = {"source": f"sail-sg/zero-bubble-pipeline-parallelism, {MODULE} (PipelineGraph("
                     "stages, microbatches, setup, 1000, 1000, 1000, 1).get_schedule(), as "
                     "zb_schedules.py runs the half and min setups)",
           "tag": TAG, "commit": commit, "command": COMMAND, "cases": rows}
    OUT.write_text(json.dumps(doc, separators=(",", ":")) + "\n")
    print(f"wrote {OUT.relative_to(ROOT)}: {len(rows)} cases")
    return 0


if __name__ == "__main__":
    sys.exit(main())
