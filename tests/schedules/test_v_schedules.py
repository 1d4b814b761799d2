"""ZB-V and DualPipeV: PyTorch 2.13's orders action for action, memory, unit-cost makespans."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from simulator import simulate
from simulator.errors import ConfigError
from simulator.schedules import Schedule, generate, get, v_placement
from simulator.schedules.validate import validate
from simulator.workload.builder import uniform_workload

from .goldens import TORCH_CLASS, case_id, cases, load


def peak_in_flight(schedule: Schedule) -> list[int]:
    """Per rank, the most (stage, microbatch) activations held at once, from the order alone:
    held from the F until the last backward action (B, or W of a split backward). The F of an
    overlapped pair counts before its B."""
    peaks = []
    for acts in schedule.ranks:
        held: set[tuple[int, int]] = set()
        peak = 0
        for a in acts:
            if a.kind == "F":
                held.add((a.stage, a.microbatch))
            elif a.kind in ("B", "W"):
                held.discard((a.stage, a.microbatch))
            peak = max(peak, len(held))
        peaks.append(peak)
    return peaks


def run(schedule: str | Schedule, pp: int, m: int, n_layers: int, **kw):
    return simulate(uniform_workload(n_layers=n_layers, fwd=1000, ig=1000, wg=1000),
                    schedule=schedule, pp=pp, microbatches=m, **kw)


def _golden(name):
    return [pytest.param(name, case, id=f"{name}-{case_id(case)}")
            for case in cases(TORCH_CLASS[name])]


@pytest.mark.parametrize("name,case", _golden("zb-v") + _golden("dualpipe-v"))
def test_order_equals_torch_2_13(name, case):
    sched = generate(name, case["pp"], case["microbatches"], case["vpp"])
    assert sched.as_strings() == case["ranks"]
    assert sched.placement == v_placement(case["pp"])
    validate(sched)


def test_golden_grids_cover_what_the_tests_claim():
    assert load("ScheduleZBVZeroBubble")["grid"]["pp"] == [1, 2, 3, 4, 8]
    assert len(cases("ScheduleZBVZeroBubble")) == 45        # every (P, M) of the grid
    assert not load("ScheduleZBVZeroBubble")["refused"]
    assert len(cases("ScheduleDualPipeV")) == 22            # the (P, M) with M >= 2P


def test_dualpipe_v_refuses_exactly_where_torch_does():
    refused = load("ScheduleDualPipeV")["refused"]
    assert len(refused) == 45 - 22
    for r in refused:
        assert r["microbatches"] < 2 * r["pp"]
        with pytest.raises(ConfigError) as err:
            generate("dualpipe-v", r["pp"], r["microbatches"], r["vpp"])
        assert str(err.value) == (
            f"--microbatches: dualpipe-v needs at least as many microbatches as stages "
            f"(2 x pp = {2 * r['pp']}), got {r['microbatches']}")


@pytest.mark.parametrize("name", ["zb-v", "dualpipe-v"])
def test_two_chunks_per_rank_only(name):
    with pytest.raises(ConfigError) as err:
        generate(name, 4, 8, 3)
    assert str(err.value) == (f"--vpp: {name} runs exactly 2 chunks per rank (V placement), "
                              f"got --vpp 3")
    assert generate(name, 4, 8).vpp == 2      # the registry's default


def test_zb_v_small_order_by_hand():
    # P=2, M=2: torch pads to 2P-1 = 3 microbatches, then drops microbatch 2.
    assert generate("zb-v", 2, 2).as_strings() == [
        ["0F0", "0F1", "3F0", "3I0", "3W0", "3F1", "3I1", "3W1", "0I0", "0W0", "0I1", "0W1"],
        ["1F0", "2F0", "1F1", "2F1", "2I0", "2W0", "1I0", "1W0", "2I1", "2W1", "1I1", "1W1"],
    ]


def test_dualpipe_v_pairs_are_consecutive_f_then_b_numbered_per_rank():
    sched = generate("dualpipe-v", 4, 12)
    for acts in sched.ranks:
        pairs = [(i, a) for i, a in enumerate(acts) if a.pair is not None]
        numbers = [a.pair for _, a in pairs]
        assert numbers == sorted(numbers) and numbers[::2] == list(range(len(pairs) // 2))
        for (i, f), (j, b) in zip(pairs[::2], pairs[1::2]):
            assert (j, f.kind, b.kind, f.pair) == (i + 1, "F", "B", b.pair)
    # the last rank's first steady step is not overlapped (torch: "less bubble")
    assert sched.as_strings()[3][:12] == ["3F0", "4F0", "3F1", "4F1", "3F2", "4F2", "3F3", "4F3",
                                          "3F4", "4B0", "4F4@0", "3B0@0"]


@pytest.mark.parametrize("pp,m", [(2, 4), (4, 8), (4, 16), (8, 16)])
def test_peak_activations_zb_v_as_1f1b_dualpipe_v_pp_plus_1(pp, m):
    # In chunk-microbatches: ZB-V holds 2P (1F1B's P microbatches of a rank's two chunks);
    # DualPipeV holds PP+1 with PP = 2P stages (DeepSeek's table).
    assert peak_in_flight(generate("zb-v", pp, m)) == [2 * pp] * pp
    assert peak_in_flight(generate("dualpipe-v", pp, m)) == [2 * pp + 1] * pp


@pytest.mark.parametrize("name,pp,m,makespan", [
    ("zb-v", 4, 8, 51000),          # design notes: 6M + P-1 units
    ("dualpipe-v", 4, 8, 54000),    # design notes: 6M + (PP/2-1)(F&B+B-3W) = 48 + 3*2
    ("zb-v", 8, 16, 103000),
    ("dualpipe-v", 8, 16, 110000),
    ("zb-v", 4, 3, 26000),          # few microbatches: the warm-up runs dry, 4P-2-2M idle
])
def test_unit_cost_makespan_through_the_engine(name, pp, m, makespan):
    assert run(name, pp, m, 2 * pp).makespan_ns == makespan


@pytest.mark.parametrize("name,pp,m", [
    ("zb-v", 2, 1), ("zb-v", 3, 4), ("zb-v", 4, 5), ("zb-v", 4, 6), ("zb-v", 4, 12),
    ("zb-v", 5, 7), ("dualpipe-v", 2, 4), ("dualpipe-v", 3, 9), ("dualpipe-v", 4, 10)])
def test_simulated_bubble_ratio_equals_the_closed_form(name, pp, m):
    ratio = run(name, pp, m, 2 * pp).bubble_ratio
    assert ratio == pytest.approx(get(name).closed_form(pp, m, 2))


# --- V-Half and V-Min (controllable memory, zero-bubble repository's construction) ---------

def test_building_blocks_as_in_the_repository():
    from simulator.schedules.library.v_half import v_half_pattern, v_min_pattern
    # per rank, the slots of F, f, B, b in the six-slot block (zbv_greedy.py stable patterns)
    assert v_half_pattern(4) == [[0, 10, 14, 25], [2, 9, 16, 24], [4, 8, 18, 23], [6, 7, 20, 22]]
    assert v_min_pattern(4) == [[0, 7, 8, 15], [1, 6, 9, 14], [2, 5, 10, 13], [3, 4, 11, 12]]
    assert v_min_pattern(3)[0] == [0, 5, 8, 13]        # P divisible by 3: a 2-slot gap


def test_weights_fill_free_slots_oldest_backward_first():
    from simulator.schedules.library.v_half import peak_memory, put_w
    assert put_w([[0], [1], [2], [3]]) == [[0], [1], [2], [3], [4, 5]]
    assert put_w([[0], [1], [3], [5]], split=True) == [[0], [1], [3], [5], [4], [6]]
    # +1 per forward, -1 per W (placed in free slots when absent)
    assert peak_memory([[0, 6], [1, 7], [2, 8], [3, 9]]) == 2
    assert peak_memory([[0, 2], [1, 3], [4, 6], [5, 7]]) == 4


@pytest.mark.parametrize("name", ["v-half", "v-min"])
@pytest.mark.parametrize("pp", [1, 2, 3, 4, 5, 8])
def test_controllable_memory_orders_are_valid_for_any_m(name, pp):
    for m in range(1, 3 * pp + 1):
        s = generate(name, pp, m)
        assert s.placement == v_placement(pp) and s.split_backward
        validate(s)


V_GREEDY = json.loads((Path(__file__).parent / "golden" / "v_greedy.json").read_text())


@pytest.mark.parametrize("case", V_GREEDY["cases"], ids=lambda c: (
    f"{c['schedule']}-pp{c['pp']}-m{c['microbatches']}"))
def test_controllable_memory_orders_equal_the_zero_bubble_forks(case):
    # the fork's runtime (tag zero-bubble-v0.1.0) runs exactly these orders under
    # --zero-bubble-v-schedule --zero-bubble-v-schedule-mem-setup half / min
    sched = generate(case["schedule"], case["pp"], case["microbatches"], 2)
    assert sched.as_strings() == case["ranks"]


def test_v_greedy_golden_says_where_it_comes_from():
    assert V_GREEDY["command"] == ("python3 tests/schedules/golden/make_v_greedy_golden.py "
                                   "--zb-repo ZB")
    assert V_GREEDY["tag"] == "zero-bubble-v0.1.0" and len(V_GREEDY["commit"]) == 40
    assert {(c["schedule"], c["pp"]) for c in V_GREEDY["cases"]} == {
        (n, pp) for n in ("v-half", "v-min") for pp in range(2, 9)}


@pytest.mark.parametrize("name", ["v-half", "v-min"])
def test_steady_state_repeats_one_block_per_microbatch(name):
    pp, m = 4, 32
    for acts in generate(name, pp, m).ranks:
        mid = len(acts) // 2
        for i in range(mid - 12, mid + 12):
            a, b = acts[i], acts[i + 6]
            assert (b.stage, b.kind, b.microbatch) == (a.stage, a.kind, a.microbatch + 1)


@pytest.mark.parametrize("pp,zbv,half,vmin", [(4, 8, 6, 4), (8, 16, 10, 8), (12, 24, 14, 10),
                                              (16, 32, 18, 12)])
def test_activation_memory_half_and_a_third_of_1f1b_as_p_grows(pp, zbv, half, vmin):
    m = 3 * pp
    assert max(peak_in_flight(generate("zb-v", pp, m))) == zbv     # 1F1B's P microbatches
    assert max(peak_in_flight(generate("v-half", pp, m))) == half  # P + 2
    assert max(peak_in_flight(generate("v-min", pp, m))) == vmin   # ~2P/3 + 2


@pytest.mark.parametrize("name,pp,m,makespan", [
    ("v-half", 4, 8, 53000), ("v-min", 4, 8, 59000), ("v-half", 8, 16, 113000),
    ("v-min", 8, 16, 123000)])
def test_less_memory_costs_bubble(name, pp, m, makespan):
    # measured at unit costs (F = I = W = 1): ZB-V 51, V-Half 53, V-Min 59 at P=4, M=8
    assert run(name, pp, m, 2 * pp).makespan_ns == makespan


@pytest.mark.parametrize("name", ["v-half", "v-min"])
def test_controllable_memory_needs_two_chunks(name):
    with pytest.raises(ConfigError) as err:
        generate(name, 4, 8, 1)
    assert str(err.value) == (f"--vpp: {name} runs exactly 2 chunks per rank (V placement), "
                              f"got --vpp 1")


def test_construction_waits_for_the_dependency_rule():
    from simulator.schedules.library.v_half import data_deps, rank_types, waits
    # rank r holds stages r (down) and 5-r (up) at P = 3; types F, f, B (up's I), b (down's I)
    assert rank_types(3, 1)[:4] == [(1, "F"), (4, "F"), (4, "I"), (1, "I")]
    # (rank, type) of the same microbatch: F after the stage before's F, I after the own F and
    # the next stage's I; f of rank 2 (stage 3) after its own F (stage 2), b of rank 2 (stage 2)
    # after its own B (stage 3); the single W list has no data dependency
    assert data_deps(3) == (
        ((), ((1, 1),), ((0, 1),), ((0, 0), (1, 3)), ()),
        (((0, 0),), ((2, 1),), ((1, 1), (0, 2)), ((1, 0), (2, 3)), ()),
        (((1, 0),), ((2, 0),), ((2, 1), (1, 2)), ((2, 0), (2, 2)), ()))
    # the ordering rule on top: each type after its own previous microbatch on the rank
    assert waits(3)[1][2] == ((1, 1, 0), (0, 2, 0), (1, 2, -1))
    assert waits(3)[0][4] == ((0, 4, -1),)
