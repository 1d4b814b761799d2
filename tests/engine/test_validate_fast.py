"""Validation's fast first pass (``_rules_hold``: flat flags, or counters for ranks of one
stage whose kinds take microbatches in turn): which ranks take the counters, and Megatron's
order, known to run. That it judges every registered schedule and seeded breakages of them
as the detailed checks do is the harness's (tests/engine/equivalence.py, twin
``validate_fast_pass``)."""

from __future__ import annotations

import pytest

from simulator.errors import ScheduleError
from simulator.schedules import generate
from simulator.schedules.schedule import Schedule
from simulator.schedules import validate as V


def detailed(s: Schedule) -> bool:
    try:
        where = V._check_actions(s)
        V._check_pairs(s)
        V._check_complete(s, where)
        V._check_dataflow(s, where)
    except ScheduleError:
        return False
    return True


def test_one_stage_ranks_take_the_counters():
    """1F1B and GPipe at v = 1 are judged on counters (each kind in turn), and a swap of two
    forwards on one rank, which breaks the turn, falls back to the flat flags, still valid."""
    for name in ("1f1b", "gpipe"):
        s = generate(name, 4, 8, 1)
        assert V._one_stage_ranks(s) == [0, 1, 2, 3]
        assert V._rules_hold(s)
    s = generate("gpipe", 4, 8, 1)
    ranks = [list(r) for r in s.ranks]
    ranks[3][0], ranks[3][1] = ranks[3][1], ranks[3][0]      # 3F1 before 3F0: still runs
    b = Schedule(s.name, s.pp, s.vpp, s.microbatches, s.placement,
                 tuple(tuple(x) for x in ranks), s.pipelines, s.stage_chunk, s.flush, s.meta)
    assert V._one_stage_ranks(b) is None
    assert V._rules_hold(b) and detailed(b)
    ranks[3][0], ranks[3][8] = ranks[3][8], ranks[3][0]      # a backward first: stuck
    b = Schedule(s.name, s.pp, s.vpp, s.microbatches, s.placement,
                 tuple(tuple(x) for x in ranks), s.pipelines, s.stage_chunk, s.flush, s.meta)
    with pytest.raises(ScheduleError, match="deadlock"):
        V.validate(b)


def test_megatron_order_is_known_to_run_and_only_it_skips_the_counters():
    """1F1B's order is accepted without the counters' walk: on every (P, M) up to 12 x 24 the
    counters accept it too; an order one swap away from it is left to the counters, and the
    fast pass still judges it as the detailed checks do."""
    for P in range(1, 13):
        for M in range(1, 25):
            s = generate("1f1b", P, M)
            simple = V._one_stage_ranks(s)
            assert V._megatron_order(s, simple) and V._runs_in_turn(s, simple)
    s = generate("1f1b", 4, 8)
    for i, j in ((3, 4), (0, 2), (5, 6)):
        ranks = [list(r) for r in s.ranks]
        ranks[2][i], ranks[2][j] = ranks[2][j], ranks[2][i]
        t = Schedule(s.name, s.pp, s.vpp, s.microbatches, s.placement,
                     tuple(tuple(r) for r in ranks))
        simple = V._one_stage_ranks(t)
        assert simple is None or not V._megatron_order(t, simple)
        assert V._rules_hold(t) == detailed(t)
