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

# the last _row_sums answer: (workload, system, pp, sums). A run's summary asks twice for the same
# rows (the header's pp/ga/vpp, then the run's), and the sums depend on neither ga nor vpp. Held
# strongly (Workload and SystemConfig are NamedTuples: no weak references) until the next call
# replaces it
_last_sums: tuple | None = None

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
    links = LinkModel(h, system, P)
    compute, comm, pre_bubble = _row_sums(workload, system, P, links)
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


def _row_sums(workload: Workload, system: SystemConfig, P: int,
              links: LinkModel) -> tuple[float, float, float]:
    """(compute, every collective, pre-bubble) summed over the rows in file order.

    Collective times depend on P (the DP group is all_gpus / (tp * P)), not on ga or vpp. The
    answer is kept for the last (workload, system, P), compared by identity (both are frozen).
    """
    global _last_sums
    last = _last_sums
    if last is not None and last[0] is workload and last[1] is system and last[2] == P:
        return last[3]
    h = workload.header
    scale = system.gpu.compute_scale
    fwd_times: dict[int, float] = {}   # id(Comm) -> time; the rows keep their Comms alive
    times: dict[int, float] = {}
    compute = comm = pre_bubble = 0.0
    for row in workload.layers:
        rc = (row.fwd_compute + row.ig_compute + row.wg_compute) * scale
        c = row.fwd_comm
        fwd = fwd_times.get(id(c))
        if fwd is None:
            fwd = fwd_times[id(c)] = collective_time_ns(c, h, system, forward=True, links=links)
        c = row.ig_comm
        ig = times.get(id(c))
        if ig is None:
            ig = times[id(c)] = collective_time_ns(c, h, system, links=links)
        c = row.wg_comm
        wg = times.get(id(c))
        if wg is None:
            wg = times[id(c)] = collective_time_ns(c, h, system, links=links)
        compute += rc
        comm += fwd + ig + wg
        if row.name != EMBEDDING_ROW:
            pre_bubble += rc + fwd + ig
    sums = (compute, comm, pre_bubble)
    _last_sums = (workload, system, P, sums)
    return sums
