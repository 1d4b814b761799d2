"""The schedule auto: optimal on hand-checked cases, valid, numerically right, within its cap,
deterministic."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from simulator.schedules import registry
from simulator.schedules.phases import peak_inflight
from simulator.schedules.synthesis import StageCosts, synthesize
from simulator.schedules.synthesis.evaluate import evaluate
from simulator.schedules.validate import validate
from simulator.verify import verify_schedule


@pytest.mark.parametrize("pp, m, cap, costs, optimum", [
    # K >= P, unit costs: 3M + P - 1 — the last rank is busy from the moment F0 reaches it
    (2, 2, 2, None, 7), (2, 3, 2, None, 10), (2, 4, 2, None, 13), (3, 6, 3, None, 20),
    # K = 1: one microbatch at a time; rank 0 holds each for 3 F + 3 I + 1 W = 7 units
    (3, 3, 1, None, 21),
    # one microbatch, f=(1,2) i=(3,4) w=(5,6), comm 1: the chain 1+1+2+4+1+3+5 = 17
    (2, 1, 1, StageCosts((1, 2), (3, 4), (5, 6), 1), 17),
    # heavy last stage (i=3): rank 1 does 4 x (1+3+1) = 20 after F0 reaches it at 1
    (2, 4, 2, StageCosts((1, 1), (1, 3), (1, 1), 0), 21),
    # V placement, unit costs per chunk: zb-v's 38 for P=3, M=6 meets the bound
    (3, 6, None, None, 38),
])
def test_reaches_the_known_optimum(pp, m, cap, costs, optimum):
    vpp = 2 if (pp, m, optimum) == (3, 6, 38) else 1
    res = synthesize(pp, m, vpp, costs, cap)
    assert res.lower_bound == optimum
    assert res.makespan == optimum
    assert evaluate(res.schedule, costs or StageCosts.unit(pp * vpp)).makespan == optimum


def test_k1_order_is_strictly_one_microbatch_at_a_time():
    sched = synthesize(3, 3, 1, None, 1).schedule
    assert sched.as_strings() == [
        ["0F0", "0B0", "0F1", "0B1", "0F2", "0B2"],
        ["1F0", "1I0", "1W0", "1F1", "1I1", "1W1", "1F2", "1I2", "1W2"],
        ["2F0", "2I0", "2W0", "2F1", "2I1", "2W1", "2F2", "2I2", "2W2"]]


CASES = [
    (2, 4, 1, None, None), (3, 6, 1, None, 1), (3, 6, 1, None, 2), (4, 8, 1, None, None),
    (4, 8, 1, StageCosts((15, 10, 10, 10), (15, 10, 10, 12), (12, 10, 10, 6), 2), 6),
    (3, 5, 1, StageCosts((1, 1, 2), (1, 2, 3), (0, 1, 1), 0.5), 4),
    (2, 4, 2, None, 2), (2, 4, 2, None, None), (3, 6, 2, None, 5),
    (3, 6, 2, StageCosts((2, 1, 1, 1, 1, 2), (2, 1, 1, 1, 1, 3), (1,) * 6, 1), 6),
]


@pytest.mark.parametrize("pp, m, vpp, costs, cap", CASES)
def test_valid_numerically_right_and_within_cap(pp, m, vpp, costs, cap):
    res = synthesize(pp, m, vpp, costs, cap)
    sched = res.schedule
    validate(sched)
    report = verify_schedule(sched)
    assert report.ok, report.failure()
    k = pp * vpp if cap is None else cap
    # what the run summary reports as peak_inflight_activations
    assert max(peak_inflight(acts)[1] for acts in sched.ranks) <= k
    assert res.lower_bound <= res.makespan


@pytest.mark.parametrize("pp, m, vpp, costs, cap", CASES[3:6] + CASES[-1:])
def test_no_worse_than_any_registered_schedule_within_the_cap(pp, m, vpp, costs, cap):
    costs = costs or StageCosts.unit(pp * vpp)
    res = synthesize(pp, m, vpp, costs, cap)
    k = pp * vpp if cap is None else cap
    for name in registry.names():
        try:
            other = registry.generate(name, pp, m, vpp)
            ev = evaluate(other, costs)
        except Exception:
            continue
        if other.placement == res.schedule.placement and max(ev.peak_inflight) <= k:
            assert res.makespan <= ev.makespan, name


def test_same_inputs_same_schedule():
    costs = StageCosts((15, 10, 10, 10), (15, 10, 10, 12), (12, 10, 10, 6), 2)
    a = registry.generate("auto", 4, 12, 1, max_in_flight=6, stage_costs=costs)
    b = registry.generate("auto", 4, 12, 1, max_in_flight=6, stage_costs=costs)
    assert a.ranks == b.ranks


def test_registered_apart_from_the_library():
    assert "auto" not in registry.names()
    assert registry.cost_aware_names() == ["auto"]
    assert registry.get("AUTO").needs_costs
    assert registry.options_of(registry.get("auto")) == [
        "max_in_flight", "stage_costs", "seed", "iterations", "max_evaluations"]


REPO = Path(__file__).resolve().parents[3]


def _fresh(code: str) -> str:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          cwd=REPO, check=True).stdout


def test_auto_runs_from_python_in_a_fresh_interpreter_and_loads_the_search_only_for_itself():
    """No import to make first: ``simulate(wl, "auto")`` is like any schedule, and the search is
    read only when ``auto`` is built (a run of 1F1B never loads it)."""
    out = _fresh(
        "import sys\n"
        "from simulator.api import simulate\n"
        "from simulator.schedules import registry\n"
        "wl = 'workloads/gpt-24l.txt'\n"
        "r = simulate(wl, '1f1b', pp=4, microbatches=8)\n"
        "registry.get('auto')\n"
        "print('simulator.schedules.synthesis.search' in sys.modules)\n"
        "a = simulate(wl, schedule='auto', pp=4, microbatches=8,"
        " schedule_options={'max_in_flight': 3})\n"
        "print('simulator.schedules.synthesis.search' in sys.modules, a.schedule.name,"
        " a.summary.to_dict()['peak_inflight_microbatches'] <= 3,"
        " 'simulator.planning' in sys.modules)\n")
    assert out == "False\nTrue auto True False\n"


def test_the_search_imported_first_still_starts_from_the_hand_made_schedules():
    """The search reads its starting points from the registration table: imported on its own
    in a fresh interpreter (no registry call before), it finds the library's schedules."""
    out = _fresh(
        "from simulator.schedules.synthesis.search import problem_for, seeds\n"
        "print(sorted({n for n, _ in seeds(problem_for(4, 8, 1, None), 4)}))\n"
        "print(sorted({n for n, _ in seeds(problem_for(4, 8, 2, None), 8)}))\n")
    assert out == "['1f1b', 'greedy', 'zb-h1']\n['greedy', 'v-half', 'v-min', 'zb-v']\n"


def test_the_old_import_path_warns_and_names_the_release_that_removes_it():
    import simulator.planning as old
    from simulator.schedules import synthesis

    with pytest.warns(DeprecationWarning, match=r"simulator\.planning\.synthesize moved to "
                      r"simulator\.schedules\.synthesis\.synthesize; the old name is removed "
                      r"in pipesim 0\.2\.0"):
        assert old.synthesize is synthesis.synthesize
    with pytest.raises(AttributeError):
        old.no_such_name


@pytest.mark.parametrize("cap", [1, 2, 3])
def test_cap_holds_in_a_simulated_run(cap, data_dir):
    from simulator.api import simulate

    sched = synthesize(2, 4, 1, None, cap).schedule
    summary = simulate(data_dir / "tiny_model.txt", sched).summary
    peaks = [stage["peak_inflight_activations"] for stage in summary["stages"]]
    assert max(peaks) <= cap
    assert max(peaks) == min(cap, 4)   # rank 0 uses the room it is given


def test_random_problems_valid_within_cap_and_above_the_bound():
    """Seeded random sizes, caps and costs (zeros, floats, comm, P = 1, V placement)."""
    import random

    rng = random.Random(7)
    for _ in range(60):
        pp, vpp, m = rng.randint(1, 4), rng.choice([1, 1, 2]), rng.randint(1, 6)
        n = pp * vpp
        cap = rng.randint(2 if vpp == 2 else 1, 2 * n)
        costs = StageCosts(tuple(rng.choice([0, 0.5, 1, 2, 3]) for _ in range(n)),
                           tuple(rng.choice([0, 1, 2.5]) for _ in range(n)),
                           tuple(rng.choice([0, 1, 2]) for _ in range(n)),
                           rng.choice([0, 0, 1, 0.3]))
        res = synthesize(pp, m, vpp, costs, cap, iterations=100)
        validate(res.schedule)
        assert evaluate(res.schedule, costs).makespan == res.makespan
        assert max(peak_inflight(acts)[1] for acts in res.schedule.ranks) <= cap
        assert res.lower_bound <= res.makespan + 1e-9
