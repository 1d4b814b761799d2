"""plan of the moe model: its candidates at an expert-parallel size (--ep, a launch file's
--expert-model-parallel-size) or over every divisor of the experts up to --ep-max, each
generated workload splitting the experts over EP of the data-parallel ranks."""

from __future__ import annotations

import json

import pytest

from simulator.cli.main import main
from simulator.workload.generator import ModelSpec, ParallelSpec, render
from simulator.workload.gpus import gpu_preset
from simulator.workload.inputs.megatron_args import megatron_input

from model_flag_runs import generated_and_flags, plan_json

MOE = ["--model", "moe", "--layers", "4", "--hidden", "2048", "--heads", "16", "--experts",
       "8", "--topk", "2", "--seq", "4096", "--micro-batch", "1", "--gpu", "h100",
       "--global-batch-size", "16", "--param-dtype", "bf16", "--use-distributed-optimizer"]


def test_plan_searches_the_expert_parallel_sizes_up_to_ep_max(tmp_path, capsys):
    rc, d = plan_json(tmp_path, *MOE, "--ep-max", "8", "--gpus", "8", "--tp", "1",
                  "--launch", str(tmp_path / "launch"))
    assert rc == 0, capsys.readouterr().err
    ran = {(c["ep"], c["pp"], c["dp"]): c for c in d["candidates"] if c["schedule"] == "1f1b"}
    # 8 GPUs at tp 1: every EP dividing the 8 experts, every pp of 8; a DP that is not a
    # multiple of the EP is ruled out by its sizes
    assert set(ran) == {(ep, pp, 8 // pp) for ep in (1, 2, 4, 8) for pp in (1, 2, 4, 8)}
    for (ep, pp, dp), c in ran.items():
        if dp % ep:
            assert c["reason"] == (f"DP {dp} is not a multiple of EP {ep} (the experts are "
                                   "split over the data-parallel ranks)")
        assert c["key"].endswith(f"-ep{ep}") == (ep > 1)
    # EP 8 wins at pp 1: each GPU holds one expert, so its gradients to reduce and its
    # optimizer step are the fewest
    best = d["best"]
    assert (best["ep"], best["pp"]) == (8, 1)
    assert [c["makespan_ns"] for c in sorted(
        (ran[(ep, 1, 8)] for ep in (1, 2, 4, 8)), key=lambda c: -c["ep"])] == sorted(
        ran[(ep, 1, 8)]["makespan_ns"] for ep in (1, 2, 4, 8))
    words = best["command"].split()
    assert words[2] == str(tmp_path / "plan-moe-4l-tp1-ep8.txt")
    # the generated file is generate's at that EP
    assert (tmp_path / "plan-moe-4l-tp1-ep8.txt").read_text() == render(
        ModelSpec("moe", 4, 2048, 16, 4096, 1, experts=8, topk=2),
        ParallelSpec(tp=1, dp=8, ep=8), gpu_preset("h100"), "model")
    capsys.readouterr()
    assert main(words[1:] + ["--json", str(tmp_path / "r.json")]) == 0
    r = json.loads((tmp_path / "r.json").read_text())
    assert (r["makespan_ns"], r["peak_memory_bytes"]) == (best["makespan_ns"],
                                                          best["peak_memory_bytes"])
    launch = (tmp_path / "launch" / "megatron_args.txt").read_text()
    args = launch.split("\n")
    assert "--expert-model-parallel-size 8" in args
    # the dispatcher and the experts' GEMMs the moe rows priced, not Megatron-LM's defaults:
    # the file reads back with a note for each, no warning
    assert {"--moe-token-dispatcher-type alltoall", "--moe-grouped-gemm"} <= set(args)
    back = megatron_input(launch, "megatron_args.txt", 8)
    assert not [w for w in back.warnings if "--moe" in w]
    assert sum("as priced" in n for n in back.notes) == 2


def test_a_moe_model_without_an_ep_is_planned_over_ep_up_to_a_node(tmp_path, capsys):
    """Nothing states the expert parallelism: the plan searches it as it searches TP (divisors
    of the experts up to 8, one node's GPUs) and says so; --ep fixes it."""
    rc, d = plan_json(tmp_path, *MOE, "--gpus", "16", "--tp", "1")
    assert rc == 0, capsys.readouterr().err
    assert {c["ep"] for c in d["candidates"]} == {1, 2, 4, 8}
    assert d["notes"][0] == ("expert parallelism searched over the divisors of the 8 experts "
                             "up to 8 (--ep-max's default for a moe model; --ep N fixes one)")
    rc, d = plan_json(tmp_path, *MOE, "--gpus", "16", "--tp", "1", "--ep", "2")
    assert rc == 0, capsys.readouterr().err
    assert {c["ep"] for c in d["candidates"]} == {2}
    assert not any("expert parallelism searched" in n for n in d["notes"])


def test_a_larger_ep_holds_fewer_experts_a_gpu(tmp_path, capsys):
    rc, d = plan_json(tmp_path, *MOE, "--ep-max", "8", "--gpus", "8", "--tp", "1")
    assert rc == 0, capsys.readouterr().err
    peaks = {c["ep"]: c["peak_memory_bytes"] for c in d["candidates"]
             if c["schedule"] == "1f1b" and c["pp"] == 1 and c["reason"] is None}
    assert peaks[1] > peaks[2] > peaks[4] > peaks[8]


@pytest.mark.parametrize("args, line", [
    (["--model", "llama", "--layers", "4", "--hidden", "2048", "--heads", "16", "--seq", "4096",
      "--global-batch-size", "16", "--ep", "2"],
     "--ep 2: expected the moe model (experts to split), found the llama model"),
    ([*MOE, "--ep", "2", "--ep-max", "4"],
     "--ep 2 and --ep-max 4: give one (the expert-parallel size, or the largest one searched)"),
    ([*MOE, "--ep", "3"], "--tp 1: --ep 3: expected a divisor of --experts 8 whose product with --etp 1 divides "
         "a stage's --tp 1 x --dp 8 = 8 GPUs (Megatron-LM's expert grid)"),
])
def test_plan_refuses_an_expert_parallel_size_that_cannot_run(tmp_path, capsys, args, line):
    rc, _ = plan_json(tmp_path, *args, "--gpus", "8", "--tp", "1")
    assert rc == 2
    assert capsys.readouterr().err.strip().splitlines()[-1] == f"pipesim: error: {line}"


def test_run_of_the_model_flags_takes_ep_as_generate_does(tmp_path, capsys):
    a, b = generated_and_flags(tmp_path, MOE[:MOE.index("--gpu")], ["--ep", "4"], 8, 8)
    assert (a["makespan_ns"], a["peak_memory_bytes"]) == (b["makespan_ns"],
                                                          b["peak_memory_bytes"])
