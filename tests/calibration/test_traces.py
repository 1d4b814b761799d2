"""Reading the recorded torch traces (tests/data/traces, made by its record.py): what a
calibration gets out of a real run of each of torch's seven schedule classes."""

from __future__ import annotations

import json
from collections import Counter
from functools import lru_cache
from pathlib import Path

import pytest

from benchmarks.fidelity.cases import CLASSES, USER_PATTERN, make_cases, workload_text
from simulator import simulate
from simulator.calibration import TraceSet, read_traces, trace_files
from simulator.schedules import registry

TRACES = Path(__file__).resolve().parents[1] / "data" / "traces"
MANIFEST = json.loads((TRACES / "MANIFEST.json").read_text())
UNIFORM = make_cases(MANIFEST["layer_ns"])["uniform"]   # the costs the traces were run with
L = MANIFEST["layer_ns"]   # one layer's forward (and each backward half)
MS = 1_000_000


@lru_cache(maxsize=None)
def traces(cls: str) -> TraceSet:
    return read_traces(trace_files([TRACES / cls]),
                       label_pattern=USER_PATTERN if cls == "Schedule1F1B" else None)


@pytest.mark.parametrize("cls", list(CLASSES))
def test_executed_order_equals_pipesim_schedule(cls):
    spec = CLASSES[cls]
    ts = traces(cls)
    expected = registry.generate(spec.pipesim, 4, 8, spec.vpp)
    assert (ts.pp, ts.vpp, ts.microbatches, ts.n_iterations) == (4, spec.vpp, 8, 5)
    assert ts.placement == expected.placement
    assert ts.orders(0) == expected.as_strings()
    assert ts.orders(1) == expected.as_strings()
    assert ts.split_backward == expected.split_backward


def test_interleaved_actions_counted_and_ordered():
    ts = traces("ScheduleInterleaved1F1B")
    it = ts.ranks[0].iterations[0]
    assert Counter(a.kind for a in it.actions) == {
        "F": 16, "B": 16, "SEND_F": 16, "RECV_F": 8, "SEND_B": 8, "RECV_B": 16,
        "UNSHARD": 2, "RESHARD": 2, "REDUCE_GRAD": 2}
    first = ts.ranks[1].iterations[0].actions[:6]
    assert [a.label for a in first] == ["PP:1UNSHARD", "PP:5UNSHARD", "PP:1RECV_F0", "PP:1F0",
                                        "PP:1SEND_F0", "PP:1RECV_F1"]
    assert [(a.stage, a.kind, a.microbatch) for a in first[:4]] == [
        (1, "UNSHARD", None), (5, "UNSHARD", None), (1, "RECV_F", 0), (1, "F", 0)]
    for r in ts.ranks:   # within a rank, actions follow one another
        acts = r.iterations[0].actions
        assert all(a.end_ns <= b.start_ns for a, b in zip(acts, acts[1:]))
        assert all(r.iterations[0].start_ns <= a.start_ns for a in acts)


def test_busy_time_is_the_known_cost_and_waits_are_not_busy():
    """Every compute action's operator time covers its layers' known cost; a receive is no work."""
    ts = traces("ScheduleInterleaved1F1B")
    costs = UNIFORM.stage_costs(8)
    for r in ts.ranks:
        for it in r.iterations:
            for a in it.actions:
                c = costs[a.stage]
                if a.kind == "F":
                    assert c.fwd_ns <= a.busy_ns <= a.span_ns
                elif a.kind == "B":
                    assert c.ig_ns + c.wg_ns <= a.busy_ns <= a.span_ns
                elif a.kind.startswith("RECV"):
                    assert a.busy_ns == 0


def test_gpipe_span_includes_the_receive_wait():
    ts = traces("ScheduleGPipe")
    first = ts.ranks[3].iterations[0].compute[0]
    assert (first.stage, first.kind, first.microbatch, first.label) == (3, "F", 0, "Forward 0")
    # rank 3 waits for stages 0..2 to forward microbatch 0 (4 layers each), none of it busy
    assert first.wait_ns >= 3 * 4 * L
    assert 4 * L <= first.busy_ns < 1.5 * 4 * L


def test_first_stage_split_backward_runs_all_in_w():
    """torch's stage 0 computes no input gradient: its I is empty, its W the whole backward."""
    ts = traces("ScheduleInterleavedZeroBubble")
    c0 = UNIFORM.stage_costs(8)[0]
    assert c0.ig_ns == L   # what pipesim's rows put in stage 0's I (layer 0 has none)
    assert max(ts.samples(0, "I")) < 0.2 * MS
    assert min(ts.samples(0, "W")) >= c0.ig_ns + c0.wg_ns
    c1 = UNIFORM.stage_costs(8)[1]
    assert min(ts.samples(1, "I")) >= c1.ig_ns
    assert min(ts.samples(1, "W")) >= c1.wg_ns
    med = ts.median_busy_ns()
    assert set(med) == {(s, k) for s in range(8) for k in "FIW"}


def test_dualpipev_overlapped_pairs():
    ts = traces("ScheduleDualPipeV")
    it = ts.ranks[0].iterations[0]
    assert Counter(a.kind for a in it.actions) == {
        "F": 16, "B": 9, "I": 7, "W": 7, "SEND_F": 8, "RECV_F": 8, "SEND_B": 8, "RECV_B": 8,
        "UNSHARD": 2, "RESHARD": 2, "REDUCE_GRAD": 2}
    pairs = [a for a in it.compute if a.pair is not None]
    assert [str(a.action()) for a in pairs] == [
        "0F7@0", "7B3@0", "7F4@1", "0B0@1", "7F5@2", "0B1@2", "7F6@3", "0B2@3", "7F7@4", "0B3@4"]
    assert pairs[0].label == "PP:(0F7;7B3)OVERLAP_F_B"
    for f, b in zip(pairs[::2], pairs[1::2]):
        assert (f.start_ns, f.end_ns, f.busy_ns) == (b.start_ns, b.end_ns, b.busy_ns)
        cf, cb = UNIFORM.stage_costs(8)[f.stage], UNIFORM.stage_costs(8)[b.stage]
        assert f.busy_ns >= cf.fwd_ns + cb.ig_ns + cb.wg_ns   # run one after the other
    assert ts.samples(7, "B", paired=True) and ts.samples(7, "B")
    assert len(ts.samples(7, "B", paired=None)) == len(ts.samples(7, "B", paired=True)) \
        + len(ts.samples(7, "B"))


def test_1f1b_needs_its_label_pattern():
    from simulator.calibration import TraceError

    with pytest.raises(TraceError, match="found none .Schedule1F1B records none"):
        read_traces(trace_files([TRACES / "Schedule1F1B"]))
    ts = traces("Schedule1F1B")
    assert ts.ranks[2].iterations[0].order()[:4] == ["2F0", "2F1", "2B0", "2F2"]
    assert ts.ranks[2].iterations[0].compute[0].label == "fidelity:2F0"


def test_iteration_times_agree_with_the_measured_steps():
    """The trace clock is one for all ranks: ITER spans give the step times the harness timed
    (to within the few operations between the harness's clock reads and the span)."""
    for cls in CLASSES:
        got = [t / MS for t in traces(cls).iteration_times_ns()]
        want = MANIFEST["classes"][cls]["iteration_ms"]
        assert got == pytest.approx(want, abs=0.5), cls


def test_read_schedule_replays_like_the_registered_one(tmp_path):
    wl = tmp_path / "uniform.txt"
    wl.write_text(workload_text(UNIFORM))
    for cls in ("ScheduleDualPipeV", "ScheduleZBVZeroBubble"):
        sched = traces(cls).to_schedule()
        spec = CLASSES[cls]
        assert simulate(str(wl), schedule=sched).makespan_ns == \
            simulate(str(wl), schedule=spec.pipesim, vpp=spec.vpp).makespan_ns


def test_rank_from_distributed_info_not_file_order():
    files = trace_files([TRACES / "ScheduleZBVZeroBubble"])
    ts = read_traces(list(reversed(files)))
    assert [Path(r.path).name for r in ts.ranks] == [f"rank{r}.json.gz" for r in range(4)]
    assert ts.orders(0) == traces("ScheduleZBVZeroBubble").orders(0)


def test_rank_timelines():
    ts = traces("ScheduleGPipe")
    lines = ts.timelines(0)
    it_ms = ts.iteration_times_ns()[0]
    assert [t["rank"] for t in lines] == [0, 1, 2, 3]
    for t in lines:
        # GPipe at uniform costs: 8 x (4 F + 8 B) layer times on ranks 1-3, rank 0's B is 7
        nominal = 8 * (4 + (7 if t["rank"] == 0 else 8)) * L
        assert nominal <= t["busy_ns"] < 1.5 * nominal
        assert t["idle_ns"] == t["end_ns"] - t["busy_ns"] > 0
        assert t["end_ns"] <= it_ms
    # the pipeline drains back to rank 0: it ends last
    assert max(lines, key=lambda t: t["end_ns"])["rank"] == 0
    dv = traces("ScheduleDualPipeV").ranks[0].iterations[0]
    pairs = [a for a in dv.compute if a.pair is not None]
    assert dv.busy_ns() == sum(a.busy_ns for a in dv.compute) - sum(a.busy_ns for a in pairs[1::2])


def test_traces_must_fit_the_workload():
    from simulator.calibration import TraceError

    ts = traces("ScheduleInterleaved1F1B")
    ts.require(pp=4, vpp=2, microbatches=8)
    with pytest.raises(TraceError) as e:
        ts.require(pp=4, vpp=1, microbatches=8, against="w.txt")
    assert str(e.value) == (f"{TRACES / 'ScheduleInterleaved1F1B'}/: the traces show vpp 2 "
                            "(P=4, v=2, M=8); expected vpp 1 as in w.txt")


def _x(name, ts, dur, tid=1, cat="cpu_op"):
    return {"ph": "X", "cat": cat, "name": name, "ts": ts, "dur": dur, "pid": 1, "tid": tid}


def test_hand_made_trace_exact_times(tmp_path):
    """Busy = union of the operator events nested on the span's thread, communication ops out."""
    ua = "user_annotation"
    rank0 = [_x("ITER0", 0, 100, cat=ua),
             _x("PP:0F0", 10, 20, cat=ua), _x("aten::a", 12, 5), _x("aten::b", 14, 6),
             _x("c10d::send", 25, 3), _x("aten::c", 15, 10, tid=2),
             _x("PP:0SEND_F0", 31, 2, cat=ua), _x("c10d::send", 31.5, 1),
             _x("PP:0RECV_B0", 40, 1, cat=ua),
             _x("PP:0B0", 45, 30, cat=ua), _x("autograd::engine::evaluate_function: X", 60, 10),
             _x("PP:0REDUCE_GRAD", 76, 0.5, cat=ua)]
    rank1 = [_x("ITER0", 1, 99, cat=ua), _x("PP:1RECV_F0", 2, 1, cat=ua),
             _x("PP:1F0", 5, 35, cat=ua), _x("aten::mm", 33.0004, 6.0001),
             _x("PP:1B0", 41, 5, cat=ua), _x("aten::mm", 41, 4),
             _x("PP:1SEND_B0", 46, 1, cat=ua)]
    paths = []
    for r, evs in enumerate((rank0, rank1)):
        p = tmp_path / f"r{r}.json"
        p.write_text(json.dumps({"distributedInfo": {"rank": r, "world_size": 2},
                                 "traceEvents": evs}))
        paths.append(p)
    ts = read_traces(paths)
    assert (ts.pp, ts.vpp, ts.microbatches, ts.placement) == (2, 1, 1, (0, 1))
    acts = ts.ranks[0].iterations[0].actions
    assert [(a.stage, a.kind, a.microbatch, a.start_ns, a.end_ns, a.busy_ns) for a in acts] == [
        (0, "F", 0, 10_000, 30_000, 8_000), (0, "SEND_F", 0, 31_000, 33_000, 0),
        (0, "RECV_B", 0, 40_000, 41_000, 0), (0, "B", 0, 45_000, 75_000, 10_000),
        (0, "REDUCE_GRAD", None, 76_000, 76_500, 0)]
    assert acts[3].wait_ns == 20_000
    f1 = ts.ranks[1].iterations[0].compute[0]
    assert (f1.busy_ns, f1.span_ns) == (6_000, 35_000)
    assert ts.orders() == [["0F0", "0B0"], ["1F0", "1B0"]]
    assert ts.iteration_times_ns() == [100_000]
    assert ts.timelines(0) == [
        {"rank": 0, "busy_ns": 18_000, "idle_ns": 57_000, "end_ns": 75_000},
        {"rank": 1, "busy_ns": 10_000, "idle_ns": 36_000, "end_ns": 46_000}]
    assert ts.median_busy_ns() == {(0, "B"): 10_000.0, (0, "F"): 8_000.0,
                                   (1, "B"): 4_000.0, (1, "F"): 6_000.0}


@pytest.mark.parametrize("cls", [c for c, spec in CLASSES.items() if spec.multi])
def test_executed_sends_and_receives_equal_pipesims_lowering(cls):
    """The multi-stage runtime labels its sends and receives: with them, every rank's list in
    every recorded iteration is pipesim's early-receive lowering (torch's bookkeeping left
    out), so a receive is posted where pipesim posts it."""
    from simulator.schedules.comm_pass import add_communication

    spec = CLASSES[cls]
    ts = traces(cls)
    lowered = add_communication(registry.generate(spec.pipesim, 4, 8, spec.vpp),
                                early_receives=True).step_strings()
    for rt in ts.ranks:
        for it in rt.iterations:
            assert it.steps() == lowered[rt.rank]
