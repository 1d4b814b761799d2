"""The multi-stage runtime's transfer latency and two-way exchange cost, measured on the traces'
own transfers.

torch's multi-stage runtime (``_PipelineScheduleRuntime``) posts every send and receive as an
``isend`` / ``irecv`` of its own (``_batch_p2p`` of one kind does not coalesce), waits for a
receive only before the compute that needs it and for its sends only at the end of the step.
Unlike the single-stage runtime's fused ``batch_isend_irecv`` (a rank waits until both its send
and its receive are complete), nothing there makes a transfer wait for the one going the other
way. Whether gloo still delays a transfer when one is in flight the other way between the same
two ranks is what the traces say: each ``RECV_*`` span holds the backend's annotation
(``gloo:recv``) from the post to the return of the wait on it, each ``SEND_*`` span its
``gloo:send`` post. A receive whose wait returned more than ``WAITED_NS`` after its consumer's
span began found no data there: it returned when the data came, so its latency is that return
minus the later of the two posts (the rendezvous, the wire and the wake-up of the waiting
rank: what pipesim's link latency stands for on these runs). The link latency is the median
latency of such receives without a transfer in flight the other way; the exchange cost is the median latency of such receives
with a transfer in flight the other way minus the median of those without (0 when that is
negative or either group is empty). On the recorded 4 ms traces (a quiet machine) it is 0 for
the loop-placed classes and 0.1-0.2 ms for the V-shaped ones, where the replay's search had put
1-2 ms: a figure the source's timeline hardly constrains (Interleaved1F1B's iteration replays
to the ns at any exchange cost) and that V-shaped schedules, whose ranks send both ways every
step, then paid at every step (docs/validation.md).

Layering: calibration reads traces only (traces.py); nothing below imports it.
"""

from __future__ import annotations

from dataclasses import dataclass
from statistics import median

from .traces import TraceAction, TraceSet

# a receive's wait that returned later than this after its consumer's span began waited for data
WAITED_NS = 100_000


@dataclass(frozen=True)
class Transfer:
    """One transfer of one iteration: ranks, posts and the receiver's wait (ns)."""

    iteration: int
    src: int
    dst: int
    send_post: int
    recv_post: int
    done: int           # the return of the receiver's wait on it
    waited: bool        # the receiver sat in that wait: ``done`` is when the data came

    @property
    def start(self) -> int:
        return max(self.send_post, self.recv_post)

    @property
    def latency(self) -> int:
        return self.done - self.start


@dataclass(frozen=True)
class ExchangeMeasure:
    """The measured latency and exchange cost and what they rest on (medians in ns, counts)."""

    exchange_ns: float
    two_way: int          # waited receives with a transfer in flight the other way
    one_way: int          # waited receives without
    two_way_ns: float     # their median latencies
    one_way_ns: float

    @property
    def latency_ns(self) -> float:
        """The link latency: one-way receives' median (every waited one's if none was)."""
        return float(round(self.one_way_ns if self.one_way else self.two_way_ns))

    def describe(self) -> str:
        return (f"latency {self.latency_ns / 1e3:.1f} us, exchange "
                f"{self.exchange_ns / 1e3:.1f} us (receives that waited for their data, from "
                f"the later post: {self.one_way} one-way, median {self.one_way_ns / 1e3:.1f} "
                f"us; {self.two_way} with a transfer in flight the other way, median "
                f"{self.two_way_ns / 1e3:.1f} us)")


def transfers(ts: TraceSet) -> list[Transfer]:
    """Every transfer whose send and receive spans both carry the backend's annotation and
    whose consumer (the receiving stage's unpaired compute action) is in the traces."""
    out: list[Transfer] = []
    for k in range(ts.n_iterations):
        sends: dict[tuple, tuple[int, int]] = {}
        recvs: dict[tuple, tuple[int, TraceAction]] = {}
        consumers: dict[tuple, TraceAction] = {}
        for r in ts.ranks:
            for a in r.iterations[k].actions:
                if a.kind in ("SEND_F", "SEND_B") and a.comm is not None:
                    dst_stage = a.stage + 1 if a.kind == "SEND_F" else a.stage - 1
                    sends[(a.kind[-1], dst_stage, a.microbatch)] = (r.rank, a.comm[0])
                elif a.kind in ("RECV_F", "RECV_B") and a.comm is not None:
                    recvs[(a.kind[-1], a.stage, a.microbatch)] = (r.rank, a)
                elif a.is_compute and a.pair is None and a.kind != "W":
                    consumers[("F" if a.kind == "F" else "B", a.stage, a.microbatch)] = a
        for key, (dst, ra) in recvs.items():
            if key not in sends or key not in consumers:
                continue
            src, send_post = sends[key]
            done = ra.comm[1]
            out.append(Transfer(k, src, dst, send_post, ra.comm[0], done,
                                done - consumers[key].start_ns > WAITED_NS))
    return out


def measured_exchange(ts: TraceSet) -> ExchangeMeasure | None:
    """The latency and exchange cost the traces show (module docstring); None when they hold no waited
    receive with the backend's annotations (traces of the single-stage runtime, which labels
    no transfer, or of another profiler)."""
    xs = transfers(ts)
    two, one = [], []
    for x in xs:
        if not x.waited:
            continue
        other_way = any(y.iteration == x.iteration and y.src == x.dst and y.dst == x.src
                        and y.start < x.done and y.done > x.start for y in xs)
        (two if other_way else one).append(x.latency)
    if not two and not one:
        return None
    m2 = float(median(two)) if two else 0.0
    m1 = float(median(one)) if one else 0.0
    ex = max(0.0, m2 - m1) if two and one else 0.0
    return ExchangeMeasure(float(round(ex)), len(two), len(one), m2, m1)
