"""The README's numbers are what the commands print today: each figure the README quotes from a
command is read from the README (never written here) and compared exactly with that command's
output, so a change that moves a number fails here until the README says the new one.

Pinned: the quoted `pipesim run` report block (every line shown, in order; a line ending in
``...`` is cut there), the `# N ms` figure after a `pipesim run` line, the rounded busy times of
the run's first and last stages, and the plan paragraph: Megatron-LM's winner (its TP x DP and
iteration time, and its `best:` line, which the README's second launch step runs), the winner
without `--runtime` (schedule, pp, stages per rank, time) and torch's faster candidate."""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import shlex
from pathlib import Path

import pytest

from simulator.cli.main import main

REPO = Path(__file__).resolve().parents[1]
README = (REPO / "README.md").read_text()
CUT = "..."


def _run(args: list[str], capsys, monkeypatch) -> str:
    """``pipesim ARGS``'s standard output, run from the checkout (exit 0)."""
    monkeypatch.chdir(REPO)
    capsys.readouterr()
    rc = main(args)
    out, err = capsys.readouterr()
    assert rc == 0, (args, err)
    return out


def _normal(line: str) -> str:
    return " ".join(line.split())


def mismatches(quoted: list[str], printed: list[str]) -> list[str]:
    """The quoted lines that are not, in order, lines of ``printed`` (spaces between fields
    collapsed; a quoted line ending in ``...`` must begin a printed line)."""
    lines = [_normal(p) for p in printed]
    missing, at = [], 0
    for q in quoted:
        cut = q.rstrip().endswith(CUT)
        want = _normal(q.rstrip()[:-len(CUT)] if cut else q)
        if not want:
            continue
        for i in range(at, len(lines)):
            if lines[i] == want or (cut and lines[i].startswith(want)):
                at = i + 1
                break
        else:
            missing.append(q)
    return missing


def _report_block() -> list[str]:
    """The fenced block after "What `pipesim run` reports"."""
    after = README.split("What `pipesim run` reports", 1)[1]
    return after.split("```\n", 1)[1].split("```", 1)[0].splitlines()


def _report_command() -> list[str]:
    """The run the block shows: the README's first bare `pipesim run WORKLOAD`."""
    m = re.search(r"pipesim run (\S+)[ \t]*(?:#[^\n]*)?$", README, re.M)
    assert m, "the README runs no bare `pipesim run WORKLOAD`"
    return ["run", m.group(1)]


def _bash_lines() -> list[str]:
    lines = []
    for block in re.findall(r"```bash\n(.*?)```", README, re.S):
        lines += [line.strip() for line in block.splitlines() if line.strip()]
    return lines


def _iteration_ms(report: str) -> str:
    m = re.search(r"^\s*iteration time\s+([\d.]+) ms$", report, re.M)
    assert m, report
    return m.group(1)


def _stage_busy_ms(report: str) -> dict[int, float]:
    """The stage table's busy column: stage -> ms."""
    rows = re.findall(r"^\s+(\d+)\s+\d+-\d+\s+([\d.]+) ms", report, re.M)
    return {int(s): float(ms) for s, ms in rows}


@pytest.fixture(scope="module")
def report() -> str:
    """The report block's run, once for the module (capsys is per test)."""
    out, err = io.StringIO(), io.StringIO()
    cwd = os.getcwd()
    os.chdir(REPO)
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            rc = main(_report_command())
    finally:
        os.chdir(cwd)
    assert rc == 0, err.getvalue()
    return out.getvalue()


def test_the_quoted_report_block_is_what_the_run_prints(report):
    quoted = _report_block()
    assert sum(bool(_normal(q)) for q in quoted) >= 8, "the README quotes a report block"
    assert "1f1b" in report.splitlines()[0]          # "here 1F1B on the bundled GPT example"
    assert mismatches(quoted, report.splitlines()) == [], (
        "README.md's `pipesim run` block is stale; the run prints:\n" + report)


def test_the_matcher_notices_a_changed_digit_a_missing_line_and_the_order(report):
    quoted = _report_block()
    printed = report.splitlines()
    i = next(k for k, q in enumerate(quoted) if "iteration time" in q)
    changed = list(quoted)
    changed[i] = re.sub(r"\d(?= ms)", lambda d: str((int(d.group()) + 1) % 10), quoted[i])
    assert mismatches(changed, printed) == [changed[i]]
    assert mismatches(quoted + ["  made up   1.000 ms"], printed) == ["  made up   1.000 ms"]
    assert mismatches(quoted[i + 1:i + 2] + quoted[i:i + 1], printed) == [quoted[i]]


def test_the_stage_busy_times_the_readme_rounds(report):
    """"The last stage of the run above carries the LM head (300 ms busy against 234 ms)"."""
    m = re.search(r"last stage of the run above carries the LM head \((\d+) ms busy against "
                  r"(\d+) ms\)", README)
    assert m, "the README states the last and first stages' busy times"
    busy = _stage_busy_ms(report)
    assert (round(busy[max(busy)]), round(busy[0])) == (int(m.group(1)), int(m.group(2)))


FIGURE = re.compile(r"^(pipesim run .*?)\s+#\s*([\d.]+) ms$")


def test_each_run_line_with_a_figure_prints_that_iteration_time(capsys, monkeypatch):
    lines = [m for m in map(FIGURE.match, _bash_lines()) if m]
    assert lines, "the README quotes a run's time after its command"
    for m in lines:
        out = _run(shlex.split(m.group(1))[1:], capsys, monkeypatch)
        assert _iteration_ms(out) == m.group(2), (m.group(1), out)


def _plan(args: list[str], capsys, monkeypatch) -> dict:
    return json.loads(_run(args + ["--json", "-"], capsys, monkeypatch))


def _plan_line() -> list[str]:
    line = next(line for line in _bash_lines() if line.startswith("pipesim plan "))
    return [a for a in shlex.split(line.split(" #", 1)[0])[1:]]


def _without(args: list[str], option: str) -> list[str]:
    """``args`` without ``option`` and its value."""
    i = args.index(option)
    return args[:i] + args[i + 2:]


def _ms(ns: float) -> str:
    return f"{ns / 1e6:.3f}"


def test_the_plan_for_megatron_and_its_best_line(capsys, monkeypatch):
    """"the plan for Megatron-LM is `zb-greedy` at pp 4 with 1 stage per rank (TP 2 x DP 8,
    194.056 ms)", and the launch's step 2 runs the plan's `best:` command."""
    m = re.search(r"plan for Megatron-LM is `([\w-]+)` at pp (\d+) with (\d+) stages? per rank"
                  r"\s+\(TP (\d+) x DP (\d+), ([\d.]+) ms\)", README)
    assert m, "the README states Megatron-LM's plan"
    args = _without(_plan_line(), "--launch")       # the launch files are not the figures
    assert args[args.index("--runtime") + 1] == "megatron"
    best = _plan(args, capsys, monkeypatch)["best"]
    assert (best["schedule"], best["pp"], best["vpp"], best["tp"], best["dp"]) == (
        m.group(1), int(m.group(2)), int(m.group(3)), int(m.group(4)), int(m.group(5)))
    assert _ms(best["makespan_ns"]) == m.group(6)
    step2 = next(line for line in _bash_lines()
                 if line.startswith("pipesim run ") and "# 2. look" in line)
    shown = _without(shlex.split(step2.split(" #", 1)[0]), "--gantt")
    assert shlex.split(best["command"]) == shown


def test_the_plan_without_a_runtime_and_torchs_faster_candidate(capsys, monkeypatch):
    """"a synthesized `auto` schedule at pp 2 with 2 stages per rank (145.380 ms)", and
    "torch's `ScheduleLoopedBFS` at 4 stages on one rank is faster (133.352 ms)"."""
    win = re.search(r"a synthesized `(\w+)`\s+schedule at pp (\d+) with (\d+) stages per rank "
                    r"\(([\d.]+) ms\)", README)
    torch = re.search(r"torch's `Schedule(\w+)` at (\d+) stages on one rank is faster "
                      r"\(([\d.]+) ms\)", README)
    assert win and torch, "the README states the plan's winner without --runtime"
    args = _without(_without(_plan_line(), "--launch"), "--runtime")
    plan = _plan(args, capsys, monkeypatch)
    best = plan["best"]
    assert (best["schedule"], best["pp"], best["vpp"], _ms(best["makespan_ns"])) == (
        win.group(1), int(win.group(2)), int(win.group(3)), win.group(4))
    fastest = min((c for c in plan["candidates"] if c["feasible"]),
                  key=lambda c: c["makespan_ns"])
    torch_class = re.sub(r"[^a-z]", "", fastest["schedule"])
    assert (torch_class, fastest["pp"], fastest["vpp"], _ms(fastest["makespan_ns"])) == (
        torch.group(1).lower(), 1, int(torch.group(2)), torch.group(3))
    runs = fastest["runtimes"]
    assert runs["torch"]["accepts"] and not runs["megatron"]["accepts"]
    assert not runs["torchtitan"]["accepts"]
