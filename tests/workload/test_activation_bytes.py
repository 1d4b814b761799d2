"""A transformer layer's activation memory from the model's shape (Korthikanti et al. 2022,
section 4.1), as `pipesim generate` writes it into the header and the memory model reads it."""

from __future__ import annotations

import pytest

from simulator import simulate
from simulator.cli.main import main
from simulator.workload.activations import transformer_activation_bytes
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
    # the model layout splits rows: the last stage gets 14 of the 32 attention/MLP rows (3.5
    # layers, 4 rows each) and the head and loss rows, which keep nothing; 1F1B's last rank
    # holds one microbatch
    r = simulate(str(out), "1f1b")
    last = r.to_dict()["ranks"][-1]
    assert last["peak_memory_breakdown"]["activations"] == 14 * per_layer // 4
