"""``--hf-config``, ``--megatron-args`` and ``--torchtitan`` on run, compare, plan and generate,
as a user sees them: exit codes, one-line refusals, warnings in the JSON and the report,
``--strict``, and the round trip run/plan -> ``--launch`` -> read back -> the same numbers."""

from __future__ import annotations

import json
import tomllib

import pytest

from model_flag_runs import BUILTIN_A100, NO_MEMORY_LIMIT, launch_runs
from simulator.cli.main import main
from simulator.units import fmt_bytes
from simulator.workload.inputs.megatron_args import read_megatron_args

# uneven first/last ranks with 2 virtual stages: Megatron writes it back as a layout
UNEVEN = ("--num-layers 30 --hidden-size 2048 --num-attention-heads 16 --seq-length 2048 "
          "--max-position-embeddings 4096 --micro-batch-size 2 --global-batch-size 64 "
          "--tensor-model-parallel-size 2 --pipeline-model-parallel-size 4 "
          "--decoder-first-pipeline-num-layers 6 --decoder-last-pipeline-num-layers 4 "
          "--num-virtual-stages-per-pipeline-rank 2 --bf16 --swiglu --normalization RMSNorm "
          "--disable-bias-linear --group-query-attention --num-query-groups 4 "
          "--untie-embeddings-and-output-weights --vocab-size 32000 --sequence-parallel "
          "--use-flash-attn --use-distributed-optimizer --overlap-grad-reduce")




def _run(args, capsys) -> tuple[int, str, str]:
    rc = main(args)
    out = capsys.readouterr()
    return rc, out.out, out.err


def _json(path) -> dict:
    return json.loads(path.read_text())


def test_run_from_a_config_json_warns_what_it_cannot_express(hf_configs_dir, tmp_path, capsys):
    cfg = str(hf_configs_dir / "mistral-7b-v0.1.json")
    out = tmp_path / "r.json"
    rc, text, _ = _run(["run", "--hf-config", cfg, "--seq", "8192", "--micro-batch", "1",
                        "--tp", "4", "--pp", "4", "-m", "8", "--gpus", "16", "--engine",
                        "evaluator", "--json", str(out)], capsys)
    assert rc == 0
    d = _json(out)
    assert d["pp"] == 4 and d["microbatches"] == 8
    mine = [w for w in d["warnings"] if w["code"] == "model_input"]
    assert [w["message"] for w in mine] == [
        f"--hf-config {cfg}: sliding_window: 4096: attention is priced over the whole causal "
        "sequence; with sequences longer than 4096 tokens the model attends to fewer",
        "no --gpu, and the system names no GPU (gpu.preset in --system): the generated "
        "workload's kernels are priced on the a100 preset", BUILTIN_A100]
    assert "sliding_window: 4096" in text
    # 32 layers over 4 stages: whole layers, so Megatron-LM and torchtitan run it
    assert d["runtimes"]["megatron"]["accepts"] and d["runtimes"]["torchtitan"]["accepts"]
    rc, _, err = _run(["run", "--hf-config", cfg, "--seq", "8192", "--tp", "4", "--pp", "4",
                       "-m", "8", "--gpus", "16", "--strict"], capsys)
    assert rc == 2
    assert err == (f"pipesim: error: --strict: --hf-config {cfg}: sliding_window: 4096: "
                   "attention is priced over the whole causal sequence; with sequences longer "
                   "than 4096 tokens the model attends to fewer [model_input]\n")


def test_run_of_the_shape_alone_warns_its_one_stage_and_one_microbatch(hf_configs_dir,
                                                                        tmp_path, capsys):
    cfg = str(hf_configs_dir / "llama-3.1-8b.json")
    out = tmp_path / "r.json"
    assert _run(["run", "--hf-config", cfg, "--seq", "2048", "--gpu", "a100", "--json",
                 str(out)], capsys)[0] == 0
    assert [w["message"] for w in _json(out)["warnings"] if w["code"] == "model_input"] == [
        f"--hf-config {cfg}: no --pp and no launch file: 1 pipeline stage",
        f"--hf-config {cfg}: no -m and no launch file: 1 microbatch per iteration", BUILTIN_A100]


def test_run_and_compare_take_the_global_batch_as_megatron_counts_it(hf_configs_dir,
                                                                       tmp_path, capsys):
    """--global-batch-size B (sequences, as plan takes it): -m = B / (micro-batch x DP), the
    run the same as its -m, and no 'no -m' warning."""
    cfg = str(hf_configs_dir / "qwen2-1.5b.json")
    base = ["--hf-config", cfg, "--seq", "1024", "--micro-batch", "2", "--tp", "2", "--pp",
            "2", "--gpus", "16", "--gpu", "a100"]
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    # DP = 16 / (2 x 2) = 4: 64 sequences are 64 / (2 x 4) = 8 microbatches
    assert _run(["run", *base, "--global-batch-size", "64", "--json", str(a)], capsys)[0] == 0
    assert _run(["run", *base, "-m", "8", "--json", str(b)], capsys)[0] == 0
    ra, rb = _json(a), _json(b)
    assert ra["microbatches"] == 8 and ra["makespan_ns"] == rb["makespan_ns"]
    assert not [w for w in ra["warnings"] if "no -m" in w["message"]]
    d = tmp_path / "d.json"    # DP given as --dp 4 instead of the GPUs
    dp_base = [x if x != "--gpus" else "--dp" for x in base]
    dp_base[dp_base.index("--dp") + 1] = "4"
    assert _run(["run", *dp_base, "--global-batch-size", "64", "--json", str(d)], capsys)[0] == 0
    assert _json(d)["microbatches"] == 8
    c = tmp_path / "c.json"
    assert _run(["compare", "-s", "1f1b,zb-h1", *base, "--global-batch-size", "64", "--json",
                 str(c)], capsys)[0] == 0
    rows = _json(c)
    assert (rows[0]["schedule"], rows[0]["microbatches"], rows[0]["makespan_ns"]) == (
        "1f1b", 8, rb["makespan_ns"])


REFUSED = [
    (["run", "workloads/gpt-24l.txt", "--hf-config", "{cfg}", "--seq", "8"],
     "WORKLOAD workloads/gpt-24l.txt and the model flags / files: give one"),
    (["run", "--hf-config", "{cfg}"],
     "--seq: needed with --hf-config {cfg} (the training sequence length; a config states "
     "only the longest it was built for)"),
    (["run", "--hf-config", "{cfg}", "--model", "gpt", "--layers", "2", "--hidden", "64",
      "--heads", "4", "--seq", "8"],
     "--hf-config {cfg} and --model: give one shape, not both (the config states the layers, "
     "hidden size and heads)"),
    (["compare", "-s", "1f1b", "--megatron-args", "{args}", "--torchtitan", "{args}"],
     "--megatron-args {args} and --torchtitan {args}: give one launch's settings, not both"),
    (["run", "--megatron-args", "{args}", "--seq", "4096", "--gpus", "16"],
     "--seq 4096: the launch file says 2048; give one"),
    (["run", "--hf-config", "{cfg}", "--megatron-args", "{args}", "--gpus", "16"],
     "--megatron-args {args}: --num-layers: expected 28 as --hf-config {cfg} says, found 30"),
    (["generate", "--layers", "4", "--hidden", "64", "--heads", "4", "--seq", "8",
      "--micro-batch", "1", "-o", "-"],
     "--layers: needs --model (gpt, llama or moe) with the other shape flags, or a file that "
     "states the shape (--hf-config)"),
    (["run", "--hf-config", "{cfg}", "--seq", "8", "--gpus", "8", "--global-batch-size", "12"],
     "--global-batch-size 12: expected a multiple of --micro-batch 1 x DP 8 = 8"),
    (["run", "--hf-config", "{cfg}", "--seq", "8", "--global-batch-size", "8"],
     "--global-batch-size 8: needs --gpus (DP = N / (TP x CP x PP)) or --dp"),
    (["run", "--hf-config", "{cfg}", "--seq", "8", "--gpus", "8", "--global-batch-size", "8",
      "-m", "2"],
     "--global-batch-size 8 and -m 2: give one (-m counts one pipeline's microbatches)"),
    (["run", "--megatron-args", "{args}", "--gpus", "16", "--global-batch-size", "32"],
     "--global-batch-size 32: the launch file says 64; give one"),
    (["run", "workloads/gpt-24l.txt", "--global-batch-size", "32"],
     "--global-batch-size: for a model input (the model flags, --hf-config, a launch file); "
     "WORKLOAD workloads/gpt-24l.txt states its microbatches (ga:), -m overrides them"),
    (["plan", "--megatron-args", "{args}", "--gpus", "12"],
     "--megatron-args {args}: --gpus 12: expected a multiple of --tensor-model-parallel-size 2 "
     "x --pipeline-model-parallel-size 4"),
]


@pytest.mark.parametrize("args,line", REFUSED, ids=[" ".join(a[:3]) for a, _ in REFUSED])
def test_contradictions_are_refused_in_one_line(args, line, hf_configs_dir, tmp_path, capsys):
    cfg = str(hf_configs_dir / "qwen2-1.5b.json")
    margs = tmp_path / "megatron_args.txt"
    margs.write_text(UNEVEN)
    fill = {"cfg": cfg, "args": str(margs)}
    rc, _, err = _run([a.format(**fill) for a in args], capsys)
    assert rc == 2
    assert err == f"pipesim: error: {line.format(**fill)}\n"


def test_an_unknown_family_exits_2_in_one_line(tmp_path, capsys):
    cfg = tmp_path / "config.json"
    cfg.write_text('{"model_type": "t5"}')
    rc, _, err = _run(["generate", "--hf-config", str(cfg), "--seq", "8", "--micro-batch", "1",
                       "-o", "-"], capsys)
    assert rc == 2 and err.count("\n") == 1
    assert err.startswith(f"pipesim: error: --hf-config {cfg}: model_type 't5': pipesim reads "
                          "the llama, mistral")


def test_a_published_run_runs_from_its_megatron_args(published_runs, tmp_path, capsys):
    run = next(r for r in published_runs if r["id"] == "nara-tab1-39.1B")
    args = tmp_path / "args.txt"
    args.write_text(run["megatron_args"])
    out = tmp_path / "r.json"
    rc, text, _ = _run(["run", "--megatron-args", str(args), "--gpus", str(run["gpus"]),
                        "--gpu", "a100", "--engine", "evaluator", "--json", str(out)], capsys)
    assert rc == 0
    d = _json(out)
    # dp = 512 / (8 x 2) = 32; microbatches = 1536 / (1 x 32) = 48; full recompute
    assert (d["pp"], d["microbatches"], d["vpp"]) == (2, 48, 1)
    assert d["schedule"] == "1f1b"
    # --recompute-granularity full: each layer's forward runs again in its backward (the same
    # run with --recompute none is faster and holds more)
    plain = tmp_path / "none.json"
    assert _run(["run", "--megatron-args", str(args), "--gpus", str(run["gpus"]), "--engine",
                 "evaluator", "--recompute", "none", "--json", str(plain)], capsys)[0] == 0
    p = _json(plain)
    assert p["makespan_ns"] < d["makespan_ns"] and p["peak_memory_bytes"] > d["peak_memory_bytes"]
    assert [w["message"].split(": ")[1] for w in d["warnings"]
            if w["code"] == "model_input"] == ["--untie-embeddings-and-output-weights absent",
                                               "neither --use-flash-attn nor --attention-backend",
                                               BUILTIN_A100.split(": ")[1]]


def test_run_launch_read_back_gives_the_same_makespan(tmp_path, capsys):
    args = tmp_path / "args.txt"
    args.write_text(UNEVEN)
    first, again = tmp_path / "a.json", tmp_path / "b.json"
    launch = tmp_path / "launch"
    assert _run(["run", "--megatron-args", str(args), "--gpus", "16", "--engine", "evaluator",
                 "--launch", str(launch), "--json", str(first)], capsys)[0] == 0
    written = (launch / "megatron_args.txt").read_text()
    # the fewest of Megatron-LM's options that give the split: the launch's own first/last
    assert "--decoder-first-pipeline-num-layers 6\n--decoder-last-pipeline-num-layers 4\n" in \
        written
    assert "--group-query-attention\n--num-query-groups 4\n" in written
    back = read_megatron_args(str(launch / "megatron_args.txt"), 16)
    orig = read_megatron_args(str(args), 16)
    assert back.shape == orig.shape
    assert back.launch._replace(source=None) == orig.launch._replace(source=None)
    assert _run(["run", "--megatron-args", str(launch / "megatron_args.txt"), "--gpus", "16",
                 "--engine", "evaluator", "--json", str(again)], capsys)[0] == 0
    a, b = _json(first), _json(again)
    assert abs(b["makespan_ns"] - a["makespan_ns"]) <= 0.005 * a["makespan_ns"]
    assert b["peak_memory_bytes"] == a["peak_memory_bytes"]
    # torchtitan's file read back: its layout exactly, the shape from the flags
    doc = tomllib.loads((launch / "torchtitan.toml").read_text())
    assert doc["model"] == {"name": "llama3", "flavor": "pipesim-llama-30l-2048h"}
    titan = tmp_path / "t.json"
    assert _run(["run", "--torchtitan", str(launch / "torchtitan.toml"), "--model", "llama",
                 "--layers", "30", "--hidden", "2048", "--heads", "16", "--kv-heads", "4",
                 "--ffn", "5440", "--vocab", "32000", "--gpus", "16", "--engine", "evaluator",
                 "--json", str(titan)], capsys)[0] == 0
    t = _json(titan)
    assert (t["pp"], t["vpp"], t["microbatches"], t["schedule"]) == (
        a["pp"], a["vpp"], a["microbatches"], a["schedule"]) == (4, 2, 16, "interleaved-1f1b")
    # one layout, two model codes: torchtitan's eager modules (complex fp32 RoPE, unfused
    # SwiGLU, separate projections: workload/layer_ops.py) take longer than Megatron-LM's
    # fused kernels
    assert t["makespan_ns"] > a["makespan_ns"]


def test_plan_launch_read_back_gives_the_plans_makespan(hf_configs_dir, tmp_path, capsys):
    cfg = str(hf_configs_dir / "gpt2.json")
    out, launch = tmp_path / "plan.json", tmp_path / "launch"
    assert _run(["plan", "--hf-config", cfg, "--seq", "1024", "--global-batch-size", "16",
                 "--gpus", "8", "--tp-max", "2", "-s", "1f1b,interleaved-1f1b", "--runtime",
                 "megatron", "--launch", str(launch), "--json", str(out), "--jobs", "1",
                 "--gpu", "a100"],
                capsys)[0] == 0
    plan = _json(out)
    peak = max(c["peak_memory_bytes"] for c in plan["candidates"] if c["feasible"])
    assert plan["warnings"] == [f"--hf-config {cfg}: tie_word_embeddings: the LM head's weights "
                                "are counted apart from the embedding's (as Megatron-LM keeps a "
                                "copy on the last stage; at pp 1 they are one tensor, V x h "
                                "fewer parameters)", BUILTIN_A100,
                                NO_MEMORY_LIMIT.format(fmt_bytes(peak))] + plan["warnings"][3:]
    # the winner's run's own defaults, as `pipesim run` of its command states them
    assert [w.split(":")[0] for w in plan["warnings"][3:]] == [
        "weights, gradients and optimizer state", "the system (default) states no HBM bandwidth"]
    best = plan["best"]
    back = tmp_path / "back.json"
    assert _run(["run", "--megatron-args", str(launch / "megatron_args.txt"), "--gpus", "8",
                 "--json", str(back)], capsys)[0] == 0
    b = _json(back)
    assert (b["pp"], b["vpp"], b["microbatches"]) == (best["pp"], best["vpp"],
                                                      best["microbatches"])
    # a plan for Megatron-LM prices Megatron's DDP (the reduction after the backward, blocking,
    # and the optimizer step: engine/tail.py) as the run of its launch does
    assert b["makespan_ns"] == pytest.approx(best["makespan_ns"], rel=0.005)
    assert "--megatron-ddp" in best["command"]


def test_generate_from_a_launch_file_writes_its_settings(tmp_path, capsys):
    args = tmp_path / "args.txt"
    args.write_text(UNEVEN)
    out = tmp_path / "w.txt"
    rc, text, err = _run(["generate", "--megatron-args", str(args), "--dp", "2", "-o", str(out)],
                         capsys)
    assert rc == 0
    header = out.read_text().split("\n", 1)[0]
    assert "model_parallel_NPU_group: 2 ep: 1 pp: 4 vpp: 2 ga: 16 all_gpus: 16 " in header
    assert header.endswith(" stage_layers: 3 5 5 2 3 5 5 2")
    assert (f"pipesim: warning: --megatron-args {args}: --hidden-dropout 0.1 (Megatron-LM's "
            "default): the llama model is priced without dropout" in err)
    assert text.startswith(f"wrote {out}: ")


def test_generate_from_a_config_json_is_the_same_file_as_its_flags(hf_configs_dir, tmp_path,
                                                                   capsys):
    a, b = tmp_path / "a.txt", tmp_path / "b.txt"
    assert _run(["generate", "--hf-config", str(hf_configs_dir / "llama-3.1-8b.json"), "--seq",
                 "4096", "--micro-batch", "1", "--tp", "2", "--pp", "2", "--ga", "4", "-o",
                 str(a)], capsys)[0] == 0
    assert _run(["generate", "--model", "llama", "--layers", "32", "--hidden", "4096",
                 "--heads", "32", "--kv-heads", "8", "--ffn", "14336", "--vocab", "128256",
                 "--seq", "4096", "--micro-batch", "1", "--tp", "2", "--pp", "2", "--ga", "4",
                 "-o", str(b)], capsys)[0] == 0
    assert a.read_text() == b.read_text()


def test_compare_from_megatron_args_carries_the_warnings(tmp_path, capsys):
    args = tmp_path / "args.txt"
    args.write_text(UNEVEN.replace(" --use-distributed-optimizer --overlap-grad-reduce", ""))
    out = tmp_path / "c.json"
    rc, text, _ = _run(["compare", "--megatron-args", str(args), "--gpus", "16", "-s",
                        "interleaved-1f1b,zb-v", "--engine", "evaluator", "--json", str(out)],
                       capsys)
    assert rc == 0
    assert text.startswith(f"pipesim compare: --megatron-args {args} (generated), P=4, M=16")


def test_a_torchtitan_csv_launch_reads_back_to_the_same_schedule(hf_configs_dir, tmp_path,
                                                                 capsys):
    """zb-h2 has no torch class: torchtitan runs it from the CSV the launch folder holds, and
    --torchtitan reads that CSV back (pipeline_parallel_schedule_csv, beside the TOML)."""
    cfg = str(hf_configs_dir / "gpt2.json")
    first, again, launch = tmp_path / "a.json", tmp_path / "b.json", tmp_path / "launch"
    assert _run(["run", "--hf-config", cfg, "--seq", "1024", "--pp", "2", "-m", "8", "--gpus",
                 "2", "-s", "zb-h2", "--engine", "evaluator", "--launch", str(launch), "--json",
                 str(first)], capsys)[0] == 0
    doc = tomllib.loads((launch / "torchtitan.toml").read_text())
    assert doc["parallelism"]["pipeline_parallel_schedule_csv"] == "schedule.csv"
    assert doc["training"]["seq_len"] == 1024
    assert _run(["run", "--torchtitan", str(launch / "torchtitan.toml"), "--hf-config", cfg,
                 "--gpus", "2", "--engine", "evaluator", "--json", str(again)], capsys)[0] == 0
    a, b = _json(first), _json(again)
    assert (b["pp"], b["vpp"], b["microbatches"]) == (2, 1, 8)
    # the same schedule; torchtitan's embedding and LM head hold the tokenizer's 50,257 rows
    # where Megatron-LM's pad them to 50,304, so its run is that much shorter
    assert 0 < a["makespan_ns"] - b["makespan_ns"] < 0.001 * a["makespan_ns"]


def test_a_sequence_longer_than_the_model_was_built_for_is_warned(hf_configs_dir, tmp_path,
                                                                  capsys):
    cfg = str(hf_configs_dir / "gpt2.json")
    out = tmp_path / "r.json"
    assert _run(["run", "--hf-config", cfg, "--seq", "2048", "--pp", "2", "-m", "4", "--json",
                 str(out)], capsys)[0] == 0
    assert f"--hf-config {cfg}: sequence length 2048 above the 1024 positions the model was " \
           "built for; priced as given" in [w["message"] for w in _json(out)["warnings"]]


def test_a_megatron_launch_states_its_memory(tmp_path, capsys):
    """--bf16 --use-distributed-optimizer: bf16 weights (2 B), fp32 main grads (4 B) and the
    fp32 optimizer state and master copy (12 B) sharded over DP, as Megatron Core's
    distributed-optimizer guide counts; no 16 B default, so no memory_per_param_default."""
    args = tmp_path / "args.txt"
    args.write_text(UNEVEN)
    out = tmp_path / "r.json"
    assert _run(["run", "--megatron-args", str(args), "--gpus", "16", "--engine", "evaluator",
                 "--json", str(out)], capsys)[0] == 0
    d = _json(out)
    assert "memory_per_param_default" not in [w["code"] for w in d["warnings"]]
    rank = d["ranks"][1]      # a middle rank: transformer layers only
    parts = rank["peak_memory_breakdown"]
    params = parts["weights"] // 2
    dp = 16 // (2 * 4)
    assert parts["gradients"] == 4 * params
    assert parts["optimizer"] == 12 * params // dp
    # the same launch with plain fp32 weights said on the command line: 16 B, 8 + 8 of them
    # sharded
    fp32 = tmp_path / "f.json"
    assert _run(["run", "--megatron-args", str(args), "--gpus", "16", "--engine", "evaluator",
                 "--param-dtype", "fp32", "--json", str(fp32)], capsys)[0] == 0
    parts = _json(fp32)["ranks"][1]["peak_memory_breakdown"]
    assert parts["weights"] == 4 * params and parts["gradients"] == 4 * params


def test_a_model_run_without_a_system_says_which_links_and_memory_it_met(hf_configs_dir,
                                                                        tmp_path, capsys):
    """--gpu h100 prices the kernels as an H100's; without --system the transfers, collectives
    and memory meet the built-in system, which the run says (--strict refuses it); the H100
    cluster's file removes the warning and checks the card's memory."""
    cfg = str(hf_configs_dir / "llama-3.1-8b.json")
    args = ["run", "--hf-config", cfg, "--seq", "4096", "--tp", "4", "--pp", "2", "-m", "8",
            "--gpus", "64", "--gpu", "h100", "--engine", "evaluator"]
    out = tmp_path / "r.json"
    assert _run(args + ["--json", str(out)], capsys)[0] == 0
    mine = [w["message"] for w in _json(out)["warnings"] if w["code"] == "model_input"]
    assert mine == [BUILTIN_A100.replace("a100", "h100")]
    rc, _, err = _run(args + ["--strict"], capsys)
    assert rc == 2 and err == (f"pipesim: error: --strict: {BUILTIN_A100.replace('a100', 'h100')}"
                               " [model_input]\n")
    cluster = tmp_path / "c.json"
    assert _run(args + ["--system", "configs/system/h100.yaml", "--json", str(cluster)],
                capsys)[0] == 0
    c = _json(cluster)
    assert [w for w in c["warnings"] if w["code"] == "model_input"] == []
    # the cluster's NVLink and NICs, not the built-in 400 Gb/s links: the same compute, another
    # time
    assert c["makespan_ns"] != _json(out)["makespan_ns"]


def test_a_launchs_vocab_padding_and_wgrad_accumulation_are_written_back(tmp_path, capsys):
    args = tmp_path / "args.txt"
    args.write_text(UNEVEN + " --make-vocab-size-divisible-by 64 "
                    "--no-gradient-accumulation-fusion --no-rope-fusion --rotary-percent 0.5 "
                    "--log-num-zeros-in-grad --log-params-norm --calculate-per-token-loss")
    launch = tmp_path / "launch"
    assert _run(["run", "--megatron-args", str(args), "--gpus", "16", "--engine", "evaluator",
                 "--launch", str(launch), "--json", str(tmp_path / "a.json")], capsys)[0] == 0
    written = (launch / "megatron_args.txt").read_text().splitlines()
    assert "--make-vocab-size-divisible-by 64" in written
    assert "--no-gradient-accumulation-fusion" in written
    assert "--no-rope-fusion" in written and "--rotary-percent 0.5" in written
    back = read_megatron_args(str(launch / "megatron_args.txt"), 16)
    orig = read_megatron_args(str(args), 16)
    for flag in ("--log-num-zeros-in-grad", "--log-params-norm", "--calculate-per-token-loss"):
        assert flag in written
    assert back.launch.code_fields() == dict(grad_accumulation_fusion=False, main_grad_bytes=4,
                                             vocab_divisor=64, rope_fusion=False,
                                             rotary_percent=0.5, bias_gelu_fusion=True,
                                             router_fp32=False, cross_entropy_fusion=False)
    assert back.launch._replace(source=None) == orig.launch._replace(source=None)


def test_a_fused_cross_entropy_is_written_back_and_saves_its_passes(tmp_path, capsys):
    gpt = ("--num-layers 4 --hidden-size 1024 --num-attention-heads 16 --seq-length 1024 "
           "--micro-batch-size 2 --global-batch-size 16 --pipeline-model-parallel-size 2 --bf16 "
           "--use-flash-attn --untie-embeddings-and-output-weights --vocab-size 128000")
    times = launch_runs(tmp_path, capsys, gpt,
                        {"unfused": "", "fused": "--cross-entropy-loss-fusion"}, 2)
    written = (tmp_path / "fused" / "megatron_args.txt").read_text().splitlines()
    assert "--cross-entropy-loss-fusion" in written
    assert "--cross-entropy-loss-fusion" not in (
        tmp_path / "unfused" / "megatron_args.txt").read_text()
    assert read_megatron_args(str(tmp_path / "fused" / "megatron_args.txt"),
                              2).launch.cross_entropy_fusion
    # 12 bytes a logit fewer in the forward, 4 more in the backward: the last stage is faster
    assert times["fused"] < times["unfused"]


def test_an_unfused_bias_gelu_is_written_back_and_costs_its_add(tmp_path, capsys):
    gpt = ("--num-layers 4 --hidden-size 1024 --num-attention-heads 16 --seq-length 1024 "
           "--micro-batch-size 2 --global-batch-size 16 --pipeline-model-parallel-size 2 --bf16 "
           "--use-flash-attn --untie-embeddings-and-output-weights --vocab-size 32000")
    times = launch_runs(tmp_path, capsys, gpt, {"fused": "", "unfused": "--no-bias-gelu-fusion"},
                        2)
    written = (tmp_path / "unfused" / "megatron_args.txt").read_text().splitlines()
    assert "--no-bias-gelu-fusion" in written
    assert "--no-bias-gelu-fusion" not in (tmp_path / "fused" / "megatron_args.txt").read_text()
    assert not read_megatron_args(str(tmp_path / "unfused" / "megatron_args.txt"),
                                  2).launch.bias_gelu_fusion
    assert times["unfused"] > times["fused"]      # the bias's own kernel, each forward
