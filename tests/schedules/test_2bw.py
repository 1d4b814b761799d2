"""PipeDream-2BW: 1F1B across minibatches with no flush, two weight versions, 1-stale updates."""

from __future__ import annotations

import pytest

from simulator.errors import ConfigError
from simulator.schedules import generate, get
from simulator.schedules.library.one_f_one_b import one_f_one_b_order
from simulator.schedules.library.two_bw import weight_version
from simulator.schedules.validate import validate

from .test_v_schedules import peak_in_flight, run


def test_p2_m2_two_iterations_by_hand():
    s = generate("2bw", 2, 2)
    assert s.as_strings() == [
        ["0F0", "0F1", "0B0", "0F2", "0B1", "0F3", "0B2", "0B3"],
        ["1F0", "1B0", "1F1", "1B1", "1F2", "1B2", "1F3", "1B3"],
    ]
    assert (s.microbatches, s.flush) == (4, False)
    validate(s)


def test_meta_records_versions_staleness_and_numbering():
    s = generate("2bw", 4, 4, iterations=3)
    assert s.meta["weight_versions"] == 2 and s.meta["staleness"] == 1
    assert s.meta["iterations"] == 3 and s.meta["microbatches_per_iteration"] == 4
    # iteration i is microbatches 4i..4i+3 and runs on the weights of update i-1 (1-stale)
    assert s.meta["weight_version"] == (0,) * 8 + (1,) * 4
    assert s.microbatches == 12


@pytest.mark.parametrize("pp,m,it", [(2, 2, 2), (4, 4, 2), (4, 8, 3), (8, 8, 2)])
def test_never_drains_between_minibatches(pp, m, it):
    s = generate("2bw", pp, m, iterations=it)
    for r, acts in enumerate(s.ranks):
        assert list(acts) == one_f_one_b_order(r, pp, it * m)
        names = [str(a) for a in acts]
        for i in range(1, it):
            # the next minibatch's first forward comes before this one's last backward,
            # except on the last rank, where 1F1B has no warm-up and F(m) follows B(m-1)
            first_f, last_b = names.index(f"{r}F{i * m}"), names.index(f"{r}B{i * m - 1}")
            assert first_f == last_b + 1 if r == pp - 1 else first_f < last_b


def _versions_held(pp: int, m: int, it: int) -> list[int]:
    """Per rank, the most weight versions it must keep at once (1F1B order over it*m)."""
    out = []
    for r in range(pp):
        acts = one_f_one_b_order(r, pp, it * m)
        forwards = [a.microbatch for a in acts if a.kind == "F"]
        live: set[int] = set()
        newest, issued, most = 0, 0, 0
        for a in acts:
            if a.kind == "F":
                live.add(a.microbatch)
                issued += 1
            else:
                live.discard(a.microbatch)
                if a.microbatch % m == m - 1:        # optimizer step after a minibatch
                    newest = a.microbatch // m + 1
            need = {weight_version(x, m) for x in live} | {newest}
            if issued < len(forwards):
                need.add(weight_version(forwards[issued], m))
            most = max(most, len(need))
        out.append(most)
    return out


@pytest.mark.parametrize("pp,m", [(2, 2), (4, 4), (4, 8), (8, 8)])
def test_two_weight_versions_suffice_and_in_flight_stays_at_most_p(pp, m):
    assert _versions_held(pp, m, 4) == [2] * pp
    assert peak_in_flight(generate("2bw", pp, m, iterations=4)) == [pp - r for r in range(pp)]


def test_fewer_microbatches_than_stages_would_need_three_versions_so_it_is_refused():
    assert _versions_held(4, 3, 4) == [3, 2, 2, 2]
    with pytest.raises(ConfigError) as err:
        generate("2bw", 4, 3)
    assert str(err.value) == ("--microbatches: 2bw needs at least pp = 4 microbatches per "
                              "minibatch so that two weight versions suffice, got 3")


@pytest.mark.parametrize("opts,message", [
    ({"iterations": 0}, "iterations: expected a positive whole number of minibatches for 2bw, "
                        "got 0"),
    ({"iterations": "2"}, "iterations: expected a positive whole number of minibatches for 2bw, "
                          "got '2'"),
])
def test_bad_iterations(opts, message):
    with pytest.raises(ConfigError) as err:
        generate("2bw", 4, 4, **opts)
    assert str(err.value) == message


def test_one_chunk_per_rank_only():
    with pytest.raises(ConfigError) as err:
        generate("2bw", 4, 4, 2)
    assert str(err.value) == "--vpp: 2bw runs one chunk per rank, got --vpp 2"


@pytest.mark.parametrize("pp,m,it,makespan", [(4, 8, 2, 57000), (4, 4, 3, 45000),
                                              (8, 8, 2, 69000)])
def test_unit_cost_makespan_one_fill_one_drain(pp, m, it, makespan):
    # (it*M + P - 1) steps of F + B = 3 units: no flush between the minibatches
    result = run("2bw", pp, m, pp, schedule_options={"iterations": it})
    assert result.makespan_ns == makespan == (it * m + pp - 1) * 3000
    d = result.to_dict()
    assert result.bubble_ratio == pytest.approx(d["theoretical_bubble_ratio"])
    assert d["theoretical_bubble_ratio"] == pytest.approx(get("2bw").closed_form(pp, it * m, 1))
    assert (d["minibatches"], d["time_per_minibatch_ns"]) == (it, makespan / it)
