"""The early-receive lowering equals what torch's multi-stage runtime executes: its
``pipeline_order_with_comms`` (golden/lowered/, made by golden/make_goldens.py), in which
``_add_send_recv`` walks the ranks in lock-step over lists that also hold the FSDP and
gradient-reduction bookkeeping (UNSHARD / RESHARD / REDUCE_GRAD, dropped from the files):
every bookkeeping step takes a round, which moves where the receives land."""

from __future__ import annotations

import pytest

from simulator.schedules import generate
from simulator.schedules.comm_pass import add_communication

from .goldens import MULTI_STAGE, TORCH_CLASS, case_id, load_lowered


def _params():
    return [pytest.param(name, case, id=f"{name}-{case_id(case)}")
            for name in MULTI_STAGE for case in load_lowered(TORCH_CLASS[name])["cases"]]


@pytest.mark.parametrize("name,case", _params())
def test_early_lowering_equals_torchs_pipeline_order_with_comms(name, case):
    sched = generate(name, case["pp"], case["microbatches"], case["vpp"])
    assert add_communication(sched, early_receives=True).step_strings() == case["ranks"]


@pytest.mark.parametrize("name", MULTI_STAGE)
def test_lowered_goldens_record_torch_2_13(name):
    doc = load_lowered(TORCH_CLASS[name])
    assert doc["torch_version"].startswith("2.13") and doc["cases"]
    assert doc["command"] == "python3 tests/schedules/golden/make_goldens.py"
