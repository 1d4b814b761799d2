"""The CSVs auto writes pass PyTorch's own schedule validator (torch 2.13's
``_validate_schedule``). Deselected by default with the other tests that need torch (the
``validate`` extra): ``python -m pytest -m live tests/schedules/synthesis/test_torch_validator.py``."""

from __future__ import annotations

import csv

import pytest

from simulator.schedules.synthesis import synthesize
from simulator.schedules.csv_io import write_schedule_csv

pytestmark = pytest.mark.live


@pytest.mark.parametrize("pp, m, vpp, cap", [(4, 12, 1, 6), (4, 8, 1, None), (3, 6, 1, 1),
                                             (4, 8, 2, None), (3, 6, 2, 4)])
def test_torch_accepts_the_csv(tmp_path, pp, m, vpp, cap):
    schedules = pytest.importorskip("torch.distributed.pipelining.schedules")
    sched = synthesize(pp, m, vpp, None, cap).schedule
    path = tmp_path / "auto.csv"
    write_schedule_csv(sched, path)
    with open(path) as fh:
        actions = {r: [schedules._Action.from_str(c) for c in row]
                   for r, row in enumerate(csv.reader(fh))}
    stage_to_rank = schedules._validate_schedule(actions, pp, pp * vpp, m)
    assert stage_to_rank == dict(enumerate(sched.placement))
