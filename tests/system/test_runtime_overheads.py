"""The runtime overheads a run prices are named in its report: a warning where the system says
they are estimates (the GPU presets), a note otherwise; each action pays its overhead once."""

from __future__ import annotations

from pathlib import Path

import pytest

from simulator.api import simulate
from simulator.cli.main import main
from simulator.errors import ConfigError
from simulator.system.config import system_from_dict, load_system

REPO = Path(__file__).resolve().parents[2]

# one stage, two rows of 1 ms forward, 2 ms input grad, 0 ms weight grad, no communication
FILE = """\
HYBRID_TRANSFORMER_FWD_IN_BCKWD model_parallel_NPU_group: 1 ep: 1 pp: 1 vpp: 1 ga: 2 all_gpus: 1 checkpoints: 0 checkpoint_initiates: 0 pp_comm: 0 layout: model
2
layer0 -1 1000000 NONE 0 2000000 NONE 0 0 NONE 0 100
layer1 -1 1000000 NONE 0 2000000 NONE 0 0 NONE 0 100
"""


def _system(**runtime) -> object:
    # the memory sized, so that the overheads' warning is the run's only one
    memory = {"params_per_layer": 1000, "activation_bytes_per_layer": 1000, "bytes_per_param": 16}
    return system_from_dict({"name": "test", "memory": memory, "runtime": runtime}, "test")


@pytest.fixture
def wl(tmp_path: Path) -> Path:
    path = tmp_path / "two.txt"
    path.write_text(FILE)
    return path


def test_each_action_pays_its_overhead_once(wl):
    base = simulate(wl, "1f1b", system=_system(), pp=1, microbatches=2)
    slow = simulate(wl, "1f1b", system=_system(action_overhead_ns={"F": 50_000, "B": 70_000}),
                    pp=1, microbatches=2)
    # F0 B0 F1 B1 on one rank: 2 x (2 ms + 4 ms) = 12 ms, then 2 x 50 us + 2 x 70 us
    assert base.makespan_ns == 12_000_000
    assert slow.makespan_ns == 12_000_000 + 2 * 50_000 + 2 * 70_000


def test_guessed_overheads_are_a_warning_and_strict_refuses_them(wl):
    sysconf = _system(action_overhead_ns={"F": 50_000, "B": 50_000, "I": 50_000, "W": 50_000},
                      overheads_guessed=True)
    res = simulate(wl, "1f1b", system=sysconf, pp=1, microbatches=2)
    assert [w.code for w in res.warnings] == ["runtime_overheads_guessed"]
    assert [w.message for w in res.warnings] == [
        "runtime overheads of the system (test): 50 us before each action (host time: the "
        "launch of its first kernel); point-to-point latency 2 us on a link: estimates, not "
        "measurements"]
    with pytest.raises(ConfigError, match=r"^--strict: runtime overheads of the system"):
        simulate(wl, "1f1b", system=sysconf, pp=1, microbatches=2, strict=True)


def test_measured_overheads_are_a_note_and_none_say_nothing(wl):
    res = simulate(wl, "1f1b", system=_system(action_overhead_ns={"F": 1000, "B": 3000}),
                   pp=1, microbatches=2)
    assert not [w for w in res.warnings if w.code == "runtime_overheads_guessed"]
    assert ("runtime overheads of the system (test): 1 us before each F, 3 us before each B, "
            "0 us before each I, 0 us before each W (host time: the launch of its first "
            "kernel); point-to-point latency 2 us on a link") in res.notes
    plain = simulate(wl, "1f1b", system=_system(), pp=1, microbatches=2)
    assert not [n for n in plain.notes if n.startswith("runtime overheads")]


@pytest.mark.parametrize("gpu", ["a100", "h100", "h200"])
def test_the_gpu_presets_price_host_time_per_action_and_say_it_is_estimated(gpu, wl, capsys):
    sysconf = load_system(REPO / "configs" / "system" / f"{gpu}.yaml")
    assert sysconf.runtime.action_overhead_ns == {"F": 50_000.0, "B": 50_000.0, "I": 50_000.0,
                                                  "W": 50_000.0}
    assert sysconf.runtime.overheads_guessed is True
    assert main(["run", str(wl), "--system", str(REPO / "configs" / "system" / f"{gpu}.yaml"),
                 "--pp", "1", "-m", "2"]) == 0
    out = capsys.readouterr().out
    assert (f"  ! runtime overheads of the system ({gpu}): 50 us before each action (host time: "
            "the launch of its first kernel); point-to-point latency 1 us within a node, 5 us "
            "between nodes: estimates, not measurements") in out


def test_overheads_guessed_must_be_a_boolean():
    with pytest.raises(ConfigError) as err:
        _system(overheads_guessed="yes")
    assert str(err.value) == "test: runtime.overheads_guessed: expected true or false, found 'yes'"


def test_a_calibration_over_a_guessed_preset_makes_them_measured(wl):
    sysconf = _system(action_overhead_ns={"F": 50_000}, overheads_guessed=True,
                      calibrated_on={"schedule": "1f1b", "p2p": "torch-single"})
    res = simulate(wl, "1f1b", system=sysconf, pp=1, microbatches=2)
    assert "runtime_overheads_guessed" not in [w.code for w in res.warnings]
    assert any(n.startswith("runtime overheads of the system (test): 50 us before each F")
               for n in res.notes)
