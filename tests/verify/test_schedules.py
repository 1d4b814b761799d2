"""Every registered schedule, over source document 004's edge cases, trains like one device.

The grid: P in {1, 2, 4} ranks (single stage, 2 and 4 stages), M in {1, P-1, P, P+1, 2P, 4P}
(M < P where legal, M = P, M >> P), v in {1, 2, 3, 4}; combinations a schedule refuses
(ConfigError) are skipped, and each schedule must have run on 2 and on 4 ranks. Schedules
without a flush (2bw) run 4 minibatches, enough for the 1-stale updates to change the numbers.
For every point: loss, gradients and weights after SGD within 1e-10 of single-device training,
and the executor's activation peaks equal to the simulator's ``peak_inflight``.
"""

from __future__ import annotations

import inspect

import pytest

from simulator.errors import ConfigError
from simulator.schedules.phases import peak_inflight
from simulator.schedules import generate, get, names
from simulator.verify import build_model, execute, make_batch, verify_schedule

RANKS = (1, 2, 4)
CHUNKS_PER_RANK = (1, 2, 3, 4)  # 4: two-wave Hanayo (v = 2W)


def microbatch_counts(pp: int) -> list[int]:
    return sorted({1, max(pp - 1, 1), pp, pp + 1, 2 * pp, 4 * pp})


def legal_points(name: str):
    """(pp, microbatches, vpp, schedule) for every grid point ``name`` accepts."""
    options = {"iterations": 4} if "iterations" in inspect.signature(
        get(name).generate).parameters else {}
    for pp in RANKS:
        for m in microbatch_counts(pp):
            for v in CHUNKS_PER_RANK:
                try:
                    sched = generate(name, pp, m, v, **options)
                except ConfigError:
                    continue
                yield pp, m, v, sched


@pytest.mark.parametrize("name", names())
def test_every_legal_grid_point_matches_single_device_training(name):
    ran, failures = [], []
    for pp, m, v, sched in legal_points(name):
        report = verify_schedule(sched)
        ran.append((pp, m, v))
        if not report.ok:
            failures.append(f"pp={pp} M={m} v={v}: {report.failure()}")
        assert report.schedule == sched.name and report.pp == pp
    assert failures == []
    assert {pp for pp, _, _ in ran} >= {2, 4}, f"{name} ran only at {ran}"


@pytest.mark.parametrize("name", names())
def test_executor_activation_peaks_equal_the_simulators_for_every_rank(name):
    checked = 0
    for pp, m, v, sched in legal_points(name):
        model = build_model(sched.n_chunks, sched.n_chunks, seed=1)
        xs, ts = make_batch(model, sched.microbatches, 1, seed=1)
        run = execute(sched, model, xs, ts)
        for stats in run.ranks:
            want = peak_inflight(sched.ranks[stats.rank])
            assert (stats.peak_microbatches, stats.peak_activations) == want, \
                f"pp={pp} M={m} v={v} rank {stats.rank}"
            assert stats.actions == len(sched.ranks[stats.rank])
            checked += 1
    assert checked > 0


def test_1f1b_holds_p_minus_r_microbatches_and_gpipe_all_of_them():
    one = verify_schedule(generate("1f1b", 4, 8))
    assert [(a.executor, a.simulator) for a in one.activations] == [
        ((4, 4), (4, 4)), ((3, 3), (3, 3)), ((2, 2), (2, 2)), ((1, 1), (1, 1))]
    gpipe = verify_schedule(generate("gpipe", 2, 4))
    assert [a.executor for a in gpipe.activations] == [(4, 4), (4, 4)]


def test_report_numbers_are_real_errors_not_zeros():
    report = verify_schedule(generate("1f1b", 4, 8))
    assert report.ok
    assert report.microbatches == 8 and report.iterations == 1 and report.layers == 9
    assert 0 < report.max_abs_grad_error <= 1e-14  # stacked batch vs microbatch sums
    assert report.losses[0] > 0.1
    assert report.semantics == "synchronous" and report.peak_weight_versions == 1
    assert report.ops == sum(len(a) for a in generate("1f1b", 4, 8).ranks) + 2 * 2 * 8 * 3


def test_two_bw_keeps_two_weight_versions_and_matches_the_stale_reference():
    report = verify_schedule(generate("2bw", 4, 4, iterations=4))
    assert report.ok and report.semantics == "pipedream-2bw"
    assert report.iterations == 4 and report.microbatches == 4 and len(report.losses) == 4
    assert report.peak_weight_versions == 2
