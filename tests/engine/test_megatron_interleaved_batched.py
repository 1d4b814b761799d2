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
from simulator.system import SystemConfig
from simulator.workload import uniform_workload
from simulator.workload.partition import partition


def _exchanges(pp: int, microbatches: int, vpp: int) -> list[list[str]]:
    sched = generate("interleaved-1f1b", pp, microbatches, vpp)
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


def test_two_ranks_exchange_as_megatrons_interleaved_loop():
    # P 2, v 2, M 4 (groups of P): rank 0 warms up with 4 forwards, rank 1 with 2. A send is
    # named by the stage and microbatch it feeds ("send F1 0": stage 1's F of microbatch 0),
    # a receive by the action that consumes it
    r0, r1 = _exchanges(2, 4, 2)
    assert r0 == [
        "0F0", "[send F10]",
        "0F1", "[send F11, recv F20]",
        "2F0", "[send F30, recv F21]",
        # the last warm-up forward's exchange also receives the first backward's gradient
        "2F1", "[send F31, recv B20]",
        # steady pairs: F and B back to back, then both sends and the next pair's receives
        "0F2", "2B0", "[send F12, send B10, recv B21]",
        "0F3", "2B1", "[send F13, send B11, recv F22, recv B00]",
        "2F2", "0B0", "[send F32, recv F23, recv B01]",
        "2F3", "0B1", "[send F33, recv B22]",
        # cool-down: a backward, its send and the next backward's receive
        "2B2", "[send B12, recv B23]",
        "2B3", "[send B13, recv B02]",
        "0B2", "[recv B03]",
        "0B3"]
    assert r1 == [
        "[recv F10]", "1F0",
        "[send F20, recv F11]", "1F1",
        # the last rank receives no gradient with its last warm-up exchange
        "[send F21, recv F30]", "3F0", "3B0",
        "[send B20, recv F31]", "3F1", "3B1",
        "[send B21, recv F12, recv B10]", "1F2", "1B0",
        "[send F22, send B00, recv F13, recv B11]", "1F3", "1B1",
        "[send F23, send B01, recv F32]", "3F2", "3B2",
        "[send B22, recv F33]", "3F3", "3B3",
        "[send B23, recv B12]", "1B2",
        "[send B02, recv B13]", "1B3",
        "[send B03]"]


@pytest.mark.parametrize("pp, vpp", [(2, 2), (3, 2), (4, 2), (4, 3), (6, 2), (8, 2)])
@pytest.mark.parametrize("rounds", [1, 2, 3])
def test_groups_of_p_run_without_deadlock(pp, vpp, rounds, capsys):
    # Megatron's default group of P microbatches, M a multiple of P: every run finishes
    assert main(["run", "workloads/gpt-24l.txt", "-s", "interleaved-1f1b", "--pp", str(pp),
                 "--vpp", str(vpp), "-m", str(pp * rounds), "--p2p", "batched"]) == 0
    assert "deadlock" not in capsys.readouterr().err


def test_larger_groups_over_several_are_refused_in_one_line(capsys):
    # groups of 4 for P 3 (torch's rule for M 8): Megatron posts the first stage's receives
    # ahead of use there, aligned with the last stage's sends; pipesim says so before running
    assert main(["run", "workloads/gpt-24l.txt", "-s", "interleaved-1f1b", "--pp", "3",
                 "--vpp", "2", "-m", "8", "--p2p", "batched"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["pipesim: error: --p2p batched: interleaved-1f1b in groups of 4 "
                   "microbatches (more than P = 3, 8 in all) needs the first stage's receives "
                   "posted ahead of use, which pipesim does not model; use --p2p async "
                   "(Megatron's --overlap-p2p-communication, its default) or groups of P "
                   "(-O group_size=3, with M a multiple of it)"]
