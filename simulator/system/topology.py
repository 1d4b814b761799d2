"""Where the simulated ranks sit, and which link a transfer or a collective uses.

pipesim simulates the data-parallel replica 0 of the pipeline (tensor-parallel rank 0 of each
stage); the other replicas behave the same. GPU ids follow Megatron's mixed radix, TP fastest:

- ``tp-dp-pp`` (default): ``gpu = tp_rank + TP * (dp_rank + DP * pp_rank)``
- ``tp-pp-dp``:           ``gpu = tp_rank + TP * (pp_rank + PP * dp_rank)``

and an expert's ranks on Megatron-LM's expert grid (parallel_state.initialize_model_parallel's
expert RankGenerator, order tp-ep-dp-pp or, with ``tp-pp-dp``, tp-ep-pp-dp): each stage's
TP x DP GPUs folded into ETP x EP x expert-DP, ETP fastest (:func:`expert_grid`):

- ``tp-dp-pp``: ``gpu = etp_rank + ETP * (ep_rank + EP * (edp_rank + EDP * pp_rank))``
- ``tp-pp-dp``: ``gpu = etp_rank + ETP * (ep_rank + EP * (pp_rank + PP * edp_rank))``

With ETP = TP (Megatron-LM's default) the EP ranks are consecutive DP ranks. A node
holds ``gpus_per_node`` consecutive GPU ids. A point-to-point transfer uses the intra-node link
when both GPUs share a node, else the inter-node link; a collective is priced by the slowest link
on its ring: inter-node as soon as its group spans two nodes. A ring (all-reduce, all-gather,
reduce-scatter) whose group holds g GPUs of each node crosses each node boundary on as many
rings as it has NICs to use, min(g, ``nics_per_node``), one per NIC (NCCL's rings, one per NIC:
the bus bandwidth its maintainers expect across nodes is the node's NICs' line rate, e.g. 4 x 200
Gb/s = 100 GB/s in nccl-tests issue #119, 8 x 100 Gb/s in NVIDIA/nccl issue #495): priced at
that many times the inter-node bandwidth, at most the intra-node one. An all-to-all sends each
GPU's share over its own NIC: the inter-node figure.
"""

from __future__ import annotations

from typing import NamedTuple

from ..workload.model import CommGroup, CommType, Header
from .config import LinkConfig, SystemConfig


def expert_grid(header: Header, pp: int | None = None) -> tuple[int, int, int]:
    """(ETP, EP, expert DP) of a stage's GPUs: the header's ``etp`` (else ``tp``) and ``ep``,
    the expert data-parallel size what is left of the stage's TP x DP GPUs. Where ETP x EP
    does not divide them, the experts run as the dense layers (ETP = TP, EP 1): the preflight
    warns (``expert_grid_folded``)."""
    P = max(1, pp if pp is not None else header.pp)
    tp = max(1, header.tp)
    stage = tp * (max(1, header.all_gpus // (tp * P)) if header.all_gpus else 1)
    etp, ep = header.expert_tp, max(1, header.ep)
    if stage % (etp * ep):
        etp, ep = tp, 1
    return etp, ep, stage // (etp * ep)


# a NamedTuple, not a dataclass: start-up (simulator/__init__.py)
class Placement(NamedTuple):
    """How the run's ranks map onto nodes (its parallel sizes, their order, GPUs per node)."""

    tp: int
    dp: int
    ep: int
    pp: int
    order: str
    gpus_per_node: int
    etp: int = 1
    edp: int = 1

    @classmethod
    def of(cls, header: Header, system: SystemConfig, pp: int | None = None) -> "Placement":
        P = max(1, pp if pp is not None else header.pp)
        tp = max(1, header.tp)
        dp = max(1, header.all_gpus // (tp * P)) if header.all_gpus else 1
        etp, ep, edp = expert_grid(header, P)
        topo = system.topology
        return cls(tp, dp, ep, P, topo.order, topo.gpus_per_node, etp, edp)

    def gpu(self, pp_rank: int, dp_rank: int = 0, tp_rank: int = 0) -> int:
        if self.order == "tp-pp-dp":
            return tp_rank + self.tp * (pp_rank + self.pp * dp_rank)
        return tp_rank + self.tp * (dp_rank + self.dp * pp_rank)

    def expert_gpu(self, pp_rank: int, ep_rank: int = 0, edp_rank: int = 0,
                   etp_rank: int = 0) -> int:
        """The GPU of an expert's rank on the expert grid (module docstring)."""
        if self.order == "tp-pp-dp":
            return etp_rank + self.etp * (ep_rank + self.ep * (pp_rank + self.pp * edp_rank))
        return etp_rank + self.etp * (ep_rank + self.ep * (edp_rank + self.edp * pp_rank))

    def _member(self, group: CommGroup, pp_rank: int, i: int) -> int:
        """The GPU of member ``i`` of replica 0's group ``group`` on stage ``pp_rank``."""
        if group is CommGroup.TP:
            return self.gpu(pp_rank, 0, i)
        if group is CommGroup.DP:
            return self.gpu(pp_rank, i)
        if group is CommGroup.EP:
            return self.expert_gpu(pp_rank, i)
        if group is CommGroup.ETP:
            return self.expert_gpu(pp_rank, 0, 0, i)
        return self.expert_gpu(pp_rank, 0, i)

    def group_count(self, group: CommGroup) -> int:
        """Members of a group of kind ``group``."""
        return {CommGroup.TP: self.tp, CommGroup.DP: self.dp, CommGroup.EP: self.ep,
                CommGroup.ETP: self.etp}.get(group, self.edp)

    def node(self, gpu: int) -> int:
        return gpu // self.gpus_per_node if self.gpus_per_node > 0 else 0

    def group_gpus(self, group: CommGroup, pp_rank: int = 0) -> list[int]:
        """GPU ids of replica 0's group of kind ``group`` on stage ``pp_rank``."""
        return [self._member(group, pp_rank, i) for i in range(self.group_count(group))]

    def spans_nodes(self, gpus: list[int]) -> bool:
        return len({self.node(g) for g in gpus}) > 1

    def group_spans_nodes(self, group: CommGroup, pp_rank: int = 0) -> bool:
        """:meth:`spans_nodes` of :meth:`group_gpus` without listing them: a group's ids rise
        in even steps, so it spans nodes when its first and last do (a DP group of 2^37 GPUs
        was listed, 24 GB, for every collective row)."""
        count = self.group_count(group)
        if count <= 1:
            return False
        return self.node(self._member(group, pp_rank, 0)) != self.node(
            self._member(group, pp_rank, count - 1))

    def members_per_node(self, group: CommGroup, pp_rank: int = 0) -> int:
        """GPUs of replica 0's group ``group`` on stage ``pp_rank`` inside each node it spans
        (the fewest, where the group's even step does not divide the node): the ids rise in
        even steps, the step being the distance between its first two members."""
        if self.group_count(group) <= 1:
            return 1
        step = self._member(group, pp_rank, 1) - self._member(group, pp_rank, 0)
        return max(1, self.gpus_per_node // step) if step > 0 else 1


_RINGS = (CommType.ALLREDUCE, CommType.ALLGATHER, CommType.REDUCESCATTER)
_FLAT_GROUP = {CommGroup.ETP: "tp"}   # the system's link figures a group uses without a topology


class LinkModel:
    """Answers which link figures a transfer or collective uses, for one run."""

    def __init__(self, header: Header, system: SystemConfig, pp: int | None = None) -> None:
        self.system = system
        self.topology = system.topology
        self.placement = Placement.of(header, system, pp)
        self.memo: dict = {}   # collective times already priced in this run
        self.p2p_split: tuple[int, float] | None = None   # see with_p2p_split

    def with_p2p_split(self, ranks: int, gather_ns: float) -> "LinkModel":
        """This model with every stage-to-stage transfer split over ``ranks`` senders, each
        moving 1/ranks of it on its own link, and ``gather_ns`` (the all-gather that puts it
        back together) added on arrival: Megatron-LM of 2021-22's scatter-gather. A transfer
        keeps its bytes (the activation's); its link reads ``ranks`` times the bandwidth."""
        out = object.__new__(LinkModel)
        out.__dict__.update(self.__dict__)
        out.memo = {}
        out.p2p_split = (ranks, gather_ns)
        return out

    def p2p(self, src_rank: int, dst_rank: int) -> LinkConfig:
        if not self.topology.enabled:
            link = self.system.links
        else:
            a, b = self.placement.gpu(src_rank), self.placement.gpu(dst_rank)
            same = self.placement.node(a) == self.placement.node(b)
            link = self.topology.intra_node if same else self.topology.inter_node
        if self.p2p_split is None:
            return link
        ranks, gather_ns = self.p2p_split
        return LinkConfig(link.bandwidth_gbps * ranks, link.latency_ns + gather_ns)

    def ring_neighbour(self, ranks: int, pp_rank: int = 0) -> LinkConfig:
        """The link each of the first ``ranks`` data-parallel ranks sends its neighbour on,
        all at once (a context-parallel ring: Megatron-LM's CP ranks come right after TP):
        NVLink inside a node, else one NIC each; the DP figures without a topology."""
        if not self.topology.enabled:
            return self.system.collectives.dp
        pl = self.placement
        spans = ranks > 1 and pl.node(pl.gpu(pp_rank)) != pl.node(pl.gpu(pp_rank, ranks - 1))
        return self.topology.inter_node if spans else self.topology.intra_node

    def collective(self, group: CommGroup, kind: CommType, pp_rank: int = 0,
                   ranks: int | None = None, stride: int = 1) -> LinkConfig:
        """The link figures of a collective of ``group`` on stage ``pp_rank``; ``ranks``: a DP
        collective over only ``ranks`` of the data-parallel ranks, ``stride`` apart (hybrid
        sharding's groups, torchtitan's mesh: the shard group the innermost ranks, stride 1;
        the replicate group every ``stride``-th, stride the shard count)."""
        if self.topology.enabled:
            topo = self.topology
            pl = self.placement
            members = None
            if ranks is not None and group is CommGroup.DP and ranks * stride <= pl.dp and (
                    ranks < pl.dp):
                spans = ranks > 1 and pl.node(pl.gpu(pp_rank)) != pl.node(
                    pl.gpu(pp_rank, stride * (ranks - 1)))
                members = max(1, topo.gpus_per_node // (pl.tp * stride))
            else:
                spans = pl.group_spans_nodes(group, pp_rank)
            if not spans:
                link = topo.intra_node
            elif kind in _RINGS and topo.nics_per_node > 1:
                nics = min(members or pl.members_per_node(group, pp_rank), topo.nics_per_node)
                link = topo.inter_node._replace(bandwidth_gbps=min(
                    nics * topo.inter_node.bandwidth_gbps, topo.intra_node.bandwidth_gbps))
            else:
                link = topo.inter_node
        else:
            # an expert's TP group is a TP-sized slice of the node: the TP figures
            link = getattr(self.system.collectives, _FLAT_GROUP.get(group, group.value))
        override = self.system.busbw_overrides.get(
            f"{_FLAT_GROUP.get(group, group.value)}.{kind.value.lower()}")
        if override is not None:
            link = LinkConfig(override, link.latency_ns)
        return link
