"""The summary reads the engine's time columns in place; it must give exactly what reading the
records one by one gives, on every schedule and point-to-point mode."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest

from simulator import simulate
from simulator.metrics.summary import summarize
from simulator.schedules import names

WL = Path(__file__).resolve().parents[1] / "data" / "tiny_model_4l.txt"


@pytest.mark.parametrize("schedule", names())
@pytest.mark.parametrize("p2p", ["async", "torch"])
def test_columns_and_records_give_the_same_summary(schedule, p2p):
    r = simulate(WL, schedule, pp=2, microbatches=4, iterations=2, p2p=p2p)
    slow = copy.copy(r)
    slow.records = copy.copy(r.records)
    slow.records.actions = list(r.records.actions)       # plain records: the reading path
    slow.records.transfers = list(r.records.transfers)
    assert (summarize(slow.records, slow.inputs).to_dict()
            == summarize(r.records, r.inputs).to_dict())
