"""A first chunk of the embedding alone and a last of the LM head / loss alone: Megatron-LM's
--account-for-embedding/loss-in-pipeline-split and torchtitan's less-layers options give them at
one layer a chunk, the header's ``stage_layers:`` may say them, and every consumer of the
layers per chunk copes; a chunk that would hold nothing is refused in one line."""

from __future__ import annotations

import pytest

from simulator.api import simulate
from simulator.cli.main import main
from simulator.errors import ConfigError, WorkloadError
from simulator.schedules.runtimes import check_runtimes, shape_of
from simulator.workload.parser import load_workload
from simulator.workload.stage_layers import (PipelineSplit, megatron_chunk_layers,
                                             torchtitan_chunk_layers)

BOTH = dict(account_for_embedding_in_pipeline_split=True, account_for_loss_in_pipeline_split=True)
FLAGS = ["--account-for-embedding-in-pipeline-split", "--account-for-loss-in-pipeline-split"]
GPT22 = ["--model", "gpt", "--layers", "22", "--hidden", "2304", "--heads", "24", "--ffn", "9216",
         "--vocab", "51200", "--seq", "1024", "--micro-batch", "6", "--ga", "24",
         "--precision", "fp16", "--no-flash-attention", "--no-sequence-parallel"]


def row(name: str, f: int, b: int) -> str:
    return f"{name}\t-1\t{f}\tNONE\t0\t{b}\tNONE\t0\t0\tNONE\t0\t0\n"


# an embedding row, two layers of two rows (F 2 us, B 4 us each), a final norm and a loss
TINY_ROWS = [row("embedding_layer", 1000, 1000), row("attention_0", 1000, 2000),
             row("mlp_0", 1000, 2000), row("attention_1", 1000, 2000), row("mlp_1", 1000, 2000),
             row("final_norm", 500, 1000), row("cross_entropy", 500, 1000)]
HEADER = "HYBRID_TRANSFORMER_FWD_IN_BCKWD pp: 4 ga: 2 all_gpus: 4 pp_comm: 0"


def write(tmp_path, rows, keys: str = "", name: str = "tiny.txt") -> str:
    path = tmp_path / name
    path.write_text(f"{HEADER}{' ' + keys if keys else ''}\n{len(rows)}\n" + "".join(rows))
    return str(path)


@pytest.fixture(scope="module")
def gpt22(tmp_path_factory) -> str:
    path = str(tmp_path_factory.mktemp("gpt22") / "gpt22.txt")
    assert main(["generate", *GPT22, "-o", path]) == 0
    return path


def names(chunk) -> tuple[str, ...]:
    return tuple(r.name for r in chunk)


def test_both_flags_at_one_layer_a_chunk_leave_the_end_chunks_none():
    # 22 + 2 = 24 over pp 8 x vpp 3: one a chunk, the first and the last one less
    ends = (0,) + (1,) * 22 + (0,)
    assert megatron_chunk_layers(22, 8, 3, account_for_embedding=True,
                                 account_for_loss=True) == ends
    # torchtitan: 22 + 1 + 1 effective layers over 24 stages
    assert torchtitan_chunk_layers(22, 24, 1, 1) == ends


def test_the_gpt_run_puts_the_embedding_alone_on_rank_0_and_the_head_alone_on_rank_7(gpt22):
    r = simulate(gpt22, "interleaved-1f1b", pp=8, vpp=3, engine="evaluator", **BOTH)
    chunks = r.partition.chunks
    assert len(chunks) == 24
    assert names(chunks[0]) == ("embedding_layer",)                       # rank 0, chunk 0
    assert names(chunks[23]) == ("final_column", "cross_entropy1", "cross_entropy2",
                                 "cross_entropy3")                         # rank 7, last chunk
    assert [names(c) for c in chunks[1:23]] == [("attention_column", "attention_row",
                                                 "mlp_column", "mlp_row")] * 22
    assert (r.schedule.placement[0], r.schedule.placement[23]) == (0, 7)
    assert ("layers per chunk: 0 " + "1 " * 22 + "0 (Megatron-LM's split with "
            "--account-for-embedding-in-pipeline-split --account-for-loss-in-pipeline-split)"
            in r.notes)
    verdicts = check_runtimes(shape_of(r.schedule, r.workload, r.partition))
    assert verdicts["megatron"].accepts and verdicts["torchtitan"].accepts


def test_torchtitans_less_layers_and_the_header_give_the_same_run(gpt22, tmp_path):
    base = simulate(gpt22, "interleaved-1f1b", pp=8, vpp=3, engine="evaluator", **BOTH)
    titan = simulate(gpt22, "interleaved-1f1b", pp=8, vpp=3, engine="evaluator",
                     pipeline_parallel_layers_per_stage=1)
    text = open(gpt22).read().split("\n", 1)
    header = tmp_path / "header.txt"
    header.write_text(text[0] + " stage_layers: 0" + " 1" * 22 + " 0\n" + text[1])
    said = simulate(str(header), "interleaved-1f1b", pp=8, vpp=3, engine="evaluator")
    assert base.makespan_ns == titan.makespan_ns == said.makespan_ns
    assert [names(c) for c in said.partition.chunks] == [names(c) for c in base.partition.chunks]


@pytest.mark.parametrize("engine", ["evaluator", "simpy"])
def test_makespan_of_a_tiny_file_with_known_costs(tmp_path, engine):
    # counts 0 1 1 0 over pp 4: F = 1 2 2 1 us, B = 1 4 4 2 us a stage, p2p free. 1F1B, M = 2:
    # forwards reach stage 3 at 5 (F0 to 6), B0 6-8, F1 8-9, B1 9-11; stage 2 B0 8-12, B1
    # 12-16; stage 1 B0 12-16, B1 16-20; stage 0 B0 16-17, B1 20-21
    r = simulate(write(tmp_path, TINY_ROWS), "1f1b", pp=4, microbatches=2, engine=engine, **BOTH)
    assert [names(c) for c in r.partition.chunks] == [
        ("embedding_layer",), ("attention_0", "mlp_0"), ("attention_1", "mlp_1"),
        ("final_norm", "cross_entropy")]
    assert r.makespan_ns == 21000


def test_full_recompute_replays_the_layers_not_the_end_chunks(tmp_path):
    # each layer's B also runs its 2 us forward again (B 6 us); the end chunks hold no layer:
    # stage 2 B0 8-14, B1 14-20; stage 1 B0 14-20, B1 20-26; stage 0 B1 26-27
    r = simulate(write(tmp_path, TINY_ROWS), "1f1b", pp=4, microbatches=2, engine="evaluator",
                 recompute="full", **BOTH)
    assert r.partition.recompute[0] == {} and r.partition.recompute[3] == {}
    assert r.makespan_ns == 27000


def test_a_launch_writes_megatrons_account_flags_and_torchtitans_parts(tmp_path):
    out = tmp_path / "launch"
    assert main(["run", write(tmp_path, TINY_ROWS), "-s", "1f1b", "--pp", "4",
                 "--microbatches", "4", "--engine", "evaluator", *FLAGS,
                 "--launch", str(out)]) == 0
    args = (out / "megatron_args.txt").read_text().split("\n")
    assert FLAGS[0] in args and FLAGS[1] in args
    assert ('module_fqns_per_model_part = [["tok_embeddings"], ["layers.0"], ["layers.1"], '
            '["norm", "lm_head"]]') in (out / "torchtitan.toml").read_text()


def test_generate_takes_a_megatron_launch_with_the_account_flags(tmp_path):
    args = tmp_path / "args.txt"
    args.write_text("--num-layers 22 --hidden-size 2304 --num-attention-heads 24 "
                    "--ffn-hidden-size 9216 --vocab-size 51200 --seq-length 1024 "
                    "--micro-batch-size 6 --global-batch-size 48 --fp16 "
                    "--pipeline-model-parallel-size 8 --num-virtual-stages-per-pipeline-rank 3 "
                    + " ".join(FLAGS) + "\n")
    path = tmp_path / "gen.txt"
    assert main(["generate", "--megatron-args", str(args), "-o", str(path)]) == 0
    wl = load_workload(path)
    assert wl.header.stage_layers == (0,) + (1,) * 22 + (0,)
    r = simulate(str(path), "interleaved-1f1b", engine="evaluator")
    assert names(r.partition.chunks[0]) == ("embedding_layer",)


# -- refusals -------------------------------------------------------------------------------------

def test_a_middle_stage_of_no_layers_in_the_header_is_refused(tmp_path):
    path = write(tmp_path, TINY_ROWS, "stage_layers: 1 0 1")
    with pytest.raises(WorkloadError) as err:
        load_workload(path)
    assert str(err.value) == (f"{path}:1:84: stage_layers: expected a layer count >= 1 per stage "
                              "after 'stage_layers:' (0 only for the first or the last stage), "
                              "found '0'")
    assert err.value.exit_code == 2


def test_an_end_stage_of_no_layers_with_no_rows_to_hold_is_refused(tmp_path):
    bare = TINY_ROWS[1:5]   # layers only: no embedding, no head
    path = write(tmp_path, bare, "stage_layers: 2 0")
    with pytest.raises(WorkloadError) as err:
        load_workload(path)
    assert str(err.value) == (
        f"{path}:1:68: stage_layers: expected a layer count >= 1 per stage, 0 only for the first "
        "stage where the file has rows before the first layer (the embedding) or the last where "
        "it has rows after the last (the LM head / loss), found '2 0 (stage 1 would hold no "
        "rows)'")


def test_the_account_flags_on_a_file_without_end_rows_are_refused_before_any_work(tmp_path,
                                                                                   capsys):
    path = write(tmp_path, TINY_ROWS[1:6])   # no embedding row; the final norm is the tail
    assert main(["run", path, "-s", "1f1b", "--pp", "4", "--microbatches", "2", *FLAGS]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert err == ("pipesim: error: --account-for-embedding-in-pipeline-split: expected every "
                   "chunk to hold a layer or the embedding / LM head rows; chunk 0 of 0 1 1 0 "
                   f"holds nothing in {path}\n")


def test_the_plain_split_is_still_refused_with_the_cut_message(gpt22, capsys):
    assert main(["run", gpt22, "-s", "interleaved-1f1b", "--pp", "8", "--vpp", "3"]) == 2
    assert capsys.readouterr().err.endswith(
        ": pp x vpp = 24 chunks would cut transformer layer 0 (rows attention_column..mlp_row, "
        "lines 4-7); the file's 22 transformer layers make at most 22 chunks of whole layers: "
        "expected pp x vpp <= 22\n")
    with pytest.raises(ConfigError):
        simulate(gpt22, "interleaved-1f1b", pp=8, vpp=3, engine="evaluator")


def test_a_header_split_no_flag_gives_is_written_as_megatrons_layout(tmp_path):
    # 0 2 over pp 2: 2 + 1 does not divide by 2, so no account flag gives it
    path = write(tmp_path, TINY_ROWS, "stage_layers: 0 2")
    out = tmp_path / "launch"
    assert main(["run", path, "-s", "1f1b", "--pp", "2", "--microbatches", "2",
                 "--engine", "evaluator", "--launch", str(out)]) == 0
    args = (out / "megatron_args.txt").read_text().split("\n")
    assert "--pipeline-model-parallel-layout E|t*2,L" in args
    assert ('module_fqns_per_model_part = [["tok_embeddings"], ["layers.0", "layers.1", "norm", '
            '"lm_head"]]') in (out / "torchtitan.toml").read_text()


def test_plan_lists_the_split_where_only_an_end_chunk_holds_no_layer():
    from simulator.planning.candidates import ScheduleChoice, enumerate_candidates

    split = tuple(PipelineSplit(None, None, True, True))
    choice = [ScheduleChoice("1f1b", False, 1)]
    with_rows = {c.pp: c.reason for c in enumerate_candidates(1, 4, 4, 2, choice, split=split,
                                                              ends=(True, True))}
    bare = {c.pp: c.reason for c in enumerate_candidates(1, 4, 4, 2, choice, split=split)}
    assert with_rows[4] is None            # 0 1 1 0: the embedding and the head alone
    assert bare[4] == "4 chunks for 2 layers"


def test_an_aicb_stage_file_splits_its_recovered_model_the_same_way(tmp_path):
    path = str(tmp_path / "aicb.txt")
    assert main(["generate", "--model", "gpt", "--layers", "22", "--hidden", "256", "--heads",
                 "4", "--seq", "128", "--micro-batch", "1", "--ga", "4", "--pp", "2",
                 "--layout", "aicb", "-o", path]) == 0
    r = simulate(path, "interleaved-1f1b", pp=8, vpp=3, microbatches=8, engine="evaluator",
                 **BOTH)
    chunks = r.partition.chunks
    assert (names(chunks[0]), names(chunks[23])) == (("embedding_layer",), ("final_column",))
    assert names(chunks[1]) == ("attention_column", "attention_row", "mlp_column", "mlp_row")


def test_generate_takes_the_split_options_the_run_takes(tmp_path, capsys):
    path = tmp_path / "gen.txt"
    shape = GPT22[:GPT22.index("--ga")]
    assert main(["generate", *shape, "--pp", "8", "--vpp", "3", *FLAGS, "-o", str(path)]) == 0
    assert load_workload(path).header.stage_layers == (0,) + (1,) * 22 + (0,)
    r = simulate(str(path), "interleaved-1f1b", engine="evaluator")
    assert (names(r.partition.chunks[0]), len(r.partition.chunks)) == (("embedding_layer",), 24)
    capsys.readouterr()
    # without them, as before; with one flag, Megatron-LM's refusal
    assert main(["generate", *shape, "--pp", "8", "--vpp", "3", "-o", str(path)]) == 2
    assert capsys.readouterr().err == "pipesim: error: --pp 8 x --vpp 3 chunks exceed --layers 22\n"
    assert main(["generate", *shape, "--pp", "8", "--vpp", "3", FLAGS[0], "-o", str(path)]) == 2
    assert capsys.readouterr().err == (
        "pipesim: error: --account-for-embedding-in-pipeline-split: expected 22 layers + 1 "
        "(embedding/loss) to split evenly over pp 8 x vpp 3 (Megatron-LM's even split), got 23 "
        "over 24 chunk(s)\n")
    assert main(["generate", *shape, "--pp", "8", "--vpp", "3", *FLAGS, "--layout", "aicb",
                 "-o", str(path)]) == 2
    assert capsys.readouterr().err == (
        "pipesim: error: --account-for-embedding-in-pipeline-split: expected --layout model (an "
        "AICB stage file holds one stage; give the split to `pipesim run`)\n")
