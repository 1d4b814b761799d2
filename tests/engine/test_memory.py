"""Memory per rank: static weights, activations of in-flight microbatches, recompute, OOM."""

from __future__ import annotations

import pytest

from simulator import OutOfMemoryError, simulate
from simulator.cli.main import main
from simulator.system import SystemConfig
from simulator.workload import Comm, CommGroup, CommType, uniform_workload

SYS = SystemConfig()   # activation_factor 17 x pp_comm per row, 16 B per parameter
ACT = 17 * 1000        # one row's stashed activations with pp_comm 1000


def peaks(result):
    return [s["peak_memory_bytes"] for s in result.to_dict()["stages"]]


def test_1f1b_first_stage_holds_p_microbatches_gpipe_holds_m():
    wl = uniform_workload(4, pp_comm=1000)
    one = simulate(wl, "1f1b", SYS, pp=4, microbatches=8)
    assert peaks(one) == [4 * ACT, 3 * ACT, 2 * ACT, 1 * ACT]
    gp = simulate(wl, "gpipe", SYS, pp=4, microbatches=8)
    assert peaks(gp) == [8 * ACT] * 4


def test_static_memory_from_weight_gradient_bytes():
    # DP all-reduce of 2000 B per row = 1000 bf16 gradients = 1000 parameters x 16 B
    ar = Comm(CommType.ALLREDUCE, CommGroup.DP, 2000, "ALLREDUCE")
    wl = uniform_workload(8, pp_comm=1000, all_gpus=8, wg_comm=ar)
    d = simulate(wl, "1f1b", SYS, pp=4, microbatches=8).to_dict()
    assert [s["static_memory_bytes"] for s in d["stages"]] == [2 * 16000.0] * 4
    assert [s["peak_memory_bytes"] for s in d["stages"]] == [
        32000 + k * 2 * ACT for k in (4, 3, 2, 1)]


def test_recompute_keeps_only_the_checkpoint_input():
    # 4 rows on one stage, checkpoint 0, recompute initiated at 3: rows 1-2 keep nothing,
    # row 0 keeps its input (pp_comm), row 3 keeps all: 1000 + 17000 instead of 4 x 17000.
    # The backward that recomputes rows 0-2 holds their stash again while it runs (transient)
    plain = uniform_workload(4, pp_comm=1000)
    ckpt = uniform_workload(4, pp_comm=1000, checkpoints=(0,), checkpoint_initiates=(3,))
    a = simulate(plain, "gpipe", SYS, pp=1, microbatches=3)
    b = simulate(ckpt, "gpipe", SYS, pp=1, microbatches=3)
    assert peaks(a) == [3 * 4 * ACT]
    assert peaks(b) == [3 * (1000 + ACT) + 3 * ACT]
    at_peak = b.to_dict()["stages"][0]
    assert (at_peak["peak_memory_action"], at_peak["peak_memory_breakdown"]["transient"]) == (
        "0B0", 3 * ACT)


def test_two_weight_versions_of_2bw_cost_one_more_copy_of_the_weights():
    ar = Comm(CommType.ALLREDUCE, CommGroup.DP, 2000, "ALLREDUCE")
    wl = uniform_workload(4, pp_comm=1000, all_gpus=8, wg_comm=ar)
    d = simulate(wl, "2bw", SYS, pp=4, microbatches=4).to_dict()
    # 1000 parameters x 16 B + one extra bf16 copy (2 B each)
    assert [s["static_memory_bytes"] for s in d["stages"]] == [16000.0 + 2000.0] * 4


def test_memory_limit_reports_rank_time_action_and_exact_bytes():
    wl = uniform_workload(4, pp_comm=1000)
    limit = 4 * ACT - 1
    with pytest.raises(OutOfMemoryError) as err:
        simulate(wl, "1f1b", SYS, pp=4, microbatches=8, memory_limit_gb=limit / 1e9)
    assert str(err.value) == ("rank 0 out of memory at t=3000 ns starting 0F3: needs 68000 bytes, "
                              "limit 67999 bytes (1 bytes over)")
    assert err.value.exit_code == 4
    # exactly at the limit is fine
    simulate(wl, "1f1b", SYS, pp=4, microbatches=8, memory_limit_gb=4 * ACT / 1e9)


def test_cli_memory_limit_exit_code(tmp_path, capsys):
    p = tmp_path / "w.txt"
    p.write_text("HYBRID_TRANSFORMER model_parallel_NPU_group: 1 pp: 2 ga: 4 all_gpus: 2 "
                 "pp_comm: 1000000000\n2\n"
                 "a -1 10 NONE 0 10 NONE 0 10 NONE 0 0\nb -1 10 NONE 0 10 NONE 0 10 NONE 0 0\n")
    # 17 x 1 GB of activations per microbatch; 1F1B's first stage wants two of them; the
    # limit is in GiB: 30 x 2^30 bytes
    assert main(["run", str(p), "--memory-limit", "30"]) == 4
    err = capsys.readouterr().err
    assert err == ("pipesim: error: rank 0 out of memory at t=10 ns starting 0F1: needs "
                   "34000000000 bytes, limit 32212254720 bytes (1787745280 bytes over)\n")
