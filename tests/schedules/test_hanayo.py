"""Hanayo: zig-zag placement, the two constructions, validity, memory, unit-cost makespans."""

from __future__ import annotations

import pytest

from simulator.errors import ConfigError
from simulator.schedules import Schedule, generate, v_placement
from simulator.schedules.library.hanayo import (folded_ranks, greedy_ranks, group_size,
                                                unit_makespan, wave_placement)
from simulator.schedules.library.interleaved_1f1b import interleaved_order
from simulator.schedules.validate import validate

from .test_v_schedules import peak_in_flight, run


def test_placement_zig_zags_once_per_wave():
    assert wave_placement(4, 1) == (0, 1, 2, 3, 3, 2, 1, 0) == v_placement(4)
    assert wave_placement(3, 2) == (0, 1, 2, 2, 1, 0, 0, 1, 2, 2, 1, 0)
    s = generate("hanayo", 3, 6, waves=2)
    assert (s.vpp, s.n_stages, s.meta["waves"]) == (4, 12, 2)
    assert s.stages_of(0) == (0, 5, 6, 11)


def test_greedy_p2_m2_by_hand():
    # t=0 0F0 | t=1 0F1, 1F0 | t=2 1: 2F0 (older than 1F1) | t=3 0: 3F0, 1: 1F1 | t=4 0: 3B0,
    # 1: 2F1 | t=6 0: 3F1 (alternate), 1: 2B0 | t=7 0: 3B1 | t=8 1: 1B0 | t=10 0B0, 2B1 | ...
    assert [list(map(str, r)) for r in greedy_ranks(2, 2, 1)] == [
        ["0F0", "0F1", "3F0", "3B0", "3F1", "3B1", "0B0", "0B1"],
        ["1F0", "2F0", "1F1", "2F1", "2B0", "1B0", "2B1", "1B1"],
    ]
    s = generate("hanayo", 2, 2)
    assert s.meta["construction"] == "greedy" and unit_makespan(s) == 16   # 12 work + 4 idle


def test_folded_p2_m4():
    s = generate("hanayo", 2, 4)
    assert s.meta["construction"] == "folded-interleaved"
    assert s.as_strings() == [
        ["0F0", "0F1", "0F2", "0F3", "3F0", "3B0", "3F1", "3B1", "3F2", "0B0", "3B2", "3F3", "0B1",
         "3B3", "0B2", "0B3"],
        ["1F0", "1F1", "2F0", "1F2", "2F1", "1F3", "2F2", "2B0", "1B0", "2F3", "2B1", "1B1", "2B2",
         "1B2", "2B3", "1B3"],
    ]


@pytest.mark.parametrize("pp,m,w", [(2, 4, 1), (3, 6, 2), (4, 8, 2), (4, 12, 3), (4, 16, 1)])
def test_folded_order_keeps_each_virtual_ranks_interleaved_order(pp, m, w):
    # Folding only merges: restricted to the stages of virtual rank q (down leg q = r, up leg
    # q = 2P-1-r), a rank runs exactly Megatron's interleaved order of that virtual rank.
    q_count, n = 2 * pp, group_size(pp, m)
    ranks = folded_ranks(pp, m, w)
    for r in range(pp):
        for q in (r, q_count - 1 - r):
            virtual = interleaved_order(q, q_count, w, m, n,
                                        min(2 * (q_count - q - 1) + (w - 1) * n, w * m))
            assert [a for a in ranks[r] if a.stage % q_count == q] == virtual


@pytest.mark.parametrize("pp,m,w,construction,idle", [
    (2, 2, 1, "greedy", 4), (4, 4, 1, "greedy", 12), (4, 4, 2, "greedy", 13),
    (4, 8, 1, "folded-interleaved", 9), (4, 8, 2, "folded-interleaved", 9),
    (3, 6, 2, "folded-interleaved", 6), (4, 17, 1, "greedy", 9), (4, 17, 2, "greedy", 20)])
def test_the_shorter_construction_is_kept(pp, m, w, construction, idle):
    s = generate("hanayo", pp, m, waves=w)
    assert s.meta["construction"] == construction
    assert unit_makespan(s) - 6 * w * m == idle        # idle units on the busiest rank
    other = greedy_ranks if construction != "greedy" else folded_ranks
    if other is folded_ranks and m % max(1, m // (2 * pp)):
        return                                         # no folded order for this M
    alt = Schedule("x", pp, 2 * w, m, wave_placement(pp, w), other(pp, m, w))
    assert unit_makespan(alt) >= unit_makespan(s)


def test_folded_order_needs_torchs_group_size():
    with pytest.raises(ConfigError) as err:
        group_size(4, 17)
    assert str(err.value) == ("--microbatches: hanayo's folded order with --pp 4 runs "
                              "microbatches in groups over 2 x pp = 8 virtual ranks and needs M "
                              "to be a multiple of max(1, M // 8) = 2, got 17")


@pytest.mark.parametrize("pp", [1, 2, 3, 4, 6])
@pytest.mark.parametrize("w", [1, 2, 3])
def test_every_generated_order_is_valid(pp, w):
    for m in range(1, 3 * pp + 2):
        validate(generate("hanayo", pp, m, waves=w))


@pytest.mark.parametrize("pp,m,w", [(2, 4, 2), (4, 8, 1), (4, 8, 2), (4, 16, 4), (8, 16, 2)])
def test_folded_memory_at_most_twice_1f1b_when_2p_divides_m(pp, m, w):
    # 1F1B holds P microbatches of a rank's layers: 2PW stage activations.
    s = generate("hanayo", pp, m, waves=w)
    assert s.meta["construction"] == "folded-interleaved"
    assert max(peak_in_flight(s)) <= 2 * (2 * pp * w)


@pytest.mark.parametrize("pp,m,w", [(4, 4, 1), (4, 4, 2), (8, 8, 4), (4, 17, 2)])
def test_greedy_starts_a_microbatch_only_below_the_memory_bound(pp, m, w):
    s = generate("hanayo", pp, m, waves=w)
    assert s.meta["construction"] == "greedy"
    for r, acts in enumerate(s.ranks):
        held, started, limit = 0, set(), 2 * pp * w + r + 1
        for a in acts:
            if a.kind == "F" and a.microbatch not in started:
                assert held < limit, (r, str(a))
                started.add(a.microbatch)
            held += 1 if a.kind == "F" else -1


@pytest.mark.parametrize("pp,m,w,makespan", [
    (4, 8, 1, 57000), (4, 8, 2, 105000), (4, 4, 1, 36000), (4, 4, 2, 61000), (8, 16, 2, 213000)])
def test_unit_cost_makespan_through_the_engine(pp, m, w, makespan):
    result = run("hanayo", pp, m, 2 * pp * w, vpp=2 * w)
    assert result.makespan_ns == makespan == unit_makespan(generate("hanayo", pp, m, 2 * w)) * 1000


def test_bubble_ratio_falls_with_waves_as_the_paper_reports():
    ratios = [run("hanayo", 4, 8, 8 * w, schedule_options={"waves": w}).bubble_ratio
              for w in (1, 2, 4)]
    assert ratios[0] > ratios[1] > ratios[2] > 0


@pytest.mark.parametrize("vpp,opts,message", [
    (3, {}, "--vpp: hanayo holds 2 stages per rank per wave, so --vpp must be even "
            "(2 x waves), got 3"),
    (6, {"waves": 2}, "--vpp 6 disagrees with waves 2 (hanayo has vpp = 2 x waves = 4)"),
    (2, {"waves": 0}, "waves: expected a positive whole number of waves, got 0"),
])
def test_bad_waves(vpp, opts, message):
    with pytest.raises(ConfigError) as err:
        generate("hanayo", 4, 8, vpp, **opts)
    assert str(err.value) == message


def test_vpp_gives_the_waves():
    assert generate("hanayo", 4, 8, 6).meta["waves"] == 3
    assert generate("hanayo", 4, 8, 6, waves=3).meta["waves"] == 3
