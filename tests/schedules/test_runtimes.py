"""Each rule of the runtime-acceptance check (simulator/schedules/runtimes.py), with the runtime's
own error or hang condition it stands for (file and condition in a comment). The tests marked
``launch`` read that condition in the installed runtime's source, so a rule that no longer
matches its runtime fails there; they are skipped only when the extra is not installed."""

from __future__ import annotations

import inspect

import pytest

from simulator.schedules import registry
from simulator.schedules.runtimes import Shape, check_runtimes, shape_of
from simulator.workload.parser import load_workload
from simulator.workload.partition import partition
from simulator.workload.chunks import chunk_bounds
from simulator.workload.model import Partition

GPT = "workloads/gpt-24l.txt"


def verdicts(name, pp, m, v, **kw):
    return check_runtimes(Shape(name, pp, v, m, **kw))


# -- torch ------------------------------------------------------------------------------------

def test_torch_1f1b_needs_m_at_least_p():
    # torch/distributed/pipelining/schedules.py, Schedule1F1B.__init__:
    #   if n_microbatches < self._num_stages: raise ValueError
    v = verdicts("1f1b", 4, 3, 1)["torch"]
    assert v.how.startswith("csv") and v.rule == (
        "Schedule1F1B needs at least as many microbatches as stages (M 3 < P 4)")
    assert verdicts("1f1b", 4, 4, 1)["torch"].how == "Schedule1F1B"


@pytest.mark.parametrize("name, cls", [("interleaved-1f1b", "Interleaved1F1B"),
                                       ("zb-h1", "InterleavedZeroBubble")])
def test_torch_interleaved_needs_m_multiple_of_rounds(name, cls):
    # schedules.py, ScheduleInterleaved1F1B / ScheduleInterleavedZeroBubble.__init__:
    #   number_of_rounds = max(1, n_microbatches // pp_group_size)
    #   if n_microbatches % self.number_of_rounds != 0: raise ValueError
    v = verdicts(name, 4, 14, 2)["torch"]   # rounds 3, 14 % 3 = 2
    assert v.rule == (f"Schedule{cls} needs M to be a multiple of its rounds, max(1, M // P) "
                      "= 3 (M 14, P 4)")
    assert v.short == "csv"   # the CSV still runs (design notes, section 8)
    assert verdicts(name, 4, 12, 2)["torch"].how == f"Schedule{cls}"
    assert verdicts(name, 4, 3, 2)["torch"].how == f"Schedule{cls}"   # M < P: one round


def test_torch_v_classes_need_two_stages_per_rank_and_dualpipev_m():
    # schedules.py, ScheduleDualPipeV.__init__: n_local_stages != 2 -> ValueError;
    #   n_microbatches < self._num_stages -> ValueError
    v = verdicts("dualpipe-v", 4, 7, 2, placement="v")["torch"]
    assert v.rule == "ScheduleDualPipeV needs at least as many microbatches as stages (M 7 < 8)"
    assert verdicts("dualpipe-v", 4, 8, 2, placement="v")["torch"].how == "ScheduleDualPipeV"


def test_torch_refuses_what_its_csv_cannot_hold():
    # runtimes.torch_cannot_run: one minibatch per step(), one weight copy per stage
    sched = registry.generate("dualpipe", 4, 8, 2)
    v = check_runtimes(shape_of(sched))["torch"]
    assert not v.accepts and "two stages on the same weights" in v.rule


# -- Megatron-LM ------------------------------------------------------------------------------

def test_megatron_has_no_zero_bubble_schedule():
    v = verdicts("zb-h1", 4, 8, 1)["megatron"]
    assert v.rule == ("Megatron-LM has no zb-h1 schedule (it runs 1F1B, interleaved 1F1B "
                      "with virtual stages, and zb-greedy, v-zb, v-half and v-min on the zero-bubble "
                      "fork)")


def test_the_zero_bubble_fork_runs_its_own_layout_on_two_or_more_ranks():
    # the zero-bubble fork of Megatron-LM, megatron/arguments.py (tag zero-bubble-v0.1.0):
    #   if args.enable_zero_bubble: assert args.pipeline_model_parallel_size > 1;
    #   args.zero_bubble_max_pending_backward = int(...)
    v = verdicts("zb-greedy", 4, 8, 1, max_pending=8)["megatron"]
    assert (v.accepts, v.how) == (True, "the zero-bubble fork's own layout "
                                        "(sail-sg/zero-bubble-pipeline-parallelism: "
                                        "--enable-zero-bubble --zero-bubble-max-pending-backward 8)")
    assert verdicts("zb-greedy", 1, 8, 1)["megatron"].rule == (
        "the zero-bubble fork runs --enable-zero-bubble only with 2 or more pipeline ranks (pp 1)")
    assert verdicts("zb-greedy", 4, 8, 1, max_pending=6.5)["megatron"].rule == (
        "the zero-bubble fork's --zero-bubble-max-pending-backward is a whole number of "
        "forwards (max_pending 6.5)")
    # a built layout states its limit (the default: p, ZB-1p's)
    shape = shape_of(registry.generate("zb-greedy", 4, 8, 1))
    assert shape.max_pending == 4 and "backward 4)" in check_runtimes(shape)["megatron"].how


def test_the_zero_bubble_fork_places_layers_evenly_or_padded():
    # megatron/arguments.py (tag zero-bubble-v0.1.0): --num-layers a multiple of the stages, or
    # padded up to one under --allow-padding-num-layers (ParallelTransformer.get_offset takes a
    # padding layer off the last stage, then off the first ones); none of megatron-core's
    # uneven-split options
    def fork(layers):
        return verdicts("zb-greedy", len(layers), 8, 1, layers=layers)["megatron"]
    assert fork((6, 6, 6, 6)).accepts and fork((2, 3, 3, 3, 3, 3, 3, 2)).accepts
    assert fork((3, 3, 3, 2)).accepts                     # one padding layer: the last stage
    assert fork((5, 6, 6, 7)).rule == (
        "the zero-bubble fork places the layers evenly over the stages, or padded to a "
        "multiple of them (--allow-padding-num-layers: a padding layer off the last stage, then "
        "off the first ones); got 5 6 6 7")


def test_the_zero_bubble_fork_runs_v_half_and_v_min_as_its_v_schedule():
    # megatron/arguments.py (tag zero-bubble-v0.1.0): --zero-bubble-v-schedule turns zero bubble
    # on (pp > 1), needs num_layers % pp == 0 and an even count per stage; zb_schedules.py
    # builds the half / min setups with v_schedule_greedy (tests/schedules/golden/v_greedy.json)
    for name, setup in (("v-half", "half"), ("v-min", "min")):
        v = verdicts(name, 4, 8, 2, placement="v", layers=(3,) * 8)["megatron"]
        assert (v.accepts, v.how) == (True, "the zero-bubble fork's V schedule "
                                            "(sail-sg/zero-bubble-pipeline-parallelism: "
                                            "--zero-bubble-v-schedule "
                                            f"--zero-bubble-v-schedule-mem-setup {setup})")
    assert verdicts("v-half", 1, 8, 2)["megatron"].rule == (
        "the zero-bubble fork runs --zero-bubble-v-schedule only with 2 or more pipeline ranks "
        "(pp 1)")
    assert verdicts("v-min", 2, 8, 2, layers=(2, 3, 3, 2))["megatron"].rule == (
        "the zero-bubble fork's V schedule places the layers evenly, the same number on each "
        "of the 4 chunks (got 2 3 3 2)")
    # the fork's own ZB-V (its v_schedule.py over the profiled costs) is not torch's order
    assert verdicts("zb-v", 4, 8, 2)["megatron"].rule.startswith("Megatron-LM has no zb-v")


def test_megatron_interleaved_needs_two_ranks():
    # megatron/training/arguments.py: virtual_pipeline_model_parallel_size set ->
    #   assert args.pipeline_model_parallel_size > 1 (> 2 without overlap_p2p_comm)
    v = verdicts("interleaved-1f1b", 1, 8, 2, group_size=8)["megatron"]
    assert v.rule == ("Megatron-LM runs virtual stages only with 2 or more pipeline ranks "
                      "(pp 1)")


def test_megatron_interleaved_group_rules():
    # megatron/core/pipeline_parallel/schedules.py, forward_backward_pipelining_with_interleaving:
    #   microbatch_group_size_per_vp_stage > num_microbatches or < pipeline_parallel_size
    #     -> ValueError
    #   0 < num_microbatches % microbatch_group_size_per_vp_stage < pipeline_parallel_size
    #     -> RuntimeError
    assert verdicts("interleaved-1f1b", 4, 3, 2, group_size=3)["megatron"].rule == (
        "Megatron-LM's interleaved schedule needs P <= N <= M microbatches per group "
        "(P 4, N 3, M 3)")
    assert verdicts("interleaved-1f1b", 4, 10, 2, group_size=4)["megatron"].rule == (
        "Megatron-LM's interleaved schedule needs M mod N to be 0 or at least P (M 10, N 4, "
        "P 4)")
    assert verdicts("interleaved-1f1b", 4, 12, 2, group_size=4)["megatron"].accepts


def test_megatron_places_whole_layers():
    # megatron/core/transformer/pipeline_parallel_layer_layout.py: a stage is a list of whole
    # layers (E, t, L); arguments.py: 'Number of layers should be divisible by the
    # pipeline-model-parallel size' for the even split
    wl = load_workload(GPT)
    sched = registry.generate("1f1b", 4, 16, 1)   # 50 rows in 13/13/12/12: layer 12 is cut
    rows = wl.layers
    cut = Partition(chunks=tuple(tuple(rows[a:b]) for a, b in chunk_bounds(len(rows), 4)))
    v = check_runtimes(shape_of(sched, wl, cut))["megatron"]
    assert v.rule == ("Megatron-LM places whole transformer layers; the split cuts transformer "
                      "layer 12 (rows attention_12..mlp_12, lines 28-29) between stages 1 and 2")
    sched = registry.generate("1f1b", 2, 16, 1)   # 25/25 rows: 12 whole layers each
    shape = shape_of(sched, wl, partition(wl, 2))
    assert shape.layers == (12, 12) and check_runtimes(shape)["megatron"].accepts


# -- torchtitan ---------------------------------------------------------------------------------

def test_torchtitan_needs_microbatches_at_least_stages():
    # torchtitan#775 (PP hangs when microbatches < pipeline degree); torchtitan/distributed/
    # pipeline_parallel.py, _build_pipeline_schedule: n_microbatches < num_total_stages warns
    v = verdicts("interleaved-1f1b", 4, 4, 2)["torchtitan"]
    assert v.rule == ("torchtitan needs at least as many microbatches as stages (M 4 < 8): "
                      "fewer hang (torchtitan#775)")
    assert verdicts("interleaved-1f1b", 4, 8, 2)["torchtitan"].accepts


def test_torchtitan_cannot_place_wave_stages():
    # torchtitan/distributed/pipeline_parallel.py, _get_pp_rank_to_stage_indices_mapping:
    #   style = "v" if schedule_class in (ScheduleZBVZeroBubble, ScheduleDualPipeV) else "loop"
    # a CSV whose stages sit elsewhere loads and hangs (design notes, section 8)
    sched = registry.generate("hanayo", 4, 8, 4)   # two waves: stages zig-zag twice
    shape = shape_of(sched)
    assert shape.placement == "other"
    assert check_runtimes(shape)["torchtitan"].rule == (
        "torchtitan places stages in a loop, or in a V with 2 per rank; hanayo's placement is "
        "neither (the CSV would load and hang)")
    assert check_runtimes(shape)["torch"].short == "csv"


def test_torchtitan_runs_a_v_csv_named_as_zbv():
    sched = registry.generate("v-half", 4, 8, 2)
    shape = shape_of(sched)
    assert shape.placement == "v"
    assert check_runtimes(shape)["torchtitan"].how == "csv (pipeline_parallel_schedule_csv)"


# -- the cited conditions, in the installed runtimes' source ----------------------------------

@pytest.mark.launch
def test_cited_torch_conditions_are_in_torch():
    schedules = pytest.importorskip("torch.distributed.pipelining.schedules")
    assert "n_microbatches < self._num_stages" in inspect.getsource(schedules.Schedule1F1B)
    for cls in (schedules.ScheduleInterleaved1F1B, schedules.ScheduleInterleavedZeroBubble):
        src = inspect.getsource(cls.__init__)
        assert "max(1, n_microbatches // self.pp_group_size)" in src
        assert "n_microbatches % self.number_of_rounds != 0" in src
    src = inspect.getsource(schedules.ScheduleDualPipeV.__init__)
    assert "self.n_local_stages != 2" in src and "n_microbatches < self._num_stages" in src


@pytest.mark.launch
def test_cited_megatron_conditions_are_in_megatron_core():
    sched = pytest.importorskip("megatron.core.pipeline_parallel.schedules")
    src = inspect.getsource(sched.forward_backward_pipelining_with_interleaving)
    assert "config.microbatch_group_size_per_vp_stage > num_microbatches" in src
    assert "config.microbatch_group_size_per_vp_stage < pipeline_parallel_size" in src
    assert "0 < final_microbatch_group_size < pipeline_parallel_size" in src


@pytest.mark.launch
def test_cited_torchtitan_conditions_are_in_torchtitan():
    pp = pytest.importorskip("torchtitan.distributed.pipeline_parallel")
    assert "n_microbatches < num_total_stages" in inspect.getsource(pp._build_pipeline_schedule)
    src = inspect.getsource(pp._get_pp_rank_to_stage_indices_mapping)
    assert "(ScheduleZBVZeroBubble, ScheduleDualPipeV)" in src and '"loop"' in src
