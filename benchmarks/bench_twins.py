"""What each fast twin saves, whole process: every fast path beside its plain reference, on the
benchmarks' cases, with the fast path on and off.

    python benchmarks/bench_twins.py [--repeats N] [--only NAME,...] [--json PATH]

A case is one command line (``pipesim run`` on the 1M-action one-layer case of
``benchmarks/scaling.py`` and ``bench_consolidation.py``, on ``workloads/gpt-24l.txt`` and on the
README tour's generated GPT-3 175B; ``pipesim plan`` on gpt-24l at 64 GPUs, ``-j 1``). Each is run in a fresh interpreter twice per repeat,
interleaved (so the machine's load moves both alike): once as it is, once with the twin turned
off, either by the command's own option (``--engine simpy``, ``--layer-by-layer``) or by a few
lines run in the child before ``main`` that put the plain reference in the fast path's place
(``OFF`` below; the fast variant runs the same launcher with nothing patched). CPU = user +
sys of the child and what it waited for (``wait4``); medians of ``--repeats`` (default 3).

gain = (plain - fast) / plain: the share of the command's whole-process time the twin removes.
docs/performance.md ("Fast paths") states the rule the figures are read against: a twin under
~10 % on every command it speeds up goes.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

LAUNCH = ("import sys\n{off}\nfrom simulator.cli.main import main\n"
          "sys.exit(main(sys.argv[1:]))\n")

# the plain reference put in each fast path's place (run in the child before main). The fast
# variant runs the same imports (each patch's lines up to its first assignment) without the
# patch, so both pay the same imports at the same moment (main turns the collector off only
# for the run)
OFF = {
    "lookahead": ("from simulator.engine import runtime as R\n"
                  "R._Run._can_look_ahead = lambda self: False"),
    "evaluator": ("from simulator.engine import evaluator as E\n"
                  "E.unsupported = lambda runtime: 'turned off'"),
    "fire_at": ("from simulator.engine import runtime as R, evaluator_async as A\n"
                "def fire_at(env, ev, delay):\n"
                "    env.timeout(delay).callbacks.append(lambda _, ev=ev: ev.succeed())\n"
                "R.fire_at = A.fire_at = fire_at"),
    "validate_fast_pass": ("from simulator.schedules import validate as V\n"
                           "V._rules_hold = lambda s: False"),
    "validate_megatron_order": ("from simulator.schedules import validate as V\n"
                                "V._megatron_order = lambda s, stage_of: False"),
    # a tuple of Actions that still carries the kind letters the generator records as facts
    "rank_columns": ("from simulator.schedules.library import one_f_one_b as O\n"
                     "made = O.one_f_one_b_rank\n"
                     "class Actions(tuple): pass\n"
                     "def as_actions(*a, **k):\n"
                     "    r = made(*a, **k)\n"
                     "    t = Actions(r.actions())\n"
                     "    t.kinds = r.kinds\n"
                     "    return t\n"
                     "O.one_f_one_b_rank = as_actions"),
    "cli_plain_reader": ("import simulator.cli.run_impl as RI\n"
                         "RI.parse_run_args = lambda args: None"),
}


def cases(tmp: Path) -> dict[str, list[str]]:
    from scaling import MILLION_M, ONE_LAYER_P, one_layer_workload_text
    one_layer = tmp / "one_layer_p32_m15625.txt"
    one_layer.write_text(one_layer_workload_text(ONE_LAYER_P, MILLION_M))
    million = ["run", str(one_layer), "--max-actions", "0", "--json", "-"]
    return {
        "1M-evaluator": million + ["--engine", "evaluator"],
        "1M-simpy": million + ["--engine", "simpy"],
        "gpt-24l": ["run", "workloads/gpt-24l.txt"],
        "gpt-24l-json": ["run", "workloads/gpt-24l.txt", "--json", "-"],
        # the README's tour: 96 layers, 12 a stage (per-layer steps cost most here)
        "gpt3-175b": ["run", "workloads/generated/gpt3-175b-tp8-pp8-ga16-a100.txt", "--gpus",
                      "128"],
        "plan-24l": ["plan", "workloads/gpt-24l.txt", "--gpus", "64", "-j", "1", "--json", "-"],
    }


# twin -> [(case, how the plain run differs: an OFF patch or options replacing the fast ones)]
TWINS: dict[str, list[tuple[str, str | tuple[str, ...]]]] = {
    "evaluator": [("1M-evaluator", ("--engine", "simpy")), ("plan-24l", "evaluator")],
    "lookahead": [("1M-simpy", "lookahead"), ("gpt-24l", "lookahead")],
    "fire_at": [("1M-simpy", "fire_at")],
    "per_action_steps": [("gpt-24l", ("--layer-by-layer",)),
                         ("gpt3-175b", ("--layer-by-layer",))],
    "validate_fast_pass": [("1M-evaluator", "validate_fast_pass"),
                           ("gpt-24l", "validate_fast_pass")],
    "validate_megatron_order": [("1M-evaluator", "validate_megatron_order")],
    "rank_columns": [("1M-evaluator", "rank_columns")],
    "cli_plain_reader": [("gpt-24l", "cli_plain_reader"), ("gpt-24l-json", "cli_plain_reader")],
}


def _process(argv: list[str], off: str = "") -> tuple[float, float]:
    """(CPU s, wall s) of one ``pipesim ARGV`` in a fresh interpreter."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p))
    cmd = [sys.executable, "-c", LAUNCH.format(off=off), *argv]
    with tempfile.TemporaryFile() as fo, tempfile.TemporaryFile("w+") as fe:
        t0 = time.perf_counter()
        proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=fo, stderr=fe)
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - t0
        fe.seek(0)
        err = fe.read()
    if os.waitstatus_to_exitcode(status) != 0:
        raise RuntimeError(f"pipesim {' '.join(argv[:3])}... failed: {err.strip()[-400:]}")
    return usage.ru_utime + usage.ru_stime, wall


def measure(argv: list[str], plain: str | tuple[str, ...], repeats: int) -> dict:
    if isinstance(plain, tuple):
        fast_argv = argv
        plain_argv = _replace_options(argv, plain)
        off = ""
    else:
        fast_argv = plain_argv = argv
        off = OFF[plain]
    same_imports = "\n".join(line for line in off.splitlines()
                             if line.startswith(("import ", "from ")))
    fast, slow = [], []
    for _ in range(repeats):
        fast.append(_process(fast_argv, same_imports if off else ""))
        slow.append(_process(plain_argv, off))
    f_cpu = statistics.median(c for c, _ in fast)
    p_cpu = statistics.median(c for c, _ in slow)
    return {"fast_cpu_s": round(f_cpu, 3), "plain_cpu_s": round(p_cpu, 3),
            "fast_wall_s": round(statistics.median(w for _, w in fast), 3),
            "plain_wall_s": round(statistics.median(w for _, w in slow), 3),
            "gain": round((p_cpu - f_cpu) / p_cpu, 3), "runs": repeats,
            "fast_cpu_runs": [round(c, 3) for c, _ in fast],
            "plain_cpu_runs": [round(c, 3) for c, _ in slow]}


def _replace_options(argv: list[str], plain: tuple[str, ...]) -> list[str]:
    """``argv`` with ``plain``'s option in place of its fast value (or added, for a flag)."""
    out = list(argv)
    if len(plain) == 2 and plain[0] in out:
        out[out.index(plain[0]) + 1] = plain[1]
        return out
    return out + list(plain)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--only", default="", help="comma-separated twins (default: all)")
    ap.add_argument("--json", type=Path, help="write the figures here too")
    args = ap.parse_args(argv)
    only = [t for t in args.only.split(",") if t] or list(TWINS)
    out: dict = {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="minutes"),
                 "commit": subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT,
                                          capture_output=True, text=True).stdout.strip(),
                 "load": os.getloadavg()[0], "repeats": args.repeats, "twins": {}}
    with tempfile.TemporaryDirectory() as tmp:
        all_cases = cases(Path(tmp))
        for twin in only:
            for case, plain in TWINS[twin]:
                fig = measure(all_cases[case], plain, args.repeats)
                out["twins"].setdefault(twin, {})[case] = fig
                print(f"{twin:24s} {case:14s} fast {fig['fast_cpu_s']:7.3f} s  plain "
                      f"{fig['plain_cpu_s']:7.3f} s  gain {fig['gain']:6.1%}", flush=True)
                out["load_after"] = os.getloadavg()[0]
                if args.json:       # after each figure: a failure later keeps the ones taken
                    args.json.write_text(json.dumps(out, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
