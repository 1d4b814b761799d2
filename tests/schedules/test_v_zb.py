"""v-zb is the zero-bubble fork's own V-ZB scheduler: order for order its layouts (golden/
v_zb.json, made by the fork's code), the costs it reads from a run, and its refusals."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from simulator.api import simulate
from simulator.cli.main import main
from simulator.errors import ConfigError
from simulator.schedules import generate
from simulator.schedules.stage_costs import StageCosts

GOLDEN = json.loads((Path(__file__).parent / "golden" / "v_zb.json").read_text())


def _costs(case: dict) -> StageCosts:
    n = 2 * case["pp"]
    return StageCosts((float(case["f"]),) * n, (float(case["b"]),) * n, (float(case["w"]),) * n,
                      float(case["comm"]), (tuple(float(x) for x in case["memory"]),) * n)


@pytest.mark.parametrize("case", GOLDEN["cases"], ids=lambda c: (
    f"P{c['pp']}-M{c['microbatches']}-f{c['f']}b{c['b']}w{c['w']}c{c['comm']}"
    f"-m{c['memory'][0]}"))
def test_layout_equals_the_forks_scheduler(case):
    sched = generate("v-zb", case["pp"], case["microbatches"], 2, stage_costs=_costs(case))
    assert sched.as_strings() == case["ranks"]


def test_the_golden_file_names_its_source_and_command():
    assert GOLDEN["command"] == "python3 tests/schedules/golden/make_v_zb_golden.py --zb-repo ZB"
    assert "v_schedule.py" in GOLDEN["source"] and GOLDEN["tag"] == "zero-bubble-v0.1.0"
    assert len(GOLDEN["commit"]) == 40
    assert len(GOLDEN["cases"]) >= 100 and not any(c.get("fails") for c in GOLDEN["cases"])


def test_it_reads_one_cost_a_kind_the_upper_median_of_the_ranks_means():
    # P = 4: rank r holds stages r and 7 - r. Rank means of F: (1+3)/2, (5+5)/2, (9+1)/2,
    # (2+2)/2 = 2, 5, 5, 2 -> upper median 5; the layout is the one at F = 5 everywhere
    f = (1.0, 5.0, 9.0, 2.0, 2.0, 1.0, 5.0, 3.0)
    varied = StageCosts(f, (4.0,) * 8, (2.0,) * 8, 1.0, ((6.0, -4.0, -2.0),) * 8)
    flat = StageCosts((5.0,) * 8, (4.0,) * 8, (2.0,) * 8, 1.0, ((6.0, -4.0, -2.0),) * 8)
    assert generate("v-zb", 4, 12, 2, stage_costs=varied).as_strings() == \
        generate("v-zb", 4, 12, 2, stage_costs=flat).as_strings()
    slow = StageCosts((5.0,) * 8, (4.0,) * 8, (2.0,) * 8, 40.0, ((6.0, -4.0, -2.0),) * 8)
    assert generate("v-zb", 4, 12, 2, stage_costs=slow).as_strings() != \
        generate("v-zb", 4, 12, 2, stage_costs=flat).as_strings()


def test_it_runs_two_chunks_a_rank_and_one_cost_per_virtual_stage():
    with pytest.raises(ConfigError) as err:
        generate("v-zb", 4, 8, 1)
    assert str(err.value) == "--vpp: v-zb runs exactly 2 chunks per rank (V placement), got --vpp 1"
    with pytest.raises(ConfigError) as err:
        generate("v-zb", 4, 8, 2, stage_costs=StageCosts.unit(4))
    assert str(err.value) == ("v-zb: expected 8 stage costs, one per stage (--pp 4 x --vpp 2), "
                              "found 4")


def test_a_run_lays_it_out_for_its_own_costs_and_memory(tmp_path):
    wl = tmp_path / "w.txt"
    assert main(["generate", "--model", "gpt", "--layers", "16", "--hidden", "1024", "--heads",
                 "16", "--seq", "1024", "--micro-batch", "1", "--pp", "4", "--ga", "12",
                 "--precision", "fp16", "--gpu", "a100", "-o", str(wl)]) == 0
    res = simulate(str(wl), "v-zb", "configs/system/a100.yaml", layout="model", vpp=2,
                   p2p="async")
    from simulator.engine.stage_costs import run_stage_costs
    from simulator.schedules.library.v_zb import v_zb_layout
    from simulator.system.topology import LinkModel

    costs = run_stage_costs(res.partition, res.workload.header, res.system, 4,
                            LinkModel(res.workload.header, res.system, 4), p2p="async")
    assert costs.n_stages == 8
    ranks, _ = v_zb_layout(4, 12, costs)
    assert res.schedule.ranks == ranks
    # rank 0 runs the first chunk and the last (the loss), as in every V
    assert {a.stage for a in res.schedule.ranks[0]} == {0, 7}


def test_the_size_budget_counts_the_layout(capsys):
    # P 4, M 8: 192 actions; laying them out costs as much as two runs more (registration's work)
    assert main(["run", "workloads/gpt-24l.txt", "-s", "v-zb", "--pp", "4", "-m", "8",
                 "--max-actions", "500"]) == 2
    assert capsys.readouterr().err.strip().splitlines()[-1] == (
        "pipesim: error: --max-actions: v-zb with pp 4, vpp 2, 8 microbatches runs up to 192 "
        "actions, and building it costs as much as 576 (its generator grows faster than its "
        "actions), above the limit of 500 (about 10 s of simulation); pass --max-actions 576 (or "
        "0 for no limit) to run it anyway")
    assert main(["run", "workloads/gpt-24l.txt", "-s", "v-zb", "--pp", "4", "-m", "8",
                 "--max-actions", "576"]) == 0
