"""The live memory harness: real torch.distributed.pipelining runs (4 gloo processes on CPU).

Deselected by default (marker ``live``); run with ``python -m pytest -m live
tests/calibration/test_memory_harness_live.py`` after ``pip install -e ".[validate]"`` (~1 min).
Allocation is deterministic: the same configuration gives the bytes of the committed traces.
"""

from __future__ import annotations

import json

import pytest

from benchmarks.memory.harness import main

pytestmark = pytest.mark.live


def test_zbv_and_gpipe_peaks(tmp_path):
    rc = main(["--out", str(tmp_path), "--schedules", "ScheduleZBVZeroBubble,ScheduleGPipe",
               "--shapes", "uniform", "--microbatches", "8", "--quiet"])
    assert rc == 0
    doc = json.loads((tmp_path / "results.json").read_text())
    zbv = doc["uniform/m8/ScheduleZBVZeroBubble"]["ranks"]
    # as in tests/data/memtraces (tests/calibration/test_memory_trace.py)
    assert [r["peak_bytes"] for r in zbv] == [2903060, 2919424, 3049472, 3262976]
    assert [r["static_bytes"] for r in zbv] == [924672, 924672, 924672, 859136]
    gpipe = doc["uniform/m8/ScheduleGPipe"]["ranks"]
    # GPipe holds every sent output and input gradient until the step ends: B keeps -S + 2A
    assert gpipe[1]["per_action"]["1B"]["kept"] == -4 * 82176 + 2 * 8192
    assert not (tmp_path / "traces").exists()


def test_one_layers_working_memory_as_counted_from_its_shape():
    from pathlib import Path

    from benchmarks.memory.layer_transients import SHAPES, run
    recorded = json.loads((Path(__file__).resolve().parents[2] / "benchmarks" / "results"
                           / "memory-2026-11-26-transformer" / "layer-transients.json"
                           ).read_text())["rows"]
    # the case's shape, s doubled, h doubled; the case's with flash attention
    rows = run(SHAPES[:2] + SHAPES[4:5] + SHAPES[6:7])
    assert rows == [recorded[0], recorded[1], recorded[4], recorded[6]]
    for r in rows:       # F and B to the byte; I and W upper-bound rules (1.16x, 1.19x at most)
        assert r["measured"]["F"] == r["counted"]["F"]
        assert r["measured"]["B"] == r["counted"]["B"]
        assert r["measured"]["I"] <= 1.16 * r["counted"]["I"]
        assert r["measured"]["W"] <= 1.19 * r["counted"]["W"]
