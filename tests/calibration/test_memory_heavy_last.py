"""The heavy-last shape (the last quarter of the blocks with an MLP of 8h: rows of two sizes),
calibrated on its own ZBV traces (M = 8, stages of both sizes): the fitted bytes per layer and
per parameter, exact, and with them every class's per-rank peak as pinned
(benchmarks/results/memory-*: prediction.json) and within 5 % of what the allocator measured."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from benchmarks.memory.cases import SHAPES, workload_text
from benchmarks.memory.predict import calibration, predict
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
    "B": {"transient": {"fixed": -1345, "per_param": 3.007752}}}}}


@pytest.fixture(scope="module")
def results() -> dict:
    return json.loads((RESULTS / "results.json").read_text())


def test_the_fit_of_the_measured_per_action_bytes(results):
    assert calibration(results, "heavy-last", "ScheduleZBVZeroBubble") == FITTED


def test_every_heavy_last_class_predicted_as_pinned_and_within_5_percent(results):
    pinned = {(r["shape"], r["microbatches"], r["schedule"]): r
              for r in json.loads((RESULTS / "prediction.json").read_text())["rows"]}
    checked = 0
    for key, config in results.items():
        shape, _, name = key.split("/")
        if shape != "heavy-last":
            continue
        m = config["microbatches"]
        got = predict(results, shape, m, name, FITTED)
        assert got == pinned[(shape, m, name)]["predicted"], key
        measured = [r["peak_bytes"] - r["data_bytes"] for r in config["ranks"]]
        assert all(abs(p - q) <= 0.05 * q for p, q in zip(got, measured)), (key, got, measured)
        checked += 1
    assert checked == 24


def test_pipesim_calibrate_on_the_committed_heavy_last_traces_fits_the_same(tmp_path, capsys):
    (tmp_path / "w.txt").write_text(workload_text(SHAPES["heavy-last"], 8))
    out = tmp_path / "cal.yaml"
    assert main(["calibrate", str(TRACES), "-w", str(tmp_path / "w.txt"), "-o", str(out),
                 "--memory"]) == 0
    assert yaml.safe_load(out.read_text())["memory"] == FITTED
    assert "memory (absolute allocator levels): stash by F.keeps; F {'keeps': " \
        "{'per_layer': 16259, 'per_param': 1.984496}" in capsys.readouterr().out
