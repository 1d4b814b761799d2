"""The zero-bubble fork's V-ZB layout (``v-zb``) against torch's fixed ZB-V order (``zb-v``) on
the same runs: what laying the V out for the run's own costs, as the fork's runtime does, buys
or costs. Both run two chunks a rank in a V on the same workload, system and microbatches.

    python benchmarks/bench_v_zb.py [--workload W] [--system S] [--json PATH]

Prints, for P in 2, 3, 4, 6 and M in P, 2P, 3P, 4P, each schedule's iteration time (the SimPy
engine, the run's default p2p) and v-zb's difference, then the median and range.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import statistics
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

SHAPES = [(pp, k * pp) for pp in (2, 3, 4, 6) for k in (1, 2, 3, 4)]


def makespan(workload: str, schedule: str, pp: int, m: int, system: str | None) -> float:
    from simulator.cli.main import main

    argv = ["run", workload, "-s", schedule, "--pp", str(pp), "-m", str(m), "--vpp", "2",
            "--json", "-"] + (["--system", system] if system else [])
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
        code = main(argv)
    if code != 0:
        raise SystemExit(f"bench_v_zb: {' '.join(argv)}: exit {code}")
    return json.loads(out.getvalue())["makespan_ns"]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--workload", default=str(REPO / "workloads" / "gpt-24l.txt"))
    ap.add_argument("--system", default=None)
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args(argv)
    rows = []
    print("| P | M | zb-v (torch) | v-zb (the fork) | v-zb against zb-v |")
    print("|---:|---:|---:|---:|---:|")
    for pp, m in SHAPES:
        torch_ns = makespan(args.workload, "zb-v", pp, m, args.system)
        fork_ns = makespan(args.workload, "v-zb", pp, m, args.system)
        diff = fork_ns / torch_ns - 1
        rows.append({"pp": pp, "microbatches": m, "zb_v_ns": torch_ns, "v_zb_ns": fork_ns,
                     "difference": diff})
        print(f"| {pp} | {m} | {torch_ns / 1e6:.3f} ms | {fork_ns / 1e6:.3f} ms | "
              f"{diff * 100:+.2f} % |")
    diffs = [r["difference"] for r in rows]
    print(f"\nv-zb against zb-v: median {statistics.median(diffs) * 100:+.2f} %, "
          f"from {min(diffs) * 100:+.2f} to {max(diffs) * 100:+.2f} % over {len(rows)} runs")
    if args.json:
        args.json.write_text(json.dumps({"workload": args.workload, "system": args.system,
                                         "rows": rows}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
