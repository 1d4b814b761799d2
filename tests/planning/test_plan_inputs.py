"""`pipesim plan` with the inputs Megatron-LM users give: --tp fixing TP, --global-batch-size
counting sequences (--seq-length the sequence), the deprecated --global-batch, and the
--max-work refusal line before anything runs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from model_flag_runs import BUILTIN_A100, NO_MEMORY_LIMIT
from simulator.cli.main import main
from simulator.units import fmt_bytes

ROOT = Path(__file__).resolve().parents[2]
WL = str(ROOT / "workloads" / "gpt-24l.txt")
MODEL = ["--model", "gpt", "--layers", "4", "--hidden", "512", "--heads", "8",
         "--seq-length", "64"]
# from the winner's run: the training state's bytes a parameter
STATE_DEFAULT = ("weights, gradients and optimizer state: 16 B a parameter on every DP rank "
                 "(mixed-precision Adam, no distributed optimizer: the default when nothing "
                 "says); Megatron-LM with --bf16 --use-distributed-optimizer holds 6 + 12/DP B, "
                 "plain fp32 16 B (set --param-dtype bf16|fp32 (and --use-distributed-optimizer)"
                 ", or memory.bytes_per_param or memory.precision in --system)")


def run(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def plan_json(capsys, tmp_path, *argv: str) -> dict:
    code, out, err = run(capsys, "plan", *argv, "-j", "1", "--out", str(tmp_path), "--json", "-")
    assert (code, err) == (0, ""), err
    return json.loads(out)


def test_tp_fixes_tensor_parallelism_and_the_batch_counts_sequences(capsys, tmp_path):
    """--tp 2 on 8 GPUs: only TP 2 is generated and searched; 32 sequences of 2 per microbatch
    are 16 microbatches across DP, M = 16 / DP at each pipeline degree."""
    data = plan_json(capsys, tmp_path, *MODEL, "--micro-batch", "2", "--gpus", "8", "--tp", "2",
                     "--global-batch-size", "32", "--gpu", "a100")
    assert sorted({(c["tp"], c["pp"], c["dp"], c["microbatches"])
                   for c in data["candidates"]}) == [(2, 1, 4, 4), (2, 2, 2, 8), (2, 4, 1, 16)]
    assert [p.name for p in tmp_path.glob("plan-*.txt")] == ["plan-gpt-4l-tp2.txt"]
    peak = max(c["peak_memory_bytes"] for c in data["candidates"] if c["feasible"])
    # the defaults behind the numbers: the system's, then the winner's run's (16 B a parameter)
    assert data["warnings"] == [BUILTIN_A100, NO_MEMORY_LIMIT.format(fmt_bytes(peak)),
                                STATE_DEFAULT]


def test_global_batch_still_counts_microbatches_with_its_deprecation(capsys, tmp_path):
    data = plan_json(capsys, tmp_path, *MODEL, "--micro-batch", "2", "--gpus", "8", "--tp", "2",
                     "--global-batch", "16", "--gpu", "a100")
    assert sorted({(c["pp"], c["microbatches"]) for c in data["candidates"]}) == [
        (1, 4), (2, 8), (4, 16)]
    assert data["warnings"][0] == (
        "--global-batch is deprecated and removed in pipesim 0.2.0: it counts microbatches; "
        "give --global-batch-size (sequences, as in Megatron-LM)")
    assert data["warnings"][1] == BUILTIN_A100


def test_a_workload_file_takes_one_sequence_per_microbatch_with_a_warning(capsys):
    code, out, err = run(capsys, "plan", WL, "--gpus", "8", "--global-batch-size", "16", "-s",
                         "1f1b", "-j", "1")
    assert code == 0 and err == ""
    assert (f"warning: {WL}: a workload file states no sequences per microbatch; --micro-batch 1 "
            "is taken for --global-batch-size (M = B / DP)") in out.splitlines()
    assert f"best: pipesim run {WL} --gpus 8 --pp 1 -m 4 --vpp 1 -s 1f1b" in out  # 16 / DP 4


@pytest.mark.parametrize("argv, message", [
    ([*MODEL, "--micro-batch", "2", "--gpus", "8", "--global-batch-size", "33"],
     "--global-batch-size 33: expected a multiple of --micro-batch 2 (sequences per "
     "microbatch)"),
    ([*MODEL, "--gpus", "8", "--global-batch-size", "0"],
     "--global-batch-size: expected a positive number of sequences, got 0"),
    ([*MODEL, "--gpus", "8", "--global-batch", "8", "--global-batch-size", "8"],
     "--global-batch and --global-batch-size: give one (--global-batch counts microbatches and "
     "is deprecated; --global-batch-size counts sequences)"),
    ([*MODEL, "--gpus", "8", "--tp", "3", "--global-batch-size", "8"],
     "--tp 3: expected a divisor of --gpus 8"),
    ([WL, "--gpus", "8", "--tp", "4"],
     f"--tp 4: {WL} is written for tensor-parallel size 2 (model_parallel_NPU_group); generate "
     "it at that TP, or plan from the model flags"),
])
def test_batch_and_tp_refusals(capsys, argv, message):
    code, out, err = run(capsys, "plan", *argv, "-j", "1")
    assert (code, out, err) == (2, "", f"pipesim: error: {message}\n")


def test_the_budget_refuses_before_anything_runs_in_one_line(capsys, tmp_path, monkeypatch):
    """The 70B job of docs/planning.md without pruning: every screen is sure, 893,408 actions."""
    monkeypatch.chdir(tmp_path)    # plan writes its generated workloads to --out, here "."
    code, out, err = run(capsys, "plan", "--model", "llama", "--layers", "80", "--hidden", "8192",
                         "--heads", "64", "--kv-heads", "8", "--ffn", "28672", "--vocab",
                         "128256", "--seq-length", "8192", "--gpu", "h100", "--gpus", "256",
                         "--global-batch-size", "512", "--tp", "8", "--no-prune", "--system",
                         str(ROOT / "configs" / "system" / "h100-cluster.yaml"))
    assert (code, out) == (2, "")
    assert err == (
        "pipesim: error: --max-work: plan of llama-80l on 256 GPUs screens 104 candidate(s) of "
        "762,336 actions in all, synthesizes auto on its 2 cheapest pipeline degree(s) (at least "
        "0) and confirms the best 3 x 1 iteration(s) (up to 131,072), 893,408 actions, above the "
        "limit of 700,000 (about 8 s); pass --max-work 893408 (or 0 for no limit), or a lower "
        "--max-actions to list the largest candidates infeasible\n")


def test_megatron_rules_out_what_it_refuses_by_its_sizes_before_any_screen(capsys):
    code, out, err = run(capsys, "plan", WL, "--gpus", "8", "--runtime", "megatron", "-j", "1",
                         "--json", "-")
    assert (code, err) == (0, "")
    rows = {c["key"]: c for c in json.loads(out)["candidates"]}
    gpipe = rows["tp2-pp4-v1-m64-gpipe"]
    assert (gpipe["makespan_ns"], gpipe["runtimes"], gpipe["reason"]) == (
        None, None, "megatron does not run it: Megatron-LM has no gpipe schedule (it runs 1F1B, "
        "interleaved 1F1B with virtual stages, and zb-greedy, v-zb, v-half and v-min on the zero-bubble "
        "fork)")
    assert rows["tp2-pp4-v1-m64-1f1b"]["runtimes"]["megatron"]["accepts"]


def test_a_pruned_row_carries_the_bound_that_pruned_it(capsys):
    code, out, err = run(capsys, "plan", WL, "--gpus", "8", "-j", "1", "--json", "-")
    assert (code, err) == (0, "")
    pruned = [c for c in json.loads(out)["candidates"]
              if (c["reason"] or "").startswith("not run: its lower bound")]
    assert pruned
    for c in pruned:
        assert c["makespan_ns"] is None
        assert c["reason"].startswith(f"not run: its lower bound {c['lower_bound_ns'] / 1e6:.3f} "
                                      "ms is above the best found, ")


def test_no_memory_limit_is_a_warning_and_strict_refuses_it_before_the_search(capsys, tmp_path):
    """The built-in system states no capacity: without --memory-limit nothing is refused for its
    peak, which the plan says; --strict refuses that before any candidate runs; --memory-limit 0
    asks for no limit and is not warned; a system with the card's memory is not either. The
    winner's run states its own defaults, which --strict refuses after the search, as `pipesim
    run --strict` of the winner's command does."""
    code, out, err = run(capsys, "plan", WL, "--gpus", "8", "-s", "1f1b", "-j", "1", "--strict",
                         "--out", str(tmp_path / "strict"))
    assert (code, out) == (2, "")
    assert err == ("pipesim: error: --strict: " + NO_MEMORY_LIMIT.replace(" (the ranked "
                   "candidates' peaks reach {})", "") + "\n")
    assert not (tmp_path / "strict" / "candidates.jsonl").exists()     # nothing ran
    data = plan_json(capsys, tmp_path, WL, "--gpus", "8", "-s", "1f1b")
    peak = max(c["peak_memory_bytes"] for c in data["candidates"] if c["feasible"])
    assert data["warnings"][0] == NO_MEMORY_LIMIT.format(fmt_bytes(peak))
    run_says = data["warnings"][1:]
    assert [w.split(":")[0] for w in run_says] == [
        "activation memory assumed", "parameters per layer",
        "weights, gradients and optimizer state"]
    assert plan_json(capsys, tmp_path, WL, "--gpus", "8", "-s", "1f1b", "--memory-limit",
                     "0")["warnings"] == run_says
    code, out, err = run(capsys, "plan", WL, "--gpus", "8", "-s", "1f1b", "-j", "1",
                         "--memory-limit", "0", "--strict")
    assert (code, out) == (2, "") and err == f"pipesim: error: --strict: {run_says[0]}\n"
    data = plan_json(capsys, tmp_path, WL, "--gpus", "8", "-s", "1f1b", "--system",
                     str(ROOT / "configs" / "system" / "a100.yaml"))
    assert data["memory_limit_bytes"] == 80 * 2**30
    assert not any(w.startswith("no memory limit") for w in data["warnings"])


def test_a_model_planned_without_a_system_says_so_and_strict_refuses_it(capsys, tmp_path):
    code, out, err = run(capsys, "plan", *MODEL, "--gpus", "8", "--gpu", "a100", "-j", "1",
                         "--strict")      # a missing setting first
    assert (code, err) == (2, "pipesim: error: --global-batch-size: needed with the model "
                              "flags (sequences per iteration across DP, as in Megatron-LM)\n")
    code, out, err = run(capsys, "plan", *MODEL, "--gpus", "8", "--gpu", "a100", "-j", "1",
                         "--global-batch-size", "16", "--strict")
    assert (code, out) == (2, "")
    assert err == f"pipesim: error: --strict: {BUILTIN_A100}\n"
    data = plan_json(capsys, tmp_path, *MODEL, "--gpus", "8", "-s", "1f1b", "--system",
                     str(ROOT / "configs" / "system" / "a100.yaml"), "--global-batch-size", "16")
    # the cluster's file states its own estimates (the host time before each action)
    assert [w.split(" (")[0] for w in data["warnings"]] == [
        "runtime overheads of the system"]


def test_a_winner_near_the_cards_memory_is_said_to_leave_no_headroom(capsys, tmp_path):
    """Held against the system's whole capacity (no --memory-limit), a winner whose peak is
    above 90 % of it is a warning: pipesim's peak leaves out what the runtime itself holds."""
    data = plan_json(capsys, tmp_path, WL, "--gpus", "8", "-s", "1f1b", "--memory-limit", "0")
    peak = data["best"]["peak_memory_bytes"]
    system = tmp_path / "card.yaml"
    system.write_text(f"memory:\n  capacity_gib: {peak / 0.95 / 2**30!r}\n")
    near = plan_json(capsys, tmp_path, WL, "--gpus", "8", "-s", "1f1b", "--system", str(system))
    assert near["best"]["key"] == data["best"]["key"]
    assert near["warnings"][0] == (
        f"no headroom: the winner's peak, {fmt_bytes(peak)}, is 95% of the system's "
        f"{fmt_bytes(peak / 0.95)} a GPU, which the plan holds candidates against without "
        "--memory-limit; pipesim's peak leaves out the CUDA context, NCCL's buffers and the "
        "caching allocator's reserve (torchtitan's own runs' reserved peaks beside pipesim's: "
        "docs/validation.md); give --memory-limit GIB with room for them")
    # a limit the user gives is theirs: no warning
    given = plan_json(capsys, tmp_path, WL, "--gpus", "8", "-s", "1f1b", "--system", str(system),
                      "--memory-limit", f"{peak / 0.95 / 2**30!r}")
    assert not any(w.startswith("no headroom") for w in given["warnings"])


def test_strict_refuses_a_bad_file_for_the_file_not_for_a_warning(capsys, tmp_path):
    bad = tmp_path / "bad.txt"
    bad.write_text("HYBRID_TRANSFORMER_FWD_IN_BCKWD model_parallel_NPU_group: 1 pp: 2 "
                   "loss_keeps_bytes: abc\n1\nl -1 1 NONE 0 1 NONE 0 1 NONE 0 0\n")
    code, out, err = run(capsys, "plan", str(bad), "--gpus", "2", "--strict")
    assert (code, out) == (2, "")
    assert err == (f"pipesim: error: {bad}:1:85: loss_keeps_bytes: expected an integer >= 0 "
                   "and < 2^63 after 'loss_keeps_bytes:', found 'abc'\n")
