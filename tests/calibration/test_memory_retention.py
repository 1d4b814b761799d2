"""The runtime's retention read from committed traces (tests/data/memtraces/return-outputs-*:
torch 2.13, uniform shape, P = 4, M = 8): what `pipesim calibrate --memory` finds and writes,
what a split backward keeps from the forward's operators, the warnings a run gives, and the
calibration reproducing its own traces (every rank within 1 %). No torch needed."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
import yaml

from benchmarks.memory.cases import P, SCHEDULES, SHAPES, pipesim_schedule, workload_text
from simulator import simulate
from simulator.calibration.forward_ops import split_backward_keeps
from simulator.calibration.memory_retention import read_retention
from simulator.cli.main import main
from simulator.system.config import system_from_dict
from simulator.workload.parser import parse_workload_text

REPO = Path(__file__).resolve().parents[2]
HOME = REPO / "tests" / "data" / "memtraces"
A = SHAPES["uniform"].pp_comm      # one activation: 32 rows x 64 x 4 B = 8192
RUNS = {"ScheduleInterleaved1F1B": "return-outputs-false", "Schedule1F1B": "return-outputs-true"}


def _manifest(cls: str) -> dict:
    return json.loads((HOME / RUNS[cls] / "MANIFEST.json").read_text())


def _files(cls: str) -> list[Path]:
    return sorted((HOME / RUNS[cls] / cls).glob("rank*.json.gz"))


def test_interleaved_without_outputs_keeps_none_and_holds_its_sends_to_the_step_end():
    got = read_retention(_files("ScheduleInterleaved1F1B"), A, 8)
    assert (got.kept_outputs, got.sends_held, got.recv_buffers) == \
        ("none", "step_end", "per_microbatch")
    assert got.evidence == (
        "kept_outputs: none: on rank 3, 0 of 16 forwards of the last stage 7 leave a 8192 B "
        "block held past the rank's last compute action of the step (return_outputs=False)",
        "sends_held: step_end: of 112 input gradients sent to another rank, 112 held past the "
        "rank's last compute action of the step, 0 freed during it",
        # v = 2 on the loop placement: every stage but the first and last takes its input and
        # its gradient from another rank, 8 microbatches each
        "recv_buffers: per_microbatch: blocks of 8192 B allocated before the first step's "
        "actions and held to the trace's end: rank 0: 24 (rule 24), rank 1: 32 (rule 32), "
        "rank 2: 32 (rule 32), rank 3: 24 (rule 24)",
        # the multi-stage runtime computes the loss inside the forward's span
        "loss_outside: 0 B: on rank 3, what runs between a forward of the last stage 7 and "
        "the rank's next action keeps 0 B until that microbatch's backward (median of 16) "
        "(the loss runs inside the forward's span)")
    assert got.loss_outside == 0


def test_1f1b_with_outputs_keeps_them_and_frees_a_send_once_sent():
    pattern = _manifest("Schedule1F1B")["label_pattern"]
    got = read_retention(_files("Schedule1F1B"), A, 8, label_pattern=pattern)
    assert (got.kept_outputs, got.sends_held, got.recv_buffers) == \
        ("step_end", "until_sent", "per_microbatch")
    assert got.evidence[0].startswith("kept_outputs: step_end: on rank 3, 16 of 16 forwards")
    # the last input gradient of a rank's step is still held when its last action ends
    assert got.evidence[1] == ("sends_held: until_sent: of 48 input gradients sent to another "
                               "rank, 12 held past the rank's last compute action of the step, "
                               "36 freed during it")


def test_1f1b_computes_its_loss_after_the_forward_and_keeps_out_minus_target_for_the_backward():
    # Schedule1F1B calls the loss after forward_one_chunk (the harness's label): on rank 3,
    # ((out - target) ** 2).mean() allocates out - target (32 rows x 64 x 4 B = 8192 B, saved
    # by the power for its backward: freed in that microbatch's B), the power's output (8192 B)
    # and the mean's scalars (4, 8 and 4 B), those freed before the rank's next action
    pattern = _manifest("Schedule1F1B")["label_pattern"]
    got = read_retention(_files("Schedule1F1B"), A, 8, label_pattern=pattern)
    assert got.loss_outside == 32 * 64 * 4 == A
    assert got.evidence[3] == (
        "loss_outside: 8192 B: on rank 3, what runs between a forward of the last stage 3 and "
        "the rank's next action keeps 8192 B until that microbatch's backward (median of 16) "
        "(the loss, outside the forward's span)")


def test_the_forward_operators_give_what_an_i_keeps_by_hand():
    # a stage of 2 pre-LN MLP blocks (16 blocks, 8 stages): per block LayerNorm's output
    # (32 x 64), fc1's (32 x 256) and fc2's (32 x 64): 2 x 32 x 384 x 4 B = 98,304 B
    for r, f in enumerate(_files("ScheduleInterleaved1F1B")):
        assert split_backward_keeps(f, r) == {r: 98304, r + 4: 98304}
    # 1F1B: 4 blocks a stage
    pattern = _manifest("Schedule1F1B")["label_pattern"]
    assert split_backward_keeps(_files("Schedule1F1B")[2], 2, label_pattern=pattern) == \
        {2: 196608}


@pytest.fixture(scope="module")
def calibrations(tmp_path_factory) -> dict:
    d = tmp_path_factory.mktemp("retention")
    (d / "w.txt").write_text(workload_text(SHAPES["uniform"], 8))
    out = {}
    for cls, folder in RUNS.items():
        path = d / f"{cls}.yaml"
        args = ["calibrate", str(HOME / folder / cls), "-w", str(d / "w.txt"), "-o", str(path),
                "--memory"]
        pattern = _manifest(cls)["label_pattern"]
        if pattern:
            args += ["--label-pattern", pattern]
        assert main(args) == 0
        out[cls] = yaml.safe_load(path.read_text())
    return out


def test_calibrate_writes_the_retention_it_found(calibrations, capsys):
    rt = calibrations["ScheduleInterleaved1F1B"]["runtime"]
    assert (rt["kept_outputs"], rt["recv_buffers"]) == ("none", "per_microbatch")
    assert rt["runtimes"] == {"torch-multi": {"sends_held": "step_end"}}
    # 1F1B's until_sent is its runtime's rule for it (gpipe's is step_end): not written
    rt = calibrations["Schedule1F1B"]["runtime"]
    assert (rt["kept_outputs"], rt["recv_buffers"]) == ("step_end", "per_microbatch")
    assert "runtimes" not in rt


def test_calibrate_writes_what_the_last_stage_s_loss_keeps(calibrations):
    # 1F1B: out - target, kept after the forward's span (its forward keeps its 4 blocks' stash)
    assert calibrations["Schedule1F1B"]["memory"]["loss_keeps_bytes"] == A
    # the multi-stage runtime's last forward (stage 7, 2 blocks) keeps 172,548 B where the
    # other stages' keep 164,352: out - target and the loss's 4 B scalar
    assert calibrations["ScheduleInterleaved1F1B"]["memory"]["loss_keeps_bytes"] == \
        172548 - 164352 == A + 4


def test_a_class_without_a_split_backward_calibrates_what_i_keeps_from_its_operators(
        calibrations):
    for cls in RUNS:
        acts = calibrations[cls]["memory"]["actions"]["*"]
        # the 6·h per row the ZBV trace's own I keeps (test_memory_calibration.FITTED)
        assert acts["I"] == {"keeps": {"per_layer": 6 * 64 * 32 * 4, "fixed": -A},
                             "transient": 0}
        # a W's working memory: the widest weight's gradient, fc1's 256 x 64 + 256 bias, 4 B
        assert acts["W"] == {"transient": (256 * 64 + 256) * 4}


def _peaks(cal: dict, name: str) -> tuple[list[float], list[dict]]:
    system = copy.deepcopy(cal)
    system["memory"].update(precision="fp32", optimizer="sgd",
                            params_per_layer=SHAPES["uniform"].params(0))
    wl = parse_workload_text(workload_text(SHAPES["uniform"], 8), "uniform")
    r = simulate(wl, pipesim_schedule(SCHEDULES[name], 8), system_from_dict(system, "cal"),
                 pp=P, microbatches=8, p2p="torch").to_dict()
    return [x["peak_memory_bytes"] for x in r["ranks"]], r.get("warnings", [])


@pytest.mark.parametrize("cls", list(RUNS))
def test_the_calibration_reproduces_its_own_traces_within_1_percent(calibrations, cls):
    man = _manifest(cls)
    measured = [p - r["data_bytes"] for p, r in zip(man["peak_bytes"], man["ranks"])]
    got, _ = _peaks(calibrations[cls], cls)
    assert all(abs(p - q) <= 0.01 * q for p, q in zip(got, measured)), (got, measured)


def test_a_run_says_which_retention_it_used(calibrations):
    cal = calibrations["ScheduleInterleaved1F1B"]
    _, warnings = _peaks(cal, "ScheduleInterleaved1F1B")
    assert "retention_assumed" not in [w["code"] for w in warnings]   # all three given
    # on the single-stage runtime the sends keep torch's rule, said so
    _, warnings = _peaks(cal, "Schedule1F1B")
    said = [w for w in warnings if w["code"] == "retention_assumed"]
    assert [w["message"] for w in said] == [
        "memory on torch's single-stage runtime: kept_outputs none (given), sends_held "
        "until_sent (auto: torch 2.13's rule for this runtime and schedule), recv_buffers "
        "per_microbatch (given)"]
