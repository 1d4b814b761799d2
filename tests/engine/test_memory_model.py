"""The memory model worked by hand, to the byte: static parts by dtype and optimizer, a split
backward's I/W accounting, transients, and the runtime's buffers (sends held to the step's end,
receive buffers, kept outputs, the V turnaround rank's by-reference hand-offs).

Every case: one layer per stage, 10 parameters per layer (bf16 weights 20 B, Adam with an fp32
master copy 120 B, bf16 gradients 20 B from the stage's first weight backward), a stash of 1000 B
per (stage, microbatch), pp_comm 1000 B.
"""

from __future__ import annotations

import pytest

from simulator import OutOfMemoryError, simulate
from simulator.system import SystemConfig
from simulator.system.config import system_from_dict
from simulator.workload import uniform_workload

MEMORY = {"precision": "bf16", "optimizer": "adam", "params_per_layer": 10,
          "activation_bytes_per_layer": 1000}
NO_BUFFERS = {"sends_held": "none", "recv_buffers": "none", "kept_outputs": "none",
              "gradients": "kept"}
TORCH_MULTI = {"sends_held": "step_end", "recv_buffers": "per_microbatch",
               "kept_outputs": "step_end"}


def system(actions=None, runtime=None) -> SystemConfig:
    memory = dict(MEMORY, actions=actions or {})
    return system_from_dict({"memory": memory, "runtime": runtime or NO_BUFFERS}, "test")


def ranks(result):
    return result.to_dict()["ranks"]


def start_of(result, rank: int, label: str) -> float:
    return next(a.start for a in result.records.actions
                if a.rank == rank and f"{a.stage}{a.kind}{a.microbatch}" == label)


def end_of(result, rank: int, label: str) -> float:
    return next(a.end for a in result.records.actions
                if a.rank == rank and f"{a.stage}{a.kind}{a.microbatch}" == label)


def parts(weights=20, gradients=0, optimizer=120, activations=0, transient=0, buffers=0):
    return {"weights": weights, "gradients": gradients, "optimizer": optimizer,
            "activations": activations, "transient": transient, "runtime_buffers": buffers}


def test_1f1b_p2_m2_static_parts_transients_and_gradients_at_the_first_backward():
    sysconf = system({"*": {"F": {"transient": 100}, "B": {"transient": 300}}})
    r = simulate(uniform_workload(2, pp_comm=1000), "1f1b", sysconf, pp=2, microbatches=2)
    r0, r1 = ranks(r)
    # rank 0 runs 0F0 0F1 0B0 0B1: two stashes, then 0B0's working memory on top of them
    assert r0["static_memory_bytes"] == 140
    assert r0["peak_memory_bytes"] == 2440
    assert r0["peak_memory_action"] == "0B0"
    assert r0["peak_memory_time_ns"] == start_of(r, 0, "0B0")
    assert r0["peak_memory_breakdown"] == parts(activations=2000, transient=300)
    # rank 1 runs 1F0 1B0 1F1 1B1: its gradients exist from 1B0's end on
    assert r1["peak_memory_bytes"] == 1460
    assert r1["peak_memory_action"] == "1B1"
    assert r1["peak_memory_breakdown"] == parts(gradients=20, activations=1000, transient=300)
    # memory changes no time
    plain = simulate(uniform_workload(2, pp_comm=1000), "1f1b", SystemConfig(), pp=2,
                     microbatches=2)
    assert r.makespan_ns == plain.makespan_ns


def test_zb_h1_input_gradient_frees_part_and_keeps_gradients_until_w():
    sysconf = system({"*": {"F": {"transient": 100},
                            "I": {"frees": 600, "keeps": 250, "transient": 200},
                            "W": {"transient": 50}}})
    r = simulate(uniform_workload(2, pp_comm=1000), "zb-h1", sysconf, pp=2, microbatches=2)
    r0, r1 = ranks(r)
    # rank 0: 0F0 0F1 0I0 0W0 0I1 0W1; 0I0 runs on two whole stashes
    assert (r0["peak_memory_bytes"], r0["peak_memory_action"]) == (2340, "0I0")
    assert r0["peak_memory_breakdown"] == parts(activations=2000, transient=200)
    # rank 1: 1F0 1I0 1F1 1I1 1W0 1W1; at 1I1 microbatch 0 holds 400 of its stash + 250 for W
    assert (r1["peak_memory_bytes"], r1["peak_memory_action"]) == (1990, "1I1")
    assert r1["peak_memory_breakdown"] == parts(activations=1000 + 400 + 250, transient=200)


def test_an_overflow_names_the_action_whose_working_memory_does_not_fit():
    sysconf = system({"*": {"I": {"frees": 600, "keeps": 250, "transient": 200}}})
    with pytest.raises(OutOfMemoryError) as err:
        simulate(uniform_workload(2, pp_comm=1000), "zb-h1", sysconf, pp=2, microbatches=2,
                 memory_limit_gb=2339 / 1e9)
    assert str(err.value).endswith("running 0I0: needs 2340 bytes, limit 2339 bytes "
                                   "(1 bytes over)")
    assert err.value.exit_code == 4


def test_torch_multi_holds_sends_to_the_step_end_with_receive_buffers_and_kept_outputs():
    sysconf = system(runtime=TORCH_MULTI)
    r = simulate(uniform_workload(2, pp_comm=1000), "1f1b", sysconf, pp=2, microbatches=2,
                 p2p="torch-multi")
    r0, r1 = ranks(r)
    # receive buffers, one per microbatch: rank 0 for stage 0's gradient, rank 1 for stage 1's
    # activation
    assert r0["static_memory_bytes"] == r1["static_memory_bytes"] == 140 + 2000
    # rank 0 (0F0 0F1 0B0 0B1): 0B0 frees its stash but its output stays, held by its send
    assert (r0["peak_memory_bytes"], r0["peak_memory_action"]) == (4160, "0B0")
    assert r0["peak_memory_time_ns"] == end_of(r, 0, "0B0")
    assert r0["peak_memory_breakdown"] == parts(gradients=20, activations=1000,
                                                buffers=2000 + 1000)
    # rank 1 (1F0 1B0 1F1 1B1): an output is its forward's stash until the backward frees
    # that, then kept; input gradients held: after 1B1, both outputs and both gradients
    assert (r1["peak_memory_bytes"], r1["peak_memory_action"]) == (6160, "1B1")
    assert r1["peak_memory_time_ns"] == end_of(r, 1, "1B1")
    assert r1["peak_memory_breakdown"] == parts(gradients=20, activations=0,
                                                buffers=2000 + 4000)
    # buffers and gradients are released at the step's end: a second iteration peaks alike
    r2 = simulate(uniform_workload(2, pp_comm=1000), "1f1b", sysconf, pp=2, microbatches=2,
                  p2p="torch-multi", iterations=2)
    assert [x["peak_memory_bytes"] for x in ranks(r2)] == [4160, 6160]
    # gradients kept across steps instead (a persistent gradient buffer)
    kept = system(runtime=dict(TORCH_MULTI, gradients="kept"))
    r3 = simulate(uniform_workload(2, pp_comm=1000), "1f1b", kept, pp=2, microbatches=2,
                  p2p="torch-multi", iterations=2)
    assert [x["peak_memory_bytes"] for x in ranks(r3)] == [4160, 6160 + 0]
    assert ranks(r3)[0]["peak_memory_breakdown"]["gradients"] == 20


def test_the_last_stage_holds_its_loss_with_its_stash_and_torch_frees_its_output_at_the_i():
    # memory.loss_keeps_bytes 500: what the last stage's loss saves, held and freed with its
    # stash (1000 B, its output among it); static 140 B a rank, no runtime buffers
    def peaks(schedule, p2p, loss):
        sysconf = system_from_dict({"memory": dict(MEMORY, loss_keeps_bytes=loss),
                                    "runtime": NO_BUFFERS}, "test")
        r = simulate(uniform_workload(2, pp_comm=1000), schedule, sysconf, pp=2,
                     microbatches=2, p2p=p2p)
        return [(x["peak_memory_bytes"], x["peak_memory_action"]) for x in ranks(r)]

    # gpipe, rank 1 (1F0 1F1 1B0 1B1): two microbatches in flight, 140 + 2 x 1500; the
    # first stage keeps no loss
    assert peaks("gpipe", "async", 500) == [(2140, "0F1"), (3140, "1F1")]
    assert peaks("gpipe", "async", 0) == [(2140, "0F1"), (2140, "1F1")]
    # 1f1b, rank 1 (1F0 1B0 1F1 1B1): one in flight, 140 + gradients 20 + 1500
    assert peaks("1f1b", "async", 500)[1] == (1660, "1F1")
    # zb-h1, rank 1 (1F0 1I0 1F1 1I1 1W0 1W1): the ideal runtime frees both at the W,
    # 140 + 2 x 1500; torch's stage drops the output from its cache at the I (no outputs
    # kept): 140 + 500 after 1I0, + 1500 at 1F1
    assert peaks("zb-h1", "async", 500)[1] == (3140, "1F1")
    assert peaks("zb-h1", "torch-multi", 500)[1] == (2140, "1F1")
    assert peaks("zb-h1", "torch-multi", 0)[1] == (1140, "1F0")


def test_the_v_turnaround_rank_hands_over_by_reference():
    sysconf = system(runtime=TORCH_MULTI)
    r = simulate(uniform_workload(4, pp_comm=1000), "zb-v", sysconf, pp=2, microbatches=2,
                 p2p="torch-multi")
    assert r.schedule.placement == (0, 1, 1, 0)
    r1 = ranks(r)[1]
    # rank 1 holds stages 1 and 2; receive buffers: stage 1's activation (from rank 0) and
    # both stages' gradients, none for stage 2's activation (stage 1 hands it over by
    # reference): 3 x 2 microbatches. Stage 1's output stays referenced to the step's end, as
    # a send holds it; stage 2's input gradient replaces stage 1's gradient buffer (nothing
    # new). At 1I1's end one stash is left and five tensors are held (2W0's and 2W1's outputs
    # sent to rank 0, 1W0's handed to stage 2, 1I0's and 1I1's gradients sent to rank 0)
    assert r1["static_memory_bytes"] == 40 + 240 + 6000
    assert (r1["peak_memory_bytes"], r1["peak_memory_action"]) == (12320, "1I1")
    assert r1["peak_memory_breakdown"] == parts(weights=40, gradients=40, optimizer=240,
                                                activations=1000, buffers=6000 + 5000)


def test_auto_retention_follows_the_point_to_point_mode():
    rt = SystemConfig().runtime
    assert rt.retention("async") == ("none", "none", "none", "kept")
    assert rt.retention("torch-multi") == ("step_end", "per_microbatch", "step_end", "per_step")
    # torch's ScheduleGPipe waits for its sends at the step's end, Schedule1F1B before the next
    assert rt.retention("torch-single", "GPipe")[0] == "step_end"
    assert rt.retention("torch-single", "1F1B") == ("until_sent", "per_microbatch",
                                                    "step_end", "per_step")
    given = system_from_dict({"runtime": {"sends_held": "none"}}, "t").runtime
    assert given.retention("torch-multi") == ("none", "per_microbatch", "step_end", "per_step")


def test_zero_shards_optimizer_state_then_gradients_over_dp():
    wl = uniform_workload(2, pp_comm=1000, all_gpus=8)          # pp 2 -> dp 4
    for zero, opt, grads in ((0, 120, 20), (1, 30, 20), (2, 30, 5)):
        sysconf = system_from_dict({"memory": dict(MEMORY, zero=zero),
                                    "runtime": NO_BUFFERS}, "t")
        r1 = ranks(simulate(wl, "1f1b", sysconf, pp=2, microbatches=2))[1]
        assert r1["static_memory_bytes"] == 20 + opt
        assert r1["peak_memory_breakdown"]["gradients"] == grads


@pytest.mark.parametrize("memory, message", [
    ({"precision": "int8"}, "t: memory.precision: expected one of fp32, bf16, fp16, found "
                            "'int8'"),
    ({"zero": 4}, "t: memory.zero: expected 0, 1 (optimizer state sharded over DP), 2 "
                  "(gradients too) or 3 (weights too), found 4"),
    ({"actions": {"*": {"F": {"frees": 1}}}},
     "t: memory.actions.*.F: unknown field 'frees'; expected one of keeps, transient"),
    ({"actions": {"x": {}}}, "t: memory.actions: expected '*' or a stage (an integer >= 0) "
                             "as key, found 'x'"),
    ({"actions": {"0": {"W": {"transient": -1}}}},
     "t: memory.actions.0.W.transient: expected bytes >= 0, found -1"),
])
def test_bad_memory_keys_are_one_line_errors(memory, message):
    from simulator.errors import ConfigError

    with pytest.raises(ConfigError) as err:
        system_from_dict({"memory": memory}, "t")
    assert str(err.value) == message


def test_an_assumed_activation_size_is_a_warning_and_a_given_one_is_not():
    wl = uniform_workload(2, pp_comm=1000)
    r = simulate(wl, "1f1b", SystemConfig(), pp=2, microbatches=2)
    (w,) = [w for w in r.warnings if w.code == "activation_assumed"]
    assert w.message == ("activation memory assumed: 17 x pp_comm (1000 bytes) per layer and "
                         "microbatch, Megatron's 34·s·b·h with flash attention or selective "
                         "recompute (Korthikanti et al.); the file gives no activation size")
    assert w.option == ("memory.activation_bytes_per_layer in --system, activation_bytes: in "
                        "the header (pipesim generate writes it), or pipesim calibrate --memory")
    given = simulate(wl, "1f1b", system(), pp=2, microbatches=2)
    assert "activation_assumed" not in [w.code for w in given.warnings]
