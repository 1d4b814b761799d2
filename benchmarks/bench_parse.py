"""How long parsing the largest real workload files takes (in-process, best of ``--repeats``):
SimAI's workload_analytical.txt and the DeepSeek-16B AICB file from ../shared/workloads-real.
A figure, not a test (about 10-20 ms each on a quiet machine).

    python benchmarks/bench_parse.py [--repeats 5]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
REAL = REPO.parent / "shared" / "workloads-real"
FILES = ("workload_analytical.txt", "DeepSeek-16B-tp2-pp2-dp2-ep4-g32-mpdeptip.txt")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args(argv)
    from simulator.workload.parser import parse_workload_text

    for name in FILES:
        text = (REAL / name).read_text()
        best = float("inf")
        for _ in range(args.repeats):
            t0 = time.perf_counter()
            parse_workload_text(text)
            best = min(best, time.perf_counter() - t0)
        print(f"{name}: {len(text.splitlines()):,} lines, best {best * 1e3:.1f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
