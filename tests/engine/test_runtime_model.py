"""The runtime model (system YAML ``runtime:``): every rule checked by hand-worked times.

Unless a test says otherwise: one layer per stage, F = I = W = 1000 ns (so B = 2000 ns), and
links that move 1 byte per ns with 100 ns latency, so a 500-byte transfer takes 600 ns.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from simulator import DeadlockError, simulate
from simulator.cli.commands.run import command as run_command
from simulator.cli.main import main
from simulator.engine.options import P2P_MODES
from simulator.errors import ConfigError
from simulator.schedules import generate, get, names
from simulator.schedules.action import Action
from simulator.schedules.comm_pass import op_lists
from simulator.schedules.schedule import Schedule
from simulator.system import SystemConfig
from simulator.system.config import LinkConfig, load_system, system_from_dict
from simulator.workload import uniform_workload

from .cases import SYSTEM as FAST_PATH_SYSTEM, workload
from .equivalence import same_parts as same, timeline

ROOT = Path(__file__).resolve().parents[2]
LINK = {"bandwidth_gbps": 8.0, "latency_ns": 100.0}      # 1 B/ns + 100 ns


def system(**runtime) -> SystemConfig:
    return system_from_dict({"links": LINK, "runtime": runtime})


def actions(result, rank=None):
    return [(f"{a.stage}{a.kind}{a.microbatch}", a.start, a.end) for a in result.records.actions
            if rank is None or a.rank == rank]


def transfer(result, data, microbatch):
    (t,) = [t for t in result.records.transfers if t.data == data and t.microbatch == microbatch]
    return t.issued, t.start, t.end


# -- the default stays the ideal machine ---------------------------------------------------------
def test_default_runtime_profile_changes_nothing():
    wl = uniform_workload(4, 1000, 1000, 1000, pp_comm=500)
    plain = simulate(wl, "zb-v", SystemConfig(links=LinkConfig(8.0, 100.0)), pp=2,
                     microbatches=4, vpp=2)
    profiled = simulate(wl, "zb-v", system(), pp=2, microbatches=4, vpp=2, p2p=None)
    assert timeline(plain) == timeline(profiled)
    assert SystemConfig().runtime == load_system(None).runtime
    assert SystemConfig().runtime.p2p == "async"


# -- per-action overhead ---------------------------------------------------------------------------
def test_overhead_is_paid_before_each_action_and_an_overlapped_pair_pays_one():
    # one rank: F0, the pair (F1;B0), B1. F pays 100, B 300, the pair max(100, 300) = 300.
    sched = Schedule("pairs", 1, 1, 2, (0,), ((Action(0, "F", 0), Action(0, "F", 1, 0),
                                              Action(0, "B", 0, 0), Action(0, "B", 1)),))
    r = simulate(uniform_workload(1, 1000, 1000, 1000), sched,
                 system(action_overhead_ns={"F": 100, "B": 300}))
    assert actions(r) == [("0F0", 100.0, 1100.0), ("0F1", 1400.0, 2400.0),
                          ("0B0", 2400.0, 4400.0), ("0B1", 4700.0, 6700.0)]
    assert r.makespan_ns == 6700.0


def test_overhead_per_kind_on_a_pipeline():
    # 1F1B, P = 2, M = 1, no transfer cost: F costs 1000 + 50, B 2000 + 200
    wl = uniform_workload(2, 1000, 1000, 1000, pp_comm=0)
    r = simulate(wl, "1f1b", system(action_overhead_ns={"F": 50, "B": 200}), pp=2,
                 microbatches=1)
    assert actions(r) == [("0F0", 50.0, 1050.0), ("1F0", 1100.0, 2100.0),
                          ("1B0", 2300.0, 4300.0), ("0B0", 4500.0, 6500.0)]


# -- prologue / epilogue ---------------------------------------------------------------------------
def test_step_prologue_and_epilogue_are_paid_every_iteration():
    r = simulate(uniform_workload(1, 1000, 1000, 1000), "1f1b",
                 system(step_prologue_ns=500, step_epilogue_ns=700), pp=1, microbatches=1,
                 iterations=2)
    assert r.records.iteration_bounds == [(0.0, 4200.0), (4200.0, 8400.0)]
    assert [(a.iteration, a.kind, a.start, a.end) for a in r.records.actions] == [
        (0, "F", 500.0, 1500.0), (0, "B", 1500.0, 3500.0),
        (1, "F", 4700.0, 5700.0), (1, "B", 5700.0, 7700.0)]


# -- the first stage's backward as torch runs it ---------------------------------------------------
def test_first_stage_backward_torch_empties_I_and_gives_W_the_whole_backward():
    wl = uniform_workload(2, 1000, 1000, 1000, pp_comm=0)
    rows = simulate(wl, "zb-h1", system(), pp=2, microbatches=2)
    torch = simulate(wl, "zb-h1", system(first_stage_backward="torch"), pp=2, microbatches=2,
                     trace_layers=True)
    assert actions(rows, 0) == [("0F0", 0.0, 1000.0), ("0F1", 1000.0, 2000.0),
                                ("0I0", 3000.0, 4000.0), ("0W0", 4000.0, 5000.0),
                                ("0I1", 5000.0, 6000.0), ("0W1", 6000.0, 7000.0)]
    assert actions(torch, 0) == [("0F0", 0.0, 1000.0), ("0F1", 1000.0, 2000.0),
                                 ("0I0", 3000.0, 3000.0), ("0W0", 3000.0, 5000.0),
                                 ("0I1", 5000.0, 5000.0), ("0W1", 5000.0, 7000.0)]
    assert actions(torch, 1) == actions(rows, 1)          # only the first stage changes
    # W on stage 0 runs the layer's weight gradient, then its input gradient (B's order)
    assert [(x.state, x.start, x.end) for x in torch.records.layers
            if x.rank == 0 and x.microbatch == 0 and x.start >= 3000] == [
        ("Weight_Gradient", 3000.0, 4000.0), ("Input_Gradient", 4000.0, 5000.0)]


# -- calibrated action costs and layer scales ------------------------------------------------------
CALIBRATED = {"calibrated_for": {"pp": 2, "vpp": 1},
              "action_costs_ns": {"1": {"F": 3000}, "0": {"B": 500}}}


def test_calibrated_action_costs_replace_the_rows_when_P_and_v_match():
    # 1F1B P=2 M=2. Stage 1's F costs 3000 and stage 0's B 500; the rest from the rows.
    wl = uniform_workload(2, 1000, 1000, 1000, pp_comm=0)
    r = simulate(wl, "1f1b", system(**CALIBRATED), pp=2, microbatches=2)
    assert actions(r, 0) == [("0F0", 0.0, 1000.0), ("0F1", 1000.0, 2000.0),
                             ("0B0", 6000.0, 6500.0), ("0B1", 11000.0, 11500.0)]
    assert actions(r, 1) == [("1F0", 1000.0, 4000.0), ("1B0", 4000.0, 6000.0),
                             ("1F1", 6000.0, 9000.0), ("1B1", 9000.0, 11000.0)]


def test_layer_scale_applies_where_calibrated_costs_do_not():
    wl = uniform_workload(2, 1000, 1000, 1000, pp_comm=0)
    scaled = {"layer_scale": {"1": 3.0}}
    # P and v as calibrated: stage 1's F and stage 0's B calibrated, stage 1's B = 3 x 2000
    both = simulate(wl, "1f1b", system(**CALIBRATED, **scaled), pp=2, microbatches=2)
    assert actions(both, 1) == [("1F0", 1000.0, 4000.0), ("1B0", 4000.0, 10000.0),
                                ("1F1", 10000.0, 13000.0), ("1B1", 13000.0, 19000.0)]
    assert both.makespan_ns == 19500.0
    # calibrated for another P: only the layer scales apply (stage 1: F 3000, B 6000)
    other = dict(CALIBRATED, calibrated_for={"pp": 4, "vpp": 1})
    r = simulate(wl, "1f1b", system(**other, **scaled), pp=2, microbatches=2)
    assert actions(r, 0)[2:] == [("0B0", 10000.0, 12000.0), ("0B1", 19000.0, 21000.0)]
    assert r.makespan_ns == 21000.0
    # per kind: layer 0's input gradient x 2 only (I = 2000, W = 1000, B = 3000)
    r = simulate(wl, "zb-h1", system(layer_scale={"0": {"I": 2.0}}), pp=2, microbatches=1)
    assert actions(r, 0) == [("0F0", 0.0, 1000.0), ("0I0", 3000.0, 5000.0),
                             ("0W0", 5000.0, 6000.0)]


def test_calibrated_costs_scale_layer_states_and_dp_collectives_in_proportion():
    base = FAST_PATH_SYSTEM
    data = base.to_dict()
    data["runtime"] = {"calibrated_for": {"pp": 2, "vpp": 1},
                       "action_costs_ns": {"0": {"B": 2 * 8811.0}}}
    wl = workload(2)
    plain = simulate(wl, "1f1b", base, pp=2, microbatches=2, trace_layers=True)
    cal = simulate(wl, "1f1b", system_from_dict(data), pp=2, microbatches=2, trace_layers=True)
    b_plain = [a for a in plain.records.actions if a.stage == 0 and a.kind == "B"]
    b_cal = [a for a in cal.records.actions if a.stage == 0 and a.kind == "B"]
    assert [a.end - a.start for a in b_cal] == [17622.0, 17622.0]
    factor = 17622.0 / (b_plain[0].end - b_plain[0].start)

    def states(r, a):
        return [(x.layer, x.state, x.end - x.start) for x in r.records.layers
                if x.rank == 0 and x.stage == 0 and x.microbatch == a.microbatch
                and a.start <= x.start < a.end]

    for p, c in zip(b_plain, b_cal):
        assert [(l, s, pytest.approx(d * factor)) for l, s, d in states(plain, p)] == \
            states(cal, c)
    # the last B issues the DP all-reduces when each layer's weight gradient ends
    ready_plain = sorted(c.ready - b_plain[1].start for c in plain.records.collectives
                         if c.rank == 0)
    ready_cal = sorted(c.ready - b_cal[1].start for c in cal.records.collectives if c.rank == 0)
    assert ready_cal == pytest.approx([x * factor for x in ready_plain])


# -- torch's point-to-point ------------------------------------------------------------------------
def test_rendezvous_a_transfer_starts_when_the_receive_is_posted():
    # GPipe on torch's single-stage runtime, rank 1 three times slower. Rank 0 posts send F1 at
    # 2000; rank 1 posts its receive only before computing F1, at 4600: the transfer starts
    # then and lands at 5200 (with isend/irecv it would have landed at 2600, unseen).
    wl = uniform_workload(2, 1000, 1000, 1000, pp_comm=500)
    r = simulate(wl, "gpipe", system(), pp=2, microbatches=2, p2p="torch",
                 slow_ranks={1: 3.0})
    assert transfer(r, "F", 0) == (1000.0, 1000.0, 1600.0)
    assert transfer(r, "F", 1) == (2000.0, 4600.0, 5200.0)
    assert actions(r, 1) == [("1F0", 1600.0, 4600.0), ("1F1", 5200.0, 8200.0),
                             ("1B0", 8200.0, 14200.0), ("1B1", 14200.0, 20200.0)]
    # rank 0 waits for its forward sends (5200) before posting its backward receives; B0 and
    # B1 are sent at 14200 and 20200, after rank 0 posted, so they start at once
    assert transfer(r, "B", 0) == (14200.0, 14200.0, 14800.0)
    assert transfer(r, "B", 1) == (20200.0, 20200.0, 20800.0)
    assert actions(r, 0) == [("0F0", 0.0, 1000.0), ("0F1", 1000.0, 2000.0),
                             ("0B0", 14800.0, 16800.0), ("0B1", 20800.0, 22800.0)]
    assert r.makespan_ns == 22800.0
    async_ = simulate(wl, "gpipe", system(), pp=2, microbatches=2, p2p="async",
                      slow_ranks={1: 3.0})
    assert transfer(async_, "F", 1) == (2000.0, 2000.0, 2600.0)


EXCHANGE = 10000.0


@pytest.mark.parametrize("sharing", ["fifo", "fair"])
def test_two_way_exchange_and_fused_1f1b_batches(sharing):
    # 1F1B P=2 M=2 on the single-stage runtime. At 4600 rank 1 posts the fused batch
    # [send B0, recv F1]; rank 0 posted [send F1, recv B0] at 2000. Both transfers start at
    # 4600 and would land at 5200; as a two-way exchange both land 10000 later, at 15200.
    wl = uniform_workload(2, 1000, 1000, 1000, pp_comm=500)
    data = {"links": LINK, "topology": {"sharing": sharing},
            "runtime": {"exchange_ns": EXCHANGE}}
    r = simulate(wl, "1f1b", system_from_dict(data), pp=2, microbatches=2, p2p="torch")
    assert transfer(r, "F", 1) == (2000.0, 4600.0, 15200.0)
    assert transfer(r, "B", 0) == (4600.0, 4600.0, 15200.0)
    assert actions(r, 0) == [("0F0", 0.0, 1000.0), ("0F1", 1000.0, 2000.0),
                             ("0B0", 15200.0, 17200.0), ("0B1", 18800.0, 20800.0)]
    assert actions(r, 1) == [("1F0", 1600.0, 2600.0), ("1B0", 2600.0, 4600.0),
                             ("1F1", 15200.0, 16200.0), ("1B1", 16200.0, 18200.0)]
    # B1 (sent at 18200, rank 0 posted at 17200) has nothing coming the other way: no extra
    assert transfer(r, "B", 1) == (18200.0, 18200.0, 18800.0)
    assert r.makespan_ns == 20800.0
    no_extra = simulate(wl, "1f1b", system(), pp=2, microbatches=2, p2p="torch-single")
    assert no_extra.makespan_ns == 20800.0 - EXCHANGE


def test_multi_stage_runtime_waits_for_sends_at_the_end_of_the_step():
    # 1F1B P=2 M=1 forced onto the multi-stage runtime: rank 0 posts its receive for B0 right
    # after sending F0 (t=1000), rank 1 sends B0 at 4600; it lands at 5200, and rank 1's step
    # ends only then (with isend/irecv: at 4600, when its compute ends).
    wl = uniform_workload(2, 1000, 1000, 1000, pp_comm=500)
    r = simulate(wl, "1f1b", system(), pp=2, microbatches=1, p2p="torch-multi")
    assert [str(op) for op in op_lists(r.schedule, early_receives=True)[0]] == [
        "0F0", "send 1F0 (0->1)", "irecv 0B0 (1->0)", "wait 0B0 (1->0)", "0B0"]
    assert transfer(r, "B", 0) == (4600.0, 4600.0, 5200.0)
    assert r.records.rank_finish == [[7200.0, 5200.0]]
    a = simulate(wl, "1f1b", system(), pp=2, microbatches=1, p2p="async")
    assert a.records.rank_finish == [[7200.0, 4600.0]]


def test_torch_picks_the_single_stage_runtime_for_gpipe_and_1f1b_only():
    wl = uniform_workload(2, 1000, 1000, 1000, pp_comm=500)
    for name, forced in (("1f1b", "torch-single"), ("gpipe", "torch-single"),
                         ("zb-h1", "torch-multi")):
        auto = simulate(wl, name, system(exchange_ns=EXCHANGE), pp=2, microbatches=4,
                        p2p="torch")
        pinned = simulate(wl, name, system(exchange_ns=EXCHANGE), pp=2, microbatches=4,
                          p2p=forced)
        assert timeline(auto) == timeline(pinned), name
    # zb-h1 at v = 1 runs on the multi-stage runtime: not the single-stage times
    single = simulate(wl, "zb-h1", system(exchange_ns=EXCHANGE), pp=2, microbatches=4,
                      p2p="torch-single")
    assert single.makespan_ns != simulate(wl, "zb-h1", system(exchange_ns=EXCHANGE), pp=2,
                                          microbatches=4, p2p="torch").makespan_ns


def test_the_system_p2p_is_the_default_and_an_explicit_mode_wins():
    wl = uniform_workload(2, 1000, 1000, 1000, pp_comm=500)
    from_system = simulate(wl, "1f1b", system(p2p="torch", exchange_ns=EXCHANGE), pp=2,
                           microbatches=2, p2p=None)
    assert from_system.makespan_ns == 20800.0
    explicit = simulate(wl, "1f1b", system(p2p="torch", exchange_ns=EXCHANGE), pp=2,
                        microbatches=2, p2p="async")
    assert explicit.makespan_ns == 10200.0     # isend/irecv: no rendezvous, no exchange


def test_early_receives_equal_torchs_add_send_recv():
    # recorded from torch 2.13's _add_send_recv on these compute lists (wait = torch's wait
    # before the compute that needs the data)
    sched = generate("interleaved-1f1b", 2, 4, 2)
    lowered = [[str(op) for op in ops] for ops in op_lists(sched, early_receives=True)]
    assert lowered[0][:13] == [
        "0F0", "send 1F0 (0->1)", "irecv 2F0 (1->2)", "0F1", "send 1F1 (0->1)",
        "irecv 2F1 (1->2)", "wait 2F0 (1->2)", "2F0", "send 3F0 (2->3)", "wait 2F1 (1->2)",
        "2F1", "send 3F1 (2->3)", "irecv 2B0 (3->2)"]
    assert lowered[1][:14] == [
        "irecv 1F0 (0->1)", "wait 1F0 (0->1)", "1F0", "send 2F0 (1->2)", "irecv 1F1 (0->1)",
        "wait 1F1 (0->1)", "1F1", "send 2F1 (1->2)", "irecv 3F0 (2->3)", "wait 3F0 (2->3)",
        "3F0", "irecv 3F1 (2->3)", "3B0", "send 2B0 (3->2)"]
    # every receive is posted once, before its wait; the default lowering is unchanged
    for ops in lowered:
        for i, op in enumerate(ops):
            if op.startswith("wait"):
                assert ops.index("irecv" + op[4:]) < i
    assert all("irecv" not in str(op) for ops in op_lists(sched) for op in ops)


def test_forced_single_stage_rules_on_a_multi_stage_schedule_can_deadlock():
    wl = uniform_workload(4, 1000, 1000, 1000, pp_comm=500)
    with pytest.raises(DeadlockError, match="its receive is not posted"):
        simulate(wl, "looped-bfs", system(), pp=2, microbatches=4, vpp=2,
                 p2p="torch-single")


# -- the reference path agrees with the fast path with everything on --------------------------------
@pytest.mark.parametrize("name", sorted(names()))
def test_layer_by_layer_agrees_with_the_fast_path_with_the_runtime_model_on(name):
    spec = get(name)
    v = 2 if spec.variable_vpp else spec.default_vpp
    sched = generate(name, 2, 4, v)
    data = FAST_PATH_SYSTEM.to_dict()
    data["runtime"] = {"p2p": "torch", "action_overhead_ns": {"F": 70, "B": 90, "I": 40,
                                                              "W": 30},
                       "step_prologue_ns": 300, "step_epilogue_ns": 200, "exchange_ns": 500,
                       "first_stage_backward": "torch", "layer_scale": {"1": 1.5, "4": 0.5},
                       "calibrated_for": {"pp": 2, "vpp": v},
                       "action_costs_ns": {"1": {"F": 2500, "B": 7000, "I": 4000, "W": 3000}}}
    sysconf = system_from_dict(data)
    wl = workload(sched.n_chunks)
    fast = simulate(wl, sched, sysconf, iterations=2, p2p=None)
    slow = simulate(wl, sched, sysconf, iterations=2, p2p=None, layer_by_layer=True)
    for part_fast, part_slow in zip(timeline(fast), timeline(slow)):
        same(part_fast, part_slow)
    plain = simulate(wl, sched, FAST_PATH_SYSTEM, iterations=2)
    assert fast.makespan_ns != plain.makespan_ns     # the model is really on


# -- configuration ----------------------------------------------------------------------------------
def test_the_torch_gloo_preset_loads_with_the_measured_figures():
    s = load_system(ROOT / "configs" / "system" / "torch-gloo-cpu.yaml")
    rt = s.runtime
    assert (rt.p2p, rt.first_stage_backward) == ("torch", "torch")
    assert rt.action_overhead_ns == {"F": 435000.0, "B": 435000.0, "I": 435000.0, "W": 435000.0}
    assert (rt.step_prologue_ns, rt.step_epilogue_ns) == (500000.0, 500000.0)
    assert s.links.latency_ns + rt.exchange_ns == 2200000.0


def test_set_overrides_reach_the_runtime_section():
    s = SystemConfig().with_overrides({"runtime.exchange_ns": 5, "runtime.p2p": "torch",
                                       "runtime.action_overhead_ns.W": 7}, "--set")
    assert (s.runtime.exchange_ns, s.runtime.p2p, s.runtime.action_overhead_ns["W"]) == \
        (5.0, "torch", 7.0)


@pytest.mark.parametrize("runtime,msg", [
    ({"p2p": "nccl"}, "s.yaml: runtime.p2p: expected one of async, blocking, batched, torch, "
     "torch-single, torch-multi, found 'nccl'"),
    ({"action_overhead_ns": {"X": 1}}, "s.yaml: runtime.action_overhead_ns: unknown kind 'X'; "
     "expected one of F, B, I, W"),
    ({"step_prologue_ns": -1}, "s.yaml: runtime.step_prologue_ns: expected a number >= 0, "
     "found -1"),
    ({"first_stage_backward": "yes"}, "s.yaml: runtime.first_stage_backward: expected one of "
     "rows, torch, found 'yes'"),
    ({"action_costs_ns": {"0": {"F": 1}}}, "s.yaml: runtime.action_costs_ns: needs "
     "runtime.calibrated_for: {pp: P, vpp: v} (the stages are numbered for one P and v)"),
    ({"calibrated_for": {"pp": 2}}, "s.yaml: runtime.calibrated_for: expected exactly the keys "
     "pp and vpp, found pp"),
    ({"layer_scale": {"a": 1.0}}, "s.yaml: runtime.layer_scale: expected a layer (an integer >= "
     "0) as key, found 'a'"),
    ({"layer_scale": {"2": {"B": 1.0}}}, "s.yaml: runtime.layer_scale.2: unknown kind 'B'; "
     "expected one of F, I, W"),
    ({"overheads": 1}, "s.yaml: unknown key 'runtime.overheads'; expected one of: "
     "action_costs_ns, action_overhead_ns, calibrated_for, calibrated_on, exchange_ns, "
     "first_stage_backward, gradients, kept_outputs, layer_scale, overheads_guessed, p2p, "
     "recv_buffers, runtimes, sends_held, step_epilogue_ns, step_prologue_ns"),
    ({"calibrated_on": {"schedule": "1f1b"}}, "s.yaml: runtime.calibrated_on: expected exactly "
     "the keys schedule and p2p, found schedule"),
    ({"calibrated_on": {"schedule": "1f1b", "p2p": "async"}}, "s.yaml: "
     "runtime.calibrated_on.p2p: expected torch-single or torch-multi, found 'async'"),
    ({"calibrated_on": {"schedule": "", "p2p": "torch-multi"}}, "s.yaml: "
     "runtime.calibrated_on.schedule: expected a schedule name, found ''"),
])
def test_bad_runtime_keys_are_named(runtime, msg):
    with pytest.raises(ConfigError) as err:
        system_from_dict({"runtime": runtime}, "s.yaml")
    assert str(err.value) == msg


def test_calibrated_stage_out_of_range_is_refused():
    wl = uniform_workload(2, 1000, 1000, 1000)
    bad = system(calibrated_for={"pp": 2, "vpp": 1}, action_costs_ns={"5": {"F": 1}})
    with pytest.raises(ConfigError) as err:
        simulate(wl, "1f1b", bad, pp=2, microbatches=2)
    assert str(err.value) == ("runtime.action_costs_ns: stage 5 does not exist (calibrated for "
                              "pp 2, vpp 1: stages 0-1)")


def test_cli_p2p_choices_are_the_engine_modes():
    (opt,) = [p for p in run_command.params if p.name == "p2p"]
    assert tuple(opt.type.choices) == P2P_MODES


def test_cli_runs_torch_and_refuses_a_bad_runtime_section(tmp_path, capsys):
    wl = tmp_path / "w.txt"
    wl.write_text("HYBRID_TRANSFORMER_FWD_IN_BCKWD model_parallel_NPU_group: 1 pp: 2 ga: 2 "
                  "all_gpus: 2 pp_comm: 500\n2\n"
                  + "".join(f"l{i} -1 1000 NONE 0 1000 NONE 0 1000 NONE 0 0\n"
                            for i in range(2)))
    sysfile = tmp_path / "s.yaml"
    sysfile.write_text("links: {bandwidth_gbps: 8.0, latency_ns: 100.0}\n"
                       "runtime: {p2p: torch, exchange_ns: 10000}\n")
    assert main(["run", str(wl), "--system", str(sysfile), "--json", "-"]) == 0
    assert json.loads(capsys.readouterr().out)["makespan_ns"] == 20800
    assert main(["run", str(wl), "--system", str(sysfile), "--p2p", "async", "--json",
                 "-"]) == 0
    assert json.loads(capsys.readouterr().out)["makespan_ns"] == 10200
    sysfile.write_text("runtime: {exchange_ns: fast}\n")
    assert main(["run", str(wl), "--system", str(sysfile)]) == 2
    err = capsys.readouterr().err
    assert err == f"pipesim: error: {sysfile}: runtime.exchange_ns: expected a number >= 0, " \
                  "found 'fast'\n"


def test_calibration_file_lies_between_the_system_and_set(tmp_path, capsys):
    wl = tmp_path / "w.txt"
    wl.write_text("HYBRID_TRANSFORMER_FWD_IN_BCKWD model_parallel_NPU_group: 1 pp: 2 ga: 2 "
                  "all_gpus: 2 pp_comm: 500\n2\n"
                  + "".join(f"l{i} -1 1000 NONE 0 1000 NONE 0 1000 NONE 0 0\n"
                            for i in range(2)))
    sysfile = tmp_path / "s.yaml"
    sysfile.write_text("links: {bandwidth_gbps: 8.0, latency_ns: 100.0}\n"
                       "runtime: {p2p: torch, exchange_ns: 99999}\n")
    calib = tmp_path / "calib.yaml"
    calib.write_text("runtime:\n  exchange_ns: 10000\n  calibrated_for: {pp: 2, vpp: 1}\n"
                     "  action_costs_ns: {'1': {F: 3000}, '0': {B: 500}}\n")

    def makespan(*args):
        assert main(["run", str(wl), "--system", str(sysfile), "--json", "-", *args]) == 0
        return json.loads(capsys.readouterr().out)["makespan_ns"]

    # the calibration keeps the system's p2p (torch) and replaces its exchange cost; --set
    # wins over it (calibrated for P = 4: its costs are off): the exchange case worked above
    assert makespan("--calibration", str(calib), "--set", "runtime.calibrated_for.pp=4") \
        == 20800
    # its costs on and --p2p async: rank 1 F0 1600-4600, B0 -6600 (lands 7200), F1 -9600,
    # B1 -11600 (lands 12200); rank 0 B0 7200-7700, B1 12200-12700
    assert makespan("--calibration", str(calib), "--p2p", "async") == 12700
    calib.write_text("runtime: [1, 2]\n")
    assert main(["run", str(wl), "--calibration", str(calib)]) == 2
    assert capsys.readouterr().err == (f"pipesim: error: {calib}: runtime: expected a mapping "
                                       "like {p2p: torch, exchange_ns: 2000000}, found [1, 2]\n")
    assert main(["run", str(wl), "--calibration", str(tmp_path / "none.yaml")]) == 2
    assert "--calibration: cannot read" in capsys.readouterr().err


def test_multi_stage_runtime_runs_an_overlapped_pair_half_by_half():
    # rank 0: F0, the pair (F1;B0), B1; rank 1: F0 B0 F1 B1. torch's OVERLAP_F_B runs F1,
    # then waits for B0's gradient, then runs B0; the pair's sends follow both halves. F1 runs
    # 1000-2000 while the gradient is on its way; B0 waits for it (lands at 5200).
    pair = Schedule("pair", 2, 1, 2, (0, 1), (
        (Action(0, "F", 0), Action(0, "F", 1, 0), Action(0, "B", 0, 0), Action(0, "B", 1)),
        (Action(1, "F", 0), Action(1, "B", 0), Action(1, "F", 1), Action(1, "B", 1))))
    assert [str(op) for op in op_lists(pair, early_receives=True)[0]] == [
        "0F0", "send 1F0 (0->1)", "irecv 0B0 (1->0)", "0F1@0", "wait 0B0 (1->0)", "0B0@0",
        "send 1F1 (0->1)", "irecv 0B1 (1->0)", "wait 0B1 (1->0)", "0B1"]
    wl = uniform_workload(2, 1000, 1000, 1000, pp_comm=500)
    r = simulate(wl, pair, system(), p2p="torch-multi")
    assert actions(r, 0) == [("0F0", 0.0, 1000.0), ("0F1", 1000.0, 2000.0),
                             ("0B0", 5200.0, 7200.0), ("0B1", 11400.0, 13400.0)]
    assert transfer(r, "F", 1) == (7200.0, 7200.0, 7800.0)
    # one launch for the pair: the larger overhead (B's 300) before its F half, none before B0
    r = simulate(wl, pair, system(action_overhead_ns={"F": 100, "B": 300}), p2p="torch-multi")
    assert actions(r, 0) == [("0F0", 100.0, 1100.0), ("0F1", 1400.0, 2400.0),
                             ("0B0", 5700.0, 7700.0), ("0B1", 12600.0, 14600.0)]
    assert r.makespan_ns == 14600.0
    # isend/irecv keeps the pair one step: it starts when both inputs are there
    a = simulate(wl, pair, system(), p2p="async")
    assert actions(a, 0)[1:3] == [("0F1", 5200.0, 6200.0), ("0B0", 6200.0, 8200.0)]
