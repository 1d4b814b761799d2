"""Links, link sharing and topology, worked by hand."""

from __future__ import annotations

import itertools
import random

import pytest
import simpy

from simulator import simulate
from simulator.engine.network import Network
from simulator.system import SystemConfig, collective_time_ns
from simulator.system.config import LinkConfig, TopologyConfig
from simulator.system.topology import LinkModel, Placement
from simulator.workload import Comm, CommGroup, CommType, Header, uniform_workload

ONE_BYTE_PER_NS = LinkConfig(bandwidth_gbps=8.0, latency_ns=0.0)


def _transfers(sharing: str, sends: list[tuple[float, int]], latency: float = 0.0):
    """Issue (time, bytes) sends from rank 0 to 1; return (start, end) of each."""
    link = LinkConfig(bandwidth_gbps=8.0, latency_ns=latency)
    system = SystemConfig(links=link, topology=TopologyConfig(sharing=sharing))
    env = simpy.Environment()
    net = Network(env, LinkModel(Header("MODEL", pp=2, all_gpus=2), system))
    out: dict[int, tuple[float, float]] = {}
    arrivals: dict[int, float] = {}

    def sender(i, t, nbytes):
        yield env.timeout(t)
        ev = env.event()
        net.send(0, 1, nbytes, ev, lambda s, e, i=i: out.__setitem__(i, (s, e)))
        yield ev
        arrivals[i] = env.now

    for i, (t, n) in enumerate(sends):
        env.process(sender(i, t, n))
    env.run()
    assert all(arrivals[i] == out[i][1] for i in out)  # the receiver has the data at `end`
    return [out[i] for i in range(len(sends))], net.links[(0, 1)]


def test_fifo_second_transfer_waits_for_the_first():
    (a, b), link = _transfers("fifo", [(0.0, 2000), (500.0, 1000)])
    assert a == (0.0, 2000.0)
    assert b == (2000.0, 3000.0)
    assert link.busy_ns == 3000.0 and link.bytes == 3000 and link.transfers == 2


def test_fair_sharing_splits_bandwidth():
    # 0-500: the first alone moves 500 B; 500-2500: both at 0.5 B/ns, the second's 1000 B are
    # done at 2500 while the first reaches 1500 B; 2500-3000: the first's last 500 B alone.
    (a, b), link = _transfers("fair", [(0.0, 2000), (500.0, 1000)])
    assert b == (500.0, 2500.0)
    assert a == (0.0, 3000.0)
    assert link.busy_ns == 3000.0


def test_latency_is_added_after_serialisation_and_does_not_hold_the_link():
    (a, b), _ = _transfers("fifo", [(0.0, 1000), (0.0, 1000)], latency=300.0)
    assert a == (0.0, 1300.0)
    assert b == (1000.0, 2300.0)


def test_zero_bytes_cost_nothing():
    (a,), link = _transfers("fifo", [(100.0, 0)], latency=300.0)
    assert a == (100.0, 100.0) and link.busy_ns == 0.0


def _topo_system(order: str) -> SystemConfig:
    return SystemConfig(topology=TopologyConfig(
        gpus_per_node=8, order=order,
        intra_node=LinkConfig(bandwidth_gbps=16.0, latency_ns=10.0),
        inter_node=LinkConfig(bandwidth_gbps=8.0, latency_ns=1000.0)))


def test_megatron_placement_puts_tp_fastest_and_pp_slowest():
    h = Header("HYBRID_TRANSFORMER", tp=2, pp=4, all_gpus=32)
    p = Placement.of(h, _topo_system("tp-dp-pp"))
    assert (p.tp, p.dp, p.pp) == (2, 4, 4)
    assert [p.gpu(r) for r in range(4)] == [0, 8, 16, 24]
    assert p.group_gpus(CommGroup.DP, 1) == [8, 10, 12, 14]
    q = Placement.of(h, _topo_system("tp-pp-dp"))
    assert [q.gpu(r) for r in range(4)] == [0, 2, 4, 6]
    assert q.group_gpus(CommGroup.DP, 0) == [0, 8, 16, 24]


def test_transfer_across_nodes_uses_inter_node_figures():
    # tp 2 x dp 4 fill a node of 8: every pipeline neighbour is on another node.
    wl = uniform_workload(2, 1000, 500, 500, pp=2, tp=2, all_gpus=16, pp_comm=1000)
    r = simulate(wl, "1f1b", _topo_system("tp-dp-pp"), pp=2, microbatches=1)
    t = [x for x in r.records.transfers if x.data == "F"][0]
    assert t.end - t.start == 1000 + 1000 * 8 / 8.0      # inter-node: 1 B/ns + 1000 ns
    # pipeline stages next to each other: same node, intra-node figures
    r2 = simulate(wl, "1f1b", _topo_system("tp-pp-dp"), pp=2, microbatches=1)
    t2 = [x for x in r2.records.transfers if x.data == "F"][0]
    assert t2.end - t2.start == 10 + 1000 * 8 / 16.0
    assert r.makespan_ns - r2.makespan_ns == 2 * ((1000 + 1000) - (10 + 500))


def test_scatter_gather_splits_a_transfer_over_tp_and_gathers_it_on_arrival():
    # the stages on two nodes, TP 2: each TP rank sends half of the 1000 B on its own
    # inter-node link (500 B at 1 B/ns), the link's 1000 ns, then the all-gather over the TP
    # pair inside the node: 1/2 x 1000 B at 2 B/ns + 10 ns = 260 ns (Megatron-LM of 2021-22)
    wl = uniform_workload(2, 1000, 500, 500, pp=2, tp=2, all_gpus=16, pp_comm=1000)
    r = simulate(wl, "1f1b", _topo_system("tp-dp-pp"), pp=2, microbatches=1,
                 p2p_scatter_gather=True)
    t = [x for x in r.records.transfers if x.data == "F"][0]
    assert t.end - t.start == 500 + 1000 + 260
    assert t.nbytes == 1000          # the transfer keeps the activation's bytes
    base = simulate(wl, "1f1b", _topo_system("tp-dp-pp"), pp=2, microbatches=1)
    assert base.makespan_ns - r.makespan_ns == 2 * ((1000 + 1000) - (500 + 1000 + 260))
    # without TP there is nothing to split: the same run either way
    one = uniform_workload(2, 1000, 500, 500, pp=2, tp=1, all_gpus=16, pp_comm=1000)
    assert (simulate(one, "1f1b", _topo_system("tp-dp-pp"), pp=2, microbatches=1,
                     p2p_scatter_gather=True).makespan_ns
            == simulate(one, "1f1b", _topo_system("tp-dp-pp"), pp=2, microbatches=1).makespan_ns)


def test_collective_spanning_nodes_is_priced_by_the_slower_link():
    h = Header("HYBRID_TRANSFORMER", tp=2, pp=4, all_gpus=32)  # dp = 4
    ar = Comm(CommType.ALLREDUCE, CommGroup.DP, 8000, "ALLREDUCE")
    inside = collective_time_ns(ar, h, _topo_system("tp-dp-pp"))   # DP ranks 8r + {0,2,4,6}
    across = collective_time_ns(ar, h, _topo_system("tp-pp-dp"))   # DP ranks 2r + {0,8,16,24}
    assert inside == 2 * 3 / 4 * 8000 * 8 / 16.0 + 2 * 3 * 10.0
    assert across == 2 * 3 / 4 * 8000 * 8 / 8.0 + 2 * 3 * 1000.0
    tp = Comm(CommType.ALLREDUCE, CommGroup.TP, 8000, "ALLREDUCE")
    assert collective_time_ns(tp, h, _topo_system("tp-pp-dp")) == 2 * 1 / 2 * 8000 * 8 / 16.0 + 2 * 10.0


def _nic_system(nics: int) -> SystemConfig:
    return SystemConfig(topology=TopologyConfig(
        gpus_per_node=8, nics_per_node=nics,
        intra_node=LinkConfig(bandwidth_gbps=48.0, latency_ns=10.0),
        inter_node=LinkConfig(bandwidth_gbps=8.0, latency_ns=1000.0)))


@pytest.mark.parametrize("tp,per_node", [(1, 8), (2, 4), (4, 2), (8, 1)])
def test_a_ring_across_nodes_crosses_on_one_nic_per_member_of_a_node(tp, per_node):
    # DP over 2 nodes: the group holds 8 / TP GPUs of each node, each beside its own NIC
    h = Header("HYBRID_TRANSFORMER", tp=tp, pp=1, all_gpus=16)
    n = 16 // tp
    rs = Comm(CommType.REDUCESCATTER, CommGroup.DP, 8000, "REDUCESCATTER")
    got = collective_time_ns(rs, h, _nic_system(8))
    gbps = min(per_node * 8.0, 48.0)          # 64 Gb/s of eight NICs capped by the node's 48
    assert got == (n - 1) / n * 8000 * 8 / gbps + (n - 1) * 1000.0
    # one NIC a node (the default): the inter-node figure whatever the group
    assert collective_time_ns(rs, h, _nic_system(1)) == (n - 1) / n * 8000 * 8 / 8.0 + (n - 1) * 1000.0


def test_an_all_to_all_across_nodes_keeps_one_nic():
    h = Header("HYBRID_TRANSFORMER", tp=1, pp=1, ep=16, all_gpus=16)
    a2a = Comm(CommType.ALLTOALL, CommGroup.EP, 8000, "ALLTOALL")
    assert collective_time_ns(a2a, h, _nic_system(8)) == collective_time_ns(a2a, h, _nic_system(1))


def test_members_per_node_follow_the_groups_step():
    p = Placement(2, 8, 1, 2, "tp-dp-pp", 8)
    assert p.members_per_node(CommGroup.DP) == 4 and p.members_per_node(CommGroup.TP) == 8
    q = Placement(2, 8, 1, 2, "tp-pp-dp", 8)                 # DP step TP x PP = 4
    assert q.members_per_node(CommGroup.DP, 1) == 2
    assert Placement(16, 4, 1, 1, "tp-dp-pp", 8).members_per_node(CommGroup.DP) == 1
    assert Placement(3, 8, 1, 1, "tp-dp-pp", 8).members_per_node(CommGroup.DP) == 2   # 2 or 3


def test_busbw_override_replaces_the_bandwidth_of_one_collective():
    h = Header("HYBRID_TRANSFORMER", tp=4, pp=1, all_gpus=4)
    ar = Comm(CommType.ALLREDUCE, CommGroup.TP, 8000, "ALLREDUCE")
    ag = Comm(CommType.ALLGATHER, CommGroup.TP, 8000, "ALLGATHER")
    base = SystemConfig()
    sys2 = base.with_overrides({"busbw_overrides": {"tp.allreduce": 8.0}})
    lat = base.collectives.tp.latency_ns
    assert collective_time_ns(ar, h, sys2) == 2 * 3 / 4 * 8000 + 2 * 3 * lat
    assert collective_time_ns(ag, h, sys2) == collective_time_ns(ag, h, base)


def test_bad_topology_values_are_named():
    from simulator.errors import ConfigError
    from simulator.system.config import system_from_dict

    with pytest.raises(ConfigError, match=r"topology.order: expected one of tp-dp-pp, tp-pp-dp"):
        system_from_dict({"topology": {"order": "pp-tp"}}, "s.yaml")
    with pytest.raises(ConfigError, match=r"busbw_overrides.tp.allreduse: expected a key"):
        system_from_dict({"busbw_overrides": {"tp.allreduse": 3}}, "s.yaml")


def test_fair_sharing_finishes_at_late_times_despite_rounding():
    # At t ~ 1e15 ns a float cannot resolve sub-ns steps; a flow with a sliver of bytes left
    # used to be rescheduled at the same instant forever (a hang). Every flow must finish.
    rng = random.Random(1)
    for _ in range(60):
        link = LinkConfig(bandwidth_gbps=rng.choice([8 / 3, 8 / 7, 3.3, 100 / 3]), latency_ns=0.0)
        system = SystemConfig(links=link, topology=TopologyConfig(sharing="fair"))
        env = simpy.Environment(initial_time=rng.choice([1e12, 1e14, 1e15, 3.3e15]))
        net = Network(env, LinkModel(Header("MODEL", pp=2, all_gpus=2), system))
        ends: list[float] = []
        sizes = [rng.randint(1, 5000) for _ in range(4)]
        gaps = [rng.random() * 100 for _ in range(4)]

        def sender(sizes=sizes, gaps=gaps, env=env, net=net, ends=ends):
            for n, gap in zip(sizes, gaps):
                net.send(0, 1, n, env.event(), lambda s, e: ends.append(e))
                yield env.timeout(gap)

        env.process(sender())
        steps = 0
        while env.peek() < float("inf"):
            env.step()
            steps += 1
            assert steps < 1000, "the fair-share link keeps rescheduling without progress"
        assert len(ends) == 4


def test_a_group_spans_nodes_as_its_listed_gpus_do_without_listing_them():
    """Found by the fuzz: --gpus 2^40 listed a DP group of 2^37 GPUs for every collective row
    (24 GB, killed); the first and last GPU of a group decide, as its whole list does."""
    for tp, dp, ep, pp, order, per_node in itertools.product(
            (1, 2, 8), (1, 2, 6, 12), (1, 2, 3), (1, 2, 4), ("tp-dp-pp", "tp-pp-dp"),
            (0, 1, 4, 8, 16)):
        if dp % ep:
            continue
        p = Placement(tp, dp, ep, pp, order, per_node, tp, dp // ep)   # etp tp, expert-DP
        for group, rank in itertools.product(CommGroup, range(pp)):
            assert p.group_spans_nodes(group, rank) == p.spans_nodes(p.group_gpus(group, rank))
    huge = Placement(8, 2**37, 1, 1, "tp-dp-pp", 8)
    assert huge.group_spans_nodes(CommGroup.DP) and not huge.group_spans_nodes(CommGroup.TP)
