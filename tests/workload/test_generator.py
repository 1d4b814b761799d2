"""Workload generator: FLOPs and bytes against hand calculations, round trips through the parser."""

from __future__ import annotations

from pathlib import Path

import pytest

from simulator import simulate
from simulator.cli.main import main
from simulator.errors import ConfigError
from simulator.system.collectives import collective_time_ns
from simulator.system.config import SystemConfig
from simulator.workload.generator import (ModelSpec, ParallelSpec, generate_rows, layer_rows,
                                          render)
from simulator.workload.gpus import GPUS, gpu_preset
from simulator.workload.model import CommGroup, CommType
from simulator.workload.parser import load_workload, parse_workload_text

REPO = Path(__file__).resolve().parents[2]
GPT3 = ["--model", "gpt", "--layers", "96", "--hidden", "12288", "--heads", "96", "--seq",
        "2048", "--micro-batch", "1", "--tp", "8", "--pp", "8", "--ga", "16"]

# GPT-3 175B, b=1, s=2048, h=12288, f=4h=49152, T=8, V=50257 padded to 51200 (multiple of
# 128*8). With --efficiency 0.5 (one fraction of the A100's peak for every op, the flat model):
# 312 TFLOPS x 0.5 = 156e12 FLOP/s, so t[ns] = round(FLOPs / 156000).
#
# attention_column (QKV h x 3h, plus the attention core, split over T):
#   GEMM  2*b*s*h*3h / T = 2*2048*12288*36864 / 8       = 231_928_233_984
#   core  4*b*s^2*h / T  = 4*2048*2048*12288 / 8        =  25_769_803_776
#   fwd = GEMM + core = 257_698_037_760 -> 1_651_910 ns (1_651_910.498)
#   ig  = GEMM + 2 core = 283_467_841_536 -> 1_817_102 ns (1_817_101.548)
#   wg  = GEMM = 231_928_233_984 -> 1_486_719 ns (1_486_719.449)
#   params/GPU = (h*3h + 3h)/T + 2h (LayerNorm) = 56_627_712 + 24_576 = 56_652_288
#   DP all-reduce of fp32 grads = 4 * 56_652_288 = 226_609_152 bytes
# attention_row (h x h): 2*2048*12288*12288/8 = 77_309_411_328 -> 495_573 ns (495_573.149)
#   params = h*h/T + h = 18_874_368 + 12_288 = 18_886_656 -> 75_546_624 bytes
# mlp_column (h x 4h): 2*2048*12288*49152/8 = 309_237_645_312 -> 1_982_293 ns (1_982_292.598)
#   params = (h*4h + 4h)/T + 2h = 75_503_616 + 24_576 = 75_528_192 -> 302_112_768 bytes
# mlp_row (4h x h): same FLOPs; params = 4h*h/T + h = 75_509_760 -> 302_039_040 bytes
# Sum of a layer's forward FLOPs = (24*b*s*h^2 + 4*b*s^2*h)/T = 953_482_739_712 (Megatron).
# TP collectives (sequence parallel): all-gather / reduce-scatter of 2*b*s*h = 50_331_648 bytes.
# final_column (h x V): 2*2048*12288*51200/8 = 322_122_547_200 -> 2_064_888 ns (2_064_888.123)
#   params = h*V/T + 2h = 78_643_200 + 24_576 = 78_667_776 -> 314_671_104 bytes
# embedding_layer: 0 FLOPs (0 ns in the flat model); reduce-scatter 50_331_648; params = V*h/T + s*h (positions)
#   = 78_643_200 + 25_165_824 = 103_809_024 -> 415_236_096 bytes
# pp_comm = 2*b*s*h / T = 6_291_456 bytes.
HAND = {  # name: (fwd ns, ig ns, wg ns, fwd comm, ig comm, wg bytes)
    "embedding_layer": (0, 0, 0, ("REDUCESCATTER", 50_331_648), ("NONE", 0), 415_236_096),
    "attention_column": (1_651_910, 1_817_102, 1_486_719, ("ALLGATHER", 50_331_648),
                         ("REDUCESCATTER", 50_331_648), 226_609_152),
    "attention_row": (495_573, 495_573, 495_573, ("REDUCESCATTER", 50_331_648),
                      ("ALLGATHER", 50_331_648), 75_546_624),
    "mlp_column": (1_982_293, 1_982_293, 1_982_293, ("ALLGATHER", 50_331_648),
                   ("REDUCESCATTER", 50_331_648), 302_112_768),
    "mlp_row": (1_982_293, 1_982_293, 1_982_293, ("REDUCESCATTER", 50_331_648),
                ("ALLGATHER", 50_331_648), 302_039_040),
    "final_column": (2_064_888, 2_064_888, 2_064_888, ("ALLGATHER", 50_331_648),
                     ("REDUCESCATTER", 50_331_648), 314_671_104),
}


def gpt3(layout: str = "model") -> tuple[ModelSpec, ParallelSpec]:
    return (ModelSpec("gpt", 96, 12288, 96, 2048, 1),
            ParallelSpec(tp=8, pp=8, ga=16))


def test_gpt3_layer_flops_match_megatron_hand_count():
    model, par = gpt3()
    rows = {r.name: r for r in layer_rows(model, par)}
    assert rows["attention_column"].fwd_flops == 257_698_037_760
    assert rows["attention_column"].ig_flops == 283_467_841_536
    assert rows["attention_column"].wg_flops == 231_928_233_984
    assert rows["attention_row"].fwd_flops == 77_309_411_328
    assert rows["mlp_column"].fwd_flops == rows["mlp_row"].fwd_flops == 309_237_645_312
    fwd = sum(r.fwd_flops for r in rows.values())
    assert fwd == (24 * 1 * 2048 * 12288**2 + 4 * 1 * 2048**2 * 12288) // 8 == 953_482_739_712
    total = sum(r.fwd_flops + r.ig_flops + r.wg_flops for r in rows.values())
    assert total == 3 * fwd   # forward + backward = 3 x forward


def test_gpt3_file_round_trips_through_the_parser(tmp_path):
    out = tmp_path / "gpt3.txt"
    assert main(["generate", *GPT3, "--efficiency", "0.5", "-o", str(out)]) == 0
    wl = load_workload(out)
    h = wl.header
    assert (wl.layout, h.tp, h.pp, h.vpp, h.ga, h.all_gpus, h.pp_comm) == (
        "model", 8, 8, 1, 16, 64, 6_291_456)
    assert h.defaults_used == ()
    # embedding, 96 x 4 layer rows, LM head, 3 cross-entropy rows
    assert len(wl.layers) == 1 + 96 * 4 + 1 + 3
    names = [r.name for r in wl.layers]
    assert names[:5] == ["embedding_layer", "attention_column", "attention_row", "mlp_column",
                         "mlp_row"]
    assert names[-4:] == ["final_column", "cross_entropy1", "cross_entropy2", "cross_entropy3"]
    for layer in wl.layers[:-3]:
        f, i, w, fc, ic, wb = HAND[layer.name]
        assert (layer.fwd_compute, layer.ig_compute, layer.wg_compute) == (f, i, w), layer.name
        assert (layer.fwd_comm.raw, layer.fwd_comm.bytes) == fc
        assert (layer.ig_comm.raw, layer.ig_comm.bytes) == ic
        assert (layer.wg_comm.type, layer.wg_comm.group, layer.wg_comm.bytes) == (
            CommType.ALLREDUCE, CommGroup.DP, wb)
    ce = wl.layers[-1]   # vocab-parallel cross entropy: 4 bytes x b x s
    assert (ce.fwd_comm.type, ce.fwd_comm.group, ce.fwd_comm.bytes) == (
        CommType.ALLREDUCE, CommGroup.TP, 8192)


def test_gpt3_aicb_layout_round_trips_as_a_recovered_stage(tmp_path):
    out = tmp_path / "gpt3-aicb.txt"
    assert main(["generate", *GPT3, "--layout", "aicb", "--efficiency", "0.5",
                 "-o", str(out)]) == 0
    wl = load_workload(out)
    st = wl.aicb
    assert (wl.layout, wl.header.vpp, st.repeats, st.layers_per_stage, st.model_layers) == (
        "aicb", 12, 16, 12, 96)
    assert [r.name for r in st.pre] == ["grad_gather", "grad_param_comm"]
    assert [r.name for r in st.post] == ["cross_entropy1", "cross_entropy2", "cross_entropy3",
                                         "optimizer1", "optimizer2", "optimizer3", "optimizer4"]
    # the stage's parameters on one GPU: 12 layers + embedding + LM head
    #   12 * (56_652_288 + 18_886_656 + 75_528_192 + 75_509_760) + 103_809_024 + 78_667_776
    #   = 2_901_399_552; all-gather bf16 params, reduce-scatter fp32 grads
    gather, comm = st.pre
    assert (gather.wg_comm.raw, gather.wg_comm.bytes) == ("ALLGATHER", 2 * 2_901_399_552)
    assert (comm.wg_comm.raw, comm.wg_comm.bytes) == ("REDUCESCATTER", 4 * 2_901_399_552)
    # rows inside the repeats carry no DP collective (the distributed optimizer's rows do)
    assert all(not r.wg_comm.active for r in st.model)
    assert [(r.name, r.fwd_compute) for r in st.model[:2]] == [
        ("embedding_layer", 0), ("attention_column", 1_651_910)]


def test_aicb_stage_forward_time_is_twelve_layers_of_rows():
    """An interior stage of the generated AICB file runs 12 layers: its forward action lasts
    12 x the sum over the 4 rows of (forward compute + its blocking TP collective)."""
    model, par = gpt3()
    wl = parse_workload_text(render(model, par, GPUS["a100"], "aicb"), "g.txt")
    from simulator.workload.aicb import detect_layout

    wl = detect_layout(wl)
    system = SystemConfig()
    per_layer = sum(r.fwd_compute + collective_time_ns(r.fwd_comm, wl.header, system,
                                                       forward=True)
                    for r in wl.aicb.layers[0])
    result = simulate(wl, "1f1b")
    f = next(a for a in result.records.actions if a.rank == 3 and a.kind == "F")
    assert f.end - f.start == pytest.approx(12 * per_layer)
    assert (result.schedule.pp, result.schedule.microbatches) == (8, 16)


def test_llama_swiglu_and_grouped_query_attention():
    # LLaMA-2-7B-like: h=4096, 32 heads, 8 KV heads, s=4096, b=1, T=2; f = 8h/3 rounded up to
    # 256 = 11008; QKV width q = h + 2 * 8 * (4096/32) = 6144
    model = ModelSpec("llama", 32, 4096, 32, 4096, 1, kv_heads=8)
    par = ParallelSpec(tp=2)
    assert model.ffn_size == 11008
    rows = {r.name: r for r in layer_rows(model, par)}
    assert rows["attention_column"].wg_flops == 2 * 4096 * 4096 * 6144 // 2
    assert rows["attention_column"].params == 4096 * 6144 // 2 + 4096           # + RMSNorm
    assert rows["attention_row"].params == 4096 * 4096 // 2                     # no bias
    assert rows["mlp_column"].fwd_flops == 2 * 2 * 4096 * 4096 * 11008 // 2    # gate and up
    assert rows["mlp_column"].params == 2 * 4096 * 11008 // 2 + 4096
    assert rows["mlp_row"].fwd_flops == 2 * 4096 * 11008 * 4096 // 2


def test_moe_expert_rows_and_groups(tmp_path):
    # Mixtral-like: h=4096, f=14336, 8 experts, top-2, EP 4 inside DP 4, T=2, s=4096, b=1
    args = ["generate", "--model", "moe", "--layers", "4", "--hidden", "4096", "--heads", "32",
            "--kv-heads", "8", "--ffn", "14336", "--seq", "4096", "--micro-batch", "1",
            "--tp", "2", "--dp", "4", "--experts", "8", "--topk", "2", "--ep", "4",
            "--efficiency", "0.5", "-o", str(tmp_path / "moe.txt")]
    assert main(args) == 0
    wl = load_workload(tmp_path / "moe.txt")
    assert (wl.header.ep, wl.header.all_gpus, wl.header.dp) == (4, 8, 4)
    rows = {r.name: r for r in wl.layers}
    # dispatch/combine: all-to-all over EP of 2*b*s*h*k/T = 2*4096*4096*2/2 bytes, both ways
    for name in ("moe_dispatch", "moe_combine"):
        r = rows[name]
        assert (r.fwd_comm.type, r.fwd_comm.group, r.fwd_comm.bytes) == (
            CommType.ALLTOALL, CommGroup.EP, 33_554_432)
        assert (r.ig_comm.group, r.ig_comm.bytes) == (CommGroup.EP, 33_554_432)
    # experts: k tokens per token through a SwiGLU FFN: 6*b*s*k*h*f/T FLOPs; params
    # (8/4 experts) * 3*h*f / T = 176_160_768, fp32 grads over the DP-over-EP group
    experts = rows["moe_experts"]
    assert experts.fwd_compute == GPUS["a100"].time_ns(6 * 4096 * 2 * 4096 * 14336 // 2, 0.5)
    assert (experts.wg_comm.group, experts.wg_comm.bytes) == (CommGroup.DP_EP, 4 * 176_160_768)
    assert rows["moe_router"].fwd_compute == GPUS["a100"].time_ns(2 * 4096 * 4096 * 8 // 2,
                                                                    0.5)


def test_without_sequence_parallelism_tp_all_reduces_and_full_pp_comm():
    model, _ = gpt3()
    par = ParallelSpec(tp=8, pp=8, ga=16, sequence_parallel=False)
    wl = parse_workload_text(render(model, par, GPUS["h100"], efficiency=0.4), "g.txt")
    assert wl.header.pp_comm == 2 * 2048 * 12288
    col, row = wl.layers[1], wl.layers[2]
    assert (col.fwd_comm.raw, col.ig_comm.raw, col.ig_comm.bytes) == ("NONE", "ALLREDUCE",
                                                                       50_331_648)
    assert (row.fwd_comm.raw, row.fwd_comm.bytes, row.ig_comm.raw) == ("ALLREDUCE", 50_331_648,
                                                                       "NONE")
    # the flat model at 0.4 of the H100's 989 TFLOPS
    assert col.fwd_compute == round(257_698_037_760 / (989e12 * 0.4) * 1e9)


def test_efficiency_override_and_gpu_presets():
    assert (GPUS["a100"].peak_bf16_tflops, GPUS["h100"].peak_bf16_tflops,
            GPUS["h200"].peak_bf16_tflops) == (312.0, 989.0, 989.0)
    assert GPUS["a100"].time_ns(312e12, efficiency=1.0) == 1_000_000_000
    with pytest.raises(ConfigError) as err:
        gpu_preset("v100")
    assert str(err.value) == "--gpu: expected one of a100, h100, h200, found 'v100'"


@pytest.mark.parametrize("kwargs, layout, message", [
    (dict(heads=100), "model", "--hidden 12288 is not a multiple of --heads 100"),
    (dict(heads=12, tp=16), "model", "--heads 12 is not a multiple of --tp 16"),
    (dict(layers=90), "aicb", "--layers 90 is not a multiple of --pp 8: the aicb layout writes "
                              "one stage of layers/pp layers"),
    (dict(vpp=2), "aicb", "--vpp: the aicb layout's vpp: holds layers per stage; give the "
                          "chunks per rank to `pipesim run --vpp` instead"),
    (dict(ep=2), "model", "--experts/--ep/--etp/--shared-ffn: only the moe model has experts"),
    (dict(pp=64, vpp=2), "model", "--pp 64 x --vpp 2 chunks exceed --layers 96"),
    (dict(ga=0), "model", "--ga: expected a positive integer, found 0"),
])
def test_refusals_name_the_option(kwargs, layout, message):
    m = dict(arch="gpt", layers=96, hidden=12288, heads=96, seq=2048, micro_batch=1)
    p = dict(tp=8, pp=8, ga=16)
    for k, v in kwargs.items():
        (m if k in m else p)[k] = v
    with pytest.raises(ConfigError) as err:
        generate_rows(ModelSpec(**m), ParallelSpec(**p), layout)
    assert str(err.value) == message


def test_cli_errors_are_one_line(tmp_path, capsys):
    rc = main(["generate", *GPT3, "--layout", "aicb", "--vpp", "2", "-o", str(tmp_path / "x")])
    assert rc == 2
    assert capsys.readouterr().err == (
        "pipesim: error: --vpp: the aicb layout's vpp: holds layers per stage; give the chunks "
        "per rank to `pipesim run --vpp` instead\n")
    assert main(["generate", *GPT3, "--efficiency", "1.5", "-o", "-"]) == 2
    assert capsys.readouterr().err == (
        "pipesim: error: --efficiency: expected a number in (0, 1], found 1.5\n")


def test_cli_writes_to_stdout(capsys):
    assert main(["generate", *GPT3, "-o", "-"]) == 0
    captured = capsys.readouterr()
    model, par = gpt3()
    filled = ("gpu=a100", "vpp=1", "dp=1", "precision=bf16", "vocab=50257")
    assert captured.out == render(model, par, GPUS["a100"], defaulted=filled)
    # the options that change numbers and were not given: said, and written in the header
    assert captured.err == (
        "warning: options not given, filled in (the file says generated_defaults: "
        "gpu=a100,vpp=1,dp=1,precision=bf16,vocab=50257; a run of it warns): --gpu a100, "
        "--vpp 1, --dp 1, --precision bf16, --vocab 50257\n")
    assert captured.out.split("\n", 1)[0].endswith(
        " layout: model generated_defaults: gpu=a100,vpp=1,dp=1,precision=bf16,vocab=50257")
    stated = ["--gpu", "a100", "--vpp", "1", "--dp", "1", "--precision", "bf16", "--vocab",
              "50257"]
    assert main(["generate", *GPT3, *stated, "-o", "-"]) == 0
    captured = capsys.readouterr()
    assert captured.err == "" and captured.out == render(model, par, GPUS["a100"])


# the bundled examples in workloads/generated/ are what these commands write
BUNDLED = {
    "gpt3-175b-tp8-pp8-ga16-a100.txt": GPT3,
    "gpt3-175b-tp8-pp8-ga16-a100-aicb.txt": GPT3 + ["--layout", "aicb"],
    "llama2-70b-tp8-pp4-vpp5-ga16-h100.txt": [
        "--model", "llama", "--layers", "80", "--hidden", "8192", "--heads", "64", "--kv-heads",
        "8", "--ffn", "28672", "--seq", "4096", "--micro-batch", "1", "--tp", "8", "--pp", "4",
        "--vpp", "5", "--ga", "16", "--dp", "2", "--gpu", "h100"],
    "mixtral-8x7b-tp2-pp4-ep8-ga8-h200-aicb.txt": [
        "--model", "moe", "--layers", "32", "--hidden", "4096", "--heads", "32", "--kv-heads",
        "8", "--ffn", "14336", "--experts", "8", "--topk", "2", "--ep", "8", "--dp", "8",
        "--seq", "4096", "--micro-batch", "1", "--tp", "2", "--pp", "4", "--ga", "8",
        "--gpu", "h200", "--layout", "aicb"],
}


@pytest.mark.parametrize("name", sorted(BUNDLED))
def test_bundled_examples_are_reproducible_and_simulate(name, tmp_path):
    bundled = REPO / "workloads" / "generated" / name
    out = tmp_path / name
    assert main(["generate", *BUNDLED[name], "-o", str(out)]) == 0
    assert bundled.read_text() == out.read_text()
    assert name in (REPO / "workloads" / "generated" / "README.md").read_text()
    wl = load_workload(bundled)
    assert wl.layout == ("aicb" if name.endswith("-aicb.txt") else "model")
    result = simulate(wl)
    assert result.makespan_ns > 0
