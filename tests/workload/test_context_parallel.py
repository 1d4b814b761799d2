"""Context parallelism (Megatron-LM's --context-parallel-size, torchtitan's
context_parallel_degree): each rank holds s/cp tokens of every sequence, so its linears, norms,
loss, pipeline sends and memory are those of the sequence s/cp, while its attention runs its
queries against the whole sequence's keys; the gradients are reduced over dp x cp ranks."""

from __future__ import annotations

import json

import pytest

from simulator.cli.main import main
from simulator.errors import ConfigError
from simulator.workload.generator import ModelSpec, ParallelSpec, generate_rows, header_line, \
    render
from simulator.workload.gpus import gpu_preset
from simulator.workload.inputs.megatron_args import megatron_input
from simulator.workload.inputs.torchtitan_job import read_torchtitan_job

LLAMA = dict(arch="llama", layers=2, hidden=4096, heads=32, kv_heads=8, ffn=14336,
             vocab=128256, micro_batch=1)
SRC = "--megatron-args a.txt"
CP_WARNING = (f"{SRC}: --context-parallel-size 2: each rank's linears, norms, loss and memory "
              "are its s/2 tokens' and its attention its queries' against all keys; the "
              "exchange of K and V between the context-parallel ranks (Transformer Engine's "
              "ring of p2p, torchtitan's all-gather) is not priced, taken as hidden behind the "
              "attention")
ARGS = ("--num-layers 8 --hidden-size 4096 --ffn-hidden-size 14336 --num-attention-heads 32 "
        "--group-query-attention --num-query-groups 8 --swiglu --normalization RMSNorm "
        "--disable-bias-linear --position-embedding-type rope "
        "--untie-embeddings-and-output-weights --vocab-size 128256 --seq-length 16384 "
        "--max-position-embeddings 16384 --micro-batch-size 1 --global-batch-size 16 "
        "--tensor-model-parallel-size 2 --pipeline-model-parallel-size 2 "
        "--context-parallel-size 2 --sequence-parallel --bf16 --use-mcore-models "
        "--transformer-impl transformer_engine --use-distributed-optimizer "
        "--overlap-grad-reduce --overlap-param-gather")


def _rows(seq: int, cp: int) -> dict:
    model = ModelSpec(seq=seq, **LLAMA)
    par = ParallelSpec(tp=2, pp=1, ga=2, dp=2, cp=cp)
    return {r.name: r for r in generate_rows(model, par)}, model, par


def test_a_rank_of_cp_2_at_2s_is_a_rank_at_s_except_for_its_attention():
    one, m1, p1 = _rows(8192, 1)
    two, m2, p2 = _rows(16384, 2)
    for name in one:
        if name == "attention_column":
            continue
        a, b = one[name], two[name]
        assert (a.fwd_comm, a.ig_comm, a.wg_comm, a.params, a.ops) == \
            (b.fwd_comm, b.ig_comm, b.wg_comm, b.params, b.ops), name
    # the header's bytes (activations, transient memory, the pipeline's send) are the same;
    # its world doubles, so the gradients are reduced over dp x cp = 4 ranks
    h1, h2 = header_line(m1, p1, "model"), header_line(m2, p2, "model")
    assert h2 == h1.replace("all_gpus: 4 ", "all_gpus: 8 ")
    # the attention: 8192 queries against 16384 keys, 1/2 of the causal square of 16384:
    # 4 b (A/T) (s/cp) s d / 2 = 4 x 16 x 8192 x 16384 x 128 / 2, in blocks of 8192 tokens
    flash = {o.name: o for o in two["attention_column"].ops if o.kind == "flash"}
    assert flash["flash_attention"].flops == 4 * 16 * 8192 * 16384 * 128 // 2 == 549755813888
    assert flash["flash_attention"].seq == 8192
    assert flash["flash_attention_bwd"].flops == 549755813888 * 5 // 2
    # twice the single rank's: its queries see twice the keys
    ref = {o.name: o for o in one["attention_column"].ops if o.kind == "flash"}
    assert flash["flash_attention"].flops == 2 * ref["flash_attention"].flops


@pytest.mark.parametrize("seq, flash, line", [
    (32768, True, "--seq 32768 is not a multiple of 2 x --cp 3 (context parallelism splits "
                  "each sequence into 2 x cp chunks)"),
    (24576, False, "--cp 3: expected flash (fused) attention with context parallelism "
                   "(Megatron-LM runs it only with Transformer Engine's fused attention)"),
])
def test_what_megatron_refuses_with_context_parallelism_is_refused(seq, flash, line):
    with pytest.raises(ConfigError) as err:
        render(ModelSpec(seq=seq, **LLAMA), ParallelSpec(tp=1, cp=3, flash_attention=flash),
               gpu_preset("h100"))
    assert str(err.value) == line


def test_megatron_args_read_the_context_parallel_size():
    got = megatron_input(ARGS, "a.txt", 16)
    la = got.launch
    # 16 GPUs = tp 2 x pp 2 x cp 2 x dp 2; 16 sequences over dp 2: 8 microbatches
    assert (la.tp, la.pp, la.cp, la.dp, la.microbatches) == (2, 2, 2, 2, 8)
    assert CP_WARNING in got.warnings
    with pytest.raises(ConfigError) as err:
        megatron_input(ARGS, "a.txt", 12)
    assert str(err.value) == ("--megatron-args a.txt: --gpus 12: expected a multiple of "
                              "--tensor-model-parallel-size 2 x --pipeline-model-parallel-size "
                              "2 x --context-parallel-size 2")


def test_torchtitan_shards_over_dp_shard_x_cp(tmp_path):
    path = tmp_path / "job.toml"
    path.write_text('[model]\nname = "llama3"\nflavor = "8B"\n[training]\nlocal_batch_size = 4\n'
                    'seq_len = 8192\n[parallelism]\ncontext_parallel_degree = 2\n'
                    'data_parallel_shard_degree = 2\n')
    got = read_torchtitan_job(str(path), gpus=4)
    la = got.launch
    assert (la.cp, la.dp, la.fsdp, la.gpus) == (2, 2, 4, 4)
    src = f"--torchtitan {path}"
    assert (f"{src}: [parallelism] context_parallel_degree 2: each rank's linears, norms, loss "
            "and memory are its s/2 tokens'") in "\n".join(got.warnings)
    assert any(w.startswith(f"{src}: [parallelism] data_parallel_shard_degree 2 x "
                            "context_parallel_degree 2: FSDP (--fsdp 4)") for w in got.warnings)


def test_a_context_parallel_launch_reads_back_to_its_numbers(tmp_path, capsys):
    args = tmp_path / "a.txt"
    args.write_text(ARGS)
    out1, out2, launch = tmp_path / "1.json", tmp_path / "2.json", tmp_path / "launch"
    common = ["--gpus", "16", "--system", "configs/system/h100.yaml", "--engine", "evaluator"]
    assert main(["run", "--megatron-args", str(args), *common, "--json", str(out1),
                 "--launch", str(launch)]) == 0
    written = (launch / "megatron_args.txt").read_text()
    assert "--context-parallel-size 2" in written.split("\n")
    assert "context_parallel_degree = 2" in (launch / "torchtitan.toml").read_text()
    assert "TP 2 x PP 2 x CP 2 x DP 2" in (launch / "README.md").read_text()
    assert main(["run", "--megatron-args", str(launch / "megatron_args.txt"), *common,
                 "--json", str(out2)]) == 0
    a, b = json.loads(out1.read_text()), json.loads(out2.read_text())
    assert (a["makespan_ns"], a["peak_memory_bytes"]) == (b["makespan_ns"],
                                                          b["peak_memory_bytes"])
    capsys.readouterr()
    # the distributed optimizer shards Adam's fp32 state (12 B a parameter) over dp x cp = 4
    made = a["ranks"][0]["peak_memory_breakdown"]
    assert made["optimizer"] == made["weights"] // 2 * 12 // 4 == 2096726016


def test_plan_says_it_plans_without_the_files_context_parallelism(tmp_path, capsys):
    args = tmp_path / "a.txt"
    args.write_text(ARGS)
    rc = main(["plan", "--megatron-args", str(args), "--gpus", "16", "--system",
               "configs/system/h100.yaml", "--tp", "2", "--json", str(tmp_path / "p.json"),
               "--schedules", "1f1b"])
    err = capsys.readouterr()
    assert rc == 0, err.err
    d = json.loads((tmp_path / "p.json").read_text())
    messages = [w["message"] if isinstance(w, dict) else w for w in d["warnings"]]
    assert (f"--megatron-args {args}: plan's candidates run without the file's context "
            "parallelism 2 (each holds whole sequences; tp x pp x dp is the GPU count)") \
        in messages


@pytest.mark.parametrize("edit, line", [
    (("--seq-length 16384", "--seq-length 16382"),
     "--seq-length: expected a multiple of 2 x --context-parallel-size 2, found 16382"),
    (("--use-mcore-models --transformer-impl transformer_engine ", ""),
     "--context-parallel-size: expected 1 without Transformer Engine's fused attention "
     "(Megatron-LM runs context parallelism only with it), found 2"),
    (("--context-parallel-size 2", "--context-parallel-size 0"),
     "--context-parallel-size: expected a positive integer, found 0"),
])
def test_a_launch_file_megatron_refuses_is_refused_naming_its_flag(edit, line):
    with pytest.raises(ConfigError) as err:
        megatron_input(ARGS.replace(*edit), "a.txt", 16)
    assert str(err.value) == f"{SRC}: {line}"


def test_a_torchtitan_sequence_cp_cannot_split_is_refused(tmp_path):
    path = tmp_path / "job.toml"
    path.write_text('[model]\nname = "llama3"\nflavor = "8B"\n[training]\nlocal_batch_size = 4\n'
                    'seq_len = 8190\n[parallelism]\ncontext_parallel_degree = 2\n')
    with pytest.raises(ConfigError) as err:
        read_torchtitan_job(str(path), gpus=2)
    assert str(err.value) == (f"--torchtitan {path}: [training] seq_len: expected a multiple of "
                              "2 x context_parallel_degree 2, found 8190")
