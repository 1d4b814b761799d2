"""An MoE layer as Megatron-LM runs it. Shared experts (--moe-shared-expert-intermediate-size,
DeepSeek's n_shared_experts, Qwen-MoE's shared_expert_intermediate_size): a dense SwiGLU MLP
over TP that every token runs before its routing, priced, placed and counted as such; the
router's dtype as Transformer Engine's GEMM runs it."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from simulator.cli.main import main
from simulator.errors import ConfigError
from simulator.workload import layer_ops
from simulator.workload.generator import (ModelSpec, ParallelSpec, activation_bytes, check,
                                          layer_rows)
from simulator.workload.inputs.megatron_args import megatron_input, read_megatron_args
from model_flag_runs import launch_runs


def _moe(shared_ffn: int, tp: int = 2):
    model = ModelSpec("moe", layers=2, hidden=256, heads=4, seq=256, micro_batch=1, ffn=512,
                      vocab=1024, experts=4, topk=2, shared_ffn=shared_ffn)
    return model, ParallelSpec(tp=tp, pp=1, vpp=1, ga=1, dp=2, ep=2)


def test_the_shared_experts_are_a_dense_swiglu_mlp_over_tp_before_the_routing():
    """tp 2, sequence parallel: the MLP runs on all b·s = 256 tokens of the all-gathered
    sequence, F = 1024 wide split over TP: the column GEMM 256 x 1024 (2F/T) x 256, the row GEMM
    256 x 256 x 512; the hidden state all-gathered before it and reduce-scattered after."""
    model, par = _moe(1024)
    rows = {r.name: r for r in layer_rows(model, par)}
    names = list(rows)
    assert names.index("moe_router") < names.index("moe_shared_column") \
        < names.index("moe_shared_row") < names.index("moe_dispatch")
    col, row = rows["moe_shared_column"], rows["moe_shared_row"]
    assert col.fwd_flops == col.ig_flops == col.wg_flops == 2 * 256 * 256 * 2 * 1024 // 2
    assert row.fwd_flops == 2 * 256 * 1024 * 256 // 2
    assert col.params == 2 * 256 * 1024 // 2 and row.params == 1024 * 256 // 2
    assert col.wg_comm == ("ALLREDUCE", 4 * col.params)     # a dense layer's DP reduction
    # the gathered hidden state's bytes, as the attention's and a dense MLP's rows state them
    assert col.fwd_comm == rows["attention_column"].fwd_comm == ("ALLGATHER", 2 * 256 * 256)
    assert row.fwd_comm == rows["attention_row"].fwd_comm == ("REDUCESCATTER", 2 * 256 * 256)
    up = next(o for o in layer_ops.shared_expert_column_ops(model, par) if o.name == "shared_up")
    assert (up.m, up.n, up.k) == (256, 1024, 256)
    add = next(o for o in layer_ops.shared_expert_row_ops(model, par)
               if o.name == "shared_output_add")
    assert add.nbytes == 3 * 2 * 128 * 256          # read two, write one, the SP shard
    # none without shared experts; the activations count them as F more FFN a token
    bare, _ = _moe(0)
    assert not [r for r in layer_rows(bare, par) if r.name.startswith("moe_shared")]
    assert activation_bytes(model, par) > activation_bytes(bare, par)
    assert model.token_ffn == 512 * 2 + 1024 and bare.token_ffn == 1024


def test_a_shared_ffn_megatron_cannot_split_is_refused():
    # (a dense model with one: tests/engine/test_expert_grid.py)
    model, par = _moe(1023)
    with pytest.raises(ConfigError, match=r"^--shared-ffn 1023: expected a multiple of --tp 2 "
                                          r"\(the shared experts' FFN is split over TP\)$"):
        check(model, par, "model")


LAUNCH = ("--num-layers 4 --hidden-size 256 --num-attention-heads 4 --ffn-hidden-size 512 "
          "--swiglu --normalization RMSNorm --untie-embeddings-and-output-weights "
          "--disable-bias-linear --position-embedding-type rope --vocab-size 1024 "
          "--num-experts 4 --moe-router-topk 2 --moe-token-dispatcher-type alltoall "
          "--moe-grouped-gemm --seq-length 256 --micro-batch-size 1 --global-batch-size 8 "
          "--bf16 --use-flash-attn --expert-model-parallel-size 2 ")


def test_a_launch_reads_its_shared_experts_and_writes_them_back(tmp_path, capsys):
    got = megatron_input(LAUNCH + "--moe-shared-expert-intermediate-size 1024", "a.txt", 4)
    assert got.shape.shared_ffn == 1024
    assert not any("shared" in w for w in got.warnings)
    overlap = megatron_input(LAUNCH + "--moe-shared-expert-intermediate-size 1024 "
                             "--moe-shared-expert-overlap", "a.txt", 4)
    assert ("a.txt: --moe-shared-expert-overlap: the shared experts run before the routed "
            "ones on the compute stream, not beside the token dispatch's all-to-all") in \
        " ".join(overlap.warnings)
    times = launch_runs(tmp_path, capsys, LAUNCH, {
        "none": "", "shared": "--moe-shared-expert-intermediate-size 1024"}, 4)
    assert times["shared"] > times["none"]
    written = tmp_path / "shared" / "megatron_args.txt"
    assert "--moe-shared-expert-intermediate-size 1024" in written.read_text().split("\n")
    assert read_megatron_args(str(written), 4).shape.shared_ffn == 1024


def test_deepseeks_config_reads_its_two_shared_experts(hf_configs_dir, tmp_path, capsys):
    from simulator.workload.inputs.hf_config import read_hf_config

    path = hf_configs_dir / "deepseek-moe-16b-base.json"
    shape = read_hf_config(str(path)).shape
    assert (shape.experts, shape.topk, shape.ffn, shape.shared_ffn) == (64, 6, 1408, 2 * 1408)
    out = tmp_path / "w.txt"
    assert main(["generate", "--hf-config", str(path), "--seq", "1024", "--micro-batch", "1",
                 "--gpu", "h100", "-o", str(out)]) == 0
    err = capsys.readouterr().err
    assert "n_shared_experts" not in err
    rows = [line.split("\t")[0] for line in out.read_text().splitlines()[2:]]
    assert rows.count("moe_shared_column") == rows.count("moe_shared_row") == 28


def test_the_routers_dtype_is_read_as_transformer_engine_runs_it(tmp_path, capsys):
    got = megatron_input(LAUNCH + "--moe-router-dtype fp32", "a.txt", 4)
    assert not any("--moe-router-dtype" in w for w in got.warnings)
    assert got.launch.router_fp32 and got.launch.code_fields()["router_fp32"]
    assert ("a.txt: --moe-router-dtype fp32: the router's forward GEMM reads its 16-bit "
            "operands and writes fp32 logits, its backward's two GEMMs run in fp32 "
            "(Transformer Engine's general GEMM)") in " ".join(got.notes)
    # tp 2: 128 tokens a rank route over E = 4 from h = 256; bf16 elsewhere
    model, par = _moe(0)
    fp32 = {o.name: o for o in layer_ops.moe_router_ops(model, replace(par, router_fp32=True))}
    assert (fp32["router"].dtype_bytes, fp32["router"].out_bytes) == (2, 4)
    assert fp32["router_dgrad"].dtype_bytes == fp32["router_wgrad"].dtype_bytes == 4
    assert fp32["router_input_fp32"].nbytes == fp32["router_dgrad_cast"].nbytes == \
        (2 + 4) * 128 * 256
    bf16 = {o.name: o for o in layer_ops.moe_router_ops(model, par)}
    assert bf16["router_dgrad"].dtype_bytes == 2 and "router_input_fp32" not in bf16
    times = launch_runs(tmp_path, capsys, LAUNCH, {"bf16": "", "fp32": "--moe-router-dtype fp32"},
                        4)
    assert times["fp32"] > times["bf16"]
    assert "--moe-router-dtype fp32" in (tmp_path / "fp32" / "megatron_args.txt").read_text()
    local = megatron_input(LAUNCH + "--moe-router-dtype fp64", "a.txt", 4)
    assert ("a.txt: --moe-router-dtype fp64: the router's GEMM runs in fp64 (torch.mm), priced "
            "as a 16-bit one") in " ".join(local.warnings)
