"""What the last stage's loss keeps and holds (the header's ``loss_keeps_bytes:``,
``loss_f_transient_bytes:``, ``loss_b_transient_bytes:``, which `pipesim generate` writes from
the model's shape and the runtime whose cross-entropy runs): worked by hand per logit, and
held by the memory model on the last stage only."""

from __future__ import annotations

import pytest

from simulator import simulate
from simulator.engine.memory import build_memory_model
from simulator.schedules import registry
from simulator.system.config import SystemConfig
from simulator.workload.activations import loss_memory_bytes
from simulator.workload.generator import ModelSpec, ParallelSpec, render
from simulator.workload.gpus import GPUS
from simulator.workload.parser import parse_workload_text
from simulator.workload.partition import partition


@pytest.mark.parametrize("runtime, dtype, per_logit", [
    # Megatron-LM: the fp32 softmax kept (4); the 16-bit logits beside their fp32 copy (2); the
    # gradient cast back to 16 bits (2); fp32 logits are worked on in place
    ("megatron", 2, (4, 2, 2)), ("megatron", 4, (4, 0, 0)),
    # torchtitan: log_softmax's fp32 output kept (4); the 16-bit logits and their fp32 copy
    # (2 + 4); nll_loss's and log_softmax's fp32 gradients together (8)
    ("torchtitan", 2, (4, 6, 8)), ("torchtitan", 4, (4, 4, 8)),
])
def test_each_runtimes_loss_per_logit(runtime, dtype, per_logit):
    assert loss_memory_bytes(1000, dtype, runtime) == tuple(1000 * n for n in per_logit)


def _header(tp: int = 1, pp: int = 1, loss: str = "megatron", vocab: int = 50000):
    # a 2-layer LLaMA-style model, 256 tokens a microbatch
    model = ModelSpec("llama", 2, 512, 8, 128, 2, vocab=vocab)
    text = render(model, ParallelSpec(tp=tp, pp=pp, runtime=loss), GPUS["h100"])
    return parse_workload_text(text, "m.txt")


def test_generate_writes_the_logits_of_this_rank():
    # Megatron-LM pads 50,000 to a multiple of 128 x TP: 50,048 at TP 1, 50,176 at TP 4
    # (12,544 a rank); torchtitan keeps 50,000 (at TP 8 its largest shard 6,250 rows, where
    # Megatron's 50,176 / 8 is 6,272)
    h = _header().header
    assert (h.loss_keeps_bytes, h.loss_f_transient_bytes, h.loss_b_transient_bytes) == (
        4 * 256 * 50_048, 2 * 256 * 50_048, 2 * 256 * 50_048)
    assert _header(tp=4).header.loss_keeps_bytes == 4 * 256 * 12_544
    t = _header(loss="torchtitan").header
    assert (t.loss_f_transient_bytes, t.loss_b_transient_bytes) == (6 * 256 * 50_000,
                                                                    8 * 256 * 50_000)
    assert _header(tp=8, loss="torchtitan").header.loss_keeps_bytes == 4 * 256 * 6_250


def test_the_last_stage_holds_it_and_no_other():
    wl = _header(pp=2)
    h = wl.header
    r = simulate(wl, "1f1b", pp=2, microbatches=4).to_dict()["ranks"]
    first, last = (x["peak_memory_breakdown"] for x in r)
    # rank 0 holds 2 microbatches' stash of its layer, the last 1 of its layer and the loss
    assert first["activations"] == 2 * h.activation_bytes
    assert last["activations"] == h.activation_bytes + h.loss_keeps_bytes
    # its backward starts with the loss's gradient: here more than a layer's working memory
    assert h.loss_b_transient_bytes > h.b_transient_bytes
    assert last["transient"] == h.loss_b_transient_bytes


def test_a_systems_loss_figure_or_memory_actions_replace_the_shapes():
    wl = _header()
    h = wl.header
    base = simulate(wl, "1f1b", pp=1, microbatches=1).to_dict()["ranks"][0]
    set_ = simulate(wl, "1f1b", pp=1, microbatches=1,
                    system={"memory": {"loss_keeps_bytes": 1000}}).to_dict()["ranks"][0]
    assert base["peak_memory_breakdown"]["activations"] == 2 * h.activation_bytes \
        + h.loss_keeps_bytes
    # the system's figure: kept, and none of the header's working memory at the loss
    assert set_["peak_memory_breakdown"]["activations"] == 2 * h.activation_bytes + 1000
    assert set_["peak_memory_breakdown"]["transient"] == h.b_transient_bytes


def test_a_graph_freeing_split_backward_frees_what_the_loss_kept():
    """Megatron-LM's zero-bubble runtime: the last stage's I runs the loss's backward and
    frees the layers' stash and the loss's softmax; until its W it keeps the linears' inputs
    and output gradients. torch's runtime keeps the graph, and the loss's tensors with it."""
    wl = _header(pp=2)
    h = wl.header
    schedule = registry.generate("zb-h1", 2, 4, 1)
    part = partition(wl, 2)
    system = SystemConfig()
    freeing = build_memory_model(schedule, part, h, system, "async").stages[-1]
    keeping = build_memory_model(schedule, part, h, system, "torch").stages[-1]
    assert freeing.stash == keeping.stash == h.activation_bytes + h.loss_keeps_bytes
    assert freeing.i_frees == h.activation_bytes + h.loss_keeps_bytes
    assert freeing.i_keeps == h.deferred_wgrad_bytes
    # torch's stage drops only the last stage's output from its cache at the first backward
    assert keeping.i_frees == h.pp_comm


def test_a_torchtitan_job_runs_and_plans_with_torchtitans_loss(tmp_path, capsys):
    """A torchtitan job's generated workload (run or plan) carries its loss's figures: 8 B a
    logit in the backward, where a Megatron-LM launch's carries 2."""
    from simulator.cli.main import main

    job = tmp_path / "job.toml"
    job.write_text('[model]\nname = "llama3"\nflavor = "debugmodel"\n[training]\n'
                   'local_batch_size = 2\nseq_len = 512\n')
    # debugmodel: vocabulary 2,048 (a multiple of 128: no padding), 2 x 512 tokens
    logits = 2 * 512 * 2048
    assert main(["generate", "--torchtitan", str(job), "-o", str(tmp_path / "g.txt")]) == 0
    h = parse_workload_text((tmp_path / "g.txt").read_text(), "g.txt").header
    assert (h.loss_keeps_bytes, h.loss_f_transient_bytes, h.loss_b_transient_bytes) == (
        4 * logits, 6 * logits, 8 * logits)
    assert main(["plan", "--torchtitan", str(job), "--gpus", "2", "-s", "1f1b", "-j", "1",
                 "--out", str(tmp_path / "p"), "--json", str(tmp_path / "p.json")]) == 0
    planned = parse_workload_text((tmp_path / "p" / "plan-llama-6l-tp1.txt").read_text(),
                                  "p.txt")
    assert planned.header.loss_b_transient_bytes == 8 * logits
    capsys.readouterr()


@pytest.mark.live
@pytest.mark.parametrize("dtype", (2, 4))
def test_torchtitans_loss_as_torchs_allocator_gives_it(dtype):
    """benchmarks/memory/loss_transients.py: torchtitan's loss on torch 2.13's CPU allocator,
    per logit, within the few bytes a token its labels take."""
    pytest.importorskip("torch")
    from benchmarks.memory.loss_transients import TOKENS, VOCAB, measure

    got = measure("torchtitan", dtype)
    rule = loss_memory_bytes(TOKENS * VOCAB, dtype, "torchtitan")
    assert [round(got[k], 1) for k in ("keeps", "f_transient", "b_transient")] == [
        b / (TOKENS * VOCAB) for b in rule]


@pytest.mark.launch
@pytest.mark.parametrize("dtype", (2, 4))
def test_megatrons_loss_as_torchs_allocator_gives_it(dtype):
    """megatron-core's own vocab-parallel cross-entropy (one TP rank, gloo) on torch's CPU
    allocator, per logit: its per-token masks aside (0.01-0.03 B a logit here)."""
    pytest.importorskip("megatron.core")
    from benchmarks.memory.loss_transients import TOKENS, VOCAB, measure

    got = measure("megatron", dtype)
    rule = loss_memory_bytes(TOKENS * VOCAB, dtype, "megatron")
    assert [round(got[k], 1) for k in ("keeps", "f_transient", "b_transient")] == [
        b / (TOKENS * VOCAB) for b in rule]
