"""The fidelity harness's model as pipesim sees it (no torch): the workload it writes, the stage
placement it builds, what pipesim predicts from the per-layer costs alone, and its reporting."""

from __future__ import annotations

import pytest

from benchmarks.fidelity import harness
from benchmarks.fidelity.cases import CASES, CLASSES, LayerCost, make_cases, stages_of_rank, \
    workload_text
from simulator import simulate
from simulator.schedules import registry
from simulator.workload.parser import load_workload

# pipesim's iteration time (ms) from the per-layer costs alone (4 ms per layer and pass),
# default system (async p2p, 2 us latency): the "prediction from per-layer costs" column
PREDICTED_MS = {
    "uniform": {"gpipe": 524.012, "1f1b": 524.028, "interleaved-1f1b": 452.028,
                "looped-bfs": 452.012, "zb-h1": 408.030, "zb-v": 408.026, "dualpipe-v": 428.030},
    "heavy-last": {"gpipe": 908.012, "1f1b": 908.012, "interleaved-1f1b": 668.032,
                   "looped-bfs": 668.012, "zb-h1": 616.026, "zb-v": 600.018,
                   "dualpipe-v": 604.018},
    "heavy-first": {"gpipe": 848.012, "1f1b": 752.012, "interleaved-1f1b": 632.020,
                    "looped-bfs": 664.012, "zb-h1": 616.022, "zb-v": 592.002,
                    "dualpipe-v": 592.014},
}


def test_workload_file_is_the_model(tmp_path):
    p = tmp_path / "heavy-last.txt"
    p.write_text(workload_text(CASES["heavy-last"]))
    wl = load_workload(p)
    assert (wl.header.pp, wl.header.ga, wl.header.pp_comm, len(wl.layers)) == (4, 8, 128, 16)
    cases = make_cases(1_000_000)
    assert cases["heavy-last"].stage_costs(4) == [
        LayerCost(4_000_000, 3_000_000, 4_000_000), LayerCost(4_000_000, 4_000_000, 4_000_000),
        LayerCost(4_000_000, 4_000_000, 4_000_000), LayerCost(8_000_000, 8_000_000, 8_000_000)]
    assert cases["heavy-first"].stage_costs(8)[:3] == [
        LayerCost(4_000_000, 2_000_000, 4_000_000), LayerCost(4_000_000, 4_000_000, 4_000_000),
        LayerCost(2_000_000, 2_000_000, 2_000_000)]
    assert CASES["uniform"].layers[:2] == (LayerCost(4_000_000, 0, 4_000_000),
                                           LayerCost(4_000_000, 4_000_000, 4_000_000))


@pytest.mark.parametrize("cls", list(CLASSES.values()), ids=list(CLASSES))
def test_torch_stage_placement_is_pipesims(cls):
    sched = registry.generate(cls.pipesim, 4, 8, cls.vpp)
    for r in range(4):
        assert stages_of_rank(cls, r) == list(sched.stages_of(r))


@pytest.mark.parametrize("case", list(CASES))
def test_prediction_from_layer_costs(tmp_path, case):
    p = tmp_path / f"{case}.txt"
    p.write_text(workload_text(CASES[case]))
    for cls in CLASSES.values():
        ms = simulate(str(p), schedule=cls.pipesim, vpp=cls.vpp).makespan_ns / 1e6
        assert round(ms, 3) == PREDICTED_MS[case][cls.pipesim], cls.pipesim


def test_iteration_time_spans_the_ranks():
    # two steps on two ranks: [start, end] ns each
    iter_ns = [[[0, 100_000_000], [200_000_000, 290_000_000]],
               [[1_000_000, 102_000_000], [199_000_000, 300_000_000]]]
    assert harness.iteration_times_ms(iter_ns) == [102.0, 101.0]
    assert harness.stats([100.0, 110.0, 104.0]) == {
        "median_ms": 104.0, "min_ms": 100.0, "max_ms": 110.0,
        "spread_pct": pytest.approx(100 * 10 / 104)}


def test_table_and_rankings():
    results = {
        "ScheduleGPipe/uniform": {"class": "ScheduleGPipe", "case": "uniform",
                                  "pipesim_schedule": "gpipe", "vpp": 1, "median_ms": 150.0,
                                  "min_ms": 149.0, "max_ms": 152.0, "spread_pct": 2.0,
                                  "pipesim_ms": 131.0, "error_pct": -12.666,
                                  "order_equals_pipesim": True,
                                  "busy_over_known": [1.02, 1.04, 1.01, 1.03]},
        "ScheduleZBVZeroBubble/uniform": {"class": "ScheduleZBVZeroBubble", "case": "uniform",
                                          "pipesim_schedule": "zb-v", "vpp": 2,
                                          "median_ms": 155.0, "min_ms": 150.0, "max_ms": 160.0,
                                          "spread_pct": 6.45, "pipesim_ms": 102.0,
                                          "error_pct": -34.19, "order_equals_pipesim": False,
                                          "lowered_order_equals_pipesim": True},
    }
    md = harness.table(results)
    assert "| ScheduleGPipe | gpipe | uniform | 150.0 | 149.0–152.0 | 2.0 | 131.0 | -12.7 | " \
        "1.025 | yes | – |" in md
    assert "| ScheduleZBVZeroBubble | zb-v --vpp 2 | uniform | 155.0 | 150.0–160.0 | 6.5 | " \
        "102.0 | -34.2 | – | NO | yes |" in md
    assert md.rstrip().endswith("- uniform: measured ScheduleGPipe < ScheduleZBVZeroBubble; "
                                "pipesim ScheduleZBVZeroBubble < ScheduleGPipe")


@pytest.mark.parametrize("args, message", [
    (["--classes", "ScheduleFoo"], "--classes: unknown 'ScheduleFoo'; expected some of: "
                                   + ", ".join(CLASSES)),
    (["--cases", ","], "--cases: expected a comma-separated list of: "
                       "uniform, heavy-last, heavy-first"),
    (["--iterations", "0"], "--iterations: expected a positive number, got 0"),
    (["--warmup", "-1"], "--warmup: expected a number >= 0, got -1"),
    (["--max-load", "0"], "--max-load: expected a load average > 0, got 0"),
    (["--wait-quiet", "-5"], "--wait-quiet: expected seconds >= 0, got -5"),
])
def test_harness_bad_options(tmp_path, capsys, args, message):
    with pytest.raises(SystemExit) as e:
        harness.main(["--out", str(tmp_path)] + args)
    assert e.value.code == 2
    assert capsys.readouterr().err == message + "\n"


def test_load_warnings_flag_a_loaded_machine():
    """A run that starts above --max-load is flagged (the loop-placed classes slow down more
    than the others under load); one that only gets busier by the harness's own processes
    is not."""
    assert harness.load_warnings(0.4, 1.2, 1.0, 0.0) == []
    assert harness.load_warnings(1.3, 1.2, 1.0, 0.0) == [
        "load average 1.30 at the start (above 1): other work on this machine slows the "
        "loop-placed classes more than the others; compare this table only with runs at a "
        "similar load"]
    assert harness.load_warnings(1.3, 1.2, 1.0, 30.2)[0].startswith(
        "load average 1.30 at the start (above 1 after waiting 30 s): ")
    assert harness.load_warnings(0.3, 2.6, 1.0, 0.0) == [
        "load average rose to 2.60 during the run (started at 0.30): other work on this "
        "machine may have slowed some classes more than others"]


def test_wait_for_quiet_returns_at_once_on_a_quiet_machine(monkeypatch):
    monkeypatch.setattr(harness.os, "getloadavg", lambda: (0.1, 0.1, 0.1))
    assert harness.wait_for_quiet(1.0, 60.0) < 1.0


def test_reanalyse_refits_a_finished_run_without_torch(tmp_path):
    """--reanalyse redoes a run's calibrations and tables from its raw times and traces: here a
    run folder made of the recorded traces of two classes (their ITER spans as the raw times);
    the calibrations are what `pipesim calibrate` writes and ZB-V is predicted as test_fit
    pins it."""
    import json
    import shutil
    from pathlib import Path

    from simulator.calibration import read_traces, trace_files
    from simulator.calibration.fit import calibrate

    traces = Path(__file__).resolve().parents[1] / "data" / "traces"
    out = tmp_path / "run"
    (out / "workloads").mkdir(parents=True)
    (out / "workloads" / "uniform.txt").write_text(workload_text(CASES["uniform"]))
    merged = {}
    for cls in ("ScheduleInterleaved1F1B", "ScheduleZBVZeroBubble"):
        shutil.copytree(traces / cls, out / "traces" / "uniform" / cls)
        ts = read_traces(trace_files([traces / cls]))
        merged[f"{cls}/uniform"] = {
            "iter_ns": [[[it.start_ns, it.end_ns] for it in r.iterations] for r in ts.ranks],
            "trace_dir": f"traces/uniform/{cls}"}
    (out / "raw_times.json").write_text(json.dumps(merged))
    (out / "results.json").write_text(json.dumps({
        "P": 4, "M": 8, "iterations": 5, "warmup": 2, "profiled": True, "backend": "gloo",
        "device": "cpu", "layer_ns": 4_000_000, "torch": "2.13.0+cpu", "cpus": 2,
        "loadavg_1min": [0.41, 0.9], "warnings": [], "wall_s": 1.0, "results": {},
        "rankings": {}}))
    assert harness.main(["--out", str(out), "--reanalyse", "--quiet"]) == 0
    doc = json.loads((out / "results.json").read_text())
    assert doc["loadavg_1min"] == [0.41, 0.9]
    assert sorted(doc["results"]) == ["ScheduleInterleaved1F1B/uniform",
                                      "ScheduleZBVZeroBubble/uniform"]
    assert all(r["order_equals_pipesim"] for r in doc["results"].values())
    assert all(r["lowered_order_equals_pipesim"] for r in doc["results"].values())
    cal = (out / "calibrations" / "uniform" / "ScheduleInterleaved1F1B.yaml").read_text()
    assert cal == calibrate([traces / "ScheduleInterleaved1F1B"],
                            out / "workloads" / "uniform.txt").to_yaml()
    pred = json.loads((out / "prediction.json").read_text())[0]
    zbv = [r for r in pred["rows"] if r["class"] == "ScheduleZBVZeroBubble"][0]
    assert round(zbv["calibrated_ms"], 3) == 444.888
    assert (out / "table.md").read_text().startswith(
        "torch 2.13.0+cpu, gloo on cpu, P=4, M=8, layer 4 ms per pass, 5 timed steps after 2 "
        "warm-up; 2 CPUs, load average 0.4 before, 0.9 after\n")


def test_reanalyse_needs_a_finished_run(tmp_path, capsys):
    with pytest.raises(SystemExit) as e:
        harness.main(["--out", str(tmp_path), "--reanalyse"])
    assert e.value.code == 2
    assert capsys.readouterr().err == (
        f"--reanalyse: {tmp_path / 'results.json'}, {tmp_path / 'raw_times.json'}, "
        f"{tmp_path / 'traces'} not found; expected a harness output folder with its traces\n")
