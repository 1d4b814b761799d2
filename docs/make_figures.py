"""Regenerate the pictures in docs/img/ from the bundled workloads.

    python3 docs/make_figures.py [--out DIR]

Every figure is a simulated run of ``workloads/gpt-24l.txt`` (a 24-layer GPT, TP 2, 8 MiB
activations between stages) on the built-in system. Schedules that are not registered (yet) are
skipped with a note, so the script runs at any stage of the project. The PNGs carry no dates, so
re-running it on an unchanged tree rewrites the same bytes.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from simulator import simulate  # noqa: E402
from simulator.errors import PipesimError  # noqa: E402
from simulator.export.gantt import comparison_title, write_comparison, write_gantt  # noqa: E402
from simulator.schedules import registry  # noqa: E402

WORKLOAD = REPO / "workloads" / "gpt-24l.txt"
P, M = 4, 8

# (file stem, schedule, vpp): one chart each, at P=4, M=8
SINGLE = [
    ("gantt-1f1b", "1f1b", None),
    ("gantt-gpipe", "gpipe", None),
    ("gantt-interleaved-1f1b", "interleaved-1f1b", 2),
    ("gantt-zb-h1", "zb-h1", None),
    ("gantt-zb-v", "zb-v", None),
    ("gantt-dualpipe-v", "dualpipe-v", None),
]
# the stacked comparison, in this order (speed-ups over the first): the same runs as above
COMPARED = [(name, vpp) for _, name, vpp in SINGLE]
# one larger run, to show how a long steady state reads
LARGE = ("gantt-1f1b-p16-m64", "1f1b", 16, 64)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=REPO / "docs" / "img",
                        help="directory to write the PNGs to (default: docs/img)")
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    known = set(registry.names())

    for stem, name, vpp in SINGLE:
        if name not in known:
            print(f"skip {stem}: schedule {name!r} is not registered")
            continue
        result = simulate(WORKLOAD, name, pp=P, microbatches=M, vpp=vpp)
        print("wrote", write_gantt(result, args.out / f"{stem}.png").relative_to(REPO))

    results = [simulate(WORKLOAD, name, pp=P, microbatches=M, vpp=vpp)
               for name, vpp in COMPARED if name in known]
    base = results[0]
    titles = [comparison_title(r, None if r is base else base.makespan_ns / r.makespan_ns,
                               base.schedule.name) for r in results]
    path = write_comparison(results, args.out / "compare.png", titles)
    print("wrote", path.relative_to(REPO))

    stem, name, pp, m = LARGE
    try:
        result = simulate(WORKLOAD, name, pp=pp, microbatches=m)
    except PipesimError as err:
        print(f"skip {stem}: {err}")
    else:
        print("wrote", write_gantt(result, args.out / f"{stem}.png").relative_to(REPO))
    return 0


if __name__ == "__main__":
    sys.exit(main())
