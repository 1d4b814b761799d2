"""Point-to-point links between pipeline ranks.

Each direction of each rank pair is one link. A transfer of S bytes needs ``S*8/bandwidth`` ns of
the link (serialisation) and arrives ``latency`` ns after its serialisation ends. Transfers that
meet on a link share it by the topology's ``sharing`` rule:

- ``fifo``: one at a time, first come first served (a transfer issued while the link is busy
  starts when it frees);
- ``fair``: all active transfers progress at ``bandwidth / n`` (processor sharing).

Zero bytes cost nothing (``pp_comm: 0`` means no point-to-point cost, latency included). Which
link figures a pair uses comes from :class:`~simulator.system.topology.LinkModel` (intra- or
inter-node, or the flat ``links`` figures).
"""

from __future__ import annotations

from typing import Callable

import simpy

from ..system.config import LinkConfig
from ..system.topology import LinkModel
from .simpy_fast import fire_at

Done = Callable[[float, float], None]  # (start, end) of a finished transfer


# a plain class, not a dataclass: start-up (simulator/__init__.py)
class LinkStats:
    """One directed link's traffic over a run: what the summary reports per link."""

    __slots__ = ("src", "dst", "config", "bytes", "transfers", "busy_ns", "free_at")

    def __init__(self, src: int, dst: int, config: LinkConfig) -> None:
        self.src = src
        self.dst = dst
        self.config = config
        self.bytes = 0
        self.transfers = 0
        self.busy_ns = 0.0      # time with at least one transfer serialising
        self.free_at = 0.0      # fifo: when the current queue drains

    def book(self, nbytes: int, now: float) -> tuple[float, float]:
        """FIFO: count a transfer issued at ``now`` and return its (start, end); the one
        booking rule of the SimPy engine and the evaluator alike."""
        self.bytes += nbytes
        self.transfers += 1
        if nbytes <= 0:
            return now, now
        cfg = self.config
        serial = nbytes * 8.0 / cfg.bandwidth_gbps
        start = self.free_at if self.free_at > now else now
        self.free_at = start + serial
        self.busy_ns += serial
        return start, start + serial + cfg.latency_ns


# plain classes, not dataclasses: start-up (simulator/__init__.py). Fair sharing's
# bookkeeping, one per transfer in flight, never compared or printed.
class _Flow:
    """One transfer in flight on a fair-shared link."""

    __slots__ = ("remaining", "arrival", "done", "start", "sent")

    def __init__(self, remaining: float, arrival: simpy.Event, done: Done, start: float,
                 sent: simpy.Event | None) -> None:
        self.remaining = remaining      # bytes
        self.arrival = arrival
        self.done = done
        self.start = start
        self.sent = sent


class _FairLink:
    """A link whose bandwidth its transfers in flight share equally."""

    __slots__ = ("stats", "flows", "last", "version")

    def __init__(self, stats: LinkStats) -> None:
        self.stats = stats
        self.flows: list[_Flow] = []
        self.last = 0.0
        self.version = 0


class Network:
    def __init__(self, env: simpy.Environment, links: LinkModel) -> None:
        self.env = env
        self.model = links
        self.fair = links.topology.sharing == "fair"
        self.links: dict[tuple[int, int], LinkStats] = {}
        self._fair: dict[tuple[int, int], _FairLink] = {}

    def _stats(self, src: int, dst: int) -> LinkStats:
        link = self.links.get((src, dst))
        if link is None:
            link = self.links[(src, dst)] = LinkStats(src, dst, self.model.p2p(src, dst))
        return link

    def book(self, src: int, dst: int, nbytes: int) -> tuple[float, float]:
        """FIFO sharing only: book a transfer issued now; (start, end), known at once."""
        return self._stats(src, dst).book(nbytes, self.env.now)

    def send(self, src: int, dst: int, nbytes: int, arrival: simpy.Event, done: Done,
             sent: simpy.Event | None = None) -> None:
        """Start a transfer now; ``arrival`` fires when the data is at ``dst``, ``sent`` (if
        given) when the last byte has left ``src`` (where a blocking send returns)."""
        env = self.env
        now = env.now
        if not self.fair or nbytes <= 0:
            start, end = self.book(src, dst, nbytes)
            done(start, end)
            fire_at(env, arrival, end - now)
            if sent is not None:  # the last byte leaves `latency` before it lands
                latency = self.links[(src, dst)].config.latency_ns if nbytes > 0 else 0.0
                fire_at(env, sent, end - latency - now)
            return
        link = self._stats(src, dst)
        link.bytes += nbytes
        link.transfers += 1
        fl = self._fair.get((src, dst))
        if fl is None:
            fl = self._fair[(src, dst)] = _FairLink(link)
        self._advance(fl, now)
        fl.flows.append(_Flow(float(nbytes), arrival, done, now, sent))
        self._reschedule(fl)

    # -- fair sharing ------------------------------------------------------------------------
    def _advance(self, fl: _FairLink, now: float) -> None:
        if fl.flows:
            dt = now - fl.last
            rate = fl.stats.config.bandwidth_gbps / 8.0 / len(fl.flows)  # bytes per ns each
            for f in fl.flows:
                f.remaining -= dt * rate
            fl.stats.busy_ns += dt
        fl.last = now

    def _reschedule(self, fl: _FairLink) -> None:
        fl.version += 1
        if not fl.flows:
            return
        rate = fl.stats.config.bandwidth_gbps / 8.0 / len(fl.flows)
        wait = max(0.0, min(f.remaining for f in fl.flows) / rate)
        version = fl.version
        self.env.timeout(wait).callbacks.append(lambda _e: self._on_timer(fl, version))

    def _on_timer(self, fl: _FairLink, version: int) -> None:
        if version != fl.version:
            return
        now = self.env.now
        self._advance(fl, now)
        rate = fl.stats.config.bandwidth_gbps / 8.0 / len(fl.flows)

        def done(f: _Flow) -> bool:
            # done, up to rounding: nothing left, or too little to move the clock any more
            return f.remaining <= 1e-6 or now + f.remaining / rate <= now

        finished = [f for f in fl.flows if done(f)]
        fl.flows = [f for f in fl.flows if not done(f)]
        latency = fl.stats.config.latency_ns
        for f in finished:
            f.done(f.start, now + latency)
            fire_at(self.env, f.arrival, latency)
            if f.sent is not None:
                fire_at(self.env, f.sent, 0.0)
        self._reschedule(fl)
