"""Point-to-point links between pipeline ranks.

Each direction of each rank pair is one link that carries one transfer at a time, first come
first served: a transfer issued at ``t`` starts at ``max(t, link free)`` and occupies the link for
``latency + bytes*8/bandwidth``; the receiver has the data when it ends. Zero bytes cost nothing
(``pp_comm: 0`` means no point-to-point cost).

Because a link is FIFO and transfers are issued in simulated-time order, its schedule is known
the moment a send is issued; no SimPy process per link is needed.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..system.config import SystemConfig


@dataclass
class LinkStats:
    src: int
    dst: int
    bytes: int = 0
    transfers: int = 0
    busy_ns: float = 0.0
    free_at: float = 0.0


@dataclass
class Network:
    system: SystemConfig
    links: dict[tuple[int, int], LinkStats] = field(default_factory=dict)

    def transfer(self, src: int, dst: int, nbytes: int, now: float) -> tuple[float, float]:
        """Book a transfer issued at ``now``; returns (start, end)."""
        link = self.links.get((src, dst))
        if link is None:
            link = self.links[(src, dst)] = LinkStats(src, dst)
        duration = self.system.links.transfer_ns(nbytes)
        start = link.free_at if link.free_at > now else now
        end = start + duration
        link.free_at = end
        link.bytes += nbytes
        link.transfers += 1
        link.busy_ns += duration
        return start, end
