"""System YAML: the bundled default equals the built-in, and bad keys are named."""

from __future__ import annotations

from pathlib import Path

import pytest

from simulator.errors import ConfigError
from simulator.system import LinkConfig, SystemConfig, load_system, ring_time_ns
from simulator.workload import CommType

ROOT = Path(__file__).resolve().parents[2]


def test_bundled_default_yaml_equals_builtin_default():
    assert load_system(ROOT / "configs" / "system" / "default.yaml") == SystemConfig()
    assert load_system(None) == SystemConfig()


def test_unknown_key_is_named_with_file(tmp_path):
    p = tmp_path / "sys.yaml"
    p.write_text("links:\n  bandwith_gbps: 100\n")
    with pytest.raises(ConfigError) as err:
        load_system(p)
    assert str(err.value) == (f"{p}: unknown key 'links.bandwith_gbps'; expected one of: "
                              "bandwidth_gbps, latency_ns")


@pytest.mark.parametrize("text,msg", [
    ("links:\n  bandwidth_gbps: fast\n", "links.bandwidth_gbps: expected a number, found 'fast'"),
    ("links:\n  bandwidth_gbps: 0\n", "links.bandwidth_gbps: expected a positive number, found 0"),
    ("gpu: 3\n", "gpu: expected a mapping, found int"),
    ("collectives:\n  tp:\n    latency_ns: -1\n",
     "collectives.tp.latency_ns: expected a positive number, found -1"),
])
def test_bad_values_are_named(tmp_path, text, msg):
    p = tmp_path / "s.yaml"
    p.write_text(text)
    with pytest.raises(ConfigError) as err:
        load_system(p)
    assert str(err.value) == f"{p}: {msg}"


def test_invalid_yaml_names_line_and_column(tmp_path):
    p = tmp_path / "s.yaml"
    p.write_text("links:\n  bandwidth_gbps: [1,\n")
    with pytest.raises(ConfigError) as err:
        load_system(p)
    assert str(err.value).startswith(f"{p}:3:1: invalid YAML")


def test_missing_file_is_a_config_error(tmp_path):
    with pytest.raises(ConfigError, match="--system: cannot read"):
        load_system(tmp_path / "nope.yaml")


def test_dotted_overrides():
    s = SystemConfig().with_overrides({"links.bandwidth_gbps": 100, "collectives.tp.latency_ns": 5})
    assert s.links.bandwidth_gbps == 100.0 and s.collectives.tp.latency_ns == 5.0
    with pytest.raises(ConfigError, match="unknown system key 'links.speed'"):
        SystemConfig().with_overrides({"links.speed": 1})


def test_each_system_has_its_own_dicts_and_to_dict_copies_them():
    # the NamedTuples' dict defaults are made afresh per instance, as default_factory made them
    a, b = SystemConfig(), SystemConfig()
    a.busbw_overrides["tp.allreduce"] = 1.0
    a.memory.actions["*"] = {}
    a.runtime.action_overhead_ns["F"] = 5.0
    a.runtime.runtimes["torch-single"] = {}
    assert b == SystemConfig() == load_system(None) and a != b
    data = b.to_dict()
    data["runtime"]["action_overhead_ns"]["F"] = 7.0
    data["links"]["latency_ns"] = 1.0
    assert b.runtime.action_overhead_ns["F"] == 0.0 and b == SystemConfig()
    assert b.with_overrides({"runtime.exchange_ns": 3}).to_dict() == {
        **SystemConfig().to_dict(), "runtime": {**SystemConfig().to_dict()["runtime"],
                                                "exchange_ns": 3.0}}


def test_ring_formulas():
    link = LinkConfig(bandwidth_gbps=8.0, latency_ns=10.0)  # 1 byte per ns
    assert ring_time_ns(CommType.ALLREDUCE, 800, 4, link) == 2 * 3 / 4 * 800 + 2 * 3 * 10
    assert ring_time_ns(CommType.ALLGATHER, 800, 4, link) == 3 / 4 * 800 + 3 * 10
    assert ring_time_ns(CommType.REDUCESCATTER, 800, 4, link) == 3 / 4 * 800 + 3 * 10
    assert ring_time_ns(CommType.ALLTOALL, 800, 4, link) == 3 / 4 * 800 + 3 * 10
    assert ring_time_ns(CommType.ALLREDUCE, 800, 1, link) == 0.0
    assert ring_time_ns(CommType.NONE, 800, 4, link) == 0.0
    assert link.transfer_ns(0) == 0.0 and link.transfer_ns(100) == 110.0
