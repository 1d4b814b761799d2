"""Regenerate ``v_zb.json``: the zero-bubble fork's V-ZB layouts, as its runtime lays them out
under ``--zero-bubble-v-schedule`` (memory setup ``zb``, the default), for given costs and
memory (the tests do not need the fork).

Run from the repository root with a checkout (or bare git directory) of
sail-sg/zero-bubble-pipeline-parallelism, never committed here:

    python3 tests/schedules/golden/make_v_zb_golden.py --zb-repo ZB

The fork's runtime at tag zero-bubble-v0.1.0 (``megatron/core/pipeline_parallel/
zb_schedules.py``, the V scheduler) builds this setup with ``v_schedule.PipelineGraph(stages,
microbatches, f, b, w, c, f_mem, b_mem, w_mem, max_mem=None).get_v_schedule()`` over its
profiled times and runs each rank's list in order. This script loads that module from the tag
(it imports nothing of the fork) and records each rank's compute nodes in that order: F as F,
B as pipesim's I, W as W, chunk 0 on stage r and chunk 1 on stage 2P-1-r (the fork's V layout),
or that the scheduler stops (an assertion) for the case.
"""

from __future__ import annotations

import contextlib
import io
import json
import random
import sys
from pathlib import Path

from zb_fork import TAG, load, repo_argument, tag_commit, v_orders

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[2]
COMMAND = "python3 tests/schedules/golden/make_v_zb_golden.py --zb-repo ZB"
OUT = HERE / "v_zb.json"
MODULE = "megatron/core/pipeline_parallel/v_schedule.py"


def fork_memory(h: int, a: int, s: int) -> list[int]:
    """The fork's memory model for its V scheduler (zb_schedules.py): F keeps 34h + 5as, W
    frees 32h, B the rest."""
    f, w = 34 * h + 5 * a * s, -32 * h
    return [f, -f - w, w]


def cases() -> list[dict]:
    out = []

    def add(pp, m, f, b, w, c, memory):
        out.append({"pp": pp, "microbatches": m, "f": f, "b": b, "w": w, "comm": c,
                    "memory": memory})

    # the fork's start-up layout (unit costs, before its profile): every P with few
    # microbatches, about P, 2P and 3P + 1, memory of a 1.5B-like and a 14.6B-like layer
    for pp in range(2, 9):
        for m in sorted({1, 2, pp, pp + 1, 2 * pp, 3 * pp + 1}):
            add(pp, m, 1000, 1000, 1000, 1, fork_memory(2304, 24, 1024))
    for pp in (4, 8):
        for m in (2 * pp, 3 * pp):
            add(pp, m, 1000, 1000, 1000, 1, fork_memory(5120, 40, 1024))
    # profile-like costs (us): F a little above B, W about half to two thirds of them, the
    # p2p delay a few percent of F
    for pp, m, f, b, w, c in ((8, 24, 18500, 18100, 9300, 600), (8, 64, 18500, 18100, 9300, 760),
                              (16, 48, 14400, 14400, 9700, 1600), (6, 18, 9000, 9500, 7000, 900)):
        add(pp, m, f, b, w, c, fork_memory(4096, 32, 1024))
    # seeded random cases: costs, p2p delay, memory
    rng = random.Random(20261203)
    for _ in range(60):
        pp = rng.choice((2, 3, 4, 5, 6, 8))
        m = rng.choice((1, 2, 3, pp, pp + 1, 2 * pp, 3 * pp + 1))
        f, b, w = (rng.choice((1, 2, 3, 5, 10, 1000)) for _ in range(3))
        c = rng.choice((1, 2, 5, 100))
        h, a, s = rng.choice(((1024, 16, 1024), (2304, 24, 1024), (4096, 32, 4096), (8, 1, 1)))
        add(pp, m, f, b, w, c, fork_memory(h, a, s))
    return out


def fork_order(mod, case: dict) -> list[list[str]] | None:
    pp = case["pp"]
    f_mem, b_mem, w_mem = case["memory"]
    graph = mod.PipelineGraph(pp, case["microbatches"], case["f"], case["b"], case["w"],
                              case["comm"], f_mem=f_mem, b_mem=b_mem, w_mem=w_mem, max_mem=None)
    try:
        with contextlib.redirect_stdout(io.StringIO()):   # it prints every node
            nodes = graph.get_v_schedule()
    except (AssertionError, IndexError):
        return None
    return v_orders(pp, nodes)


def main() -> int:
    repo = repo_argument(__doc__)
    mod = load(repo, MODULE, "v_schedule")
    commit = tag_commit(repo)
    rows = []
    for case in cases():
        ranks = fork_order(mod, case)
        rows.append(dict(case, fails=True) if ranks is None else dict(case, ranks=ranks))
    doc = {"source": f"sail-sg/zero-bubble-pipeline-parallelism, {MODULE} (PipelineGraph("
                     "stages, microbatches, f, b, w, c, f_mem, b_mem, w_mem, max_mem=None)"
                     ".get_v_schedule(), as zb_schedules.py runs the zb setup)",
           "tag": TAG, "commit": commit, "command": COMMAND, "cases": rows}
    OUT.write_text(json.dumps(doc, separators=(",", ":")) + "\n")
    print(f"wrote {OUT.relative_to(ROOT)}: {len(rows)} cases, "
          f"{sum(1 for r in rows if r.get('fails'))} where the fork's scheduler stops")
    return 0


if __name__ == "__main__":
    sys.exit(main())
