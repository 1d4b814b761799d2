"""The runtime against hand-worked timelines and closed forms."""

from __future__ import annotations

import logging

import pytest

from simulator import DeadlockError, simulate
from simulator.errors import Wait
from simulator.schedules import Action, Schedule
from simulator.system import SystemConfig
from simulator.system.config import CollectiveConfig, LinkConfig
from simulator.workload import Comm, CommGroup, CommType, uniform_workload

NO_COMM = SystemConfig()


def run(wl, schedule, **kw):
    return simulate(wl, schedule, kw.pop("system", NO_COMM), **kw)


@pytest.mark.parametrize("schedule", ["gpipe", "1f1b"])
@pytest.mark.parametrize("P", [1, 2, 4, 8])
def test_uniform_costs_match_closed_form(schedule, P):
    F, I, W = 1000, 700, 300
    for M in sorted({1, max(1, P - 1), P, 2 * P, 8 * P}):
        r = run(uniform_workload(P, F, I, W), schedule, pp=P, microbatches=M)
        assert r.makespan_ns == (M + P - 1) * (F + I + W)
        expected = (P - 1) / (M + P - 1)
        assert r.bubble_ratio == pytest.approx(expected, abs=1e-9)
        assert r.to_dict()["theoretical_bubble_ratio"] == pytest.approx(expected, abs=1e-12)
        for s in r.to_dict()["stages"]:
            assert s["bubble_ratio"] == pytest.approx(expected, abs=1e-9)
            assert s["busy_ns"] == M * (F + I + W)


def test_1f1b_phase_counts_and_inflight_p4_m8():
    d = run(uniform_workload(4), "1f1b", pp=4, microbatches=8).to_dict()
    assert [(s["warmup"], s["steady"], s["cooldown"]) for s in d["stages"]] == [
        (3, 5, 3), (2, 6, 2), (1, 7, 1), (0, 8, 0)]
    assert [s["peak_inflight_microbatches"] for s in d["stages"]] == [4, 3, 2, 1]


@pytest.mark.parametrize("P,M", [(4, 2), (4, 4), (3, 12)])
def test_peak_inflight_1f1b_is_min_p_minus_s_m_and_gpipe_is_m(P, M):
    d1 = run(uniform_workload(P), "1f1b", pp=P, microbatches=M).to_dict()
    assert [s["peak_inflight_microbatches"] for s in d1["stages"]] == [min(P - s, M) for s in range(P)]
    dg = run(uniform_workload(P), "gpipe", pp=P, microbatches=M).to_dict()
    assert [s["peak_inflight_microbatches"] for s in dg["stages"]] == [M] * P


def test_two_stages_with_p2p_link_hand_worked():
    # 1 byte/ns (8 Gb/s), 100 ns latency, 400 B per microbatch: every transfer takes 500 ns.
    system = SystemConfig(links=LinkConfig(bandwidth_gbps=8.0, latency_ns=100.0))
    wl = uniform_workload(2, fwd=1000, ig=600, wg=400, pp_comm=400)
    r = run(wl, "1f1b", pp=2, microbatches=2, system=system)
    acts = sorted((a.rank, a.start, a.end, f"{a.stage}{a.kind}{a.microbatch}")
                  for a in r.records.actions)
    assert acts == [
        (0, 0.0, 1000.0, "0F0"), (0, 1000.0, 2000.0, "0F1"),
        (0, 4000.0, 5000.0, "0B0"), (0, 6000.0, 7000.0, "0B1"),
        (1, 1500.0, 2500.0, "1F0"), (1, 2500.0, 3500.0, "1B0"),
        (1, 3500.0, 4500.0, "1F1"), (1, 4500.0, 5500.0, "1B1"),
    ]
    assert r.makespan_ns == 7000.0
    d = r.to_dict()
    assert [s["bytes_sent"] for s in d["stages"]] == [800, 800]
    assert [s["bytes_received"] for s in d["stages"]] == [800, 800]
    assert d["links"] == [  # busy = serialisation only (latency is in flight, not on the link)
        {"src_rank": 0, "dst_rank": 1, "bytes": 800, "transfers": 2, "busy_ns": 800.0},
        {"src_rank": 1, "dst_rank": 0, "bytes": 800, "transfers": 2, "busy_ns": 800.0}]
    transfers = sorted((t.src_rank, t.microbatch, t.issued, t.start, t.end)
                       for t in r.records.transfers)
    # the second activation waits for the link: issued 2000, link free at 1500 -> no wait
    assert transfers == [(0, 0, 1000.0, 1000.0, 1500.0), (0, 1, 2000.0, 2000.0, 2500.0),
                         (1, 0, 3500.0, 3500.0, 4000.0), (1, 1, 5500.0, 5500.0, 6000.0)]


def test_link_carries_one_transfer_at_a_time():
    # 2000 B at 1 B/ns: each activation occupies the link 2000 ns, longer than a forward (1000).
    system = SystemConfig(links=LinkConfig(bandwidth_gbps=8.0, latency_ns=0.0))
    wl = uniform_workload(2, fwd=1000, ig=500, wg=500, pp_comm=2000)
    r = run(wl, "gpipe", pp=2, microbatches=3, system=system)
    sends = sorted((t.issued, t.start, t.end) for t in r.records.transfers if t.src_rank == 0)
    assert sends == [(1000.0, 1000.0, 3000.0), (2000.0, 3000.0, 5000.0), (3000.0, 5000.0, 7000.0)]
    fwd1 = sorted(a.start for a in r.records.actions if a.rank == 1 and a.kind == "F")
    assert fwd1 == [3000.0, 5000.0, 7000.0]


def test_tp_allreduce_per_layer_hand_worked():
    # ring all-reduce over 4 ranks: 2*(3/4)*S/B + 2*3*latency = 1.5*8000 + 60 = 12060 ns
    tp = LinkConfig(bandwidth_gbps=8.0, latency_ns=10.0)
    system = SystemConfig(collectives=CollectiveConfig(tp=tp))
    ar = Comm(CommType.ALLREDUCE, CommGroup.TP, 8000, "ALLREDUCE")
    wl = uniform_workload(2, fwd=1000, ig=800, wg=200, tp=4, fwd_comm=ar, ig_comm=ar)
    r = run(wl, "1f1b", pp=1, microbatches=2, system=system)
    per_mb = 2 * (1000 + 12060) + 2 * (800 + 12060) + 2 * 200
    assert r.makespan_ns == 2 * per_mb


def test_forward_comm_below_4096_bytes_rounds_up_like_simai():
    tp = LinkConfig(bandwidth_gbps=8.0, latency_ns=0.0)
    system = SystemConfig(collectives=CollectiveConfig(tp=tp))
    small = Comm(CommType.ALLGATHER, CommGroup.TP, 100, "ALLGATHER")
    wl = uniform_workload(1, fwd=0, ig=0, wg=0, tp=2, fwd_comm=small, ig_comm=small)
    r = run(wl, "1f1b", pp=1, microbatches=1, system=system)
    # forward: (1/2)*4096 (rounded up); input gradient: (1/2)*100 (not rounded)
    assert r.makespan_ns == 2048 + 50


def test_checkpoint_recompute_hand_worked():
    # checkpoint at layer 0, recompute initiated at layer 3: layers 0..2 are recomputed
    wl = uniform_workload(4, fwd=100, ig=10, wg=1, checkpoints=(0,), checkpoint_initiates=(3,))
    r = run(wl, "1f1b", pp=1, microbatches=1, trace_layers=True)
    assert r.makespan_ns == 4 * 100 + 3 * 100 + 4 * 10 + 4 * 1
    states = [(lr.layer, lr.state) for lr in r.records.layers if lr.state != "Forward_Pass"]
    assert states == [(3, "Weight_Gradient"), (0, "Forward_In_BackPass"),
                      (1, "Forward_In_BackPass"), (2, "Forward_In_BackPass"),
                      (3, "Input_Gradient"), (2, "Weight_Gradient"), (2, "Input_Gradient"),
                      (1, "Weight_Gradient"), (1, "Input_Gradient"), (0, "Weight_Gradient"),
                      (0, "Input_Gradient")]
    assert r.to_dict()["layer_ops"] == 4 + 3 + 4 + 4


def test_recompute_does_not_cross_stage_boundary():
    # layers 0-1 on stage 0, 2-3 on stage 1; checkpoint 0, initiate 3 -> stage 1 recomputes layer 2 only
    wl = uniform_workload(4, fwd=100, ig=10, wg=1, checkpoints=(0,), checkpoint_initiates=(3,))
    r = run(wl, "1f1b", pp=2, microbatches=1)
    b1 = [a for a in r.records.actions if a.rank == 1 and a.kind == "B"][0]
    assert b1.end - b1.start == 100 + 2 * 10 + 2 * 1


def test_dp_allreduce_issued_after_last_microbatch_and_ends_iteration():
    # dp = all_gpus / (tp*pp) = 4; all-reduce 2*(3/4)*8000 B at 1 B/ns = 12000 ns, update 500
    dp = LinkConfig(bandwidth_gbps=8.0, latency_ns=0.0)
    system = SystemConfig(collectives=CollectiveConfig(dp=dp))
    ar = Comm(CommType.ALLREDUCE, CommGroup.DP, 8000, "ALLREDUCE")
    wl = uniform_workload(2, fwd=1000, ig=1000, wg=1000, all_gpus=4, wg_comm=ar, update_time=500)
    r = run(wl, "1f1b", pp=1, microbatches=3, system=system, iterations=2)
    colls = [(c.layer, c.iteration, c.ready, c.start, c.end) for c in r.records.collectives]
    # F = 2000, B = 4000 per microbatch; the last B (mb 2) starts at 14000: WG(layer 1) done
    # 15000, IG(l1) 16000, WG(l0) done 17000; the second all-reduce queues behind the first.
    assert colls[:2] == [(1, 0, 15000.0, 15000.0, 27000.0), (0, 0, 17000.0, 27000.0, 39000.0)]
    assert r.records.iteration_bounds == [(0.0, 39500.0), (39500.0, 79000.0)]
    assert r.makespan_ns == 39500.0
    d = r.to_dict()
    assert d["iteration_times_ns"] == [39500.0, 39500.0]
    assert d["dp_collective_bytes"] == 16000


def test_deadlocked_order_is_reported_with_who_waits_for_whom():
    sched = Schedule("bad", 2, 1, 1, (0, 1),
                     ((Action(0, "B", 0), Action(0, "F", 0)), (Action(1, "F", 0), Action(1, "B", 0))))
    with pytest.raises(DeadlockError) as err:
        run(uniform_workload(2), sched, validate=False)
    msg = str(err.value)
    assert msg == ("deadlock at t=0 ns: rank 0 waits on recv 0B0 (1->0) from rank 1 (since t=0 ns); "
                   "rank 1 waits on recv 1F0 (0->1) from rank 0 (since t=0 ns)")
    assert err.value.exit_code == 3


def test_iterations_repeat_and_phases_recorded():
    r = run(uniform_workload(4), "1f1b", pp=4, microbatches=8, iterations=3)
    d = r.to_dict()
    assert d["iteration_times_ns"] == [33000.0] * 3
    assert d["iteration_time_stats_ns"]["p99"] == 33000.0
    assert d["layer_ops"] == 3 * 4 * 8 * 3
    phases = [(a.stage, a.kind, a.microbatch, a.phase) for a in r.records.actions
              if a.rank == 0 and a.iteration == 2]
    assert phases[:4] == [(0, "F", 0, "Warmup"), (0, "F", 1, "Warmup"), (0, "F", 2, "Warmup"),
                          (0, "F", 3, "Steady")]
    assert phases[-1] == (0, "B", 7, "Cooldown")


def test_debug_log_has_document_000_event_lines(caplog):
    with caplog.at_level(logging.DEBUG, logger="pipesim.engine"):
        run(uniform_workload(4), "1f1b", pp=4, microbatches=8)
    lines = [r.getMessage().split(" ", 1)[1] for r in caplog.records]
    stage0 = [ln for ln in lines if "Stage 0 " in ln]
    assert stage0[:5] == [
        "[WARMUP] Stage 0 starting forward for microbatch 0",
        "[PP_FWD_DONE] Stage 0 completed forward for microbatch 0",
        "[WARMUP] Stage 0 starting forward for microbatch 1",
        "[PP_FWD_DONE] Stage 0 completed forward for microbatch 1",
        "[WARMUP] Stage 0 starting forward for microbatch 2",
    ]
    assert "[STEADY-1F] Stage 0 starting forward for microbatch 3" in stage0
    assert "[STEADY-1B] Stage 0 starting backward for microbatch 0" in stage0
    assert "[COOLDOWN] Stage 0 starting backward for microbatch 7" in stage0
    assert stage0[-1] == "[PP_COMPLETE] Stage 0 finished all microbatches"


def test_forward_and_backward_bubbles_add_up_to_idle():
    d = run(uniform_workload(4, 1000, 1000, 1000), "1f1b", pp=4, microbatches=8).to_dict()
    for s in d["stages"]:
        assert s["forward_bubble_ns"] + s["backward_bubble_ns"] == s["idle_ns"]
        assert s["forward_ns"] == 8 * 1000 and s["backward_ns"] == 8 * 2000
    # stage 3 waits 3 upstream forwards before its first, then drains for 2 steps of F+B
    assert d["stages"][3]["forward_bubble_ns"] == 3000
    assert d["stages"][3]["backward_bubble_ns"] == 6000
    assert d["stages"][0]["forward_bubble_ns"] == 0


def test_2bw_reduces_gradients_per_minibatch_and_forwards_do_not_wait():
    # P=1, M=2, two minibatches in one continuous schedule: F0 B0 F1 B1 | F2 B2 F3 B3.
    # dp = 2: all-reduce 2*(1/2)*8000 B at 1 B/ns = 8000 ns, one per minibatch, after its last
    # weight gradient (B = WG then IG; WG of B1 ends at 5000, of B3 at 11000).
    dp = LinkConfig(bandwidth_gbps=8.0, latency_ns=0.0)
    ar = Comm(CommType.ALLREDUCE, CommGroup.DP, 8000, "ALLREDUCE")
    wl = uniform_workload(1, 1000, 1000, 1000, all_gpus=2, wg_comm=ar)
    r = run(wl, "2bw", pp=1, microbatches=2, schedule_options={"iterations": 2},
            system=SystemConfig(collectives=CollectiveConfig(dp=dp)))
    assert [(c.ready, c.start, c.end) for c in r.records.collectives] == [
        (5000.0, 5000.0, 13000.0), (11000.0, 13000.0, 21000.0)]
    f2 = next(a for a in r.records.actions if a.kind == "F" and a.microbatch == 2)
    assert f2.start == 6000.0   # the 1-stale weights: no wait for minibatch 0's reduction
    assert r.makespan_ns == 21000.0


def test_a_compiled_program_is_reused_by_runs_with_other_options():
    """One Program, several runs: same records as compiling afresh; the program is untouched."""
    from simulator.engine.options import EngineOptions
    from simulator.engine.program import Program
    from simulator.engine.runtime import Runtime
    from simulator.schedules import generate
    from simulator.system import SystemConfig
    from simulator.workload import uniform_workload
    from simulator.workload.partition import partition

    wl = uniform_workload(4, pp=2, ga=4, pp_comm=1000)
    sched = generate("1f1b", 2, 4, 1)
    part = partition(wl, sched.n_chunks)
    system = SystemConfig()
    program = Program.compile(sched, part, wl.header, system)
    ops_before = [list(p) for p in program.compiled]
    for iterations, options in ((1, EngineOptions()), (2, EngineOptions(slow_ranks=((1, 2.0),))),
                                (1, EngineOptions())):
        fresh = Runtime(sched, part, wl.header, system, iterations=iterations,
                        options=options).run()
        reused_rt = Runtime.of(program, iterations=iterations, options=options)
        reused = reused_rt.run()
        assert list(reused.actions) == list(fresh.actions)
        assert list(reused.transfers) == list(fresh.transfers)
        assert reused.iteration_bounds == fresh.iteration_bounds
        assert reused_rt.run().iteration_bounds == fresh.iteration_bounds   # runs again
    assert [list(p) for p in program.compiled] == ops_before
    with pytest.raises(ValueError, match="compiled for --p2p async, the options ask for "
                                         "batched"):
        Runtime.of(program, options=EngineOptions(p2p="batched"))


@pytest.mark.parametrize("engine", ["simpy", "evaluator"])
def test_a_deadlock_of_2000_ranks_names_ten_and_counts_the_rest(engine):
    """Every rank waits (rank 0's backward comes first): the line names the first ten waits
    and counts the others, where it was one line of ~130,000 characters; all stay in waits."""
    P = 2000
    ranks = ((Action(0, "B", 0), Action(0, "F", 0)),) + tuple(
        (Action(r, "F", 0), Action(r, "B", 0)) for r in range(1, P))
    sched = Schedule("bad", P, 1, 1, tuple(range(P)), ranks)
    with pytest.raises(DeadlockError) as err:
        run(uniform_workload(P), sched, pp=P, microbatches=1, validate=False, engine=engine)
    assert str(err.value) == (
        "deadlock at t=0 ns: rank 0 waits on recv 0B0 (1->0) from rank 1 (since t=0 ns); "
        + "; ".join(f"rank {r} waits on recv {r}F0 ({r - 1}->{r}) from rank {r - 1} "
                    "(since t=0 ns)" for r in range(1, 10))
        + "; and 1,990 more ranks wait likewise")
    assert len(err.value.waits) == P
    assert err.value.waits[-1].rank == P - 1


def test_a_deadlock_of_eleven_ranks_counts_the_one_left():
    waits = [Wait(r, f"recv {r}F0", r - 1, 0.0) for r in range(11)]
    assert str(DeadlockError(waits, 0.0)).endswith(
        "rank 9 waits on recv 9F0 from rank 8 (since t=0 ns); and 1 more rank waits likewise")
    assert "likewise" not in str(DeadlockError(waits[:10], 0.0))
