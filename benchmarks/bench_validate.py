"""``validate()`` on large schedules, one per path of the validator, in-process CPU seconds
(``time.process_time``), best of ``--repeats`` (3) calls, each case in a fresh child process:

- ``zb-h1``: ZB-H1 at P 32, M 15,625 (1.5M actions): the flat flags and the dataflow walk;
- ``gpipe``: GPipe at P 32, M 15,625 (1M actions): the per-stage counters;
- ``1f1b``: 1F1B at that size: Megatron's order, no walk;
- ``dualpipe-v``: DualPipeV at P 16, M 4,096 (overlapped pairs, 0.4M actions): the flags;
- ``lowered``: 1F1B at P 16, M 512 with its communication (``add_communication``): the
  lowered checks;
- ``deadlock``: ZB-H1 at P 16, M 2,048 with rank 0's last F moved to its end: the
  explaining checks, to the error near the end of the walk.

``--baseline DIR`` (a checkout of the code before, e.g. ``git archive COMMIT | tar -x -C
DIR``) runs each case from it too, ``--rounds`` (3) children of each tree interleaved, the best
taken, so a shared machine's load hits both alike. Prints one JSON object; ``--out FILE``
writes it.

    python benchmarks/bench_validate.py [--repeats 3] [--rounds 3] [--baseline DIR] [--out FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
from datetime import datetime, timezone
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

CHILD = """
import gc, sys, time
sys.path.insert(0, {tree!r})
from simulator.errors import ScheduleError
from simulator.schedules import registry
from simulator.schedules.comm_pass import add_communication
from simulator.schedules.validate import validate
case = {case!r}
if case == "zb-h1":
    s = registry.generate("zb-h1", 32, 15625, 1)
elif case == "gpipe":
    s = registry.generate("gpipe", 32, 15625, 1)
elif case == "1f1b":
    s = registry.generate("1f1b", 32, 15625, 1)
elif case == "dualpipe-v":
    s = registry.generate("dualpipe-v", 16, 4096, 2)
elif case == "lowered":
    s = add_communication(registry.generate("1f1b", 16, 512, 1))
else:
    s = registry.generate("zb-h1", 16, 2048, 1)
    r0 = list(s.ranks[0])
    i = max(k for k, a in enumerate(r0) if a.kind == "F")
    r0.append(r0.pop(i))
    s = s._replace(ranks=(tuple(r0),) + tuple(s.ranks[1:]))
gc.disable()
best = None
for _ in range({repeats}):
    c = time.process_time()
    try:
        validate(s)
    except ScheduleError:
        pass
    c = time.process_time() - c
    best = c if best is None else min(best, c)
print(sum(len(r) for r in s.steps), best)
"""

CASES = ("zb-h1", "gpipe", "1f1b", "dualpipe-v", "lowered", "deadlock")


def _run(tree: Path, case: str, repeats: int) -> tuple[int, float]:
    out = subprocess.run([sys.executable, "-c", CHILD.format(tree=str(tree), case=case,
                                                             repeats=repeats)],
                         capture_output=True, text=True, check=True,
                         env=dict(os.environ, PYTHONPATH=str(tree)))
    n, cpu = out.stdout.split()
    return int(n), round(float(cpu), 4)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--baseline", type=Path)
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    commit = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"],
                            capture_output=True, text=True).stdout.strip()
    result: dict = {"date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
                    "commit": commit, "baseline": str(args.baseline) if args.baseline else None,
                    "repeats": args.repeats, "rounds": args.rounds,
                    "python": platform.python_version(),
                    "load": os.getloadavg()[0], "cases": {}}
    for case in CASES:
        ours, theirs = [], []
        for _ in range(args.rounds):
            n, cpu = _run(REPO, case, args.repeats)
            ours.append(cpu)
            if args.baseline is not None:
                theirs.append(_run(args.baseline, case, args.repeats)[1])
        row = {"steps": n, "cpu_s": min(ours)}
        if theirs:
            row["baseline_cpu_s"] = min(theirs)
            row["ratio"] = round(min(ours) / min(theirs), 3) if min(theirs) else None
        result["cases"][case] = row
        print(case, row, file=sys.stderr)
    text = json.dumps(result, indent=2)
    print(text)
    if args.out:
        args.out.write_text(text + "\n")


if __name__ == "__main__":
    main()
