"""Megatron-LM's expert grid (MoE parallel folding): a stage's TP x DP GPUs folded into the
experts' ETP x EP x expert-DP, its groups, what the generator writes for it, and the memory an
expert's sharded state takes."""

from __future__ import annotations

import itertools
import json

import pytest

from simulator.cli.main import main
from simulator.errors import ConfigError
from simulator.system import SystemConfig
from simulator.system.config import LinkConfig, TopologyConfig
from simulator.system.topology import Placement, expert_grid
from simulator.workload import CommGroup, Header
from simulator.workload.generator import ModelSpec, ParallelSpec, check, layer_rows
from simulator.workload.layer_ops import moe_expert_ops


def _system(order: str, per_node: int = 8) -> SystemConfig:
    return SystemConfig(topology=TopologyConfig(
        gpus_per_node=per_node, order=order,
        intra_node=LinkConfig(bandwidth_gbps=16.0, latency_ns=10.0),
        inter_node=LinkConfig(bandwidth_gbps=8.0, latency_ns=1000.0)))


def test_a_stage_folds_into_etp_ep_and_expert_dp_etp_fastest():
    # tp 2 x dp 4 = 8 GPUs a stage; experts unsplit (etp 1) over ep 4: expert-DP 2
    h = Header("HYBRID_TRANSFORMER", tp=2, pp=2, ep=4, etp=1, all_gpus=16)
    assert expert_grid(h) == (1, 4, 2)
    p = Placement.of(h, _system("tp-dp-pp"))
    assert p.group_gpus(CommGroup.TP, 1) == [8, 9]
    assert p.group_gpus(CommGroup.EP, 1) == [8, 9, 10, 11]
    assert p.group_gpus(CommGroup.DP_EP, 1) == [8, 12]
    assert p.group_gpus(CommGroup.ETP, 1) == [8]
    # the default etp (tp): EP over consecutive DP ranks, expert-DP what is left of DP
    d = Header("HYBRID_TRANSFORMER", tp=2, pp=2, ep=2, all_gpus=16)
    assert expert_grid(d) == (2, 2, 2)
    q = Placement.of(d, _system("tp-dp-pp"))
    assert q.group_gpus(CommGroup.EP, 0) == [0, 2]
    assert q.group_gpus(CommGroup.DP_EP, 0) == [0, 4]
    assert q.group_gpus(CommGroup.ETP, 0) == q.group_gpus(CommGroup.TP, 0) == [0, 1]


def test_a_grid_that_does_not_divide_the_stage_runs_the_experts_as_the_dense_layers():
    h = Header("HYBRID_TRANSFORMER", tp=2, pp=2, ep=3, all_gpus=16)
    assert expert_grid(h) == (2, 1, 4)


def _grid_cases():
    for tp, dp, pp, ep, etp, order in itertools.product(
            (1, 2, 4), (1, 2, 4, 8), (1, 2), (1, 2, 4, 8), (1, 2, 4), ("tp-dp-pp", "tp-pp-dp")):
        stage = tp * dp
        if stage % (ep * etp) or (order == "tp-pp-dp" and pp > 1 and ep * etp != tp):
            continue      # Megatron-LM refuses both (parallel_state.initialize_model_parallel)
        yield tp, dp, pp, ep, etp, order


@pytest.mark.launch
def test_the_expert_groups_are_megatron_cores_own():
    """Every group of replica 0 on every stage is the one megatron-core's RankGenerator builds
    for the expert grid (order tp-ep-dp-pp, or tp-ep-pp-dp with the tp-pp-dp placement)."""
    from megatron.core.parallel_state import RankGenerator

    cases = 0
    for tp, dp, pp, ep, etp, order in _grid_cases():
        h = Header("HYBRID_TRANSFORMER", tp=tp, pp=pp, ep=ep, etp=etp, all_gpus=tp * dp * pp)
        p = Placement.of(h, _system(order, 4))
        edp = tp * dp // (ep * etp)
        gen = RankGenerator(tp=etp, ep=ep, dp=edp, pp=pp, cp=1,
                            order="tp-ep-pp-dp" if order == "tp-pp-dp" else "tp-ep-dp-pp")
        dense = RankGenerator(tp=tp, ep=1, dp=dp, pp=pp, cp=1,
                              order="tp-pp-dp" if order == "tp-pp-dp" else "tp-dp-pp")
        for rank in range(pp):
            first = p.group_gpus(CommGroup.TP, rank)[0]
            assert first == p.expert_gpu(rank)       # replica 0's stage starts both grids
            for group, name in ((CommGroup.EP, "ep"), (CommGroup.ETP, "tp"),
                                (CommGroup.DP_EP, "dp")):
                want = next(g for g in gen.get_ranks(name) if first in g)
                assert p.group_gpus(group, rank) == want, (tp, dp, pp, ep, etp, order, group)
                assert p.group_spans_nodes(group, rank) == p.spans_nodes(want)
            assert p.group_gpus(CommGroup.DP, rank) == next(
                g for g in dense.get_ranks("dp") if first in g)
        cases += 1
    assert cases > 100


def _moe(tp: int, etp: int, ep: int, dp: int):
    model = ModelSpec("moe", layers=2, hidden=256, heads=4, seq=256, micro_batch=1, ffn=512,
                      vocab=1024, experts=4, topk=2)
    return model, ParallelSpec(tp=tp, pp=1, vpp=1, ga=1, dp=dp, ep=ep, etp=etp)


def test_split_experts_gather_their_tokens_over_etp_and_scatter_the_outputs_back():
    """tp 2 with sequence parallelism: each rank routes b·s/T = 128 tokens, k = 2 copies of h =
    256 bf16 channels (131072 B an all-to-all); at etp 2 the received tokens are all-gathered
    over the 2 ranks (262144 B) and the outputs reduce-scattered back (its backward the
    mirror), and each expert's FFN is f / ETP = 256 wide on 128 x 2 x ep 2 x etp 2 / 4 = 256
    tokens."""
    model, par = _moe(tp=2, etp=2, ep=2, dp=2)
    rows = {r.name: r for r in layer_rows(model, par)}
    assert rows["moe_dispatch"].fwd_comm == ("ALLTOALL_EP", 131072)
    assert rows["moe_dispatch_gather"].fwd_comm == ("ALLGATHER_ETP", 262144)
    assert rows["moe_dispatch_gather"].ig_comm == ("REDUCESCATTER_ETP", 262144)
    assert rows["moe_combine_scatter"].fwd_comm == ("REDUCESCATTER_ETP", 262144)
    names = [r.name for r in layer_rows(model, par)]
    assert names.index("moe_dispatch") < names.index("moe_dispatch_gather") \
        < names.index("moe_experts") < names.index("moe_combine_scatter") \
        < names.index("moe_combine")
    # the rank's 2 experts' parameters: 3·h·f / ETP each, reduced over the expert-DP group
    assert rows["moe_experts"].params == 2 * 3 * 256 * 512 // 2
    assert rows["moe_experts"].wg_comm == ("ALLREDUCE_DP_EP", 4 * 2 * 3 * 256 * 512 // 2)
    up = next(op for op in moe_expert_ops(model, par) if op.name == "expert_up")
    assert (up.m, up.n, up.k, up.batch) == (256, 2 * 512 // 2, 256, 2)
    # unsplit experts (etp 1) at tp 2: no gather; each expert sees 128 x 2 x 4 / 4 tokens
    model, par = _moe(tp=2, etp=1, ep=4, dp=2)
    rows = layer_rows(model, par)
    assert not [r for r in rows if r.name.startswith(("moe_dispatch_gather", "moe_combine_s"))]
    up = next(op for op in moe_expert_ops(model, par) if op.name == "expert_up")
    assert (up.m, up.n, up.batch) == (256, 1024, 1)


@pytest.mark.parametrize("tp, etp, ep, dp, arch, message", [
    (2, 2, 4, 2, "moe", "--ep 4: expected a divisor of --experts 4 whose product with --etp 2 "
     "divides a stage's --tp 2 x --dp 2 = 4 GPUs (Megatron-LM's expert grid)"),
    (1, 3, 1, 3, "moe", "--ffn 512: expected a multiple of the experts' tensor parallelism 3"),
    (2, 1, 1, 1, "llama", "--experts/--ep/--etp/--shared-ffn: only the moe model has experts"),
])
def test_the_generator_refuses_a_grid_megatron_refuses(tp, etp, ep, dp, arch, message):
    model, par = _moe(tp=tp, etp=etp, ep=ep, dp=dp)
    if arch != "moe":
        model = ModelSpec(arch, layers=2, hidden=256, heads=4, seq=256, micro_batch=1)
    with pytest.raises(ConfigError) as err:
        check(model, par, "model")
    assert str(err.value) == message


LAUNCH = ("--num-layers 4 --hidden-size 256 --num-attention-heads 4 --ffn-hidden-size 512 "
          "--swiglu --normalization RMSNorm --untie-embeddings-and-output-weights "
          "--disable-bias-linear --position-embedding-type rope --vocab-size 1024 "
          "--num-experts 4 --moe-router-topk 2 --moe-token-dispatcher-type alltoall "
          "--moe-grouped-gemm --pipeline-model-parallel-size 4 --seq-length 256 "
          "--micro-batch-size 1 --global-batch-size 16 --bf16 --use-distributed-optimizer "
          "--use-flash-attn ")


def _run(tmp_path, capsys, args: str, *more: str):
    path = tmp_path / "args.txt"
    path.write_text(LAUNCH + args)
    out = tmp_path / "r.json"
    code = main(["run", "--megatron-args", str(path), "--engine", "evaluator", "--json",
                 str(out), *more])
    err = capsys.readouterr().err
    return code, (json.loads(out.read_text()) if code == 0 else None), err


def test_an_experts_optimizer_state_is_sharded_over_its_expert_data_parallel_group(
        tmp_path, capsys):
    """32 GPUs, pp 4: a stage of 8 data-parallel ranks folded into ep 4 x expert-DP 2. Rank 1's
    one layer holds 3h² + h (QKV, input norm) + h² (projection) + hE + h (router, pre-MLP norm)
    = 263680 dense parameters and one expert's 3·h·f = 393216: bf16 weights and fp32 main
    gradients of both, the 12 B of Adam's fp32 state and master copy sharded over 8 ranks for
    the dense ones and over the 2 expert-DP ranks for the expert's (Megatron-LM's
    distributed optimizer shards an expert's over its expert data-parallel group)."""
    code, d, err = _run(tmp_path, capsys, "--expert-model-parallel-size 4", "--gpus", "32")
    assert code == 0, err
    parts = d["ranks"][1]["peak_memory_breakdown"]
    dense, expert = 263680, 393216
    assert parts["weights"] == 2 * (dense + expert)
    assert parts["gradients"] == 4 * (dense + expert)
    assert parts["optimizer"] == 12 * dense // 8 + 12 * expert // 2


def test_a_launch_reads_the_experts_tensor_parallelism(tmp_path, capsys):
    from simulator.workload.inputs.megatron_args import read_megatron_args

    path = tmp_path / "a.txt"
    path.write_text(LAUNCH + "--expert-model-parallel-size 4 --expert-tensor-parallel-size 2 "
                    "--tensor-model-parallel-size 2 --sequence-parallel")
    launch = read_megatron_args(str(path), 32).launch
    assert (launch.tp, launch.ep, launch.etp, launch.dp) == (2, 4, 0, 4)   # 0: as tp
    launch = read_megatron_args(str(path), None)
    # no world size: the fewest data-parallel ranks whose stage holds etp 2 x ep 4
    assert launch.launch.dp == 4
    assert any("pipesim assumes tp x pp x dp 4 = 32 GPUs (dp 4, the fewest the experts' grid "
               "allows)" in w for w in launch.warnings)


@pytest.mark.parametrize("args, gpus, message", [
    ("--expert-model-parallel-size 4 --expert-tensor-parallel-size 2", "16",
     "--expert-model-parallel-size: expected a size whose product with "
     "--expert-tensor-parallel-size 2 x --pipeline-model-parallel-size 4 divides the world's "
     "16 GPUs (Megatron-LM's expert grid), found 4"),
    ("--expert-model-parallel-size 2 --tensor-model-parallel-size 2", "16",
     "--sequence-parallel: expected with --num-experts at --tensor-model-parallel-size 2 "
     "(Megatron-LM's MoE layer refuses to train without it), found absent"),
    ("--expert-model-parallel-size 1 --expert-tensor-parallel-size 3", "12",
     "--expert-tensor-parallel-size: expected a divisor of the experts' FFN size 512, found 3"),
])
def test_a_launch_megatron_would_refuse_is_refused_in_one_line(tmp_path, capsys, args, gpus,
                                                               message):
    code, _, err = _run(tmp_path, capsys, args, "--gpus", gpus)
    assert code == 2
    assert err.strip() == f"pipesim: error: --megatron-args {tmp_path / 'args.txt'}: {message}"


def test_a_header_whose_grid_does_not_divide_the_stage_is_warned(tmp_path, capsys):
    text = ("HYBRID_TRANSFORMER_FWD_IN_BCKWD model_parallel_NPU_group: 1 ep: 3 pp: 1 ga: 1 "
            "all_gpus: 4 pp_comm: 1024\n2\n"
            "moe_dispatch -1 100 ALLTOALL_EP 4096 100 ALLTOALL_EP 4096 100 NONE 0 0\n"
            "moe_experts -1 100 NONE 0 100 NONE 0 100 ALLREDUCE_DP_EP 4096 0\n")
    path = tmp_path / "w.txt"
    path.write_text(text)
    out = tmp_path / "r.json"
    assert main(["run", str(path), "--json", str(out)]) == 0
    warned = {w["code"]: w["message"] for w in json.loads(out.read_text())["warnings"]}
    assert warned["expert_grid_folded"] == (
        f"{path}: etp 1 x ep 3 does not divide a stage's 4 GPUs (all_gpus 4 / pp 1); the "
        "experts' collectives run as the dense layers' (ETP 1, EP 1, expert-DP the stage's "
        "data-parallel ranks)")


def test_the_launch_writer_keeps_the_experts_tensor_parallelism(tmp_path, capsys):
    """--launch writes --expert-tensor-parallel-size where it is not Megatron-LM's default (tp)
    and the file reads back to the same expert grid."""
    from simulator.workload.inputs.megatron_args import read_megatron_args

    path = tmp_path / "args.txt"
    path.write_text(LAUNCH + "--expert-model-parallel-size 4 --expert-tensor-parallel-size 1 "
                    "--tensor-model-parallel-size 2 --sequence-parallel")
    assert main(["run", "--megatron-args", str(path), "--gpus", "32", "--launch",
                 str(tmp_path / "L")]) == 0
    capsys.readouterr()
    args = (tmp_path / "L" / "megatron_args.txt").read_text().split("\n")
    assert "--expert-tensor-parallel-size 1" in args
    assert "--expert-model-parallel-size 4" in args
    back = read_megatron_args(str(tmp_path / "L" / "megatron_args.txt"), 32).launch
    assert (back.tp, back.ep, back.etp) == (2, 4, 1)
    # at the default (etp = tp) the flag is left out
    path.write_text(LAUNCH + "--expert-model-parallel-size 2 --tensor-model-parallel-size 2 "
                    "--sequence-parallel")
    assert main(["run", "--megatron-args", str(path), "--gpus", "32", "--launch",
                 str(tmp_path / "M")]) == 0
    capsys.readouterr()
    assert "--expert-tensor-parallel-size" not in (tmp_path / "M" / "megatron_args.txt").read_text()
