"""How long the Gantt chart of a large run takes to draw and save: P = 64, M = 512 (65,536 bars,
the memory panel included), CPU and wall time, best of ``--repeats``. A figure, not a test:
tests check what is drawn, this says how fast (on a quiet machine about 10 s).

    python benchmarks/bench_gantt.py [--repeats 3] [--json PATH]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args(argv)
    from simulator import simulate
    from simulator.export.gantt import draw_gantt, save_figure
    from simulator.workload import uniform_workload

    r = simulate(uniform_workload(64, 200_000, 200_000, 200_000, pp_comm=1 << 22), "1f1b",
                 pp=64, microbatches=512)
    runs = []
    with tempfile.TemporaryDirectory() as tmp:
        for _ in range(args.repeats):
            w0, c0 = time.perf_counter(), time.process_time()
            save_figure(draw_gantt(r), Path(tmp) / "big.png")
            runs.append({"wall_s": round(time.perf_counter() - w0, 2),
                         "cpu_s": round(time.process_time() - c0, 2)})
    best = min(runs, key=lambda x: x["cpu_s"])
    print(f"P=64 M=512 Gantt (draw + save png): best {best['cpu_s']} s CPU, {best['wall_s']} s "
          f"wall; runs {runs}")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({"case": "1f1b P=64 M=512", "runs": runs}, indent=1)
                             + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
