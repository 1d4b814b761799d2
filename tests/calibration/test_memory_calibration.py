"""`pipesim calibrate --memory` on the committed memory traces (torch 2.13, ZBV, P = 4, M = 8,
tests/data/memtraces): the fitted memory section, exact, and with it every other torch class's
per-rank peak as the harness measured it (benchmarks/results/memory-*: the pinned table)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from benchmarks.fidelity.cases import CASES, workload_text as timing_workload
from benchmarks.memory.cases import SHAPES, workload_text
from benchmarks.memory.predict import predict
from simulator.cli.main import main

REPO = Path(__file__).resolve().parents[2]
TRACES = REPO / "tests" / "data" / "memtraces" / "ScheduleZBVZeroBubble"
RESULTS = REPO / "benchmarks" / "results" / "memory-2026-11-26-cpu-gloo"
A = SHAPES["uniform"].pp_comm      # one activation between stages: 32 rows x 64 x 4 B

FITTED = {
    "activation_bytes_per_layer": 82176,               # (10h + 2) x 32 rows x 4 B per block
    "actions": {"*": {
        "F": {"transient": A},                         # fc2's output before the residual add
        "I": {"keeps": {"per_layer": 6 * 64 * 32 * 4, "fixed": -A}, "transient": 2 * A},
        "W": {"transient": 82944},
        "B": {"transient": 98560}}},                   # the first stage's W: its whole backward
    # the last stage's forward keeps above its stash what its loss saves: out - target
    # (32 rows x 64 x 4 B) and the loss's 4 B scalar (torch's multi-stage runtime computes the
    # loss inside the forward's span)
    "loss_keeps_bytes": A + 4,
}


@pytest.fixture(scope="module")
def calibration(tmp_path_factory) -> dict:
    d = tmp_path_factory.mktemp("memcal")
    (d / "w.txt").write_text(workload_text(SHAPES["uniform"], 8))
    out = d / "cal.yaml"
    assert main(["calibrate", str(TRACES), "-w", str(d / "w.txt"), "-o", str(out),
                 "--memory"]) == 0
    return yaml.safe_load(out.read_text())


def test_the_memory_fit_of_the_committed_traces(calibration):
    assert calibration["memory"] == FITTED


def _fitted(shape: str, request) -> dict:
    """The memory section each shape's classes are predicted with: uniform's as `pipesim
    calibrate` fits it from the committed traces, the sized shapes' as pinned beside their
    traces (test_memory_heavy_last.py)."""
    if shape == "uniform":
        return request.getfixturevalue("calibration")["memory"]
    from .test_memory_heavy_last import FITTED as HEAVY_LAST, FITTED_FIRST as HEAVY_FIRST
    return {"heavy-last": HEAVY_LAST, "heavy-first": HEAVY_FIRST}[shape]


@pytest.mark.parametrize("shape", ["uniform", "heavy-last", "heavy-first"])
def test_every_class_predicted_as_pinned_and_within_5_percent_of_the_allocator(shape, request):
    memory = _fitted(shape, request)
    results = json.loads((RESULTS / "results.json").read_text())
    pinned = {(r["shape"], r["microbatches"], r["schedule"]): r
              for r in json.loads((RESULTS / "prediction.json").read_text())["rows"]}
    checked = 0
    for key, config in results.items():
        if key.split("/")[0] != shape:
            continue
        name, m = key.split("/")[2], config["microbatches"]
        got = predict(results, shape, m, name, memory)
        assert got == pinned[(shape, m, name)]["predicted"], key
        measured = [r["peak_bytes"] - r["data_bytes"] for r in config["ranks"]]
        assert all(abs(p - q) <= 0.05 * q for p, q in zip(got, measured)), (key, got, measured)
        checked += 1
    assert checked == 24


def test_memory_asked_of_traces_without_memory_events_is_one_line(tmp_path, capsys):
    (tmp_path / "w.txt").write_text(timing_workload(CASES["uniform"]))
    src = REPO / "tests" / "data" / "traces" / "ScheduleInterleaved1F1B"
    assert main(["calibrate", str(src), "-w", str(tmp_path / "w.txt"), "--memory"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(f"pipesim: error: {src}/rank0.json")
    assert err.endswith("expected the allocator's [memory] events, found none; record the "
                        "trace with torch.profiler.profile(..., profile_memory=True), started "
                        "before the model is built\n")
    # without --memory the same traces calibrate the timing alone
    out = tmp_path / "cal.yaml"
    assert main(["calibrate", str(src), "-w", str(tmp_path / "w.txt"), "-o", str(out)]) == 0
    assert "memory" not in yaml.safe_load(out.read_text())
