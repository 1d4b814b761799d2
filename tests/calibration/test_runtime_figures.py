"""``runtime.runtimes``: transfer and launch figures per torch runtime, as a run sees them
(its own runtime's laid over the rest, the links' latency included) and as a file gets them
wrong (one line, exit 2)."""

from __future__ import annotations

import json

import pytest

from simulator.cli.main import main
from simulator.system.config import SystemConfig, system_from_dict
from simulator.system.per_runtime import for_runtime

WL = """\
HYBRID_TRANSFORMER_FWD_IN_BCKWD model_parallel_NPU_group: 1 ep: 1 pp: 2 vpp: 1 ga: 2 \
all_gpus: 2 checkpoints: 0 checkpoint_initiates: 0 pp_comm: 1000
2
l0 -1 1000000 NONE 0 1000000 NONE 0 1000000 NONE 0 100
l1 -1 1000000 NONE 0 1000000 NONE 0 1000000 NONE 0 100
"""

FIGS = {"runtime": {"p2p": "torch", "exchange_ns": 500000,
                    "action_overhead_ns": {"F": 100000, "B": 100000},
                    "runtimes": {"torch-single": {"exchange_ns": 0, "latency_ns": 30000,
                                                  "step_prologue_ns": 7000,
                                                  "action_overhead_ns": {"F": 1000},
                                                  "calibrated_on": "1f1b"}}}}


def test_a_run_takes_its_own_runtimes_figures():
    system = system_from_dict(FIGS, "t")
    assert for_runtime(system, "torch-multi") is system      # no figures of its own
    plain = SystemConfig()
    assert for_runtime(plain, "torch-single") is plain and for_runtime(system, "async") is system
    single = for_runtime(system, "torch-single")
    assert single.links.latency_ns == 30000 and system.links.latency_ns == 2000
    rt = single.runtime
    assert (rt.exchange_ns, rt.step_prologue_ns, rt.action_overhead_ns) == (
        0.0, 7000.0, {"F": 1000.0, "B": 0.0, "I": 0.0, "W": 0.0})
    assert rt.calibrated_on == {"schedule": "1f1b", "p2p": "torch-single"}


def _run(tmp_path, capsys, calib: str, *args):
    (tmp_path / "w.txt").write_text(WL)
    (tmp_path / "c.yaml").write_text(calib)
    rc = main(["run", str(tmp_path / "w.txt"), "--calibration", str(tmp_path / "c.yaml"),
               *args])
    out = capsys.readouterr()
    return rc, out.out, out.err


def test_1f1b_pays_the_single_stage_figures_and_zb_h1_the_others(tmp_path, capsys):
    """A run on torch's single-stage runtime equals, to the ns, a run whose top-level figures
    and link latency are that runtime's; a run on the multi-stage one keeps the top level."""
    import yaml

    top = {"runtime": {k: v for k, v in FIGS["runtime"].items() if k != "runtimes"}}
    single = {"links": {"latency_ns": 30000},
              "runtime": {"p2p": "torch", "exchange_ns": 0, "step_prologue_ns": 7000,
                          "action_overhead_ns": {"F": 1000}}}

    def makespan(frag, sched):
        rc, out, _ = _run(tmp_path, capsys, yaml.safe_dump(frag), "-s", sched, "--json", "-")
        assert rc == 0, out
        return json.loads(out)["makespan_ns"]

    assert makespan(FIGS, "1f1b") == makespan(single, "1f1b") != makespan(top, "1f1b")
    assert makespan(FIGS, "zb-h1") == makespan(top, "zb-h1") != makespan(single, "zb-h1")


@pytest.mark.parametrize("runtimes, message", [
    ("{torch-dual: {exchange_ns: 1}}", "runtime.runtimes: unknown runtime 'torch-dual'; "
     "expected torch-single or torch-multi"),
    ("{torch-single: {exchange: 1}}", "runtime.runtimes.torch-single: unknown key 'exchange'; "
     "expected one of: action_overhead_ns, step_prologue_ns, step_epilogue_ns, exchange_ns, "
     "latency_ns, calibrated_on, sends_held"),
    ("{torch-multi: {latency_ns: -5}}", "runtime.runtimes.torch-multi.latency_ns: expected a "
     "number >= 0, found -5"),
    ("{torch-multi: {action_overhead_ns: {X: 1}}}", "runtime.runtimes.torch-multi."
     "action_overhead_ns: unknown kind 'X'; expected one of F, B, I, W"),
    ("{torch-multi: {calibrated_on: 3}}", "runtime.runtimes.torch-multi.calibrated_on: "
     "expected a schedule name, found 3"),
    ("[1]", "runtime.runtimes: expected a mapping like {torch-single: {exchange_ns: 700000}}, "
     "found [1]"),
])
def test_bad_figures_one_line_exit_2(tmp_path, capsys, runtimes, message):
    rc, out, err = _run(tmp_path, capsys, f"runtime:\n  runtimes: {runtimes}\n", "-s", "1f1b")
    assert (rc, out) == (2, "")
    assert err == f"pipesim: error: {tmp_path / 'c.yaml'}: {message}\n"
