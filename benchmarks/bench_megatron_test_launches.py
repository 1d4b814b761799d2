"""pipesim on Megatron-LM's own launches: the training configurations of its functional tests.

Megatron-LM's CI runs hundreds of real launches, each a ``model_config.yaml`` whose ``MODEL_ARGS``
map holds the argument list its launcher passes to ``pretrain_gpt.py`` (``true``: the bare flag;
a list: its items), under ``tests/functional_tests/test_cases/<family>/<case>/``. Each is turned
into an argument list as that launcher does (tests/functional_tests/shell_test_utils/
_run_training.sh; ``${VAR}`` paths become a placeholder path) and given to ``pipesim run
--megatron-args FILE --gpus N`` (N from the case's ``<n>N<g>G`` name, else one node of 8) on
the preset its name's GPU names (``dgx_a100``: a100, else h100); cases whose ``MODE`` is not pretraining (inference, RL) run other scripts and are
left out. The files belong to Megatron-LM: point to a checkout, they are not copied.

    python benchmarks/bench_megatron_test_launches.py --megatron PATH            # a work tree
    python benchmarks/bench_megatron_test_launches.py --megatron GITDIR --rev REV \
        --json benchmarks/results/DATE-megatron-test-launches.json

Prints how many launches ran (exit 0), were refused in one line (exit 2, each line), did not
fit (exit 4), or failed otherwise (an internal error is a bug), and the flags pipesim warned it
does not model, by how many launches carry each: what to model next.
"""

from __future__ import annotations

import argparse
import collections
import json
import re
import shlex
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from benchmarks.bench_published_runs import invoke  # noqa: E402

CASES = "tests/functional_tests/test_cases"
# the families whose launches train a decoder model pipesim reads (bert and t5 are refused
# for their encoders, hybrid for its Mamba layers: kept, to check they are refused cleanly)
FAMILIES = ("gpt", "moe", "mixtral", "hybrid", "nemotron", "bert", "t5")
_GPUS = re.compile(r"(\d+)N(\d+)G")
_VAR = re.compile(r"\$\{?[A-Z_][A-Z0-9_]*\}?")
_UNMODELLED = re.compile(r"(--[a-z0-9-]+): not modelled by pipesim")


class Source:
    """A Megatron-LM checkout: a work tree, or a git directory read at ``rev``."""

    def __init__(self, path: Path, rev: str | None):
        self.path, self.rev = path, rev
        if rev is None and not (path / CASES).is_dir():
            raise SystemExit(f"--megatron {path}: expected a Megatron-LM work tree holding "
                             f"{CASES} (or a git directory with --rev)")
        if rev is not None and subprocess.run(
                ["git", "-C", str(path), "cat-file", "-e", f"{rev}:{CASES}"],
                capture_output=True).returncode:
            raise SystemExit(f"--megatron {path} --rev {rev}: expected a git directory whose "
                             f"revision {rev} holds {CASES}")

    def configs(self) -> list[str]:
        if self.rev is None:
            return sorted(str(p.relative_to(self.path))
                          for p in (self.path / CASES).glob("*/*/model_config.yaml"))
        names = subprocess.run(["git", "-C", str(self.path), "ls-tree", "-r", "--name-only",
                                self.rev, CASES], capture_output=True, text=True, check=True)
        return sorted(n for n in names.stdout.split() if n.endswith("/model_config.yaml"))

    def read(self, name: str) -> str:
        if self.rev is None:
            return (self.path / name).read_text()
        return subprocess.run(["git", "-C", str(self.path), "show", f"{self.rev}:{name}"],
                              capture_output=True, text=True, check=True).stdout


def argument_list(model_args: dict) -> list[str]:
    """MODEL_ARGS as the functional tests' launcher passes them: ``true`` the bare flag, a
    list its items, ``${VAR}`` a placeholder path."""
    out: list[str] = []
    for key, value in model_args.items():
        if value is True:
            out.append(key)
        elif value is None or value is False or value == "":
            continue
        elif isinstance(value, list):
            out += [key, *(str(v) for v in value)]
        else:
            text = _VAR.sub("/data/x", str(value)).strip()
            # "[a b]": the launcher strips the brackets and lets the shell split the words
            out += ([key, *text[1:-1].split()] if re.fullmatch(r"\[[^]]+\]", text)
                    else [key, text])
    return out


def preset_of(case: str) -> str:
    """The system preset of the GPU a case's name says it ran on (dgx_a100, dgx_h100), else
    h100: pipesim has no GB200 or B200 preset."""
    return "a100" if "a100" in case else "h100"


def gpus_of(case: str) -> int:
    m = _GPUS.search(case)
    return int(m.group(1)) * int(m.group(2)) if m else 8


def probe(source: Source, tmp: Path) -> list[dict]:
    import yaml

    rows = []
    for name in source.configs():
        family, case = name.split("/")[-3:-1]
        if family not in FAMILIES:
            continue
        doc = yaml.safe_load(source.read(name)) or {}
        model_args = doc.get("MODEL_ARGS")
        # inference and RL cases run other scripts (their MODE says so): not training launches
        if not isinstance(model_args, dict) or doc.get("MODE", "pretraining") != "pretraining":
            continue
        path = tmp / f"{case}.txt"
        path.write_text(shlex.join(argument_list(model_args)) + "\n")
        gpus = gpus_of(case)
        res = invoke(["run", "--megatron-args", str(path), "--gpus", str(gpus), "--system",
                      str(REPO / "configs" / "system" / f"{preset_of(case)}.yaml"),
                      "--engine", "evaluator",
                      "--json", "-"])
        warned = [w["message"] for w in res["json"].get("warnings", ())]
        rows.append({"case": f"{family}/{case}", "gpus": gpus, "system": preset_of(case),
                     "exit": res["exit"],
                     "error": " ".join(res["error"]),
                     "unmodelled": sorted({m.group(1) for w in warned
                                           for m in [_UNMODELLED.search(w)] if m})})
    return rows


def summary(rows: list[dict]) -> dict:
    flags = collections.Counter(f for r in rows for f in r["unmodelled"])
    return {"launches": len(rows),
            "exits": dict(sorted(collections.Counter(r["exit"] for r in rows).items())),
            "unmodelled_flags": dict(flags.most_common())}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--megatron", type=Path, required=True,
                    help="a Megatron-LM work tree, or its git directory with --rev")
    ap.add_argument("--rev", help="read the git directory at this revision")
    ap.add_argument("--json", type=Path, help="write the rows and the summary here")
    args = ap.parse_args(argv)
    source = Source(args.megatron, args.rev)
    with tempfile.TemporaryDirectory() as tmp:
        rows = probe(source, Path(tmp))
    s = summary(rows)
    print(f"{s['launches']} launches: " + ", ".join(f"exit {k}: {v}"
                                                   for k, v in s["exits"].items()))
    for r in rows:
        if r["exit"] not in (0,):
            print(f"  {r['case']} (--gpus {r['gpus']}): exit {r['exit']}: {r['error']}")
    print("flags warned as not modelled, by launches carrying them:")
    for flag, n in s["unmodelled_flags"].items():
        print(f"  {n:4d} {flag}")
    if args.json:
        args.json.write_text(json.dumps({"source": f"{args.megatron} {args.rev or ''}".strip(),
                                         "summary": s, "rows": rows}, indent=1) + "\n")
    return 1 if any(r["exit"] not in (0, 2, 4) for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
