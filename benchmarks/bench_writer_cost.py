"""CPU and memory of drawing a run: the figures behind ``simulator.preflight``'s
``GANTT_ACTION_COST``, ``TRACE_ACTION_COST`` and ``TRACE_LAYER_COST`` (what an action of a run
drawn with --gantt or --trace counts against --max-actions).

Each case is one whole `pipesim run` process with the writer and one without; the difference
over the actions (or, for a trace, split between actions and layer slices by two cases of equal
actions and different rows per stage) is the writer's cost. CPU time (user + system), so a
loaded machine changes the figures little; peak RSS from the child's rusage.

    python benchmarks/bench_writer_cost.py [--json PATH]
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
GPT = REPO / "workloads" / "gpt-24l.txt"
US_PER_UNIT = 10_000_000 / 700_000   # the budget: 700,000 counted actions in about 10 s


def one_row_per_stage(folder: Path, rows: int) -> Path:
    """gpt-24l's header and its first ``rows`` layer rows: few rows a stage, many actions."""
    lines = GPT.read_text().splitlines()
    path = folder / f"rows{rows}.txt"
    path.write_text("\n".join([lines[0], str(rows)] + lines[3:3 + rows]) + "\n")
    return path


def measure(workload: Path, pp: int, m: int, extra: list[str]) -> tuple[float, int]:
    args = [sys.executable, "-m", "simulator", "run", str(workload), "--pp", str(pp), "-m",
            str(m), "-s", "gpipe", "--max-actions", "0", "--json", "/dev/null"] + extra
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    proc = subprocess.run(args, capture_output=True, cwd=REPO)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode:
        raise SystemExit(proc.stderr.decode()[-500:])
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return cpu, after.ru_maxrss * 1024


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--json", default=None)
    args = ap.parse_args(argv)
    out: dict = {"gantt": [], "trace": []}
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        for pp, m in ((2, 8000), (8, 8000)):
            actions = 2 * pp * m
            plain, _ = measure(GPT, pp, m, [])
            drawn, rss = measure(GPT, pp, m, ["--gantt", str(folder / "g.png")])
            out["gantt"].append({"pp": pp, "m": m, "actions": actions, "plain_cpu_s": plain,
                                 "drawn_cpu_s": drawn, "rss_bytes": rss,
                                 "us_per_action": (drawn - plain) / actions * 1e6})
        # equal actions, 1 and 4 rows a stage: the difference prices a layer slice
        cases = []
        for rows, pp, m in ((8, 8, 4000), (8, 2, 16000)):
            wl = one_row_per_stage(folder, rows)
            actions, layers = 2 * pp * m, 2 * pp * m * rows // pp
            plain, _ = measure(wl, pp, m, [])
            drawn, rss = measure(wl, pp, m, ["--trace", str(folder / "t.json")])
            cases.append((actions, layers, drawn - plain))
            out["trace"].append({"rows": rows, "pp": pp, "m": m, "actions": actions,
                                 "layer_slices": layers, "plain_cpu_s": plain,
                                 "drawn_cpu_s": drawn, "rss_bytes": rss})
        (a1, l1, c1), (a2, l2, c2) = cases
        per_layer = (c2 - c1) / (l2 - l1)
        per_action = (c1 - per_layer * l1) / a1
        out["trace_us_per_action"] = per_action * 1e6
        out["trace_us_per_layer_slice"] = per_layer * 1e6
    out["gantt_units"] = max(g["us_per_action"] for g in out["gantt"]) / US_PER_UNIT
    out["trace_units_per_action"] = out["trace_us_per_action"] / US_PER_UNIT
    out["trace_units_per_layer"] = out["trace_us_per_layer_slice"] / US_PER_UNIT
    text = json.dumps(out, indent=1)
    print(text)
    if args.json:
        Path(args.json).write_text(text + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
