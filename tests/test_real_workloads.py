"""Every real SimAI / AICB / ASTRA-sim file simulates with the pipeline its header implies (and
under every registered schedule that accepts its P, M), or is refused with a precise message.

Runs on the real files in ../shared/workloads-real/ (provenance in its SOURCES.md).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from simulator import simulate
from simulator.metrics import pipeline_bubble, simai_pipeline_terms
from simulator.cli.main import main
from simulator.errors import ConfigError, WorkloadError
from simulator.schedules import names
from simulator.workload.parser import load_workload

from shared_files import REAL_DIR as DATA, needs_real  # noqa: E402

pytestmark = needs_real   # every test here reads a real file

# file: (layout, P, M, rows per chunk under the header's pipeline, iteration rows)
EXPECTED = {
    "workload_gpt13b_128g.txt": ("aicb", 2, 16, [1 + 20 * 4, 20 * 4 + 2], 10),
    "workload_analytical.txt": ("aicb", 12, 24, [1 + 8 * 9] + [8 * 9] * 10 + [8 * 9 + 1], 13),
    "DeepSeek-16B-tp2-pp2-dp2-ep4-g32-mpdeptip.txt": ("aicb", 2, 8, [1 + 7 + 26 * 12,
                                                                      7 + 26 * 12 + 1], 13),
    "workload_gpt7b_64g.txt": ("aicb", 1, 8, [1 + 32 * 4 + 2], 10),
    "microAllReduce.txt": ("aicb", 1, 1, [2], 0),
    # AICB model file: its whole-model DP/optimizer rows run once per iteration (issue 14)
    "G13B-M1-C01_GPT13B_megatron_tp8_pp1_mbs1_A100.txt": ("model", 1, 1, [82], 10),
    "Transformer_HybridParallel_Fwd_In_Bckwd.txt": ("model", 1, 1, [21], 0),
}
MALFORMED = "L65B-M1-C05_Llama65B_megatron_tp8_pp1_mbs1_A100.txt"


def _files() -> list:
    return [pytest.param(DATA / name, id=name) for name in sorted(EXPECTED)]


@pytest.mark.parametrize("path", _files())
def test_real_file_simulates_with_its_header_pipeline(path):
    layout, P, M, chunk_rows, iteration_rows = EXPECTED[path.name]
    result = simulate(path)
    assert result.workload.layout == layout
    assert (result.schedule.name, result.schedule.pp, result.schedule.microbatches) == (
        "1f1b", P, M)
    assert [len(c) for c in result.partition.chunks] == chunk_rows
    assert len(result.partition.iteration_layers) == iteration_rows
    assert result.makespan_ns > 0
    assert len({a.microbatch for a in result.records.actions}) == M


@pytest.mark.parametrize("path", _files())
def test_real_file_runs_under_every_registered_schedule(path):
    ran = []
    for name in names():
        try:
            result = simulate(path, name)
        except ConfigError:
            continue   # this schedule refuses the header's P, M (e.g. DualPipe needs M >= 2P)
        assert result.makespan_ns > 0
        ran.append(name)
    assert "1f1b" in ran and "gpipe" in ran


def test_malformed_l65b_is_refused_with_the_counts_and_path(capsys):
    path = DATA / MALFORMED
    with pytest.raises(WorkloadError) as err:
        simulate(path)
    assert str(err.value) == (f"{path}:2:1: layer count: expected as many layer rows as declared "
                              "(line 2 declares 839 layer rows, found 33)")
    assert main(["run", str(path)]) == 2
    assert "declares 839 layer rows, found 33" in capsys.readouterr().err


def test_gpt13b_is_two_stages_of_twenty_layers(capsys):
    path = DATA / "workload_gpt13b_128g.txt"
    st = load_workload(path).aicb
    assert (st.repeats, st.block_rows, st.layers_per_stage, st.model_layers) == (16, 83, 20, 40)
    assert st.repeat_lines[0] == (6, 88) and st.repeat_lines[-1] == (1251, 1333)
    assert [r.name for r in st.pre] == ["grad_norm", "moe_grad_norm1", "moe_grad_norm2"]
    assert [r.name for r in st.tail] == ["final_column", "embedding_norm"]
    result = simulate(path)
    assert [s["layers"] for s in result.summary["stages"]] == [[[0, 80]], [[81, 162]]]
    # every transfer carries the header's pp_comm, 2 x 16 microbatches x (F and B)
    assert {t.nbytes for t in result.records.transfers} == {2621440}
    assert len(result.records.transfers) == 2 * 16


def test_analytical_is_twelve_stages_of_twenty_four_microbatches():
    path = DATA / "workload_analytical.txt"
    result = simulate(path)
    assert (result.schedule.pp, result.schedule.microbatches) == (12, 24)
    assert result.workload.aicb.model_layers == 96
    # the first repeat's stale embedding weight-gradient time is replaced by the majority's
    assert result.partition.chunks[0][0].wg_compute == 875420
    assert any("wg_compute differs between the microbatch repeats (15091072 in 1 repeat(s); "
               "875420 in 23)" in w for w in result.workload.warnings)


def test_interleaved_on_an_aicb_file_splits_each_stage():
    result = simulate(DATA / "workload_analytical.txt", "interleaved-1f1b", vpp=2)
    stages = result.summary["stages"]
    assert len(stages) == 12 and all(len(s["layers"]) == 2 for s in stages)
    # 24 chunks of 4 layers (9 rows each); the embedding opens chunk 0, final_column closes 23
    assert [len(c) for c in result.partition.chunks] == [37] + [36] * 22 + [37]


def test_forcing_the_model_layout_reads_the_rows_as_one_model():
    result = simulate(DATA / "workload_gpt7b_64g.txt", layout="model")
    assert result.workload.layout == "model"
    # AICB's named DP/optimizer rows still run once per iteration (issue 14), the rest is model
    assert len(result.partition.iteration_layers) == 10
    assert sum(len(c) for c in result.partition.chunks) == 1058 - 10


def test_inspect_reports_the_recovered_block(capsys):
    assert main(["inspect", str(DATA / "workload_gpt13b_128g.txt")]) == 0
    out = capsys.readouterr().out.splitlines()
    assert "    iteration rows before: lines 3-5 (grad_norm, moe_grad_norm1, moe_grad_norm2)" in out
    assert "    microbatch repeats: lines 6-88, 89-171, 172-254, ..., 1251-1333" in out
    assert "    block head (first stage): lines 6-6 (embedding_layer)" in out
    assert ("    transformer layers: 20 per stage, lines 7-86 (4 rows per layer)") in out
    assert "    block tail (last stage): lines 87-88 (final_column, embedding_norm)" in out
    assert "    model: 2 stage(s) x 20 layer(s) = 40 transformer layers" in out
    assert ("    chunk 0 (rank 0): 81 rows [0-80], lines 6-86: head (embedding_layer) + "
            "transformer layers 0-19 of 40") in out
    assert ("    chunk 1 (rank 1): 82 rows [81-162], lines 7-88: transformer layers 20-39 of 40 "
            "+ tail (final_column, embedding_norm)") in out
    assert "    every rank, once per iteration after its last microbatch: 10 iteration rows" in out


def test_inspect_json_and_model_layout(capsys):
    import json

    assert main(["inspect", str(DATA / "G13B-M1-C01_GPT13B_megatron_tp8_pp1_mbs1_A100.txt"),
                 "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert (d["layout"], d["aicb"], d["rows"], d["defaults_used"]) == (
        "model", None, 92, ["ep", "pp", "vpp", "ga", "all_gpus", "pp_comm"])
    # rows 0-2 (norm, grad_norm, layernorm) and the last 7 (cross_entropy*, optimizer*) are
    # AICB's whole-model DP/optimizer rows: they run once per iteration (issue 14)
    assert d["iteration_rows"] == 10
    assert d["chunks"] == [{"chunk": 0, "rank": 0, "rows": 82, "model_rows": [3, 84],
                            "lines": [6, 87], "names": d["chunks"][0]["names"]}]
    assert main(["inspect", str(DATA / "workload_gpt7b_64g.txt"), "--layout", "model"]) == 0
    out = capsys.readouterr().out
    assert "  layout: model (the rows are the whole model, once)" in out


def test_inspect_refuses_a_bad_option(capsys):
    assert main(["inspect", str(DATA / "microAllReduce.txt"), "--pp", "2"]) == 2
    assert capsys.readouterr().err == (
        f"pipesim: error: {DATA / 'microAllReduce.txt'}: cannot split the 0 transformer layer(s) "
        "of the AICB model (1 stage(s) x 0 layer(s) recovered from the block) into 2 pipeline "
        "chunks (pp x vpp); every chunk needs at least one layer\n")


def test_simai_terms_on_gpt13b_use_the_header_vpp():
    """SimAI divides by ga x vpp, and an AICB file's vpp: is layers per stage (20)."""
    wl = load_workload(DATA / "workload_gpt13b_128g.txt")
    t = simai_pipeline_terms(wl)
    assert (t["pp"], t["ga"], t["vpp"]) == (2, 16, 20)
    assert t["bubble_ns"] == pytest.approx(t["pre_bubble_ns"] / (16 * 20))
    # every compute cell is 1 ns except the 7 trailing rows (0): 1331 rows x 3 cells, and the
    # 16 embedding_layer rows are left out of the bubble's share
    assert t["compute_ns"] == 1331 * 3


def test_simulated_bubble_of_gpt13b_exceeds_simai_because_stages_differ():
    result = simulate(DATA / "workload_gpt13b_128g.txt", "1f1b")
    b = pipeline_bubble(result.records, result.schedule)
    t = simai_pipeline_terms(result.workload, result.system, vpp=1)
    # the last stage also runs embedding_norm's 514 MB all-reduce every microbatch, so the
    # first stage waits on it at every steady step: more bubble than (P-1)(F+B) of an average
    assert b["max_ns"] > t["bubble_ns"]
    assert b["per_rank_ns"][0] > b["per_rank_ns"][1]


def test_forcing_aicb_on_an_astra_sim_model_file_is_refused(capsys):
    path = DATA / "Transformer_HybridParallel_Fwd_In_Bckwd.txt"
    assert main(["run", str(path), "--layout", "aicb"]) == 2
    assert capsys.readouterr().err == (
        f"pipesim: error: {path}:3: layout: expected the AICB stage layout: iteration rows, then "
        "1 (ga) repeats of one microbatch's rows, then iteration rows, found 'no iteration rows "
        "and no layers'\n")


def test_forcing_aicb_on_the_legacy_aicb_file_recovers_its_block():
    """G13B has no ga: key (AICB's older format) but AICB's row names: forced, its 40 layers
    split over the requested stages."""
    path = DATA / "G13B-M1-C01_GPT13B_megatron_tp8_pp1_mbs1_A100.txt"
    result = simulate(path, layout="aicb", pp=2, microbatches=4)
    st = result.workload.aicb
    assert ([r.name for r in st.pre], st.layers_per_stage, [r.name for r in st.tail]) == (
        ["norm", "grad_norm", "layernorm"], 40, ["embedding_norm"])
    assert [len(c) for c in result.partition.chunks] == [1 + 20 * 2, 20 * 2 + 1]
