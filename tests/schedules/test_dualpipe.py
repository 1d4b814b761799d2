"""Bidirectional DualPipe: DeepSeek's 8-step order, layout, constraints, memory and bubble."""

from __future__ import annotations

import pytest

from simulator.errors import ConfigError
from simulator.schedules import Action, generate, get, v_placement
from simulator.schedules.validate import validate

from .test_v_schedules import peak_in_flight, run

# Traced by hand through DualPipe.step (deepseek-ai/DualPipe, dualpipe/dualpipe.py).
P2_M4 = [
    ["0F0", "3F2", "0F1", "3B2", "3F3@0", "0B0@0", "3B3", "0I1", "0W1"],
    ["2F2", "1F0", "2F3", "1B0", "1F1@0", "2B2@0", "1B1", "2I3", "2W3"],
]
P4_M8_RANKS_0_1 = [
    ["0F0", "0F1", "0F2", "7F4", "7I4", "7W4", "7F5", "0F3@0", "7B5@0", "7F6@1", "0B0@1", "7B6",
     "7F7@2", "0B1@2", "7B7", "0I2", "0W2", "0I3", "0W3"],
    ["1F0", "6F4", "1F1", "6F5", "1F2", "6B4", "6F6@0", "1B0@0", "1F3@1", "6B5@1", "6F7@2",
     "1B1@2", "6B6", "1B2", "6I7", "1I3", "6W7", "1W3"],
]


def test_p2_m4_by_hand():
    s = generate("dualpipe", 2, 4)
    assert s.as_strings() == P2_M4
    validate(s)


def test_p4_m8_first_half_by_hand():
    assert generate("dualpipe", 4, 8).as_strings()[:2] == P4_M8_RANKS_0_1


def test_layout_two_directions_sharing_chunks():
    s = generate("dualpipe", 4, 8)
    assert s.n_stages == 8 and s.vpp == 2
    assert s.pipelines == ((0, 1, 2, 3), (4, 5, 6, 7))
    assert s.placement == (0, 1, 2, 3, 3, 2, 1, 0) == v_placement(4)
    assert s.stage_chunk == (0, 1, 2, 3, 0, 1, 2, 3) and s.n_chunks == 4
    assert s.meta["parameter_copies"] == 2
    assert s.meta["directions"] == {"forward": (0, 4), "reverse": (4, 8)}
    # the reverse direction enters at rank 3 (stage 4) and leaves at rank 0 (stage 7)
    assert s.prev_stage(4) is None and s.next_stage(7) is None and s.next_stage(3) is None


@pytest.mark.parametrize("pp,m", [(2, 4), (2, 6), (4, 8), (4, 12), (6, 12), (8, 16), (8, 20)])
def test_each_direction_carries_its_half_of_the_microbatches_once(pp, m):
    s = generate("dualpipe", pp, m)
    validate(s)
    half = m // 2
    for stage in range(2 * pp):
        mbs = range(half) if stage < pp else range(half, m)
        acts = [a for a in s.ranks[s.placement[stage]] if a.stage == stage]
        assert sorted(a.microbatch for a in acts if a.kind == "F") == list(mbs)
        full = [a.microbatch for a in acts if a.kind == "B"]
        split = [a.microbatch for a in acts if a.kind == "I"]
        assert sorted(full + split) == list(mbs)
        assert sorted(a.microbatch for a in acts if a.kind == "W") == sorted(split)


@pytest.mark.parametrize("pp,m", [(4, 8), (4, 12), (6, 12), (8, 16)])
def test_second_half_ranks_mirror_the_first_half_with_directions_swapped(pp, m):
    s = generate("dualpipe", pp, m)
    half = m // 2

    def mirror(a: Action) -> Action:
        # rank r's forward-direction stage r <-> rank P-1-r's reverse stage P+r, and back
        if a.stage < pp:
            return Action(a.stage + pp, a.kind, a.microbatch + half, a.pair)
        return Action(a.stage - pp, a.kind, a.microbatch - half, a.pair)

    for r in range(pp // 2):
        assert tuple(mirror(a) for a in s.ranks[r]) == s.ranks[pp - 1 - r]


@pytest.mark.parametrize("pp,m", [(1, 2), (2, 4), (3, 6), (4, 8), (4, 10)])
def test_first_half_of_dualpipe_on_2p_ranks_is_dualpipe_v_on_p(pp, m):
    # DualPipeV is DualPipe "cut in half": an independent check of the two implementations
    # (dualpipe from DeepSeek's code, dualpipe-v from torch's, equal to torch's goldens).
    dp = generate("dualpipe", 2 * pp, 2 * m)
    dpv = generate("dualpipe-v", pp, m)
    for r in range(pp):
        def to_v(a: Action) -> Action:
            if a.stage < 2 * pp:                       # forward direction: stage r
                return Action(a.stage, a.kind, a.microbatch, a.pair)
            # reverse stage 4P-1-r on rank r becomes the V's stage 2P-1-r
            return Action(a.stage - 2 * pp, a.kind, a.microbatch - m, a.pair)
        assert tuple(to_v(a) for a in dp.ranks[r]) == dpv.ranks[r]


@pytest.mark.parametrize("pp,m,vpp,message", [
    (3, 6, 2, "--pp: dualpipe needs an even number of ranks, got 3"),
    (4, 9, 2, "--microbatches: dualpipe needs an even number of microbatches, at least "
              "2 x pp = 8, got 9"),
    (4, 6, 2, "--microbatches: dualpipe needs an even number of microbatches, at least "
              "2 x pp = 8, got 6"),
    (4, 8, 1, "--vpp: dualpipe runs exactly 2 chunks per rank (one per direction), got --vpp 1"),
])
def test_constraints_from_deepseek(pp, m, vpp, message):
    with pytest.raises(ConfigError) as err:
        generate("dualpipe", pp, m, vpp)
    assert str(err.value) == message


@pytest.mark.parametrize("pp,m", [(2, 4), (4, 8), (4, 16), (6, 12), (8, 16), (8, 32)])
def test_peak_activations_are_pp_plus_1_on_every_rank(pp, m):
    # DeepSeek's table: activation PP+1 (chunk-microbatches; 1F1B's is PP).
    assert peak_in_flight(generate("dualpipe", pp, m)) == [pp + 1] * pp


@pytest.mark.parametrize("pp,m", [(2, 4), (4, 8), (4, 12), (6, 12), (8, 16)])
def test_bubble_is_deepseeks_pp_over_2_minus_1_times_fb_plus_b_minus_3w(pp, m):
    # Unit costs F = W = 1, B = 2, F&B = 3: bubble (P/2-1)(3+2-3) = P-2 after 2 x M/2 x 3 work.
    result = run("dualpipe", pp, m, pp)
    assert result.makespan_ns == (3 * m + pp - 2) * 1000
    assert result.bubble_ratio == pytest.approx(get("dualpipe").closed_form(pp, m, 2))
