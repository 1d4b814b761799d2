"""FSDP2's memory (``--fsdp N``, what a torchtitan job with data_parallel_shard_degree N
sets): fp32 weights, fp32 gradients and Adam's state sharded over N ranks, each transformer
layer's weights gathered whole while it computes, the next layer's beside it, and in the
backward the layer's whole fp32 gradient until its reduce-scatter. Worked by hand on a
generated 4-layer model."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from simulator import simulate
from simulator.cli.main import main
from simulator.errors import ConfigError
from simulator.workload.parser import load_workload


@pytest.fixture
def tiny(tmp_path) -> str:
    out = tmp_path / "tiny.txt"
    assert main(["generate", "--model", "llama", "--layers", "4", "--hidden", "256", "--heads",
                 "4", "--kv-heads", "2", "--ffn", "512", "--vocab", "1024", "--seq", "128",
                 "--micro-batch", "1", "--ga", "2", "--dp", "2", "--precision", "bf16",
                 "--gpu", "h100", "-o", str(out)]) == 0
    return str(out)


def test_fsdp_shards_the_state_and_gathers_two_layers(tiny):
    wl = load_workload(tiny, "model")
    # parameters: each row's fp32 gradient all-reduce bytes / 4
    params = sum(layer.wg_comm.bytes for layer in wl.layers) // 4
    layer = sum(row.wg_comm.bytes for row in wl.layers[1:5]) // 4     # one transformer layer
    assert (params, layer) == (2_885_888, 590_336)
    plain = simulate(tiny, "1f1b", gpus=2, param_dtype="bf16").to_dict()["ranks"][0]
    fsdp = simulate(tiny, "1f1b", gpus=2, fsdp=2, param_dtype="bf16").to_dict()["ranks"][0]
    # without FSDP: bf16 weights, fp32 main gradients, fp32 master copy + Adam's m and v (12 B)
    # one stage, the last: its microbatch's stash also holds what Megatron's loss keeps, the
    # fp32 softmax of its 128 tokens x 1,024 logits (4 B each)
    assert wl.header.loss_keeps_bytes == 4 * 128 * 1024 == 524_288
    assert plain["peak_memory_breakdown"] == {
        "weights": 2 * params, "gradients": 4 * params, "optimizer": 12 * params,
        "activations": 4 * wl.header.activation_bytes + wl.header.loss_keeps_bytes,
        "transient": wl.header.b_transient_bytes, "runtime_buffers": 0}
    # FSDP over 2: fp32 weights, fp32 gradients, Adam's m and v (8 B), each halved; the peak
    # backward also holds two layers' bf16 weights and one layer's fp32 gradient
    assert fsdp["peak_memory_action"] == plain["peak_memory_action"] == "0B1"
    assert fsdp["peak_memory_breakdown"] == {
        "weights": 4 * params // 2, "gradients": 4 * params // 2, "optimizer": 8 * params // 2,
        "activations": 4 * wl.header.activation_bytes + wl.header.loss_keeps_bytes,
        "transient": wl.header.b_transient_bytes + 2 * 2 * layer + 4 * layer,
        "runtime_buffers": 0}


def test_fsdp_warns_the_gathered_dtype_it_defaults_and_refuses_the_distributed_optimizer(tiny):
    r = simulate(tiny, "1f1b", gpus=2, fsdp=2)
    codes = [w.code for w in r.warnings]
    assert "fsdp_gather_dtype_default" in codes
    assert "fsdp_gather_dtype_default" not in [
        w.code for w in simulate(tiny, "1f1b", gpus=2, fsdp=2, param_dtype="bf16").warnings]
    with pytest.raises(ConfigError, match=r"^--fsdp and --use-distributed-optimizer: give one"):
        simulate(tiny, "1f1b", gpus=2, fsdp=2, use_distributed_optimizer=True,
                 param_dtype="bf16")


def test_a_torchtitan_job_with_fsdp_runs_sharded(tmp_path, capsys):
    """torchtitan's debugmodel on 4 GPUs, data_parallel_shard_degree -1: FSDP over 4."""
    job = tmp_path / "job.toml"
    job.write_text('[model]\nname = "llama3"\nflavor = "debugmodel"\n[training]\n'
                   'local_batch_size = 2\nseq_len = 256\n[parallelism]\n'
                   'data_parallel_shard_degree = -1\n[activation_checkpoint]\nmode = "none"\n')
    out = tmp_path / "r.json"
    assert main(["run", "--torchtitan", str(job), "--gpus", "4", "--gpu", "a100", "--engine",
                 "evaluator", "--json", str(out)]) == 0
    d = json.loads(out.read_text())
    part = d["ranks"][0]["peak_memory_breakdown"]
    # fp32 weights over 4, Adam's 8 B over 4: twice the weights
    assert part["optimizer"] == 2 * part["weights"] > 0
    assert any(n.startswith("--fsdp 4: fp32 weights") for n in d["notes"])


def test_fsdp_is_priced_as_the_distributed_optimizer_with_both_overlaps(tiny):
    """FSDP2's collectives as Megatron's distributed optimizer's with --overlap-grad-reduce and
    --overlap-param-gather: the fp32 gradients (4 B) reduce-scattered, the bf16 weights (2 B)
    all-gathered; the step is the norm and Adam on the fp32 shard (4 + 28 B a parameter, no
    copy into training weights) and nothing zeroes a gradient buffer."""
    from simulator.engine.options import DDPSettings
    from simulator.run_options import RunOptions

    assert RunOptions(fsdp=2).ddp_settings() == DDPSettings(
        True, True, True, 4.0, 2.0, None, 32.0, zeroes_buffer=False, fsdp=True)
    assert RunOptions(fsdp=2, param_dtype="fp32").ddp_settings().param_bytes == 4.0
    h100 = str(Path(__file__).resolve().parents[2] / "configs" / "system" / "h100.yaml")
    plain = simulate(tiny, "1f1b", h100, gpus=2, param_dtype="bf16")
    fsdp = simulate(tiny, "1f1b", h100, gpus=2, param_dtype="bf16", fsdp=2)
    assert any(n.startswith("Megatron DDP: ") for n in fsdp.notes)
    assert not any(n.startswith("Megatron DDP: ") for n in plain.notes)
