"""zb-greedy is the zero-bubble fork's own scheduler: order for order its layouts (golden/
zb_greedy.json, made by the fork's code), its limits, and a launch of the fork run with it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from simulator.api import simulate
from simulator.cli.main import main
from simulator.errors import ConfigError
from simulator.schedules import generate
from simulator.schedules.stage_costs import StageCosts

GOLDEN = json.loads((Path(__file__).parent / "golden" / "zb_greedy.json").read_text())


def _costs(case: dict) -> StageCosts:
    pp = case["pp"]
    return StageCosts((case["f"],) * pp, (case["i"],) * pp, (case["w"],) * pp, case["comm"],
                      tuple(tuple(float(x) for x in m) for m in case["memory"]))


@pytest.mark.parametrize("case", GOLDEN["cases"], ids=lambda c: (
    f"P{c['pp']}-M{c['microbatches']}-f{c['f']}i{c['i']}w{c['w']}c{c['comm']}"
    f"-n{c['max_pending']}"))
def test_layout_equals_the_forks_scheduler(case):
    args = (case["pp"], case["microbatches"], 1)
    opts = {"max_pending": case["max_pending"], "stage_costs": _costs(case)}
    if case.get("fails"):
        with pytest.raises(ConfigError) as err:
            generate("zb-greedy", *args, **opts)
        assert str(err.value) == (
            f"zb-greedy: max_pending={case['max_pending']:g}: no layout keeps the memory under "
            f"{case['max_pending']:g} forwards' activations (the zero-bubble fork's scheduler "
            "stops here); give a larger max_pending")
        return
    sched = generate("zb-greedy", *args, **opts)
    assert sched.as_strings() == case["ranks"]
    assert sched.meta["span"] == case["span"]


def test_the_golden_file_names_its_source_and_command():
    assert GOLDEN["command"] == ("python3 tests/schedules/golden/make_zb_greedy_golden.py "
                                 "--zb-repo ZB")
    assert "sail-sg/zero-bubble-pipeline-parallelism" in GOLDEN["source"]
    assert len(GOLDEN["commit"]) == 40
    assert sum(1 for c in GOLDEN["cases"] if not c.get("fails")) >= 60


@pytest.mark.parametrize("pp", [2, 4, 8])
def test_at_unit_costs_and_p_forwards_it_is_zb_h1(pp):
    # F = I = W, an I that frees nothing, the fork's ZB-1p limit: ZB-H1's layout (M > 2P)
    for m in (2 * pp + 1, 3 * pp):
        assert generate("zb-greedy", pp, m, 1, max_pending=pp).as_strings() == \
            generate("zb-h1", pp, m, 1).as_strings()


def test_one_forward_of_memory_runs_each_microbatch_through_before_the_next():
    sched = generate("zb-greedy", 3, 2, 1, max_pending=1)
    for r in range(3):
        assert sched.as_strings()[r] == [f"{r}F0", f"{r}I0", f"{r}W0",
                                         f"{r}F1", f"{r}I1", f"{r}W1"]


@pytest.mark.parametrize("value, found", [(0, "0"), ("x", "'x'"), (-2, "-2")])
def test_a_bad_limit_is_one_line(value, found):
    with pytest.raises(ConfigError) as err:
        generate("zb-greedy", 4, 8, 1, max_pending=value)
    assert str(err.value) == ("zb-greedy: max_pending: expected a positive number of forwards "
                              f"(e.g. 4 for ZB-1p, 8 for ZB-2p), found {found}")


def test_virtual_stages_and_a_wrong_stage_count_are_refused():
    with pytest.raises(ConfigError) as err:
        generate("zb-greedy", 4, 8, 2)
    assert str(err.value) == ("zb-greedy: --vpp 2: the zero-bubble fork's greedy lays out one "
                              "stage a rank (expected --vpp 1)")
    with pytest.raises(ConfigError) as err:
        generate("zb-greedy", 4, 8, 1, stage_costs=StageCosts.unit(3))
    assert str(err.value) == "zb-greedy: expected 4 stage costs, one per stage (--pp 4), found 3"


@pytest.mark.parametrize("name, vpp, n", [("zb-greedy", 1, 4), ("v-zb", 2, 8), ("auto", 1, 4)])
def test_every_cost_driven_schedule_reads_a_costs_file_from_the_command_line(
        tmp_path, capsys, name, vpp, n):
    """`pipesim schedule NAME --stage-costs FILE` and `run -O stage_costs=FILE` hand the
    generator the file's path: each cost-driven schedule reads it as auto does (fuzz seed 38
    found zb-greedy and v-zb failing on it with an internal error)."""
    from simulator.cli.main import main as cli
    from simulator.schedules.synthesis.costs import load_stage_costs

    costs = tmp_path / "costs.yaml"
    costs.write_text(f"f: {[1.0] * n}\ni: {[1.0 + s % 2 for s in range(n)]}\nw: {[0.5] * n}\n"
                     "comm: 0.1\n")
    out = tmp_path / "s.json"
    assert cli(["schedule", name, "--pp", "4", "-m", "8", "--vpp", str(vpp), "--stage-costs",
                str(costs), "--json", str(out)]) == 0
    from_file = json.loads(out.read_text())["ranks"]
    want = generate(name, 4, 8, vpp, stage_costs=load_stage_costs(costs, n))
    assert from_file == [[str(a) for a in acts] for acts in want.ranks]
    short = tmp_path / "short.yaml"
    short.write_text("f: [1, 1]\ni: [1, 1]\nw: [1, 1]\n")
    assert cli(["schedule", name, "--pp", "4", "-m", "8", "--vpp", str(vpp), "--stage-costs",
                str(short)]) == 2
    how = f"--pp 4 x --vpp 2" if vpp == 2 else "--pp 4"
    assert capsys.readouterr().err.strip().splitlines()[-1] == (
        f"pipesim: error: {short}: f: expected {n} costs, one per stage ({how}), found 2")


ZB_ARGS = ("--num-layers 24 --hidden-size 1024 --num-attention-heads 16 --seq-length 1024 "
           "--micro-batch-size 1 --global-batch-size 32 --fp16 "
           "--pipeline-model-parallel-size 4 --enable-zero-bubble ")


def test_a_run_lays_it_out_for_its_own_costs_and_memory(tmp_path):
    wl = tmp_path / "w.txt"
    assert main(["generate", "--model", "gpt", "--layers", "24", "--hidden", "1024", "--heads",
                 "16", "--seq", "1024", "--micro-batch", "1", "--pp", "4", "--ga", "16",
                 "--precision", "fp16", "--gpu", "a100", "-o", str(wl)]) == 0
    res = simulate(str(wl), "zb-greedy", "configs/system/a100.yaml", layout="model",
                   schedule_options={"max_pending": 8}, p2p="async")
    from simulator.engine.stage_costs import run_stage_costs
    from simulator.schedules.library.zb_greedy import greedy_layout
    from simulator.system.topology import LinkModel

    costs = run_stage_costs(res.partition, res.workload.header, res.system, 4,
                            LinkModel(res.workload.header, res.system, 4), p2p="async")
    # F keeps the stash of its six layers; Megatron's zero-bubble runtime's I frees it and
    # keeps what the deferred weight-gradient GEMMs read (the header's deferred_wgrad_bytes)
    h = res.workload.header
    f, i, w = costs.memory[1]
    assert (f, i, w) == (6 * h.activation_bytes, 6 * (h.deferred_wgrad_bytes - h.activation_bytes),
                         -6 * h.deferred_wgrad_bytes)
    ranks, _ = greedy_layout(4, 16, costs, 8)
    assert res.schedule.ranks == ranks
    # more forwards in flight than ZB-H1's p: the I frees most of each stash
    in_flight = max(res.schedule.as_strings()[0].index("0I0"), 0)
    assert in_flight > 4


def test_the_forks_launch_runs_it_with_its_pending_backwards(tmp_path, capsys):
    args = tmp_path / "zb.txt"
    args.write_text(ZB_ARGS + "--zero-bubble-max-pending-backward 6")
    out = tmp_path / "r.json"
    assert main(["run", "--megatron-args", str(args), "--gpus", "4", "--system",
                 "configs/system/a100.yaml", "--json", str(out)]) == 0
    doc = json.loads(out.read_text())
    assert doc["schedule"] == "zb-greedy"
    cli = tmp_path / "c.json"
    assert main(["run", "--megatron-args", str(args), "--gpus", "4", "--system",
                 "configs/system/a100.yaml", "-O", "max_pending=4", "--json", str(cli)]) == 0
    # -O wins over the launch's limit, and the two limits lay out differently
    assert json.loads(cli.read_text())["makespan_ns"] != doc["makespan_ns"]
