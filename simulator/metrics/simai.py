"""SimAI's analytical pipeline terms, as SimAI computes them, for comparison with a simulation.

SimAI simulates one representative GPU running the file's rows in order and adds pipeline
parallelism afterwards, in closed form (``Layer::report`` in SimAI's
``astra-sim-alibabacloud/astra-sim/workload/Layer.cc``, analytical mode):

- ``pre_bubble`` = the sum, over every row whose name is not exactly ``embedding_layer``, of its
  forward, input-gradient and weight-gradient compute plus its forward and input-gradient
  collective times (the TP/EP collectives; weight-gradient/DP collectives are not included);
- ``bubble`` = ``pre_bubble * (pp - 1) / (ga * vpp)`` with ``pp``, ``ga``, ``vpp`` from the header
  (an AICB file's ``vpp:`` holds layers per stage, so SimAI divides by that);
- ``Expose_PP_comm`` = ``2 * vpp * ga * pp_comm / pp_bandwidth * (1 - pp_overlap_ratio)``;
  SimAI's default ``pp_overlap_ratio`` is 1, so this term is 0 unless it is set;
- total = compute + exposed comm (every collective, overlap ratios at SimAI's default 0)
  + bubble + Expose_PP_comm.

Compute times are the file's (times the system's ``compute_scale``); collective times come from
this project's ring model (:mod:`simulator.system.collectives`), not SimAI's busbw tables, so both
sides of a comparison use the same collective costs. SimAI keeps times in integer Ticks and
µs; here they are float ns.
"""

from __future__ import annotations

from typing import Any

from ..system.collectives import collective_time_ns
from ..system.config import SystemConfig
from ..system.topology import LinkModel
from ..workload.model import Workload

SIMAI_BUBBLE_FORMULA = ("(pp-1)/(ga*vpp) x (compute + TP/EP comm of the rows not named "
                        "embedding_layer)")
EMBEDDING_ROW = "embedding_layer"   # SimAI compares the row name with this string exactly


def simai_pipeline_terms(workload: Workload, system: SystemConfig | None = None, *,
                         pp: int | None = None, ga: int | None = None, vpp: int | None = None,
                         pp_overlap_ratio: float = 1.0) -> dict[str, Any]:
    """SimAI's pipeline terms for ``workload`` (its file rows, whatever layout we read them in).

    ``pp``, ``ga``, ``vpp`` default to the header's values, as SimAI reads them;
    ``pp_overlap_ratio`` is SimAI's parameter of that name (default 1: no exposed PP comm).
    The PP bandwidth is that of the link between stages 0 and 1 (the system's point-to-point
    link, or its topology's link for that pair); latency is not counted, as in SimAI.
    """
    system = system or SystemConfig()
    h = workload.header
    P = h.pp if pp is None else pp
    M = h.ga if ga is None else ga
    V = h.vpp if vpp is None else vpp
    scale = system.gpu.compute_scale
    links = LinkModel(h, system, P)
    compute = comm = pre_bubble = 0.0
    for row in workload.layers:
        rc = (row.fwd_compute + row.ig_compute + row.wg_compute) * scale
        fwd = collective_time_ns(row.fwd_comm, h, system, forward=True, links=links)
        ig = collective_time_ns(row.ig_comm, h, system, links=links)
        wg = collective_time_ns(row.wg_comm, h, system, links=links)
        compute += rc
        comm += fwd + ig + wg
        if row.name != EMBEDDING_ROW:
            pre_bubble += rc + fwd + ig
    bubble = pre_bubble * (P - 1) / (M * V)
    pp_link = links.p2p(0, 1) if P > 1 else system.links
    pp_comm_full = 2 * V * M * h.pp_comm * 8.0 / pp_link.bandwidth_gbps
    pp_comm = pp_comm_full * (1.0 - pp_overlap_ratio)
    total = compute + comm + bubble + pp_comm
    return {
        "pp": P,
        "ga": M,
        "vpp": V,
        "formula": SIMAI_BUBBLE_FORMULA,
        "pre_bubble_ns": pre_bubble,
        "bubble_ns": bubble,
        "pp_comm_ns": pp_comm,
        "pp_comm_unoverlapped_ns": pp_comm_full,
        "pp_overlap_ratio": pp_overlap_ratio,
        "compute_ns": compute,
        "exposed_comm_ns": comm,
        "iteration_ns": total,
        "bubble_ratio": bubble / total if total else 0.0,
    }
