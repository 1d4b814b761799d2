"""Jitter and stragglers: seeded, reproducible, and visible in the iteration-time spread."""

from __future__ import annotations

import pytest

from simulator import ConfigError, simulate
from simulator.system import SystemConfig
from simulator.workload import uniform_workload

WL = uniform_workload(4, 1000, 1000, 1000)


def times(**kw):
    r = simulate(WL, "1f1b", SystemConfig(), pp=4, microbatches=8, iterations=5, **kw)
    return r.to_dict()["iteration_times_ns"], r


def test_same_seed_same_result_different_seed_different_result():
    a, _ = times(jitter=0.2, seed=1)
    b, _ = times(jitter=0.2, seed=1)
    c, _ = times(jitter=0.2, seed=2)
    assert a == b
    assert a != c
    assert len(set(a)) > 1   # iterations differ from each other


def test_no_jitter_is_exact():
    a, r = times()
    assert a == [33000.0] * 5
    assert r.to_dict()["iteration_time_stats_ns"] == {
        "mean": 33000.0, "p50": 33000.0, "p99": 33000.0, "min": 33000.0, "max": 33000.0}


def test_spread_is_reported():
    a, r = times(jitter=0.3, seed=7)
    st = r.to_dict()["iteration_time_stats_ns"]
    assert st["min"] == min(a) and st["max"] == max(a)
    assert st["min"] <= st["p50"] <= st["p99"] <= st["max"]
    assert st["mean"] == pytest.approx(sum(a) / len(a))


def test_slow_rank_stretches_its_compute_exactly():
    r = simulate(uniform_workload(1, 1000, 1000, 1000), "1f1b", SystemConfig(), pp=1,
                 microbatches=2, slow_ranks={0: 1.5})
    assert r.makespan_ns == 2 * 3000 * 1.5
    # a straggler in the middle of a pipeline: everyone waits for it
    base, _ = times()
    slow = simulate(WL, "1f1b", SystemConfig(), pp=4, microbatches=8, slow_ranks={2: 2.0})
    s = slow.to_dict()["stages"]
    assert s[2]["busy_ns"] == 2 * 8 * 3000
    assert slow.makespan_ns > base[0]
    assert s[2]["bubble_ratio"] < min(s[0]["bubble_ratio"], s[1]["bubble_ratio"])


def test_bad_variation_options_are_named():
    with pytest.raises(ConfigError, match="--slow-rank: rank 9 does not exist"):
        simulate(WL, "1f1b", pp=4, microbatches=8, slow_ranks={9: 2.0})
    with pytest.raises(ConfigError, match="--jitter"):
        simulate(WL, "1f1b", pp=4, microbatches=8, jitter=-1)
    from simulator.engine.options import parse_slow_rank
    with pytest.raises(ConfigError, match="--slow-rank: expected RANK:FACTOR like 2:1.5, got 'x'"):
        parse_slow_rank("x")
