"""`pipesim plan` wall time on the issue's two targets, local executor, default workers:

1. ``workloads/gpt-24l.txt --gpus 64`` (the file's global batch, the built-in system);
2. a generated GPT with 96 layers (h 12288, 96 heads, s 2048, b 1) ``--gpus 1024
   --global-batch-size 256`` on the H100 preset (80 GiB per GPU): from a file generated at TP 8, and
   from the model flags (TP 1, 2, 4, 8), with every schedule and without V-Half / V-Min (whose
   construction is most of the time at P = 64 and 128).

Each runs as ``python -m simulator plan`` in a child (start-up and worker pool included), and
the best candidate's ``pipesim run`` command is run after it to check that it reproduces the
plan's ``makespan_ns`` exactly. Prints one line per case; exit 1 if a command does not
reproduce. Usage: ``python benchmarks/bench_plan.py [--no-prune]``.
"""

from __future__ import annotations

import collections
import json
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def pipesim(*argv: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "simulator", *argv], cwd=ROOT,
                          capture_output=True, text=True)


def case(name: str, argv: list[str], out: Path) -> bool:
    dest = out / f"{name}.json"
    t = time.perf_counter()
    done = pipesim("plan", *argv, "--max-work", "0", "--json", str(dest))   # the whole space
    wall = time.perf_counter() - t
    if done.returncode:
        print(f"{name}: plan failed: {done.stderr.strip()}")
        return False
    data = json.loads(dest.read_text())
    cands = data["candidates"]
    why = collections.Counter(
        "ran" if c["makespan_ns"] is not None else
        "pruned" if (c["reason"] or "").startswith("not run") else
        "too large" if (c["reason"] or "").startswith(("--max-actions", "auto not")) else
        "other" for c in cands)
    fits = sum(c["feasible"] for c in cands)
    best = data["best"]
    again = pipesim(*shlex.split(best["command"])[1:], "--json", "-")
    got = json.loads(again.stdout)["makespan_ns"] if again.returncode == 0 else None
    same = got == best["makespan_ns"]
    print(f"{name}: {len(cands)} candidates in {wall:.1f} s wall ({dict(why)}; {fits} fit); "
          f"best {best['key']} {best['makespan_ns'] / 1e6:.3f} ms; its command reproduces it: "
          f"{'yes' if same else f'NO ({got})'}")
    return same


def registry_names() -> list[str]:
    done = subprocess.run([sys.executable, "-c", "from simulator.schedules import registry; "
                           "print(','.join(registry.names()))"], cwd=ROOT, capture_output=True,
                          text=True, check=True)
    return done.stdout.strip().split(",")


def main() -> int:
    extra = sys.argv[1:]
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp)
        wl96 = out / "gpt-96l.txt"
        gen = pipesim("generate", "--model", "gpt", "--layers", "96", "--hidden", "12288",
                      "--heads", "96", "--seq", "2048", "--micro-batch", "1", "--tp", "8",
                      "--dp", "128", "--ga", "2", "-o", str(wl96))
        if gen.returncode:
            print(gen.stderr)
            return 1
        ok = case("gpt-24l --gpus 64", ["workloads/gpt-24l.txt", "--gpus", "64", *extra], out)
        h100 = ["--global-batch-size", "256", "--system", "configs/system/h100.yaml"]
        ok &= case("gpt-96l file (TP 8) --gpus 1024", [str(wl96), "--gpus", "1024", *h100,
                                                        *extra], out)
        flags = ["--model", "gpt", "--layers", "96", "--hidden", "12288", "--heads", "96",
                 "--seq", "2048", "--gpu", "h100", "--gpus", "1024", "--out", str(out), *h100]
        ok &= case("gpt-96l model flags (TP 1-8) --gpus 1024", [*flags, *extra], out)
        some = ",".join(n for n in registry_names() if n not in ("v-half", "v-min"))
        ok &= case("  the same without v-half, v-min", [*flags, "-s", some, *extra], out)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
