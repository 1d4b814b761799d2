"""``--p2p batched`` on interleaved 1F1B: the exchanges Megatron-LM's interleaved schedule makes
without --overlap-p2p-communication (forward_backward_pipelining_with_interleaving): after each
warm-up forward its send and the next forward's receive; after each steady F-B pair both sends
and the next pair's two receives; after each cool-down backward its send and the next
backward's receive."""

from __future__ import annotations

import pytest

from simulator.cli.main import main
from simulator.engine.program import BATCH, COMPUTE, Program
from simulator.schedules import generate
from simulator.schedules.schedule import Schedule
from simulator.system import SystemConfig
from simulator.workload import uniform_workload
from simulator.workload.partition import partition


def _exchanges(pp: int, microbatches: int, vpp: int, bare: bool = False) -> list[list[str]]:
    sched = generate("interleaved-1f1b", pp, microbatches, vpp)
    if bare:   # the same orders built by hand: no generator's meta
        sched = Schedule(sched.name, pp, vpp, microbatches, sched.placement, sched.ranks)
    wl = uniform_workload(pp * vpp * 2, pp=pp, ga=microbatches, pp_comm=64)
    program = Program.compile(sched, partition(wl, pp * vpp), wl.header, SystemConfig(),
                              p2p="batched")
    out = []
    for ops in program.compiled:
        rank = []
        for op in ops:
            if op[0] == COMPUTE:
                rank.append(" ".join(f"{a.stage}{a.kind}{a.microbatch}" for a in op[2]))
            else:
                assert op[0] == BATCH
                rank.append("[" + ", ".join(
                    f"{t.op} {t.data.value}{t.dst_stage}{t.microbatch}"
                    for _, _, _, _, t in op[1]) + "]")
        out.append(rank)
    return out


def test_three_ranks_exchange_as_megatrons_interleaved_loop():
    # P 3, v 2, M 3 (one group of P): warm-ups 6, 5 and 3 of each rank's 6 forwards. A send is
    # named by the stage and microbatch it feeds ("send F10": stage 1's F of microbatch 0), a
    # receive by the action that consumes it
    r0, r1, r2 = _exchanges(3, 3, 2)
    # rank 0 is all warm-up: its forwards, then its backwards (Megatron's send of the last
    # forward and its recv_backward, made back to back, are one exchange here)
    assert r0 == [
        "0F0", "[send F10]", "0F1", "[send F11]", "0F2", "[send F12, recv F30]",
        "3F0", "[send F40, recv F31]", "3F1", "[send F41, recv F32]",
        "3F2", "[send F42, recv B30]",
        "3B0", "[send B20, recv B31]", "3B1", "[send B21, recv B32]",
        "3B2", "[send B22, recv B00]", "0B0", "[recv B01]", "0B1", "[recv B02]", "0B2"]
    # rank 1: its last warm-up exchange also receives the first backward's gradient; its one
    # steady pair runs back to back, then both sends and the next backward's receive
    assert r1 == [
        "[recv F10]", "1F0", "[send F20, recv F11]", "1F1", "[send F21, recv F12]",
        "1F2", "[send F22, recv F40]", "4F0", "[send F50, recv F41]",
        "4F1", "[send F51, recv F42, recv B40]",
        "4F2", "4B0", "[send F52, send B30, recv B41]",
        "4B1", "[send B31, recv B42]", "4B2", "[send B32, recv B10]",
        "1B0", "[send B00, recv B11]", "1B1", "[send B01, recv B12]", "1B2", "[send B02]"]
    # the last rank receives no gradient with its last warm-up exchange (it makes them)
    assert r2 == [
        "[recv F20]", "2F0", "[send F30, recv F21]", "2F1", "[send F31, recv F22]",
        "2F2", "[send F32, recv F50]",
        "5F0", "5B0", "[send B40, recv F51]", "5F1", "5B1", "[send B41, recv F52]",
        "5F2", "5B2", "[send B42, recv B20]",
        "2B0", "[send B10, recv B21]", "2B1", "[send B11, recv B22]", "2B2", "[send B12]"]


@pytest.mark.parametrize("pp, vpp", [(3, 2), (3, 3), (4, 2), (4, 3), (6, 2), (8, 2)])
@pytest.mark.parametrize("rounds", [1, 2, 3])
def test_groups_of_p_run_without_deadlock(pp, vpp, rounds, capsys):
    # Megatron's default group of P microbatches, M a multiple of P: every run finishes
    assert main(["run", "workloads/gpt-24l.txt", "-s", "interleaved-1f1b", "--pp", str(pp),
                 "--vpp", str(vpp), "-m", str(pp * rounds), "--p2p", "batched"]) == 0
    assert "deadlock" not in capsys.readouterr().err


def _refusal(capsys, pp: int, microbatches: int) -> str:
    """The one line ``run`` of interleaved-1f1b (v 2) with --p2p batched is refused with."""
    assert main(["run", "workloads/gpt-24l.txt", "-s", "interleaved-1f1b", "--pp", str(pp),
                 "--vpp", "2", "-m", str(microbatches), "--p2p", "batched"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1
    return err[0]


def test_larger_groups_over_several_are_refused_in_one_line(capsys):
    # groups of 4 for P 3 (torch's rule for M 8): Megatron posts the first stage's receives
    # ahead of use there, aligned with the last stage's sends; pipesim says so before running
    assert _refusal(capsys, 3, 8) == (
        "pipesim: error: --p2p batched: interleaved-1f1b in groups of 4 "
        "microbatches (more than P = 3, 8 in all) needs the first stage's receives "
        "posted ahead of use, which pipesim does not model; use --p2p async "
        "(Megatron's --overlap-p2p-communication, its default) or groups of P "
        "(-O group_size=3, with M a multiple of it)")


def test_two_ranks_are_refused_as_megatron_refuses_them(capsys):
    # megatron/training/arguments.py asserts more than 2 pipeline ranks for an interleaved
    # schedule without overlap: two ranks would exchange several tensors in one batch
    assert _refusal(capsys, 2, 4) == (
        "pipesim: error: --p2p batched: interleaved-1f1b without overlap needs more than 2 "
        "pipeline ranks, got 2 (Megatron-LM asserts it: two ranks would exchange several "
        "tensors in one batch); use --p2p async (Megatron's --overlap-p2p-communication, "
        "its default)")


def test_without_virtual_stages_the_exchanges_stay_at_use(capsys):
    # one chunk a rank is no interleaved loop of Megatron's: nothing is paired or refused
    assert main(["run", "workloads/gpt-24l.txt", "-s", "interleaved-1f1b", "--pp", "3",
                 "--vpp", "1", "-m", "8", "--p2p", "batched"]) == 0
    assert "error" not in capsys.readouterr().err


@pytest.mark.parametrize("pp, microbatches, vpp", [(3, 3, 2), (4, 8, 2), (3, 6, 3), (4, 4, 3)])
def test_a_hand_built_schedule_pairs_by_megatrons_warmup_rule(pp, microbatches, vpp):
    """Without the generator's meta the warm-up counts come from Megatron's rule at the
    default group size: the same exchanges as the generated schedule's."""
    assert _exchanges(pp, microbatches, vpp, bare=True) == _exchanges(pp, microbatches, vpp)


def test_the_warmup_rule_is_the_generators():
    """Also where a rank's steady part is one pair, which its order cannot tell from all
    warm-up (P 2, M 3, v 2: rank 0 warms up 5 of its 6 forwards)."""
    from simulator.schedules.library.interleaved_1f1b import warmup_of

    for pp, m, vpp in ((3, 3, 2), (4, 8, 2), (2, 3, 2), (5, 10, 3), (8, 16, 2)):
        sched = generate("interleaved-1f1b", pp, m, vpp)
        bare = Schedule(sched.name, pp, vpp, m, sched.placement, sched.ranks)
        assert warmup_of(bare) == warmup_of(sched) == tuple(sched.meta["warmup"])
