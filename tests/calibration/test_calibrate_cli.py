"""`pipesim calibrate` as a user meets it: the fit it prints, the file `pipesim run
--calibration` takes with nothing else, and one-line errors with exit code 2."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks.fidelity.cases import CASES, USER_PATTERN, workload_text
from simulator.cli.main import main

TRACES = Path(__file__).resolve().parents[1] / "data" / "traces"
SOURCE = TRACES / "ScheduleInterleaved1F1B"

FIT = """\
calibrated on interleaved-1f1b (P=4, v=2, M=8, 5 iteration(s), medians), 44 replays
measured: transfer posting per action F 214.4, B 170.0, I 170.0, W 0.0 us
measured: latency 166.3 us, exchange 0.0 us (receives that waited for their data, from the \
later post: 179 one-way, median 166.3 us; 58 with a transfer in flight the other way, median \
145.3 us)
fitted: launch overhead 328.8 us per action
step: prologue 687.5 us (fitted), epilogue 295.5 us (measured)
rank  busy meas/replay (ms)  idle meas/replay (ms)  end meas/replay (ms)
   0    359.535   360.039     127.223   126.762    486.758   486.801
   1    393.901   393.445      81.279    80.446    473.979   473.891
   2    393.593   393.818      63.848    63.032    457.009   456.850
   3    393.649   394.161      44.292    45.661    439.521   439.822
action ends: mean |replayed - measured| 1146.1 us over 128 actions
iteration: measured 487.067 ms, replayed 487.096 ms (+0.01 %)
warning: traces of torch's multi-stage runtime only (interleaved-1f1b): runs on the \
single-stage one (gpipe, 1f1b) use the same launch overheads, exchange cost and latency, \
copied; give a folder of gpipe or 1f1b's traces too to fit its own
"""


@pytest.fixture(scope="module")
def wl_dir(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("wl")
    # the harness's file, its layout stated (the rows are the whole model once)
    text = workload_text(CASES["uniform"]).replace("\n", " layout: model\n", 1)
    (d / "uniform.txt").write_text(text)
    (d / "pp2.txt").write_text(text.replace("pp: 4", "pp: 2"))
    (d / "ga4.txt").write_text(text.replace("ga: 8", "ga: 4"))
    (d / "vpp4.txt").write_text(text.replace("vpp: 1", "vpp: 4"))
    lines = text.splitlines()
    (d / "four.txt").write_text("\n".join([lines[0], "4"] + lines[2:6]) + "\n")
    return d


def cli(capsys, *args):
    rc = main([str(a) for a in args])
    out = capsys.readouterr()
    return rc, out.out, out.err


def test_calibrate_then_run_with_nothing_else(capsys, wl_dir, tmp_path):
    wl, calib = wl_dir / "uniform.txt", tmp_path / "calib.yaml"
    rc, out, err = cli(capsys, "calibrate", SOURCE, "--workload", wl, "-o", calib)
    assert (rc, err) == (0, "")
    assert out == FIT + (f"wrote {calib}: pipesim run {wl} -s interleaved-1f1b --vpp 2 "
                         f"--calibration {calib}\n")
    # the docs/validation.md rows: the source replayed, another class predicted
    for sched, ms in (("interleaved-1f1b", 487.096), ("zb-v", 444.888), ("gpipe", 553.387)):
        rc, out, _ = cli(capsys, "run", wl, "-s", sched, "--vpp", 1 if sched == "gpipe" else 2,
                         "--calibration", calib, "--json", "-")
        assert rc == 0 and round(json.loads(out)["makespan_ns"] / 1e6, 3) == ms, sched


def test_yaml_to_stdout_and_fit_to_stderr_without_output(capsys, wl_dir):
    rc, out, err = cli(capsys, "calibrate", SOURCE, "-w", wl_dir / "uniform.txt")
    assert rc == 0 and err == FIT
    assert out.startswith("# pipesim calibrate: interleaved-1f1b traces, P=4 v=2 M=8")
    assert "links: {latency_ns: 166339}\nruntime:\n  p2p: torch\n" in out


def test_user_labels_through_the_pattern(capsys, wl_dir):
    rc, _, err = cli(capsys, "calibrate", TRACES / "Schedule1F1B", "-w", wl_dir / "uniform.txt",
                     "--label-pattern", USER_PATTERN)
    assert rc == 0 and err.startswith("calibrated on 1f1b (P=4, v=1, M=8, 5 iteration(s)")


@pytest.mark.parametrize("workload, message", [
    ("pp2.txt", "{T}/: the traces show pp 4 (P=4, v=2, M=8); expected pp 2 as in {W} "
                "(pp 2, ga 8)"),
    ("ga4.txt", "{T}/: the traces show microbatches 8 (P=4, v=2, M=8); expected microbatches 4 "
                "as in {W} (pp 4, ga 4)"),
    ("vpp4.txt", "{T}/: the traces show vpp 2 (P=4, v=2, M=8); expected vpp 4 as in {W} "
                 "(vpp 4)"),
    ("four.txt", "{W}: expected a workload that splits into the traces' 8 stages (P=4, v=2): "
                 "cannot split 4 layer rows into 8 pipeline chunks (pp x vpp); every chunk "
                 "needs at least one layer"),
])
def test_traces_that_do_not_fit_the_workload(capsys, wl_dir, workload, message):
    w = wl_dir / workload
    rc, out, err = cli(capsys, "calibrate", SOURCE, "-w", w)
    assert (rc, out) == (2, "")
    assert err == "pipesim: error: " + message.format(T=SOURCE, W=w) + "\n"


def test_bad_inputs_one_line_exit_2(capsys, wl_dir, tmp_path):
    wl = wl_dir / "uniform.txt"
    gp = TRACES / "ScheduleGPipe"
    cases = [
        (("calibrate", gp / "rank0.json.gz", gp / "rank1.json.gz", "-w", wl),
         f"{gp}/: missing the trace of rank 2: expected one trace per rank 0..3, found ranks "
         "0, 1"),
        (("calibrate", TRACES / "Schedule1F1B", "-w", wl),
         f"{TRACES / 'Schedule1F1B' / 'rank0.json.gz'}: expected pipelining labels "
         "('PP:<action>', 'Forward <mb>' / 'Backward <mb>' or --label-pattern), found none "
         "(Schedule1F1B records none: label the compute and give --label-pattern)"),
        (("calibrate", "-w", wl),
         "calibrate: expected one profiler trace per pipeline rank (files or a folder), got "
         "none"),
        (("calibrate", SOURCE, "-w", wl, "--label-pattern", "fidelity:(?P<mb>\\d+)"),
         "--label-pattern: expected named groups (?P<kind>...) and (?P<mb>...) (and "
         "(?P<stage>...) unless the stage is the rank), found 'fidelity:(?P<mb>\\\\d+)'"),
        (("calibrate", SOURCE, "-w", wl, "-o", tmp_path / "no" / "c.yaml"),
         f"--output: cannot write {tmp_path / 'no' / 'c.yaml'}: folder {tmp_path / 'no'} does "
         "not exist"),
    ]
    for args, message in cases:
        rc, out, err = cli(capsys, *args)
        assert (rc, out, err) == (2, "", f"pipesim: error: {message}\n"), args


def test_a_calibration_applied_on_the_other_torch_runtime_is_a_warning(capsys, wl_dir,
                                                                        tmp_path):
    """Fitted on Interleaved1F1B (multi-stage runtime), applied to 1F1B (single-stage): the
    transfer figures were never seen there, which the run says; on zb-v (multi) it does not."""
    wl, calib = wl_dir / "uniform.txt", tmp_path / "calib.yaml"
    cli(capsys, "calibrate", SOURCE, "--workload", wl, "-o", calib)
    assert "  calibrated_on: {schedule: interleaved-1f1b, p2p: torch-multi}\n" in \
        calib.read_text()
    rc, out, _ = cli(capsys, "run", wl, "-s", "1f1b", "--calibration", calib, "--json", "-")
    got = [w for w in json.loads(out)["warnings"]
           if w["code"] not in ("activation_assumed", "params_assumed", "memory_per_param_default",
                                 "retention_assumed")]
    assert rc == 0 and got == [{
        "code": "calibration_other_runtime",
        "message": "the calibration was fitted on interleaved-1f1b (torch's multi-stage "
                   "runtime); 1f1b runs on torch's single-stage runtime, whose transfers it "
                   "never saw: its launch overheads and exchange cost (0.000 ms) are carried "
                   "over (at 1 ms per layer, calibrated on interleaved-1f1b, 1f1b came out 17 % "
                   "high: docs/validation.md)",
        "option": "--calibration from a gpipe or 1f1b run's traces"}]
    # the fidelity workload gives no activation size nor gradient bytes, and its traces no
    # memory events (the runtime's retention is torch's rule): that is said, and nothing else
    rc, out, _ = cli(capsys, "run", wl, "-s", "zb-v", "--vpp", 2, "--calibration", calib,
                     "--json", "-")
    assert rc == 0 and [w["code"] for w in json.loads(out)["warnings"]] == [
        "activation_assumed", "params_assumed", "memory_per_param_default", "retention_assumed"]
    rc, out, _ = cli(capsys, "run", wl, "-s", "1f1b", "--calibration", calib, "--p2p",
                     "async", "--json", "-")     # not torch's runtime at all: nothing to say
    assert rc == 0 and [w["code"] for w in json.loads(out)["warnings"]] == ["activation_assumed"]


def test_one_class_per_torch_runtime(capsys, wl_dir, tmp_path):
    """Two folders, one class per runtime: each runtime gets its own fitted transfer figures;
    the first folder's class gives the compute. GPipe and 1F1B (single-stage) move to the
    GPipe fit's figures (-2.5 / -1.2 % -> -0.7 / +0.6 % of the measured 567.5 / 559.9 ms,
    docs/validation.md); the multi-stage classes keep Interleaved1F1B's, to the ns."""
    wl, calib = wl_dir / "uniform.txt", tmp_path / "calib.yaml"
    rc, out, err = cli(capsys, "calibrate", SOURCE, TRACES / "ScheduleGPipe", "-w", wl,
                       "-o", calib)
    assert (rc, err) == (0, "")
    assert ("torch-single (calibrated on gpipe, v=1, 66 replays): launch overhead 1006.2 us per "
            "action, exchange 0.0 us, latency 184.0 us, prologue 0.0 us, epilogue 192.5 us; "
            "iteration measured 567.469 ms, replayed 567.164 ms (-0.05 %)\n") in out
    assert "warning" not in out
    text = calib.read_text()
    assert ("  runtimes:\n    torch-multi:\n      action_overhead_ns: {F: 543190, B: 498718, "
            "I: 498718, W: 328750}\n      step_prologue_ns: 687500\n      step_epilogue_ns: "
            "295537\n      exchange_ns: 0\n      latency_ns: 166339\n      calibrated_on: "
            "interleaved-1f1b\n    torch-single:\n      action_overhead_ns: {F: 1006250, "
            "B: 1006250, I: 1006250, W: 1006250}\n      step_prologue_ns: 0\n      "
            "step_epilogue_ns: 192472\n      exchange_ns: 0\n      latency_ns: 184000\n      "
            "calibrated_on: gpipe\n") in text
    for sched, ms in (("interleaved-1f1b", 487.096), ("zb-v", 444.888), ("gpipe", 563.626),
                      ("1f1b", 563.205)):
        rc, out, _ = cli(capsys, "run", wl, "-s", sched, "--vpp",
                         1 if sched in ("gpipe", "1f1b") else 2, "--calibration", calib, "--json", "-")
        doc = json.loads(out)
        assert rc == 0 and round(doc["makespan_ns"] / 1e6, 3) == ms, sched
        # each runtime has figures fitted on it: no calibration_other_runtime warning
        assert [w["code"] for w in doc["warnings"]] == ["activation_assumed", "params_assumed",
                                                        "memory_per_param_default",
                                                        "retention_assumed"], sched
    # what the fidelity tables combine from two classes' own calibrations is this same file
    import yaml

    from benchmarks.fidelity.predict import combine
    from simulator.calibration.fit import calibrate

    assert combine(calibrate([SOURCE], wl).to_dict(),
                   calibrate([TRACES / "ScheduleGPipe"], wl).to_dict()) == yaml.safe_load(text)


def test_two_folders_of_one_runtime_or_three_folders_are_refused(capsys, wl_dir):
    wl = wl_dir / "uniform.txt"
    zbv = TRACES / "ScheduleZBVZeroBubble"
    rc, out, err = cli(capsys, "calibrate", SOURCE, zbv, "-w", wl)
    assert (rc, out) == (2, "")
    assert err == (f"pipesim: error: {zbv}: zb-v ran on torch's multi-stage runtime, as "
                   f"interleaved-1f1b in {SOURCE} did; expected a schedule of the other runtime "
                   "(gpipe or 1f1b beside a multi-stage one)\n")
    rc, out, err = cli(capsys, "calibrate", SOURCE, zbv, TRACES / "ScheduleGPipe", "-w", wl)
    assert (rc, out, err) == (2, "", "pipesim: error: calibrate: expected the traces of one "
                              "schedule per torch runtime (at most 2 folders), got 3 folders\n")
