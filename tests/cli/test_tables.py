"""`plan` prints its ranking in the one table style, in GiB/MiB like `run`, and `run` of the
winner prints the same peak in the same unit."""

from __future__ import annotations

import pytest

from simulator.cli.main import main

HEADER = ("HYBRID_TRANSFORMER_FWD_IN_BCKWD model_parallel_NPU_group: 1 ep: 1 pp: 4 vpp: 1 ga: 8 "
          "all_gpus: 4 checkpoints: 0 checkpoint_initiates: 0 pp_comm: 0\n")
ROW = "layer -1 1000 NONE 0 1000 NONE 0 1000 NONE 0 0\n"


@pytest.fixture
def files(tmp_path):
    """8 identical layers (F = I = W = 1 us), 1000 parameters (16 B each) and 1 MiB of
    activations a layer and microbatch."""
    wl = tmp_path / "u.txt"
    wl.write_text(HEADER + "8\n" + ROW * 8)
    system = tmp_path / "mem.yaml"
    system.write_text("memory:\n  params_per_layer: 1000\n  activation_bytes_per_layer: 1048576\n")
    return wl, system


def test_plan_table_and_units(files, capsys):
    wl, system = files
    # --memory-limit is GiB: 0.01 GiB = 10.24 MiB keeps GPipe only with full recompute
    assert main(["plan", str(wl), "--gpus", "2", "-s", "1f1b,gpipe", "-j", "1", "--confirm",
                 "1", "--system", str(system), "--memory-limit", "0.01"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[2:10] == [
        "#  pp  dp  vpp  M  schedule                iteration  p95   bubble  peak mem/GPU  "
        "engine     runs on",
        "─" * 114,
        "1   1   2    1  4  1f1b                    96.000 us    -   0.00 %      8.12 MiB  "
        "simpy      torch megatron titan",
        "2   1   2    1  4  auto K=1                96.000 us    -   0.00 %      8.12 MiB  "
        "evaluator  torch(csv) titan(csv)",
        "3   2   1    1  8  1f1b                   108.000 us    -  11.11 %      8.06 MiB  "
        "evaluator  torch megatron titan",
        "4   1   2    1  4  gpipe, full recompute  128.000 us    -   0.00 %      1.12 MiB  "
        "evaluator  torch titan",
        # torchtitan builds no pipeline on one rank: two stages there run on torch alone,
        # so the candidate ranks after every launchable one
        "5   1   2    2  4  auto K=2                96.000 us    -   0.00 %      8.12 MiB  "
        "evaluator  torch(csv)",
        "",
    ]
    # the pruned candidates, each with the bound that pruned it
    # (and the zero-bubble fork's layouts, at 1p and 2p and its V, on the one degree of two
    # ranks)
    assert lines[10:18] == [
        "not run, their lower bound above the best found (the 5 lowest of 8; every one in "
        "--json):",
        "pp  dp  vpp  M  schedule  lower bound",
        "─" * 37,
        " 2   1    2  8  auto K=4    97.000 us",
        " 2   1    2  8  auto K=8    97.000 us",
        " 2   1    2  8  v-zb        97.000 us",
        " 2   1    1  8  auto K=2    98.000 us",
        " 2   1    1  8  auto K=4    98.000 us",
    ]
    assert lines[19:22] == ["dropped 12:",
                            "  8 x not run: lower bound above the best found (listed above)",
                            "  4 x over the memory limit"]
    # the winner's run: the same peak, the same unit
    assert main(["run", str(wl), "--gpus", "2", "--pp", "1", "-m", "4", "-s", "1f1b",
                 "--system", str(system), "--memory-limit", "0.01"]) == 0
    out = capsys.readouterr().out
    assert "  peak memory         8.12 MiB (rank 0, in 0F0 at 0 ns)" in out.splitlines()


def test_plan_refusal_in_gib(files, capsys):
    wl, system = files
    assert main(["plan", str(wl), "--gpus", "2", "-s", "1f1b", "-j", "1", "--system",
                 str(system), "--memory-limit", "0.001"]) == 2
    assert capsys.readouterr().err == (
        "pipesim: error: --memory-limit 1.02 MiB: no feasible configuration; the smallest peak "
        "memory found is 1.06 MiB per GPU (pp 2, vpp 1, 1f1b, full recompute); raise "
        "--memory-limit, add GPUs (--gpus) or lower --global-batch-size\n")
