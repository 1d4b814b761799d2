"""``compile_async`` numbers a rank's steps from its kind string, run by phase run, instead of
walking every action: the table, each entry's first step and every step's index must be what
the walk gives (same keys in the same order of first use), on every registered schedule and on
arbitrary orders, with DP collectives on (the last weight-carrying backward of each stage
issues them, so its key differs)."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simulator.engine.program import Program, ProgramBuilder
from simulator.errors import ConfigError
from simulator.schedules import Schedule, generate, names
from simulator.schedules.action import Action, Kind
from simulator.schedules.schedule import loop_placement
from simulator.system import SystemConfig
from simulator.workload import uniform_workload
from simulator.workload.model import Comm, CommGroup, CommType
from simulator.workload.partition import partition

DP = Comm(CommType.ALLREDUCE, CommGroup.DP, 1 << 20, "ALLREDUCE")


def _compare(sched: Schedule) -> int:
    """Runs vs walk on every rank the runs take; how many they took."""
    wl = uniform_workload(sched.n_chunks, pp=sched.pp, ga=sched.microbatches, pp_comm=64,
                          all_gpus=2 * sched.pp, wg_comm=DP)
    program = Program.compile(sched, partition(wl, sched.n_chunks), wl.header, SystemConfig(),
                              p2p="async")
    args = (sched, list(program.costs), list(program.labels), "async",
            program.pp_comm, program.profile)
    runs, walk = ProgramBuilder(*args), ProgramBuilder(*args)
    walk._steps_in_runs = lambda rank: None
    taken = 0
    for r in range(sched.pp):
        got = runs._steps_in_runs(r)
        if got is None:
            continue
        taken += 1
        want = walk.compile_async(r)
        table, first, steps, uses = got
        assert (table, first, steps) == (want.costs, want.examples, want.steps)
        if uses is not None:
            assert list(uses) == [list(steps).count(i) for i in range(len(table))]
        assert program.compiled[r].steps == want.steps
        assert program.compiled[r].layer_ops() == want.layer_ops()
    return taken


@pytest.mark.parametrize("name", names())
def test_every_schedule_numbers_its_steps_as_the_walk(name):
    for pp, m, v in itertools.product((1, 2, 4), (1, 3, 8), (1, 2)):
        try:
            sched = generate(name, pp, m, v)
        except ConfigError:
            continue
        taken = _compare(sched)
        if not any(a.pair is not None for acts in sched.ranks for a in acts) \
                and not sched.meta.get("microbatches_per_iteration"):
            assert taken == pp, (name, pp, m, v)     # only pairs and 2BW walk


def test_1f1b_table_in_order_of_first_use():
    sched = generate("1f1b", 2, 3)
    _compare(sched)
    wl = uniform_workload(2, pp=2, ga=3, all_gpus=4, wg_comm=DP)
    program = Program.compile(sched, partition(wl, 2), wl.header, SystemConfig(), p2p="async")
    ops = program.compiled[0]
    # rank 0: 0F0 (warm-up) | 0F1 0B0 0F2 0B1 (steady) | 0B2 (cool-down, issues the DP)
    assert list(ops.steps) == [0, 1, 2, 1, 2, 3]
    assert [c.phases for c in ops.costs] == [("Warmup",), ("Steady",), ("Steady",),
                                             ("Cooldown",)]
    assert [bool(c.dp) for c in ops.costs] == [False, False, False, True]
    assert [str(a[0]) for a in ops.examples] == ["0F0", "0F1", "0B0", "0B2"]


_kinds = st.sampled_from([Kind.F, Kind.B, Kind.I, Kind.W])


@settings(max_examples=150, deadline=None)
@given(st.integers(1, 3), st.integers(1, 2), st.integers(1, 4), st.data())
def test_any_order_numbers_its_steps_as_the_walk(pp, v, m, data):
    placement = loop_placement(pp, v)
    ranks = []
    for r in range(pp):
        stages = [s for s in range(pp * v) if placement[s] == r]
        ranks.append(tuple(data.draw(st.lists(
            st.builds(Action, st.sampled_from(stages), _kinds, st.integers(0, m - 1)),
            min_size=1, max_size=12))))
    _compare(Schedule("random", pp, v, m, placement, tuple(ranks)))
