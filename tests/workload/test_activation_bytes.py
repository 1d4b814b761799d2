"""A transformer layer's activation memory from the model's shape (Korthikanti et al. 2022,
section 4.1), as `pipesim generate` writes it into the header and the memory model reads it."""

from __future__ import annotations

import pytest

from simulator import simulate
from simulator.cli.main import main
from simulator.workload.activations import transformer_activation_bytes, \
    transformer_deferred_wgrad_bytes, transformer_transient_bytes
from simulator.workload.parser import load_workload

# GPT-3 175B, the paper's running example
S, B, H, A, T = 2048, 1, 12288, 96, 8


@pytest.mark.parametrize("sp, flash, closed_form", [
    # the paper's equations, per layer, 16-bit activations
    (False, False, S * B * H * (10 + 24 / T + 5 * A * S / (H * T))),   # tensor parallel
    (True, False, S * B * H * (34 + 5 * A * S / H) / T),               # + sequence parallel
    (False, True, S * B * H * (10 + 24 / T)),                          # + selective recompute
    (True, True, S * B * H * 34 / T),                                  # both
])
def test_the_papers_equations_at_an_mlp_of_4h(sp, flash, closed_form):
    assert transformer_activation_bytes(S, B, H, A, 4 * H, T, sp, flash) == closed_form


def test_the_mlp_width_counts_four_bytes_per_element_of_its_inner_activation():
    base = transformer_activation_bytes(S, B, H, A, 4 * H, 1)
    assert transformer_activation_bytes(S, B, H, A, 8 * H, 1) - base == 4 * S * B * 4 * H


def test_generate_writes_it_and_the_memory_model_stashes_it(tmp_path, capsys):
    out = tmp_path / "g.txt"
    assert main(["generate", "--model", "gpt", "--layers", "8", "--hidden", "1024", "--heads",
                 "16", "--seq", "1024", "--micro-batch", "2", "--tp", "2", "--pp", "2",
                 "--ga", "4", "-o", str(out)]) == 0
    header = load_workload(out, "model").header
    per_layer = transformer_activation_bytes(1024, 2, 1024, 16, 4096, 2, True, True)
    assert header.activation_bytes == per_layer == 34 * 1024 * 2 * 1024 // 2
    # with sequence parallelism and flash attention it is today's 17 x pp_comm
    assert per_layer == 17 * header.pp_comm
    assert main(["generate", "--model", "gpt", "--layers", "8", "--hidden", "1024", "--heads",
                 "16", "--seq", "1024", "--micro-batch", "2", "--tp", "2", "--pp", "2",
                 "--ga", "4", "--no-flash-attention", "--no-sequence-parallel",
                 "-o", str(tmp_path / "n.txt")]) == 0
    no_flash = load_workload(tmp_path / "n.txt", "model").header.activation_bytes
    assert no_flash == 1024 * 2 * 1024 * (10 + 24 // 2) + 5 * 16 * 1024 * 1024 * 2 // 2
    # the model layout splits whole layers: the last stage gets 4 of the 8 layers (16 of the 32
    # attention/MLP rows, 4 rows each) and the head and loss rows; 1F1B's last rank holds one
    # microbatch, and its loss keeps the fp32 softmax of the microbatch's 2 x 1,024 tokens over
    # its half of the vocabulary (50,257 padded to a multiple of 128 x 2: 50,432 / 2 = 25,216)
    assert header.loss_keeps_bytes == 4 * 2 * 1024 * 25_216
    r = simulate(str(out), "1f1b")
    last = r.to_dict()["ranks"][-1]
    assert last["peak_memory_breakdown"]["activations"] == 4 * per_layer + 4 * 2048 * 25_216


@pytest.mark.parametrize("sp, flash, closed_form", [
    # the same count with 4-byte activations; dropout masks stay 1 byte an element
    (False, False, S * B * H * (18 + 48 / T + 9 * A * S / (H * T))),
    (True, False, S * B * H * (66 + 9 * A * S / H) / T),
    (False, True, S * B * H * (18 + 48 / T)),
    (True, True, S * B * H * 66 / T),
])
def test_fp32_activations_count_four_bytes_and_one_byte_masks(sp, flash, closed_form):
    assert transformer_activation_bytes(S, B, H, A, 4 * H, T, sp, flash, 4) == closed_form


def test_generate_precision_fp32_doubles_the_activation_bytes_but_not_the_masks(tmp_path,
                                                                               capsys):
    args = ["generate", "--model", "gpt", "--layers", "4", "--hidden", "256", "--heads", "4",
            "--seq", "128", "--micro-batch", "1", "--pp", "2", "--ga", "4",
            "--no-flash-attention"]
    assert main(args + ["-o", str(tmp_path / "b.txt")]) == 0
    assert main(args + ["--precision", "fp32", "-o", str(tmp_path / "f.txt")]) == 0
    out = capsys.readouterr().out
    bf16 = load_workload(tmp_path / "b.txt", "model").header
    fp32 = load_workload(tmp_path / "f.txt", "model").header
    sbh, as2b = 128 * 256, 4 * 128 * 128
    assert bf16.activation_bytes == 34 * sbh + 5 * as2b
    assert fp32.activation_bytes == 66 * sbh + 9 * as2b == 2752512
    assert (bf16.pp_comm, fp32.pp_comm) == (2 * sbh, 4 * sbh)
    assert ("activation_bytes: 2752512 B per layer and microbatch (Korthikanti et al.: fp32 "
            "activations, 1-byte dropout masks, scores kept); split_backward_bytes: 1441792 B "
            "(the weights' output gradients a split backward's I keeps until its W on torch's "
            "runtime); deferred_wgrad_bytes: 2097152 B (what it keeps where its I frees the "
            "graph, as Megatron-LM's zero-bubble runtime: the linears' inputs and output "
            "gradients); working "
            "memory inside F / B / I / W: 524288 / 1672192 / 524288 / 1049600 B (PyTorch eager "
            "autograd, no fused kernels, gradients added to .grad); the last stage's loss keeps "
            "25755648 B until its backward and holds 0 / 0 B more in its F / B (Megatron-LM's "
            "cross-entropy over the fp32 logits)\n") in out
    # 128 tokens x 50,257 padded to 50,304, 4 B each: fp32 logits need no 16-bit copy
    assert (fp32.loss_keeps_bytes, fp32.loss_f_transient_bytes) == (4 * 128 * 50_304, 0)
    assert (bf16.loss_keeps_bytes, bf16.loss_f_transient_bytes,
            bf16.loss_b_transient_bytes) == (4 * 128 * 50_304, 2 * 128 * 50_304,
                                             2 * 128 * 50_304)
    assert (fp32.f_transient_bytes, fp32.b_transient_bytes, fp32.i_transient_bytes,
            fp32.w_transient_bytes) == (524288, 1672192, 524288, 1049600)
    # per token: the norms', the projection's and fc2's outputs (4h), QKV's (3h), fc1's (4h)
    assert fp32.split_backward_bytes == 11 * sbh * 4 == 2 * bf16.split_backward_bytes
    assert main(args + ["--precision", "fp8", "-o", str(tmp_path / "x.txt")]) == 2
    assert "--precision" in capsys.readouterr().err


def test_a_run_on_the_shape_names_where_its_stash_comes_from(tmp_path, capsys):
    out = tmp_path / "g.txt"
    assert main(["generate", "--model", "gpt", "--layers", "4", "--hidden", "256", "--heads",
                 "4", "--seq", "128", "--micro-batch", "1", "--pp", "2", "--ga", "4",
                 "--precision", "fp32", "-o", str(out)]) == 0
    d = simulate(str(out), "1f1b").to_dict()
    warnings = {w["code"]: w["message"] for w in d["warnings"]}
    # derived by a documented rule from what generate wrote: a note, not a warning
    assert "activation_from_shape" not in warnings
    assert [n for n in d["notes"] if n.startswith("activation memory from")] == [
        "activation memory from the model's shape: the header's activation_bytes 2162688 B per "
        "transformer layer and microbatch (Korthikanti et al.'s count for the precision, flash "
        "attention and sequence parallelism pipesim generate was given; dropout masks 1 B an "
        "element; a llama or moe layer: SwiGLU's input, K and V of the query groups, no "
        "dropout); working memory inside an action, the header's F / B / I / W transient bytes "
        "262144 / 1672192 / 262144 / 1049600 B per layer (PyTorch eager autograd without fused "
        "kernels, each new weight gradient added to .grad); a split backward's I frees the "
        "layer's stash and keeps the header's deferred_wgrad_bytes 2097152 B per layer until its "
        "W (the linears' inputs and output gradients: Megatron-LM's zero-bubble runtime; --p2p "
        "torch keeps the whole graph); the last stage's loss keeps the header's "
        "loss_keeps_bytes 25755648 B a microbatch until its backward and holds 0 / 0 B more in "
        "its F / B (the logits' fp32 copies of the cross-entropy); parameters: the rows' "
        "weight-gradient bytes / the header's grad_bytes_per_param 4 (memory.grad_bytes_per_param "
        "in --system would win) (memory.actions in --system replaces it; pipesim calibrate "
        "--memory fits them from a profiler trace with memory events)"]
    assert "activation_assumed" not in warnings


LAYER = ("attention_column", "attention_row", "mlp_column", "mlp_row")


def _two_layers(tmp_path, split: str) -> str:
    rows = [f"{name}\t-1\t1000\tNONE\t0\t1000\tNONE\t0\t1000\tNONE\t0\t0"
            for _ in range(2) for name in LAYER]
    path = tmp_path / "w.txt"
    path.write_text("HYBRID_TRANSFORMER_FWD_IN_BCKWD model_parallel_NPU_group: 1 ep: 1 pp: 2 "
                    f"vpp: 1 ga: 2 all_gpus: 2 pp_comm: 100 activation_bytes: 4000{split}\n"
                    f"{len(rows)}\n" + "\n".join(rows) + "\n")
    return str(path)


def test_a_split_backward_keeps_the_headers_bytes_less_its_sent_input_gradient(tmp_path):
    # ZB-H1, P = 2, M = 2, a layer per stage. Rank 0: 0F0 0F1 0I0 0W0 0I1 0W1: after 0I0 two
    # stashes and 0I0's 1000 B (a first stage sends no input gradient); rank 1: 1F0 1I0 1F1
    # 1I1 1W0 1W1: after 1I1 two stashes and two I's 1000 - 100 B (the input gradient, 100 B,
    # is its send's)
    with_key = simulate(_two_layers(tmp_path, " split_backward_bytes: 1000"), "zb-h1",
                        pp=2, microbatches=2).to_dict()["ranks"]
    assert [(r["peak_memory_bytes"], r["peak_memory_action"]) for r in with_key] == [
        (9000, "0I0"), (9800, "1I1")]
    without = simulate(_two_layers(tmp_path, ""), "zb-h1", pp=2, microbatches=2)
    assert [r["peak_memory_bytes"] for r in without.to_dict()["ranks"]] == [8000, 8000]
    assert "a split backward's I keeps nothing until its W (the header has no " \
        "split_backward_bytes:)" in _shape_note(without)
    # a key the shape needs and the header lacks is a default: a warning
    assert {w.code: w.message for w in without.warnings}["activation_shape_partial"] == (
        f"{without.workload.path}:1: the header gives activation_bytes but no "
        "split_backward_bytes: and no f/b/i/w_transient_bytes:; using 0 B for them (a split "
        "backward's I keeps nothing until its W; no working memory inside an action)")


def test_a_graph_freeing_split_backward_keeps_only_what_its_w_reads(tmp_path):
    # the same ZB-H1 run with deferred_wgrad_bytes: each I frees its 4000-B stash and keeps
    # 1000 B to its W (Megatron-LM's zero-bubble runtime). Rank 0: 0F0 0F1 (8000) 0I0 (5000)
    # 0W0 (4000) 0I1 (1000) 0W1; rank 1: 1F0 1I0 (1000) 1F1 (5000) 1I1 (2000) 1W0 1W1
    keys = " split_backward_bytes: 1000 deferred_wgrad_bytes: 1000"
    freed = simulate(_two_layers(tmp_path, keys), "zb-h1", pp=2, microbatches=2)
    assert [(r["peak_memory_bytes"], r["peak_memory_action"])
            for r in freed.to_dict()["ranks"]] == [(8000, "0F1"), (5000, "1F1")]
    assert ("a split backward's I frees the layer's stash and keeps the header's "
            "deferred_wgrad_bytes 1000 B per layer until its W (the linears' inputs and output "
            "gradients: Megatron-LM's zero-bubble runtime; --p2p torch keeps the whole graph)"
            in _shape_note(freed))
    # torch's runtime keeps the whole graph to the W: the key changes nothing there
    split_only = _two_layers(tmp_path, " split_backward_bytes: 1000")
    for p2p in ("torch", "torch-single"):
        a = simulate(split_only, "zb-h1", pp=2, microbatches=2, p2p=p2p).to_dict()["ranks"]
        b = simulate(_two_layers(tmp_path, keys), "zb-h1", pp=2, microbatches=2,
                     p2p=p2p).to_dict()["ranks"]
        assert [r["peak_memory_bytes"] for r in a] == [r["peak_memory_bytes"] for r in b]
    # 1F1B has no split backward: the key changes nothing either
    assert [r["peak_memory_bytes"] for r in simulate(
        _two_layers(tmp_path, keys), "1f1b", pp=2, microbatches=2).to_dict()["ranks"]] == [
        8000, 4000]


def test_what_a_graph_freeing_i_keeps_by_term():
    # s = 8, b = 1, h = 4, a GPT MLP of 16, fused QKV 12, fp16: outside the TP regions the two
    # norms' outputs and the gradients at the projection's and the last linear's outputs (4h),
    # inside them the projection's input (h), the last linear's (ffn) and the gradients at the
    # QKV's (12) and the first linear's (16) outputs
    assert transformer_deferred_wgrad_bytes(8, 1, 4, 12, 16, 16, 1, False) == (
        4 * 4 * 8 * 2 + (4 + 16 + 12 + 16) * 8 * 2) == 1024
    assert transformer_deferred_wgrad_bytes(8, 1, 4, 12, 16, 16, 2, False) == 256 + 384
    assert transformer_deferred_wgrad_bytes(8, 1, 4, 12, 16, 16, 2, True) == 512
    # a SwiGLU layer's first linear writes two ffn-wide outputs (the up and gate projections)
    assert transformer_deferred_wgrad_bytes(8, 1, 4, 12, 32, 16, 1, False) == 1024 + 16 * 8 * 2


def test_generate_writes_what_a_graph_freeing_i_keeps(tmp_path):
    out = tmp_path / "g.txt"
    assert main(["generate", "--model", "llama", "--layers", "4", "--hidden", "1024",
                 "--heads", "16", "--kv-heads", "4", "--ffn", "2816", "--seq", "512",
                 "--micro-batch", "2", "--tp", "2", "--pp", "2", "-o", str(out)]) == 0
    # QKV: 1024 + 2 x 4 x 64 = 1536; up and gate 2 x 2816; sequence parallel, TP 2, bf16
    qkv, up, ffn = 1536, 2 * 2816, 2816
    assert load_workload(out, "model").header.deferred_wgrad_bytes == (
        (4 * 1024 + 1024 + ffn + qkv + up) * 512 * 2 * 2 // 2)


def _shape_note(result) -> str:
    return next(n for n in result.notes if n.startswith("activation memory from the model's"))


# the harness's layer (benchmarks/memory): s = 128, b = 1, h = 256, a = 4, ffn = 4h, fp32
E, SCORES, MASK = 128 * 256 * 4, 4 * 128 * 128 * 4, 128 * 256


def test_a_layers_working_memory_by_term():
    f, b, i, w = transformer_transient_bytes(128, 1, 256, 4, 1024, flash_attention=False,
                                             dtype_bytes=4)
    # F: the scores before the softmax, the last linear's output and its dropout's copy
    assert f == SCORES + 2 * E == 524288
    # B: the gradients of the last dropout's input and of the MLP's hidden activation, fc2's
    # weight and bias gradients before they are added to .grad, less the dropout mask freed
    assert b == E + 4 * E + (256 * 1024 + 256) * 4 - MASK == 1672192
    # I: the gradients of the probabilities and of the scores; W: fc1's or fc2's weight gradient
    assert (i, w) == (2 * SCORES, (256 * 1024 + 256) * 4) == (524288, 1049600)
    # these are what torch's allocator gives for F and B to the byte, I 425996 and W 659456
    # (benchmarks/results/memory-2026-11-26-transformer/layer-transients.json)
    # flash attention never forms the scores; TP 2 with sequence parallelism halves E and the mask
    assert transformer_transient_bytes(128, 1, 256, 4, 1024, dtype_bytes=4) == (
        2 * E, b, 2 * E, w)
    assert transformer_transient_bytes(128, 1, 256, 4, 1024, tp=2, flash_attention=False,
                                       dtype_bytes=4) == (
        SCORES // 2 + E, E // 2 + 2 * E + (128 * 1024 + 256) * 4 - MASK // 2, SCORES,
        (128 * 1024 + 256) * 4)


TRANSIENTS = (" f_transient_bytes: 300 b_transient_bytes: 500 i_transient_bytes: 200 "
              "w_transient_bytes: 700")


def test_the_headers_transients_sit_on_the_higher_level_of_each_action(tmp_path):
    # 1F1B, P = 2, M = 2, a 4000-B stash per stage: rank 0's 0B0 starts from two stashes
    # (8000 + B's 500), rank 1's 1B0 from one (4000 + 500); F's 300 is below either
    plain = simulate(_two_layers(tmp_path, TRANSIENTS), "1f1b", pp=2, microbatches=2)
    assert [(r["peak_memory_bytes"], r["peak_memory_action"],
             r["peak_memory_breakdown"]["transient"]) for r in plain.to_dict()["ranks"]] == [
        (8500, "0B0", 500), (4500, "1B0", 500)]
    # ZB-H1 (the levels of the split-backward test above): each W starts from the highest level
    # (9000 and 9800), and its 700 tops the I's 200 there
    split = simulate(_two_layers(tmp_path, " split_backward_bytes: 1000" + TRANSIENTS), "zb-h1",
                     pp=2, microbatches=2)
    assert [(r["peak_memory_bytes"], r["peak_memory_action"])
            for r in split.to_dict()["ranks"]] == [(9700, "0W0"), (10500, "1W0")]
    # a measured W (memory.actions) replaces the header's: the I's 9000 + 200 is rank 0's peak
    system = {"memory": {"actions": {"*": {"W": {"transient": 100}}}}}
    fitted = simulate(_two_layers(tmp_path, " split_backward_bytes: 1000" + TRANSIENTS),
                      "zb-h1", system=system, pp=2, microbatches=2)
    assert [(r["peak_memory_bytes"], r["peak_memory_action"])
            for r in fitted.to_dict()["ranks"]][0] == (9200, "0I0")


def test_a_bad_transient_key_is_one_line_naming_file_column_and_key(tmp_path, capsys):
    path = _two_layers(tmp_path, " f_transient_bytes: -5")
    assert main(["run", path]) == 2
    column = open(path).readline().index("-5") + 1
    assert capsys.readouterr().err == (
        f"pipesim: error: {path}:1:{column}: f_transient_bytes: expected an integer >= 0 and "
        "< 2^63 after 'f_transient_bytes:', found '-5'\n")


def test_a_llama_layer_keeps_swiglus_input_gqa_kv_and_no_masks(tmp_path, capsys):
    """Llama 3 8B (h 4096, 32 heads, 8 K/V heads of 128, ffn 14336, no dropout), s 8192, b 1,
    TP 1, flash attention, bf16, per token in bytes: the two norms' inputs and the two linears'
    inputs they feed, 4 x 2h; Q 2h, K and V 2 x 2 x 1024 = h, the projection's input 2h; the
    up projection's 2 x 14336-wide output that SwiGLU keeps, 4 x 3.5h = 14h, and its 3.5h-wide
    output the last linear keeps, 7h: 34h in all (the gpt count of the same shape: 32h, with
    2h of masks, full-width K and V and GELU's 2 x ffn)."""
    s, h, f = 8192, 4096, 14336
    llama = transformer_activation_bytes(s, 1, h, 32, f, 1, False, True, gated=True,
                                         kv_width=2 * 8 * 128, dropout=False)
    assert llama == s * h * (8 + 2 + 1 + 2) + s * 2 * 3 * f == 34 * s * h
    assert transformer_activation_bytes(s, 1, h, 32, f, 1, False, True) == 32 * s * h
    out = tmp_path / "l.txt"
    assert main(["generate", "--model", "llama", "--layers", "2", "--hidden", "4096",
                 "--heads", "32", "--kv-heads", "8", "--ffn", "14336", "--seq", "8192",
                 "--micro-batch", "1", "--ga", "1", "-o", str(out)]) == 0
    assert load_workload(out, "model").header.activation_bytes == llama


def test_torchtitans_eager_swiglu_keeps_silus_output_too():
    """torchtitan's F.silu(w1(x)) * w3(x): silu keeps w1's output, the product silu's output and
    w3's, the last linear its input: 4 x ffn where Megatron's fused SwiGLU keeps 3 x ffn (its
    2 x ffn input and the output). The Llama 3 8B layer above: 34h + 7h = 41h a token."""
    from simulator.workload.generator import ModelSpec, ParallelSpec, activation_bytes

    s, h, f = 8192, 4096, 14336
    eager = transformer_activation_bytes(s, 1, h, 32, f, 1, False, True, gated=True,
                                         kv_width=2 * 8 * 128, dropout=False, eager=True)
    assert eager == 34 * s * h + 2 * s * f == 41 * s * h
    spec = ModelSpec("llama", 32, h, 32, s, 1, ffn=f, kv_heads=8)
    par = ParallelSpec(sequence_parallel=False)
    assert activation_bytes(spec, ParallelSpec(sequence_parallel=False,
                                               runtime="torchtitan")) == eager
    assert activation_bytes(spec, par) == 34 * s * h


def test_unfused_gqa_keeps_the_repeated_kv_and_the_softmax_output():
    """Without a fused kernel each K/V head is repeated for its group before the products,
    which keep the copies (full-width K and V), and without dropout the scores keep the
    softmax's output alone, 2 B an element; TP 2 with sequence parallelism splits it all."""
    s, b, h, a, f = 1024, 2, 2048, 16, 5632
    got = transformer_activation_bytes(s, b, h, a, f, 2, True, False, gated=True,
                                       kv_width=2 * 4 * 128, dropout=False)
    assert got == (8 * s * b * h + 2 * s * b * (2 * h + 2 * h) + 6 * s * b * f
                   + 2 * a * s * s * b) // 2


def test_torchtitans_op_sac_keeps_the_input_the_attention_and_every_other_gemm():
    """Llama 3 8B (h 4096, V heads 8 x 128, ffn 14336), s 8192, TP 1, bf16: the block's input
    h, wq's h, wv's 1024, the attention's h, w1's 14336 and w2's h: 31,744 elements a token,
    15.5·s·h bytes (34·s·h without checkpointing). With TP 8 and sequence parallelism the
    input, the tensor-parallel outputs and the two reduce-scatters' h/8 are split, w2's
    partial sum is whole."""
    from simulator.workload.activations import op_sac_activation_bytes

    s, h, f, v = 8192, 4096, 14336, 1024
    assert op_sac_activation_bytes(s, 1, h, f, v) == 2 * s * (4 * h + v + f) == 31 * s * h // 2
    assert op_sac_activation_bytes(s, 1, h, f, v, 8, True) == 2 * (
        s * (h + 2 * h + v + f + 2 * h) // 8 + s * h)


def test_op_sac_is_the_llama_layers_alone():
    from simulator.errors import ConfigError
    from simulator.workload.generator import ModelSpec, ParallelSpec, check

    with pytest.raises(ConfigError, match=r"^op-level selective checkpointing: expected the "
                       r"llama model without Megatron's selective recompute, found gpt$"):
        check(ModelSpec("gpt", 2, 256, 4, 128, 1), ParallelSpec(op_recompute=True), "model")


def test_fp8_linears_keep_their_inputs_in_one_byte():
    """Llama 3 8B at s 8192, TP 1, with Transformer Engine's FP8 linears: the norms' inputs
    stay bf16 (4h), their outputs the QKV and up projection keep in FP8 (2h); Q, K, V as the
    flash kernel keeps them (3h); the projection's input in the kernel's bf16 and its FP8 copy
    (3h); SwiGLU's 2·ffn-wide input in bf16 (4·3.5h) and the last linear's input in FP8 (3.5h):
    29.5·s·h bytes against 34·s·h."""
    s, h, f = 8192, 4096, 14336
    kw = dict(gated=True, kv_width=2048, dropout=False)
    assert transformer_activation_bytes(s, 1, h, 32, f, 1, False, True, fp8=True, **kw) == \
        s * (4 * h + 2 * h + 3 * h + 3 * h + 4 * f + f) == 59 * s * h // 2
    assert transformer_activation_bytes(s, 1, h, 32, f, 1, False, True, **kw) == 34 * s * h
