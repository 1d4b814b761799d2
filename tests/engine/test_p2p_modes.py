"""Point-to-point semantics: async, blocking (document 001's deadlock), batched."""

from __future__ import annotations

import pytest

from simulator import DeadlockError, simulate
from simulator.cli.main import main
from simulator.system import SystemConfig
from simulator.system.config import LinkConfig
from simulator.workload import uniform_workload

FAST = SystemConfig(links=LinkConfig(bandwidth_gbps=8000.0, latency_ns=10.0))


def test_naive_blocking_1f1b_deadlocks_like_document_001_case_1():
    wl = uniform_workload(4, 1000, 1000, 1000, pp_comm=1000)
    with pytest.raises(DeadlockError) as err:
        simulate(wl, "1f1b", FAST, pp=4, microbatches=8, p2p="blocking")
    waits = {w.rank: w for w in err.value.waits}
    # rank 2 is stuck sending forward(mb 1) to rank 3, rank 3 sending backward(mb 0) to rank 2
    assert waits[2].op == "send 3F1 (2->3)" and waits[2].peer == 3
    assert waits[3].op == "send 2B0 (3->2)" and waits[3].peer == 2
    assert "rank 2 waits on send 3F1 (2->3) to rank 3 (its receive is not posted)" in str(err.value)


def test_deadlock_exits_3_with_one_line(capsys, tmp_path):
    wl = tmp_path / "w.txt"
    wl.write_text("HYBRID_TRANSFORMER_FWD_IN_BCKWD model_parallel_NPU_group: 1 pp: 4 ga: 8 "
                  "all_gpus: 4 pp_comm: 1024\n4\n"
                  + "".join(f"l{i} -1 10 NONE 0 10 NONE 0 10 NONE 0 0\n" for i in range(4)))
    rc = main(["run", str(wl), "--p2p", "blocking"])
    err = capsys.readouterr().err
    assert rc == 3
    assert err.startswith("pipesim: error: deadlock at t=") and err.count("\n") == 1


@pytest.mark.parametrize("schedule", ["1f1b", "gpipe"])
def test_batched_matches_async_when_links_are_idle(schedule):
    # transfers that take no time: the rendezvous of fused send/recv pairs costs nothing
    wl = uniform_workload(4, 1000, 1000, 1000, pp_comm=0)
    a = simulate(wl, schedule, FAST, pp=4, microbatches=8, p2p="async")
    b = simulate(wl, schedule, FAST, pp=4, microbatches=8, p2p="batched")
    assert b.makespan_ns == a.makespan_ns == 33000.0
    assert len(b.records.transfers) == len(a.records.transfers) == 2 * 3 * 8


def test_batched_costs_at_most_the_exposed_transfers_when_links_are_fast():
    # 1000 B at 8 Tb/s + 10 ns: 11 ns per transfer; the rendezvous can expose some of them
    wl = uniform_workload(4, 1000, 1000, 1000, pp_comm=1000)
    a = simulate(wl, "1f1b", FAST, pp=4, microbatches=8, p2p="async")
    b = simulate(wl, "1f1b", FAST, pp=4, microbatches=8, p2p="batched")
    assert a.makespan_ns <= b.makespan_ns <= a.makespan_ns + 2 * (4 + 8) * 11


def test_blocking_gpipe_completes_and_sends_wait_for_receivers():
    # GPipe's receiver is always ready for the next forward, so blocking sends do not deadlock;
    # but a blocking sender cannot run ahead: rank 0's second send starts when rank 1 posts.
    slow = SystemConfig(links=LinkConfig(bandwidth_gbps=8.0, latency_ns=0.0))  # 1 B/ns
    wl = uniform_workload(2, 1000, 1000, 1000, pp_comm=500)
    a = simulate(wl, "gpipe", slow, pp=2, microbatches=2, p2p="async")
    b = simulate(wl, "gpipe", slow, pp=2, microbatches=2, p2p="blocking")
    fa = sorted((t.microbatch, t.start, t.end) for t in a.records.transfers if t.data == "F")
    fb = sorted((t.microbatch, t.start, t.end) for t in b.records.transfers if t.data == "F")
    assert fa == [(0, 1000.0, 1500.0), (1, 2000.0, 2500.0)]
    # blocking: rank 0 holds in send(mb0) until 1500, so F1 runs 1500-2500; rank 1 posts its
    # receive for mb1 after F0 (1500-2500), so mb1 goes 2500-3000.
    assert fb == [(0, 1000.0, 1500.0), (1, 2500.0, 3000.0)]
    assert b.makespan_ns >= a.makespan_ns
