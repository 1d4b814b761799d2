"""The schedule auto: optimal on hand-checked cases, valid, numerically right, within its cap,
deterministic."""

from __future__ import annotations

import json
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
    assert sorted(registry.cost_aware_names()) == ["auto", "v-zb", "zb-greedy"]
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


def test_a_fused_backward_ends_to_the_bit_where_its_input_then_weight_gradient_would():
    """(start + i) + w, not start + (i + w): 0.1 + 0.2 + 0.3 differs in the last bit."""
    from simulator.schedules.synthesis.evaluate import Problem

    prob = Problem(1, 1, StageCosts((0.1,), (0.2,), (0.3,), 0.0))
    SM = 1
    split, fused = prob.times([[0, SM, 2 * SM]]), prob.times([[0, 3 * SM]])
    assert fused[3 * SM] == split[2 * SM] == (0.1 + 0.2) + 0.3 != 0.1 + (0.2 + 0.3)


def _fuse_by_full_evaluation(prob, orders):
    """The rule fuse implements, one whole evaluation per adjacent I, W pair."""
    SM = prob.n_stages * prob.m
    target = prob.makespan(orders)
    out = [list(o) for o in orders]
    for r in range(len(out)):
        p = 0
        while p + 1 < len(out[r]):
            x, y = out[r][p], out[r][p + 1]
            if x // SM == 1 and y == x + SM:
                saved, out[r] = out[r], out[r][:p] + [3 * SM + x % SM] + out[r][p + 2:]
                if prob.makespan(out) != target:
                    out[r] = saved
            p += 1
    return out


def test_fuse_keeps_exactly_the_pairs_a_full_evaluation_keeps():
    """Seeded float costs (where a rounding could decide), one stage a rank and V placement."""
    import random

    from simulator.schedules.synthesis.search import POLICIES, V_POLICIES, fuse, greedy, \
        local_search, problem_for

    rng = random.Random(11)
    fused = 0
    for case in range(40):
        pp, m, vpp = rng.choice([2, 3, 4]), rng.randint(2, 8), rng.choice([1, 2])
        n = pp * vpp

        def q():
            return rng.choice([0.1, 0.3, 0.7, 1.0, 1.1, rng.uniform(0.1, 3)])
        costs = StageCosts(tuple(q() for _ in range(n)), tuple(q() for _ in range(n)),
                           tuple(q() for _ in range(n)), rng.choice([0.0, 0.1, 0.3]))
        prob = problem_for(pp, m, vpp, costs)
        orders = greedy(prob, n, (V_POLICIES if vpp == 2 else POLICIES)[0])
        orders = local_search(prob, orders, n, 30, case)
        got = fuse(prob, orders)
        assert got == _fuse_by_full_evaluation(prob, orders)
        fused += sum(x // (n * m) == 3 for o in got for x in o)
    assert fused > 100      # the cases fuse pairs, not only keep them apart


def test_the_search_stops_at_the_first_start_that_meets_the_bound():
    """P = 32, M = 256, unit costs: ZB-H1's warm-up policy, tried first, is optimal."""
    res = synthesize(32, 256)
    assert res.start == "greedy" and res.makespan == res.lower_bound == 799


def test_the_budget_holds_the_search_past_a_first_start_that_misses_the_bound():
    """-O max_evaluations above the first start (a greedy start and the fusing step) but below
    the whole search: a first start at the lower bound ends the search within the budget; one
    that misses it leaves the whole search to run, refused then in one line."""
    from simulator.errors import ConfigError
    from simulator.schedules.synthesis.search import (DEFAULT_ITERATIONS, first_start_work,
                                                      generate_auto, synthesis_work)

    sure, worst = first_start_work(4, 8, 1), synthesis_work(4, 8, 1, DEFAULT_ITERATIONS)
    assert (sure, worst) == (1680, 744544)
    even = StageCosts((1.0,) * 4, (1.0,) * 4, (1.0,) * 4, 0.0)
    assert generate_auto(4, 8, stage_costs=even, max_evaluations=sure).name == "auto"
    misses = StageCosts((0.84, 2.62, 2.41, 1.14), (1.74, 1.62, 2.13, 2.47),
                        (0.73, 0.57, 2.59, 1.58), 0.2)
    with pytest.raises(ConfigError) as err:
        generate_auto(4, 8, stage_costs=misses, max_evaluations=sure)
    assert str(err.value) == (
        "-O max_evaluations: synthesizing auto with pp 4, vpp 1, 8 microbatches and its first "
        "start does not meet the lower bound takes about 744,544 action evaluations, above the "
        "limit of 1,680 (about 0.00056 s); pass -O max_evaluations=744544 (or 0 for no limit) to "
        "synthesize it anyway")
    # below the first start: refused before any of it
    with pytest.raises(ConfigError, match="8 microbatches takes about 744,544"):
        generate_auto(4, 8, stage_costs=even, max_evaluations=sure - 1)


def test_the_papers_sizes_past_the_whole_search_budget_run_when_a_first_start_meets_it(capsys):
    """P = 16, M = 1024 with unit costs: the whole search would be 34.3M evaluations, above the
    default 30M, but its first start meets the lower bound (12.9M)."""
    from simulator.cli.main import main

    assert main(["schedule", "auto", "--pp", "16", "-m", "1024", "--json", "-"]) == 0
    assert json.loads(capsys.readouterr().out)["microbatches"] == 1024


def test_auto_is_built_for_the_costs_its_recompute_charges(data_dir, monkeypatch):
    """With --recompute full every backward re-runs its chunk's forward first, so the costs
    auto is synthesized for hold F + I in each I (the engine's own durations)."""
    from simulator.api import simulate

    seen = []
    generate = registry.generate

    def spy(name, *args, **kw):
        if name == "auto":
            seen.append(kw["stage_costs"])
        return generate(name, *args, **kw)

    monkeypatch.setattr(registry, "generate", spy)
    for recompute in ("none", "full"):
        simulate(data_dir / "tiny_model.txt", "auto", pp=2, microbatches=4,
                 recompute=recompute)
    plain, full = seen
    # the forwards and weight gradients are the same; each I now re-runs its chunk's forward
    assert (full.f, full.w) == (plain.f, plain.w)
    assert all(fi > pi for fi, pi in zip(full.i, plain.i))
