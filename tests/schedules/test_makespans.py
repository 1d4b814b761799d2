"""Unit-cost makespans through the engine: F = I = W = 1000 ns per layer (B = 2000), no comm."""

from __future__ import annotations

import pytest

from simulator import simulate
from simulator.schedules import get
from simulator.workload.builder import uniform_workload


def run(name: str, pp: int, m: int, v: int = 1):
    return simulate(uniform_workload(n_layers=pp * v, fwd=1000, ig=1000, wg=1000),
                    schedule=name, pp=pp, microbatches=m, vpp=v)


@pytest.mark.parametrize("name,pp,m,v,makespan", [
    ("interleaved-1f1b", 4, 8, 2, 57000),   # (v*M + P-1) * 3 units of F+B per chunk
    ("interleaved-1f1b", 8, 16, 2, 117000),
    ("looped-bfs", 4, 8, 2, 57000),
    ("zb-h1", 4, 8, 1, 27000),              # 3M + (P-1)(F+I-W)
    ("zb-h1", 8, 16, 1, 55000),
    ("zb-h1", 4, 8, 2, 51000),              # 3vM + P-1
    ("zb-h2", 4, 8, 1, 27000),              # 3M + (P-1)F: the first forward's trip down
    ("zb-h2", 8, 16, 1, 55000),
])
def test_makespan_under_unit_costs(name, pp, m, v, makespan):
    assert run(name, pp, m, v).makespan_ns == makespan


@pytest.mark.parametrize("name,pp,m,v", [
    ("interleaved-1f1b", 4, 8, 2), ("interleaved-1f1b", 4, 12, 3), ("looped-bfs", 3, 6, 2),
    ("zb-h1", 4, 8, 1), ("zb-h1", 4, 8, 2), ("zb-h1", 3, 9, 3)])
def test_simulated_bubble_ratio_equals_the_closed_form(name, pp, m, v):
    assert run(name, pp, m, v).bubble_ratio == pytest.approx(get(name).closed_form(pp, m, v))


@pytest.mark.parametrize("pp,m", [(2, 3), (4, 7), (4, 8), (8, 16)])
def test_zb_h2_is_a_parallelogram_no_rank_idles_between_its_first_and_last_action(pp, m):
    result = run("zb-h2", pp, m)
    assert [s["bubble_ratio_own"] for s in result.summary["stages"]] == [0.0] * pp
    assert result.makespan_ns == (3 * m + pp - 1) * 1000


def test_zb_h1_keeps_a_p_minus_1_bubble_on_rank_0_that_zb_h2_removes():
    h1 = run("zb-h1", 4, 8).summary["stages"][0]
    h2 = run("zb-h2", 4, 8).summary["stages"][0]
    assert h1["bubble_ratio_own"] == pytest.approx(3 / 27)
    assert h2["bubble_ratio_own"] == 0.0
