"""The compact op lists (``RankOps``, generated when walked) equal the op lists compiled from
the comm pass by the reference compiler (``reference_program``), op for op, on every registered schedule, in every mode they compile
(asynchronous, blocking, batched, torch's single- and multi-stage runtimes)."""

from __future__ import annotations

import pytest

from simulator.engine.program import RankOps, Program, ProgramBuilder
from simulator.schedules import generate, get, names
from simulator.schedules.comm_pass import op_lists
from simulator.system import SystemConfig
from simulator.workload import uniform_workload
from simulator.workload.partition import partition

from .reference_program import reference_ops


def cases():
    for name in names():
        spec = get(name)
        for P, M in ((2, 4), (4, 8)):
            v = 2 if spec.variable_vpp else spec.default_vpp
            try:
                yield name, generate(name, P, M, v)
            except Exception:
                continue


@pytest.mark.parametrize("mode", ["async", "blocking", "batched", "torch-single",
                                  "torch-multi"])
@pytest.mark.parametrize("name,sched", list(cases()), ids=lambda x: x if isinstance(x, str)
                         else "")
def test_rank_ops_equal_the_comm_pass_compile(name, sched, mode):
    wl = uniform_workload(2 * sched.n_chunks, pp=sched.pp, ga=sched.microbatches,
                          pp_comm=4096)
    program = Program.compile(sched, partition(wl, sched.n_chunks), wl.header, SystemConfig(),
                              p2p=mode)
    builder = ProgramBuilder(sched, list(program.costs), list(program.labels),
                             mode, program.pp_comm, program.profile)
    comm = op_lists(sched, early_receives=mode == "torch-multi")
    for r in range(sched.pp):
        ops = program.compiled[r]
        assert isinstance(ops, RankOps) and ops.mode == mode
        assert (ops.lowered is not None) == (mode == "torch-multi")
        expected = reference_ops(builder, r, comm[r])
        assert list(ops) == expected
        assert list(ops) == expected           # walks again
        assert len(ops) == len(expected)


def test_a_lowered_schedule_keeps_its_own_receive_positions_when_they_block():
    """Blocking transfers of a schedule given lowered run where its steps put them (read off
    its steps, equal to the op list compiled from them); asynchronous ones follow from the
    actions."""
    from simulator.schedules.comm_pass import add_communication

    for early in (False, True):
        sched = add_communication(generate("zb-h1", 4, 6, 1), early_receives=early)
        wl = uniform_workload(4, pp=4, ga=6, pp_comm=64)
        for mode in ("async", "blocking", "batched", "torch-single", "torch-multi"):
            program = Program.compile(sched, partition(wl, 4), wl.header, SystemConfig(),
                                      p2p=mode)
            builder = ProgramBuilder(sched, list(program.costs), list(program.labels), mode,
                                     program.pp_comm, program.profile)
            comm = op_lists(sched, early_receives=mode == "torch-multi")
            for r, ops in enumerate(program.compiled):
                assert isinstance(ops, RankOps)
                assert (ops.lowered is None) == (mode == "async")
                if mode != "async":
                    assert list(ops) == reference_ops(builder, r, comm[r])


def test_transfer_records_over_generated_sends_equal_the_comm_pass_ones():
    """Two iterations on FIFO links: the records read through the program's generated sends
    equal those rebuilt from the comm pass, iteration numbers included."""
    from simulator.engine.columns import TransferColumns
    from simulator.engine.runtime import Runtime

    sched = generate("1f1b", 4, 6, 1)
    wl = uniform_workload(4, pp=4, ga=6, pp_comm=512)
    rec = Runtime(sched, partition(wl, 4), wl.header, SystemConfig(), iterations=2).run()
    cols = rec.transfers
    plain = TransferColumns(sched, 512)
    plain.issued, plain.start, plain.end = cols.issued, cols.start, cols.end
    got = sorted(cols)
    assert got == sorted(plain)
    assert len(got) == 2 * 2 * 3 * 6 and {t.iteration for t in got} == {0, 1}


def test_async_ops_of_an_unchecked_list_with_another_ranks_stage():
    """validate=False lets a rank list a stage placed elsewhere: its transfers are still the
    comm pass's (a peer on the rank itself moves nothing)."""
    from simulator.schedules import Action, Schedule

    A = Action.parse
    sched = Schedule("custom", 2, 1, 1, (0, 1), ((A("0F0"), A("1F0"), A("1B0"), A("0B0")),
                                                 (A("1F0"), A("1B0"))))
    wl = uniform_workload(2, pp=2, ga=1, pp_comm=64)
    program = Program.compile(sched, partition(wl, 2), wl.header, SystemConfig(), p2p="async")
    builder = ProgramBuilder(sched, list(program.costs), list(program.labels),
                             "async", program.pp_comm, program.profile)
    comm = op_lists(sched)
    for r in range(2):
        assert list(program.compiled[r]) == reference_ops(builder, r, comm[r])
