"""The dependency rule and the action code (simulator/schedules/deps.py), and the places that
read them: the validator's fast walks (their codes and row tables) and the list schedulers."""

from __future__ import annotations

import random

from simulator.schedules import generate
from simulator.schedules import validate as V
from simulator.schedules.action import Action, Kind
from simulator.schedules.deps import (B, F, I, W, Codec, dependents_table, need_rows, needs,
                                      needs_table, neighbour_stages, ready)

FK, BK, IK, WK = Kind.F, Kind.B, Kind.I, Kind.W


def test_the_rule_on_one_pipeline_of_four_stages():
    prev, nxt = neighbour_stages(((0, 1, 2, 3),), 4)
    assert (prev, nxt) == ([-1, 0, 1, 2], [1, 2, 3, -1])
    assert needs(0, FK, prev, nxt) == ()
    assert needs(2, FK, prev, nxt) == (((1, FK),),)
    assert needs(1, BK, prev, nxt) == (((1, FK),), ((2, BK), (2, IK)))
    assert needs(1, IK, prev, nxt) == (((1, FK),), ((2, BK), (2, IK)))
    assert needs(3, BK, prev, nxt) == (((3, FK),),)
    assert needs(3, WK, prev, nxt) == (((3, IK),),)


def test_two_pipelines_each_stage_its_own_neighbours():
    """DualPipe: microbatches enter at both ends, so stage 3 of pipeline (3, 2, 1, 0) feeds 2."""
    prev, nxt = neighbour_stages(((0, 1, 2, 3), (7, 6, 5, 4)), 8)
    assert prev == [-1, 0, 1, 2, 5, 6, 7, -1]
    assert nxt == [1, 2, 3, -1, -1, 4, 5, 6]
    assert needs(5, FK, prev, nxt) == (((6, FK),),)
    assert needs(5, IK, prev, nxt) == (((5, FK),), ((4, BK), (4, IK)))


def test_the_code_lays_kinds_out_whole_and_round_trips():
    c = Codec(3, 5)
    SM = 15
    assert c.size == 60
    assert c.code(0, FK, 0) == 0 and c.code(2, FK, 4) == SM - 1
    for st in range(3):
        for kind, k in ((FK, F), (IK, I), (WK, W), (BK, B)):
            for mb in range(5):
                x = c.encode(Action(st, kind, mb))
                assert x == c.code(st, kind, mb) == c.row(st, kind) * 5 + mb
                assert divmod(x, SM) == (k, st * 5 + mb)
                assert c.decode(x) == Action(st, kind, mb)
    assert sorted(c.encode(Action(st, kd, mb)) for st in range(3) for kd in "FBIW"
                  for mb in range(5)) == list(range(60))


def test_need_rows_is_the_rule_over_the_codes_rows():
    rng = random.Random(3)
    for pipes, n in ((((0, 1, 2, 3),), 4), (((0, 1, 2), (5, 4, 3)), 6), (((0,),), 1)):
        prev, nxt = neighbour_stages(pipes, n)
        rows = need_rows(prev, nxt)
        codec = Codec(n, 7)
        assert rows.none == 4 * n
        for st in range(n):
            for kind in "FBIW":
                row = codec.row(st, kind)
                want = needs(st, kind, prev, nxt)
                singles = [codec.row(*a[0]) for a in want if len(a) == 1]
                pairs = [tuple(codec.row(*x) for x in a) for a in want if len(a) == 2]
                assert rows.one[row] == (singles[0] if singles else rows.none)
                assert (rows.either[row], rows.other[row]) == \
                    (pairs[0] if pairs else (rows.none, rows.none))
        # a random set of done actions: a code is runnable by the rows iff by the rule
        done = {(st, kd, m) for st in range(n) for kd in "FBIW" for m in range(7)
                if rng.random() < 0.5}
        flags = bytearray(codec.size) + b"\x01" * 7
        for st, kd, m in done:
            flags[codec.code(st, kd, m)] = 1
        for st in range(n):
            for kd in "FBIW":
                for m in range(7):
                    row = codec.row(st, kd)
                    by_rows = bool(flags[rows.one[row] * 7 + m] and (
                        flags[rows.either[row] * 7 + m] or flags[rows.other[row] * 7 + m]))
                    by_rule = all(any((a, b, m) in done for a, b in alt)
                                  for alt in needs(st, kd, prev, nxt))
                    assert by_rows == by_rule, (st, kd, m)


def test_dependents_read_the_rule_backwards():
    prev, nxt = neighbour_stages(((0, 1, 2),), 3)
    table = needs_table(prev, nxt)
    back = dependents_table(table)
    assert back[(1, FK)] == ((1, IK), (1, BK), (2, FK))
    assert back[(2, BK)] == ((1, IK), (1, BK))
    assert back[(0, IK)] == ((0, WK),)
    assert back[(0, BK)] == () and back[(0, WK)] == ()
    for key, named in back.items():
        for other in named:
            assert any(key in alt for alt in table[other])


def test_ready_at_a_time():
    prev, nxt = neighbour_stages(((0, 1),), 2)
    need = needs(0, IK, prev, nxt)
    ended = {(0, FK, 3): 1, (1, IK, 3): 5}
    assert not ready(need, 3, ended, 4)       # the gradient arrives at 5
    assert ready(need, 3, ended, 5)
    assert not ready(need, 2, ended, 9)       # nothing of microbatch 2 ran
    assert ready(needs(0, FK, prev, nxt), 2, {}, 0)


def test_the_validator_codes_are_the_codec():
    """The flat-flag walk's codes are deps' codes (the second half of a pair as -1 - code)."""
    for name, v in (("zb-h1", 2), ("interleaved-1f1b", 2), ("dualpipe-v", 2), ("hanayo", 2)):
        s = generate(name, 4, 8, v)
        codec = Codec(s.n_stages, s.microbatches)
        seen = bytearray(codec.size)
        codes = V._codes(s, seen)
        assert codes is not None, name
        for rank, acts in enumerate(s.ranks):
            got = [x if x >= 0 else -1 - x for x in codes[rank]]
            assert got == [codec.encode(a) for a in acts], name
        assert sum(seen) == sum(len(r) for r in s.ranks)


def test_every_library_list_scheduler_order_meets_the_rule_as_it_is_built():
    """zb-h2 and Hanayo time their orders with the rule: each action of their unit-cost
    timelines starts after what it needs ended."""
    from simulator.schedules.library.hanayo import _COST, unit_start_times

    for s in (generate("zb-h2", 5, 11), generate("hanayo", 3, 6, 4), generate("hanayo", 4, 4)):
        prev, nxt = neighbour_stages(s.pipelines, s.n_stages)
        start = unit_start_times(s)
        end = {k: t + _COST[k[1]] for k, t in start.items()}
        for acts in s.ranks:
            for a in acts:
                for alt in needs(a.stage, a.kind, prev, nxt):
                    met = [end[(st, kd, a.microbatch)] for st, kd in alt
                           if (st, kd, a.microbatch) in end]
                    assert met and start[a.key] >= min(met), (s.name, a)
