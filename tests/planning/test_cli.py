"""`pipesim schedule auto` and `pipesim verify auto`: output, torch CSV, one-line errors."""

from __future__ import annotations

import pytest

from simulator.cli.main import main
from simulator.schedules.synthesis import StageCosts, synthesize
from simulator.schedules.csv_io import load_schedule_csv
from simulator.schedules.validate import validate

COSTS = "f: [15, 10, 10, 10]\ni: [15, 10, 10, 12]\nw: [12, 10, 10, 6]\ncomm: 2\n"


def run(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_prints_and_writes_the_torch_csv(capsys, tmp_path):
    costs = tmp_path / "costs.yaml"
    costs.write_text(COSTS)
    csv = tmp_path / "out.csv"
    code, out, err = run(capsys, "schedule", "auto", "--pp", "4", "-m", "12", "--stage-costs",
                         str(costs), "--max-in-flight", "6", "--csv", str(csv))
    assert (code, err) == (0, "")
    want = synthesize(4, 12, 1, StageCosts((15, 10, 10, 10), (15, 10, 10, 12),
                                           (12, 10, 10, 6), 2), 6).schedule
    lines = out.splitlines()
    assert lines[0] == "auto: pp=4 vpp=1 microbatches=12"
    assert lines[1:] == [f"rank {r}: " + " ".join(acts) for r, acts in
                         enumerate(want.as_strings())]
    # compute-only: one row per rank, plain cells, no communication
    rows = csv.read_text().splitlines()
    assert rows == [",".join(acts) for acts in want.as_strings()]
    back = load_schedule_csv(csv)
    validate(back)
    assert back.ranks == want.ranks


def test_unit_costs_without_stage_costs(capsys):
    code, out, err = run(capsys, "schedule", "auto", "--pp", "2", "-m", "2")
    assert (code, err) == (0, "")
    assert out == ("auto: pp=2 vpp=1 microbatches=2\n"
                   "rank 0: 0F0 0F1 0B0 0B1\n"
                   "rank 1: 1F0 1I0 1F1 1I1 1W0 1W1\n")


def test_verify_auto(capsys):
    code, out, err = run(capsys, "verify", "auto", "--pp", "3", "-m", "6")
    assert (code, err) == (0, "")
    assert out.splitlines()[-1].startswith("OK: within 1e-10 of single-device training")
    code, out, err = run(capsys, "verify", "auto", "--pp", "2", "-m", "4", "--vpp", "2")
    assert (code, err) == (0, "")


@pytest.mark.parametrize("text, message", [
    ("f: [1, 1, 1]\ni: [1, 1, 1, 1]\nw: [1, 1, 1, 1]\n",
     "{p}: f: expected 4 costs, one per stage (--pp 4), found 3"),
    ("f: [1, 1, 1, 1]\ni: [1, -2, 1, 1]\nw: [1, 1, 1, 1]\n",
     "{p}: i[1]: expected a non-negative number, found -2"),
    ("f: [1, 1, 1, 1]\ni: [1, 1, 1, 1]\nw: [1, x, 1, 1]\n",
     "{p}: w[1]: expected a non-negative number, found 'x'"),
    ("f: [1, 1, 1, 1]\ni: [1, 1, 1, 1]\nw: [1, 1, 1, 1]\ncomm: -1\n",
     "{p}: comm: expected a non-negative number, found -1"),
    ("f: [1, 1, 1, 1]\ni: [1, 1, 1, 1]\nw: [1, 1, true, 1]\n",
     "{p}: w[2]: expected a non-negative number, found True"),
    ("f: [1, 1, 1, 1]\ni: [1, 1, 1, 1]\n",
     "{p}: w: missing; expected a list of 4 non-negative numbers"),
    ("f: [1, 1, 1, 1]\ni: [1, 1, 1, 1]\nw: [1, 1, 1, 1]\nb: [2, 2, 2, 2]\n",
     "{p}: unknown key 'b'; expected f, i, w and comm"),
    ("f: 1\ni: [1, 1, 1, 1]\nw: [1, 1, 1, 1]\n",
     "{p}: f: expected a list of 4 non-negative numbers, found 1"),
    ("[1, 2]\n", "{p}: expected a mapping with keys f, i, w (lists) and comm, found list"),
])
def test_bad_costs_file_is_one_line_and_exit_2(capsys, tmp_path, text, message):
    path = tmp_path / "costs.yaml"
    path.write_text(text)
    code, out, err = run(capsys, "schedule", "auto", "--pp", "4", "-m", "8", "--stage-costs",
                         str(path))
    assert (code, out) == (2, "")
    assert err == "pipesim: error: " + message.format(p=path) + "\n"


def test_v_mode_costs_are_per_virtual_stage(capsys, tmp_path):
    path = tmp_path / "costs.yaml"
    path.write_text(COSTS)
    code, _, err = run(capsys, "schedule", "auto", "--pp", "4", "-m", "8", "--vpp", "2",
                       "--stage-costs", str(path))
    assert code == 2
    assert err == (f"pipesim: error: {path}: f: expected 8 costs, one per stage "
                   f"(--pp 4 x --vpp 2), found 4\n")


@pytest.mark.parametrize("argv, message", [
    (["--pp", "4", "-m", "8", "--max-in-flight", "0"],
     "--max-in-flight: expected at least 1 activation per rank, got 0"),
    (["--pp", "4", "-m", "8", "--vpp", "2", "--max-in-flight", "1"],
     "--max-in-flight: expected at least 2 activations per rank in V mode (--vpp 2), got 1"),
    (["--pp", "4", "-m", "8", "--vpp", "3"],
     "--vpp: auto builds one stage per rank (1) or two in V placement (2), got 3"),
    (["--pp", "4", "-m", "8", "--stage-costs", "missing.yaml"],
     "--stage-costs: cannot read missing.yaml: No such file or directory"),
])
def test_bad_options_are_one_line_and_exit_2(capsys, argv, message):
    code, out, err = run(capsys, "schedule", "auto", *argv)
    assert (code, out, err) == (2, "", f"pipesim: error: {message}\n")


def test_cost_options_refused_for_other_schedules(capsys):
    code, _, err = run(capsys, "schedule", "1f1b", "--pp", "4", "-m", "8", "--max-in-flight", "3")
    assert (code, err) == (2, "pipesim: error: --max-in-flight: only for a synthesized schedule "
                              "(auto), not 1f1b\n")
