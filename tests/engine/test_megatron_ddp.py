"""Megatron-LM's data parallelism (engine/tail.py) and --tp-comm-overlap (engine/costs.py), under
known costs: buckets filled in backward order and reduced as the backward fills them, the
distributed optimizer's reduce-scatter and all-gather, the blocking reduction without the
overlap flags, the optimizer step's bytes over HBM bandwidth; every walk gives one timeline.

The workload: one stage, one microbatch, four layers of F 1000 / I 700 / W 500 ns, each with a
DP all-reduce row of 20,000 B at 4 B a gradient (5,000 parameters). Its backward runs, last
layer first, W then I per layer: layer 3's gradient is done 500 ns into B, layer 2's 1700,
layer 1's 2900, layer 0's 4100; B starts at 4000 (after F) and ends at 8800. DP = 4 on a
400 Gb/s, 2000 ns link (the built-in DP figures)."""

from __future__ import annotations

import pytest

from simulator.engine.costs import chunk_costs
from simulator.engine.evaluator import evaluate
from simulator.engine.options import ADAM_STEP_BYTES_PER_PARAM, DDPSettings, EngineOptions
from simulator.engine.runtime import Runtime, _Run
from simulator.engine.tail import chunk_buckets
from simulator.errors import ConfigError
from simulator.run_options import RunOptions
from simulator.schedules import generate
from simulator.system.config import LinkConfig, MemoryConfig, SystemConfig
from simulator.system.topology import LinkModel
from simulator.workload import Comm, CommGroup, CommType, uniform_workload
from simulator.workload.partition import partition

from .cases import assert_same

DP_ROW = Comm(CommType.ALLREDUCE, CommGroup.DP, 20000, "ALLREDUCE")
HBM_GBS = 1000.0      # GB/s: 1000 bytes a ns
SYSTEM = SystemConfig(memory=MemoryConfig(grad_bytes_per_param=4.0, bandwidth_gbs=HBM_GBS))


def ring(kind: str, nbytes: float, n: int = 4, gbps: float = 400.0, lat: float = 2000.0):
    serial = nbytes * 8 / gbps
    if kind == "ar":
        return 2 * (n - 1) / n * serial + 2 * (n - 1) * lat
    return (n - 1) / n * serial + (n - 1) * lat


def _run(ddp: DDPSettings | None):
    sched = generate("1f1b", 1, 1, 1)
    wl = uniform_workload(4, 1000, 700, 500, pp=1, ga=1, all_gpus=4, wg_comm=DP_ROW)
    rt = Runtime(sched, partition(wl, 1), wl.header, SYSTEM, iterations=1,
                 options=EngineOptions(p2p="async", ddp=ddp))
    step_by_step = _Run(rt, look_ahead=False).run()
    assert_same(step_by_step, rt.run())
    assert_same(step_by_step, evaluate(rt))
    return step_by_step


def test_buckets_fill_in_backward_order_and_close_at_their_size():
    wl = uniform_workload(4, wg_comm=DP_ROW)
    buckets = chunk_buckets(wl.layers, 4.0, 10000)
    assert [(b.layers, b.params) for b in buckets] == [((3, 2), 10000.0), ((1, 0), 10000.0)]
    assert [b.layers for b in chunk_buckets(wl.layers, 4.0, None)] == [(3, 2, 1, 0)]
    # a bucket closes once it holds the size or more: 5,000 + 5,000 >= 7,000
    assert [b.layers for b in chunk_buckets(wl.layers, 4.0, 7000)] == [(3, 2), (1, 0)]


def test_overlapped_buckets_reduce_as_the_backward_fills_them():
    rec = _run(DDPSettings(overlap_grad_reduce=True, bucket_params=10000))
    ar = ring("ar", 10000 * 4)                     # 13,200 ns: fp32 gradients of 10,000 params
    got = [(c.layer, c.nbytes, c.ready, c.start, c.end) for c in rec.collectives]
    assert got == [(2, 40000, 5700.0, 5700.0, 5700.0 + ar),
                   (0, 40000, 8100.0, 5700.0 + ar, 5700.0 + 2 * ar)]
    # the step on all 20,000 params (38 B each) and the zeroing of their fp32 gradients (4 B)
    step = 20000 * (38 + 4) / HBM_GBS              # 840 ns
    assert rec.iteration_bounds == [(0.0, 5700.0 + 2 * ar + step)]


def test_without_overlap_the_reduction_waits_after_the_backward():
    rec = _run(DDPSettings())
    ar = ring("ar", 20000 * 4)                     # one bucket: the whole chunk
    assert [(c.nbytes, c.ready, c.start, c.end) for c in rec.collectives] == [
        (80000, 8800.0, 8800.0, 8800.0 + ar)]
    assert rec.rank_finish[0] == [8800.0 + ar]     # the rank waited for it
    assert rec.iteration_bounds == [(0.0, 8800.0 + ar + 840.0)]


def test_distributed_optimizer_reduce_scatters_steps_a_shard_and_all_gathers():
    rec = _run(DDPSettings(overlap_grad_reduce=True, distributed_optimizer=True,
                           bucket_params=10000))
    rs = ring("rs", 10000 * 4)                     # 6,600 ns
    ag = ring("ag", 10000 * 2)                     # 6,300 ns: bf16 weights of a bucket
    assert [(c.start, c.end) for c in rec.collectives] == [(5700.0, 5700.0 + rs),
                                                          (5700.0 + rs, 5700.0 + 2 * rs)]
    # the step on 1/DP of the parameters; every rank zeroes its whole gradient buffer
    step = (20000 / 4 * 38 + 20000 * 4) / HBM_GBS   # 190 + 80 = 270 ns
    assert rec.iteration_bounds == [(0.0, 5700.0 + 2 * rs + step + 2 * ag)]


def test_overlapped_param_gather_shows_only_beyond_one_forward():
    rec = _run(DDPSettings(overlap_grad_reduce=True, distributed_optimizer=True,
                           overlap_param_gather=True, bucket_params=10000))
    rs, ag = ring("rs", 40000), ring("ag", 20000)
    # 12,600 ns of all-gather behind the next iteration's 4,000 ns forward: 8,600 ns show
    assert rec.iteration_bounds == [(0.0, 5700.0 + 2 * rs + 270.0 + (2 * ag - 4000.0))]


def test_step_bytes_are_megatrons_passes():
    # norm 4 + Adam 28 + master-to-model copy 6 (megatron/optimizer/optimizer.py, 6985e58)
    assert ADAM_STEP_BYTES_PER_PARAM == 38.0


def test_bf16_reduction_halves_the_bytes():
    rec = _run(DDPSettings(overlap_grad_reduce=True, bucket_params=10000, grad_bytes=2.0))
    assert [c.nbytes for c in rec.collectives] == [20000, 20000]


def test_megatron_default_bucket_size():
    ddp = DDPSettings(overlap_grad_reduce=True)
    assert ddp.bucket_size(8) == 40_000_000 and ddp.bucket_size(64) == 64_000_000
    assert DDPSettings().bucket_size(64) is None


def test_files_own_dp_rule_unchanged_without_megatron_ddp():
    rec = _run(None)
    # one collective per row, each as soon as its gradient is done (5 KB x 4 B)
    assert [(c.layer, c.ready) for c in rec.collectives] == [
        (3, 4500.0), (2, 5700.0), (1, 6900.0), (0, 8100.0)]


@pytest.mark.parametrize("tp_ns,expect", [(300.0, 700.0), (2500.0, 2500.0)])
def test_tp_collective_hides_behind_its_gemm_up_to_its_length(tp_ns, expect):
    # the input gradient's TP all-reduce of tp_ns bytes on an 8 Gb/s, 0-latency ring of 2
    # (2 x 1/2 x S x 8 / 8 = tp_ns ns) after a 700 ns GEMM
    system = SystemConfig(collectives=SystemConfig().collectives._replace(
        tp=LinkConfig(8.0, 0.0)))
    comm = Comm(CommType.ALLREDUCE, CommGroup.TP, int(tp_ns), "ALLREDUCE")
    wl = uniform_workload(1, 1000, 700, 500, tp=2, ig_comm=comm)
    links = LinkModel(wl.header, system)
    blocking = chunk_costs(wl.layers, {}, wl.header, system, links)
    hidden = chunk_costs(wl.layers, {}, wl.header, system, LinkModel(wl.header, system),
                         tp_overlap=True)
    assert blocking.I.duration == 700.0 + tp_ns
    assert hidden.I.duration == expect            # hidden up to the GEMM's 700 ns, no more
    assert hidden.I.comm == expect - 700.0


def test_run_options_refuse_what_megatron_refuses():
    with pytest.raises(ConfigError, match="^--overlap-param-gather: needs "
                                          "--use-distributed-optimizer"):
        RunOptions(overlap_param_gather=True).ddp_settings()
    with pytest.raises(ConfigError, match="^--ddp-bucket-size: needs --overlap-grad-reduce"):
        RunOptions(ddp_bucket_size=1000).ddp_settings()
    assert RunOptions().ddp_settings() is None
    got = RunOptions(overlap_grad_reduce=True, grad_reduce_dtype="bf16").ddp_settings()
    assert got == DDPSettings(overlap_grad_reduce=True, grad_bytes=2.0)


def test_tied_embedding_gradient_is_all_reduced_between_first_and_last_rank():
    # two stages of two layers (F 1000, I 700, W 500 each), one microbatch, DP 1: rank 0's F
    # 0-2000, rank 1's F 2000-4000 and B 4000-6400, rank 0's B 6400-8800. The tied embedding's
    # 1,000 parameters: 4,000 B of fp32 gradient, all-reduced by the two ranks on a 1 B/ns link
    # (2 x 1/2 x 4000 ns) once both are done, then each rank's step on its 10,000 parameters
    # (38 + 4 B each at 1000 B/ns: 420 ns)
    system = SystemConfig(links=LinkConfig(bandwidth_gbps=8.0, latency_ns=0.0),
                          memory=MemoryConfig(grad_bytes_per_param=4.0, bandwidth_gbs=HBM_GBS))
    wl = uniform_workload(4, 1000, 700, 500, pp=2, ga=1, all_gpus=2, wg_comm=DP_ROW)
    tied = wl._replace(header=wl.header._replace(embedding_sync_params=1000))
    sched = generate("1f1b", 2, 1, 1)

    def bounds(w):
        rt = Runtime(sched, partition(w, 2), w.header, system, iterations=1,
                     options=EngineOptions(p2p="async", ddp=DDPSettings()))
        step_by_step = _Run(rt, look_ahead=False).run()
        assert_same(step_by_step, rt.run())
        assert_same(step_by_step, evaluate(rt))
        return step_by_step.iteration_bounds

    assert bounds(wl) == [(0.0, 8800.0 + 420.0)]
    assert bounds(tied) == [(0.0, 8800.0 + 4000.0 + 420.0)]
    # one stage: no embedding group, nothing to all-reduce
    one = tied._replace(header=tied.header._replace(pp=1, all_gpus=1))
    rt = Runtime(generate("1f1b", 1, 1, 1), partition(one, 1), one.header, system,
                 iterations=1, options=EngineOptions(p2p="async", ddp=DDPSettings()))
    assert rt.run().iteration_bounds == [(0.0, 4 * 2200.0 + 20000 * 42 / HBM_GBS)]


def test_the_tied_embedding_key_without_megatron_ddp_is_said(tmp_path):
    from simulator import simulate

    wl = uniform_workload(4, 1000, 700, 500, pp=2, ga=1, all_gpus=2, wg_comm=DP_ROW)
    tied = wl._replace(header=wl.header._replace(embedding_sync_params=1000))
    res = simulate(tied, "1f1b", SYSTEM, pp=2, microbatches=1)
    assert any("embedding_sync_params 1,000" in n and "--megatron-ddp" in n for n in res.notes)
    res = simulate(tied, "1f1b", SYSTEM, pp=2, microbatches=1, megatron_ddp=True)
    assert any("the tied word embedding's gradient, 4,000 B" in n for n in res.notes)


def test_fp16_loss_scaling_adds_the_unscale_pass_to_the_step():
    # the step's 38 B and the loss scaler's unscale-and-check, 8 B, on all 20,000 params, then
    # the gradient buffer zeroed (4 B): 20000 x 50 / 1000 B/ns = 1000 ns after the reduction
    ddp = RunOptions(fp16_loss_scale=True).ddp_settings()
    assert ddp.step_bytes_per_param == 46.0
    rec = _run(ddp)
    ar = ring("ar", 20000 * 4)
    assert rec.iteration_bounds == [(0.0, 8800.0 + ar + 1000.0)]


def test_the_logging_passes_read_the_main_gradients_and_the_parameters():
    """--log-num-zeros-in-grad reads each fp32 main gradient the step updates (4 B, the shard
    with the distributed optimizer); --log-params-norm reads the fp32 main copies with bf16
    weights (4 B, the shard) and every training weight otherwise (fp16 2 B, fp32 4 B);
    --calculate-per-token-loss scales the whole gradient buffer (read and write)."""
    rs, ag = ring("rs", 10000 * 4), ring("ag", 10000 * 2)

    def bounds(**flags):
        ddp = RunOptions(overlap_grad_reduce=True, use_distributed_optimizer=True,
                         ddp_bucket_size=10000, **flags).ddp_settings()
        return _run(ddp).iteration_bounds

    base = bounds(param_dtype="bf16")
    assert base == [(0.0, 5700.0 + 2 * rs + 270.0 + 2 * ag)]   # the step above: 270 ns
    # the shard's 5,000 main gradients, 4 B each: 20 ns
    assert bounds(param_dtype="bf16", log_num_zeros_in_grad=True) == [
        (0.0, base[0][1] + 5000 * 4 / HBM_GBS)]
    # bf16: the shard's fp32 main copies, 20 ns; both: 40 ns
    assert bounds(param_dtype="bf16", log_params_norm=True) == [
        (0.0, base[0][1] + 5000 * 4 / HBM_GBS)]
    assert bounds(param_dtype="bf16", log_params_norm=True, log_num_zeros_in_grad=True) == [
        (0.0, base[0][1] + 2 * 5000 * 4 / HBM_GBS)]
    # fp16 (the loss scaler's unscale, 8 B on the shard, too): all 20,000 fp16 weights, 2 B
    fp16 = bounds(param_dtype="bf16", fp16_loss_scale=True)
    assert bounds(param_dtype="bf16", fp16_loss_scale=True, log_params_norm=True) == [
        (0.0, fp16[0][1] + 20000 * 2 / HBM_GBS)]
    # --calculate-per-token-loss: the whole fp32 gradient buffer read and written, 8 B on all
    # 20,000 parameters: 160 ns
    assert bounds(param_dtype="bf16", calculate_per_token_loss=True) == [
        (0.0, base[0][1] + 20000 * 8 / HBM_GBS)]
    ddp = RunOptions(log_params_norm=True).ddp_settings()      # fp32 weights: 4 B, unsharded
    assert (ddp.step_bytes_per_param, ddp.unsharded_step_bytes_per_param) == (38.0, 4.0)
    with pytest.raises(ConfigError, match=r"^--log-params-norm: expected Megatron-LM's "
                       r"optimizer, got --fsdp \(torchtitan's FSDP2\)$"):
        RunOptions(fsdp=2, log_params_norm=True).ddp_settings()


def test_megatron_ddp_without_gradient_collectives_is_a_warning():
    # rows without a weight-gradient collective: no bucket, no priced step, said so
    from simulator import simulate

    bare = uniform_workload(4, 1000, 700, 500, pp=1, ga=1, all_gpus=4)
    res = simulate(bare, "1f1b", SYSTEM, pp=1, microbatches=1, megatron_ddp=True)
    assert [w.code for w in res.warnings if w.code == "ddp_without_gradients"] == [
        "ddp_without_gradients"]
    full = uniform_workload(4, 1000, 700, 500, pp=1, ga=1, all_gpus=4, wg_comm=DP_ROW)
    res = simulate(full, "1f1b", SYSTEM, pp=1, microbatches=1, megatron_ddp=True)
    assert not [w for w in res.warnings if w.code == "ddp_without_gradients"]
