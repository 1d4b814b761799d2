"""`pipesim plan` counting every candidate's training state as the launch will: by dtype
(--param-dtype), sharded by the distributed optimizer or by FSDP over the candidate's data
parallelism; the winner's command and launch files say the same, and read back to the plan's
numbers."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import pytest

from simulator.cli.main import main

MODEL = ["--model", "llama", "--layers", "8", "--hidden", "1024", "--heads", "8", "--kv-heads",
         "4", "--ffn", "2816", "--vocab", "8192", "--seq-length", "512", "--gpus", "8",
         "--tp", "1", "--global-batch-size", "32", "-s", "1f1b", "--gpu", "a100", "-j", "1"]


def _plan(capsys, tmp_path, name: str, *extra: str) -> dict:
    out = tmp_path / name
    out.mkdir()
    rc = main(["plan", *MODEL, "--out", str(out), "--json", str(out / "p.json"), *extra])
    capsys.readouterr()
    assert rc == 0
    return json.loads((out / "p.json").read_text())


def _run(capsys, tmp_path, command: str) -> dict:
    words = shlex.split(command)
    assert words[:2] == ["pipesim", "run"]
    out = tmp_path / "r.json"
    assert main(words[1:] + ["--json", str(out)]) == 0
    capsys.readouterr()
    return json.loads(out.read_text())


def _by_key(plan: dict) -> dict:
    return {c["key"]: c for c in plan["candidates"] if c.get("peak_memory_bytes")}


def test_the_distributed_optimizer_and_fsdp_shard_every_candidates_state(capsys, tmp_path):
    whole = _by_key(_plan(capsys, tmp_path, "a", "--param-dtype", "bf16"))
    sharded = _by_key(_plan(capsys, tmp_path, "b", "--param-dtype", "bf16",
                            "--use-distributed-optimizer"))
    fsdp = _by_key(_plan(capsys, tmp_path, "c", "--param-dtype", "bf16", "--fsdp"))
    assert whole.keys() == sharded.keys() == fsdp.keys()
    for key, c in whole.items():
        dp = c["dp"]
        if dp > 1:   # the same candidate holds less when its state is sharded
            assert sharded[key]["peak_memory_bytes"] < c["peak_memory_bytes"]
            assert fsdp[key]["peak_memory_bytes"] < c["peak_memory_bytes"]
        else:
            assert sharded[key]["peak_memory_bytes"] == c["peak_memory_bytes"]


def test_the_winners_command_carries_the_state_and_reads_back(capsys, tmp_path):
    for name, flags, words in (("d", ("--param-dtype", "bf16", "--use-distributed-optimizer"),
                                "--param-dtype bf16 --use-distributed-optimizer"),
                               ("e", ("--param-dtype", "bf16", "--fsdp"), "--fsdp ")):
        plan = _plan(capsys, tmp_path, name, *flags)
        best = plan["best"]
        assert words in best["command"]
        got = _run(capsys, tmp_path, best["command"])
        assert (got["makespan_ns"], got["peak_memory_bytes"]) == (
            best["makespan_ns"], best["peak_memory_bytes"])


def _plan_launch(capsys, tmp_path, text: str, *extra: str) -> tuple[dict, list, Path]:
    """``plan`` of the Megatron-LM argument list ``text`` on 8 GPUs at TP 1 (1F1B):
    (its best, its warnings, its --out folder)."""
    args = tmp_path / "args.txt"
    args.write_text(text)
    out = tmp_path / "plan"
    out.mkdir()
    assert main(["plan", "--megatron-args", str(args), "--gpus", "8", "--tp", "1", "-s",
                 "1f1b", "-j", "1", "--out", str(out), "--json", str(out / "p.json"),
                 *extra]) == 0
    capsys.readouterr()
    data = json.loads((out / "p.json").read_text())
    return data["best"], data["warnings"], out


def _read_back(capsys, tmp_path, out: Path, *extra: str) -> dict:
    """``run`` of the megatron_args.txt the plan's --launch wrote, on the plan's 8 GPUs."""
    back = tmp_path / "back.json"
    assert main(["run", "--megatron-args", str(out / "launch" / "megatron_args.txt"), "--gpus",
                 "8", *extra, "--json", str(back)]) == 0
    capsys.readouterr()
    return json.loads(back.read_text())


def test_a_megatron_launchs_distributed_optimizer_is_the_plans(capsys, tmp_path):
    best, _, out = _plan_launch(
        capsys, tmp_path,
        "--num-layers 8 --hidden-size 1024 --num-attention-heads 8 --group-query-attention "
        "--num-query-groups 4 --ffn-hidden-size 2816 --swiglu --normalization RMSNorm "
        "--vocab-size 8192 --untie-embeddings-and-output-weights --seq-length 512 "
        "--micro-batch-size 1 --global-batch-size 32 --bf16 --use-flash-attn "
        "--attention-dropout 0 --hidden-dropout 0 --use-distributed-optimizer",
        "--runtime", "megatron", "--gpu", "a100", "--launch", str(tmp_path / "plan" / "launch"))
    assert "--param-dtype bf16 --use-distributed-optimizer" in best["command"]
    written = (out / "launch" / "megatron_args.txt").read_text()
    assert "--use-distributed-optimizer" in written
    # the written launch reads back to the plan's memory: the same sharded state
    got = _read_back(capsys, tmp_path, out, "--gpu", "a100")
    assert got["peak_memory_bytes"] == best["peak_memory_bytes"]


def test_a_launch_files_recompute_is_said_to_be_left_out(capsys, tmp_path):
    args = "--megatron-args " + str(tmp_path / "args.txt")
    _, warnings, _ = _plan_launch(
        capsys, tmp_path,
        "--num-layers 8 --hidden-size 1024 --num-attention-heads 8 --seq-length 512 "
        "--micro-batch-size 1 --global-batch-size 32 --bf16 --use-flash-attn "
        "--recompute-granularity full --recompute-method block --recompute-num-layers 2",
        "--gpu", "a100")
    assert (f"{args}: plan's candidates run without the file's full recompute "
            "(block, 2 layers), and with full recompute of every layer where one is over the "
            "memory limit") in warnings


def test_an_fp8_launch_with_megatrons_overlaps_plans_and_reads_back_to_the_same_numbers(
        capsys, tmp_path):
    """The launch file's FP8 recipe, its DDP flags (the distributed optimizer, both overlaps,
    gradients reduced in bf16) are every candidate's, the winner's command carries them and the
    written megatron_args.txt reads back to the plan's iteration time and peak memory."""
    h100 = str(Path(__file__).resolve().parents[2] / "configs" / "system" / "h100.yaml")
    best, _, out = _plan_launch(
        capsys, tmp_path,
        "--num-layers 8 --hidden-size 2048 --num-attention-heads 16 --group-query-attention "
        "--num-query-groups 4 --ffn-hidden-size 5632 --swiglu --normalization RMSNorm "
        "--vocab-size 8192 --untie-embeddings-and-output-weights --seq-length 2048 "
        "--micro-batch-size 1 --global-batch-size 32 --bf16 --use-flash-attn "
        "--attention-dropout 0 --hidden-dropout 0 --use-distributed-optimizer "
        "--overlap-grad-reduce --overlap-param-gather --grad-reduce-in-bf16 "
        "--fp8-format hybrid --fp8-recipe tensorwise",
        "--runtime", "megatron", "--system", h100, "--launch", str(tmp_path / "plan" / "launch"))
    for flag in ("--grad-reduce-dtype bf16", "--overlap-grad-reduce", "--overlap-param-gather",
                 "--use-distributed-optimizer"):
        assert flag in best["command"]
    # the zero-bubble fork's layout: its runtime refuses the distributed optimizer's overlaps
    plan = json.loads((out / "p.json").read_text())
    zbs = [c for c in plan["candidates"] if c["schedule"] == "zb-greedy"]
    assert len(zbs) == 4 and {c["reason"] for c in zbs} == {
        "megatron does not run it: the zero-bubble fork runs --enable-zero-bubble with the "
        "distributed optimizer only without --overlap-grad-reduce and --overlap-param-gather"}
    written = (out / "launch" / "megatron_args.txt").read_text().split()
    assert "--grad-reduce-in-bf16" in written and "tensorwise" in written
    got = _read_back(capsys, tmp_path, out, "--system", h100)
    assert (got["makespan_ns"], got["peak_memory_bytes"]) == (
        best["makespan_ns"], best["peak_memory_bytes"])


ZB_LAUNCH = ("--num-layers 8 --hidden-size 1024 --num-attention-heads 8 --seq-length 512 "
             "--micro-batch-size 1 --global-batch-size 32 --fp16 --vocab-size 8192")


def _plan_zb(capsys, tmp_path, name: str, text: str) -> dict:
    args = tmp_path / f"{name}.txt"
    args.write_text(text)
    out = tmp_path / name
    out.mkdir()
    assert main(["plan", "--megatron-args", str(args), "--gpus", "8", "--tp", "1", "-s",
                 "zb-h2,1f1b", "--gpu", "a100", "-j", "1", "--no-prune", "--out",
                 str(out), "--json", str(out / "p.json")]) == 0
    capsys.readouterr()
    return json.loads((out / "p.json").read_text())


def test_a_launch_without_the_steps_barrier_is_ranked_by_its_steady_state(capsys, tmp_path):
    """The zero-bubble fork's --enable-optimizer-post-validation: every candidate runs two
    iterations and is timed by the second; zb-h2's parallelogram gains, 1F1B does not; the
    winner's command (with --iterations 2) reads back to the plan's time."""
    post = _plan_zb(capsys, tmp_path, "post", ZB_LAUNCH + " --pipeline-model-parallel-size 2 "
                    "--enable-zero-bubble --zero-bubble-max-pending-backward 2 "
                    "--enable-optimizer-post-validation")
    flush = _plan_zb(capsys, tmp_path, "flush", ZB_LAUNCH)
    best = post["best"]
    assert "--optimizer-post-validation" in best["command"]
    assert best["command"].endswith(" --iterations 2")
    assert any(n.startswith("the launch's optimizer steps without a barrier")
               for n in post["notes"])
    got = _run(capsys, tmp_path, best["command"])
    assert got["steady_iteration_ns"] == got["iteration_times_ns"][1] == best["makespan_ns"]
    a, b = _by_key(post), _by_key(flush)
    compared = {"zb-h2": 0, "1f1b": 0}
    for key in a:
        if "-pp1-" in key or key not in b:
            continue
        if key.endswith("zb-h2"):      # never slower: the overlap hides what fill it can
            assert a[key]["makespan_ns"] <= b[key]["makespan_ns"] * (1 + 1e-12)
            compared["zb-h2"] += 1
        elif key.endswith("1f1b"):     # its first rank spans the iteration: the same
            assert a[key]["makespan_ns"] == pytest.approx(b[key]["makespan_ns"], rel=1e-12)
            compared["1f1b"] += 1
    assert compared == {"zb-h2": 3, "1f1b": 3}      # pp 2, 4, 8
    # at pp 8 the parallelogram's fill shows with the barrier; at pp 2 and 4 the last stage's
    # LM head sets the pace (the cycle through its last I and the first rank's next F binds)
    assert a["tp1-pp8-v1-m32-zb-h2"]["makespan_ns"] < 0.999 * b["tp1-pp8-v1-m32-zb-h2"][
        "makespan_ns"]


def test_a_megatron_launch_without_gradient_accumulation_fusion_is_planned_and_written_so(
        capsys, tmp_path):
    text = ("--num-layers 8 --hidden-size 1024 --num-attention-heads 8 --ffn-hidden-size 4096 "
            "--vocab-size 8192 --untie-embeddings-and-output-weights --seq-length 512 "
            "--micro-batch-size 1 --global-batch-size 32 --bf16 --use-flash-attn "
            "--attention-dropout 0 --hidden-dropout 0 ")
    for name in ("a", "b"):
        (tmp_path / name).mkdir()
    fused, _, _ = _plan_launch(capsys, tmp_path / "a", text, "--runtime", "megatron",
                               "--gpu", "a100")
    best, _, out = _plan_launch(
        capsys, tmp_path / "b", text + "--no-gradient-accumulation-fusion", "--runtime",
        "megatron", "--gpu", "a100", "--launch", str(tmp_path / "b" / "plan" / "launch"))
    # the candidates add each weight gradient into main_grad: slower, the same memory
    assert best["makespan_ns"] > fused["makespan_ns"]
    assert best["peak_memory_bytes"] == fused["peak_memory_bytes"]
    written = (out / "launch" / "megatron_args.txt").read_text().splitlines()
    assert "--no-gradient-accumulation-fusion" in written
    got = _read_back(capsys, tmp_path, out, "--gpu", "a100")
    assert got["makespan_ns"] == pytest.approx(best["makespan_ns"], rel=0.005)
