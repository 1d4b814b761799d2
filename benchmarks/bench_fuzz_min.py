"""Every reproducer of ``../shared/fuzz-min`` (and the README's cases without a file), whole
process: exit code, wall and CPU seconds, peak RSS, against issue 26's target (exit 2 or a
normal run, in < 2 s and < 500 MB).

    python benchmarks/bench_fuzz_min.py [--json OUT.json] [--repeat 3]

The times are the benchmark's to say (a test cannot hold a machine's speed); the tests check
each refusal's exact line (tests/cli/test_refusals.py).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
FUZZ_MIN = REPO.parent / "shared" / "fuzz-min"
GPT = REPO / "workloads" / "gpt-24l.txt"
LIMIT_S, LIMIT_MB = 2.0, 500


def cases(tmp: Path) -> list[tuple[str, list[str]]]:
    """(what, pipesim arguments) for each reproducer, as the fuzz-min README runs them."""
    f = FUZZ_MIN
    fifo = tmp / "fifo"
    os.mkfifo(fifo)
    return [
        ("AICB header pp 10^6", ["run", f"{f}/hang_aicb_header_pp1000000.txt", "--pp", "2"]),
        ("AICB header pp 10^6, inspect", ["inspect", f"{f}/hang_aicb_header_pp1000000.txt"]),
        ("AICB header pp 2^40", ["run", f"{f}/memblowup_aicb_header_pp2e40.txt", "--pp", "2"]),
        ("P 2000, 1f1b, 96k actions",
         ["run", f"{f}/slow_memblowup_P2000_1f1b_96k_actions.txt", "-s", "1f1b"]),
        ("P 1000, looped-bfs, 96k actions",
         ["run", f"{f}/slow_memblowup_P1000_looped-bfs_96k_actions.txt", "-s", "looped-bfs"]),
        ("AICB header pp 2^40, no layers", ["run", f"{f}/hang_aicb_pp_2pow40_looped_bfs.txt"]),
        ("... -s looped-bfs", ["run", f"{f}/hang_aicb_pp_2pow40_looped_bfs.txt", "-s",
                               "looped-bfs"]),
        ("... --pp 2", ["run", f"{f}/hang_aicb_pp_2pow40_looped_bfs.txt", "--pp", "2"]),
        ("pp 1000", ["run", f"{f}/hang_pp1000.txt"]),
        ("vpp 1000, ga 1000, 8 rows", ["run", f"{f}/hang_vpp1000_ga1000_8rows.txt"]),
        ("ga 8388608", ["run", f"{f}/memblowup_ga_8388608_float.txt"]),
        ("pp 1000, vpp 8", ["run", f"{f}/slow_refusal_pp1000_vpp8.txt"]),
        ("auto at M 10,000", ["run", str(GPT), "-s", "auto", "-m", "10000"]),
        ("binary YAML", ["run", str(GPT), "--calibration", f"{f}/internal_error_binary_yaml.yaml"]),
        ("400-digit cost", ["schedule", "auto", "--pp", "4", "-m", "8", "--stage-costs",
                            f"{f}/internal_error_costs_int_10e400.yaml"]),
        ("a FIFO", ["run", str(fifo)]),
        ("/dev/zero", ["run", "/dev/zero"]),
        ("stdout /dev/full", ["run", str(GPT)]),   # run with stdout on /dev/full below
    ]


def measure(args: list[str], stdout) -> dict:
    """One whole process; its own rusage (os.wait4), not the children's running maximum."""
    t0 = time.perf_counter()
    p = subprocess.Popen([sys.executable, "-m", "simulator", *args], stdout=stdout,
                         stderr=subprocess.PIPE, text=True)
    err_text = p.stderr.read()
    _, status, ru = os.wait4(p.pid, 0)
    wall = time.perf_counter() - t0
    p.stderr.close()
    p.returncode = os.waitstatus_to_exitcode(status)
    err = err_text.strip().splitlines()
    return {"exit": p.returncode, "wall_s": round(wall, 3),
            "cpu_s": round(ru.ru_utime + ru.ru_stime, 3),
            "peak_rss_mb": round(ru.ru_maxrss / 1024, 1),   # Linux: KiB
            "stderr_lines": len(err), "first_line": err[0][:160] if err else ""}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", type=Path, help="write the rows here")
    ap.add_argument("--repeat", type=int, default=3,
                    help="runs per case; the median run (by wall time) is reported")
    args = ap.parse_args(argv)
    if not FUZZ_MIN.is_dir():
        print(f"no {FUZZ_MIN}: the reproducers live in ../shared beside the checkout")
        return 2
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for what, a in cases(Path(tmp)):
            runs = []
            for _ in range(args.repeat):
                with open("/dev/full" if what.startswith("stdout") else os.devnull, "w") as out:
                    runs.append(measure(a, out))
            runs.sort(key=lambda m: m["wall_s"])
            row = {"case": what, "args": a, **runs[len(runs) // 2],
                   "wall_s_all": [m["wall_s"] for m in runs]}
            row["meets"] = (row["exit"] in (0, 1, 2) and row["wall_s"] < LIMIT_S
                            and row["peak_rss_mb"] < LIMIT_MB and row["stderr_lines"] <= 1)
            rows.append(row)
    print(f"| case | exit | wall s | CPU s | peak RSS MB | < {LIMIT_S:g} s, "
          f"< {LIMIT_MB} MB, one line |")
    print("|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['case']} | {r['exit']} | {r['wall_s']:.2f} | {r['cpu_s']:.2f} | "
              f"{r['peak_rss_mb']:.0f} | {'yes' if r['meets'] else 'NO'} |")
    if args.json:
        args.json.write_text(json.dumps({"rows": rows}, indent=1) + "\n")
    return 0 if all(r["meets"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
