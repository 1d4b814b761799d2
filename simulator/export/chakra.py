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
  a stream beside compute, as pipesim's communication stream is.

Beside them ``network.yml`` (a fully connected network with pipesim's point-to-point link:
bandwidth in GB/s of 2^30 bytes, latency in ns), ``system.json`` (roofline off: durations are
replayed as given), ``remote_memory.json`` and a ``README.md`` with the ASTRA-sim command line
and what the files assume. It needs the optional ``mlc-chakra`` package.
"""

from __future__ import annotations

import gc
import json
import struct
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ..errors import ConfigError
from ..result import SimulationResult
from ..system.topology import LinkModel
from ..workload.chakra_pb import NS, chakra
from .chakra_tables import RankSends, action_tables, send_tables

GIB = float(1 << 30)
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


def _tag_order(sends: list[RankSends]) -> np.ndarray:
    """The run's transfers (numbered rank after rank, each rank's in its order) in tag order:
    by iteration, issue time, source, destination, microbatch and data; ties in the run's
    order (which keeps each source rank's own order)."""
    def col(name, dtype):
        parts = [np.asarray(getattr(s, name), dtype=dtype) for s in sends]
        return np.concatenate(parts) if parts else np.zeros(0, dtype)

    data = [d for s in sends for d in s.data]
    kinds = sorted(set(data))
    code = {k: i for i, k in enumerate(kinds)}
    src = np.concatenate([np.full(len(s.issued), r, np.int64) for r, s in enumerate(sends)]) \
        if sends else np.zeros(0, np.int64)
    seq = np.arange(len(src))
    return np.lexsort((seq, np.fromiter((code[d] for d in data), np.int64, len(data)),
                       col("microbatch", np.int64), col("dst_rank", np.int64), src,
                       col("issued", np.float64), col("iteration", np.int64)))


def write_chakra(result: SimulationResult, directory: str | Path) -> ChakraExport:
    """Write the run's ETs and ASTRA-sim configuration files into ``directory``."""
    # millions of small lists and tuples and no cycles: the collector's passes over them are
    # pure cost (as simulate() runs the engines)
    was = gc.isenabled()
    gc.disable()
    try:
        return _write_chakra(result, directory)
    finally:
        if was:
            gc.enable()


def _write_chakra(result: SimulationResult, directory: str | Path) -> ChakraExport:
    ch = chakra("--chakra")
    pb = ch.pb
    out = Path(directory)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise ConfigError(f"--chakra: cannot create {out}: {err.strerror or err}") from None
    P = result.schedule.pp
    rec = result.records
    export = ChakraExport(out, P)
    acts = action_tables(result)
    sends = send_tables(result)

    # an action by (iteration, stage, kind, microbatch): its index in the rank's order (a key
    # met twice names every action of it)
    index_of: list[dict] = []
    for t in acts:
        keys = list(zip(t.iteration, t.stage, t.kind, t.microbatch))
        first = dict(zip(keys, range(len(keys))))
        if len(first) != len(keys):
            dup: dict = defaultdict(list)
            for i, k in enumerate(keys):
                dup[k].append(i)
            first = dict(dup)
        index_of.append(first)

    # transfers: tag = index in a deterministic order; who produces and who consumes each
    flat = [(r, k) for r, s in enumerate(sends) for k in range(len(s.issued))]
    order = _tag_order(sends)
    n_tags = len(order)
    sends_at: list[dict] = [defaultdict(list) for _ in range(P)]   # action index -> [tag]
    recvs_at: list[dict] = [defaultdict(list) for _ in range(P)]
    tag_src: list[tuple] = [None] * n_tags    # (src rank, index in its sends)
    for tag, g in enumerate(order.tolist()):
        r, k = flat[g]
        s = sends[r]
        it, mb, data = s.iteration[k], s.microbatch[k], s.data[k]
        src_kinds = ("F",) if data == "F" else ("B", "I")
        tag_src[tag] = (r, k)
        for kind in src_kinds:
            found = index_of[r].get((it, s.src_stage[k], kind, mb))
            if found is not None:
                for i in (found if type(found) is list else (found,)):
                    sends_at[r][i].append(tag)
                break
        else:
            raise ConfigError(f"--chakra: transfer {s.src_stage[k]}->{s.dst_stage[k]} of "
                              f"microbatch {mb} has no producing action on rank {r}")
        d = s.dst_rank[k]
        for kind in src_kinds:
            found = index_of[d].get((it, s.dst_stage[k], kind, mb))
            if found is not None:
                for i in (found if type(found) is list else (found,)):
                    recvs_at[d][i].append(tag)
                break
        else:
            raise ConfigError(f"--chakra: transfer {s.src_stage[k]}->{s.dst_stage[k]} of "
                              f"microbatch {mb} has no consuming action on rank {d}")

    colls_by_rank: list[list] = [[] for _ in range(P)]
    for c in rec.collectives:
        colls_by_rank[c.rank].append(c)
    for cs in colls_by_rank:
        cs.sort(key=lambda c: (c.start, c.ready))

    pairs = {(r, d) for r, s in enumerate(sends) for d in set(s.dst_rank)}
    bw_gbps, lat_ns, notes = link_figures(result, pairs)
    export.notes += notes
    free_network = all(b <= 0 for s in sends for b in set(s.nbytes))
    meta_attrs = _metadata_attrs(pb, result, bw_gbps, lat_ns)

    Attr = pb.AttributeProto
    most = max([n_tags] + [len(a.stage) + sum(map(len, sends_at[r].values()))
                           + sum(map(len, recvs_at[r].values())) + len(colls_by_rank[r])
                           for r, a in enumerate(acts)])
    V = _varints(max(most + 1, 1 << 16))
    # per transfer, what its send and its receive node share: attributes (the tag's last)
    # and each node but its id (and a send's dependency): name, type, attributes
    comm_attrs: dict[tuple, bytes] = {}
    send_ty = b"\x18" + V[pb.COMM_SEND_NODE]
    recv_ty = b"\x18" + V[pb.COMM_RECV_NODE]
    send_head = [b""] * n_tags
    tag_attr = [b""] * n_tags
    recv_tail = [b""] * n_tags
    for tag, (r, k) in enumerate(tag_src):
        s = sends[r]
        key = (r, s.dst_rank[k], s.nbytes[k])
        fixed = comm_attrs.get(key)
        if fixed is None:
            fixed = comm_attrs[key] = _transfer_attrs(r, s.dst_rank[k], s.nbytes[k])
        v = V[tag]
        attrs = tag_attr[tag] = (fixed + b"\x52" + V[11 + len(v)] + b"\x0a\x08comm_tag\x38"
                                 + v)
        data, mb = s.data[k], s.microbatch[k]
        name = f"{s.src_stage[k]}SEND_{data}{mb}".encode()
        send_head[tag] = b"\x12" + V[len(name)] + name + send_ty + b"\x2a"
        name = f"{s.dst_stage[k]}RECV_{data}{mb}".encode()
        recv_tail[tag] = b"\x12" + V[len(name)] + name + recv_ty + attrs
    comp_ty = b"\x18" + V[pb.COMP_NODE]
    comp_fixed: dict[tuple, tuple] = {}   # an action's attributes but its microbatch, ...
    mb_attr: dict[int, bytes] = {}
    for r in range(P):
        a = acts[r]
        stage, kind, mbs, chunk, pair, its = (a.stage, a.kind, a.microbatch, a.chunk, a.pair,
                                              a.iteration)
        starts, ends = a.start, a.end
        n = len(stage)
        sends_r, recvs_r = sends_at[r], recvs_at[r]
        want_ends = bool(colls_by_rank[r])
        parts: list[bytes] = []
        add = parts.append
        nid = 0
        prev_dep = None                 # varint length + varint of the previous compute node
        last_by_end: list[tuple[float, int, int]] = []   # (end, iteration, node id)
        i = 0
        while i < n:
            # an overlapped pair is one step: it starts when both halves' inputs are in, and
            # sends both halves' outputs when it ends (pipesim's OVERLAP_F_B)
            j = i + 1
            p = pair[i]
            if p is not None and j < n and pair[j] == p and its[j] == its[i]:
                j += 1
            recv_ids = []
            for x in range(i, j):
                tags = recvs_r.get(x)
                if tags:
                    for tag in tags:
                        body = b"\x08" + V[nid] + recv_tail[tag]
                        add(V[len(body)])
                        add(body)
                        recv_ids.append(nid)
                        nid += 1
                    export.recv_nodes += len(tags)
            for x in range(i, j):
                st, kd, it = stage[x], kind[x], its[x]
                dur = round(ends[x] - starts[x], 3)   # end - start carries noise below a ps
                ck = (st, kd, chunk[x], it, dur, pair[x])
                got = comp_fixed.get(ck)
                if got is None:
                    micros = int(round(dur / 1000.0))
                    got = comp_fixed[ck] = (
                        b"\x38" + _varint(micros) if micros else b"",
                        b"".join(_attr_field(y) for y in (
                            _bool("is_cpu_op", False), _int(NS + "stage", st),
                            _str(NS + "kind", kd), _int(NS + "chunk", chunk[x]),
                            _int(NS + "iteration", it), _double(NS + "duration_ns", dur))
                            + ((_int(NS + "pair", pair[x]),) if pair[x] is not None else ())),
                        micros * 1000 != dur)
                mic, fixed, rounded = got
                mb = mbs[x]
                mba = mb_attr.get(mb)
                if mba is None:
                    mba = mb_attr[mb] = _attr_field(_int(NS + "microbatch", mb))
                name = f"{st}{kd}{mb}".encode()
                body = b"\x08" + V[nid] + b"\x12" + V[len(name)] + name + comp_ty
                if prev_dep is not None:
                    body += b"\x22" + prev_dep
                if recv_ids:
                    dp = b"".join([V[y] for y in recv_ids])
                    body += b"\x2a" + V[len(dp)] + dp
                    recv_ids = []
                body += mic + fixed + mba
                add(V[len(body)])
                add(body)
                if rounded:
                    export.rounded += 1
                v = V[nid]
                prev_dep = V[len(v)] + v
                if want_ends:
                    last_by_end.append((ends[x], it, nid))
                nid += 1
            export.compute_nodes += j - i
            for x in range(i, j):
                tags = sends_r.get(x)
                if tags:
                    for tag in tags:
                        body = b"\x08" + V[nid] + send_head[tag] + prev_dep + tag_attr[tag]
                        add(V[len(body)])
                        add(body)
                        nid += 1
                    export.send_nodes += len(tags)
            i = j
        prev_coll = None
        for c in colls_by_rank[r]:
            ready_node = _ready_node(last_by_end, c.iteration, c.ready)
            ctrl = tuple(x for x in (ready_node, prev_coll) if x is not None)
            dur = round(c.end - c.start, 3)
            add(_node(nid, f"dp_collective chunk{c.chunk} layer{c.layer}", pb.COMP_NODE,
                      ctrl, (), int(round(dur / 1000.0)), b"".join(
                          _attr_field(x) for x in (
                              _bool("is_cpu_op", True), _str(NS + "collective", "dp"),
                              _int(NS + "chunk", c.chunk), _int(NS + "layer", c.layer),
                              _int(NS + "bytes", int(c.nbytes)),
                              _double(NS + "duration_ns", dur)))))
            prev_coll = nid
            nid += 1
            export.collective_nodes += 1
        path = out / f"et.{r}.et"
        try:
            with open(path, "wb") as fh:
                meta = pb.GlobalMetadata(version="1.0.0")
                meta.attr.extend(meta_attrs + [Attr(name=NS + "rank", int64_val=r)])
                fh.write(_delimited(meta.SerializeToString()))
                fh.write(b"".join(parts))
        except OSError as err:
            raise ConfigError(f"--chakra: cannot write {path}: {err.strerror or err}") from None
    _write_configs(out, P, bw_gbps, lat_ns, free_network)
    _write_readme(out, result, export, bw_gbps, lat_ns, free_network)
    return export


# -- Chakra's Node in protobuf's wire format ---------------------------------------------------
# Millions of nodes: with protobuf's own runtime (upb, protobuf 7.36) a compute node built as a
# Node object and serialized cost 42 us, and 13 us copied from a parsed template with its varying
# fields set (20,000 nodes on the 2-CPU machine at load 5, where the loop below spends ~4 us a
# node), so the nodes are encoded here, field by field, as et_def.proto defines them (Node: id 1,
# name 2, type 3, ctrl_deps 4, data_deps 5 (packed), duration_micros 7, attr 10; AttributeProto:
# name 1, double_val 3, int32_val 7, int64_val 9, bool_val 27, string_val 29); the tests read them
# back with chakra's own decoder and hold the bytes to a golden. Repeated pieces (a transfer's
# attributes, an action's but its microbatch) are encoded once.
_VARINT: dict[int, bytes] = {}


def _varint(n: int) -> bytes:
    b = _VARINT.get(n)
    if b is not None:
        return b
    v = n & 0xFFFFFFFFFFFFFFFF   # negative numbers as protobuf writes them: 10 bytes
    out = bytearray()
    while v > 0x7F:
        out.append(0x80 | (v & 0x7F))
        v >>= 7
    out.append(v)
    b = bytes(out)
    if 0 <= n < 1 << 20:
        _VARINT[n] = b
    return b


def _varints(n: int) -> list[bytes]:
    """The varints of 0 .. n-1, indexed by value (ids and tags: one list look-up a node),
    made with numpy a byte length at a time (a Python loop per value took 0.8 s at 2^20)."""
    out: list[bytes] = []
    lo, width = 0, 1
    while lo < n:
        hi = min(n, 1 << (7 * width))
        v = np.arange(lo, hi, dtype=np.uint64)
        cols = np.empty((hi - lo, width), dtype=np.uint8)
        for b in range(width):
            cols[:, b] = ((v >> np.uint64(7 * b)) & np.uint64(0x7F)) | np.uint64(
                0x80 if b < width - 1 else 0)
        buf = cols.tobytes()
        out += [buf[i:i + width] for i in range(0, len(buf), width)]
        lo, width = hi, width + 1
    return out


def _delimited(data: bytes) -> bytes:
    """chakra's ``protolib.encodeMessage`` framing: the size as a varint, then the message."""
    return _varint(len(data)) + data


def _name(name: str) -> bytes:
    raw = name.encode()
    return b"\x0a" + _varint(len(raw)) + raw


def _int(name: str, v: int) -> bytes:
    return _name(name) + b"\x48" + _varint(int(v))          # int64_val


def _int32(name: str, v: int) -> bytes:
    return _name(name) + b"\x38" + _varint(int(v))          # int32_val


def _double(name: str, v: float) -> bytes:
    return _name(name) + b"\x19" + struct.pack("<d", v)     # double_val


def _bool(name: str, v: bool) -> bytes:
    return _name(name) + b"\xd8\x01" + (b"\x01" if v else b"\x00")   # bool_val


def _str(name: str, v: str) -> bytes:
    raw = v.encode()
    return _name(name) + b"\xea\x01" + _varint(len(raw)) + raw        # string_val


def _attr_field(attr: bytes) -> bytes:
    return b"\x52" + _varint(len(attr)) + attr              # Node.attr


def _node(nid: int, name: str, ntype: int, ctrl, data, micros: int, attrs: bytes) -> bytes:
    raw = name.encode()
    parts = [b"\x08", _varint(nid), b"\x12", _varint(len(raw)), raw, b"\x18", _varint(ntype)]
    if ctrl:
        p = b"".join(map(_varint, ctrl))
        parts += (b"\x22", _varint(len(p)), p)
    if data:
        p = b"".join(map(_varint, data))
        parts += (b"\x2a", _varint(len(p)), p)
    if micros:
        parts += (b"\x38", _varint(micros))
    parts.append(attrs)
    body = b"".join(parts)
    return _varint(len(body)) + body


def _transfer_attrs(src: int, dst: int, nbytes: int) -> bytes:
    """A transfer's attributes but its tag (the same on its send and its receive node)."""
    return b"".join(_attr_field(x) for x in (
        _bool("is_cpu_op", False), _int32("comm_src", src), _int32("comm_dst", dst),
        _int("comm_size", max(int(nbytes), 1)), _int(NS + "bytes", int(nbytes))))


def _ready_node(last_by_end: list[tuple[float, int, int]], iteration: int,
                ready: float) -> int | None:
    best = None
    for end, it, nid in last_by_end:
        if it == iteration and end <= ready + 1e-6:
            best = nid
    return best


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
        f"--network-configuration={d}/network.yml",
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
        "once-per-iteration rows are not written either.",
        "- `remote_memory.json`: no memory expansion.",
    ]
    lines += [f"- Note: {n}" for n in export.notes]
    (out / "README.md").write_text("\n".join(lines) + "\n")
