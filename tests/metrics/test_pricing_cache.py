"""Cached collective pricing gives the same figures as pricing afresh (issue 16, start-up)."""

from __future__ import annotations

from simulator.metrics import simai_pipeline_terms
from simulator.system.collectives import collective_time_ns
from simulator.system.config import system_from_dict
from simulator.system.topology import LinkModel
from simulator.workload import Comm, CommGroup, CommType, Header, Workload, make_layer

FAST = {"bandwidth_gbps": 800, "latency_ns": 0}
SYSTEM = system_from_dict({"collectives": {"tp": FAST, "dp": FAST}})
HEADER = Header(policy="HYBRID_TRANSFORMER_FWD_IN_BCKWD", tp=2, pp=4, vpp=2, ga=8, all_gpus=16)


def test_equal_comms_price_the_same_and_forward_rounding_is_kept_apart():
    links = LinkModel(HEADER, SYSTEM)
    a = Comm(CommType.ALLREDUCE, CommGroup.TP, 4, "ALLREDUCE")
    b = Comm(CommType.ALLREDUCE, CommGroup.TP, 4, "ALLREDUCE")   # equal, another object
    assert collective_time_ns(a, HEADER, SYSTEM, forward=True, links=links) == 40.96
    assert collective_time_ns(a, HEADER, SYSTEM, links=links) == 0.04   # no 4096 B rounding
    assert collective_time_ns(b, HEADER, SYSTEM, forward=True, links=links) == 40.96
    assert collective_time_ns(a, HEADER, SYSTEM, forward=True, links=links) == 40.96  # memo hit
    assert collective_time_ns(a, HEADER, SYSTEM, forward=True) == 40.96               # no memo
    none = Comm(CommType.NONE, CommGroup.TP, 8000, "NONE")
    assert collective_time_ns(none, HEADER, SYSTEM, links=links) == 0.0


def _workload(path: str, dp_bytes: int) -> Workload:
    ag = Comm(CommType.ALLGATHER, CommGroup.TP, 8000, "ALLGATHER")
    dp = Comm(CommType.ALLREDUCE, CommGroup.DP, dp_bytes, "ALLREDUCE")
    rows = (make_layer(0, 100, 0, 50, name="embedding_layer", fwd_comm=ag),
            make_layer(1, 200, 200, 200, name="mlp", fwd_comm=ag, ig_comm=ag, wg_comm=dp))
    return Workload(path=path, header=HEADER, layers=rows)


def test_simai_terms_reused_only_for_the_same_rows_system_and_pp():
    w = _workload("a.txt", 8000)
    first = simai_pipeline_terms(w, SYSTEM)
    again = simai_pipeline_terms(w, SYSTEM, ga=4, vpp=1)       # same rows, system and pp
    assert (again["compute_ns"], again["exposed_comm_ns"], again["pre_bubble_ns"]) == (
        first["compute_ns"], first["exposed_comm_ns"], first["pre_bubble_ns"]) == (
        150.0 + 600.0, 40 + 40 + 40 + 80, 600.0 + 40 + 40)
    assert again["bubble_ns"] == 680.0 * 3 / (4 * 1)
    # DP ring of 16 / (2 x 2) = 4 at pp 2: 2 x 3/4 x 80 = 120 ns instead of 80
    assert simai_pipeline_terms(w, SYSTEM, pp=2)["exposed_comm_ns"] == 40 + 40 + 40 + 120
    # another workload with other DP bytes, another system: priced afresh
    assert simai_pipeline_terms(_workload("b.txt", 16000), SYSTEM)["exposed_comm_ns"] == 280
    slow = system_from_dict({"collectives": {"tp": FAST, "dp": {"bandwidth_gbps": 400,
                                                                "latency_ns": 0}}})
    assert simai_pipeline_terms(w, slow)["exposed_comm_ns"] == 280
    assert simai_pipeline_terms(w, SYSTEM)["exposed_comm_ns"] == 200
