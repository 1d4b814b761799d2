"""The sized shapes (rows of two sizes): heavy-last (the last quarter of the blocks with an
MLP of 8h) and heavy-first (the first quarter), each calibrated on its own ZBV traces (M = 8,
stages of both sizes): the fitted bytes per layer and per parameter, exact (every class's
per-rank peak predicted with them: test_memory_calibration.py, parametrized over the shapes)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from benchmarks.memory.cases import SHAPES, workload_text
from benchmarks.memory.predict import calibration
from simulator.cli.main import main

REPO = Path(__file__).resolve().parents[2]
RESULTS = REPO / "benchmarks" / "results" / "memory-2026-11-26-cpu-gloo"
TRACES = REPO / "tests" / "data" / "memtraces" / "heavy-last" / "ScheduleZBVZeroBubble"
A = SHAPES["heavy-last"].pp_comm

# a light block (f = 4h) has 33216 parameters and stashes 82176 B, a heavy one (f = 8h) 66240
# and 147712 B: 65536 B more for 33024 more parameters
FITTED = {"actions": {"*": {
    "F": {"keeps": {"per_layer": 16259, "per_param": 1.984496},
          "transient": {"fixed": A, "per_param": 0.0}},
    "I": {"keeps": {"per_layer": 16193, "per_param": 0.992248, "fixed": -A},
          "transient": {"fixed": -16575, "per_param": 0.992248}},
    "W": {"transient": {"fixed": -16961, "per_param": 3.007752}},
    "B": {"transient": {"fixed": -1345, "per_param": 3.007752}}}},
    # the last stage's forward keeps its loss's out - target (32 x 64 x 4 B) and the loss's
    # 4 B scalar above the stash its two heavy blocks give (test_memory_calibration.FITTED)
    "loss_keeps_bytes": A + 4}


# heavy-first (the first quarter's MLP 8h; no committed traces, the per-action bytes the
# harness read from its ZBV traces): the same rates, a full backward's fixed part aside
FITTED_FIRST = {"actions": {"*": {
    **FITTED["actions"]["*"],
    "B": {"transient": {"fixed": -2369, "per_param": 3.007752}}}},
    "loss_keeps_bytes": A + 4}


@pytest.fixture(scope="module")
def results() -> dict:
    return json.loads((RESULTS / "results.json").read_text())


def test_the_fit_of_the_measured_per_action_bytes(results):
    assert calibration(results, "heavy-last", "ScheduleZBVZeroBubble") == FITTED


def test_the_fit_of_heavy_first_from_its_recorded_per_action_bytes(results):
    assert calibration(results, "heavy-first", "ScheduleZBVZeroBubble") == FITTED_FIRST


def test_pipesim_calibrate_on_the_committed_heavy_last_traces_fits_the_same(tmp_path, capsys):
    (tmp_path / "w.txt").write_text(workload_text(SHAPES["heavy-last"], 8))
    out = tmp_path / "cal.yaml"
    assert main(["calibrate", str(TRACES), "-w", str(tmp_path / "w.txt"), "-o", str(out),
                 "--memory"]) == 0
    assert yaml.safe_load(out.read_text())["memory"] == FITTED
    assert "memory (absolute allocator levels): stash by F.keeps; F {'keeps': " \
        "{'per_layer': 16259, 'per_param': 1.984496}" in capsys.readouterr().out
