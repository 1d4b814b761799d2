"""The harness's transformer case predicted from its shape alone (no traces): what `pipesim
generate --model gpt --no-flash-attention --precision fp32` writes for it, fp32 weights and SGD
on torch's runtime rules. Every class's per-rank peak as pinned (benchmarks/results/
memory-*-transformer: shape-only.json) and within 15 % of what the allocator measured."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks.memory.shape_only import predict, specs, workload_text
from benchmarks.memory.cases import TRANSFORMERS
from simulator.workload.generator import activation_bytes, split_backward_bytes

REPO = Path(__file__).resolve().parents[2]
RESULTS = REPO / "benchmarks" / "results" / "memory-2026-11-26-transformer"


@pytest.fixture(scope="module")
def recorded() -> tuple[dict, dict]:
    return (json.loads((RESULTS / "results.json").read_text()),
            json.loads((RESULTS / "shape-only.json").read_text()))


def test_the_shape_counts_one_layer_in_fp32():
    model, par = specs(TRANSFORMERS["transformer"], 8)
    sbh, as2b = 128 * 256, 4 * 128 * 128
    # Korthikanti et al.'s 34·sbh + 5·as²b in 16 bits: 4-byte elements, 1-byte masks
    assert activation_bytes(model, par) == 66 * sbh + 9 * as2b == 2752512
    assert split_backward_bytes(model, par) == 11 * sbh * 4
    assert "activation_bytes: 2752512 split_backward_bytes: 1441792" in workload_text(
        TRANSFORMERS["transformer"], 8).splitlines()[0]


@pytest.mark.parametrize("shape", ["transformer", "transformer-bool-masks"])   # that run's
def test_every_class_predicted_as_pinned_and_within_15_percent(shape, recorded):
    results, pinned = recorded
    rows = {(r["microbatches"], r["schedule"]): r for r in pinned["rows"] if r["shape"] == shape}
    checked = 0
    for key, config in results.items():
        if key.split("/")[0] != shape:
            continue
        m, name = config["microbatches"], key.split("/")[2]
        got, warnings = predict(shape, m, name)
        assert got == rows[(m, name)]["predicted"], key
        assert any(w.startswith("activation memory from the model's shape") for w in warnings)
        measured = [r["peak_bytes"] - r["data_bytes"] for r in config["ranks"]]
        assert measured == rows[(m, name)]["measured"], key
        assert all(abs(p - q) <= 0.15 * q for p, q in zip(got, measured)), (key, got, measured)
        if shape == "transformer-bool-masks":    # 1-byte masks, as counted: within 1 %
            assert all(abs(p - q) <= 0.01 * q for p, q in zip(got, measured)), key
        checked += 1
    assert checked == 14      # the 7 torch classes x M = 8, 12


def test_a_grouped_query_layer_keeps_its_narrower_qkv_output_gradient():
    # 2 K/V heads of 4: the fused QKV's output is h + 2 x 2 x 64 = 512 wide, not 3h; what the
    # I keeps per token: 4h outside + 512 + 4h (the MLP's up projection) = 10h, fp32
    model, par = specs(TRANSFORMERS["transformer-gqa"], 8)
    assert split_backward_bytes(model, par) == 10 * 128 * 256 * 4 == 1310720
