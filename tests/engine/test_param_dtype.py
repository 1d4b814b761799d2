"""Memory as Megatron-LM trains (issue 35): --param-dtype and --use-distributed-optimizer give Megatron
Core's bytes per parameter (bf16 parameters with fp32 gradients: 18, 6 + 12/d distributed; fp32:
16, 8 + 8/d), the 16 B default warns, and a memory key with no effect is refused."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from simulator.cli.main import main

REPO = Path(__file__).resolve().parents[2]
ROW = "\t-1\t1000\tNONE\t0\t1000\tNONE\t0\t1000\tALLREDUCE\t4000000\t0\n"
PARAMS = 2 * 4000000 // 4          # two rows, 4 B a parameter on the wire (the header says)


@pytest.fixture
def workload(tmp_path) -> str:
    path = tmp_path / "two.txt"
    path.write_text("HYBRID_TRANSFORMER_FWD_IN_BCKWD model_parallel_NPU_group: 1 ep: 1 pp: 1 "
                    "vpp: 1 ga: 2 all_gpus: 4 checkpoints: 0 checkpoint_initiates: 0 pp_comm: 0 "
                    "grad_bytes_per_param: 4 layout: model\n2\n" + f"layer0{ROW}layer1{ROW}")
    return str(path)


def _rank0(capsys, *args) -> tuple[dict, list[str]]:
    assert main(["run", *args, "--json", "-"]) == 0
    d = json.loads(capsys.readouterr().out)
    return d["ranks"][0], [w["code"] for w in d["warnings"]]


@pytest.mark.parametrize("flags, per_param, parts", [
    # DP 4: weights, gradients (allocated at the first backward), optimizer state
    (["--param-dtype", "bf16"], 18, (2, 4, 12)),
    (["--param-dtype", "bf16", "--use-distributed-optimizer"], 6 + 12 / 4, (2, 4, 12 / 4)),
    (["--param-dtype", "fp32"], 16, (4, 4, 8)),
    (["--param-dtype", "fp32", "--use-distributed-optimizer"], 8 + 8 / 4, (4, 4, 8 / 4)),
])
def test_megatrons_bytes_per_parameter(workload, capsys, flags, per_param, parts):
    r, codes = _rank0(capsys, workload, *flags)
    assert r["peak_memory_bytes"] == per_param * PARAMS
    weights, grads, optimizer = parts
    assert r["peak_memory_breakdown"] == {
        "weights": weights * PARAMS, "gradients": grads * PARAMS,
        "optimizer": optimizer * PARAMS, "activations": 0, "transient": 0,
        "runtime_buffers": 0}
    assert r["static_memory_bytes"] == (weights + optimizer) * PARAMS
    assert "memory_per_param_default" not in codes


def test_the_default_stays_16_bytes_and_says_so(workload, capsys):
    r, codes = _rank0(capsys, workload)
    assert r["peak_memory_bytes"] == 16 * PARAMS
    assert codes == ["memory_per_param_default"]
    assert main(["run", workload, "--strict"]) == 2
    assert capsys.readouterr().err == (
        "pipesim: error: --strict: weights, gradients and optimizer state: 16 B a parameter on "
        "every DP rank (mixed-precision Adam, no distributed optimizer: the default when nothing "
        "says); Megatron-LM with --bf16 --use-distributed-optimizer holds 6 + 12/DP B, plain "
        "fp32 16 B (set --param-dtype bf16|fp32 (and --use-distributed-optimizer), or "
        "memory.bytes_per_param or memory.precision in --system) [memory_per_param_default]\n")
    # a preset that states its 16 B is not a default (its only warning: its estimated host
    # time per action)
    r, codes = _rank0(capsys, workload, "--system", str(REPO / "configs/system/h100.yaml"))
    assert r["peak_memory_bytes"] == 16 * PARAMS and codes == ["runtime_overheads_guessed"]


@pytest.mark.parametrize("args, line", [
    (["--set", "memory.zero=1"],
     "--system or --set: memory.zero: 1 has no effect without memory.precision (every "
     "parameter then costs memory.bytes_per_param, 16 B); set memory.precision (fp32, bf16 or "
     "fp16) or --param-dtype bf16|fp32"),
    (["--set", "memory.optimizer=sgd"],
     "--system or --set: memory.optimizer: sgd has no effect without memory.precision (every "
     "parameter then costs memory.bytes_per_param, 16 B); set memory.precision (fp32, bf16 or "
     "fp16) or --param-dtype bf16|fp32"),
    (["--use-distributed-optimizer"],
     "--use-distributed-optimizer: shards the optimizer state, which is counted by dtype; give "
     "--param-dtype bf16 or fp32 (or memory.precision in --system)"),
    (["--param-dtype", "fp16"],
     "Invalid value for '--param-dtype': 'fp16' is not one of 'bf16', 'fp32'."),
])
def test_a_memory_key_with_no_effect_is_refused_in_one_line(workload, capsys, args, line):
    assert main(["run", workload, *args]) == 2
    assert capsys.readouterr().err == f"pipesim: error: {line}\n"


def test_zero_with_a_dtype_is_the_distributed_optimizer(workload, capsys):
    a, _ = _rank0(capsys, workload, "--param-dtype", "bf16", "--set", "memory.zero=1")
    b, _ = _rank0(capsys, workload, "--param-dtype", "bf16", "--use-distributed-optimizer")
    # the same memory; the flag also runs Megatron's DDP (a reduce-scatter, the step on 1/DP
    # of the parameters, an all-gather), which moves the times
    memory = ("static_memory_bytes", "peak_memory_bytes", "peak_memory_breakdown")
    assert {k: a[k] for k in memory} == {k: b[k] for k in memory}


def test_a_peak_over_a_typical_gpu_names_the_dtypes(tmp_path, capsys):
    path = tmp_path / "big.txt"
    big = ROW.replace("4000000", "40000000000")         # 10^10 parameters a row
    path.write_text("HYBRID_TRANSFORMER_FWD_IN_BCKWD model_parallel_NPU_group: 1 ep: 1 pp: 1 "
                    "vpp: 1 ga: 2 all_gpus: 4 checkpoints: 0 checkpoint_initiates: 0 pp_comm: 0 "
                    "grad_bytes_per_param: 4 layout: model\n1\n" + f"layer0{big}")
    assert main(["run", str(path), "--param-dtype", "bf16", "--use-distributed-optimizer",
                 "--json", "-"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["peak_memory_bytes"] == (6 + 12 / 4) * 10**10
    assert [w["message"] for w in d["warnings"] if w["code"] == "memory_over_capacity"] == [
        "rank 0 peaks at 83.82 GiB, above the 80 GiB of a typical A100/H100 (no memory capacity "
        "set): 46.57 GiB weights and optimizer state (bf16 weights, fp32 gradients from the first "
        "backward, optimizer state sharded over DP) and 37.25 GiB of gradients and stashed "
        "activations (activation_factor 17 x pp_comm 0 bytes per layer and microbatch)"]
