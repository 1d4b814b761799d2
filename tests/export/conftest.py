"""Small runs with known costs for the exporter tests."""

from __future__ import annotations

import pytest

from simulator import simulate
from simulator.system import SystemConfig
from simulator.system.config import LinkConfig
from simulator.workload import Comm, CommGroup, CommType, uniform_workload

# 1 byte/ns with 100 ns latency: a 400-byte transfer takes 500 ns
LINKS = SystemConfig(links=LinkConfig(bandwidth_gbps=8.0, latency_ns=100.0))
DP_ALLREDUCE = Comm(CommType.ALLREDUCE, CommGroup.DP, 4000)


def comm_workload(layers: int, pp: int, fwd: int = 1000, ig: int = 600, wg: int = 400):
    """Uniform layers with 400-byte p2p transfers and a DP all-reduce per layer (DP = 2)."""
    return uniform_workload(layers, fwd, ig, wg, pp=pp, pp_comm=400, all_gpus=2 * pp,
                            wg_comm=DP_ALLREDUCE)


def run(schedule: str, pp: int, m: int, vpp: int | None = None, *, layers: int | None = None,
        trace_layers: bool = False, **costs):
    wl = comm_workload(layers or 2 * pp * (vpp or 2), pp, **costs)
    return simulate(wl, schedule, LINKS, pp=pp, microbatches=m, vpp=vpp,
                    trace_layers=trace_layers)


@pytest.fixture(scope="module")
def one_f_one_b():
    """1F1B, P=4, M=8 with p2p transfers and DP collectives."""
    return run("1f1b", 4, 8)
