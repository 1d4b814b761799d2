"""The kernel-level compute model: per-op times against hand-worked numbers, rows as the sum of
their ops, and the generated file carrying those sums."""

from __future__ import annotations

import pytest

from simulator.cli.main import main
from simulator.workload import layer_ops
from simulator.workload.generator import (ModelSpec, ParallelSpec, generate_rows, layer_rows,
                                          render)
from simulator.workload.gpus import GPUS
from simulator.workload.kernel_presets import KERNELS, kernel_preset
from simulator.workload.kernels import flash, gemm, memory, price, row_times
from simulator.workload.parser import parse_workload_text

A100 = kernel_preset("a100")
# one SM's share of the A100's sustained tensor rate: 312e3 FLOP/ns x 0.739 / 108 SMs
PER_SM = 312e3 * 0.739 / 108            # 2134.8889 FLOP/ns
HBM = 2.039e3 * 0.793                   # 1616.927 B/ns

# Korthikanti's 22B layer on one GPU of 8: b 4, s 2048, h 6144, 64 heads, f 4h, no sequence
# parallelism, no flash attention, fp16
KORT22 = ModelSpec("gpt", 48, 6144, 64, 2048, 4, ffn=24576, vocab=51200)
KORT22_PAR = ParallelSpec(tp=8, sequence_parallel=False, flash_attention=False,
                          precision="fp16")


def test_gemm_waves_and_tiles_on_a100():
    # QKV of the 22B layer: M = b*s = 8192 tokens, N = 3h/T = 2304, K = h = 6144.
    # 256x128 and 128x256 tiles: 32*18 = 64*9 = 576 tiles -> 6 waves of 108 (5.33), each tile
    # 2*256*128*6144 FLOPs: 12 of the 128x128 tile's time. 128x128: 64*18 = 1152 tiles -> 11
    # waves (10.67): the cheapest, cuBLAS's pick.
    p = price(gemm("qkv", "fwd", 8192, 2304, 6144), A100)
    assert (p.tile, p.tiles, p.waves, p.bound) == ((128, 128), 1152, 11, "math")
    assert p.flops == 2 * 8192 * 2304 * 6144 == 231_928_233_984
    assert p.ns == round(11 * 2 * 128 * 128 * 6144 / PER_SM) == 1_037_334
    # the last wave is 2/3 full: 3 % slower than the same FLOPs at the sustained rate
    assert p.ns / (p.flops / (PER_SM * 108)) == pytest.approx(1.0312, abs=1e-4)
    # operands and output in fp16: (M*K + K*N + M*N) * 2 bytes, far under the math time
    assert p.nbytes == (8192 * 6144 + 6144 * 2304 + 8192 * 2304) * 2 == 166_723_584


def test_a_tiny_gemm_costs_a_whole_tile():
    p = price(gemm("tiny", "fwd", 1, 1, 1), A100)
    assert (p.tiles, p.waves) == (1, 1)
    assert p.ns == round(2 * 128 * 128 / PER_SM) == 15


def test_a_skinny_batched_gemm_is_memory_bound():
    # QK^T of the 22B layer: 32 heads of 2048 x 2048 x 96: 4096 tiles of 256x128 -> 38 waves,
    # 111_985 ns of math; the bytes, 32 * (2*2048*96*2 + 2048^2*2) = 293_601_280, take longer
    p = price(gemm("scores", "fwd", 2048, 2048, 96, batch=32), A100)
    assert p.bound == "memory"
    assert p.nbytes == 32 * (2048 * 96 * 2 * 2 + 2048 * 2048 * 2) == 293_601_280
    assert p.ns == round(293_601_280 / HBM) == 181_580
    assert round(38 * 2 * 256 * 128 * 96 / PER_SM) == 111_985 < p.ns


def test_memory_bound_elementwise_bytes_and_time():
    # the 22B layer's input LayerNorm without sequence parallelism: every TP rank normalises
    # b*s*h = 50_331_648 fp16 elements, reading x and writing y: 4 bytes each
    ops = layer_ops.attention_column_ops(KORT22, KORT22_PAR)
    norm = next(o for o in ops if o.name == "input_norm")
    assert norm.nbytes == 2 * 2 * 4 * 2048 * 6144 == 201_326_592
    assert price(norm, A100).ns == round(201_326_592 / HBM) == 124_512
    # with sequence parallelism the rank normalises 1/T of the sequence
    sp = layer_ops.attention_column_ops(KORT22, ParallelSpec(
        tp=8, sequence_parallel=True, flash_attention=False, precision="fp16"))
    assert next(o for o in sp if o.name == "input_norm").nbytes == 201_326_592 // 8


def test_flash_attention_flops_and_time():
    # b 1, s 4096, 64 heads of 128 over T 8: 8 heads on the GPU; causal forward
    # 4 * s^2 * d * heads / 2 = 34_359_738_368 FLOPs at 73 % of 312 TFLOP/s (FlashAttention-2);
    # backward 2.5x the FLOPs at 63 %
    model = ModelSpec("llama", 1, 8192, 64, 4096, 1)
    ops = layer_ops._attention_core(model, ParallelSpec(tp=8))
    assert [(o.name, o.phase, o.flops) for o in ops] == [
        ("flash_attention", "fwd", 34_359_738_368),
        ("flash_attention_bwd", "ig", 85_899_345_920)]
    assert price(ops[0], A100).ns == round(34_359_738_368 / (312e3 * 0.73)) == 150_859
    assert price(ops[1], A100).ns == round(85_899_345_920 / (312e3 * 0.63)) == 437_013


def test_hopper_flash_attention_rate_follows_the_sequence_length():
    # Transformer Engine's causal cases on an H100 (cuDNN's fused attention): 33.2 % of 989 at
    # sequence 2048 and 52.0 % at 8192, as forward / backward fractions 0.437 / 0.303 and
    # 0.684 / 0.474; at 4096, halfway in log2(s): 0.5605 / 0.3885; outside, the nearer end
    h100 = kernel_preset("h100")
    assert h100.flash_fractions(1024) == h100.flash_fractions(2048) == (0.437, 0.303)
    assert h100.flash_fractions(4096) == pytest.approx((0.5605, 0.3885))
    assert h100.flash_fractions(8192) == h100.flash_fractions(32768) == (0.684, 0.474)
    model = ModelSpec("llama", 1, 8192, 64, 4096, 1)
    fwd, bwd = layer_ops._attention_core(model, ParallelSpec(tp=8))
    assert (fwd.seq, bwd.seq) == (4096, 4096)
    assert price(fwd, h100).ns == round(34_359_738_368 / (989e3 * 0.5605)) == 61_984
    assert price(bwd, h100).ns == round(85_899_345_920 / (989e3 * 0.3885)) == 223_564
    # the A100's FlashAttention-2 rates are one point: every sequence length
    assert A100.flash_fractions(512) == A100.flash_fractions(65536) == (0.73, 0.63)


def test_a_rows_sum_of_its_ops_22b_attention_row():
    # output projection M 8192, N h = 6144, K h/T = 768: 128x128 tiles, 64*48 = 3072 -> 29
    # waves; then bias + dropout + residual add on 50_331_648 elements: read x and the residual,
    # write y (3 x 2 bytes) and the 1-byte mask; each kernel waits the A100's 1.5 us gap
    ops = layer_ops.attention_row_ops(KORT22, KORT22_PAR)
    (fwd, ig, wg), priced = row_times(ops, A100)
    proj = round(29 * 2 * 128 * 128 * 768 / PER_SM)
    bda = round(7 * 50_331_648 / HBM)
    assert (proj, bda, A100.kernel_gap_ns) == (341_849, 217_896, 1500)
    assert fwd == proj + bda + 2 * 1500 == 562_745
    assert [p.op.name for p in priced if p.op.phase == "fwd"] == ["attention_proj",
                                                                  "bias_dropout_add"]
    for phase, col in (("ig", ig), ("wg", wg)):
        kernels = [p.ns for p in priced if p.op.phase == phase]
        assert col == sum(kernels) + 1500 * len(kernels)


def test_generated_rows_carry_the_sum_of_their_ops():
    model = KORT22
    text = render(model, KORT22_PAR, GPUS["a100"])
    wl = parse_workload_text(text, "k.txt")
    specs = generate_rows(model, KORT22_PAR)
    assert len(wl.layers) == len(specs)
    for row, spec in zip(wl.layers, specs):
        t, _ = row_times(spec.ops, A100)
        assert (row.fwd_compute, row.ig_compute, row.wg_compute) == t, row.name
    # every compute-bearing row has ops: the embedding, the head and the loss are timed now
    names = {r.name: r for r in wl.layers}
    assert names["embedding_layer"].fwd_compute > 0
    # the cross-entropy's passes run on the head's row (the loss rows hold its all-reduces)
    head = next(s for s in specs if s.name == "final_column")
    assert [o.name for o in head.ops][-2:] == ["cross_entropy", "cross_entropy_bwd"]
    assert all(names[f"cross_entropy{i}"].fwd_compute == 0 for i in (1, 2, 3))


def test_cross_entropy_bytes():
    # 22B: b*s*V/T = 8192 * 6400 logits on the GPU; fp32 passes: d + 36 bytes forward,
    # d + 12 backward (d = 2)
    ce = layer_ops.cross_entropy_ops(KORT22, KORT22_PAR, 51200)
    assert [(o.name, o.nbytes) for o in ce] == [("cross_entropy", 38 * 8192 * 6400),
                                                ("cross_entropy_bwd", 14 * 8192 * 6400)]


def test_selective_recompute_reruns_the_attention_core_in_the_backward():
    sel = ParallelSpec(tp=8, sequence_parallel=True, flash_attention=False, precision="fp16",
                       selective_recompute=True)
    base = ParallelSpec(tp=8, sequence_parallel=True, flash_attention=False, precision="fp16")
    (f1, i1, w1), _ = row_times(layer_ops.attention_column_ops(KORT22, sel), A100)
    (f0, i0, w0), _ = row_times(layer_ops.attention_column_ops(KORT22, base), A100)
    core = layer_ops._attention_core(KORT22, base)
    core_fwd = sum(price(o, A100).ns + A100.kernel_gap_ns for o in core if o.phase == "fwd")
    assert (f1, w1) == (f0, w0)
    assert i1 == i0 + core_fwd
    # and the scores are not kept: the activation stash loses Korthikanti's 5as^2b term
    from simulator.workload.generator import activation_bytes
    assert activation_bytes(KORT22, base) - activation_bytes(KORT22, sel) == \
        5 * 64 * 2048 * 2048 * 4 // 8


def test_efficiency_keeps_the_flat_model():
    model = KORT22
    rows = layer_rows(model, KORT22_PAR)
    wl = parse_workload_text(render(model, KORT22_PAR, GPUS["a100"], efficiency=0.5), "k.txt")
    col = wl.layers[1]
    assert col.fwd_compute == round(rows[0].fwd_flops / (312e3 * 0.5))


def test_every_preset_names_the_dense_peak_of_its_datasheet():
    assert {k: (p.sms, p.tensor_tflops, p.hbm_tbps) for k, p in KERNELS.items()} == {
        "a100": (108, 312.0, 2.039), "h100": (132, 989.0, 3.35), "h200": (132, 989.0, 4.8)}
    assert set(KERNELS) == set(GPUS)


@pytest.mark.parametrize("system, gpu", [("a100", "a100"), ("h100", "h100"),
                                          ("h100-cluster", "h100"), ("h200", "h200")])
def test_the_presets_optimizer_step_streams_at_the_kernel_models_elementwise_rate(system, gpu):
    # the step's passes are elementwise kernels: the system file's bandwidth is the datasheet's
    # HBM at the kernel preset's elementwise fraction, to the file's 0.1 GB/s
    from pathlib import Path

    from simulator.system.config import load_system

    path = Path(__file__).resolve().parents[2] / "configs" / "system" / f"{system}.yaml"
    k = kernel_preset(gpu)
    assert load_system(str(path)).memory.bandwidth_gbs == pytest.approx(
        k.hbm_tbps * 1e3 * k.hbm_fraction, abs=0.05)


def test_h100_prices_the_same_gemm_faster_than_a100():
    op = gemm("mlp_up", "fwd", 4096, 3584, 8192)
    assert price(op, kernel_preset("h100")).ns < price(op, A100).ns
    # the same die: h200 differs only where HBM bounds the op
    mem = memory("norm", "fwd", 10**9)
    assert price(mem, kernel_preset("h200")).ns < price(mem, kernel_preset("h100")).ns


def test_generate_cli_writes_the_kernel_model(tmp_path, capsys):
    out = tmp_path / "k.txt"
    args = ["generate", "--model", "gpt", "--layers", "2", "--hidden", "6144", "--heads", "64",
            "--seq", "2048", "--micro-batch", "4", "--tp", "8", "--ffn", "24576", "--vocab",
            "51200", "--no-sequence-parallel", "--no-flash-attention", "--precision", "fp16",
            "-o", str(out)]
    assert main(args) == 0
    wl = parse_workload_text(out.read_text(), "k.txt")
    assert wl.layers[2].name == "attention_row" and wl.layers[2].fwd_compute == 562_745


KORT22_ARGS = ["--model", "gpt", "--layers", "2", "--hidden", "6144", "--heads", "64", "--seq",
               "2048", "--micro-batch", "4", "--tp", "8", "--ffn", "24576", "--vocab", "51200",
               "--no-sequence-parallel", "--no-flash-attention", "--precision", "fp16"]


def test_inspect_shows_the_per_op_breakdown_and_checks_the_sums(tmp_path, capsys):
    wl, ops = tmp_path / "k.txt", tmp_path / "k.json"
    assert main(["generate", *KORT22_ARGS, "-o", str(wl), "--ops", str(ops)]) == 0
    capsys.readouterr()
    assert main(["inspect", str(wl), "--ops", str(ops)]) == 0
    out = capsys.readouterr().out
    assert ("    attention_row (x2): F 562745, IG 535852, WG 378712 (with 2 / 2 / 1 kernels' "
            "gaps of 1500 ns)") in out
    assert ("      fwd qkv                                   1037334 ns  math   8192x2304x6144, "
            "1152 tiles of 128x128 in 11 waves") in out
    assert "  every row's compute columns are the sum of its ops" in out
    # an edited row no longer holds the sum of its ops: named with its line
    text = wl.read_text().replace("\t562745\t", "\t490000\t", 1)
    wl.write_text(text)
    assert main(["inspect", str(wl), "--ops", str(ops)]) == 0
    out = capsys.readouterr().out
    assert ("  warning: line 5: row attention_row's compute (490000, 535852, 378712) is not the "
            "sum of its ops (562745, 535852, 378712)") in out


def test_ops_refusals_are_one_line(tmp_path, capsys):
    wl = tmp_path / "k.txt"
    assert main(["generate", *KORT22_ARGS, "-o", str(wl)]) == 0
    bad = tmp_path / "bad.json"
    bad.write_text("{}")
    capsys.readouterr()
    assert main(["inspect", str(wl), "--ops", str(bad)]) == 2
    assert capsys.readouterr().err == (
        f"pipesim: error: --ops: {bad} is not a per-op breakdown written by pipesim generate "
        "--ops (expected format 'pipesim-ops-1')\n")
    assert main(["generate", *KORT22_ARGS, "--efficiency", "0.5", "-o", str(wl), "--ops",
                 str(tmp_path / "o.json")]) == 2
    assert capsys.readouterr().err == (
        "pipesim: error: --ops: the per-op breakdown is the kernel model's; --efficiency times "
        "rows without kernels\n")


def test_a_layers_memory_bound_bytes_22b():
    # E = b*s*h = 50_331_648 hidden elements on every rank (no sequence parallelism), the
    # scores 32 heads x 2048^2 = 134_217_728, the GELU's 8192 x 3072 = 25_165_824; fp16.
    # forward: 2 norms 4E, 2 bias-dropout-adds 7E, softmax 4 and dropout 5 per score, GELU 4
    # backward: 2 norms 6E, 2 residual grad adds 6E, 2 bias-dropout-adds 5E, dropout 5 and
    # softmax 6 per score, GELU 6
    E, S, G = 50_331_648, 134_217_728, 25_165_824
    ops = [o for f in (layer_ops.attention_column_ops, layer_ops.attention_row_ops,
                       layer_ops.mlp_column_ops, layer_ops.mlp_row_ops)
           for o in f(KORT22, KORT22_PAR) if o.kind == "memory"]
    fwd = sum(o.nbytes for o in ops if o.phase == "fwd")
    ig = sum(o.nbytes for o in ops if o.phase == "ig")
    assert fwd == 22 * E + 9 * S + 4 * G == 2_415_919_104
    assert ig == 34 * E + 11 * S + 6 * G == 3_338_665_984
    assert not [o for o in ops if o.phase == "wg"]


@pytest.mark.parametrize("untie, expect", [(False, 51200 // 8 * 6144), (True, None)])
def test_generate_writes_the_tied_embeddings_sync(tmp_path, untie, expect):
    # Megatron-LM ties the LM head to the embedding unless told otherwise: the header carries
    # the table's parameters on one TP rank (vocab / T x h), all-reduced between the first and
    # the last stage each iteration
    args = tmp_path / "args.txt"
    args.write_text("--num-layers 4 --hidden-size 6144 --num-attention-heads 64 "
                    "--seq-length 2048 --max-position-embeddings 2048 --micro-batch-size 1 "
                    "--global-batch-size 8 --tensor-model-parallel-size 8 "
                    "--pipeline-model-parallel-size 2 --bf16 --vocab-size 51200"
                    + (" --untie-embeddings-and-output-weights" if untie else ""))
    out = tmp_path / "w.txt"
    assert main(["generate", "--megatron-args", str(args), "-o", str(out)]) == 0
    header = parse_workload_text(out.read_text(), "w.txt").header
    assert header.embedding_sync_params == (expect or 0)
    assert ("embedding_sync_params:" in out.read_text().split("\n", 1)[0]) == (not untie)


def test_inspect_names_a_flash_kernels_sequence(tmp_path, capsys):
    # its rate on a Hopper preset follows the sequence length: the breakdown says which
    wl, ops = tmp_path / "f.txt", tmp_path / "f.json"
    assert main(["generate", "--model", "llama", "--layers", "2", "--hidden", "8192", "--heads",
                 "64", "--seq", "4096", "--micro-batch", "1", "--tp", "8", "--gpu", "h100",
                 "-o", str(wl), "--ops", str(ops)]) == 0
    capsys.readouterr()
    assert main(["inspect", str(wl), "--ops", str(ops)]) == 0
    out = capsys.readouterr().out
    assert ("      fwd flash_attention                         61984 ns  math   "
            "34,359,738,368 FLOPs, sequence 4096") in out


def test_an_fp8_gemm_runs_at_the_fp8_peak_and_sustained_fraction():
    """Llama 3 8B's attention projection on an H100 in FP8: 8192 x 4096 x 4096, 1-byte operands,
    a bf16 output. 256x128 tiles: 32 x 32 = 1024 tiles in 8 waves of 132 (7.76); a tile's
    2·256·128·4096 FLOPs at 1979 TFLOP/s x 0.610 ([SUST-FP8]) over 132 SMs."""
    h100 = kernel_preset("h100")
    p = price(gemm("proj", "fwd", 8192, 4096, 4096, dtype_bytes=1, out_bytes=2), h100)
    assert (p.tile, p.tiles, p.waves, p.bound) == ((256, 128), 1024, 8, "math")
    assert p.ns == round(8 * 2 * 256 * 128 * 4096 / (1979e3 * 0.610 / 132)) == 234_816
    assert p.nbytes == (8192 * 4096 + 4096 * 4096) * 1 + 8192 * 4096 * 2
    # the same GEMM in bf16 is slower by the two peaks' and fractions' ratio
    bf16 = price(gemm("proj", "fwd", 8192, 4096, 4096), h100)
    assert bf16.ns == round(8 * 2 * 256 * 128 * 4096 / (989e3 * 0.689 / 132))
    with pytest.raises(ValueError, match="a100 has no tensor cores for 1-byte operands"):
        price(gemm("proj", "fwd", 8192, 4096, 4096, dtype_bytes=1), kernel_preset("a100"))


def test_an_fp8_linear_quantizes_its_input_and_its_output_gradient():
    """Transformer Engine's FP8 linear: the input read in bf16 and written twice in FP8 (4 B an
    element) before the forward GEMM, the output gradient likewise before the backward's; the
    three GEMMs on 1-byte operands, the weight gradient into the fp32 main gradient."""
    model = ModelSpec("llama", 2, 4096, 32, 8192, 1, ffn=14336, kv_heads=8)
    par = ParallelSpec(fp8="delayed")
    ops = layer_ops.attention_row_ops(model, par)
    tokens = 8192
    assert [(o.name, o.phase, o.kind) for o in ops[:5]] == [
        ("attention_proj_input_fp8", "fwd", "memory"), ("attention_proj", "fwd", "gemm"),
        ("attention_proj_grad_fp8", "ig", "memory"), ("attention_proj_dgrad", "ig", "gemm"),
        ("attention_proj_wgrad", "wg", "gemm")]
    assert ops[0].nbytes == ops[2].nbytes == 4 * tokens * 4096
    assert [(o.dtype_bytes, o.out_bytes) for o in ops[1:5] if o.kind == "gemm"] == [
        (1, 2), (1, 2), (1, 8)]
    # current scaling (tensorwise) reads each tensor once more for its amax: 6 B an element
    cs = layer_ops.attention_row_ops(model, ParallelSpec(fp8="tensorwise"))
    assert cs[0].nbytes == cs[2].nbytes == 6 * tokens * 4096
    with pytest.raises(Exception, match=r"--fp8-format: the a100 preset has no FP8 tensor "
                                        r"cores \(expected h100 or h200\)"):
        from simulator.workload.generator import render
        render(model, ParallelSpec(fp8="delayed"), GPUS["a100"])


# a Llama 3 8B layer on one GPU: b 1, s 4096, h 4096, 32 heads of 128, 8 KV groups, f 14336,
# bf16, flash attention (Megatron's defaults: no dropout in a llama layer)
LLAMA8 = ModelSpec("llama", 32, 4096, 32, 4096, 1, ffn=14336, vocab=128256, kv_heads=8)


def _memory_bytes(model, par):
    ops = [o for f in (layer_ops.attention_column_ops, layer_ops.attention_row_ops,
                       layer_ops.mlp_column_ops, layer_ops.mlp_row_ops)
           for o in f(model, par) if o.kind == "memory"]
    return ({p: sum(o.nbytes for o in ops if o.phase == p) for p in ("fwd", "ig", "wg")},
            [o.name for o in ops])


def test_a_llama_layers_memory_bound_bytes_megatron():
    # E = s*h = 16_777_216 hidden elements, Q 4096 and K 1024 wide (16_777_216 and 4_194_304
    # elements), the SwiGLU's F = s*f = 58_720_256; bf16 (2 B).
    # forward: 2 norms 2·4E, 2 residual adds 2·6E, RoPE read + write 4 B of Q and of K, SwiGLU
    # 6 B per f (reads the 2f input, writes f); backward: 2 norms and 2 residual gradient adds
    # 4·6E, RoPE 4 B of Q and K, SwiGLU 10 B per f
    E, Q, K, F = 16_777_216, 16_777_216, 4_194_304, 58_720_256
    got, names = _memory_bytes(LLAMA8, ParallelSpec())
    assert got == {"fwd": 20 * E + 4 * (Q + K) + 6 * F, "ig": 24 * E + 4 * (Q + K) + 10 * F,
                   "wg": 0}
    assert [n for n in names if n.startswith("rope")] == [
        "rope_q", "rope_q_bwd", "rope_k", "rope_k_bwd"]


def test_a_llama_layers_memory_bound_bytes_torchtitan():
    # torchtitan's eager modules (layer_ops): RoPE in complex fp32, for Q and for K a cast up
    # (2 + 4 B), the rotation (4 + 4) and a cast back (4 + 2), 20 B each way; SwiGLU as silu
    # (2 + 2 B per f) and the product (4 + 2), backward the product's two gradients (2 x 6) and
    # silu's (4 + 2); the input gradients of wq, wk, wv added twice and of w1, w3 once, in
    # place (read 4, write 2 B per element of E)
    E, Q, K, F = 16_777_216, 16_777_216, 4_194_304, 58_720_256
    got, names = _memory_bytes(LLAMA8, ParallelSpec(runtime="torchtitan"))
    assert got == {"fwd": 20 * E + 20 * (Q + K) + 10 * F,
                   "ig": 24 * E + 20 * (Q + K) + 18 * F + 3 * 6 * E, "wg": 0}
    assert [n for n in names if n.startswith("rope_q")] == [
        "rope_q_to_fp32", "rope_q_rotate", "rope_q_to_16bit", "rope_q_to_fp32_bwd",
        "rope_q_rotate_bwd", "rope_q_to_16bit_bwd"]


def test_torchtitans_llama_layer_runs_each_projection_as_its_own_gemm():
    par = ParallelSpec(runtime="torchtitan")
    gemms = [(o.name, o.m, o.n, o.k) for f in (layer_ops.attention_column_ops,
                                               layer_ops.mlp_column_ops)
             for o in f(LLAMA8, par) if o.kind == "gemm" and o.phase == "fwd"]
    assert gemms == [("wq", 4096, 4096, 4096), ("wk", 4096, 1024, 4096),
                     ("wv", 4096, 1024, 4096), ("w1", 4096, 14336, 4096),
                     ("w3", 4096, 14336, 4096)]
    # Megatron-LM fuses them: one QKV (4096 + 2 x 1024 wide) and one up projection (2f)
    fused = [(o.name, o.n) for f in (layer_ops.attention_column_ops, layer_ops.mlp_column_ops)
             for o in f(LLAMA8, ParallelSpec()) if o.kind == "gemm" and o.phase == "fwd"]
    assert fused == [("qkv", 6144), ("mlp_up", 28672)]


def test_a_gpt_layer_has_no_rope_and_an_fp32_llama_layer_no_casts():
    assert not [o for o in layer_ops.attention_column_ops(KORT22, KORT22_PAR)
                if o.name.startswith("rope")]
    ops = layer_ops.attention_column_ops(LLAMA8, ParallelSpec(runtime="torchtitan",
                                                              precision="fp32"))
    assert [(o.name, o.nbytes) for o in ops if o.name.startswith("rope")] == [
        ("rope_q_rotate", 8 * 16_777_216), ("rope_q_rotate_bwd", 8 * 16_777_216),
        ("rope_k_rotate", 8 * 4_194_304), ("rope_k_rotate_bwd", 8 * 4_194_304)]


def test_without_gradient_accumulation_fusion_each_weight_gradient_is_added_into_main_grad():
    """Megatron's --no-gradient-accumulation-fusion: the weight-gradient GEMM writes its bf16
    gradient (2 B an element, not the fused fp32 accumulation's 8), and the DDP hook's
    main_grad.add_ reads it and the fp32 main gradient and writes the latter: 2 + 8 = 10 B a
    weight. Llama 3 8B's attention projection (4096 x 4096 weights) on an H100."""
    model = ModelSpec("llama", 2, 4096, 32, 8192, 1, ffn=14336, kv_heads=8)
    fused = layer_ops.attention_row_ops(model, ParallelSpec())
    plain = layer_ops.attention_row_ops(model, ParallelSpec(grad_accumulation_fusion=False))
    assert [(o.name, o.phase) for o in plain if o.phase == "wg"] == [
        ("attention_proj_wgrad", "wg"), ("attention_proj_main_grad_add", "wg")]
    assert [o.out_bytes for o in fused if o.name == "attention_proj_wgrad"] == [8]
    assert [o.out_bytes for o in plain if o.name == "attention_proj_wgrad"] == [2]
    add = next(o for o in plain if o.name == "attention_proj_main_grad_add")
    assert add.nbytes == 10 * 4096 * 4096
    # 167,772,160 B at the H100's 3.35 TB/s x 0.793 elementwise rate
    assert price(add, kernel_preset("h100")).ns == round(10 * 4096 * 4096 / (3.35e3 * 0.793))
    # the grouped experts' gradients likewise: each of the rank's experts' weights
    moe = ModelSpec("moe", 2, 4096, 32, 8192, 1, ffn=14336, kv_heads=8, experts=8, topk=2)
    ops = layer_ops.moe_expert_ops(moe, ParallelSpec(ep=2, grad_accumulation_fusion=False))
    adds = {o.name: o.nbytes for o in ops if o.name.endswith("_main_grad_add")}
    assert adds == {"expert_up_main_grad_add": 10 * 4 * 4096 * 2 * 14336,
                    "expert_down_main_grad_add": 10 * 4 * 14336 * 4096}
    # 16-bit main gradients (--fp16 without --accumulate-allreduce-grads-in-fp32, as Megatron-LM
    # of 2021 accumulated into the fp16 .grad): the add reads 2 + 2 and writes 2, 6 B a weight;
    # fused, the GEMM reads and writes the 16-bit accumulator, 4 B
    half = ParallelSpec(grad_accumulation_fusion=False, main_grad_bytes=2)
    add = next(o for o in layer_ops.attention_row_ops(model, half)
               if o.name == "attention_proj_main_grad_add")
    assert add.nbytes == 6 * 4096 * 4096
    fused16 = layer_ops.attention_row_ops(model, ParallelSpec(main_grad_bytes=2))
    assert [o.out_bytes for o in fused16 if o.name == "attention_proj_wgrad"] == [4]


@pytest.mark.parametrize("percent, fwd, bwd", ((1.0, 12, 14), (0.5, 7, 12)))
def test_unfused_rope_bytes(percent, fwd, bwd):
    """--no-rope-fusion on a Llama 3 8B layer (4096 tokens, 32 query heads and 8 KV heads of
    128): per element of Q or K, in units of d = 2 B, forward t·cos (2r), the negated half (r),
    rotate_half's concatenation (2r), ·sin (2r), the sum (3r), the pass-through's
    concatenation (2); backward the products' gradients (2r each), the negation's (r), split's
    concatenation (2r), the branches' sum (3r), the slices' backward (1 with every channel
    rotated: the empty pass-through's zeros; else 4) and their sum (3)."""
    par = ParallelSpec(rope_fusion=False, rotary_percent=percent)
    ops = layer_ops._rope(LLAMA8, par)
    q, k = 4096 * 32 * 128, 4096 * 8 * 128
    assert sum(o.nbytes for o in ops if o.phase == "fwd") == 2 * fwd * (q + k)
    assert sum(o.nbytes for o in ops if o.phase == "ig") == 2 * bwd * (q + k)
    fused = layer_ops._rope(LLAMA8, ParallelSpec(rotary_percent=percent))
    assert [o.nbytes for o in fused] == [4 * q, 4 * q, 4 * k, 4 * k]


@pytest.mark.launch
@pytest.mark.parametrize("percent", (1.0, 0.5))
def test_unfused_rope_bytes_are_megatrons_ops_as_torch_runs_them(percent):
    """megatron-core's own _apply_rotary_pos_emb_bshd forward and backward under a
    TorchDispatchMode: each op's tensors of Q's size read and written (a slice's backward also
    zero-fills its whole output before the copy), against layer_ops' count."""
    torch = pytest.importorskip("torch")
    pytest.importorskip("megatron.core")
    from torch.utils._python_dispatch import TorchDispatchMode
    from torch.utils._pytree import tree_flatten

    from megatron.core.models.common.embeddings.rope_utils import _apply_rotary_pos_emb_bshd

    views = {"aten.alias.default", "aten.slice.Tensor", "aten.split.Tensor",
             "aten.detach.default", "aten.view.default", "aten.ones_like.default"}

    class Bytes(TorchDispatchMode):
        def __init__(self, big: int):
            super().__init__()
            self.big, self.total = big, 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            if str(func) not in views:
                def size(xs):
                    return sum(x.numel() * x.element_size() for x in tree_flatten(xs)[0]
                               if isinstance(x, torch.Tensor) and x.numel() > self.big)
                read, written = size((args, kwargs)), size(out)
                if str(func) == "aten.slice_backward.default":
                    written += read      # the zero-filled output, then the copy into it
                self.total += read + written
            return out

    s, heads, hd = 64, 4, 32
    t = torch.randn(s, 1, heads, hd, dtype=torch.bfloat16, requires_grad=True)
    freqs = torch.randn(s, 1, 1, int(hd * percent))
    grad = torch.ones(s, 1, heads, hd, dtype=torch.bfloat16)
    with Bytes(freqs.numel()) as f:
        y = _apply_rotary_pos_emb_bshd(t, freqs)
    with Bytes(freqs.numel()) as b:
        y.backward(grad)
    model = ModelSpec("llama", 1, heads * hd, heads, s, 1, ffn=256, kv_heads=heads)
    ops = layer_ops._rope(model, ParallelSpec(rope_fusion=False, rotary_percent=percent))
    q = [o for o in ops if o.name.startswith("rope_q_")]
    assert (f.total, b.total) == (sum(o.nbytes for o in q if o.phase == "fwd"),
                                  sum(o.nbytes for o in q if o.phase == "ig"))
