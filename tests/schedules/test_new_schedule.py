"""Adding a schedule is one new module in the library and one line in its index, nothing else.

A copy of the package gets a throw-away schedule that way; the copy's CLI then lists it, runs
it, and what the runtimes and torch's point-to-point mode make of it comes from what the module
registers (torch's class GPipe: torch and torchtitan run it as ScheduleGPipe, on torch's
single-stage runtime with GPipe's send rules, so its run under ``--p2p torch`` is gpipe's to
the byte and the nanosecond)."""

from __future__ import annotations

import difflib
import filecmp
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
WORKLOAD = REPO / "tests" / "data" / "tiny_model.txt"

TOY = '''"""A throw-away schedule: every forward, then every backward."""

from ..action import Action, Kind
from ..registration import fb_sizes, register
from ..schedule import Schedule, loop_placement


@register("toy-pipe", summary="throw-away: all forwards, then all backwards",
          sizes=fb_sizes, torch_class="GPipe")
def generate(pp: int, microbatches: int, vpp: int = 1, **_: object) -> Schedule:
    ranks = tuple(tuple([Action(r, Kind.F, m) for m in range(microbatches)]
                        + [Action(r, Kind.B, m) for m in range(microbatches)])
                  for r in range(pp))
    return Schedule("toy-pipe", pp, 1, microbatches, loop_placement(pp, 1), ranks)
'''


@pytest.fixture(scope="module")
def tree(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("new-schedule")
    shutil.copytree(REPO / "simulator", root / "simulator",
                    ignore=shutil.ignore_patterns("__pycache__"))
    library = root / "simulator" / "schedules" / "library"
    (library / "toy_pipe.py").write_text(TOY)
    index = library / "__init__.py"
    text = index.read_text()
    assert "    two_bw,\n" in text
    index.write_text(text.replace("    two_bw,\n", "    toy_pipe,\n    two_bw,\n"))   # the line
    return root


def _files(top: Path) -> set[str]:
    return {str(p.relative_to(top)) for p in top.rglob("*.py") if "__pycache__" not in p.parts}


def _cli(tree: Path, *args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(tree))
    return subprocess.run([sys.executable, "-m", "simulator", *args], cwd=tree, env=env,
                          capture_output=True, text=True, timeout=120)


def test_the_copy_differs_by_one_module_and_one_line(tree):
    ours, theirs = REPO / "simulator", tree / "simulator"
    assert _files(theirs) - _files(ours) == {"schedules/library/toy_pipe.py"}
    changed = [f for f in _files(ours) if not filecmp.cmp(ours / f, theirs / f, shallow=False)]
    assert changed == ["schedules/library/__init__.py"]
    diff = [line for line in difflib.ndiff((ours / changed[0]).read_text().splitlines(),
                                           (theirs / changed[0]).read_text().splitlines())
            if line[:1] in "+-"]
    assert diff == ["+     toy_pipe,"]


def test_the_cli_lists_the_new_schedule(tree):
    proc = _cli(tree, "schedule", "--list")
    assert proc.returncode == 0, proc.stderr
    lines = [line for line in proc.stdout.splitlines() if line.startswith("toy-pipe ")]
    assert len(lines) == 1
    assert lines[0].split(None, 1)[1] == "throw-away: all forwards, then all backwards"


def test_the_cli_runs_it_and_the_runtimes_read_its_spec(tree):
    proc = _cli(tree, "schedule", "toy-pipe", "--pp", "2", "-m", "2")
    assert proc.returncode == 0, proc.stderr
    assert "0F0" in proc.stdout and "1B1" in proc.stdout
    runs = {}
    for name in ("toy-pipe", "gpipe"):
        proc = _cli(tree, "run", str(WORKLOAD), "-s", name, "--pp", "2", "-m", "4",
                    "--p2p", "torch", "--json", "-")
        assert proc.returncode == 0, proc.stderr
        runs[name] = json.loads(proc.stdout)
    toy, gpipe = runs["toy-pipe"], runs["gpipe"]
    assert toy["schedule"] == "toy-pipe"
    assert toy["runtimes"]["torch"] == {"accepts": True, "how": "ScheduleGPipe", "rule": None}
    assert toy["runtimes"]["torchtitan"] == {"accepts": True, "how": "GPipe", "rule": None}
    assert toy["runtimes"]["megatron"] == {
        "accepts": False, "how": "",
        "rule": "Megatron-LM has no toy-pipe schedule (it runs 1F1B, interleaved 1F1B with "
                "virtual stages, and zb-greedy, v-zb, v-half and v-min on the zero-bubble fork)"}
    # torch's single-stage runtime with GPipe's rules, as its spec's class says: gpipe's run
    for key in ("makespan_ns", "iteration_times_ns", "peak_memory_bytes", "ranks", "links",
                "p2p_bytes", "bubble_ratio"):
        assert toy[key] == gpipe[key], key
    assert toy["makespan_ns"] == 186894.5866666667
    assert toy["peak_memory_bytes"] == 2162688
