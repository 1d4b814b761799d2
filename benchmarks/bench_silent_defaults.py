"""No silent default: each header key left out, one at a time, of the bundled workloads and a
freshly generated file, and what `pipesim run FILE` makes of it: a warning naming the key, a
refusal (exit 2), no number depending on it (unused: the run is the same, warnings and notes
aside, with the key at two other values, as ``ep:`` in a file without expert-parallel rows), or
silence (a default that changes numbers and is said nowhere).

    python benchmarks/bench_silent_defaults.py [--markdown]

Exit 1 if any case is silent. tests/workload/test_no_silent_defaults.py checks the same cases.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import re
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

# each key issue 35 lists, and the warnings that state its default (one of them is enough)
KEYS = {
    "pp": ("pp_defaulted",),
    "vpp": ("vpp_defaulted",),
    "ga": ("ga_defaulted",),
    "all_gpus": ("gpus_defaulted",),
    "pp_comm": ("pp_comm_derived", "p2p_free", "pp_comm_defaulted"),
    "model_parallel_NPU_group": ("tp_defaulted", "tp_group_of_one"),
    "ep": ("ep_defaulted", "ep_group_of_one"),
    "checkpoints": ("checkpoints_defaulted",),
}
# a small model, every number-changing option of generate stated
GENERATE = ["generate", "--model", "llama", "--layers", "8", "--hidden", "1024", "--heads", "8",
            "--seq", "1024", "--micro-batch", "1", "--tp", "2", "--pp", "4", "--ga", "8",
            "--dp", "2", "--vpp", "1", "--gpu", "h100", "--precision", "bf16", "--vocab", "32000",
            "--kv-heads", "8"]


def bundled() -> list[Path]:
    return sorted((REPO / "workloads").rglob("*.txt"))


def without(text: str, key: str) -> str:
    """The file with ``key: value`` taken out of its header (line 1)."""
    head, rest = text.split("\n", 1)
    cut = re.sub(rf"(?<=\s){re.escape(key)}:\s+\d+", "", head, count=1)
    if cut == head:
        raise ValueError(f"{key}: not in the header {head[:80]!r}")
    return cut + "\n" + rest


def with_value(text: str, key: str, value: int) -> str:
    """The file with its header's ``key: value`` set to ``value``."""
    head, rest = text.split("\n", 1)
    return re.sub(rf"(?<=\s){re.escape(key)}:\s+\d+", f"{key}: {value}", head, count=1) \
        + "\n" + rest


def _numbers(out: str) -> dict:
    """A run's JSON without what it says about its inputs (warnings, notes)."""
    d = json.loads(out)
    d.pop("warnings"), d.pop("notes")
    return d


def no_number_depends_on(path: Path, key: str, cut: Path, left_out: str) -> bool:
    """Whether the run of ``cut`` (``key`` left out) is the run with ``key`` at two other
    values: the stated value + 1 and + 2, one of which is not the default."""
    text = path.read_text()
    stated = int(re.search(rf"(?<=\s){re.escape(key)}:\s+(\d+)", text.split("\n", 1)[0])[1])
    try:
        for value in (stated + 1, stated + 2):
            cut.write_text(with_value(text, key, value))
            rc, out, _ = _main(["run", str(cut), "--json", "-"])
            if rc != 0 or _numbers(out) != _numbers(left_out):
                return False
        return True
    finally:
        cut.write_text(without(text, key))


def _main(args: list[str]) -> tuple[int, str, str]:
    from simulator.cli.main import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = main(args)
    return rc, out.getvalue(), err.getvalue()


def classify(path: Path, key: str, where: Path) -> tuple[str, str]:
    """(warned | refused | unused | silent, the warning codes or the refusal)."""
    cut = where / path.name
    cut.write_text(without(path.read_text(), key))
    rc, out, err = _main(["run", str(cut), "--json", "-"])
    if rc == 2:
        return "refused", err.strip()
    codes = [w["code"] for w in json.loads(out)["warnings"]]
    if set(codes) & set(KEYS[key]):
        return "warned", ", ".join(codes)
    return ("unused" if no_number_depends_on(path, key, cut, out) else "silent"), ", ".join(codes)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--markdown", action="store_true", help="one table row per case")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        where = Path(tmp)
        generated = where / "generated" / "llama-8l.txt"
        generated.parent.mkdir()
        rc, _, err = _main([*GENERATE, "-o", str(generated)])
        if rc != 0:
            raise SystemExit(f"generate failed: {err}")
        files = bundled() + [generated]
        tally = {"warned": 0, "refused": 0, "unused": 0, "silent": 0}
        if args.markdown:
            print("| file | key left out | outcome | warnings or refusal |\n|---|---|---|---|")
        for path in files:
            for key in KEYS:
                outcome, said = classify(path, key, where)
                tally[outcome] += 1
                if args.markdown:
                    print(f"| {path.name} | `{key}` | {outcome} | {said} |")
        print(f"{len(files)} files x {len(KEYS)} keys: {tally['warned']} warned, "
              f"{tally['refused']} refused, {tally['unused']} unused, {tally['silent']} "
              "silent")
    return 1 if tally["silent"] else 0


if __name__ == "__main__":
    raise SystemExit(main())
