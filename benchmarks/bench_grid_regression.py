"""A grid of `pipesim run` invocations, recorded as the user sees them: exit code, the --json
output and the error line. Record one before a change meant to change no number, one after,
and compare: every makespan, exit code and JSON field must be the same.

    python benchmarks/bench_grid_regression.py record before.jsonl [--quick]
    ... change the code ...
    python benchmarks/bench_grid_regression.py record after.jsonl [--quick]
    python benchmarks/bench_grid_regression.py compare before.jsonl after.jsonl

The runs go through the CLI's ``main`` in one process (not the Python API, whose signature a
refactor may change). The grid: the bundled workloads and a generated uniform one x every
registered schedule x P x M x every --p2p mode x both engines x jitter x a memory limit, plus
slow ranks, recompute and several iterations on a sample. ``engine_used`` and ``notes`` (which
engine ran, not what it computed) are left out of the comparison, unless ``--with-engine``.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import itertools
import json
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

P2P = ("async", "blocking", "batched", "torch", "torch-single", "torch-multi")
UNIFORM = """\
HYBRID_TRANSFORMER_FWD_IN_BCKWD model_parallel_NPU_group: 1 ep: 1 pp: 4 vpp: 1 ga: 8 all_gpus: 8 checkpoints: 0 checkpoint_initiates: 0 pp_comm: 1000000
8
"""


def _uniform(where: Path) -> Path:
    rows = "".join(f"layer{i} -1 1000000 NONE 0 1000000 NONE 0 1000000 ALLREDUCE 2000000 100\n"
                   for i in range(8))
    path = where / "uniform-8l.txt"
    path.write_text(UNIFORM + rows)
    return path


def grid(where: Path, quick: bool) -> list[list[str]]:
    from simulator.schedules import registry

    names = [n for n in registry.names() if n != "auto"]
    uniform = str(_uniform(where))
    cases: list[list[str]] = []
    ps, ms = ((2, 4), (4, 8)) if not quick else ((4,), (8,))
    for name, p, m, p2p, eng in itertools.product(names, ps, ms, P2P, ("simpy", "evaluator")):
        for jitter, limit in ((None, None), ("0.1", None), (None, "0.0002")):
            args = ["run", uniform, "-s", name, "--pp", str(p), "-m", str(m), "--p2p", p2p,
                    "--engine", eng]
            if jitter:
                args += ["--jitter", jitter, "--seed", "3"]
            if limit:
                args += ["--memory-limit", limit]
            cases.append(args)
    for wl, name, p2p, eng in itertools.product(
            ("workloads/gpt-24l.txt", "workloads/doc000-1f1b-test.txt"), names,
            ("async", "torch"), ("simpy", "evaluator")):
        cases.append(["run", wl, "-s", name, "--pp", "4", "-m", "8", "--p2p", p2p,
                      "--engine", eng])
    for name, eng in itertools.product(("1f1b", "zb-v", "interleaved-1f1b", "dualpipe-v"),
                                       ("simpy", "evaluator")):
        cases.append(["run", "workloads/gpt-24l.txt", "-s", name, "--pp", "4", "-m", "8",
                      "--engine", eng, "--slow-rank", "1:1.5", "--recompute", "full",
                      "--iterations", "3", "--jitter", "0.05", "--seed", "7"])
        cases.append(["run", "workloads/gpt-24l.txt", "-s", name, "--pp", "4", "-m", "8",
                      "--engine", eng, "--gpus", "16", "--set", "links.bandwidth_gbps=50"])
    return cases


def run_one(args: list[str]) -> dict:
    from simulator.cli.main import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(args + ["--json", "-"])
        except SystemExit as e:
            code = e.code if isinstance(e.code, int) else 1
    lines = [x for x in err.getvalue().splitlines() if x.startswith("pipesim: error")]
    return {"args": args, "exit": code, "json": out.getvalue(), "error": lines}


def record(path: Path, quick: bool) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        cases = grid(Path(tmp), quick)
        with path.open("w") as f:
            for args in cases:
                row = run_one(args)
                row["args"] = [a if not a.startswith(tmp) else "<uniform>" for a in args]
                row["error"] = [e.replace(tmp, "<tmp>") for e in row["error"]]
                row["json"] = row["json"].replace(tmp, "<tmp>")
                f.write(json.dumps(row) + "\n")
    print(f"{len(cases)} runs written to {path}")


def _load(path: Path, with_engine: bool, ignore: frozenset = frozenset()) -> dict[str, dict]:
    rows = {}
    for line in path.open():
        row = json.loads(line)
        if row["json"].strip():
            d = json.loads(row["json"])
            if not with_engine:
                d.pop("engine_used", None)
                d.pop("notes", None)
            if ignore:   # a change meant to add a warning, and nothing else
                d["warnings"] = [w for w in d.get("warnings", []) if w["code"] not in ignore]
            row["json"] = d
        rows[json.dumps(row["args"])] = row
    return rows


def compare(a: Path, b: Path, with_engine: bool, ignore: frozenset = frozenset()) -> int:
    ra, rb = _load(a, with_engine, ignore), _load(b, with_engine, ignore)
    keys = sorted(set(ra) & set(rb))
    differ = [k for k in keys if ra[k] != rb[k]]
    for k in differ[:5]:
        x, y = ra[k], rb[k]
        print("differs:", " ".join(json.loads(k)))
        for f in ("exit", "error"):
            if x[f] != y[f]:
                print(f"  {f}: {x[f]} -> {y[f]}")
        if isinstance(x["json"], dict) and isinstance(y["json"], dict):
            for f in sorted(set(x["json"]) | set(y["json"])):
                if x["json"].get(f) != y["json"].get(f):
                    print(f"  {f}: {str(x['json'].get(f))[:160]} -> {str(y['json'].get(f))[:160]}")
    only = len(set(ra) ^ set(rb))
    print(f"{len(ra)} and {len(rb)} runs; {len(keys)} compared; {len(differ)} differ; "
          f"{only} in one file only")
    return 1 if differ or only else 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("record")
    r.add_argument("out", type=Path)
    r.add_argument("--quick", action="store_true", help="P = 4, M = 8 only (about a sixth)")
    c = sub.add_parser("compare")
    c.add_argument("a", type=Path)
    c.add_argument("b", type=Path)
    c.add_argument("--with-engine", action="store_true")
    c.add_argument("--ignore-warning", action="append", default=[], metavar="CODE",
                   help="drop this warning code from both sides (a change that adds it)")
    args = ap.parse_args(argv)
    if args.cmd == "record":
        record(args.out, args.quick)
        return 0
    return compare(args.a, args.b, args.with_engine, frozenset(args.ignore_warning))


if __name__ == "__main__":
    sys.exit(main())
