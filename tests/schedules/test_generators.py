"""Interleaved 1F1B, looped BFS and zero-bubble generators: rules beyond the torch goldens."""

from __future__ import annotations

import pytest

from simulator.errors import ConfigError
from simulator.schedules import generate, get
from simulator.schedules.library.interleaved_1f1b import forward_table, resolve_group_size
from simulator.schedules.validate import validate


def _leading_forwards(acts):
    """Forwards before the first backward: the warm-up, plus the first steady step's F."""
    n = 0
    for a in acts:
        if a.kind != "F":
            return n
        n += 1
    return n


# --- interleaved-1f1b -----------------------------------------------------------------------

def test_interleaved_warmup_is_2_p_minus_r_minus_1_plus_v_minus_1_times_n_capped_at_m_v():
    sched = generate("interleaved-1f1b", 4, 8, 2)
    assert [_leading_forwards(acts) for acts in sched.ranks] == [11, 9, 7, 5]
    capped = generate("interleaved-1f1b", 4, 2, 3)  # N = 2: 10, 8, 6, 4 capped at M*v = 6
    assert [_leading_forwards(acts) for acts in capped.ranks] == [6, 6, 6, 5]


def test_default_group_size_is_torchs_m_div_max_1_m_div_p():
    assert resolve_group_size(4, 8, 2, None, "x") == 4
    assert resolve_group_size(4, 10, 2, None, "x") == 5
    assert resolve_group_size(4, 6, 2, None, "x") == 6
    assert resolve_group_size(4, 3, 2, None, "x") == 3
    assert generate("interleaved-1f1b", 4, 10, 2).meta["group_size"] == 5


def test_default_group_size_refusal_names_the_rule_and_the_way_out():
    with pytest.raises(ConfigError) as err:
        generate("interleaved-1f1b", 4, 9, 2)
    assert str(err.value) == (
        "--microbatches: interleaved-1f1b with --pp 4 needs M to be a multiple of "
        "max(1, M // P) = 2 (PyTorch's groups of M // 2), got 9; or pass --group-size N with "
        "4 <= N <= 9 and M mod N = 0 or >= 4 (Megatron)")


def test_vpp_1_ignores_the_group_rule_torch_applies_there():
    sched = generate("interleaved-1f1b", 2, 5, 1)
    validate(sched)
    assert [_leading_forwards(acts) for acts in sched.ranks] == [3, 1]


@pytest.mark.parametrize("n,message", [
    (3, "--group-size: expected P <= N <= M (4 <= N <= 8), got 3"),
    (9, "--group-size: expected P <= N <= M (4 <= N <= 8), got 9"),
    (0, "--group-size: expected a positive number, got 0"),
])
def test_explicit_group_size_outside_p_to_m_is_refused(n, message):
    with pytest.raises(ConfigError) as err:
        generate("interleaved-1f1b", 4, 8, 2, group_size=n)
    assert str(err.value) == message


def test_explicit_group_size_with_a_last_group_smaller_than_p_is_refused():
    with pytest.raises(ConfigError) as err:
        generate("interleaved-1f1b", 4, 10, 2, group_size=4)
    assert str(err.value) == ("--group-size: M mod N must be 0 or at least P = 4 (a last group "
                              "smaller than P stalls the pipeline), got 10 mod 4 = 2")


def test_megatron_last_group_of_m_mod_n_microbatches():
    assert forward_table(9, 2, 5) == [
        (0, 0), (0, 1), (0, 2), (0, 3), (0, 4), (1, 0), (1, 1), (1, 2), (1, 3), (1, 4),
        (0, 5), (0, 6), (0, 7), (0, 8), (1, 5), (1, 6), (1, 7), (1, 8)]
    sched = generate("interleaved-1f1b", 4, 9, 2, group_size=5)
    validate(sched)
    assert sched.meta["group_size"] == 5
    rank3 = [str(a) for a in sched.ranks[3]]
    assert rank3[:5] == ["3F0", "3F1", "3F2", "3F3", "3F4"]  # warm-up (v-1)*N = 5
    assert rank3[5:9] == ["7F0", "7B0", "7F1", "7B1"]


def test_explicit_group_size_equal_to_torchs_gives_torchs_order():
    assert (generate("interleaved-1f1b", 4, 10, 2, group_size=5).ranks
            == generate("interleaved-1f1b", 4, 10, 2).ranks)


def test_looped_bfs_order():
    sched = generate("looped-bfs", 2, 2, 2)
    assert [" ".join(r) for r in sched.as_strings()] == [
        "0F0 0F1 2F0 2F1 2B1 2B0 0B1 0B0",
        "1F0 1F1 3F0 3F1 3B1 3B0 1B1 1B0",
    ]


# --- zb-h1 ---------------------------------------------------------------------------------

def test_zb_h1_is_1f1b_with_i_then_w_and_rank_r_deferring_its_ws_by_r_steps():
    sched = generate("zb-h1", 4, 8)
    assert [" ".join(r) for r in sched.as_strings()] == [
        "0F0 0F1 0F2 0F3 0I0 0W0 0F4 0I1 0W1 0F5 0I2 0W2 0F6 0I3 0W3 0F7 0I4 0W4 "
        "0I5 0W5 0I6 0W6 0I7 0W7",
        "1F0 1F1 1F2 1I0 1F3 1I1 1W0 1F4 1I2 1W1 1F5 1I3 1W2 1F6 1I4 1W3 1F7 1I5 1W4 "
        "1I6 1W5 1I7 1W6 1W7",
        "2F0 2F1 2I0 2F2 2I1 2F3 2I2 2W0 2F4 2I3 2W1 2F5 2I4 2W2 2F6 2I5 2W3 2F7 2I6 2W4 "
        "2I7 2W5 2W6 2W7",
        "3F0 3I0 3F1 3I1 3F2 3I2 3F3 3I3 3W0 3F4 3I4 3W1 3F5 3I5 3W2 3F6 3I6 3W3 3F7 3I7 3W4 "
        "3W5 3W6 3W7",
    ]


def test_zb_h1_keeps_1f1b_peak_memory():
    """At most P-r microbatches forwarded but not yet through I (1F1B's bound) on rank r."""
    for pp, m in ((4, 8), (8, 16), (3, 5)):
        sched = generate("zb-h1", pp, m)
        for r, acts in enumerate(sched.ranks):
            live = peak = 0
            for a in acts:
                live += {"F": 1, "I": -1}.get(a.kind, 0)
                peak = max(peak, live)
            assert peak == min(pp - r, m)


# --- zb-h2 ---------------------------------------------------------------------------------

def test_zb_h2_order_p4_m8():
    sched = generate("zb-h2", 4, 8)
    assert [" ".join(r) for r in sched.as_strings()] == [
        "0F0 0F1 0F2 0F3 0F4 0F5 0F6 0I0 0W0 0I1 0F7 0I2 0W1 0I3 0W2 0I4 0W3 0I5 0W4 0I6 0W5 "
        "0W6 0I7 0W7",
        "1F0 1F1 1F2 1F3 1F4 1I0 1F5 1I1 1F6 1I2 1W0 1I3 1F7 1I4 1W1 1I5 1W2 1I6 1W3 1W4 1I7 "
        "1W5 1W6 1W7",
        "2F0 2F1 2F2 2I0 2F3 2I1 2F4 2I2 2F5 2I3 2F6 2I4 2W0 2I5 2F7 2I6 2W1 2W2 2I7 2W3 2W4 "
        "2W5 2W6 2W7",
        "3F0 3I0 3F1 3I1 3F2 3I2 3F3 3I3 3F4 3I4 3F5 3I5 3F6 3I6 3W0 3F7 3I7 3W1 3W2 3W3 3W4 "
        "3W5 3W6 3W7",
    ]


@pytest.mark.parametrize("pp,m", [(2, 3), (3, 5), (4, 7), (4, 8), (5, 12), (8, 16)])
def test_zb_h2_warms_up_2_p_minus_r_minus_1_and_never_holds_more_than_2p_minus_1(pp, m):
    sched = generate("zb-h2", pp, m)
    assert [_leading_forwards(acts) for acts in sched.ranks] == [2 * (pp - r) - 1 for r in range(pp)]
    for acts in sched.ranks:
        live = peak = 0
        for a in acts:
            live += {"F": 1, "W": -1}.get(a.kind, 0)
            peak = max(peak, live)
        assert peak <= 2 * pp - 1


def test_zb_h2_refuses_vpp_above_1():
    with pytest.raises(ConfigError) as err:
        generate("zb-h2", 4, 8, 2)
    assert str(err.value) == ("--vpp: zb-h2 runs one chunk per rank, got --vpp 2; use zb-v for "
                              "two chunks per rank")


# --- closed forms --------------------------------------------------------------------------

def test_closed_forms_under_unit_costs():
    assert get("interleaved-1f1b").closed_form(4, 8, 2) == pytest.approx(3 / 19)  # 9 of 57
    assert get("looped-bfs").closed_form(4, 8, 2) == pytest.approx(3 / 19)
    assert get("zb-h1").closed_form(4, 8, 1) == pytest.approx(3 / 27)  # 3 of 27
    assert get("zb-h2").closed_form(4, 8, 1) == 0.0
    for name in ("interleaved-1f1b", "looped-bfs", "zb-h1"):
        assert get(name).variable_vpp
    assert not get("zb-h2").variable_vpp
