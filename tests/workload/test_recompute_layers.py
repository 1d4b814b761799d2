"""--recompute full in the model layout: whole transformer layers, as Megatron recomputes them."""

from __future__ import annotations

from simulator import simulate
from simulator.workload.generator import ModelSpec, ParallelSpec, render
from simulator.workload.gpus import GPUS
from simulator.workload.parser import parse_workload_text


def _generated():
    # 2 GPT layers of 4 rows (attention_column, attention_row, mlp_column, mlp_row), one GPU;
    # a small vocabulary, whose loss holds less in the backward than a layer does
    model = ModelSpec("gpt", 2, 1024, 16, 512, 1, vocab=1024)
    return parse_workload_text(render(model, ParallelSpec(), GPUS["a100"]), "g.txt")


def test_full_recompute_replays_each_layer_once_and_keeps_one_input_per_layer():
    wl = _generated()
    h = wl.header
    none = simulate(wl, "1f1b", pp=1, microbatches=1, recompute="none")
    full = simulate(wl, "1f1b", pp=1, microbatches=1, recompute="full")
    layers = [r for r in wl.layers if r.name.startswith(("attention", "mlp"))]
    assert len(layers) == 8
    # the 8 transformer rows' forwards run again; the embedding, the head and the loss do not
    assert full.makespan_ns - none.makespan_ns == sum(r.fwd_compute for r in layers)
    assert full.summary.layer_ops == none.summary.layer_ops + 8
    # stash: every layer keeps its activation_bytes without recompute; with it, each keeps its
    # input (pp_comm, one per layer, not one per row) and the backward holds one layer's stash
    # again while it recomputes it
    static = none.records.static_memory[0]
    assert h.loss_b_transient_bytes < h.b_transient_bytes
    assert none.summary.peak_memory_bytes - static == (
        2 * h.activation_bytes + h.loss_keeps_bytes + h.b_transient_bytes)
    assert full.summary.peak_memory_bytes - static == (
        2 * h.pp_comm + h.loss_keeps_bytes + h.activation_bytes + h.b_transient_bytes)
