"""The kernel benchmark's predictions run without a GPU; the published-runs benchmark's helpers."""

from __future__ import annotations

import pytest

from benchmarks import bench_kernels_gpu, bench_published_runs
from simulator.workload.kernel_presets import kernel_preset


def test_kernel_benchmark_predicts_every_op_without_torch(capsys):
    assert bench_kernels_gpu.main(["--predict-only", "--gpu", "a100"]) == 0
    out = capsys.readouterr().out
    # the 22B QKV GEMM: 11 waves of 128x128 tiles on 108 SMs (tests/workload/test_kernels.py)
    assert "22B tp8 qkv" in out and "1037.3" in out
    rows = bench_kernels_gpu.predictions("a100")
    assert len(rows) == 25 + 18 * len(bench_kernels_gpu.ZB_SHAPES)
    assert all(r["predicted_ns"] > 0 for r in rows if r["kind"] != "zb_host")
    # the elementwise rate's own shape: 4M FP32 read and written, 8 B each, at 79.3 % of HBM
    scale = next(r for r in rows if r["op"].startswith("a * 1.2, 4M"))
    assert scale["predicted_ns"] == round(8 * 4 * 2 ** 20 / (2.039e3 * 0.793)) == 20_752


def test_zero_bubble_shape_rows_price_the_layer_as_generate_does():
    rows = {r["op"]: r["predicted_ns"] for r in bench_kernels_gpu.predictions("a100")}
    # the 1.5B layer (b 6, s 1024, h 2304, fp16, no flash) as `pipesim inspect --ops` prices a
    # generated file's four rows: F 2,176,776 + 347,192 + 1,311,232 + 1,195,920 ns, and so on
    assert rows["zb 1.5B layer F"] == 5_031_120
    assert rows["zb 1.5B layer B (input grads)"] == 5_842_555
    assert rows["zb 1.5B layer W (weight grads)"] == 3_400_911
    # 6 x 24 x 1024^2 scores: the softmax reads and writes 2 B each, as a copy does, at the
    # elementwise rate (79.3 % of 2,039 GB/s); the dropout adds its 1-byte mask
    assert rows["zb 1.5B copy of the scores"] == rows["zb 1.5B core scale_mask_softmax"] \
        == round(4 * 6 * 24 * 1024 ** 2 / (2.039e3 * 0.793)) == 373_536
    assert rows["zb 1.5B core attention_dropout"] == round(5 * 6 * 24 * 1024 ** 2
                                                          / (2.039e3 * 0.793))
    assert rows["zb 1.5B host time a synchronized F adds"] == 0


@pytest.mark.gpu_script
def test_zero_bubble_rows_measure_on_the_cpu_as_a_dry_run():
    pytest.importorskip("torch")
    rows = bench_kernels_gpu.zb_predictions(kernel_preset("a100"), "tiny", 2, 64, 128, 4)
    by_op = {r["op"]: r for r in rows}
    bench_kernels_gpu.zb_measure(by_op, "tiny", 2, 64, 128, 4, repeats=2, dev="cpu")
    assert [r["op"] for r in rows if "measured_ns" not in r] == []
    assert all(r["measured_ns"] > 0 for r in rows if r["kind"] not in ("zb_host", "zb_layer"))


def test_stage_split_and_comm_free_rows():
    assert bench_published_runs.stage_split(105, 35 * 3) == [1] * 105
    assert bench_published_runs.stage_split(10, 4) == [3, 3, 2, 2]
    row = "mlp_row\t-1\t10\tALLREDUCE\t100\t20\tNONE\t0\t30\tALLREDUCE\t400\t0"
    text = "header\n1\n" + row
    assert bench_published_runs.without_comm(text, (3, 6)).split("\n")[2] == (
        "mlp_row\t-1\t10\tNONE\t0\t20\tNONE\t0\t30\tALLREDUCE\t400\t0")
    assert bench_published_runs.without_comm(text, (9,)).split("\n")[2].endswith(
        "30\tNONE\t0\t0")


def test_size_trend_counts_pairs_more_than_3_percent_apart():
    rows = [{"id": "nara-a", "measured": {"tflops_per_gpu": 100}, "predicted": 110},
            {"id": "nara-b", "measured": {"tflops_per_gpu": 102}, "predicted": 90},   # < 3 %
            {"id": "nara-c", "measured": {"tflops_per_gpu": 120}, "predicted": 100}]
    ok, total, wrong = bench_published_runs.size_trend(rows, [])
    # a-c ordered wrong (110 > 100), b-c right; a-b within 3 %: not counted
    assert (ok, total, wrong) == (1, 2, ["nara-a / nara-c"])


_BASE = ("--num-layers 24 --hidden-size 2304 --num-attention-heads 24 --seq-length 2048 "
         "--max-position-embeddings 2048 --micro-batch-size 1 --global-batch-size 512 "
         "--tensor-model-parallel-size 1 --pipeline-model-parallel-size 1 --vocab-size 51200 ")


def _run(args: str, **kw) -> dict:
    return {"id": "r", "tp": 1, "pp": 1, "dp": 32, "gpus": 32, "megatron_args": _BASE + args,
            "assumptions": ["a"], "schedule": "1f1b", "sequence_parallel": False, **kw}


def test_the_stages_exchange_as_the_sources_megatron_code_does():
    p2p = bench_published_runs.megatron_p2p_args
    # 2021-22 code: batched and synchronized, split over TP without sequence parallelism
    assert p2p({"id": "nara-x", "schedule": "interleaved-1f1b", "sequence_parallel": False}) \
        == ("--p2p", "batched", "--p2p-scatter-gather")
    assert p2p({"id": "kort-x", "schedule": "1f1b", "sequence_parallel": True}) == (
        "--p2p", "batched")
    # later code: the non-interleaved 1F1B batches, the rest overlaps
    assert p2p({"id": "zb-x", "schedule": "1f1b", "sequence_parallel": False}) == (
        "--p2p", "batched")
    for schedule in ("interleaved-1f1b", "zb-h1", "zb-h2", "zb-greedy"):
        assert p2p({"id": "zb-x", "schedule": schedule, "sequence_parallel": False}) == (
            "--p2p", "async")
    assert bench_published_runs.assumptions(_run("--fp16"))[-1] == (
        "point-to-point as Megatron-LM's code of the source exchanges it: --p2p batched "
        "(bench_published_runs.megatron_p2p_args)")


def test_a_run_is_launched_with_the_ddp_its_megatron_args_set():
    # --fp16 without --accumulate-allreduce-grads-in-fp32: the 2021 local DDP, reduced in fp16
    # after the backward
    assert bench_published_runs.megatron_ddp_args(_run("--fp16")) == (
        "--megatron-ddp", "--grad-reduce-dtype", "fp16", "--fp16-loss-scale")
    assert bench_published_runs.megatron_ddp_args(
        _run("--bf16 --use-distributed-optimizer --overlap-grad-reduce")) == (
        # the sharded state is counted by the weights' dtype, which --bf16 states
        "--param-dtype", "bf16", "--megatron-ddp", "--use-distributed-optimizer",
        "--overlap-grad-reduce", "--grad-reduce-dtype", "fp32")
    assert bench_published_runs.megatron_ddp_args({"id": "r", "megatron_args": ""}) == ()
    line = bench_published_runs.assumptions(_run("--fp16"))
    assert line[0] == "a" and line[1].startswith(
        "data parallelism as the run's Megatron-LM launch: --megatron-ddp --grad-reduce-dtype "
        "fp16 --fp16-loss-scale (from its megatron_args;")


def test_a_split_pipesim_refuses_still_gives_the_runs_ddp():
    # 22 layers over 8 ranks, interleaved: Megatron's divisibility rule refuses the split; the
    # run states its own stage_layers, and its DDP flags are read all the same
    run = _run("--fp16 --num-layers-per-virtual-pipeline-stage 1", pp=8, dp=1,
               gpus=8)
    run["megatron_args"] = run["megatron_args"].replace(
        "--num-layers 24", "--num-layers 22").replace(
        "--pipeline-model-parallel-size 1", "--pipeline-model-parallel-size 8")
    assert bench_published_runs.megatron_ddp_args(run) == (
        "--megatron-ddp", "--grad-reduce-dtype", "fp16", "--fp16-loss-scale")


def test_a_run_is_corrected_to_its_authors_script():
    corrections = {"sources": {"nara": "the script"},
                   "runs": {"nara-x": {"micro_batch": 2, "layers_per_virtual_stage": 5,
                                       "ddp_impl": "torch", "replaces": ["a"]}}}
    run = _run("--fp16", layers=60, pp=4, micro_batch=1, vpp=1, schedule="1f1b")
    run["id"] = "nara-x"
    out = bench_published_runs.corrected(run, corrections)
    # 60 layers on 4 stages at 5 a virtual stage: 3 chunks a rank, Megatron's interleaved 1F1B
    assert (out["micro_batch"], out["vpp"], out["schedule"]) == (2, 3, "interleaved-1f1b")
    assert out["megatron_args"].endswith(
        "--vocab-size 51200 --fp16 --micro-batch-size 2 --num-layers-per-virtual-pipeline-stage "
        "5 --overlap-grad-reduce --ddp-bucket-size 13107200")
    assert "--micro-batch-size 1 " not in out["megatron_args"]
    # PyTorch's DDP: 25 MiB buckets of fp16 gradients, overlapped with the last backward
    assert bench_published_runs.megatron_ddp_args(out) == (
        "--megatron-ddp", "--overlap-grad-reduce", "--ddp-bucket-size", "13107200",
        "--grad-reduce-dtype", "fp16", "--fp16-loss-scale")
    assert out["assumptions"] == [
        "as its authors' script runs it (the script): micro-batch size 2; interleaved 1F1B, 5 "
        "layer(s) a virtual stage (vpp 3); PyTorch DDP: gradients all-reduced in 25 MiB buckets "
        "of fp16 during the last microbatch's backward (in place of runs.json's 'a')"]
    # the input is left as it was; a run without a correction comes back as it is
    assert run["micro_batch"] == 1 and bench_published_runs.corrected(run | {"id": "y"},
                                                                      corrections)["vpp"] == 1
