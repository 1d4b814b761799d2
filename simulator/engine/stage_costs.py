"""A run's per-stage F / I / W costs and p2p delay, in the zero-bubble model a cost-aware
schedule (``auto``) is synthesized for.

``f[s]``, ``i[s]``, ``w[s]`` are the durations the engine itself charges chunk ``s``'s actions
(:func:`~simulator.engine.costs.partition_costs`: compute x scales + blocking collectives,
recompute included), so the schedule is built for the costs the run will see. ``comm`` is the
slowest adjacent-rank transfer of one microbatch's ``pp_comm`` bytes (latency + bytes /
bandwidth on the p2p link): the model has one fixed delay and no contention. With ``p2p``
given, ``memory`` is what each stage's F, I and W allocate or free of one microbatch, by the
run's own memory model (:mod:`.memory`).
"""

from __future__ import annotations

from ..schedules.schedule import Schedule, loop_placement
from ..schedules.stage_costs import StageCosts
from ..system.config import SystemConfig
from ..system.topology import LinkModel
from ..workload.model import Header, Partition
from .costs import partition_costs
from .memory import build_memory_model


def run_stage_costs(partition: Partition, header: Header, system: SystemConfig,
                    pp: int, links: LinkModel | None = None,
                    p2p: str | None = None) -> StageCosts:
    """Stage costs (ns) of ``partition``'s chunks, in global virtual-stage (model) order; with
    ``p2p`` (the run's mode, which decides what an I frees) their memory too."""
    links = links if links is not None else LinkModel(header, system, pp)
    chunks = partition_costs(partition, header, system, links)
    nbytes = header.pp_comm
    comm = 0.0
    if nbytes > 0 and pp > 1:
        comm = max(links.p2p(r, r + 1).transfer_ns(nbytes) for r in range(pp - 1))
    memory = None if p2p is None else stage_memory(partition, header, system, pp, p2p)
    return StageCosts(tuple(c.F.duration for c in chunks), tuple(c.I.duration for c in chunks),
                      tuple(c.W.duration for c in chunks), comm, memory)


def stage_memory(partition: Partition, header: Header, system: SystemConfig, pp: int,
                 p2p: str) -> tuple[tuple[float, float, float], ...]:
    """Per stage (loop placement), the bytes one microbatch's F keeps (its stash), its I adds
    (what it keeps until the W less what it frees) and its W adds (minus both): the memory
    model's own figures, before a schedule exists (a stand-in with no actions gives the
    layout)."""
    vpp = max(1, len(partition.chunks) // pp)
    stand_in = Schedule("stage-memory", pp, vpp, 1, loop_placement(pp, vpp),
                        ranks=[() for _ in range(pp)])
    model = build_memory_model(stand_in, partition, header, system, p2p)
    out = []
    for st in model.stages:
        i = st.i_keeps - st.i_frees
        out.append((st.stash, i, -(st.stash + i)))
    return tuple(out)
