"""End-to-end fuzz of ``pipesim run``: mutated real workload files under random options.

Each case mutates a real file (../shared/workloads-real beside the checkout; tokens dropped, swapped, replaced by
junk or huge numbers, lines dropped or duplicated, bytes inserted) and runs ``simulate`` with
random ``--pp``, ``--vpp``, ``-m`` and schedule, in a forked child with a 10 s limit and a 1 GiB
address-space cap, the way a user's command would meet it. It counts what issue 14 targets:
tracebacks (anything but a one-line PipesimError), runs over 10 s, the peak RSS, and how long
refusals of impossible sizes take.

    python benchmarks/bench_fuzz.py --cases 100000 --workers 2 [--append docs/performance.md]

Deterministic: case k uses random.Random(seed * 1_000_003 + k).
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import random
import resource
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

LIMIT_S = 10.0
RSS_CAP = 1 << 30
HEAD_ROWS = 60
SCHEDULES = ("1f1b", "gpipe", "interleaved-1f1b", "zb-h1", "zb-v", "dualpipe-v", "v-half",
             "hanayo", "looped-bfs", "2bw", "dualpipe", "zb-h2", "v-min")
HUGE = ("8388608", "8388608.0", "1000000", "99999999999", "4000", "1e9", "-1", "0", "nan")


def seeds() -> list[str]:
    out = []
    for p in sorted((REPO.parent / "shared" / "workloads-real").rglob("*.txt")):
        lines = p.read_text(errors="replace").split("\n")
        if len(lines) > HEAD_ROWS + 2:          # keep the big files' first rows, count fixed
            lines = [lines[0], str(HEAD_ROWS), *lines[2:2 + HEAD_ROWS]]
        out.append("\n".join(lines))
    return out


def mutate(text: str, rng: random.Random) -> bytes:
    lines = text.split("\n")
    for _ in range(rng.choice((0, 0, 1, 1, 2, 3))):   # a third of the cases: options only
        kind = rng.choice(("drop_token", "swap_tokens", "junk", "huge", "drop_line", "dup_line",
                           "bytes"))
        i = rng.randrange(len(lines))
        toks = lines[i].split()
        if kind == "drop_line" and len(lines) > 1:
            del lines[i]
        elif kind == "dup_line":
            lines.insert(i, lines[i])
        elif kind == "bytes":
            s = lines[i]
            at = rng.randint(0, len(s))
            lines[i] = s[:at] + rng.choice(("\x00", "\r", "\t", ":", "-", "9" * 12, "é")) + s[at:]
        elif toks:
            j = rng.randrange(len(toks))
            if kind == "drop_token":
                del toks[j]
            elif kind == "swap_tokens":
                k = rng.randrange(len(toks))
                toks[j], toks[k] = toks[k], toks[j]
            elif kind == "junk":
                toks[j] = rng.choice(("NaN", "ALLREDUCE_EP", "ga:", "pp:", "x", "1.5", ""))
            else:
                toks[j] = rng.choice(HUGE)
            lines[i] = "\t".join(toks)
    return "\n".join(lines).encode()


def options(rng: random.Random) -> dict:
    return {"pp": rng.choice((None, None, 1, 2, 2, 4, 4, 8, 1000, 4096)),
            "vpp": rng.choice((None, None, None, 1, 2, 3, 1000)),
            "microbatches": rng.choice((None, None, 1, 4, 8, 8, 24, 1000, 8388608)),
            "schedule": rng.choice((None, None, None) + SCHEDULES)}


def _child(data: bytes, opts: dict, conn) -> None:
    resource.setrlimit(resource.RLIMIT_AS, (RSS_CAP * 2, RSS_CAP * 2))
    from simulator import simulate
    from simulator.errors import PipesimError
    from simulator.workload.parser import parse_workload_bytes

    t0 = time.perf_counter()
    try:
        wl = parse_workload_bytes(data, "fuzz.txt")
        simulate(wl, opts["schedule"], pp=opts["pp"], vpp=opts["vpp"],
                 microbatches=opts["microbatches"])
        outcome, message = "ok", ""
    except PipesimError as err:
        outcome, message = "refused", str(err)
        if "\n" in message:
            outcome = "multiline"
    except MemoryError:
        outcome, message = "memory", "MemoryError"
    except Exception as err:  # noqa: BLE001 -- the point: any other exception is a bug
        outcome, message = "traceback", f"{type(err).__name__}: {err}"
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    conn.send((outcome, message[:300], time.perf_counter() - t0, rss))


def run_case(k: int, seed: int, texts: list[str]) -> tuple:
    rng = random.Random(seed * 1_000_003 + k)
    data = mutate(rng.choice(texts), rng)
    opts = options(rng)
    parent, child = mp.Pipe(duplex=False)
    proc = mp.get_context("fork").Process(target=_child, args=(data, opts, child))
    t0 = time.perf_counter()
    proc.start()
    if parent.poll(LIMIT_S):
        outcome, message, seconds, rss = parent.recv()
    else:
        outcome, message, seconds, rss = "timeout", "", time.perf_counter() - t0, 0
        proc.kill()
    proc.join()
    return k, outcome, message, seconds, rss, opts


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--cases", type=int, default=2000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--append", type=Path, default=None, help="markdown file to append to")
    args = ap.parse_args(argv)
    texts = seeds()
    import simulator.api  # noqa: F401 -- imported once here, inherited by every forked case
    from simulator.schedules import registry

    registry.names()
    counts: dict[str, int] = {}
    worst = (0.0, None)
    peak = 0
    slow_refusals = []
    bad = []
    t0 = time.perf_counter()
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(args.workers) as pool:
        for k, outcome, message, seconds, rss, opts in pool.map(
                lambda k: run_case(k, args.seed, texts), range(args.cases)):
            counts[outcome] = counts.get(outcome, 0) + 1
            peak = max(peak, rss)
            if seconds > worst[0]:
                worst = (seconds, (k, outcome, opts))
            if outcome == "refused" and seconds > 1.0 and ("cannot split" in message
                                                           or "--max-actions" in message):
                slow_refusals.append((k, seconds, message[:120]))
            if outcome in ("traceback", "timeout", "multiline", "memory"):
                bad.append((k, outcome, message, opts))
    wall = time.perf_counter() - t0
    lines = [
        f"## End-to-end fuzz ({time.strftime('%Y-%m-%d')}, `benchmarks/bench_fuzz.py`)",
        "",
        f"{args.cases:,} mutated real files under random --pp/--vpp/-m/schedule, seed "
        f"{args.seed}, {args.workers} workers, {wall:.0f} s wall.",
        "",
        "| target | measured | met? |",
        "|---|---|---|",
        f"| 0 tracebacks | {counts.get('traceback', 0) + counts.get('multiline', 0)} | "
        f"{'yes' if not counts.get('traceback') and not counts.get('multiline') else 'no'} |",
        f"| 0 runs over 10 s | {counts.get('timeout', 0)} (slowest case {worst[0]:.2f} s) | "
        f"{'yes' if not counts.get('timeout') else 'no'} |",
        f"| peak RSS <= 1 GB | {peak / 1e9:.2f} GB (largest child) | "
        f"{'yes' if peak <= 1e9 else 'no'} |",
        f"| refusals of impossible sizes < 1 s | {len(slow_refusals)} over 1 s | "
        f"{'yes' if not slow_refusals else 'no'} |",
        "",
        "Outcomes: " + ", ".join(f"{k} {v:,}" for k, v in sorted(counts.items())) + ".",
        "",
    ]
    for k, outcome, message, opts in bad[:10]:
        lines.append(f"- case {k}: {outcome}: {message} {opts}")
    text = "\n".join(lines)
    print(text)
    if args.append:
        with args.append.open("a") as fh:
            fh.write("\n" + text + "\n")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
