"""Calibration fitted to the recorded torch traces (tests/data/traces, uniform case): the fitted
figures, the replay that reproduces the traces, and the calibrated predictions of the other
classes that docs/validation.md shows (pinned: the fit is deterministic)."""

from __future__ import annotations

from pathlib import Path

import pytest

from benchmarks.fidelity import predict
from benchmarks.fidelity.cases import CASES, CLASSES, USER_PATTERN, workload_text
from simulator import simulate
from simulator.calibration import read_traces, trace_files
from simulator.calibration.fit import (_schedule_of, action_costs, calibrate, calibrated_system,
                                       layer_scales)
from simulator.schedules import registry
from simulator.workload.parser import load_workload

TRACES = Path(__file__).resolve().parents[1] / "data" / "traces"
SOURCE = "ScheduleInterleaved1F1B"

# (measured median ms over the recorded iterations, calibrated prediction ms): the uniform
# rows of docs/validation.md's fidelity table
ROWS = {
    "ScheduleGPipe": (567.469, 553.387),
    "Schedule1F1B": (559.868, 552.984),
    "ScheduleInterleaved1F1B": (487.067, 487.096),
    "ScheduleLoopedBFS": (492.699, 491.14),
    "ScheduleInterleavedZeroBubble": (457.763, 446.811),
    "ScheduleZBVZeroBubble": (447.678, 444.888),
    "ScheduleDualPipeV": (462.499, 458.766),
}


@pytest.fixture(scope="module")
def workload(tmp_path_factory) -> Path:
    p = tmp_path_factory.mktemp("wl") / "uniform.txt"
    p.write_text(workload_text(CASES["uniform"]))
    return p


@pytest.fixture(scope="module")
def source_fit(workload):
    return calibrate([TRACES / SOURCE], workload)


def test_fitted_figures(source_fit):
    cal = source_fit
    rt = cal.runtime()
    assert (cal.schedule, cal.pp, cal.vpp, cal.microbatches, cal.iterations) == \
        ("interleaved-1f1b", 4, 2, 8, 5)
    # fitted launch overhead 328.75 us + the measured posting of each kind's transfers (W: none)
    assert cal.overhead_ns == 328750
    assert {k: round(v) for k, v in cal.comm_ns.items()} == {"F": 214440, "B": 169968,
                                                             "I": 169968, "W": 0}
    assert rt["action_overhead_ns"] == {"F": 543190, "B": 498718, "I": 498718, "W": 328750}
    # latency and exchange cost measured on the transfers (not fitted): 179 receives waited
    # for one-way data (median 166.339 us from the later post), 58 with a transfer in flight
    # the other way, which took no longer (145.3285 us): no exchange cost
    m = cal.exchange_measure
    assert (m.exchange_ns, m.two_way, m.one_way, m.two_way_ns, m.one_way_ns) == \
        (0.0, 58, 179, 145328.5, 166339.0)
    assert (rt["exchange_ns"], cal.to_dict()["links"]["latency_ns"], rt["step_prologue_ns"],
            rt["step_epilogue_ns"]) == (0, 166339, 687500, 295537)
    assert (rt["p2p"], rt["first_stage_backward"], rt["calibrated_for"]) == \
        ("torch", "torch", {"pp": 4, "vpp": 2})
    # stage 0 = layers 0-1: F 8 ms, B 12 ms known (layer 0 has no input gradient)
    assert rt["action_costs_ns"]["0"] == {"B": 12244444, "F": 8135396}
    assert sorted(rt["action_costs_ns"], key=int) == [str(s) for s in range(8)]
    assert rt["layer_scale"]["0"] == rt["layer_scale"]["1"] == {"F": 1.0169, "I": 1.0204,
                                                                 "W": 1.0204}
    assert rt["layer_scale"]["15"] == {"F": 1.0364, "I": 1.0272, "W": 1.0272}


def test_replay_reproduces_the_traces_and_is_what_run_gives(source_fit, workload):
    cal = source_fit
    assert round(cal.measured_iteration_ns / 1e6, 3) == 487.067
    assert round(cal.replayed_iteration_ns / 1e6, 3) == 487.096
    for r in cal.ranks:
        # busy from the fitted costs (medians per action) is the measured busy (the median of
        # the rank's sums) up to what medians of parts and of sums differ by
        assert abs(r.replayed["busy_ns"] - r.measured["busy_ns"]) < 0.003 * r.measured["busy_ns"]
        assert abs(r.replayed["end_ns"] - r.measured["end_ns"]) < 0.5e6
    run = simulate(workload, "interleaved-1f1b", calibrated_system(cal.to_dict()), vpp=2)
    assert run.makespan_ns == cal.replayed_iteration_ns


def test_fit_is_deterministic(source_fit, workload):
    assert calibrate([TRACES / SOURCE], workload).to_yaml() == source_fit.to_yaml()


def test_calibrated_predictions_of_every_class(source_fit, workload):
    measured = {c: predict._stats([t / 1e6 for t in read_traces(
        trace_files([TRACES / c]), label_pattern=USER_PATTERN).iteration_times_ns()])
        for c in CLASSES}
    ev = predict.evaluate("uniform", workload, measured, {SOURCE: source_fit.to_dict()})
    got = {r["class"]: (round(r["median_ms"], 3), round(r["calibrated_ms"], 3))
           for r in ev["rows"]}
    assert got == ROWS
    rk = ev["ranking"]
    assert (rk["same"], rk["pairs"], rk["wrong"]) == (17, 17, [])


@pytest.mark.parametrize("cls", list(CLASSES.values()), ids=list(CLASSES))
def test_the_traced_order_names_the_schedule(cls):
    ts = read_traces(trace_files([TRACES / cls.torch_name]), label_pattern=USER_PATTERN)
    assert _schedule_of(ts)[1] == cls.pipesim


def test_overlapped_pairs_share_their_time():
    """DualPipeV runs stage 0's B only inside F/B pairs: the pair's median busy time goes to
    its halves in proportion of the stage's unpaired F and I + W."""
    ts = read_traces(trace_files([TRACES / "ScheduleDualPipeV"]))
    c = action_costs(ts)
    assert {k: round(v) for k, v in c.items() if k[0] == 0} == {
        (0, "B"): 12452718, (0, "F"): 8165993, (0, "I"): 0, (0, "W"): 12313952}
    f, bw = c[(0, "F")], c[(0, "I")] + c[(0, "W")]
    pair = c[(0, "B")] * (f + bw) / bw
    assert 20e6 < pair < 23e6


def test_layer_scales_hand_worked(tmp_path):
    """Stage 0 (layers 0-1): F 300 over 200 known; B 600 over I + W = 100 + 200 -> 2.0 for
    both. Stage 1 (layers 2-3): I and W measured apart -> 100/200 and 300/200."""
    p = tmp_path / "w.txt"
    rows = [f"l{i}\t-1\t100\tNONE\t0\t{0 if i == 0 else 100}\tNONE\t0\t100\tNONE\t0\t0"
            for i in range(4)]
    p.write_text("HYBRID_TRANSFORMER model_parallel_NPU_group: 1 ep: 1 pp: 2 vpp: 1 ga: 2 "
                 "all_gpus: 2 pp_comm: 0\n4\n" + "\n".join(rows) + "\n")
    sched = registry.generate("zb-h1", 2, 2, 1)
    costs = {(0, "F"): 300.0, (0, "B"): 600.0, (1, "F"): 200.0, (1, "I"): 100.0,
             (1, "W"): 300.0}
    assert layer_scales(load_workload(p), sched, costs) == {
        0: {"F": 1.5, "I": 2.0, "W": 2.0}, 1: {"F": 1.5, "I": 2.0, "W": 2.0},
        2: {"F": 1.0, "I": 0.5, "W": 1.5}, 3: {"F": 1.0, "I": 0.5, "W": 1.5}}


def test_ranking_counts_only_pairs_measured_more_than_3_percent_apart():
    measured = {c: {"median_ms": m} for c, m in (("A", 100.0), ("B", 102.0), ("C", 110.0))}
    rk = predict._ranking(measured, {"A": 105.0, "B": 100.0, "C": 104.0}, ["A", "B", "C"])
    assert rk == {"measured": ["A", "B", "C"], "predicted": ["B", "C", "A"], "pairs": 2,
                  "same": 1, "wrong": [("A", "C")]}
