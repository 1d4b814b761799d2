"""Validation's linear pass (``_valid_fast``) accepts exactly what the detailed checks accept:
every registered schedule, and seeded random breakages of them (swaps, drops, duplicates,
moves), are judged the same by both."""

from __future__ import annotations

import random

import pytest

from simulator.errors import ScheduleError
from simulator.schedules import generate, get, names
from simulator.schedules.schedule import Schedule
from simulator.schedules import validate as V


def detailed(s: Schedule) -> bool:
    try:
        where = V._check_actions(s)
        V._check_pairs(s)
        V._check_complete(s, where)
        V._check_dataflow(s, where)
    except ScheduleError:
        return False
    return True


def schedules():
    out = []
    for name in names():
        spec = get(name)
        v = 2 if spec.variable_vpp else spec.default_vpp
        for P, M in ((2, 4), (4, 8)):
            try:
                out.append(generate(name, P, M, v))
            except Exception:
                continue
    return out


def broken(s: Schedule, rng: random.Random) -> Schedule:
    ranks = [list(r) for r in s.ranks]
    r = rng.randrange(len(ranks))
    acts = ranks[r]
    i, j = rng.randrange(len(acts)), rng.randrange(len(acts))
    how = rng.choice(("swap", "drop", "dup", "move"))
    if how == "swap":
        acts[i], acts[j] = acts[j], acts[i]
    elif how == "drop":
        del acts[i]
    elif how == "dup":
        acts.insert(j, acts[i])
    else:
        other = ranks[(r + 1) % len(ranks)]
        other.insert(rng.randrange(len(other) + 1), acts.pop(i))
    return Schedule(s.name, s.pp, s.vpp, s.microbatches, s.placement,
                    tuple(tuple(x) for x in ranks), s.pipelines, s.stage_chunk, s.flush, s.meta)


def test_registered_schedules_pass_the_linear_check():
    for s in schedules():
        assert detailed(s), s.name
        if len(s.pipelines) == 1:
            assert V._valid_fast(s), s.name


@pytest.mark.parametrize("seed", range(3))
def test_linear_check_agrees_with_the_detailed_checks_on_broken_schedules(seed):
    rng = random.Random(seed)
    disagreements = []
    for s in schedules():
        for _ in range(15):
            b = broken(s, rng)
            fast = V._valid_fast(b)
            if fast and not detailed(b):        # accepting what the rules reject: a bug
                disagreements.append((b.name, b.as_strings()))
            if not fast and len(b.pipelines) == 1 and detailed(b):
                disagreements.append(("rejected", b.name, b.as_strings()))
    assert disagreements == []
