"""The engine tests' case counting (cases.py): a test whose every drawn shape is refused
fails instead of passing on none."""

from __future__ import annotations

import pytest

from .cases import Drawn, cases, vpps_of


def test_cases_fail_when_every_shape_is_refused():
    # dualpipe needs an even P and M >= 2P: none of these
    with pytest.raises(AssertionError, match=r"^0 of 2 drawn shapes accepted, expected at "
                                             r"least 33%"):
        list(cases("dualpipe", ((3, 1), (1, 5))))


def test_cases_pass_with_enough_accepted():
    assert [s.pp for s in cases("dualpipe", ((2, 4), (3, 7), (4, 8)))] == [2, 4]


def test_drawn_counts_refusals():
    drawn = Drawn()
    assert drawn.generate("zb-h2", 2, 4, 2) is None      # zb-h2 runs one chunk per rank
    assert drawn.generate("zb-h2", 2, 4, 1).name == "zb-h2"
    assert (drawn.drawn, drawn.accepted) == (2, 1)
    drawn.check(0.5)
    with pytest.raises(AssertionError, match=r"^1 of 2 drawn shapes accepted, expected at "
                                             r"least 60%"):
        drawn.check(0.6)


def test_the_vpps_drawn_are_the_specs():
    assert vpps_of("interleaved-1f1b") == (1, 2, 3)
    assert vpps_of("zb-v") == (2,)
    assert vpps_of("1f1b") == (1,)
