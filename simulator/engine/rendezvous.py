"""Point-to-point transfers as torch runs them on gloo (``--p2p torch-single`` / ``torch-multi``).

- **Rendezvous**: a posted send does not move data until the matching receive is posted; the
  transfer starts when the later of the two is posted, then takes the link like any transfer
  (serialisation on the link, then ``latency``). Neither post blocks; the runtime waits on the
  returned event (a receive before the compute that needs it, a send where torch waits for it).
- **Two-way exchange** (``runtime.exchange_ns``): two transfers in opposite directions between
  the same two ranks whose flights overlap (one starts while the other has started and not yet
  arrived) both arrive ``exchange_ns`` after the later of their two arrivals. A transfer belongs
  to at most one exchange: it pairs with the earliest-started unpaired transfer in flight the
  other way. Transfers of zero bytes (``pp_comm: 0``) cost nothing and never pair.

A send is complete, for the sender, when its data has arrived.
"""

from __future__ import annotations

from typing import Callable

import simpy

from .network import Network
from .simpy_fast import fire_at
from .records import TransferRecord


class _Flight:
    __slots__ = ("src", "dst", "nbytes", "transfer", "it", "issued", "arrival", "start",
                 "end", "landed", "partner")

    def __init__(self, src: int, dst: int, nbytes: int, transfer, it: int, issued: float,
                 arrival: simpy.Event) -> None:
        self.src, self.dst, self.nbytes, self.transfer, self.it = src, dst, nbytes, transfer, it
        self.issued = issued
        self.arrival = arrival
        self.start: float | None = None
        self.end: float | None = None      # arrival over the link, known at once on fifo links
        self.landed = False
        self.partner: _Flight | None = None


class _Channel:
    __slots__ = ("send", "recv_posted", "arrival")

    def __init__(self, arrival: simpy.Event) -> None:
        self.send: tuple | None = None     # (src, dst, nbytes, transfer, it, posted at)
        self.recv_posted = False
        self.arrival = arrival


class Rendezvous:
    """Channels keyed ``(iteration, data, dst_stage, microbatch)``; one per tensor."""

    def __init__(self, env: simpy.Environment, net: Network, exchange_ns: float,
                 record: Callable[[TransferRecord], None]) -> None:
        self.env = env
        self.net = net
        self.exchange_ns = exchange_ns
        self.record = record
        self.channels: dict[tuple, _Channel] = {}
        self.flying: dict[tuple[int, int], list[_Flight]] = {}

    def _channel(self, key: tuple) -> _Channel:
        ch = self.channels.get(key)
        if ch is None:
            ch = self.channels[key] = _Channel(self.env.event())
        return ch

    def post_send(self, key: tuple, src: int, dst: int, nbytes: int, transfer,
                  it: int) -> simpy.Event:
        """Post a send; the returned event fires when its data has arrived."""
        ch = self._channel(key)
        ch.send = (src, dst, nbytes, transfer, it, self.env.now)
        if ch.recv_posted:
            self._start(key, ch)
        return ch.arrival

    def post_recv(self, key: tuple) -> simpy.Event:
        ch = self._channel(key)
        ch.recv_posted = True
        if ch.send is not None:
            self._start(key, ch)
        return ch.arrival

    # the runtime waits on ``channels[key].arrival`` and deletes the channel once it has the data

    # -- transfers ------------------------------------------------------------------------
    def _start(self, key: tuple, ch: _Channel) -> None:
        src, dst, nbytes, transfer, it, issued = ch.send
        env = self.env
        fl = _Flight(src, dst, nbytes, transfer, it, issued, ch.arrival)
        if nbytes <= 0 or not self.net.fair:
            fl.start, fl.end = self.net.book(src, dst, nbytes)
            if self.exchange_ns <= 0 or nbytes <= 0:    # no exchange to wait for: land now
                fl.landed = True
                self._deliver_at(fl, fl.end)
                return
            self._pair(fl)
            landed = env.event()
            landed.callbacks.append(lambda _e: self._landed(fl))
            fire_at(env, landed, fl.end - env.now)
            return

        def done(start: float, end: float) -> None:
            fl.start, fl.end = start, end

        landed = env.event()
        landed.callbacks.append(lambda _e: self._landed(fl))
        self.net.send(src, dst, nbytes, landed, done)
        fl.start = env.now
        if self.exchange_ns > 0:
            self._pair(fl)

    def _pair(self, fl: _Flight) -> None:
        now = self.env.now
        back = self.flying.get((fl.dst, fl.src))
        if back:
            back[:] = [f for f in back if f.partner is None and not f.landed
                       and (f.end is None or f.end > now)]
            if back:
                other = back.pop(0)
                other.partner, fl.partner = fl, other
                return
        own = self.flying.setdefault((fl.src, fl.dst), [])
        if len(own) > 16:      # drop what has landed or paired meanwhile
            own[:] = [f for f in own if f.partner is None and not f.landed
                      and (f.end is None or f.end > now)]
        own.append(fl)

    def _landed(self, fl: _Flight) -> None:
        fl.landed = True
        p = fl.partner
        if p is None:
            self._deliver(fl, 0.0)
        elif p.landed:                 # both over the link: the exchange costs its extra
            self._deliver(fl, self.exchange_ns)
            self._deliver(p, self.exchange_ns)

    def _deliver(self, fl: _Flight, delay: float) -> None:
        self._deliver_at(fl, self.env.now + delay)

    def _deliver_at(self, fl: _Flight, end: float) -> None:
        t = fl.transfer
        self.record(TransferRecord(fl.src, fl.dst, t.src_stage, t.dst_stage, t.data,
                                   t.microbatch, fl.it, fl.nbytes, fl.issued, fl.start, end))
        fire_at(self.env, fl.arrival, end - self.env.now)
