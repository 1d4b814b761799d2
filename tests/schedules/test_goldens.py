"""Generated schedules equal PyTorch 2.13's runtime orders, action for action (golden/)."""

from __future__ import annotations

import pytest

from simulator.errors import ConfigError
from simulator.schedules import Action, Schedule, generate, loop_placement, v_placement
from simulator.schedules.validate import validate

from .goldens import TORCH_CLASS, case_id, cases, load

OURS = ("gpipe", "1f1b", "interleaved-1f1b", "looped-bfs", "zb-h1")


def _params(names):
    return [pytest.param(name, case, id=f"{name}-{case_id(case)}")
            for name in names for case in cases(TORCH_CLASS[name])]


@pytest.mark.parametrize("name,case", _params(OURS))
def test_generated_order_equals_torch(name, case):
    sched = generate(name, case["pp"], case["microbatches"], case["vpp"])
    assert sched.as_strings() == case["ranks"]


@pytest.mark.parametrize("cls_name", sorted(set(TORCH_CLASS.values())))
def test_golden_files_record_torch_2_13_and_their_command(cls_name):
    doc = load(cls_name)
    assert doc["torch_version"].startswith("2.13")
    assert doc["command"] == "python3 tests/schedules/golden/make_goldens.py"
    assert doc["cases"], "no cases"


@pytest.mark.parametrize("cls_name", sorted(set(TORCH_CLASS.values())))
def test_every_torch_schedule_passes_the_validator(cls_name):
    doc = load(cls_name)
    for case in doc["cases"]:
        pp, vpp = case["pp"], case["vpp"]
        placement = v_placement(pp) if doc["placement"] == "v" else loop_placement(pp, vpp)
        ranks = tuple(tuple(Action.parse(a) for a in acts) for acts in case["ranks"])
        validate(Schedule("torch", pp, vpp, case["microbatches"], placement, ranks))


def test_1f1b_pipeline_order_attribute_is_wrong_in_torch_so_goldens_use_the_runtime():
    flags = {case_id(c): c["pipeline_order_matches_runtime"] for c in cases("Schedule1F1B")}
    assert not any(flags.values())
    for cls_name in ("ScheduleGPipe", "ScheduleInterleaved1F1B", "ScheduleInterleavedZeroBubble"):
        assert all(c["pipeline_order_matches_runtime"] for c in cases(cls_name))


@pytest.mark.parametrize("name", ["interleaved-1f1b", "zb-h1"])
def test_refuses_with_vpp_above_1_exactly_where_torch_does(name):
    refused = [r for r in load(TORCH_CLASS[name])["refused"] if r["vpp"] > 1]
    assert {(r["pp"], r["microbatches"]) for r in refused} == {(2, 5), (3, 16)}
    for r in refused:
        with pytest.raises(ConfigError) as err:
            generate(name, r["pp"], r["microbatches"], r["vpp"])
        assert "--microbatches" in str(err.value)


def test_interleaved_order_for_p2_m4_v2_reads_like_torch():
    sched = generate("interleaved-1f1b", 2, 4, 2)
    assert [" ".join(r) for r in sched.as_strings()] == [
        "0F0 0F1 2F0 2F1 0F2 2B0 0F3 2B1 2F2 0B0 2F3 0B1 2B2 2B3 0B2 0B3",
        "1F0 1F1 3F0 3B0 3F1 3B1 1F2 1B0 1F3 1B1 3F2 3B2 3F3 3B3 1B2 1B3",
    ]
