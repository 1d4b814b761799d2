"""The header's ``grad_bytes_per_param:``: what `pipesim generate`'s gradient collectives carry
per parameter (fp32, 4 B), so a run counts the model's real parameters from them; the system's
``memory.grad_bytes_per_param`` wins over it, and without either a run assumes 2 (bf16)."""

from __future__ import annotations

import json

from simulator import simulate
from simulator.cli.main import main

# GPT, 2 layers, h = 64, 4 heads, s = 32, vocab 128 (a multiple of 128: no padding), tp = pp = 1
H, S, V = 64, 32, 128
EMBEDDING = V * H + S * H                    # word and learned position embeddings
LAYER = 12 * H * H + 13 * H                  # QKV, projection, MLP 4h (weights, biases), 2 LNs
HEAD = H * V + 2 * H                         # untied LM head, final LayerNorm
PARAMS = EMBEDDING + 2 * LAYER + HEAD        # 118,528
STASH = 34 * S * H                           # a layer's stash, bf16, flash attention (b = 1)
# its B's working memory (the header's b_transient_bytes): the gradients of the last dropout's
# input and of the MLP's hidden activation, fc2's weight and bias gradients before they are
# added to .grad, less the dropout mask freed
B_TRANSIENT = 2 * S * H + 2 * S * 4 * H + 2 * (H * 4 * H + H) - S * H
# one stage, the last: its loss keeps the fp32 softmax of its S x V logits (Megatron's
# vocab-parallel cross-entropy), with the stash
LOSS = 4 * S * V


def _generated(tmp_path) -> str:
    out = tmp_path / "gpt2l.txt"
    assert main(["generate", "--model", "gpt", "--layers", "2", "--hidden", str(H), "--heads",
                 "4", "--seq", str(S), "--micro-batch", "1", "--vocab", str(V), "-o",
                 str(out)]) == 0
    return str(out)


def _shape_note(result) -> str:
    return next(n for n in result.notes if n.startswith("activation memory from the model's"))


def _rank0(path: str, system: dict | None = None) -> dict:
    return simulate(path, "1f1b", system=system).to_dict()["ranks"][0]


def test_generate_writes_fp32_gradients_and_a_run_counts_the_models_real_parameters(tmp_path):
    path = _generated(tmp_path)
    header = open(path).readline()
    assert " grad_bytes_per_param: 4 layout: model" in header
    assert PARAMS == 118528
    r = _rank0(path)
    # 16 B a parameter (mixed-precision Adam), shown as 4 B weights, 4 B gradients, the rest
    assert r["static_memory_bytes"] == 16 * PARAMS == 1896448
    assert r["peak_memory_breakdown"] == {
        "weights": 4 * PARAMS, "gradients": 4 * PARAMS, "optimizer": 8 * PARAMS,
        "activations": 2 * STASH + LOSS, "transient": B_TRANSIENT, "runtime_buffers": 0}
    assert r["peak_memory_bytes"] == 16 * PARAMS + 2 * STASH + LOSS + B_TRANSIENT == 2103424


def test_the_systems_grad_bytes_per_param_wins_over_the_headers(tmp_path):
    path = _generated(tmp_path)
    r = simulate(path, "1f1b", system={"memory": {"grad_bytes_per_param": 2}})
    # 4 B per parameter on the wire / 2: twice the parameters, 16 B each
    assert r.to_dict()["ranks"][0]["static_memory_bytes"] == 16 * 2 * PARAMS
    message = _shape_note(r)
    assert ("; parameters: the rows' weight-gradient bytes / memory.grad_bytes_per_param 2 (the "
            "system's wins, over the header's grad_bytes_per_param 4)") in message


def test_without_the_key_a_run_assumes_bf16_gradients_and_says_so(tmp_path):
    path = _generated(tmp_path)
    text = open(path).read()
    bare = tmp_path / "bare.txt"
    bare.write_text(text.replace(" grad_bytes_per_param: 4", "", 1))
    r = simulate(str(bare), "1f1b")
    assert r.to_dict()["ranks"][0]["static_memory_bytes"] == 16 * 2 * PARAMS
    message = _shape_note(r)
    assert ("; parameters: the rows' weight-gradient bytes / 2 B a parameter, bf16 gradients "
            "assumed (the header has no grad_bytes_per_param:, which pipesim generate writes, "
            "and --system no memory.grad_bytes_per_param)") in message
    # the default is a warning too
    assert "params_assumed" in [w.code for w in r.warnings]
    # the header's 4 counts as a system's explicit 4 would: every number the same
    as_system = simulate(str(bare), "1f1b", system={"memory": {"grad_bytes_per_param": 4}})
    nums = lambda res: json.dumps(res.to_dict()["ranks"], sort_keys=True)   # noqa: E731
    assert nums(as_system) == nums(simulate(path, "1f1b"))


def test_a_bad_header_value_is_one_line_and_exit_2(tmp_path, capsys):
    path = _generated(tmp_path)
    bad = tmp_path / "bad.txt"
    text = open(path).read()
    bad.write_text(text.replace("grad_bytes_per_param: 4", "grad_bytes_per_param: 2.5", 1))
    col = text.index("grad_bytes_per_param: 4") + len("grad_bytes_per_param: ") + 1
    capsys.readouterr()
    assert main(["run", str(bad)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"pipesim: error: {bad}:1:{col}: grad_bytes_per_param: expected an integer "
                   ">= 1 and < 2^63 after 'grad_bytes_per_param:', found '2.5'"]
