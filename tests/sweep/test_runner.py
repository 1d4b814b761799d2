"""Running sweeps: the table equals single simulate() runs, failures are rows, resume is exact."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from simulator import simulate
from simulator.errors import ConfigError, PipesimError
from simulator.sweep import read_table, run_sweep, spec_from_dict
from simulator.sweep import worker as worker_mod
from simulator.sweep.runner import table_columns
from simulator.system.config import SystemConfig
from simulator.workload import load_workload

from .helpers import workload_text, write

METRICS = ("makespan_ns", "bubble_ratio", "theoretical_bubble_ratio", "theoretical_formula",
           "utilization", "forward_ns", "backward_ns", "forward_bubble_ns", "backward_bubble_ns",
           "peak_inflight_microbatches", "p2p_bytes", "dp_collective_bytes", "total_comm_bytes",
           "layer_ops")


@pytest.fixture
def base(tmp_path):
    write(tmp_path / "w.txt", workload_text(8, pp_comm=1 << 20))
    write(tmp_path / "free.txt", workload_text(8, pp_comm=0))
    return tmp_path


GRID = {
    "workload": "w.txt",
    "grid": {"schedule": ["gpipe", "1f1b", "dualpipe-v"], "pp": [2, 4],
             "microbatches": [4, 8], "system.links.bandwidth_gbps": [10, 400]},
}


def direct(params: dict, base) -> tuple[str, object]:
    """What one plain simulate() call gives for a point: ("ok", summary) or ("error", message)."""
    system = SystemConfig()
    bw = params.get("system.links.bandwidth_gbps")
    if bw is not None:
        system = system.with_overrides({"links.bandwidth_gbps": bw})
    try:
        result = simulate(load_workload(base / params["workload"]), params.get("schedule"),
                          system, pp=params.get("pp"), microbatches=params.get("microbatches"),
                          vpp=params.get("vpp"), iterations=params.get("iterations", 1))
    except PipesimError as err:
        return "error", str(err)
    return "ok", result.summary


def test_table_equals_single_runs_point_for_point(base):
    outcome = run_sweep(spec_from_dict(GRID, "grid.yaml", base), base / "out", jobs=2,
                        parquet=True)
    table = outcome.table
    assert outcome.points == outcome.ran == len(table) == 24 and outcome.skipped == 0
    assert list(table["point"]) == list(range(24))
    assert list(table.columns) == table_columns(spec_from_dict(GRID, "grid.yaml", base))[0]
    assert list(table.columns[:7]) == ["point", "point_id", "workload", "schedule", "pp",
                                       "microbatches", "system.links.bandwidth_gbps"]
    failed = 0
    for row in table.to_dict("records"):
        params = {k: row[k] for k in ("workload", "schedule", "pp", "microbatches",
                                      "system.links.bandwidth_gbps")}
        status, expected = direct(params, base)
        assert row["status"] == status, params
        if status == "error":
            failed += 1
            assert row["error"] == expected and row["error_type"] == "ConfigError"
            assert pd.isna(row["makespan_ns"]) and pd.isna(row["run_pp"])
            continue
        assert pd.isna(row["error"])
        for key in METRICS:
            assert row[key] == expected[key], (params, key)
        assert (row["run_schedule"], row["run_pp"], row["run_vpp"], row["run_microbatches"]) \
            == (expected["schedule"], expected["pp"], expected["vpp"], expected["microbatches"])
        assert json.loads(row["stages_json"]) == json.loads(json.dumps(expected["stages"]))
        assert json.loads(row["iteration_times_json"]) == expected["iteration_times_ns"]
    # dualpipe-v needs M >= 2 pp: pp 2 with M 4..8 runs, pp 4 with M 4 does not (x2 bandwidths)
    assert failed == outcome.failed == 2
    assert outcome.first_error == (
        "point 20 (schedule=dualpipe-v, pp=4, microbatches=4, system.links.bandwidth_gbps=10.0): "
        "--microbatches: dualpipe-v needs at least as many microbatches as stages (2 x pp = 8), "
        "got 4")
    # the slow link matters: same point, 10 vs 400 Gb/s
    slow, fast = table.iloc[0], table.iloc[1]
    assert slow["makespan_ns"] > fast["makespan_ns"] and slow["p2p_bytes"] == fast["p2p_bytes"]
    # the CSV and the parquet file hold the same table
    assert read_table(base / "out").equals(table)
    assert pd.read_parquet(base / "out" / "results.parquet").equals(table)


def test_known_costs_give_the_closed_form(base):
    spec = spec_from_dict({"workload": "free.txt", "schedule": "1f1b", "pp": 4,
                           "grid": {"microbatches": [4, 8]}}, "s.yaml", base)
    table = run_sweep(spec, base / "out", jobs=1).table
    # 8 layers of F = I = W = 1 us over 4 stages, no comm: (M + P - 1) * (F + B) per stage
    assert list(table["makespan_ns"]) == [7 * 6000.0, 11 * 6000.0]
    assert list(table["bubble_ratio"]) == [3 / 7, 3 / 11]
    assert list(table["theoretical_bubble_ratio"]) == [3 / 7, 3 / 11]


def test_a_bug_in_one_point_is_recorded_with_its_type(base, monkeypatch):
    real = worker_mod.simulate_point

    def flaky(params, base_dir, sha="", strict=False):
        if params["pp"] == 4:
            raise ZeroDivisionError("division by zero")
        return real(params, base_dir, sha, strict)

    monkeypatch.setattr(worker_mod, "simulate_point", flaky)
    spec = spec_from_dict({"workload": "w.txt", "grid": {"pp": [2, 4, 8]}}, "s.yaml", base)
    outcome = run_sweep(spec, base / "out", jobs=1)  # jobs 1 runs in this process
    table = outcome.table
    assert list(table["status"]) == ["ok", "error", "ok"]
    assert table["error_type"][1] == "ZeroDivisionError"
    assert table["error"][1] == "ZeroDivisionError: division by zero"
    assert outcome.failed == 1 and table["makespan_ns"].notna().tolist() == [True, False, True]


def test_each_workload_is_parsed_once_per_process(base):
    spec = spec_from_dict({"workload": "w.txt", "grid": {"pp": [1, 2, 4], "microbatches":
                                                         [1, 2, 3, 4]}}, "s.yaml", base)
    before = worker_mod.parse_count
    outcome = run_sweep(spec, base / "out", jobs=1)
    assert outcome.ran == 12 and worker_mod.parse_count == before + 1


def test_a_broken_workload_is_one_error_before_anything_runs(base):
    write(base / "bad.txt", "HYBRID_TRANSFORMER pp: 2\nx\n")
    spec = spec_from_dict({"workload": "bad.txt", "grid": {"pp": [1, 2]}}, "s.yaml", base)
    with pytest.raises(PipesimError) as info:
        run_sweep(spec, base / "out", jobs=1)
    assert str(info.value).startswith(f"{base / 'bad.txt'}:2:1: layer count: expected")
    assert not (base / "out").exists()  # nothing ran: no table (nor folder) is left behind


def test_existing_table_needs_resume(base):
    spec = spec_from_dict({"workload": "w.txt", "grid": {"pp": [1, 2]}}, "s.yaml", base)
    run_sweep(spec, base / "out", jobs=1)
    with pytest.raises(ConfigError) as info:
        run_sweep(spec, base / "out", jobs=1)
    assert str(info.value) == (f"--out: {base / 'out' / 'results.csv'} exists; pass --resume to "
                               "complete that sweep, or choose another --out")
    other = spec_from_dict({"workload": "w.txt", "grid": {"microbatches": [1, 2]}}, "s.yaml",
                           base)
    with pytest.raises(ConfigError) as info:
        run_sweep(other, base / "out", jobs=1, resume=True)
    assert str(info.value).startswith(f"--resume: {base / 'out' / 'results.csv'} has other "
                                      "columns than this sweep (point, point_id, workload, pp,")
    # resuming a complete sweep runs nothing and keeps the table
    again = run_sweep(spec, base / "out", jobs=1, resume=True)
    assert (again.ran, again.skipped, len(again.table)) == (0, 2, 2)


def test_resume_after_a_cut_last_line(base):
    spec = spec_from_dict(GRID, "grid.yaml", base)
    full = run_sweep(spec, base / "full", jobs=1).table
    # a killed sweep: rows finish out of order, the last one cut in the middle
    csv = (base / "full" / "results.csv").read_text().splitlines(keepends=True)
    header, rows = csv[0], csv[1:]
    kept = [rows[i] for i in (5, 0, 17, 3, 11)]
    cut = rows[9][: len(rows[9]) // 2]
    write(base / "part" / "results.csv", header + "".join(kept) + cut)
    outcome = run_sweep(spec, base / "part", jobs=2, resume=True, parquet=True)
    assert (outcome.skipped, outcome.ran) == (5, 19)
    text = (base / "part" / "results.csv").read_text()
    assert text == (base / "full" / "results.csv").read_text()
    assert outcome.table.equals(full)
    assert pd.read_parquet(base / "part" / "results.parquet").equals(full)


def test_damaged_table_is_refused(base):
    spec = spec_from_dict({"workload": "w.txt", "grid": {"pp": [1, 2]}}, "s.yaml", base)
    run_sweep(spec, base / "out", jobs=1)
    path = base / "out" / "results.csv"
    lines = path.read_text().splitlines(keepends=True)
    path.write_text(lines[0] + "1,2,3\n" + lines[2])
    with pytest.raises(ConfigError) as info:
        run_sweep(spec, base / "out", jobs=1, resume=True)
    n = len(lines[0].split(","))
    assert str(info.value) == (f"--resume: {path}:2: expected {n} cells, found 3; the table was "
                               "edited or damaged")


def test_resume_with_edited_values_keeps_old_rows_last(base):
    first = spec_from_dict({"workload": "w.txt", "grid": {"pp": [1, 2]}}, "s.yaml", base)
    run_sweep(first, base / "out", jobs=1)
    edited = spec_from_dict({"workload": "w.txt", "grid": {"pp": [2, 4]}}, "s.yaml", base)
    outcome = run_sweep(edited, base / "out", jobs=1, resume=True)
    assert (outcome.skipped, outcome.ran) == (1, 1)
    assert list(outcome.table["pp"]) == [2, 4, 1]
    assert list(outcome.table["point"].astype(object).fillna(-1)) == [0, 1, -1]
