"""A simulated run as Chakra execution traces (ETs), the workload ASTRA-sim 2.0 replays.

``DIR/et.<rank>.et`` per pipeline rank: a ``GlobalMetadata`` message, then per rank, in the order
the rank executed them,

- a ``COMP_NODE`` per compute action (F, B, I, W; an overlapped pair's halves one after the
  other) lasting what pipesim charged it (``duration_micros``, rounded to ASTRA-sim's whole
  microseconds, and the exact nanoseconds in the attribute ``pipesim.duration_ns``), named in
  torch's notation (``3F1``) with attributes ``pipesim.stage``, ``.microbatch``, ``.kind``,
  ``.chunk``, ``.iteration``;
- a ``COMM_SEND_NODE`` / ``COMM_RECV_NODE`` pair per transfer (``comm_src``, ``comm_dst``,
  ``comm_size``, ``comm_tag``, the tag unique in the run): the send depends on the action that
  produced the data, the action that consumes it depends on the receive;
- each compute node depends (``ctrl_deps``) on the rank's previous one, so ASTRA-sim runs the
  rank's actions in pipesim's order;
- a weight-gradient (DP) collective, when the run has any, as a node of the duration pipesim
  priced on the rank's second (``is_cpu_op``) slot, FIFO after the action that made it ready:
  a stream beside compute, as pipesim's communication stream is. With ``collectives="nodes"``
  every NPU of the data-parallel configuration is written (``et.<d x P + r>.et``: rank ``r`` of
  replica ``d``) and each DP collective is a ``COMM_COLL_NODE`` on its group
  (``comm_group.json``), which ASTRA-sim prices itself.

Beside them ``network.yml`` (a fully connected network with pipesim's point-to-point link:
bandwidth in GB/s of 2^30 bytes, latency in ns), ``system.json`` (roofline off: durations are
replayed as given), ``remote_memory.json`` and a ``README.md`` with the ASTRA-sim command line
and what the files assume. It needs the optional ``mlc-chakra`` package.

The steps: the records as numpy columns (``chakra_tables``), transfers matched to actions and
every node placed (``chakra_layout``), each node a row of encoded pieces (``chakra_rows``,
``chakra_wire``), gathered into the files here.
"""

from __future__ import annotations

import gc
import json
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ..errors import ConfigError
from ..result import SimulationResult
from ..system.topology import LinkModel, Placement
from ..workload.chakra_pb import NS, chakra
from ..workload.model import CommGroup
from .chakra_layout import Layout, Tags, layout_nodes, match_transfers, tag_order
from .chakra_rows import compute_rows, rank_rows, transfer_rows
from .chakra_tables import Actions, action_tables, send_tables
from .chakra_wire import (Pieces, attr_field, boolean, delimited, double, int64, node_bytes,
                          string)

GIB = float(1 << 30)
COLLECTIVE_MODES = ("durations", "nodes")
# pipesim's collective kinds as Chakra's CollectiveCommType (et_def.proto)
COMM_TYPES = {"ALLREDUCE": 0, "ALLGATHER": 2, "ALLTOALL": 6, "REDUCESCATTER": 7}
FREE_GBPS = 1.0e6        # GB/s: a byte crosses in ~1e-6 ns, 0 once ASTRA-sim truncates


@dataclass
class ChakraExport:
    """What was written (``pipesim run --chakra`` prints it)."""

    directory: Path
    ranks: int
    compute_nodes: int = 0
    send_nodes: int = 0
    recv_nodes: int = 0
    collective_nodes: int = 0
    rounded: int = 0          # compute nodes whose duration is not a whole microsecond
    notes: list[str] = field(default_factory=list)
    collectives: str = "durations"   # how DP collectives were written (COLLECTIVE_MODES)
    replicas: int = 1         # data-parallel replicas written (nodes: the configuration's DP)

    def line(self) -> str:
        return (f"chakra: {self.ranks} ETs in {self.directory} ({self.compute_nodes} compute, "
                f"{self.send_nodes} send, {self.recv_nodes} receive"
                + (f", {self.collective_nodes} collective" if self.collective_nodes else "")
                + " nodes)")


def link_figures(result: SimulationResult, pairs=None) -> tuple[float, float, list[str]]:
    """(bandwidth Gb/s, latency ns) of the links the run's transfers used (``pairs``: their
    (source, destination) ranks; None: read from the records), and notes: the slowest figure
    when pairs differ (ASTRA-sim's network here is one link type)."""
    if pairs is None:
        pairs = {(t.src_rank, t.dst_rank) for t in result.records.transfers}
    pairs = sorted(pairs)
    model = LinkModel(result.workload.header, result.system, result.schedule.pp)
    links = [model.p2p(s, d) for s, d in pairs] or [model.p2p(0, min(1, result.schedule.pp - 1))]
    bw = min(link.bandwidth_gbps for link in links)
    lat = max(link.latency_ns for link in links)
    notes = []
    if len({(link.bandwidth_gbps, link.latency_ns) for link in links}) > 1:
        notes.append(f"the run's point-to-point links differ; network.yml gives every pair the "
                     f"slowest: {bw:g} Gb/s, {lat:g} ns")
    return bw, lat, notes


def write_chakra(result: SimulationResult, directory: str | Path,
                 timings: dict | None = None, collectives: str = "durations") -> ChakraExport:
    """Write the run's ETs and ASTRA-sim configuration files into ``directory``.

    ``collectives``: ``durations`` writes the pipeline's ranks, a DP collective as a node of
    the duration pipesim priced; ``nodes`` writes every NPU of the data-parallel configuration
    (each pipeline rank once per replica) and each DP collective as a ``COMM_COLL_NODE`` on its
    group, which ASTRA-sim simulates itself. ``timings``: filled with each step's CPU seconds
    (for the benchmark)."""
    if collectives not in COLLECTIVE_MODES:
        raise ConfigError(f"--chakra-collectives: {collectives!r}; expected one of "
                          + ", ".join(COLLECTIVE_MODES))
    # millions of small objects and no cycles: the collector's passes over them are pure cost
    # (as simulate() runs the engines)
    was = gc.isenabled()
    gc.disable()
    try:
        return _write_chakra(result, directory, _Clock(timings), collectives)
    finally:
        if was:
            gc.enable()


class _Clock:
    """CPU seconds per step, added up in ``timings`` (nothing kept without it)."""

    def __init__(self, timings: dict | None) -> None:
        self.timings = timings
        self.last = time.process_time()

    def __call__(self, step: str) -> None:
        if self.timings is not None:
            now = time.process_time()
            self.timings[step] = self.timings.get(step, 0.0) + now - self.last
            self.last = now


def _write_chakra(result: SimulationResult, directory: str | Path, clock: _Clock,
                  collectives: str) -> ChakraExport:
    pb = chakra("--chakra").pb
    P = result.schedule.pp
    groups = _Groups(result, P) if collectives == "nodes" else None
    out = _make_directory(directory)
    replicas = groups.replicas if groups else 1
    export = ChakraExport(out, P * replicas, collectives=collectives, replicas=replicas)
    acts = action_tables(result)
    sends = send_tables(result, acts)
    clock("read records")
    tags = Tags(sends, tag_order(sends))
    links = match_transfers(acts, tags)
    layout = layout_nodes(acts, links)
    clock("match transfers, lay out nodes")
    pairs = np.unique(tags.src * P + tags.dst)
    bw_gbps, lat_ns, notes = link_figures(result, {divmod(int(k), P) for k in pairs})
    export.notes += notes
    free_network = not bool((sends.nbytes > 0).any())
    pieces = Pieces(max(int(np.diff(layout.node_bounds).max(initial=0)) + 1, tags.n + 1,
                        1 << 16))
    comp, export.rounded = compute_rows(pieces, acts, layout, pb)
    recv, send = transfer_rows(pieces, tags, links, layout, pb, P)
    export.compute_nodes = len(acts.stage) * replicas
    export.recv_nodes = len(links.recv_tag) * replicas
    export.send_nodes = len(links.send_tag) * replicas
    clock("encode pieces and rows")
    meta = _metadata_attrs(pb, result, bw_gbps, lat_ns)
    colls = _collectives_by_rank(result, P)
    clock("metadata (the run's summary), collectives")
    E = pieces.add(b"")
    for d in range(replicas):
        if d:   # a replica: the same nodes, its own NPUs as comm_src and comm_dst
            recv, send = transfer_rows(pieces, tags, links, layout, pb, P, d * P)
        for r in range(P):
            rows = rank_rows(r, acts, links, layout, comp, recv, send, E)
            extra = [pb.AttributeProto(name=NS + "replica", int64_val=d)] if groups else []
            _write_et(out / f"et.{d * P + r}.et", pb, meta + extra, r, pieces.gather(rows),
                      _collective_nodes(colls[r], acts, layout, r, pb, export,
                                        groups and (groups.pg_name(r, d), groups.comm_type)))
    clock("gather and write ETs")
    _write_configs(out, P * replicas, bw_gbps, lat_ns, free_network)
    if groups:
        (out / "comm_group.json").write_text(json.dumps(groups.json(), indent=1) + "\n")
    _write_readme(out, result, export, bw_gbps, lat_ns, free_network)
    clock("configs, README")
    return export


# The most compute nodes --chakra-collectives nodes writes: every replica writes the run's
# actions again (1M actions took 7.5 s to export: benchmarks/bench_chakra_export.py)
MAX_REPLICATED_NODES = 1_000_000


class _Groups:
    """``--chakra-collectives nodes``: NPU ``d x P + r`` runs pipeline rank ``r`` of
    data-parallel replica ``d`` (a rank's TP group is one NPU, as in pipesim); a rank's DP
    collective runs on the NPUs of its replicas (DP_EP: those of its expert-parallel class),
    named by ``pg_name`` in ``comm_group.json`` (ids from 1: ASTRA-sim reads 0 as every NPU)."""

    def __init__(self, result: SimulationResult, P: int) -> None:
        place = Placement.of(result.workload.header, result.system, P)
        self.P, self.replicas = P, place.dp
        nodes = len(result.records.actions) * place.dp
        if nodes > MAX_REPLICATED_NODES:
            raise ConfigError(
                f"--chakra-collectives nodes: writes the run's {len(result.records.actions):,} "
                f"actions on each of its {place.dp:,} data-parallel replicas ({nodes:,} nodes), "
                f"above the limit of {MAX_REPLICATED_NODES:,} (about 10 s to write); use "
                "--chakra-collectives durations (one replica, collectives as durations) or "
                "fewer GPUs")
        active = [layer for layer in result.workload.layers if layer.wg_comm.active]
        kinds = {layer.wg_comm.group for layer in active}
        self.comm_type = {layer.index: COMM_TYPES[layer.wg_comm.type.value] for layer in active}
        # replicas d and d' share a group when d = d' mod classes
        self.classes = place.ep if CommGroup.DP_EP in kinds and place.ep > 1 else 1
        if CommGroup.DP_EP in kinds and place.etp != place.tp:
            raise ConfigError(f"--chakra-collectives nodes: the experts' tensor parallelism "
                              f"(etp {place.etp}) differs from the layers' (tp {place.tp}); "
                              "pipesim writes an expert's data-parallel groups only where they "
                              "match (a rank's TP group is one NPU); use --chakra-collectives "
                              "durations")
        if len(kinds) > 1:
            raise ConfigError("--chakra-collectives nodes: the workload's weight-gradient "
                              "collectives run on both DP and DP_EP groups; pipesim writes "
                              "one kind of group")

    def pg_name(self, rank: int, replica: int) -> str:
        return str(1 + rank * self.classes + replica % self.classes)

    def json(self) -> dict:
        out: dict = {}
        for r in range(self.P):
            for d in range(self.replicas):
                out.setdefault(self.pg_name(r, d), []).append(d * self.P + r)
        return out


def _make_directory(directory: str | Path) -> Path:
    out = Path(directory)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise ConfigError(f"--chakra: cannot create {out}: {err.strerror or err}") from None
    return out


def _write_et(path: Path, pb, meta_attrs: list, rank: int, nodes, tail: bytes) -> None:
    """One ET: the GlobalMetadata, the nodes (chunks of bytes), then ``tail``."""
    try:
        with open(path, "wb") as fh:
            meta = pb.GlobalMetadata(version="1.0.0")
            meta.attr.extend(meta_attrs + [pb.AttributeProto(name=NS + "rank", int64_val=rank)])
            fh.write(delimited(meta.SerializeToString()))
            for chunk in nodes:
                fh.write(chunk)
            fh.write(tail)
    except OSError as err:
        raise ConfigError(f"--chakra: cannot write {path}: {err.strerror or err}") from None


def _collectives_by_rank(result: SimulationResult, P: int) -> list[list]:
    colls: list[list] = [[] for _ in range(P)]
    for c in result.records.collectives:
        colls[c.rank].append(c)
    for cs in colls:
        cs.sort(key=lambda c: (c.start, c.ready))
    return colls


def _collective_nodes(colls: list, acts: Actions, layout: Layout, r: int, types,
                      export: ChakraExport, group: tuple[str, dict] | None) -> bytes:
    """A rank's DP collectives, after its other nodes, each on the rank's second
    (``is_cpu_op``) slot, after the last compute node of its iteration that ended by the time
    it was ready and after the rank's previous collective: a node of the duration pipesim
    priced, or (``group``: its pg_name and each layer's comm_type) a ``COMM_COLL_NODE`` on
    that group, which ASTRA-sim prices itself."""
    lo, hi = acts.bounds[r], acts.bounds[r + 1]
    nid = int(layout.node_bounds[r + 1] - layout.node_bounds[r])
    parts = []
    prev = None
    for c in colls:
        done = np.flatnonzero((acts.iteration[lo:hi] == c.iteration)
                              & (acts.end[lo:hi] <= c.ready + 1e-6))
        ready = int(layout.comp_id[lo + done[-1]]) if len(done) else None
        ctrl = tuple(x for x in (ready, prev) if x is not None)
        dur = round(c.end - c.start, 3)
        ours = (string(NS + "collective", "dp"), int64(NS + "chunk", c.chunk),
                int64(NS + "layer", c.layer), int64(NS + "bytes", int(c.nbytes)),
                double(NS + "duration_ns", dur))
        if group is None:
            parts.append(node_bytes(nid, f"dp_collective chunk{c.chunk} layer{c.layer}",
                               types.COMP_NODE, ctrl, (), int(round(dur / 1000.0)),
                               b"".join(attr_field(x) for x in (
                                   boolean("is_cpu_op", True),) + ours)))
        else:
            parts.append(node_bytes(nid, f"dp_collective chunk{c.chunk} layer{c.layer}",
                               types.COMM_COLL_NODE, ctrl, (), 0, b"".join(
                                   attr_field(x) for x in (
                                       # ASTRA-sim refuses a comm node on the CPU slot
                                       boolean("is_cpu_op", False),
                                       int64("comm_type", group[1][c.layer]),
                                       int64("comm_size", max(int(c.nbytes), 1)),
                                       string("pg_name", group[0])) + ours)))
        prev = nid
        nid += 1
        export.collective_nodes += 1
    return b"".join(parts)


def _metadata_attrs(pb, result: SimulationResult, bw_gbps: float, lat_ns: float) -> list:
    Attr = pb.AttributeProto
    s = result.schedule
    return [Attr(name=NS + "schedule", string_val=s.name),
            Attr(name=NS + "pp", int64_val=s.pp),
            Attr(name=NS + "vpp", int64_val=s.vpp),
            Attr(name=NS + "microbatches", int64_val=s.microbatches),
            Attr(name=NS + "placement", int64_list=pb.Int64List(values=list(s.placement))),
            Attr(name=NS + "stage_chunk", int64_list=pb.Int64List(values=list(s.stage_chunk))),
            Attr(name=NS + "pipelines", string_val=";".join(
                ",".join(map(str, p)) for p in s.pipelines)),
            Attr(name=NS + "flush", bool_val=bool(s.flush)),
            Attr(name=NS + "link_bandwidth_gbps", double_val=float(bw_gbps)),
            Attr(name=NS + "link_latency_ns", double_val=float(lat_ns)),
            Attr(name=NS + "makespan_ns", double_val=float(result.makespan_ns))]


def astra_bandwidth(gbps: float) -> float:
    """pipesim's Gb/s (10^9 bits) as ASTRA-sim's GB/s (2^30 bytes)."""
    return gbps / 8.0 * 1e9 / GIB


def _write_configs(out: Path, P: int, bw_gbps: float, lat_ns: float, free: bool) -> None:
    bw = FREE_GBPS if free else astra_bandwidth(bw_gbps)
    lat = 0.0 if free else float(lat_ns)
    (out / "network.yml").write_text(
        "topology: [ FullyConnected ]\n"
        f"npus_count: [ {P} ]\n"
        f"bandwidth: [ {bw!r} ]  # GB/s (1 GB = 2^30 B)\n"
        f"latency: [ {lat!r} ]  # ns\n")
    system = {"scheduling-policy": "FIFO", "endpoint-delay": 0,
              "active-chunks-per-dimension": 1, "preferred-dataset-splits": 1,
              "all-reduce-implementation": ["direct"], "all-gather-implementation": ["direct"],
              "reduce-scatter-implementation": ["direct"], "all-to-all-implementation": ["direct"],
              "collective-optimization": "localBWAware", "local-mem-bw": 1600,
              "boost-mode": 0, "roofline-enabled": 0, "peak-perf": 900}
    (out / "system.json").write_text(json.dumps(system, indent=2) + "\n")
    (out / "remote_memory.json").write_text(
        json.dumps({"memory-type": "NO_MEMORY_EXPANSION"}, indent=2) + "\n")


def _write_readme(out: Path, result: SimulationResult, export: ChakraExport, bw_gbps: float,
                  lat_ns: float, free: bool) -> None:
    s = result.schedule
    d = out.resolve()
    lines = [
        f"# Chakra execution traces of a pipesim run: {s.name}, P={s.pp}, v={s.vpp}, "
        f"M={s.microbatches}",
        "",
        f"pipesim's makespan: {result.makespan_ns:.3f} ns. Replay with ASTRA-sim 2.0's analytical "
        "backend (either binary):",
        "",
        "```",
        f"ASTRA_SIM_BINARY --workload-configuration={d}/et "
        f"--system-configuration={d}/system.json "
        f"--remote-memory-configuration={d}/remote_memory.json "
        f"--network-configuration={d}/network.yml"
        + (f" --comm-group-configuration={d}/comm_group.json"
           if export.collectives == "nodes" else ""),
        "```",
        "",
        "Each NPU logs `sys[<npu>] finished, <T> cycles` (1 cycle = 1 ns); the largest T is the "
        "iteration time to set beside pipesim's makespan.",
        "",
        "## Files and what they assume",
        "",
        f"- `et.<rank>.et` ({export.ranks} files): {export.compute_nodes} compute, "
        f"{export.send_nodes} send, {export.recv_nodes} receive"
        + (f", {export.collective_nodes} DP-collective" if export.collective_nodes else "")
        + " nodes. A compute node lasts what pipesim charged the action; ASTRA-sim reads whole "
        "microseconds (`duration_micros`; 0 runs as 1 ns), the exact nanoseconds are in the "
        "attribute `pipesim.duration_ns`"
        + (f" ({export.rounded} durations are not whole microseconds and were rounded)."
           if export.rounded else " (every duration here is a whole microsecond)."),
        "- Each compute node depends on the rank's previous one (pipesim's order); a send on "
        "the action that produced its data; the consuming action on its receive. Tags are "
        "unique per transfer. Zero-byte transfers are written as 1 byte (ASTRA-sim needs a size).",
        "- `network.yml`: " + (
            "the run moved no bytes between stages, so the network is free (latency 0, "
            f"{FREE_GBPS:g} GB/s)." if free else
            f"every NPU pair one hop apart (FullyConnected) with pipesim's link, {bw_gbps:g} Gb/s "
            f"= {astra_bandwidth(bw_gbps)!r} GB/s of 2^30 bytes, latency {lat_ns:g} ns."),
        "- `system.json`: `roofline-enabled: 0` (durations replayed as given). ASTRA-sim runs "
        "one compute and one send at a time per NPU and its sends are eager; pipesim's "
        "`--p2p async` (the default) matches the eager sends, but queues transfers per link "
        "(src, dst) and lets latency not hold the link: the two agree when no NPU has two "
        "sends in flight at once.",
        "- DP collectives (if any) are written as nodes of the duration pipesim priced on the "
        "NPU's second slot (`is_cpu_op`), not as `COMM_COLL_NODE`s; their `update_time` is not "
        "written. Runtime-profile costs outside actions (step prologue/epilogue, exchange) and "
        "once-per-iteration rows are not written either." if export.collectives == "durations"
        else _nodes_note(s.pp, export),
        "- `remote_memory.json`: no memory expansion.",
    ]
    lines += [f"- Note: {n}" for n in export.notes]
    (out / "README.md").write_text("\n".join(lines) + "\n")


def _nodes_note(P: int, export: ChakraExport) -> str:
    """The README's words on ``--chakra-collectives nodes``."""
    return (
        f"- Every NPU of the data-parallel configuration is written: NPU d x {P} + r runs "
        f"pipeline rank r of replica d ({export.replicas} replicas; a rank's TP group is one "
        "NPU, as in pipesim, and its TP collectives stay inside the action durations pipesim "
        "priced). Each weight-gradient (DP) collective is a `COMM_COLL_NODE` (`comm_type`, "
        "`comm_size` in bytes, `pg_name`; not on the CPU slot, which ASTRA-sim refuses for a comm "
        "node), after the "
        "compute node that made its gradient ready; `comm_group.json` lists each group's NPUs "
        "(`pg_name` -> NPUs). ASTRA-sim prices these collectives itself, on `network.yml`'s "
        "links with `system.json`'s `direct` implementations: its times are its own (pipesim's "
        "are in the attribute `pipesim.duration_ns`). Their `update_time`, runtime-profile "
        "costs outside actions and once-per-iteration rows are not written. ASTRA-sim ignores "
        "a comm-group file whose path contains the word `empty`.")
