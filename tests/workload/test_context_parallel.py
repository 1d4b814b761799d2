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

from model_flag_runs import H100, generated_and_flags, plan_json

LLAMA = dict(arch="llama", layers=2, hidden=4096, heads=32, kv_heads=8, ffn=14336,
             vocab=128256, micro_batch=1)
SRC = "--megatron-args a.txt"
CP_WARNING = (f"{SRC}: --context-parallel-size 2: each rank's linears, norms, loss and memory "
              "are its s/2 tokens' and its attention its queries' against all keys, in 2 ring "
              "steps of equal work (the load-balanced split), each step's K/V transfer to the "
              "next rank hidden behind the step's attention up to its length (Transformer "
              "Engine's ring of p2p; torchtitan's exchange is priced as the same ring)")
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


def test_plan_runs_its_candidates_at_the_files_context_parallelism(tmp_path, capsys):
    args = tmp_path / "a.txt"
    args.write_text(ARGS)
    rc, d = plan_json(tmp_path, "--megatron-args", str(args), "--gpus", "16", "--tp", "2")
    assert rc == 0, capsys.readouterr().err
    ran = [c for c in d["candidates"] if c["schedule"] == "1f1b" and c["reason"] is None]
    # 16 GPUs over tp 2 x cp 2: pp 1, 2, 4 with dp 4, 2, 1 and M = 16 / dp microbatches
    assert sorted((c["cp"], c["pp"], c["dp"], c["microbatches"]) for c in ran) == [
        (2, 1, 4, 4), (2, 2, 2, 8), (2, 4, 1, 16)]
    assert all(c["key"].endswith("-cp2") for c in d["candidates"])
    messages = [w["message"] if isinstance(w, dict) else w for w in d["warnings"]]
    assert not any("context parallelism 2 (each holds whole" in m for m in messages)
    # the winner's command runs the generated file at cp 2 to the plan's own numbers
    best = d["best"]
    words = best["command"].split()
    assert words[2] == str(tmp_path / "plan-llama-8l-tp2-cp2.txt")
    assert (tmp_path / "plan-llama-8l-tp2-cp2.txt").read_text() == render(
        ModelSpec(seq=16384, **{**LLAMA, "layers": 8}), ParallelSpec(tp=2, dp=4, cp=2),
        gpu_preset("h100"), "model")
    capsys.readouterr()
    assert main(words[1:] + ["--json", str(tmp_path / "r.json")]) == 0
    r = json.loads((tmp_path / "r.json").read_text())
    assert (r["makespan_ns"], r["peak_memory_bytes"]) == (best["makespan_ns"],
                                                          best["peak_memory_bytes"])


def test_plan_of_the_model_flags_takes_cp_and_shards_fsdp_over_dp_x_cp(tmp_path, capsys):
    model = ["--model", "llama", "--layers", "8", "--hidden", "4096", "--heads", "32",
             "--kv-heads", "8", "--ffn", "14336", "--vocab", "128256", "--seq", "16384",
             "--micro-batch", "1", "--gpu", "h100", "--global-batch-size", "16"]
    rc, d = plan_json(tmp_path, *model, "--cp", "4", "--gpus", "32", "--tp", "2", "--param-dtype",
                  "bf16", "--fsdp")
    assert rc == 0, capsys.readouterr().err
    best = d["best"]
    assert (best["tp"], best["cp"]) == (2, 4)
    assert best["dp"] == 32 // (2 * 4 * best["pp"])
    # torchtitan's FSDP shards over dp_shard x cp: the run's --fsdp is dp x cp
    assert f"--fsdp {best['dp'] * 4}" in best["command"]
    messages = [w["message"] if isinstance(w, dict) else w for w in d["warnings"]]
    assert any(m.startswith("--cp 4: each rank's linears, norms, loss and memory are its s/4 "
                            "tokens'") for m in messages)


@pytest.mark.parametrize("extra, line", [
    (["--cp", "4", "--gpus", "12"], "--gpus 12: expected a multiple of --tp 2 x --cp 4"),
    (["--cp", "0", "--gpus", "16"], "--cp: expected a positive integer, found 0"),
    (["--cp", "3", "--gpus", "12"], "--tp 2: --seq 16384 is not a multiple of 2 x --cp 3 "
                                    "(context parallelism splits each sequence into 2 x cp "
                                    "chunks)"),
    (["--cp", "2", "--gpus", "16", "--fsdp", "--use-distributed-optimizer", "--param-dtype",
      "bf16"], "--fsdp and --use-distributed-optimizer: give one (FSDP shards the optimizer "
               "state itself)"),
])
def test_plan_refuses_a_context_parallel_size_that_cannot_run(tmp_path, capsys, extra, line):
    model = ["--model", "llama", "--layers", "8", "--hidden", "4096", "--heads", "32",
             "--kv-heads", "8", "--seq", "16384", "--micro-batch", "1", "--gpu", "h100",
             "--global-batch-size", "16", "--tp", "2"]
    rc, _ = plan_json(tmp_path, *model, *extra)
    assert rc == 2
    assert capsys.readouterr().err.strip().splitlines()[-1] == f"pipesim: error: {line}"


LONG = ["--model", "llama", "--layers", "8", "--hidden", "4096", "--heads", "32", "--kv-heads",
        "8", "--ffn", "14336", "--vocab", "128256", "--seq", "65536", "--micro-batch", "1",
        "--gpu", "h100", "--global-batch-size", "4", "--param-dtype", "bf16",
        "--use-distributed-optimizer"]


def test_plan_searches_the_context_parallel_sizes_up_to_cp_max(tmp_path, capsys):
    rc, d = plan_json(tmp_path, *LONG, "--cp-max", "4", "--gpus", "16", "--tp", "2",
                  "--launch", str(tmp_path / "launch"))
    assert rc == 0, capsys.readouterr().err
    # 16 GPUs at tp 2: cp 1, 2 and 4, each with every pp of 16 / (2 cp), dp the rest
    shapes = {(c["cp"], c["pp"], c["dp"]) for c in d["candidates"] if c["schedule"] == "1f1b"}
    assert shapes == {(cp, pp, 8 // (cp * pp)) for cp in (1, 2, 4) for pp in (1, 2, 4, 8)
                      if cp * pp <= 8}
    assert all(c["key"].endswith(f"-cp{c['cp']}") == (c["cp"] > 1) for c in d["candidates"])
    # a 64k sequence, 4 sequences a batch: at pp 1, cp 1 leaves a batch of 4 to 8 DP ranks
    # (refused) and its pipelined shapes bubble; cp 2 at pp 1 (M 1) wins, 0.4 % ahead of cp 4
    # (M 2), whose attention runs in blocks of s/4, at a lower flash rate than s/2's
    ran = {(c["cp"], c["pp"]): c for c in d["candidates"] if c["schedule"] == "1f1b"}
    assert ran[(1, 1)]["reason"] == "global batch 4 is not a multiple of DP 8"
    best = d["best"]
    assert (best["cp"], best["pp"], best["schedule"]) == (2, 1, "1f1b"), best
    assert best["makespan_ns"] < ran[(4, 1)]["makespan_ns"] < ran[(1, 2)]["makespan_ns"]
    messages = [w["message"] if isinstance(w, dict) else w for w in d["warnings"]]
    assert any(m.startswith("--cp-max 4: each rank's linears, norms, loss and memory are its "
                            "s/cp tokens'") for m in messages)
    words = best["command"].split()
    assert words[2].endswith("-tp2-cp2.txt")
    capsys.readouterr()
    assert main(words[1:] + ["--json", str(tmp_path / "r.json")]) == 0
    r = json.loads((tmp_path / "r.json").read_text())
    assert (r["makespan_ns"], r["peak_memory_bytes"]) == (best["makespan_ns"],
                                                          best["peak_memory_bytes"])
    # the launch the winner is written as runs at its own context parallelism
    assert "--context-parallel-size 2" in (tmp_path / "launch" / "megatron_args.txt"
                                           ).read_text().split("\n")


@pytest.mark.parametrize("extra, line", [
    (["--cp", "2", "--cp-max", "4"], "--cp 2 and --cp-max 4: give one (the context-parallel "
                                     "size, or the largest one searched)"),
    (["--cp-max", "4", "--tp", "16"], "--cp-max 4: no context-parallel size fits the model at "
                                      "--tp 16; TP 16 CP 1: --kv-heads 8 must divide --heads "
                                      "32 and be a multiple of --tp 16"),
])
def test_plan_refuses_a_context_parallel_search_that_cannot_run(tmp_path, capsys, extra, line):
    rc, _ = plan_json(tmp_path, *LONG, "--gpus", "16", *extra)
    assert rc == 2
    assert capsys.readouterr().err.strip().splitlines()[-1] == f"pipesim: error: {line}"


def test_plan_of_a_workload_file_refuses_cp(tmp_path, capsys):
    wl = tmp_path / "w.txt"
    wl.write_text(render(ModelSpec(seq=16384, **LLAMA), ParallelSpec(tp=2, dp=2, cp=2),
                         gpu_preset("h100"), "model"))
    for flag in ("--cp", "--cp-max"):
        rc, _ = plan_json(tmp_path, str(wl), flag, "2", "--gpus", "8")
        assert rc == 2
        assert capsys.readouterr().err.strip().splitlines()[-1] == (
            f"pipesim: error: {flag} 2: expected the model flags or a launch file (plan "
            f"generates its candidates at a context parallelism); {wl}'s rows hold the "
            "sequence share they were generated for")


def test_run_of_the_model_flags_takes_cp_as_generate_does(tmp_path, capsys):
    model = ["--model", "llama", "--layers", "2", "--hidden", "4096", "--heads", "32",
             "--kv-heads", "8", "--ffn", "14336", "--vocab", "128256", "--seq", "16384",
             "--micro-batch", "1", "--tp", "2"]
    a, b = generated_and_flags(tmp_path, model, ["--cp", "2"], 2, 8)
    assert (a["makespan_ns"], a["peak_memory_bytes"]) == (b["makespan_ns"],
                                                          b["peak_memory_bytes"])
    assert any(w["message"].startswith("--cp 2: each rank's linears") for w in b["warnings"])
    capsys.readouterr()
    args = tmp_path / "a.txt"
    args.write_text(ARGS)
    assert main(["run", "--megatron-args", str(args), "--cp", "4", "--gpus", "8", "--system",
                 H100]) == 2
    assert capsys.readouterr().err.strip().splitlines()[-1] == (
        "pipesim: error: --cp 4: the launch file says 2; give one")


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


def test_the_header_states_the_ring_its_kv_bytes_and_steps():
    model = ModelSpec(seq=16384, **LLAMA)
    par = ParallelSpec(tp=2, dp=2, cp=2)
    head = render(model, par, gpu_preset("h100"), "model").split("\n", 1)[0]
    # K and V of the rank's 8192 tokens for its 4 of the 8 query groups, 128 wide, bf16; one
    # step is the flash kernel's time over the 2 steps (ns, as the rows price it)
    from simulator.workload.generator import cp_ring

    kv, f, b = cp_ring(model, par, gpu_preset("h100"))
    assert kv == 2 * 8192 * 4 * 128 * 2 == 16777216
    assert f"cp: 2 cp_kv_bytes: {kv} cp_fwd_step_ns: {f} cp_bwd_step_ns: {b} " in head
    assert "cp:" not in render(model, ParallelSpec(tp=2, dp=4), gpu_preset("h100"),
                               "model").split("\n", 1)[0]


@pytest.mark.parametrize("cp, fwd, bwd", [
    # 4 ranks at TP 2 share a node: NVLink, 3600 Gb/s and 1 us. A block (1 MB) crosses in
    # 2222.2 + 1000 ns: 2222.2 shows beyond each 1000 ns forward step (3 of them), nothing
    # beyond the 5000 ns backward steps that send one block, 444.4 beyond the 2 that send two
    (4, 3 * 2222.2222, 2 * 444.4444),
    # 8 ranks at TP 2 span two nodes: one NIC each, 400 Gb/s and 5 us: a block in 25,000 ns
    (8, 7 * 24000.0, 2 * 20000.0 + 6 * 40000.0),
])
def test_the_ring_adds_what_each_step_s_transfer_shows_beyond_its_attention(cp, fwd, bwd):
    """A ring of cp ranks sending 1 MB a step behind 1000 ns forward and 5000 ns backward
    steps: the forward's cp - 1 transfers of K and V, the backward's two of one block and
    cp - 2 of two (K, V and their gradients)."""
    from simulator.engine.costs import cp_ring_exposed
    from simulator.system.config import load_system
    from simulator.system.topology import LinkModel
    from simulator.workload.model import Header

    header = Header("HYBRID_TRANSFORMER_FWD_IN_BCKWD", tp=2, all_gpus=2 * cp, cp=cp,
                    cp_kv_bytes=1_000_000, cp_fwd_step_ns=1000, cp_bwd_step_ns=5000)
    links = LinkModel(header, load_system("configs/system/h100.yaml"), 1)
    assert cp_ring_exposed(header, links) == (pytest.approx(fwd), pytest.approx(bwd))


def test_a_run_adds_the_ring_to_each_attention_row(tmp_path):
    """The same file with its ring's bytes set to 0: every attention row's forward and input
    gradient differ by what cp_ring_exposed gives, nothing else does."""
    from simulator import simulate
    from simulator.engine.costs import cp_ring_exposed
    from simulator.system.topology import LinkModel

    model = ModelSpec(seq=131072, **{**LLAMA, "kv_heads": 32})
    text = render(model, ParallelSpec(tp=2, dp=1, cp=8), gpu_preset("h100"), "model")
    ring, free = tmp_path / "ring.txt", tmp_path / "free.txt"
    ring.write_text(text)
    head, rest = text.split("\n", 1)
    kv = next(t for t in head.split("cp_kv_bytes: ")[1].split())
    free.write_text(head.replace(f"cp_kv_bytes: {kv}", "cp_kv_bytes: 0") + "\n" + rest)
    a, b = (simulate(str(p), "1f1b", "configs/system/h100.yaml", gpus=16) for p in (ring, free))
    f, i = cp_ring_exposed(a.workload.header, LinkModel(a.workload.header, a.system, 1))
    assert f > 0
    attention = sum(1 for layer in a.workload.layers if layer.name == "attention_column")
    assert a.to_dict()["makespan_ns"] - b.to_dict()["makespan_ns"] == pytest.approx(
        attention * (f + i))
