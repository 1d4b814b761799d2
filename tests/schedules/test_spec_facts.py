"""What a schedule is for the runtimes and the planner is its spec's (registration.py):
torch's class and runtime, Megatron's schedule, the planner's lower bound, the default."""

from __future__ import annotations

import pytest

from simulator.schedules import registration, registry
from simulator.schedules.registration import register


def _facts():
    return {n: (s.torch_class, s.torch_runtime, s.megatron, s.lower_bound, s.default_for)
            for n in registry.names() for s in [registry.get(n)]}


def test_the_library_specs():
    assert _facts() == {
        "dualpipe-v": ("DualPipeV", "torch-multi", None, False, ""),
        "dualpipe": (None, "torch-multi", None, False, ""),
        "gpipe": ("GPipe", "torch-single", None, True, ""),
        "interleaved-1f1b": ("Interleaved1F1B", "torch-multi", "interleaved", True, "vpp>1"),
        "hanayo": (None, "torch-multi", None, True, ""),
        "looped-bfs": ("LoopedBFS", "torch-multi", None, True, ""),
        "1f1b": ("1F1B", "torch-single", "1f1b", True, "vpp=1"),
        "2bw": (None, "torch-multi", None, True, ""),
        "v-half": (None, "torch-multi", "zero-bubble-v", True, ""),
        "v-min": (None, "torch-multi", "zero-bubble-v", True, ""),
        "zb-v": ("ZBVZeroBubble", "torch-multi", None, True, ""),
        "zb-h1": ("InterleavedZeroBubble", "torch-multi", None, True, ""),
        "zb-h2": (None, "torch-multi", None, True, ""),
    }


def test_lookups_by_a_built_schedules_name():
    assert registry.torch_runtime_of("gpipe") == "torch-single"
    assert registry.torch_runtime_of("custom") == "torch-multi"     # a CSV's schedule
    assert registry.torch_class_of("zb-v") == "ZBVZeroBubble"
    assert registry.torch_class_of("custom") is None
    assert registry.torch_class_of("zbv") is None     # an alias names no built schedule
    assert registry.megatron_of("interleaved-1f1b") == "interleaved"
    assert registry.megatron_of("zb-greedy") == "zero-bubble"   # on the zero-bubble fork
    assert registry.spec_of("nonesuch") is None


def test_the_default_schedule_by_chunks():
    assert registry.default_for(1).name == "1f1b"
    assert registry.default_for(2).name == "interleaved-1f1b"
    assert registry.default_for(5).name == "interleaved-1f1b"


@pytest.mark.parametrize("kw, msg", [
    ({"megatron": "zb"}, "schedule 'x-test': megatron='zb', expected one of 1f1b, interleaved, "
                         "zero-bubble, zero-bubble-v"),
    ({"default_for": "always"},
     "schedule 'x-test': default_for='always', expected one of vpp=1, vpp>1"),
])
def test_register_refuses_facts_it_does_not_know(kw, msg):
    with pytest.raises(RuntimeError) as err:
        register("x-test", summary="", **kw)(lambda pp, m, v=1: None)
    assert str(err.value) == msg
    assert "x-test" not in registration.LIBRARY


def test_register_refuses_a_second_default():
    registry.names()
    with pytest.raises(RuntimeError) as err:
        register("x-test", summary="", default_for="vpp=1")(lambda pp, m, v=1: None)
    assert str(err.value) == "schedule 'x-test': a default for vpp=1 is registered already"
    assert "x-test" not in registration.LIBRARY


def test_a_class_of_torchs_single_stage_runtime_sets_it(monkeypatch):
    monkeypatch.setattr(registration, "LIBRARY", dict(registration.LIBRARY))
    register("x-test", summary="", torch_class="1F1B")(lambda pp, m, v=1: None)
    register("y-test", summary="", torch_class="Interleaved1F1B")(lambda pp, m, v=1: None)
    assert registration.LIBRARY["x-test"].torch_runtime == "torch-single"
    assert registration.LIBRARY["y-test"].torch_runtime == "torch-multi"
