"""AICB stage layout: detection, block recovery, layers/head/tail, partition, forced layout."""

from __future__ import annotations

import pytest

from simulator import simulate
from simulator.errors import ConfigError, WorkloadError
from simulator.workload.aicb import AicbStage, detect_layout, partition_aicb, recover_stage
from simulator.workload.parser import load_workload, parse_workload_text
from simulator.workload.partition import partition

HEAD = ("HYBRID_TRANSFORMER_FWD_IN_BCKWD model_parallel_NPU_group: 1 ep: 1 pp: {pp} vpp: {vpp} "
        "ga: {ga} all_gpus: {pp} checkpoints: 0 checkpoint_initiates: 0 pp_comm: 0")
LAYER = ("attention_column", "attention_row", "mlp_column", "mlp_row")


def row(name: str, f: int = 10, i: int = 10, w: int = 10, fc: str = "NONE", fb: int = 0,
        wc: str = "NONE", wb: int = 0) -> str:
    return f"{name}\t-1\t{f}\t{fc}\t{fb}\t{i}\tNONE\t0\t{w}\t{wc}\t{wb}\t0"


def aicb_text(pp: int = 2, ga: int = 3, layers: int = 2, vpp: int | None = None,
              pre=("grad_norm",), post=("cross_entropy1", "optimizer1"), first_wg: int = 10,
              header: str | None = None) -> str:
    """Iteration rows, ``ga`` repeats of [embedding, layers x LAYER, final_column], rows."""
    rows = [row(n, wc="REDUCESCATTER", wb=4096) for n in pre]
    for k in range(ga):
        rows.append(row("embedding_layer", w=first_wg if k == 0 else 10))
        for _ in range(layers):
            rows += [row(n, fc="ALLGATHER", fb=8192) for n in LAYER]
        rows.append(row("final_column"))
    rows += [row(n) for n in post]
    head = header or HEAD.format(pp=pp, ga=ga, vpp=layers if vpp is None else vpp)
    return "\n".join([head, str(len(rows))] + rows) + "\n"


def aicb(text: str, layout: str = "auto"):
    wl = parse_workload_text(text, "w.txt")
    if layout == "aicb":
        wl = wl._replace(layout="aicb")
    return detect_layout(wl)


# -- detection and recovery ------------------------------------------------------------------

def test_block_found_by_repetition_with_exact_boundaries():
    wl = aicb(aicb_text(pp=2, ga=3, layers=2))
    st: AicbStage = wl.aicb
    assert wl.layout == "aicb"
    assert st.found_by == "repetition"
    assert (st.block_start, st.block_rows, st.repeats) == (1, 10, 3)
    # line 3 is grad_norm; repeats are lines 4-13, 14-23, 24-33; then 34-35
    assert st.repeat_lines == ((4, 13), (14, 23), (24, 33))
    assert [r.line for r in st.pre] == [3] and [r.line for r in st.post] == [34, 35]
    assert [r.name for r in st.head] == ["embedding_layer"]
    assert [r.name for r in st.tail] == ["final_column"]
    assert [[r.line for r in layer] for layer in st.layers] == [[5, 6, 7, 8], [9, 10, 11, 12]]
    assert (st.layers_per_stage, st.model_layers, st.stages) == (2, 4, 2)
    assert st.notes == ()


def test_model_rows_are_reindexed_in_model_order_with_their_file_lines():
    st = aicb(aicb_text(pp=2, ga=3, layers=2)).aicb
    assert [r.index for r in st.model] == list(range(18))
    assert [r.name for r in st.model][:6] == ["embedding_layer", *LAYER, "attention_column"]
    assert st.model[-1].name == "final_column" and st.model[-1].line == 13
    assert st.layer_spans == ((1, 5), (5, 9), (9, 13), (13, 17))
    # the second stage copy points at the same file lines as the first
    assert [r.line for r in st.model[9:13]] == [5, 6, 7, 8]
    assert [(r.name, r.index) for r in st.iteration] == [
        ("grad_norm", 18), ("cross_entropy1", 19), ("optimizer1", 20)]


def test_repeats_that_disagree_in_a_time_use_the_majority_and_say_so():
    wl = aicb(aicb_text(ga=3, first_wg=999))
    assert wl.aicb.model[0].wg_compute == 10
    assert wl.aicb.notes == wl.warnings[-1:]
    assert wl.aicb.notes == ("w.txt:4: embedding_layer wg_compute differs between the microbatch "
                           "repeats (999 in 1 repeat(s); 10 in 2); using 10",)


def test_vpp_that_is_not_layers_per_stage_is_reported():
    wl = aicb(aicb_text(pp=2, ga=2, layers=3, vpp=1))
    assert wl.layout == "aicb"
    assert wl.warnings[-1:] == wl.aicb.notes == (
        "w.txt:1: vpp: is 1, but the block (lines 4-17) has 3 transformer layer(s); AICB "
        "writes layers per stage in vpp:, so the block is taken as one stage of 3 layer(s) "
        "(6 in the model over pp 2)",)


def test_heterogeneous_layers_and_phase_start_at_the_attention_row():
    """DeepSeek-like: a dense first layer (attention + mlp), then MoE layers with extra rows.
    The repeating unit's run starts at the dense layer's mlp rows; the layer still starts at
    its attention row, and the dense layer before the run is a layer too."""
    dense = ["attention_q", "attention_o", "mlp_column", "mlp_row"]
    moe = ["attention_q", "attention_o", "mlp_moelayer", "mlp_moelayer", "mlp_column", "mlp_row"]
    block = ["embedding_layer"] + dense + moe * 3 + ["final_column"]
    rows = [row("grad_gather")]
    for _ in range(2):
        rows += [row(n) for n in block]
    rows += [row("optimizer1")]
    text = "\n".join([HEAD.format(pp=1, ga=2, vpp=4), str(len(rows))] + rows) + "\n"
    st = aicb(text).aicb
    assert [[r.name for r in layer] for layer in st.layers] == [dense, moe, moe, moe]
    assert [r.name for r in st.head] == ["embedding_layer"]
    assert [r.name for r in st.tail] == ["final_column"]


def test_uniform_model_written_once_is_not_mistaken_for_repeats():
    """24 identical layers with ga: 4: 4 repeats of 6 layers exist, but that block is itself
    6 copies of one layer, so the rows are a model written once."""
    rows = [row("embedding_layer")] + [row(n) for n in LAYER] * 24 + [row("final_column")]
    text = "\n".join([HEAD.format(pp=4, ga=4, vpp=1), str(len(rows))] + rows) + "\n"
    assert aicb(text).layout == "model"
    with pytest.raises(WorkloadError) as err:
        aicb(text, layout="aicb")
    assert str(err.value) == (
        "w.txt: layout: expected the AICB stage layout: iteration rows, then 4 (ga) repeats of "
        "one microbatch's rows, then iteration rows, found 'each repeat is 6 x the same 4 rows'")


def test_forced_aicb_without_repeats_names_what_was_expected():
    rows = [row(f"layer{i}") for i in range(7)]
    text = "\n".join([HEAD.format(pp=1, ga=3, vpp=1), str(len(rows))] + rows) + "\n"
    assert aicb(text).layout == "model"
    with pytest.raises(WorkloadError) as err:
        aicb(text, layout="aicb")
    assert str(err.value) == (
        "w.txt: layout: expected the AICB stage layout: iteration rows, then 3 (ga) repeats of "
        "one microbatch's rows, then iteration rows, found 'no block of rows repeated 3 times'")


def test_no_ga_key_means_model_layout_even_with_repeats():
    text = aicb_text(header="HYBRID_TRANSFORMER_FWD_IN_BCKWD model_parallel_NPU_group: 1")
    assert aicb(text).layout == "model"


def test_ga_one_uses_aicb_names_and_needs_layers_to_match_vpp():
    text = aicb_text(pp=1, ga=1, layers=3, pre=("grad_gather", "moe_grad_norm1"),
                     post=("cross_entropy1", "optimizer1", "optimizer2"))
    st = aicb(text).aicb
    assert st.found_by == "names"
    assert [r.name for r in st.pre] == ["grad_gather", "moe_grad_norm1"]
    assert [r.name for r in st.post] == ["cross_entropy1", "optimizer1", "optimizer2"]
    assert st.layers_per_stage == 3 and st.repeat_lines == ((5, 18),)
    # vpp: 1 with 3 layers: auto keeps the model layout; forcing still recovers the block
    mismatch = aicb_text(pp=1, ga=1, layers=3, vpp=1)
    assert aicb(mismatch).layout == "model"
    assert aicb(mismatch, layout="aicb").aicb.layers_per_stage == 3


def test_forced_ga_one_with_only_iteration_rows_is_an_error():
    rows = [row("grad_norm"), row("optimizer1")]
    text = "\n".join([HEAD.format(pp=1, ga=1, vpp=1), "2"] + rows) + "\n"
    with pytest.raises(WorkloadError) as err:
        aicb(text, layout="aicb")
    assert str(err.value).startswith("w.txt:3: layout: expected the AICB stage layout")
    assert str(err.value).endswith("found 'no rows between the iteration rows'")


def test_recover_stage_on_a_model_file_raises_not_aicb():
    from simulator.workload.aicb import NotAicb

    rows = [row(f"layer{i}") for i in range(5)]
    text = "\n".join([HEAD.format(pp=1, ga=2, vpp=1), "5"] + rows) + "\n"
    with pytest.raises(NotAicb):
        recover_stage(parse_workload_text(text, "w.txt"))


# -- partition ---------------------------------------------------------------------------------

def test_partition_puts_head_first_tail_last_and_iteration_rows_aside():
    wl = aicb(aicb_text(pp=2, ga=3, layers=2))
    part = partition(wl, 2)
    assert [[r.name for r in c] for c in part.chunks] == [
        ["embedding_layer", *LAYER, *LAYER], [*LAYER, *LAYER, "final_column"]]
    assert [r.name for r in part.iteration_layers] == ["grad_norm", "cross_entropy1",
                                                       "optimizer1"]
    assert part.layer_range(0) == (0, 8) and part.layer_range(1) == (9, 17)


def test_partition_into_more_chunks_gives_the_remainder_to_the_first():
    wl = aicb(aicb_text(pp=2, ga=2, layers=3))        # 6 transformer layers in the model
    part = partition_aicb(wl, 4)
    assert [len(c) for c in part.chunks] == [1 + 8, 8, 4, 4 + 1]
    with pytest.raises(ConfigError) as err:
        partition(wl, 7)
    assert str(err.value) == (
        "w.txt: cannot split the 6 transformer layer(s) of the AICB model (2 stage(s) x 3 "
        "layer(s) recovered from the block) into 7 pipeline chunks (pp x vpp); every chunk "
        "needs at least one layer")


def test_checkpoints_map_to_every_copy_of_the_block_row():
    header = ("HYBRID_TRANSFORMER_FWD_IN_BCKWD model_parallel_NPU_group: 1 ep: 1 pp: 2 vpp: 2 "
              "ga: 2 all_gpus: 2 checkpoints: 1 1 checkpoint_initiates: 1 8 pp_comm: 0")
    # file rows: 0 grad_norm, 1 embedding, 2-5 layer 0, 6-9 layer 1, 10 final (repeat 0)
    wl = aicb(aicb_text(pp=2, ga=2, layers=2, header=header))
    part = partition(wl, 2)
    # row 8 is layer 1's mlp_column (model rows 7 and 15): recompute from the checkpoint (row
    # 1, the embedding, model row 0) in chunk 0; chunk 1 has no embedding, so from its first row
    assert part.recompute[0] == {7: (0, 1, 2, 3, 4, 5, 6)}
    assert part.recompute[1] == {6: (0, 1, 2, 3, 4, 5)}


# -- simulation ----------------------------------------------------------------------------------

def test_simulates_as_a_real_pipeline_with_exact_makespan():
    """pp 2, ga 3, every row F = I = W = 10 ns, no communication. Stage 0 runs the embedding and
    2 layers (9 rows: F 90, B 180), stage 1 two layers and the final row (the same). 1F1B:
    (M + P - 1)(F + B) = 4 x 270 = 1080, then the 3 iteration rows (F+I+W = 30 each): 1170."""
    r = simulate(aicb(aicb_text(pp=2, ga=3, layers=2)), "1f1b")
    assert (r.schedule.pp, r.schedule.microbatches) == (2, 3)
    assert r.makespan_ns == 1170.0
    assert [s["layers"] for s in r.summary["stages"]] == [[[0, 8]], [[9, 17]]]


def test_interleaved_splits_each_stage_into_chunks():
    r = simulate(aicb(aicb_text(pp=2, ga=4, layers=2)), "interleaved-1f1b", vpp=2)
    assert [s["layers"] for s in r.summary["stages"]] == [[[0, 4], [9, 12]], [[5, 8], [13, 17]]]


def test_load_workload_forced_layouts(tmp_path):
    path = tmp_path / "w.txt"
    path.write_text(aicb_text())
    assert load_workload(path).layout == "aicb"
    assert load_workload(path, layout="model").layout == "model"
    assert load_workload(path, layout="aicb").aicb.layers_per_stage == 2


def test_model_layout_with_more_identical_layers_than_ga_is_not_an_aicb_stage(tmp_path):
    # 96 identical layers and ga 64: a run of 64 equal blocks exists, but it is part of a longer
    # run, so the rows are a model written once, not one stage unrolled over 64 microbatches
    from simulator.cli.main import main
    from simulator.workload import load_workload

    out = tmp_path / "gpt.txt"
    assert main(["generate", "--model", "gpt", "--layers", "96", "--hidden", "1024",
                 "--heads", "16", "--seq", "1024", "--micro-batch", "1", "--tp", "2",
                 "--pp", "8", "--vpp", "1", "--ga", "64", "-o", str(out)]) == 0
    wl = load_workload(out)
    assert wl.layout == "model"
    assert partition(wl, 16).n_chunks == 16


def test_the_longest_matching_run_is_the_first_longest_for_every_period():
    """The block split's inner step, done with bytes in C, against its definition: the first
    longest run of i with ids[i] == ids[i + p]."""
    import random

    from simulator.workload.aicb import _longest_match_run

    def by_definition(ids, p):
        same = [ids[i] == ids[i + p] for i in range(len(ids) - p)]
        best = (0, 0)
        for a in range(len(same)):
            for b in range(a + 1, len(same) + 1):
                if all(same[a:b]) and b - a > best[1] - best[0]:
                    best = (a, b)
        return best

    rng = random.Random(7)
    for _ in range(400):
        ids = [rng.randint(0, rng.randint(1, 4)) for _ in range(rng.randint(0, 14))]
        if ids and rng.random() < 0.5:
            ids = ids[:2] + ids[2:4] * rng.randint(1, 6) + ids[-2:]
        for p in range(1, len(ids) // 2 + 1):
            assert _longest_match_run(ids, p) == by_definition(ids, p), (ids, p)
    assert _longest_match_run([1, 2, 1, 2, 3, 1, 2, 1, 2], 2) == (0, 2)
    assert _longest_match_run([1, 2, 3], 1) == (0, 0)
    # the split asks only for runs long enough to beat its best so far
    assert _longest_match_run([1, 2, 1, 2, 3, 1, 2, 1, 2], 2, at_least=2) == (0, 2)
    assert _longest_match_run([1, 2, 1, 2, 3, 1, 2, 1, 2], 2, at_least=3) == (0, 0)
