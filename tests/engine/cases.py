"""The engine tests' one case generator: the registered schedules at small shapes, a workload
with uneven costs (fractions of a ns in the times), TP and DP collectives and recompute, a
system of 1 byte per ns + 100 ns, and the comparison of two runs' records."""

from __future__ import annotations

from collections import defaultdict

from simulator.errors import ConfigError
from simulator.schedules import generate, get
from simulator.system import SystemConfig
from simulator.system.config import CollectiveConfig, LinkConfig
from simulator.workload import Comm, CommGroup, CommType, make_layer
from simulator.workload.model import Header, Workload

LINK = LinkConfig(bandwidth_gbps=8.0, latency_ns=100.0)     # 1 byte per ns + 100 ns
SYSTEM = SystemConfig(links=LINK, collectives=CollectiveConfig(tp=LINK, dp=LINK))
TP = Comm(CommType.ALLREDUCE, CommGroup.TP, 6000, "ALLREDUCE")
DP = Comm(CommType.ALLREDUCE, CommGroup.DP, 20000, "ALLREDUCE")
SHAPES = ((2, 4), (4, 8), (3, 7))                           # (P, M)


class Drawn:
    """The shapes a test drew and how many its schedule took. A test that leaves out (or
    swaps for 1F1B) the shapes a generator refuses asks :meth:`check` at its end that a share
    of them ran, so it fails where every shape is refused instead of passing on none."""

    def __init__(self) -> None:
        self.drawn = 0
        self.accepted = 0

    def generate(self, name: str, P: int, M: int, v: int):
        """Schedule ``name`` at P, M, v, or None where its generator refuses the shape."""
        self.drawn += 1
        try:
            sched = generate(name, P, M, v)
        except ConfigError:
            return None
        self.accepted += 1
        return sched

    def check(self, share: float) -> None:
        assert self.drawn > 0 and self.accepted >= share * self.drawn, (
            f"{self.accepted} of {self.drawn} drawn shapes accepted, expected at least "
            f"{share:.0%}")


def vpps_of(name: str) -> tuple[int, ...]:
    """The v a test draws for schedule ``name``, from its spec: 1, 2 and 3 where it takes any
    v, else its own."""
    spec = get(name)
    return (1, 2, 3) if spec.variable_vpp else (spec.default_vpp,)


def cases(name: str, shapes=SHAPES, vpps: tuple[int, ...] | None = None,
          at_least: float = 1 / 3):
    """Schedule ``name`` at each (P, M) of ``shapes`` and each v of ``vpps`` (default:
    :func:`vpps_of`); shapes it refuses are left out, and at least ``at_least`` of them (and
    one) must run (hanayo takes only even v: 3 of its 9)."""
    drawn = Drawn()
    for P, M in shapes:
        for v in (vpps_of(name) if vpps is None else vpps):
            sched = drawn.generate(name, P, M, v)
            if sched is not None:
                yield sched
    drawn.check(at_least)
    assert drawn.accepted >= 1, f"{name}: every shape refused"


def one_vpp(name: str) -> tuple[int]:
    """One v per schedule: 2 where it takes any, else its own."""
    spec = get(name)
    return (2,) if spec.variable_vpp else (spec.default_vpp,)


def workload(n_chunks: int, pp_comm: int = 3000, name: str = "<engine>") -> Workload:
    """Three rows per chunk with uneven costs (thirds of a ns appear in the times), TP
    collectives, DP all-reduces with an update time, and recompute."""
    layers = []
    for i in range(3 * n_chunks):
        layers.append(make_layer(i, 1000 + 37 * i, 900 + 11 * (i % 5), 500 + 3 * i,
                                 fwd_comm=TP if i % 2 else Comm(CommType.NONE, CommGroup.TP, 0),
                                 ig_comm=TP, wg_comm=DP, update_time=50))
    header = Header("HYBRID_TRANSFORMER_FWD_IN_BCKWD", tp=2, pp=1, all_gpus=6, pp_comm=pp_comm,
                    checkpoints=(0,), checkpoint_initiates=(2,))
    return Workload(name, header, tuple(layers))


def by_rank(records, rank_of) -> dict:
    out = defaultdict(list)
    for x in records:
        out[rank_of(x)].append(x)
    return dict(out)


def assert_same(simpy, fast) -> None:
    """Everything a walk records, exactly: per rank, in the engine's order (the lists only
    interleave the ranks differently). Memory is not a walk's: one pass over the executed
    order accounts it for every engine (engine/memory_use.py)."""
    assert by_rank(fast.actions, lambda a: a.rank) == by_rank(simpy.actions, lambda a: a.rank)
    assert (by_rank(fast.transfers, lambda t: t.src_rank)
            == by_rank(simpy.transfers, lambda t: t.src_rank))
    assert (by_rank(fast.collectives, lambda c: c.rank)
            == by_rank(simpy.collectives, lambda c: c.rank))
    assert by_rank(fast.layers, lambda x: x.rank) == by_rank(simpy.layers, lambda x: x.rank)
    assert fast.iteration_bounds == simpy.iteration_bounds
    assert fast.rank_finish == simpy.rank_finish
    assert _links(fast) == _links(simpy)
    assert fast.layer_ops == simpy.layer_ops
    assert len(fast.actions) == len(simpy.actions)


def _links(rec):
    """Each link's figures (LinkStats is a plain class: compared by identity)."""
    return {k: (v.src, v.dst, v.config, v.bytes, v.transfers, v.busy_ns, v.free_at)
            for k, v in rec.links.items()}
