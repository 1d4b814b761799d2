"""SimAI's analytical pipeline terms and the simulated pipeline bubble, on hand-made inputs."""

from __future__ import annotations

import pytest

from simulator import simulate
from simulator.metrics import SIMAI_BUBBLE_FORMULA, pipeline_bubble, simai_pipeline_terms
from simulator.system.config import system_from_dict
from simulator.workload import (Comm, CommGroup, CommType, Header, Workload, make_layer,
                                uniform_workload)

FAST = {"bandwidth_gbps": 800, "latency_ns": 0}
SYSTEM = system_from_dict({"collectives": {"tp": FAST, "dp": FAST}})


def comm(kind: CommType, group: CommGroup, nbytes: int) -> Comm:
    return Comm(kind, group, nbytes, kind.value)


def workload() -> Workload:
    """tp 2, pp 4, vpp 2, ga 8, dp 16 / (2 x 4) = 2. On the 800 Gb/s, 0-latency rings of 2:
    all-gather of 8000 B = 1/2 x 80 = 40 ns; all-reduce of 8000 B = 2 x 1/2 x 80 = 80 ns;
    a 4-byte forward all-reduce is rounded up to 4096 B (SimAI): 2 x 1/2 x 40.96 = 40.96 ns."""
    h = Header(policy="HYBRID_TRANSFORMER_FWD_IN_BCKWD", tp=2, pp=4, vpp=2, ga=8, all_gpus=16,
               pp_comm=1000)
    ag = comm(CommType.ALLGATHER, CommGroup.TP, 8000)
    ar = comm(CommType.ALLREDUCE, CommGroup.TP, 8000)
    dp = comm(CommType.ALLREDUCE, CommGroup.DP, 8000)
    rows = (
        make_layer(0, 100, 0, 50, name="embedding_layer", fwd_comm=ar),
        make_layer(1, 200, 200, 200, name="attention", fwd_comm=ag, ig_comm=ar, wg_comm=dp),
        make_layer(2, 200, 200, 200, name="mlp", fwd_comm=ag, ig_comm=ar, wg_comm=dp),
        make_layer(3, 0, 0, 0, name="optimizer1",
                   fwd_comm=comm(CommType.ALLREDUCE, CommGroup.TP, 4)),
    )
    return Workload(path="hand.txt", header=h, layers=rows)


def test_terms_by_hand():
    t = simai_pipeline_terms(workload(), SYSTEM)
    # pre_bubble: rows not named embedding_layer, compute + forward and input-grad comm
    #   attention, mlp: 600 + 40 + 80 each; optimizer1: 40.96  -> 1480.96
    assert t["pre_bubble_ns"] == pytest.approx(1480.96)
    # bubble = 1480.96 x (4 - 1) / (8 x 2)
    assert t["bubble_ns"] == pytest.approx(277.68)
    # compute: every row (the embedding's 150 too); comm: every collective, DP included
    assert t["compute_ns"] == 1350.0
    assert t["exposed_comm_ns"] == pytest.approx(80 + 2 * (40 + 80 + 80) + 40.96)
    # PP term: 2 x vpp x ga x pp_comm / p2p bandwidth = 2 x 2 x 8 x 1000 B x 8 / 400 Gb/s,
    # times (1 - pp_overlap_ratio) = 0 by SimAI's default
    assert t["pp_comm_unoverlapped_ns"] == 640.0 and t["pp_comm_ns"] == 0.0
    assert t["iteration_ns"] == pytest.approx(1350 + 520.96 + 277.68)
    assert t["bubble_ratio"] == pytest.approx(277.68 / 2148.64)
    assert (t["pp"], t["ga"], t["vpp"], t["formula"]) == (4, 8, 2, SIMAI_BUBBLE_FORMULA)


def test_overrides_and_overlap_ratio():
    t = simai_pipeline_terms(workload(), SYSTEM, pp=2, ga=4, vpp=1, pp_overlap_ratio=0.25)
    assert t["bubble_ns"] == pytest.approx(1480.96 * 1 / 4)
    assert t["pp_comm_ns"] == pytest.approx(2 * 1 * 4 * 1000 * 8 / 400 * 0.75)


def test_compute_scale_applies_to_compute_only():
    scaled = system_from_dict({"collectives": {"tp": FAST, "dp": FAST},
                               "gpu": {"compute_scale": 2.0}})
    t = simai_pipeline_terms(workload(), scaled)
    assert t["compute_ns"] == 2700.0
    assert t["pre_bubble_ns"] == pytest.approx(2 * 1200 + 2 * 120 + 40.96)


def test_pp1_has_no_bubble():
    wl = workload()
    assert simai_pipeline_terms(wl, SYSTEM, pp=1)["bubble_ns"] == 0.0


def test_simulated_bubble_of_uniform_1f1b_is_p_minus_1_times_f_plus_b():
    """P=4, M=8, one layer per stage with F = I = W = 1000 ns: B = 2000, so 1F1B runs
    (M + P - 1)(F + B) = 33000 ns and every rank idles (P - 1)(F + B) = 9000 ns of it."""
    r = simulate(uniform_workload(4, 1000, 1000, 1000, pp=4, ga=8), "1f1b")
    b = pipeline_bubble(r.records, r.schedule)
    assert b["span_ns"] == 33000.0
    assert b["per_rank_ns"] == [9000.0] * 4
    assert (b["mean_ns"], b["max_ns"], b["min_ns"]) == (9000.0, 9000.0, 9000.0)
    # SimAI's formula on the same rows (one rank's: F + B per microbatch, ga of them) agrees
    one_rank = Workload(path="x", header=r.workload.header, layers=r.workload.layers[:1] * 8)
    t = simai_pipeline_terms(one_rank)
    assert t["bubble_ns"] == 9000.0
