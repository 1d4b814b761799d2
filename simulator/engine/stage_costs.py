"""A run's per-stage F / I / W costs and p2p delay, in the zero-bubble model a cost-aware
schedule (``auto``) is synthesized for.

``f[s]``, ``i[s]``, ``w[s]`` are the durations the engine itself charges chunk ``s``'s actions
(:func:`~simulator.engine.costs.partition_costs`: compute x scales + blocking collectives,
recompute included), so the schedule is built for the costs the run will see. ``comm`` is the
slowest adjacent-rank transfer of one microbatch's ``pp_comm`` bytes (latency + bytes /
bandwidth on the p2p link): the model has one fixed delay and no contention.
"""

from __future__ import annotations

from ..schedules.stage_costs import StageCosts
from ..system.config import SystemConfig
from ..system.topology import LinkModel
from ..workload.model import Header, Partition
from .costs import partition_costs


def run_stage_costs(partition: Partition, header: Header, system: SystemConfig,
                    pp: int, links: LinkModel | None = None) -> StageCosts:
    """Stage costs (ns) of ``partition``'s chunks, in global virtual-stage (model) order."""
    links = links if links is not None else LinkModel(header, system, pp)
    chunks = partition_costs(partition, header, system, links)
    nbytes = header.pp_comm
    comm = 0.0
    if nbytes > 0 and pp > 1:
        comm = max(links.p2p(r, r + 1).transfer_ns(nbytes) for r in range(pp - 1))
    return StageCosts(tuple(c.F.duration for c in chunks), tuple(c.I.duration for c in chunks),
                      tuple(c.W.duration for c in chunks), comm)
