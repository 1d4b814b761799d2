"""The kernel benchmark's predictions run without a GPU; the published-runs benchmark's helpers."""

from __future__ import annotations

from benchmarks import bench_kernels_gpu, bench_published_runs


def test_kernel_benchmark_predicts_every_op_without_torch(capsys):
    assert bench_kernels_gpu.main(["--predict-only", "--gpu", "a100"]) == 0
    out = capsys.readouterr().out
    # the 22B QKV GEMM: 11 waves of 128x128 tiles on 108 SMs (tests/workload/test_kernels.py)
    assert "22B tp8 qkv" in out and "892.4" in out
    rows = bench_kernels_gpu.predictions("a100")
    assert len(rows) == 22 and all(r["predicted_ns"] > 0 for r in rows)


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
