"""The cross-validation of the memory calibration from the committed harness runs
(benchmarks/results/memory-2026-12-01-crossval: the 7 torch classes, 4 MLP shapes and the
grouped-query transformer, M = 8 and 12, return_outputs True and False): each class calibrated
in turn predicts every class as pinned, within 5 % on every rank, and the classes ranked as
measured. No torch needed."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks.memory.crossval import CLASSES, cells, load

REPO = Path(__file__).resolve().parents[2]
RUN = REPO / "benchmarks" / "results" / "memory-2026-12-01-crossval"


@pytest.fixture(scope="module")
def runs() -> dict:
    return load([str(RUN / "return-outputs-true"), str(RUN / "return-outputs-false")])


@pytest.mark.parametrize("return_outputs", [True, False])
def test_every_pair_of_classes_within_5_percent_as_pinned(runs, return_outputs):
    pinned = json.loads((RUN / "crossval.json").read_text())[str(return_outputs).lower()]
    worst, ranking, rows = cells(runs[return_outputs], return_outputs)
    assert len(worst) == 49 and {a for a, _ in worst} == set(CLASSES)
    assert {f"{a}|{b}": v for (a, b), v in worst.items()} == pinned["cells"]
    assert max(worst.values()) <= 5.0
    # 5 shapes x 2 M x 7 classes predicted from each of the 7
    assert len(rows) == 7 * 5 * 2 * 7
    # the calibration reproduces its own traces: each class at its own M = 8, every rank of
    # every shape within 1 % (the last stage's loss keeps out - target until its backward:
    # outside the forward's span in GPipe and 1F1B, inside it on the multi-stage runtime)
    own = [r for r in rows if r["schedule"] == r["calibrated_on"] and r["microbatches"] == 8]
    assert len(own) == 7 * 5
    assert max(abs(e) for r in own for e in r["error_pct"]) <= 1.0


def test_the_classes_rank_as_measured(runs):
    _, ranking, _ = cells(runs[False], False)
    assert all(good == total for good, total in ranking.values())
    _, ranking, _ = cells(runs[True], True)
    # calibrated on each of the 4 classes without a split backward, one pair of 194 measured
    # more than 1 % apart comes out the other way (pinned: crossval.json)
    assert sum(t - g for g, t in ranking.values()) == 4


def test_before_the_retention_and_operator_rules_the_zero_bubble_classes_came_out_low(runs):
    worst, _, _ = cells(runs[False], False, before=True)
    assert worst[("ScheduleGPipe", "ScheduleZBVZeroBubble")] > 15.0
    assert sum(v <= 5.0 for v in worst.values()) == 34
