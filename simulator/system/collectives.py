"""Cost of a collective on a ring of ``n`` ranks (the textbook/NCCL bus-bandwidth model).

With S the message bytes, B the group's bus bandwidth and a the per-step latency:

- all-reduce:            2(n-1)/n * S/B + 2(n-1) * a
- all-gather, reduce-scatter, all-to-all: (n-1)/n * S/B + (n-1) * a

A group of one rank costs nothing, and so does comm type NONE (SimAI's meaning). Forward
collectives smaller than 4096 bytes are rounded up to 4096, as SimAI does.
"""

from __future__ import annotations

from ..workload.model import Comm, CommGroup, CommType, Header
from .config import LinkConfig, SystemConfig
from .topology import LinkModel, expert_grid

SIMAI_MIN_FWD_BYTES = 4096


def ring_time_ns(kind: CommType, nbytes: float, n: int, link: LinkConfig) -> float:
    if kind is CommType.NONE or nbytes <= 0 or n <= 1:
        return 0.0
    steps = n - 1
    serial = nbytes * 8.0 / link.bandwidth_gbps  # ns to move S bytes once
    if kind is CommType.ALLREDUCE:
        return 2.0 * steps / n * serial + 2.0 * steps * link.latency_ns
    return steps / n * serial + steps * link.latency_ns


def group_size(group: CommGroup, header: Header, pp: int | None = None) -> int:
    """Ranks in a collective's group, from the header's parallel sizes.

    TP = model_parallel_NPU_group; DP = all_gpus / (tp * pp) (with the simulated pp); EP, ETP
    and DP_EP (an expert's data-parallel group) from the stage's expert grid
    (:func:`~.topology.expert_grid`: with etp = tp, DP / EP).
    """
    P = max(1, header.pp if pp is None else pp)
    tp = max(1, header.tp)
    if group is CommGroup.TP:
        return tp
    if group is CommGroup.DP:
        return max(1, header.all_gpus // (tp * P))
    etp, ep, edp = expert_grid(header, P)
    return {CommGroup.EP: ep, CommGroup.ETP: etp}.get(group, edp)


def collective_time_ns(comm: Comm, header: Header, system: SystemConfig,
                       forward: bool = False, links: LinkModel | None = None,
                       stage_rank: int = 0) -> float:
    """Time of ``comm`` on its group's link; with ``links`` (one run's link model) each distinct
    (collective, forward, stage rank) is priced once per run.

    The memo is keyed by the Comm's identity, not its value: hashing a frozen dataclass runs
    Python code, and a run prices the same few interned Comm objects thousands of times. The memo
    entry holds the Comm, so its id cannot be reused by another object while the entry exists; an
    equal Comm that is a different object is simply priced again (same value).
    """
    if links is None:
        if not comm.active:
            return 0.0
        links = LinkModel(header, system)
    key = (id(comm), forward, stage_rank)
    hit = links.memo.get(key)
    if hit is not None:
        return hit[1]
    t = _price(comm, header, forward, links, stage_rank) if comm.active else 0.0
    links.memo[key] = (comm, t)
    return t


def _price(comm: Comm, header: Header, forward: bool, model: LinkModel, stage_rank: int) -> float:
    nbytes = comm.bytes
    if forward and 0 < nbytes < SIMAI_MIN_FWD_BYTES:
        nbytes = SIMAI_MIN_FWD_BYTES
    link = model.collective(comm.group, comm.type, stage_rank)
    return ring_time_ns(comm.type, nbytes, group_size(comm.group, header, model.placement.pp), link)
