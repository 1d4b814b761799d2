"""``pipesim verify``: JSON keys, the human report, exit codes and one-line errors."""

from __future__ import annotations

import json

from simulator.cli.main import main
from simulator.schedules import generate
from simulator.schedules.csv_io import write_schedule_csv

KEYS = ["schedule", "pp", "vpp", "microbatches", "loss_error", "max_abs_grad_error",
        "max_rel_grad_error", "ok"]


def run(capsys, *args):
    rc = main(["verify", *args])
    out, err = capsys.readouterr()
    return rc, out, err


def test_json_starts_with_the_promised_keys(capsys):
    rc, out, err = run(capsys, "1f1b", "--pp", "4", "--microbatches", "8", "--json")
    assert rc == 0 and err == ""
    data = json.loads(out)
    assert list(data)[:8] == KEYS
    assert (data["schedule"], data["pp"], data["vpp"], data["microbatches"]) == ("1f1b", 4, 1, 8)
    assert data["ok"] is True
    assert max(data["loss_error"], data["max_abs_grad_error"], data["max_rel_grad_error"]) < 1e-10
    assert data["layers"] == 9 and data["seed"] == 0 and data["activations_agree"] is True
    assert [a["executor"] for a in data["activations"]] == [[4, 4], [3, 3], [2, 2], [1, 1]]


def test_human_report(capsys):
    rc, out, _ = run(capsys, "interleaved-1f1b", "--pp", "2", "-m", "4", "--vpp", "2",
                     "--layers", "5", "--seed", "3")
    lines = out.splitlines()
    assert rc == 0
    assert lines[0].startswith("verify interleaved-1f1b: pp 2, vpp 2, 4 microbatches; 5-layer "
                               "tanh MLP (widths ")
    assert lines[0].endswith("), MSE loss, seed 3")
    assert lines[1].startswith("loss          ") and "error vs single device" in lines[1]
    assert lines[2].startswith("gradients     max abs error ")
    assert lines[4] == "activations   rank  executor mb/act  simulator mb/act  stash bytes"
    assert len(lines) == 5 + 2 + 1
    assert lines[-1] == ("OK: within 1e-10 of single-device training; activation peaks equal "
                         "the simulator's")


def test_two_bw_runs_four_minibatches_by_default(capsys):
    rc, out, _ = run(capsys, "2bw", "--pp", "2", "-m", "2", "--json")
    data = json.loads(out)
    assert rc == 0 and data["ok"] is True
    assert data["semantics"] == "pipedream-2bw" and data["iterations"] == 4
    assert len(data["losses"]) == 4 and data["peak_weight_versions"] == 2
    rc, out, _ = run(capsys, "2bw", "--pp", "2", "-m", "2", "--iterations", "3", "--json")
    assert rc == 0 and json.loads(out)["iterations"] == 3


def test_exceeding_the_tolerance_exits_1_with_the_reason(capsys):
    rc, out, err = run(capsys, "1f1b", "--pp", "2", "-m", "4", "--tolerance", "0", "--json")
    data = json.loads(out)
    assert rc == 1 and data["ok"] is False and data["max_abs_grad_error"] > 0
    assert err.startswith("pipesim: error: 1f1b (pp 2, vpp 1, 4 microbatches) does not match "
                          "single-device training: largest error ")
    assert err.endswith(" exceeds the tolerance 0e+00\n")


def test_schedule_file(tmp_path, capsys):
    path = tmp_path / "zbv.csv"
    write_schedule_csv(generate("zb-v", 2, 4), path)
    rc, out, _ = run(capsys, "--schedule-file", str(path), "--json")
    data = json.loads(out)
    assert rc == 0 and data["ok"] is True
    assert (data["schedule"], data["pp"], data["vpp"], data["microbatches"]) == ("custom", 2, 2, 4)
    rc, _, err = run(capsys, "--schedule-file", str(path), "--pp", "4")
    assert rc == 2 and err == f"pipesim: error: --pp: 4 given, but {path} has 2\n"


def test_broken_schedule_file_refused_by_validator_and_by_executor(tmp_path, capsys):
    path = tmp_path / "bad.csv"
    path.write_text("0F0,0F1,0B0,0B1\n1B0,1F0,1F1,1B1\n")
    rc, _, err = run(capsys, "--schedule-file", str(path))
    assert rc == 2 and err.startswith("pipesim: error: rank 1, position 0, action 1B0: deadlock")
    rc, _, err = run(capsys, "--schedule-file", str(path), "--no-validate")
    assert rc == 2
    assert err == ("pipesim: error: rank 1, position 0, action 1B0: no activations of stage 1 "
                   "microbatch 0 on this rank: its forward 1F0 has not run\n")
    path.write_text("0B0,0F0,0F1,0B1\n1F0,1B0,1F1,1B1\n")
    rc, _, err = run(capsys, "--schedule-file", str(path), "--no-validate")
    assert rc == 3 and err.startswith("pipesim: error: deadlock in the numeric executor after "
                                      "0 ops: rank 0 waits on recv 0B0 (1->0) from rank 1")


def test_option_errors(capsys, tmp_path):
    cases = [
        (["1f1b", "--microbatches", "4"], "--pp: required with a schedule name"),
        (["1f1b", "--pp", "2"], "--microbatches: required with a schedule name"),
        ([], "expected a schedule NAME (see `pipesim schedule --list`) or --schedule-file"),
        (["1f1b", "--schedule-file", str(tmp_path / "x.csv")],
         "NAME and --schedule-file: give one, not both"),
        (["1f1b", "--pp", "2", "-m", "4", "--iterations", "3"],
         "--iterations: 1f1b flushes every iteration; verify runs one iteration"),
        (["1f1b", "--pp", "2", "-m", "4", "--layers", "0"],
         "--layers: expected a positive number of layers, got 0"),
        (["1f1b", "--pp", "4", "-m", "4", "--layers", "3"],
         "--layers: the schedule has 4 model chunks and every chunk needs a layer; expected at "
         "least 4, got 3"),
        # from the sizes, before Hanayo's 16 chunks x 1,000 microbatches are built (1.2 s)
        (["hanayo", "--pp", "8", "-m", "1000", "--layers", "3"],
         "--layers: the schedule has 16 model chunks and every chunk needs a layer; expected at "
         "least 16, got 3"),
        (["1f1b", "--pp", "2", "-m", "4", "--seed", "-1"],
         "--seed: expected a non-negative integer, got -1"),
        (["1f1b", "--pp", "2", "-m", "4", "--tolerance", "-1"],
         "--tolerance: expected a non-negative number, got -1.0"),
    ]
    for args, message in cases:
        rc, out, err = run(capsys, *args)
        assert (rc, out, err) == (2, "", f"pipesim: error: {message}\n"), args
    rc, _, err = run(capsys, "nosuch", "--pp", "2", "-m", "2")
    assert rc == 2 and err.startswith("pipesim: error: --schedule: unknown schedule 'nosuch'")


def test_too_few_layers_are_refused_before_the_schedule_is_built(capsys, monkeypatch):
    from simulator.schedules import registry

    def not_built(*_a, **_k):
        raise AssertionError("the schedule was built before the refusal")

    monkeypatch.setattr(registry, "generate", not_built)
    rc, out, err = run(capsys, "hanayo", "--pp", "8", "-m", "1000", "--layers", "3")
    assert (rc, out) == (2, "") and err.startswith("pipesim: error: --layers: the schedule has 16")
