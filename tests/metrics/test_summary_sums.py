"""The summary adds its per-rank times in C over the time columns; every sum must be exactly
what the per-action loop it replaced adds (same float operations, same order), on compute
streams whose ends only grow and on ones whose do not."""

from __future__ import annotations

import random

import pytest

from simulator.metrics.summary import _Times
from simulator.metrics.sums import added


def _loop(forward, starts, ends, it_start, it_end):
    """The summary's former per-action loop (the reference)."""
    busy = fwd = bwd = fwd_bub = bwd_bub = idle_own = span_own = 0.0
    times = list(zip(forward, starts, ends))
    t = it_start
    for is_f, a_start, a_end in times:
        d = a_end - a_start
        gap = max(0.0, a_start - t)
        busy += d
        if is_f:
            fwd += d
            fwd_bub += gap
        else:
            bwd += d
            bwd_bub += gap
        t = max(t, a_end)
    bwd_bub += max(0.0, it_end - t)
    if times:
        own = times[-1][2] - times[0][1]
        span_own += own
        idle_own += own - sum(e - s for _, s, e in times)
    return busy, fwd, bwd, fwd_bub, bwd_bub, idle_own, span_own


def _stream(rng, n, monotone):
    starts, ends, t = [], [], rng.uniform(0, 5)
    for _ in range(n):
        t += rng.choice([0.0, 0.0, rng.uniform(0, 3) / 7])
        if not monotone:
            t -= rng.uniform(0, 4) / 3        # overlaps: an end below the latest one
        starts.append(t)
        t += rng.uniform(0.1, 9) / 3
        ends.append(t)
    return starts, ends


@pytest.mark.parametrize("monotone", [True, False])
def test_sums_are_the_loops_to_the_last_bit(monotone):
    rng = random.Random(7 if monotone else 8)
    for _ in range(300):
        n = rng.randint(0, 40)
        starts, ends = _stream(rng, n, monotone)
        forward = bytes(rng.randint(0, 1) for _ in range(n))
        it_start = rng.choice([0.0, starts[0] + 1.5 if n else 2.0, rng.uniform(0, 3)])
        it_end = (max(ends) if n else it_start) + rng.choice([0.0, 2.25, -1.0])
        acc = _Times()
        acc.add(forward, starts, ends, it_start, it_end)
        got = (acc.busy, acc.fwd, acc.bwd, acc.fwd_bub, acc.bwd_bub, acc.idle_own, acc.span_own)
        assert got == _loop(forward, starts, ends, it_start, it_end)
        flags = [bool(f) for f in forward]        # the record-list path's mask
        acc2 = _Times()
        acc2.add(flags, starts, ends, it_start, it_end)
        assert (acc2.busy, acc2.fwd_bub, acc2.bwd_bub) == got[0:1] + got[3:5]


def test_times_accumulate_over_iterations_and_stop_at_the_shortest_column():
    acc = _Times()
    acc.add(b"\x01\x00\x01", [0.0, 4.0, 5.5], [3.0, 5.0], 0.0, 6.0)   # 2 actions read
    acc.add(b"\x01\x00", [7.0, 9.0], [8.0, 12.0], 6.0, 12.5)
    # durations 3, 1 | 1, 3; gaps: 0 before 0F, 1 before 1B | 1 before F, 1 before B;
    # drains 1 (6 - 5) and 0.5
    assert (acc.busy, acc.fwd, acc.bwd) == (8.0, 4.0, 4.0)
    assert (acc.fwd_bub, acc.bwd_bub) == (1.0, 1.0 + 1.0 + 1.0 + 0.5)
    assert (acc.span_own, acc.idle_own) == (5.0 + 5.0, 1.0 + 1.0)


def test_added_is_a_loops_sum():
    rng = random.Random(3)
    values = [rng.uniform(-1e6, 1e6) / 3 for _ in range(1000)] + [1e16, 1.0, -1e16, 0.1]
    total = 0.25
    for v in values:
        total += v
    assert added(values, 0.25) == total
    assert added([], 1.5) == 1.5


@pytest.mark.parametrize("schedule", ["1f1b", "zb-v", "dualpipe-v", "interleaved-1f1b"])
def test_summary_hands_its_first_iteration_busy_to_the_pipeline_bubble(schedule):
    from pathlib import Path

    from simulator import simulate
    from simulator.metrics import pipeline_bubble

    wl = Path(__file__).resolve().parents[1] / "data" / "tiny_model_4l.txt"
    r = simulate(wl, schedule, pp=2, microbatches=4, iterations=2)
    own = pipeline_bubble(r.records, r.schedule)                     # sums its own busy times
    got = r.summary.pipeline_bubble_ns
    assert (got.span_ns, list(got.per_rank_ns), got.mean_ns, got.max_ns, got.min_ns) == (
        own["span_ns"], own["per_rank_ns"], own["mean_ns"], own["max_ns"], own["min_ns"])


def test_mean_is_statistics_mean_to_the_bit():
    """The summary's mean (no statistics import on `pipesim run`) equals statistics.mean on
    random floats of every scale (bubble ratios, makespans), ints, and one value."""
    import statistics

    from simulator.metrics.sums import mean

    rng = random.Random(11)
    cases = [[rng.random() for _ in range(rng.randint(1, 40))] for _ in range(2000)]
    cases += [[rng.uniform(0, 1e12) for _ in range(rng.randint(1, 9))] for _ in range(2000)]
    cases += [[rng.random() * 10 ** rng.randint(-300, 300) for _ in range(5)]
              for _ in range(2000)]
    cases += [[rng.randint(0, 10 ** 9) for _ in range(rng.randint(1, 6))] for _ in range(500)]
    cases += [[0.1, 0.2, 0.3], [1e16, 1.0, -1e16], [5], [2, 4], [1, 2], [0.0]]
    differ = 0
    for xs in cases:
        got, want = mean(xs), statistics.mean(xs)
        assert got == want and type(got) is type(want), xs
        differ += got != sum(xs) / len(xs)
    assert differ > 0          # where the plain float division would have been off
    with pytest.raises(ValueError):
        mean([])
