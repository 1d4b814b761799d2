"""The live fidelity harness: real torch.distributed.pipelining runs (4 gloo processes on CPU).

Deselected by default (marker ``live``); run them with ``python -m pytest -m live`` after
``pip install -e ".[validate]"``. About 1.5 minutes on a 2-core machine.
"""

from __future__ import annotations

import json

import pytest

from benchmarks.fidelity.cases import CLASSES
from benchmarks.fidelity.harness import main
from simulator.workload.parser import load_workload

pytestmark = pytest.mark.live


def test_harness_two_classes(tmp_path):
    rc = main(["--out", str(tmp_path), "--classes", "ScheduleGPipe,ScheduleDualPipeV",
               "--cases", "uniform,heavy-last", "--iterations", "2", "--warmup", "1", "--quiet"])
    assert rc == 0
    doc = json.loads((tmp_path / "results.json").read_text())
    assert sorted(doc["results"]) == ["ScheduleDualPipeV/heavy-last", "ScheduleDualPipeV/uniform",
                                      "ScheduleGPipe/heavy-last", "ScheduleGPipe/uniform"]
    for key, r in doc["results"].items():
        assert len(r["iteration_ms"]) == 2
        assert r["min_ms"] <= r["median_ms"] <= r["max_ms"]
        assert r["order_equals_pipesim"] and r["order_same_every_iteration"], key
        assert len(list((tmp_path / r["trace_dir"]).glob("rank*.json"))) == 4
        # nothing runs faster than its known compute: pipesim's ideal is a lower bound
        assert r["median_ms"] > r["pipesim_ms"]
    wl = load_workload(tmp_path / "workloads" / "uniform.txt")
    assert (wl.header.pp, wl.header.ga, len(wl.layers)) == (4, 8, 16)
    assert "| ScheduleGPipe | gpipe | uniform |" in (tmp_path / "table.md").read_text()


def test_every_class_runs_in_pipesim_order(tmp_path):
    rc = main(["--out", str(tmp_path), "--cases", "heavy-first", "--iterations", "1",
               "--warmup", "1", "--quiet"])
    assert rc == 0
    doc = json.loads((tmp_path / "results.json").read_text())
    assert [r["class"] for r in doc["results"].values()] == list(CLASSES)
    assert all(r["order_equals_pipesim"] for r in doc["results"].values())
