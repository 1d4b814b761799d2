"""A pipeline must run the model's chunks in order (a wrong stage_chunk is refused)."""

from __future__ import annotations


import pytest

from simulator.errors import ScheduleError
from simulator.schedules import generate
from simulator.schedules.validate import validate


def test_wrong_stage_chunk_is_refused():
    s = generate("dualpipe", 2, 4)
    validate(s)
    bad = s._replace(stage_chunk=(0, 1, 1, 0))
    with pytest.raises(ScheduleError) as err:
        validate(bad)
    assert str(err.value) == ("pipelines[1]: its stages compute chunks [1, 0], expected "
                              "consecutive chunks in model order")
