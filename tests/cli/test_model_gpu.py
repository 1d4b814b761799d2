"""Which GPU a generated model's kernels are priced on, and the gradient buffer's dtype of a
Megatron-LM launch: what a run from launch settings alone takes from the system it runs on."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from simulator.cli.main import main

REPO = Path(__file__).resolve().parents[2]
H100 = str(REPO / "configs" / "system" / "h100.yaml")
A100 = str(REPO / "configs" / "system" / "a100.yaml")
# 4 layers of hidden 256 over 2 stages of 2 GPUs each; bf16 with the distributed optimizer
LAUNCH = ("--num-layers 4 --hidden-size 256 --num-attention-heads 4 --seq-length 128 "
          "--micro-batch-size 1 --global-batch-size 8 --bf16 --use-flash-attn --vocab-size 1024 "
          "--untie-embeddings-and-output-weights --use-distributed-optimizer "
          "--tensor-model-parallel-size 1 --pipeline-model-parallel-size 2")


def _run(capsys, tmp_path, launch: str, *extra: str) -> tuple[int, dict, str]:
    args = tmp_path / "args.txt"
    args.write_text(launch)
    out = tmp_path / "r.json"
    rc = main(["run", "--megatron-args", str(args), "--gpus", "4", "--engine", "evaluator",
               "--json", str(out), *extra])
    err = capsys.readouterr().err
    return rc, (json.loads(out.read_text()) if rc == 0 else {}), err


def _gpu_warnings(d: dict) -> list[str]:
    return [w["message"] for w in d["warnings"] if "gpu.preset" in w["message"]]


def test_the_system_names_the_gpu_a_model_is_priced_on(capsys, tmp_path):
    """--system h100.yaml alone prices the kernels on the h100 preset, as --gpu h100 does, and
    says nothing; its preset set to a100 prices them 3x slower per FLOP (the run is not 3x
    longer: the per-action host time is the same); the built-in system names no GPU: the a100
    preset, and a warning."""
    rc, on_h100, _ = _run(capsys, tmp_path, LAUNCH, "--system", H100)
    assert rc == 0 and _gpu_warnings(on_h100) == []
    rc, flagged, _ = _run(capsys, tmp_path, LAUNCH, "--system", H100, "--gpu", "h100")
    assert rc == 0 and flagged["makespan_ns"] == on_h100["makespan_ns"]
    rc, a100_kernels, _ = _run(capsys, tmp_path, LAUNCH, "--system", H100, "--set",
                               "gpu.preset=a100")
    assert rc == 0 and a100_kernels["makespan_ns"] > 1.3 * on_h100["makespan_ns"]
    rc, built_in, _ = _run(capsys, tmp_path, LAUNCH)
    assert rc == 0
    assert _gpu_warnings(built_in) == [
        "no --gpu, and the system names no GPU (gpu.preset in --system): the generated "
        "workload's kernels are priced on the a100 preset"]


def test_a_gpu_the_system_contradicts_is_refused_in_one_line(capsys, tmp_path):
    rc, _, err = _run(capsys, tmp_path, LAUNCH, "--system", H100, "--gpu", "a100")
    assert rc == 2
    assert err == ("pipesim: error: --gpu a100: the system's GPU is h100 (gpu.preset in "
                   "--system); give one of them, or the same\n")


def test_the_default_gpu_is_refused_under_strict(capsys, tmp_path):
    rc, _, err = _run(capsys, tmp_path, LAUNCH, "--strict")
    assert rc == 2
    assert err == ("pipesim: error: --strict: no --gpu, and the system names no GPU (gpu.preset "
                   "in --system): the generated workload's kernels are priced on the a100 "
                   "preset [model_input]\n")


def test_an_unknown_preset_in_a_system_file_is_refused(capsys, tmp_path):
    system = tmp_path / "s.yaml"
    system.write_text("gpu: {preset: v100}\n")
    rc, _, err = _run(capsys, tmp_path, LAUNCH, "--system", str(system))
    assert rc == 2
    assert err == (f"pipesim: error: {system}: gpu.preset: expected one of a100, h100, h200, "
                   "found 'v100'\n")


@pytest.mark.parametrize("system", [A100, H100])
def test_grad_reduce_in_bf16_halves_the_gradient_buffer(capsys, tmp_path, system):
    """Megatron-LM's DDP keeps its gradient buffer in the reduction's dtype
    (param_and_grad_buffer.py: fp32 if grad_reduce_in_fp32, else the parameters' dtype): with
    --bf16 that is fp32, 4 B a parameter, the bf16 weights' 2 B twice over; with
    --grad-reduce-in-bf16 it is bf16, as many bytes as the weights."""
    rc, fp32, _ = _run(capsys, tmp_path, LAUNCH, "--system", system)
    assert rc == 0
    rc, bf16, _ = _run(capsys, tmp_path, LAUNCH + " --grad-reduce-in-bf16", "--system", system)
    assert rc == 0
    for r32, r16 in zip(fp32["ranks"], bf16["ranks"]):
        w32, w16 = r32["peak_memory_breakdown"], r16["peak_memory_breakdown"]
        assert w32["gradients"] == 2 * w32["weights"] > 0
        assert w16["gradients"] == w16["weights"] == w32["weights"]
        assert r16["peak_memory_bytes"] == r32["peak_memory_bytes"] - w32["weights"]


def _plan_file(capsys, out: Path, *extra: str) -> tuple[str, list[str]]:
    out.mkdir()
    rc = main(["plan", "--model", "gpt", "--layers", "4", "--hidden", "512", "--heads", "8",
               "--seq-length", "64", "--gpus", "4", "--tp", "2", "--global-batch-size", "8",
               "-s", "1f1b", "-j", "1", "--out", str(out), "--json", str(out / "p.json"),
               *extra])
    capsys.readouterr()
    assert rc == 0
    return ((out / "plan-gpt-4l-tp2.txt").read_text(),
            json.loads((out / "p.json").read_text())["warnings"])


def test_plan_prices_its_candidates_on_the_systems_gpu(capsys, tmp_path):
    by_system, warned = _plan_file(capsys, tmp_path / "a", "--system", H100)
    by_flag, _ = _plan_file(capsys, tmp_path / "b", "--system", H100, "--gpu", "h100")
    built_in, default_warned = _plan_file(capsys, tmp_path / "c")
    assert by_system == by_flag != built_in
    assert not any("gpu.preset" in w for w in warned)
    assert "no --gpu, and the system names no GPU (gpu.preset in --system): the generated " \
           "workload's kernels are priced on the a100 preset" in default_warned


def test_fp8_linears_shorten_an_h100_iteration_and_are_refused_on_an_a100(capsys, tmp_path):
    """At hidden 4096 and 4,096 tokens the FP8 GEMMs outrun their casts; at LAUNCH's hidden 256
    the casts and whole tiles make FP8 slower, as small FP8 GEMMs are."""
    big = LAUNCH.replace("--hidden-size 256", "--hidden-size 4096").replace(
        "--num-attention-heads 4", "--num-attention-heads 32").replace(
        "--seq-length 128", "--seq-length 4096")
    rc, bf16, _ = _run(capsys, tmp_path, big, "--system", H100)
    rc8, fp8, _ = _run(capsys, tmp_path, big + " --fp8-format hybrid", "--system", H100)
    assert rc == rc8 == 0 and fp8["makespan_ns"] < 0.85 * bf16["makespan_ns"]
    rc, small, _ = _run(capsys, tmp_path, LAUNCH, "--system", H100)
    rc8, small8, _ = _run(capsys, tmp_path, LAUNCH + " --fp8-format hybrid", "--system", H100)
    assert rc == rc8 == 0 and small8["makespan_ns"] > small["makespan_ns"]
    rc, _, err = _run(capsys, tmp_path, LAUNCH + " --fp8-format hybrid", "--system", A100)
    assert rc == 2 and err == ("pipesim: error: --fp8-format: the a100 preset has no FP8 "
                               "tensor cores (expected h100 or h200)\n")
