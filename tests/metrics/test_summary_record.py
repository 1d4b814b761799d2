"""The run summary is a NamedTuple whose JSON form is cached: records become JSON objects, a
copy made with ``_replace`` writes its own numbers, and absent optional parts are left out."""

from __future__ import annotations

from pathlib import Path

from simulator import simulate
from simulator.cli.report import render_run

WL = Path(__file__).resolve().parents[1] / "data" / "tiny_model.txt"


def test_records_are_objects_and_a_replaced_copy_has_its_own_json():
    s = simulate(WL, "1f1b", pp=2, microbatches=4).summary
    d = s.to_dict()
    assert d["links"] == [
        {"src_rank": 0, "dst_rank": 1, "bytes": 16384, "transfers": 4, "busy_ns": 327.68},
        {"src_rank": 1, "dst_rank": 0, "bytes": 16384, "transfers": 4, "busy_ns": 327.68}]
    assert d["ranks"][0]["peak_memory_breakdown"] == {
        "weights": 163840, "gradients": 163840, "optimizer": 983040, "activations": 417792,
        "transient": 0, "runtime_buffers": 0}
    assert [list(w) for w in d["warnings"]] == [["code", "message", "option"]] * 4
    assert [w["code"] for w in d["warnings"]] == ["layout_detected", "activation_assumed",
                                                  "params_assumed", "memory_per_param_default"]
    # 1 iteration, a model-layout file, 1F1B: no spread, no SimAI terms, no 2BW numbers
    assert {"iteration_time_stats_ns", "simai", "minibatches",
            "time_per_minibatch_ns"}.isdisjoint(d)
    faster = s._replace(makespan_ns=1.5)
    assert (faster["makespan_ns"], s["makespan_ns"]) == (1.5, d["makespan_ns"])
    assert type(faster) is type(s) and faster.get("no such key", 7) == 7


def test_the_peak_is_reported_by_part_in_field_order_without_the_empty_parts():
    s = simulate(WL, "1f1b", pp=2, microbatches=4).summary
    lines = render_run(s).splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith("  peak memory"))
    assert lines[at:at + 2] == [
        "  peak memory         1.65 MiB (rank 0, in 0F1 at 14.410 us)",
        "    made of           weights 160.00 KiB, gradients 160.00 KiB, optimizer 960.00 KiB, "
        "activations 408.00 KiB"]
