"""Which plots a table gets, and how a 2-D plot slices a many-dimensional grid."""

from __future__ import annotations

import pandas as pd

from simulator.sweep import run_sweep, spec_from_dict
from simulator.sweep.plots import _dims, _moves_with, _slice, write_plots

from .helpers import workload_text, write


def table(tmp_path, data):
    write(tmp_path / "w.txt", workload_text(8, pp_comm=1 << 20))
    return run_sweep(spec_from_dict({"workload": "w.txt", **data}, "s.yaml", tmp_path),
                     tmp_path / "out", jobs=1).table


def test_only_the_plots_the_table_varies(tmp_path):
    frame = table(tmp_path, {"microbatches": 8, "grid": {"pp": [1, 2, 4]}})
    assert [p.name for p in write_plots(frame, tmp_path)] == ["makespan_vs_pp.png"]


def test_zipped_parameters_move_with_x_and_are_not_sliced(tmp_path):
    frame = table(tmp_path, {"zip": {"pp": [2, 4, 8], "microbatches": [8, 16, 32]}})
    ok = frame[frame["status"] == "ok"]
    assert _moves_with(ok, "run_pp", "run_microbatches")
    rows, held = _slice(ok, _dims(frame), {"run_pp", "run_schedule", "run_vpp"}, ["run_pp"])
    assert held == ["microbatches moves with pp"] and len(rows) == 3
    assert [p.name for p in write_plots(frame, tmp_path)] == ["bubble_vs_microbatches.png",
                                                             "makespan_vs_pp.png"]


def test_other_varying_parameters_are_held_at_their_most_common_value():
    frame = pd.DataFrame({
        "point": [0, 1, 2, 3, 4], "point_id": list("abcde"),
        "pp": [2, 4, 2, 4, 2], "system.links.bandwidth_gbps": [10.0, 10.0, 50.0, 50.0, 50.0],
        "status": ["ok"] * 5, "run_schedule": ["1f1b"] * 5, "run_pp": [2, 4, 2, 4, 2],
        "run_vpp": [1] * 5, "run_microbatches": [8] * 5, "makespan_ns": [1.0] * 5,
    })
    rows, held = _slice(frame, _dims(frame), {"run_pp", "run_schedule", "run_vpp"}, ["run_pp"])
    assert held == ["system.links.bandwidth_gbps = 50"]
    assert list(rows["point"]) == [2, 3, 4]
