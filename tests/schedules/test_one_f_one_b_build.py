"""1F1B builds its actions with their slots set from C: they must be the very actions the
constructor makes (every field, defaults included), in Megatron's order, for any P and M
(M < P too), with the collector left as it was found."""

from __future__ import annotations

import gc

from simulator.schedules import generate
from simulator.schedules.action import Action, Kind
from simulator.schedules.library.one_f_one_b import one_f_one_b_order


def _megatron(rank, pp, m, stage=None):
    s = rank if stage is None else stage
    warmup = min(pp - rank - 1, m)
    acts = [Action(s, Kind.F, i) for i in range(warmup)]
    for i in range(m - warmup):
        acts += [Action(s, Kind.F, warmup + i), Action(s, Kind.B, i)]
    return acts + [Action(s, Kind.B, i) for i in range(m - warmup, m)]


def test_orders_are_the_constructors_actions():
    for pp in range(1, 9):
        for m in range(1, 13):
            for r in range(pp):
                got = one_f_one_b_order(r, pp, m, stage=None if r % 2 else 5)
                want = _megatron(r, pp, m, stage=None if r % 2 else 5)
                assert got == want
                assert [repr(a) for a in got] == [repr(a) for a in want]
                assert all(type(a) is Action and a.pair is None and a.sub == () for a in got)


def test_p4_m3_rank0_and_the_collector():
    gc.disable()
    try:
        generate("1f1b", 4, 3)
        assert not gc.isenabled()           # left off when it was off
    finally:
        gc.enable()
    sched = generate("1f1b", 4, 3)
    assert gc.isenabled()
    assert [str(a) for a in sched.ranks[0]] == ["0F0", "0F1", "0F2", "0B0", "0B1", "0B2"]
    assert [str(a) for a in sched.ranks[2]] == ["2F0", "2F1", "2B0", "2F2", "2B1", "2B2"]
    assert hash(sched.ranks[3][1]) == hash(Action(3, Kind.B, 0))


def test_the_facts_it_records_are_the_actions_own():
    from simulator.schedules.phases import kind_string, peak_inflight, rank_in_order

    for pp, m in ((1, 1), (4, 3), (4, 8), (6, 2)):
        sched = generate("1f1b", pp, m)
        for r, acts in enumerate(sched.ranks):
            assert sched.__dict__["_kind_strings"][r] == kind_string(acts)
            assert sched.__dict__["_action_stages"][r] == {a.stage for a in acts}
            assert rank_in_order(sched, r)
            assert sched.__dict__["_unpaired"][r] and all(a.pair is None for a in acts)
            for kind in (Kind.F, Kind.B):
                assert [a.microbatch for a in acts if a.kind == kind] == list(range(m))
            assert peak_inflight(acts, in_order=True) == peak_inflight(acts) == (
                min(pp - r, m), min(pp - r, m))


def test_ranks_held_as_columns_read_as_the_tuple():
    """1F1B's ranks are RankActions (stage, kind letters, microbatches): equal to the tuple of
    actions, indexed one by one or sliced or iterated, pickled, and a schedule of them equal
    to the same schedule built from tuples; the run reads the same either way."""
    import pickle

    from simulator.api import simulate
    from simulator.schedules.rank_actions import RankActions, microbatches_of

    sched = generate("1f1b", 4, 6)
    acts = sched.ranks[1]
    assert type(acts) is RankActions
    want = tuple(_megatron(1, 4, 6))
    assert acts[0] == want[0] and acts[-1] == want[-1] and acts[2:5] == want[2:5]
    assert acts == want and want == acts and len(acts) == 12
    assert list(microbatches_of(acts)) == [a.microbatch for a in want]
    assert pickle.loads(pickle.dumps(acts)) == want
    plain = sched._replace(ranks=tuple(tuple(r) for r in sched.ranks))
    assert type(plain.ranks[1]) is tuple and plain == sched
    wl = "workloads/gpt-24l.txt"
    for engine in ("evaluator", "simpy"):
        a = simulate(wl, sched, pp=4, microbatches=6, engine=engine)
        b = simulate(wl, plain, pp=4, microbatches=6, engine=engine)
        assert a.to_dict() == b.to_dict()
        assert list(a.records.actions) == list(b.records.actions)
