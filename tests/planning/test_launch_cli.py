"""From a plan to a launch: `pipesim plan --runtime/--launch` and `pipesim run --launch`, the
runtime check in their output, and the launch folder describing what was simulated."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

from simulator.cli.main import main

ROOT = Path(__file__).resolve().parents[2]
WL = str(ROOT / "workloads" / "gpt-24l.txt")


def run(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_plan_for_megatron_writes_its_launch(capsys, tmp_path):
    launch = tmp_path / "launch"
    code, out, err = run(capsys, "plan", WL, "--gpus", "64", "--runtime", "megatron", "-j", "1",
                         "--launch", str(launch), "--json", str(tmp_path / "p.json"))
    assert (code, err) == (0, "")
    assert out.splitlines()[0].endswith("; only what megatron runs")
    data = json.loads((tmp_path / "p.json").read_text())
    best = data["best"]
    assert best["runtimes"]["megatron"]["accepts"] and best["launch"] == str(launch)
    refused = [c for c in data["candidates"] if c["reason"] and
               c["reason"].startswith("megatron does not run it: ")]
    assert any("has no zb-h1 schedule" in c["reason"] for c in refused)
    feasible = [c for c in data["candidates"] if c["feasible"]]
    assert {c["schedule"] for c in feasible} == {"1f1b", "interleaved-1f1b", "zb-greedy",
                                                 "v-zb", "v-half", "v-min"}
    # the fork's V schedule in its three memory setups
    fork_v = "the zero-bubble fork's V schedule (sail-sg/zero-bubble-pipeline-parallelism: " \
             "--zero-bubble-v-schedule --zero-bubble-v-schedule-mem-setup "
    assert {(c["schedule"], c["runtimes"]["megatron"]["how"]) for c in feasible
            if c["schedule"] in ("v-zb", "v-half", "v-min")} == {
        ("v-zb", fork_v + "zb)"), ("v-half", fork_v + "half)"), ("v-min", fork_v + "min)")}
    # the zero-bubble fork's own layout, at ZB-1p's and ZB-2p's limits
    assert {(c["pp"], c["max_pending"]) for c in feasible if c["schedule"] == "zb-greedy"} \
        == {(c["pp"], k * c["pp"]) for c in feasible if c["schedule"] == "zb-greedy"
            for k in (1, 2)}
    assert all(c["runtimes"]["megatron"]["how"].startswith("the zero-bubble fork's own layout")
               for c in feasible if c["schedule"] == "zb-greedy")
    assert sorted(p.name for p in launch.iterdir()) == [
        "README.md", "megatron_args.txt", "schedule.csv", "stage_ranks.json", "torchtitan.toml"]
    args = (launch / "megatron_args.txt").read_text().splitlines()
    assert f"--pipeline-model-parallel-size {best['pp']}" in args
    assert "--tensor-model-parallel-size 2" in args and "--num-layers 24" in args
    assert f"--global-batch-size {best['microbatches'] * best['dp']}" in args
    readme = (launch / "README.md").read_text()
    assert best["command"] in readme
    # the README's command gives back the plan's number, and the README lists what that run's
    # numbers assume, as the run states it
    code, out, _ = run(capsys, *shlex.split(best["command"])[1:], "--json", "-")
    again = json.loads(out)
    assert again["makespan_ns"] == best["makespan_ns"]
    said = [f"- {w['message']} (set {w['option']})" if w["option"] else f"- {w['message']}"
            for w in again["warnings"]]
    assert len(said) == 4 and readme.split("pipesim's warnings for the run):\n\n")[1].split(
        "\n\n")[0] == "\n".join(said)


def test_run_launch_and_its_runtime_lines(capsys, tmp_path):
    head, rest = Path(WL).read_text().split("\n", 1)
    wl = tmp_path / "w.txt"
    wl.write_text(f"{head} stage_layers: 5 6 6 7\n{rest}")
    code, out, err = run(capsys, "run", str(wl), "--gpus", "32", "--launch",
                         str(tmp_path / "L"))
    assert (code, err) == (0, "")
    assert "runtimes (would they run it?)\n  torch      yes, Schedule1F1B\n  megatron   yes, 1F1B" \
        in out
    assert (tmp_path / "L" / "megatron_args.txt").read_text() == (
        "--tensor-model-parallel-size 2\n--pipeline-model-parallel-size 4\n--num-layers 24\n"
        "--decoder-first-pipeline-num-layers 5\n--decoder-last-pipeline-num-layers 7\n"
        "--micro-batch-size 1\n--global-batch-size 64\n")
    assert json.loads((tmp_path / "L" / "stage_ranks.json").read_text()) == {
        "0": [0], "1": [1], "2": [2], "3": [3]}


def test_run_json_says_why_a_runtime_refuses(capsys):
    code, out, _ = run(capsys, "run", WL, "-s", "zb-v", "--json", "-")
    assert code == 0
    rt = json.loads(out)["runtimes"]
    assert rt["torch"] == {"accepts": True, "how": "ScheduleZBVZeroBubble", "rule": None}
    assert rt["megatron"] == {"accepts": False, "how": "", "rule": (
        "Megatron-LM has no zb-v schedule (it runs 1F1B, interleaved 1F1B with virtual "
        "stages, and zb-greedy, v-zb, v-half and v-min on the zero-bubble fork)")}
    # 8 chunks of 3 whole layers, placed in a V: torchtitan's ZBVZeroBubble
    assert rt["torchtitan"] == {"accepts": True, "how": "ZBVZeroBubble", "rule": None}


def test_a_refused_runtime_says_so_in_its_file(capsys, tmp_path):
    code, _, _ = run(capsys, "run", WL, "-s", "zb-v", "--launch", str(tmp_path))
    assert code == 0
    text = (tmp_path / "megatron_args.txt").read_text()
    assert text == ("# Megatron-LM cannot run this configuration: Megatron-LM has no zb-v "
                    "schedule (it runs 1F1B, interleaved 1F1B with virtual stages, and "
                    "zb-greedy, v-zb, v-half and v-min on the zero-bubble fork).\n"
                    "# No arguments are written: none would reproduce what pipesim "
                    "simulated.\n")
    toml = (tmp_path / "torchtitan.toml").read_text()
    assert 'pipeline_parallel_schedule = "ZBVZeroBubble"' in toml and "cannot run" not in toml
    readme = (tmp_path / "README.md").read_text()
    assert ("Transformer layers per stage (stage order): 3 3 3 3 3 3 3 3 (24 in all); the "
            "embedding on stage 0, the LM head and loss on stage 7.") in readme


def test_plan_runtime_nothing_fits_is_one_line(capsys):
    code, out, err = run(capsys, "plan", WL, "--gpus", "64", "--runtime", "megatron", "-j", "1",
                         "-s", "zb-h1")
    assert code == 2 and out == ""
    assert err.startswith("pipesim: error: --runtime megatron: no candidate it runs on --gpus "
                          "64; the first refused: megatron does not run it: ")
    assert len(err.splitlines()) == 1


def test_the_default_plan_of_the_bundled_file_writes_a_torchtitan_launch(capsys, tmp_path):
    """`plan workloads/gpt-24l.txt --gpus 64 --launch DIR`: the default winner is one a runtime
    launches; here torchtitan from the written CSV, which loads back as the same schedule."""
    launch = tmp_path / "launch"
    code, out, err = run(capsys, "plan", WL, "--gpus", "64", "--launch", str(launch), "--json",
                         str(tmp_path / "p.json"))
    assert (code, err) == (0, "")
    best = json.loads((tmp_path / "p.json").read_text())["best"]
    titan = (launch / "torchtitan.toml").read_text()
    assert best["runtimes"]["torchtitan"]["accepts"]
    assert f"pipeline_parallel_degree = {best['pp']}\n" in titan
    assert 'pipeline_parallel_schedule_csv = "schedule.csv"\n' in titan
    again = main(["run", WL, "--gpus", "64", "--pp", str(best["pp"]), "-m",
                  str(best["microbatches"]), "--vpp", str(best["vpp"]), "--schedule-file",
                  str(launch / "schedule.csv"), "--json", "-"])
    assert again == 0
    assert json.loads(capsys.readouterr().out)["makespan_ns"] == best["makespan_ns"]
