"""`pipesim plan`: the JSON a user reads, the winner's command reproducing its number exactly,
one-line errors; and `pipesim run -s auto` built from the run's own costs."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import pytest

from simulator.cli.main import main

ROOT = Path(__file__).resolve().parents[2]
WL = str(ROOT / "workloads" / "gpt-24l.txt")
A100 = str(ROOT / "configs" / "system" / "a100.yaml")
FIELDS = {"key", "tp", "pp", "dp", "vpp", "microbatches", "schedule", "max_in_flight",
          "recompute", "makespan_ns", "p95_ns", "peak_memory_bytes", "bubble_ratio",
          "lower_bound_ns", "engine",
          "feasible", "reason"}


def run(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def run_json(capsys, *argv: str) -> dict:
    code, out, err = run(capsys, *argv, "--json", "-")
    assert (code, err) == (0, ""), err
    return json.loads(out)


@pytest.fixture(scope="module")
def planned(tmp_path_factory):
    out = tmp_path_factory.mktemp("plan")
    argv = ["plan", WL, "--gpus", "8", "--global-batch", "16", "--system", A100, "-j", "1",
            "--no-prune", "--json", str(out / "plan.json"), "--out", str(out / "dir")]
    assert main(argv) == 0
    return out, json.loads((out / "plan.json").read_text())


def test_plan_json_lists_every_candidate_ranked(planned):
    _, data = planned
    cands = data["candidates"]
    # 3 pipeline degrees x 21 hand-made (schedule, vpp) + 8 auto + 4 zb-greedy + 2 v-zb
    assert len(cands) == 77
    assert all(FIELDS <= set(c) for c in cands)
    best = data["best"]
    # the fastest that Megatron-LM or torchtitan runs; 2 faster ones (DualPipe at pp 2, ...)
    # run on neither and are listed after it (the preset's 50 us before each action weighs on
    # the schedules of more, shorter actions)
    assert cands[0]["key"] == best["key"] == "tp2-pp1-v1-m4-gpipe"
    assert (best["tp"], best["pp"], best["dp"], best["vpp"], best["microbatches"]) == (2, 1, 4, 1, 4)
    assert data["notes"] == ["2 faster candidate(s) run on neither Megatron-LM nor torchtitan "
                             "(listed after the winner); --runtime torch lets one win"]
    assert (best["engine"], best["feasible"], best["p95_ns"], best["recompute"]) == \
        ("simpy", True, None, "file")
    # M = B / DP for every pipeline degree of 8 GPUs at TP 2
    assert {(c["pp"], c["dp"], c["microbatches"]) for c in cands} == \
        {(1, 4, 4), (2, 2, 8), (4, 1, 16)}
    feasible = [c for c in cands if c["feasible"]]
    dropped = [c for c in cands if not c["feasible"]]
    assert cands == feasible + dropped
    # the confirmed ones (SimPy) first by makespan, then the evaluator's ranking
    confirmed = [c["makespan_ns"] for c in feasible[:3]]
    assert confirmed == sorted(confirmed) and all(c["engine"] == "simpy" for c in feasible[:3])
    def launchable(c):
        return c["runtimes"]["megatron"]["accepts"] or c["runtimes"]["torchtitan"]["accepts"]

    rest = [(not launchable(c), c["makespan_ns"]) for c in feasible[3:]]
    assert rest == sorted(rest)
    assert all(c["reason"] is None and c["makespan_ns"] > 0 for c in feasible)
    assert all(c["reason"] and c["makespan_ns"] is None for c in dropped)
    assert sum(c["schedule"] == "2bw" for c in dropped) == 3
    assert any(c["reason"] == "--pp: dualpipe needs an even number of ranks, got 1"
               for c in dropped)
    autos = [c for c in cands if c["schedule"] == "auto"]
    assert sorted((c["pp"], c["vpp"], c["max_in_flight"]) for c in autos) == \
        [(1, 1, 1), (1, 1, 2), (1, 2, 2), (1, 2, 4), (2, 1, 2), (2, 1, 4), (2, 2, 4), (2, 2, 8)]
    # the zero-bubble fork's layout at 1p and 2p on the two best degrees of 2 or more ranks
    zbs = [c for c in cands if c["schedule"] == "zb-greedy"]
    assert sorted((c["pp"], c["vpp"], c["max_pending"]) for c in zbs) == \
        [(2, 1, 2), (2, 1, 4), (4, 1, 4), (4, 1, 8)]
    # and its V layout on the same two degrees, two chunks a rank
    assert sorted((c["pp"], c["vpp"]) for c in cands if c["schedule"] == "v-zb") == \
        [(2, 2), (4, 2)]


def test_the_lower_bound_holds_and_pruning_keeps_the_winner(planned, capsys):
    _, full = planned
    # the bound is below every makespan it was computed for (DualPipe(V) have none)
    ran = [c for c in full["candidates"] if c["lower_bound_ns"] is not None
           and c["makespan_ns"] is not None]
    assert len(ran) == 65
    assert all(c["lower_bound_ns"] <= c["makespan_ns"] for c in ran)
    assert {c["schedule"] for c in full["candidates"] if c["lower_bound_ns"] is None
            and c["reason"] is None} == {"dualpipe", "dualpipe-v"}
    pruned = run_json(capsys, "plan", WL, "--gpus", "8", "--global-batch", "16", "--system",
                      A100, "-j", "1")
    assert pruned["best"] == full["best"]
    skipped = [c for c in pruned["candidates"] if c["reason"] and c["reason"].startswith(
        "not run: its lower bound")]
    # pruned against the best that Megatron-LM or torchtitan runs (the winner is one of them)
    assert len(skipped) == 41
    best = full["best"]["makespan_ns"]
    assert all(c["lower_bound_ns"] > best and c["makespan_ns"] is None for c in skipped)
    # the a100 preset's DGX A100 cluster: TP on NVLink, DP on a 200 Gb/s HDR NIC per GPU
    assert skipped[0]["reason"] == ("not run: its lower bound 258.732 ms is above the best "
                                    "found, 254.715 ms")


def test_best_command_reproduces_the_makespan_exactly(planned, capsys):
    out, data = planned
    best = data["best"]
    argv = shlex.split(best["command"])
    assert argv[:2] == ["pipesim", "run"]
    again = run_json(capsys, *argv[1:])
    assert again["makespan_ns"] == best["makespan_ns"]
    assert again["peak_memory_bytes"] == best["peak_memory_bytes"]


def test_the_winners_csv_gives_the_same_number_or_is_refused(capsys, tmp_path):
    base = ["plan", WL, "--gpus", "8", "--global-batch", "16", "--system", A100, "-j", "1",
            "--confirm", "1", "--json", str(tmp_path / "p.json"), "--csv", str(tmp_path / "b.csv")]
    # bidirectional DualPipe: torch's CSV cannot hold it (a winner only where nothing Megatron-LM
    # or torchtitan runs is faster, so put it first here)
    from simulator.cli.commands.plan import _write_csv
    from simulator.planning.plan import PlanSettings, plan

    res = plan(PlanSettings(WL, 8, global_batch=16, system=A100, confirm=1,
                            schedules=("dualpipe",)))
    dual = next(o for o in res.outcomes if o.candidate.schedule == "dualpipe" and o.feasible)
    res.outcomes.remove(dual)
    res.outcomes.insert(0, dual)
    assert _write_csv(res, str(tmp_path / "b.csv"), None) is None
    assert capsys.readouterr().err == (
        "pipesim: note: --csv: not written: dualpipe runs two stages on the same weights (two "
        "model copies); torch's runtime holds one copy per stage\n")
    assert not (tmp_path / "b.csv").exists()
    # under 13 GiB the winner is one the CSV holds: run from it, the same number
    code, out, err = run(capsys, *base, "--memory-limit", "13")
    assert (code, err) == (0, "")
    best = json.loads((tmp_path / "p.json").read_text())["best"]
    assert best["csv"] == str(tmp_path / "b.csv")
    again = run_json(capsys, *shlex.split(best["command_schedule_file"])[1:])
    assert again["makespan_ns"] == best["makespan_ns"]


def test_an_auto_candidate_reproduces_from_its_run_command(planned, capsys):
    _, data = planned
    auto = next(c for c in data["candidates"] if c["schedule"] == "auto" and c["pp"] == 2)
    got = run_json(capsys, "run", WL, "--gpus", "8", "--pp", str(auto["pp"]), "-m",
                   str(auto["microbatches"]), "--vpp", str(auto["vpp"]), "-s", "auto",
                   "-O", f"max_in_flight={auto['max_in_flight']}", "-O", "iterations=200",
                   "--system", A100)
    assert got["makespan_ns"] == auto["makespan_ns"]
    assert got["peak_memory_bytes"] == auto["peak_memory_bytes"]


def test_resume_screens_nothing_twice_and_gives_the_same_plan(planned, capsys):
    out, data = planned
    code, text, err = run(capsys, "plan", WL, "--gpus", "8", "--global-batch", "16", "--system",
                          A100, "-j", "1", "--no-prune", "--out", str(out / "dir"), "--resume")
    assert (code, err) == (0, "")
    assert "77 candidates: 0 screened, 77 taken from --out (--resume); ranked" in text
    # the estimate counts each zb-greedy layout as its actions once more: at pp 2 (M 8) and
    # pp 4 (M 16), 2 x (48 + 48) + 2 x (192 + 192) of the 44,608
    assert again_counts(out) == {"candidates": 77, "screened": 0, "resumed": 77, "pruned": 0,
                                 "ruled_out": 0, "work_estimate": 46528, "work_done": 24}
    again = json.loads((out / "dir" / "plan.json").read_text())
    assert again["candidates"] == [{k: v for k, v in c.items()
                                    if k not in ("csv", "command_schedule_file")}
                                   for c in data["candidates"]]
    # the resumed winner runs once more for the assumptions behind its numbers: the same ones
    assert again["warnings"] == data["warnings"] and any(
        w.startswith("activation memory assumed") for w in again["warnings"])


@pytest.mark.parametrize("argv, message", [
    (["--memory-limit", "2"], "pipesim: error: --memory-limit 2.00 GiB: no feasible "
     "configuration; the smallest peak memory found is 4.02 GiB per GPU (pp 4, vpp 1, 1f1b, full "
     "recompute); raise --memory-limit, add GPUs (--gpus) or lower --global-batch"),
    (["--gpus", "7"], f"pipesim: error: --gpus 7: expected a multiple of the workload's "
     f"tensor-parallel size 2 ({WL})"),
    (["--global-batch", "0"], "pipesim: error: --global-batch: expected a positive number of "
     "microbatches, got 0"),
    (["--resume"], "pipesim: error: --resume: needs --out DIR (the folder of the plan to "
     "complete)"),
    (["--plot", "x.txt"], "pipesim: error: --plot: cannot tell the image format of 'x.txt': "
     "expected a name ending in .png, .svg or .pdf, found '.txt'"),
])
def test_bad_input_is_one_line_and_exit_2(capsys, argv, message):
    base = ["plan", WL, "--gpus", "8", "--global-batch", "16", "-j", "1", "--json", "-"]
    if argv[0] == "--gpus":
        base[3] = argv[1]
        argv = []
    code, out, err = run(capsys, *base, *argv)
    assert (code, out, err) == (2, "", message + "\n")


def test_a_dp_that_does_not_divide_the_global_batch_is_listed_with_the_reason(capsys):
    data = run_json(capsys, "plan", WL, "--gpus", "8", "--global-batch", "6", "-j", "1",
                    "--confirm", "1")
    pp1 = [c for c in data["candidates"] if c["pp"] == 1]
    assert pp1 and all(c["reason"] == "global batch 6 is not a multiple of DP 4"
                       and not c["feasible"] for c in pp1)
    assert {c["microbatches"] for c in data["candidates"] if c["pp"] == 2} == {3}


def test_run_auto_is_synthesized_for_the_runs_own_costs(capsys):
    from simulator.api import simulate
    from simulator.engine.stage_costs import run_stage_costs
    from simulator.schedules.synthesis.search import generate_auto
    from simulator.workload.parser import load_workload
    from simulator.workload.partition import partition

    res = simulate(WL, "auto", pp=4, microbatches=8, gpus=8,
                   schedule_options={"max_in_flight": 3})
    wl = load_workload(WL)
    costs = run_stage_costs(partition(wl, 4), wl.header, res.system, 4)
    assert costs.f[0] != costs.f[1]                  # the embedding: a heavier first stage
    assert costs.comm == res.system.links.transfer_ns(wl.header.pp_comm)
    want = generate_auto(4, 8, 1, max_in_flight=3, stage_costs=costs)
    assert res.schedule.ranks == want.ranks
    assert res.summary.to_dict()["peak_inflight_microbatches"] <= 3


def test_compare_runs_auto_beside_the_hand_made_schedules():
    from simulator.api import compare

    runs = compare(WL, ["1f1b", "zb-h1", "auto"], pp=2, microbatches=8)
    assert [r.schedule for r in runs] == ["1f1b", "zb-h1", "auto"]
    assert all(r.error is None for r in runs)
    # with the run's own costs and K = P, auto finds ZB-H1's order: the same iteration time
    assert runs[2].result.makespan_ns == runs[1].result.makespan_ns < runs[0].result.makespan_ns


def test_model_flags_vary_tp_and_the_command_runs_the_generated_file(capsys, tmp_path):
    data = run_json(capsys, "plan", "--model", "gpt", "--layers", "4", "--hidden", "512",
                    "--heads", "8", "--seq", "256", "--gpus", "4", "--global-batch", "8",
                    "-j", "1", "--out", str(tmp_path))
    assert {c["tp"] for c in data["candidates"]} == {1, 2, 4}
    assert sorted(p.name for p in tmp_path.glob("plan-*.txt")) == [
        "plan-gpt-4l-tp1.txt", "plan-gpt-4l-tp2.txt", "plan-gpt-4l-tp4.txt"]
    best = data["best"]
    argv = shlex.split(best["command"])
    assert argv[2] == str(tmp_path / f"plan-gpt-4l-tp{best['tp']}.txt")
    assert run_json(capsys, *argv[1:])["makespan_ns"] == best["makespan_ns"]


@pytest.mark.parametrize("argv, message", [
    (["--model", "gpt", "--layers", "4", "--hidden", "512", "--heads", "8", "--gpus", "4",
      "--global-batch", "8"], "pipesim: error: --seq: needed with --model (the model's shape)"),
    (["--model", "gpt", "--layers", "4", "--hidden", "512", "--heads", "8", "--seq", "64",
      "--gpus", "4"], "pipesim: error: --global-batch-size: needed with the model "
     "flags (sequences per iteration across DP, as in Megatron-LM)"),
    (["--gpus", "4"], "pipesim: error: WORKLOAD: expected a workload file, or the model flags "
     "(--model gpt|llama --layers --hidden --heads --seq), or --hf-config / --megatron-args / "
     "--torchtitan"),
])
def test_model_flag_errors(capsys, argv, message):
    code, out, err = run(capsys, "plan", *argv, "--json", "-")
    assert (code, out, err) == (2, "", message + "\n")


def test_schedules_limits_the_hand_made_ones_and_the_cost_aware_are_always_added(capsys):
    data = run_json(capsys, "plan", WL, "--gpus", "8", "-s", "1f1b,zb-h1", "-j", "1",
                    "--no-prune")
    # 3 pipeline degrees x (1f1b + zb-h1 at v = 1, 2, 4) + auto on 2 degrees x 4 + zb-greedy
    # on 2 degrees x 2 + v-zb on 2 degrees
    assert len(data["candidates"]) == 26
    assert {c["schedule"] for c in data["candidates"]} == {"1f1b", "zb-h1", "auto", "zb-greedy",
                                                           "v-zb"}
    # named in --schedules, zb-greedy is laid out on the winning shapes all the same
    named = run_json(capsys, "plan", WL, "--gpus", "8", "-s", "1f1b,zb-h1,zb-greedy", "-j", "1",
                     "--no-prune")
    assert [c["key"] for c in named["candidates"]] == [c["key"] for c in data["candidates"]]


def test_jitter_ranks_the_confirmed_by_p95_and_the_command_reproduces_it(capsys, tmp_path):
    data = run_json(capsys, "plan", WL, "--gpus", "8", "--global-batch", "16", "-s",
                    "1f1b,zb-h1", "-j", "1", "--jitter", "0.1", "--iterations", "5",
                    "--confirm", "2", "--plot", str(tmp_path / "pareto.png"))
    assert data["objective"] == "p95_ns"
    first, second = data["candidates"][:2]
    assert first["engine"] == second["engine"] == "simpy"
    assert first["p95_ns"] <= second["p95_ns"]
    assert all(c["p95_ns"] is None for c in data["candidates"][2:])
    argv = shlex.split(data["best"]["command"])
    assert argv[-6:] == ["--jitter", "0.1", "--iterations", "5", "--seed", "0"]
    again = run_json(capsys, *argv[1:])
    times = sorted(again["iteration_times_ns"])
    assert again["makespan_ns"] == data["best"]["makespan_ns"]
    assert times[4] == data["best"]["p95_ns"]   # nearest rank: ceil(0.95 x 5) = 5th
    assert (tmp_path / "pareto.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_what_does_not_fit_is_tried_with_full_recompute(capsys, tmp_path):
    dest = tmp_path / "p.json"
    # full recompute replays whole layers (2 rows of this file each): the backward holds a
    # layer's stash again while it recomputes it, so the least peak is 4.02 GiB
    code, out, err = run(capsys, "plan", WL, "--gpus", "8", "--memory-limit", "4.5", "-j", "1", "--confirm", "1", "--json", str(dest))
    assert code == 0
    best = json.loads(dest.read_text())["best"]
    assert best["recompute"] == "full" and best["peak_memory_bytes"] <= 4.5 * 2**30
    assert "--recompute full" in best["command"]
    again = run_json(capsys, *shlex.split(best["command"])[1:])
    assert again["makespan_ns"] == best["makespan_ns"]
    assert again["peak_memory_bytes"] == best["peak_memory_bytes"]


def test_the_full_recompute_retry_groups_layers_as_asked(capsys, tmp_path):
    # uniform groups of 2 layers: a backward holds two layers' stash again while it
    # recomputes them, so the winner's peak is above every-layer-alone's; its command and
    # launch carry the grouping and the command reproduces the numbers
    dest, launch = tmp_path / "p.json", tmp_path / "launch"
    code, _, _ = run(capsys, "plan", WL, "--gpus", "8", "--memory-limit", "4.5", "-j", "1",
                     "--confirm", "1", "--recompute-num-layers", "2", "--runtime", "megatron",
                     "--json", str(dest), "--launch", str(launch))
    assert code == 0
    best = json.loads(dest.read_text())["best"]
    assert best["recompute"] == "full"
    assert "--recompute full --recompute-method uniform --recompute-num-layers 2" in \
        best["command"]
    again = run_json(capsys, *shlex.split(best["command"])[1:])
    assert (again["makespan_ns"], again["peak_memory_bytes"]) == (best["makespan_ns"],
                                                                  best["peak_memory_bytes"])
    alone = run_json(capsys, *shlex.split(best["command"].replace(
        "--recompute-num-layers 2", "--recompute-num-layers 1"))[1:])
    assert again["peak_memory_bytes"] > alone["peak_memory_bytes"]
    written = (launch / "megatron_args.txt").read_text().splitlines()
    assert "--recompute-method uniform" in written and "--recompute-num-layers 2" in written


def test_full_recompute_retries_stay_within_max_work(capsys):
    """The later rounds and the retries are counted against --max-work as they come: at
    130,000 actions 18 screens and 36 retries are left out, and the refusal names both, with
    the limit that runs them."""
    code, out, err = run(capsys, "plan", WL, "--gpus", "8", "--memory-limit", "4", "-j", "1",
                         "--confirm", "1", "--max-work", "130000")
    assert code == 2 and out == ""
    assert err == (
        "pipesim: error: --memory-limit 4.00 GiB: no feasible configuration; the smallest peak "
        "memory found is 7.53 GiB per GPU (pp 4, vpp 2, v-min); "
        "raise --memory-limit, add GPUs (--gpus) or lower --global-batch-size; 18 "
        "candidate(s) not screened: the plan would pass --max-work 130000 (pass --max-work "
        "141052 to screen them); 36 candidate(s) over the memory limit not tried again with "
        "full recompute: the plan would pass --max-work 130000 (pass --max-work 198332 to try "
        "them)\n")


def again_counts(out):
    return json.loads((out / "dir" / "plan.json").read_text())["counts"]


def test_the_title_names_each_count_by_what_happened_to_it(capsys):
    """A fresh plan: what ran, what its lower bound skipped and what its sizes ruled out, never
    'resumed' (it used to call the skipped ones resumed)."""
    code, text, _ = run(capsys, "plan", WL, "--gpus", "8", "--global-batch", "16", "--system",
                        A100, "-j", "1")
    assert code == 0
    title = text.splitlines()[0]
    assert "resumed" not in title and "--resume" not in title
    import re

    got = re.search(r"(\d+) candidates: (\d+) screened, (\d+) not run \(lower bound above the "
                    r"best\)(?:, (\d+) ruled out by their sizes)?; ranked", title)
    assert got, title
    total, screened, pruned, ruled = (int(g or 0) for g in got.groups())
    assert total == screened + pruned + ruled and pruned > 0


def test_auto_is_synthesized_once_per_candidate(capsys, tmp_path, monkeypatch):
    """The confirming run takes the schedule the screen synthesized: 4 auto candidates, 4
    syntheses (there were 6: the confirmed one twice more), and the written CSV of the winner,
    the fork's v-zb laid out for the run, gives its number."""
    import simulator.schedules.synthesis.search as synthesis

    calls = []
    real = synthesis.synthesize

    def counted(*args, **kwargs):
        calls.append(args[:3])
        return real(*args, **kwargs)

    monkeypatch.setattr(synthesis, "synthesize", counted)
    wl = tmp_path / "tp1.txt"   # gpt-24l with TP 1: v-zb wins at pp 3, auto second (at v 1:
    # torchtitan needs M >= the 6 stages of v 2)
    wl.write_text(Path(WL).read_text().replace("model_parallel_NPU_group: 2",
                                               "model_parallel_NPU_group: 1", 1))
    dest = tmp_path / "p.json"
    code, out, err = run(capsys, "plan", str(wl), "--gpus", "3", "--global-batch", "4", "-s",
                         "1f1b", "-j", "1", "--confirm", "2", "--json", str(dest), "--csv",
                         str(tmp_path / "plan-best.csv"))
    assert (code, err) == (0, "")
    data = json.loads(dest.read_text())
    best = data["best"]
    assert best["key"] == "tp1-pp3-v2-m4-v-zb"
    second = data["candidates"][1]
    assert (second["key"], second["engine"]) == ("tp1-pp3-v1-m4-auto-k3", "simpy")
    assert sorted(calls) == [(3, 4, 1), (3, 4, 1), (3, 4, 2), (3, 4, 2)]
    assert best["csv"] == str(tmp_path / "plan-best.csv")
    monkeypatch.setattr(synthesis, "synthesize", real)
    again = run_json(capsys, *shlex.split(best["command_schedule_file"])[1:])
    assert again["makespan_ns"] == best["makespan_ns"]


def test_auto_is_synthesized_only_while_the_plan_stays_within_max_work(capsys, tmp_path):
    """--max-work holds auto's syntheses on the two cheapest shapes (pp 1 and 2); under 8 GB
    they go to pp 2 and 4, and the two V-mode ones at pp 4 would pass 20,000: listed, noted."""
    wl = tmp_path / "tp1.txt"
    wl.write_text(Path(WL).read_text().replace("model_parallel_NPU_group: 2",
                                               "model_parallel_NPU_group: 1", 1))
    data = run_json(capsys, "plan", str(wl), "--gpus", "8", "--global-batch", "16", "-s",
                    "1f1b", "--memory-limit", "8", "-j", "1", "--confirm", "1",
                    "--max-work", "20000")
    # the zb-greedy and v-zb layouts at pp 2 and 4 (M 4 and 8) fit within it, each counted as
    # three times its actions
    assert data["notes"] == ["2 auto candidate(s) not synthesized: the plan would pass "
                             "--max-work 20000 (pass --max-work 31648 to synthesize them)"]
    left = {c["key"]: c["reason"] for c in data["candidates"]
            if c["reason"] and c["reason"].startswith("auto not")}
    assert left == dict.fromkeys(["tp1-pp4-v2-m8-auto-k8", "tp1-pp4-v2-m8-auto-k16"],
                                 "auto not synthesized: the plan would pass --max-work 20000")


@pytest.mark.parametrize("argv", [
    ["--gpus", "8", "--memory-limit", "4.5"],   # nothing fits until the full-recompute retries
    ["--gpus", "64"],
    ["--gpus", "16", "--runtime", "megatron"],
])
def test_the_budgets_count_of_the_plan_is_within_2x_of_what_ran(capsys, tmp_path, argv):
    """work_estimate is what the plan counted against --max-work: the sure part before any
    screen, then each later round, retry and synthesis as it came; work_done what ran."""
    dest = tmp_path / "p.json"
    code, _, _ = run(capsys, "plan", WL, *argv, "-j", "1", "--json", str(dest))
    assert code == 0
    counts = json.loads(dest.read_text())["counts"]
    assert 0.5 <= counts["work_done"] / counts["work_estimate"] <= 2.0
