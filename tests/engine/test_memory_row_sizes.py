"""Rows of different sizes hold what their own size gives (``per_param`` in memory.actions),
worked by hand to the byte, and the fit that learns it from stages of two sizes.

Two stages of one row each: stage 0's row has 100 parameters, stage 1's 300 (their
weight-gradient all-reduce, 2 bytes per parameter). fp32 weights (4 B per parameter) and
gradients (4 B, from the stage's first backward), plain SGD (no optimizer state), no runtime
buffers.
"""

from __future__ import annotations

import pytest

from simulator import simulate
from simulator.calibration.memory_fit import fit_memory
from simulator.errors import ConfigError
from simulator.system.config import system_from_dict
from simulator.workload.parser import parse_workload_text
from simulator.workload.partition import partition

NO_BUFFERS = {"sends_held": "none", "recv_buffers": "none", "kept_outputs": "none",
              "gradients": "kept"}


def workload(params: list[int], pp_comm: int = 1000):
    header = (f"HYBRID_TRANSFORMER model_parallel_NPU_group: 1 ep: 1 pp: {len(params)} vpp: 1 "
              f"ga: 2 all_gpus: {len(params)} pp_comm: {pp_comm}")
    rows = [header, str(len(params))]
    for i, p in enumerate(params):
        rows.append(f"row{i}\t-1\t1000000\tNONE\t0\t1000000\tNONE\t0\t1000000\t"
                    f"ALLREDUCE\t{2 * p}\t0")
    return parse_workload_text("\n".join(rows) + "\n", "<rows>")


def system(actions: dict):
    return system_from_dict({"memory": {"precision": "fp32", "optimizer": "sgd",
                                        "actions": actions}, "runtime": NO_BUFFERS}, "test")


def parts(weights, gradients, activations, transient):
    return {"weights": weights, "gradients": gradients, "optimizer": 0.0,
            "activations": activations, "transient": transient, "runtime_buffers": 0.0}


def test_1f1b_p2_m2_each_stage_holds_what_its_rows_size_gives():
    # stash: 1000 + 2 B per parameter of the stage's rows (stage 0: 1200, stage 1: 1600);
    # a forward's transient 50 + 0.5 B per parameter of its largest row (100, 200);
    # a backward's 2 B per parameter (200, 600)
    actions = {"*": {"F": {"keeps": {"per_layer": 1000, "per_param": 2},
                           "transient": {"fixed": 50, "per_param": 0.5}},
                     "B": {"transient": {"per_param": 2}}}}
    r = simulate(workload([100, 300]), "1f1b", system(actions), pp=2, microbatches=2)
    r0, r1 = r.to_dict()["ranks"]
    # rank 0 (weights 400): 0F0 0F1 0B0 0B1; 0B0 starts on two stashes (2400) + 200
    assert r0["static_memory_bytes"] == 400
    assert (r0["peak_memory_bytes"], r0["peak_memory_action"]) == (3000, "0B0")
    assert r0["peak_memory_breakdown"] == parts(400, 0, 2400, 200)
    # rank 1 (weights 1200): 1F0 1B0 1F1 1B1; gradients (1200) from 1B0's end, 1B1 starts on
    # one stash (1600) + 600
    assert r1["static_memory_bytes"] == 1200
    assert (r1["peak_memory_bytes"], r1["peak_memory_action"]) == (4600, "1B1")
    assert r1["peak_memory_breakdown"] == parts(1200, 1200, 1600, 600)


def test_without_per_param_a_value_is_what_it_was():
    same = {"*": {"F": {"keeps": {"per_layer": 1000, "fixed": 0}}}}
    r = simulate(workload([100, 300]), "1f1b", system(same), pp=2, microbatches=2)
    # both stages stash 1000 whatever their size: rank 0 two stashes + 400 weights; rank 1
    # one stash + 1200 weights + 1200 gradients (from 1B0 on)
    assert [x["peak_memory_bytes"] for x in r.to_dict()["ranks"]] == [2400, 3400]


def test_a_bad_per_param_is_one_line():
    with pytest.raises(ConfigError) as e:
        system({"*": {"F": {"keeps": {"per_param": -1}}}})
    assert str(e.value) == "test: memory.actions.*.F.keeps.per_param: expected bytes >= 0, " \
                           "found -1"


# what a trace saw per (stage, kind) over four one-row stages of 100, 100, 300, 300 parameters
# (kept, transient above the action's start): see the first fit test for how it was made
TWO_SIZES_TRACE = {
    (0, "F"): (1200, 1300), (1, "F"): (1200, 1300), (2, "F"): (1600, 1800),
    (3, "F"): (1700, 1900), (0, "I"): (0, 0), (0, "W"): (-1200, 250),
    (1, "I"): (400, 550), (2, "I"): (600, 950), (3, "I"): (600, 950),
    (1, "W"): (-1500, 200), (2, "W"): (-2100, 600), (3, "W"): (-2100, 600)}


def test_the_fit_learns_bytes_per_parameter_from_stages_of_two_sizes():
    # four stages of one row: 100, 100, 300, 300 parameters; pp_comm 100. What the trace saw,
    # (kept, transient above the action's start), made from: stash 1000 + 2·p (the last stage
    # keeps 100 more, what its loss saves: loss_keeps_bytes), F's transient 50 + 0.5·p, I keeps 300 + 1·p counting its
    # input gradient (100, which its send holds and the runtime's rule counts apart: fixed
    # -100), I's transient 50 + 1·p, W's 2·p, the first stage's whole backward (a W) 50 + 2·p
    rows = partition(workload([100, 100, 300, 300], pp_comm=100), 4).chunks
    per_action = TWO_SIZES_TRACE
    got = fit_memory(per_action, {s: 1 for s in range(4)}, {0}, 100, rows)
    assert got == {"actions": {"*": {
        "F": {"keeps": {"per_layer": 1000, "per_param": 2.0},
              "transient": {"fixed": 50, "per_param": 0.5}},
        "I": {"keeps": {"per_layer": 300, "per_param": 1.0, "fixed": -100},
              "transient": {"fixed": 50, "per_param": 1.0}},
        "W": {"transient": {"fixed": 0, "per_param": 2.0}},
        "B": {"transient": {"fixed": 50, "per_param": 2.0}}}}, "loss_keeps_bytes": 100}
    # rows of one size: the fit as it was (one number per layer)
    uniform = partition(workload([100] * 4, pp_comm=100), 4).chunks
    assert fit_memory(per_action, {s: 1 for s in range(4)}, {0}, 100, uniform) == \
        fit_memory(per_action, {s: 1 for s in range(4)}, {0}, 100)


def test_the_fit_counts_parameters_with_the_headers_gradient_bytes():
    # the same trace over rows whose all-reduce carries 4 B a parameter (the header's
    # grad_bytes_per_param: 4, as pipesim generate writes): half the parameters (50, 150), so
    # twice the bytes per parameter, and a run counting them the same way gets the same bytes
    rows = partition(workload([100, 100, 300, 300], pp_comm=100), 4).chunks
    per_action = TWO_SIZES_TRACE
    got = fit_memory(per_action, {s: 1 for s in range(4)}, {0}, 100, rows,
                     grad_bytes_per_param=4)
    assert got == {"actions": {"*": {
        "F": {"keeps": {"per_layer": 1000, "per_param": 4.0},
              "transient": {"fixed": 50, "per_param": 1.0}},
        "I": {"keeps": {"per_layer": 300, "per_param": 2.0, "fixed": -100},
              "transient": {"fixed": 50, "per_param": 2.0}},
        "W": {"transient": {"fixed": 0, "per_param": 4.0}},
        "B": {"transient": {"fixed": 50, "per_param": 4.0}}}}, "loss_keeps_bytes": 100}
