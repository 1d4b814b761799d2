"""The optional MILP proves auto optimal where the lower bound is not tight (SciPy: the `exact`
extra, and in the test extras)."""

from __future__ import annotations

import pytest

from simulator.schedules.synthesis import StageCosts, synthesize
from simulator.schedules.synthesis.exact import solve
from simulator.schedules.synthesis.search import problem_for



def test_nothing_beats_auto_where_the_bound_is_loose():
    costs = StageCosts((3, 1, 3), (1, 4, 3), (0, 2, 1), 0)
    res = synthesize(3, 4, 1, costs, 2)
    assert (res.makespan, res.lower_bound) == (39, 36)
    # integer costs: no schedule ends at or below 38.5 under the cap
    assert solve(problem_for(3, 4, 1, costs), 2, 38.5, time_limit=60).status == "infeasible"


def test_milp_finds_the_optimum_on_a_tiny_case():
    out = solve(problem_for(2, 2, 1, None), 2, 10)
    assert (out.status, out.makespan) == ("optimal", 7)
