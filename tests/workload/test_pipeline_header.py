"""SimAI#283's pipeline header keys (``pp_schedule:``, ``stage_layers:``) and AICB 2.0's
``mode:``: the file's schedule runs unless -s says otherwise (in warnings), ``stage_layers:``
sets an uneven split in transformer layers, and counts that do not add up are refused on one
line naming file:line:column."""

from __future__ import annotations

import pytest

from simulator.api import simulate
from simulator.errors import ConfigError, WorkloadError
from simulator.workload.parser import load_workload, parse_workload_text
from simulator.workload.partition import partition
from simulator.workload.stage_layers import chunk_layers_of, n_model_layers

GPT = "workloads/gpt-24l.txt"
AICB = "workloads/generated/gpt3-175b-tp8-pp8-ga16-a100-aicb.txt"   # AICB stage layout


def with_keys(tmp_path, source: str, keys: str, name: str = "w.txt") -> str:
    head, rest = open(source).read().split("\n", 1)
    path = tmp_path / name
    path.write_text(f"{head} {keys}\n{rest}")
    return str(path)


def test_stage_layers_sets_an_uneven_split_in_transformer_layers(tmp_path):
    wl = load_workload(with_keys(tmp_path, GPT, "stage_layers: 5 6 6 7"))
    assert wl.header.stage_layers == (5, 6, 6, 7)
    part = partition(wl, 4)
    # rows: the embedding and 5 layers (2 rows each), 6, 6, then 7 layers and the LM head
    assert [len(c) for c in part.chunks] == [11, 12, 12, 15]
    assert [c[0].name for c in part.chunks] == ["embedding", "attention_5", "attention_11",
                                                "attention_17"]
    found = chunk_layers_of(wl, part.chunks)
    assert (found.counts, found.embedding_chunk, found.head_chunk, found.cut) == \
        ((5, 6, 6, 7), 0, 3, None)



def test_where_stage_layers_is_written_is_not_part_of_the_header(tmp_path):
    # the same keys in another order: equal headers, equal hashes, only the column differs
    a = load_workload(with_keys(tmp_path, GPT, "stage_layers: 5 6 6 7", "a.txt")).header
    b = load_workload(with_keys(tmp_path, GPT, "mode: 0 stage_layers: 5 6 6 7", "b.txt")).header
    b = b._replace(mode=None)
    assert a.stage_layers_column != b.stage_layers_column
    assert a == b and not a != b and hash(a) == hash(b)
    assert a != a._replace(stage_layers=(6, 6, 6, 6)) and a != tuple(a) and tuple(a) != a

def test_without_stage_layers_the_split_is_whole_layers(tmp_path):
    plain = simulate(GPT, engine="evaluator")
    other = simulate(with_keys(tmp_path, GPT, "stage_layers: 7 6 6 5"), engine="evaluator")
    even = simulate(with_keys(tmp_path, GPT, "stage_layers: 6 6 6 6", "e.txt"),
                    engine="evaluator")
    assert other.makespan_ns != plain.makespan_ns
    # 6 6 6 6 whole layers, the embedding row with the first and the LM head with the last
    # (an even split of the 50 rows, 13/13/12/12, would cut layer 6)
    assert [len(c) for c in plain.partition.chunks] == [13, 12, 12, 13]
    assert plain.makespan_ns == even.makespan_ns


def test_stage_layers_in_an_aicb_stage_file(tmp_path):
    counts = "11 " + "12 " * 6 + "13"
    wl = load_workload(with_keys(tmp_path, AICB, f"stage_layers: {counts}"))
    assert wl.layout == "aicb" and n_model_layers(wl) == 96
    found = chunk_layers_of(wl, partition(wl, 8).chunks)
    assert found.counts == (11,) + (12,) * 6 + (13,)


def test_counts_that_do_not_add_up_are_refused_on_one_line(tmp_path):
    path = with_keys(tmp_path, GPT, "stage_layers: 5 6 6 6")
    with pytest.raises(WorkloadError) as err:
        load_workload(path)
    assert str(err.value) == (f"{path}:1:170: stage_layers: expected layer counts adding up to "
                              "the file's 24 transformer layers, found '5 6 6 6 (sum 23)'")
    assert err.value.exit_code == 2


def test_a_count_that_is_not_a_positive_integer_is_refused():
    # 0 is for an end stage only (the rows it would hold decide: test_zero_layer_ends.py)
    head = "HYBRID_TRANSFORMER pp: 3 stage_layers: 1 0 1 ga: 2\n3\n"
    rows = "".join(f"l{i}\t-1\t1\tNONE\t0\t1\tNONE\t0\t1\tNONE\t0\t0\n" for i in range(3))
    with pytest.raises(WorkloadError) as err:
        parse_workload_text(head + rows, "s.txt")
    assert str(err.value) == ("s.txt:1:42: stage_layers: expected a layer count >= 1 per stage "
                              "after 'stage_layers:' (0 only for the first or the last stage), "
                              "found '0'")
    with pytest.raises(WorkloadError) as err:
        parse_workload_text(head.replace("1 0 1", "1 -1 1") + rows, "s.txt")
    assert str(err.value).endswith(", found '-1'")


def test_a_run_with_another_number_of_stages_is_refused(tmp_path):
    path = with_keys(tmp_path, GPT, "stage_layers: 5 6 6 7")
    with pytest.raises(ConfigError) as err:
        simulate(path, pp=2)
    assert str(err.value) == (f"{path}:1: stage_layers: gives 4 stages (5 6 6 7), the run has "
                              "pp x vpp = 2; set --pp/--vpp to match or drop stage_layers: from "
                              "the header")


def test_the_files_schedule_runs_and_says_so(tmp_path):
    path = with_keys(tmp_path, GPT, "pp_schedule: zb-h1")
    res = simulate(path, engine="evaluator")
    assert res.schedule.name == "zb-h1"
    assert res.makespan_ns == simulate(GPT, "zb-h1", engine="evaluator").makespan_ns
    assert [(w.code, w.message, w.option) for w in res.warnings
            if w.code not in ("activation_assumed", "params_assumed", "memory_per_param_default")] == [
        ("schedule_from_file", f"{path}: runs zb-h1, the schedule its header names "
                               "(pp_schedule: zb-h1)", "-s")]


def test_dash_s_overrides_the_files_schedule_and_says_so(tmp_path):
    path = with_keys(tmp_path, GPT, "pp_schedule: interleaved")
    res = simulate(path, "gpipe", engine="evaluator")
    assert res.schedule.name == "gpipe"
    assert [(w.code, w.message) for w in res.warnings if w.code not in ("activation_assumed", "params_assumed", "memory_per_param_default")] == [
        ("schedule_file_overridden", f"{path}: its header names pp_schedule: interleaved; "
                                     "-s gpipe runs instead")]


def test_an_unknown_schedule_name_is_refused(tmp_path):
    path = with_keys(tmp_path, GPT, "pp_schedule: threefb")
    with pytest.raises(ConfigError) as err:
        simulate(path)
    assert str(err.value) == (f"{path}:1: pp_schedule: expected a registered schedule "
                              "(pipesim schedule --list), found 'threefb'")


def test_mode_is_read_and_inference_said():
    head = "HYBRID_TRANSFORMER model_parallel_NPU_group: 1 pp: 1 mode: 1 ga: 1 all_gpus: 1 ep: 1 vpp: 1 pp_comm: 0\n1\n"
    w = parse_workload_text(head + "l0\t-1\t1\tNONE\t0\t1\tNONE\t0\t1\tNONE\t0\t0\n", "m.txt")
    assert w.header.mode == "1" and w.header.unknown_keys == ()
    assert w.warnings == ("m.txt:1: mode: 1 (AICB: an inference trace); pipesim simulates "
                          "training iterations from the rows as written",)
