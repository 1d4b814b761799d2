"""The transformer layer is the unit of a partition: pipesim's default split, Megatron-LM's rule
for uneven first/last stages and its embedding/loss accounting, the refusal of a split that
would cut a layer, and what the runtimes say about the splits of generated and bundled files."""

from __future__ import annotations

from pathlib import Path

import pytest

from simulator.api import simulate
from simulator.cli.main import main
from simulator.errors import ConfigError
from simulator.schedules.runtimes import check_runtimes, shape_of
from simulator.workload.stage_layers import (PipelineSplit, chunk_layers_of,
                                             default_chunk_layers, megatron_chunk_layers,
                                             megatron_split_of)

ROOT = Path(__file__).resolve().parents[2]
GPT = str(ROOT / "workloads" / "gpt-24l.txt")


# -- Megatron-LM's rule, worked by hand ----------------------------------------------------------

@pytest.mark.parametrize("args, counts", [
    # even: 24 / 4 a rank; with 2 virtual stages, 24 / 8 a chunk
    ((24, 4), (6, 6, 6, 6)),
    ((24, 4, 2), (3,) * 8),
    # first and last: 30 - 7 - 7 = 16 over the 2 ranks between
    ((30, 4, 1, 7, 7), (7, 8, 8, 7)),
    # only the first: 23 - 5 = 18 over the other 3 ranks
    ((23, 4, 1, 5), (5, 6, 6, 6)),
    # only the last at pp 2: the first rank holds the rest
    ((24, 2, 1, None, 10), (14, 10)),
    # vpp 2: rank 0 holds 6 (3 a chunk), ranks 1 and 2 hold (32 - 12) / 2 = 10 (5 a chunk);
    # chunk k is virtual stage k // 4 on rank k % 4
    ((32, 4, 2, 6, 6), (3, 5, 5, 3, 3, 5, 5, 3)),
    # the embedding and the loss each count as a layer: 32 / 4 = 8 a rank, the first and the
    # last chunk one less
    ((30, 4, 1, None, None, True, True), (7, 8, 8, 7)),
    ((31, 4, 1, None, None, False, True), (8, 8, 8, 7)),
    ((31, 4, 1, None, None, True, False), (7, 8, 8, 8)),
    # 32 over 2 ranks x 4 chunks: 4 a chunk, the first and the last 3
    ((30, 2, 4, None, None, True, True), (3, 4, 4, 4, 4, 4, 4, 3)),
])
def test_megatron_rule_on_hand_worked_cases(args, counts):
    assert megatron_chunk_layers(*args) == counts
    assert sum(counts) == args[0]


@pytest.mark.parametrize("args, line", [
    ((24, 5), "--pp: expected 24 layers to split evenly over pp 5 x vpp 1 (Megatron-LM's even "
              "split), got 24 over 5 chunk(s)"),
    ((24, 4, 1, None, None, False, True),
     "--account-for-loss-in-pipeline-split: expected 24 layers + 1 (embedding/loss) to split "
     "evenly over pp 4 x vpp 1 (Megatron-LM's even split), got 25 over 4 chunk(s)"),
    ((24, 4, 1, 5), "--decoder-first-pipeline-num-layers: expected the 24 layers less 5 to split "
                    "evenly over the other 3 pipeline rank(s) x 1 virtual stage(s), got 19 "
                    "layer(s) left"),
    ((24, 4, 2, 3, 3), "--decoder-first-pipeline-num-layers: expected a positive multiple of "
                       "the 2 virtual stage(s) per rank, got 3"),
    ((24, 2, 1, 10, 10), "--decoder-first-pipeline-num-layers: expected the 24 layers less "
                         "10 + 10 to split evenly over the other 0 pipeline rank(s) x 1 virtual "
                         "stage(s), got 4 layer(s) left"),
    ((24, 1, 1, 24), "--decoder-first-pipeline-num-layers: expected --pp >= 2 (uneven first "
                     "and last pipeline stages), got pp 1"),
    ((24, 4, 1, 6, None, True), "--decoder-first-pipeline-num-layers: expected no "
     "--account-for-embedding-in-pipeline-split or --account-for-loss-in-pipeline-split with "
     "it (Megatron-LM takes one or the other)"),
])
def test_what_megatron_refuses_is_refused_in_one_line(args, line):
    with pytest.raises(ConfigError) as err:
        megatron_chunk_layers(*args)
    assert str(err.value) == line


def test_default_split_and_the_options_that_write_it():
    assert default_chunk_layers(24, 4) == (6, 6, 6, 6)
    assert default_chunk_layers(24, 5) == (5, 5, 5, 5, 4)
    assert megatron_split_of((6, 6, 6, 6), 4, 1) == PipelineSplit()
    assert megatron_split_of((7, 8, 8, 7), 4, 1) == PipelineSplit(None, None, True, True)
    # both --account-for-embedding-in-pipeline-split and --decoder-first 5 give it: the fewest
    # words first
    assert megatron_split_of((5, 6, 6, 6), 4, 1) == PipelineSplit(account_for_embedding=True)
    assert megatron_split_of((4, 6, 6, 6), 4, 1) == PipelineSplit(4)
    assert megatron_split_of((3, 5, 5, 3, 3, 5, 5, 3), 4, 2) == PipelineSplit(6, 6)
    # 24 + the loss over 5: pipesim's default at pp 5 is Megatron's with the loss accounted
    assert megatron_split_of((5, 5, 5, 5, 4), 5, 1) == PipelineSplit(account_for_loss=True)
    # 30 over 4, the first chunks one more: no Megatron option gives it (its layout string does)
    assert megatron_split_of((8, 8, 7, 7), 4, 1) is None


# -- runs -----------------------------------------------------------------------------------------

def test_a_split_that_would_cut_a_layer_is_refused_before_any_work(capsys):
    assert main(["run", GPT, "--pp", "30"]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert err == (f"pipesim: error: {GPT}: pp x vpp = 30 chunks would cut transformer layer 0 "
                   "(rows attention_0..mlp_0, lines 4-5); the file's 24 transformer layers make "
                   "at most 24 chunks of whole layers: expected pp x vpp <= 24\n")
    assert main(["run", GPT, "--pp", "8", "--vpp", "4"]) == 2
    assert capsys.readouterr().err.startswith(
        f"pipesim: error: {GPT}: pp x vpp = 32 chunks would cut transformer layer ")
    # found by the fuzz (seed 14): at 2^41 chunks the message listed every chunk's bounds
    # (MemoryError); it names the same first cut layer from the rows alone
    assert main(["run", GPT, "--pp", str(2**40), "--vpp", "2", "-s", "gpipe"]) == 2
    assert capsys.readouterr().err == (
        f"pipesim: error: {GPT}: pp x vpp = {2**41} chunks would cut transformer layer 0 "
        "(rows attention_0..mlp_0, lines 4-5); the file's 24 transformer layers make at most "
        "24 chunks of whole layers: expected pp x vpp <= 24\n")


def test_megatron_options_on_the_command_line_set_the_split(capsys):
    r = simulate(GPT, "1f1b", pp=4, decoder_first_pipeline_num_layers=7,
                 decoder_last_pipeline_num_layers=5, engine="evaluator")
    found = chunk_layers_of(r.workload, r.partition.chunks)
    assert (found.counts, found.embedding_chunk, found.head_chunk) == ((7, 6, 6, 5), 0, 3)
    assert ("layers per chunk: 7 6 6 5 (Megatron-LM's split with "
            "--decoder-first-pipeline-num-layers 7 --decoder-last-pipeline-num-layers 5)"
            in r.notes)
    assert main(["run", GPT, "--pp", "4", "--decoder-first-pipeline-num-layers", "5"]) == 2
    assert capsys.readouterr().err == (
        "pipesim: error: --decoder-first-pipeline-num-layers: expected the 24 layers less 5 to "
        "split evenly over the other 3 pipeline rank(s) x 1 virtual stage(s), got 19 layer(s) "
        "left\n")


def test_an_uneven_default_split_is_a_note():
    r = simulate(GPT, "1f1b", pp=5, engine="evaluator")
    assert chunk_layers_of(r.workload, r.partition.chunks).counts == (5, 5, 5, 5, 4)
    assert ("layers per chunk: 5 5 5 5 4: the file's 24 transformer layers do not divide by "
            "pp x vpp = 5, so the first chunks hold one more (docs/workload-format.md; "
            "--decoder-first/last-pipeline-num-layers set another split)") in r.notes
    assert not [w for w in r.warnings if "layers per chunk" in str(w)]


def _verdicts(path, schedule, pp, vpp, m):
    # the model layout as generate writes it (its detection is not what is tested here)
    r = simulate(path, schedule, pp=pp, vpp=vpp, microbatches=m, engine="evaluator",
                 layout="model")
    return check_runtimes(shape_of(r.schedule, r.workload, r.partition)), r


@pytest.mark.parametrize("schedule, pp, vpp", [
    ("1f1b", 1, 1), ("1f1b", 2, 1), ("1f1b", 4, 1), ("1f1b", 8, 1),
    ("interleaved-1f1b", 2, 2), ("interleaved-1f1b", 4, 2), ("interleaved-1f1b", 4, 3),
    ("interleaved-1f1b", 2, 4)])
def test_the_bundled_gpt_file_runs_on_megatron_and_torchtitan(schedule, pp, vpp):
    v, r = _verdicts(GPT, schedule, pp, vpp, 24)
    assert v["megatron"].accepts and v["torchtitan"].accepts, (v["megatron"], v["torchtitan"])
    assert chunk_layers_of(r.workload, r.partition.chunks).counts == (24 // (pp * vpp),) * (pp * vpp)


@pytest.fixture(scope="module")
def llama(tmp_path_factory):
    out = tmp_path_factory.mktemp("llama") / "llama.txt"
    assert main(["generate", "--model", "llama", "--layers", "16", "--hidden", "1024",
                 "--heads", "16", "--kv-heads", "4", "--seq", "512", "--micro-batch", "1",
                 "--ga", "16", "--gpu", "h100", "-o", str(out)]) == 0
    return str(out)


@pytest.mark.parametrize("pp", [2, 4, 8])
def test_a_generated_llama_file_runs_on_megatron_and_torchtitan(llama, pp, capsys):
    v, r = _verdicts(llama, "1f1b", pp, 1, 16)
    assert v["megatron"].accepts and v["torchtitan"].accepts, (v["megatron"], v["torchtitan"])
    found = chunk_layers_of(r.workload, r.partition.chunks)
    assert (found.counts, found.embedding_chunk, found.head_chunk, found.cut) == \
        ((16 // pp,) * pp, 0, pp - 1, None)
    v, _ = _verdicts(llama, "interleaved-1f1b", pp, 2, 16)
    assert v["megatron"].accepts and v["torchtitan"].accepts, (v["megatron"], v["torchtitan"])


def test_torchtitan_builds_no_pipeline_on_one_rank():
    v, _ = _verdicts(GPT, "looped-bfs", 1, 2, 4)
    assert v["torchtitan"].rule == (
        "torchtitan builds no pipeline at pipeline_parallel_degree 1 (pp_enabled is pp > 1), so "
        "not 2 stages on one rank: it runs 1f1b at vpp 1")
    assert v["torch"].accepts


def test_the_readme_launch_line_writes_runnable_settings(tmp_path, capsys):
    launch = tmp_path / "launch"
    assert main(["run", GPT, "--launch", str(launch)]) == 0
    capsys.readouterr()
    assert (launch / "megatron_args.txt").read_text().splitlines() == [
        "--tensor-model-parallel-size 2", "--pipeline-model-parallel-size 4", "--num-layers 24",
        "--micro-batch-size 1", "--global-batch-size 64"]
    toml = (launch / "torchtitan.toml").read_text()
    assert "cannot run" not in toml and "pipeline_parallel_degree = 4" in toml
    assert ('module_fqns_per_model_part = [["tok_embeddings", "layers.0", "layers.1", "layers.2", '
            '"layers.3", "layers.4", "layers.5"], ["layers.6"') in toml
    # an uneven split set by Megatron's options is launched with the same options
    assert main(["run", GPT, "--pp", "4", "--decoder-first-pipeline-num-layers", "7",
                 "--decoder-last-pipeline-num-layers", "5", "--launch", str(launch)]) == 0
    capsys.readouterr()
    args = (launch / "megatron_args.txt").read_text().splitlines()
    assert args[2:5] == ["--num-layers 24", "--decoder-first-pipeline-num-layers 7",
                         "--decoder-last-pipeline-num-layers 5"]


# -- torchtitan's rule ----------------------------------------------------------------------------

@pytest.mark.parametrize("args, counts", [
    # 24 + 1 + 1 = 26 effective layers over 4: 7 7 6 6, less the embedding's and the head's 1
    ((24, 4), (6, 7, 6, 5)),
    # weights 0: the even split, the first stages one more (pipesim's default)
    ((30, 4, 0, 0), (8, 8, 7, 7)),
    # 24 + 2 + 2 = 28 over 8: 4 4 4 4 3 3 3 3, the first and the last 2 less
    ((24, 8, 2, 2), (2, 4, 4, 4, 3, 3, 3, 1)),
    ((24, 1), (24,)),
])
def test_torchtitan_rule_on_hand_worked_cases(args, counts):
    from simulator.workload.stage_layers import torchtitan_chunk_layers

    assert torchtitan_chunk_layers(*args) == counts


def test_torchtitan_layers_per_stage_sets_the_stages(capsys):
    # ceil((24 + 1 + 1) / 4) = 7 stages: not pp 4 x vpp 2
    assert main(["run", GPT, "--pp", "4", "--vpp", "2",
                 "--pipeline-parallel-layers-per-stage", "4"]) == 2
    assert capsys.readouterr().err == (
        "pipesim: error: --pipeline-parallel-layers-per-stage: expected pp x vpp = 8 stages "
        "from ceil((24 layers + 1 + 1) / 4), got 7; set a pipeline degree dividing 7\n")
    # ceil(26 / 13) = 2 stages: 13 effective layers each, the embedding and the head 1 each
    r = simulate(GPT, "1f1b", pp=2, pipeline_parallel_layers_per_stage=13, engine="evaluator")
    assert chunk_layers_of(r.workload, r.partition.chunks).counts == (12, 12)
    assert ("layers per chunk: 12 12 (torchtitan's split with "
            "--pipeline-parallel-layers-per-stage 13)") in r.notes
    with pytest.raises(ConfigError) as err:
        PipelineSplit(6, layers_per_stage=4).counts(24, 4, 1)
    assert str(err.value) == ("--pipeline-parallel-layers-per-stage: expected Megatron-LM's or "
                              "torchtitan's split options, not both (got "
                              "--decoder-first-pipeline-num-layers too)")


def test_plan_takes_a_fixed_split_and_its_command_reproduces_it(capsys, tmp_path):
    import json
    import shlex

    dest = tmp_path / "p.json"
    assert main(["plan", GPT, "--gpus", "8", "--global-batch", "16", "-s", "1f1b", "-j", "1",
                 "--decoder-first-pipeline-num-layers", "7",
                 "--decoder-last-pipeline-num-layers", "5", "--json", str(dest)]) == 0
    capsys.readouterr()
    data = json.loads(dest.read_text())
    by_pp = {c["pp"]: c for c in data["candidates"] if c["schedule"] == "1f1b"}
    # pp 1 and 2 have no ranks between the first and the last: Megatron-LM refuses them
    assert by_pp[1]["reason"] == ("--decoder-first-pipeline-num-layers: expected --pp >= 2 "
                                  "(uneven first and last pipeline stages), got pp 1")
    assert by_pp[2]["reason"].startswith("--decoder-first-pipeline-num-layers: expected the 24 "
                                         "layers less 7 + 5 to split evenly over the other 0")
    best = data["best"]
    # auto, synthesized for the split's own stage costs, wins at pp 4
    assert best["key"] == "tp2-pp4-v1-m16-auto-k8-split-f7-l5"
    argv = shlex.split(best["command"])
    assert " ".join(argv).endswith(" -s auto -O max_in_flight=8 -O iterations=200 "
                                   "--decoder-first-pipeline-num-layers 7 "
                                   "--decoder-last-pipeline-num-layers 5")
    assert main([*argv[1:], "--json", str(tmp_path / "r.json")]) == 0
    capsys.readouterr()
    assert json.loads((tmp_path / "r.json").read_text())["makespan_ns"] == best["makespan_ns"]
    # the table names the split beside the schedule
    assert main(["plan", GPT, "--gpus", "8", "--global-batch", "16", "-s", "1f1b", "-j", "1",
                 "--decoder-first-pipeline-num-layers", "7",
                 "--decoder-last-pipeline-num-layers", "5"]) == 0
    first_row = capsys.readouterr().out.splitlines()[4]
    assert " auto K=8 (first 7, last 5) " in first_row


def test_a_split_in_words_for_the_plan_table():
    from simulator.planning.plan import split_label

    assert split_label(()) == ""
    assert split_label(tuple(PipelineSplit(7, 5))) == "first 7, last 5"
    assert split_label(tuple(PipelineSplit(account_for_embedding=True,
                                           account_for_loss=True))) == \
        "embedding and loss as layers"
    assert split_label(tuple(PipelineSplit(None, 3, False, True))) == "last 3, loss as layers"


def test_plan_searches_megatrons_end_stage_flags_where_they_give_another_split():
    from simulator.planning.plan import end_stage_splits

    # 24 layers over 5: + the loss is 5 5 5 5 4, the default split itself; + the embedding
    # 4 5 5 5 5; both (26) do not divide
    assert end_stage_splits(24, 5, 1) == [tuple(PipelineSplit(account_for_embedding=True))]
    # over 2: both counted is 12 12, the default; one alone (25) does not divide
    assert end_stage_splits(24, 2, 1) == []
    # 31 layers over 4: the default is 8 8 8 7; with the embedding counted 7 8 8 8
    assert end_stage_splits(31, 4, 1) == [tuple(PipelineSplit(account_for_embedding=True))]
    # 30 over 4: the default 8 8 7 7; both counted: 7 8 8 7
    assert end_stage_splits(30, 4, 1) == [tuple(PipelineSplit(account_for_embedding=True,
                                                              account_for_loss=True))]
