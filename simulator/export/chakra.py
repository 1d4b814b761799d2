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
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ..errors import ConfigError
from ..result import SimulationResult
from ..system.topology import LinkModel
from ..workload.chakra_pb import NS, chakra
from .chakra_tables import NO_PAIR, Actions, Sends, action_tables, send_tables
from .chakra_wire import Pieces, varint, varint_width

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


def _tag_order(sends: Sends) -> np.ndarray:
    """The run's transfers (numbered rank after rank, each rank's in its order) in tag order:
    by iteration, issue time, source, destination, microbatch and data; ties in the run's
    order (which keeps each source rank's own order)."""
    seq = np.arange(len(sends.issued))
    return np.lexsort((seq, sends.data, sends.microbatch, sends.dst_rank, sends.src_rank,
                       sends.issued, sends.iteration))


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
    out = _make_directory(directory)
    P = result.schedule.pp
    groups = _Groups(result, P) if collectives == "nodes" else None
    replicas = groups.replicas if groups else 1
    export = ChakraExport(out, P * replicas, collectives=collectives, replicas=replicas)
    acts = action_tables(result)
    sends = send_tables(result, acts)
    clock("read records")
    tags = _Tags(sends, _tag_order(sends))
    links = _match_transfers(acts, tags)
    layout = _layout(acts, links)
    clock("match transfers, lay out nodes")
    pairs = np.unique(tags.src * P + tags.dst)
    bw_gbps, lat_ns, notes = link_figures(result, {divmod(int(k), P) for k in pairs})
    export.notes += notes
    free_network = not bool((sends.nbytes > 0).any())
    pieces = Pieces(max(int(np.diff(layout.node_bounds).max(initial=0)) + 1, tags.n + 1,
                        1 << 16))
    comp = _compute_rows(pieces, acts, layout, pb, export)
    recv, send = _transfer_rows(pieces, tags, links, layout, pb, P)
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
            recv, send = _transfer_rows(pieces, tags, links, layout, pb, P, d * P)
        for r in range(P):
            rows = _rank_rows(r, acts, links, layout, comp, recv, send, E)
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


class _Groups:
    """``--chakra-collectives nodes``: NPU ``d x P + r`` runs pipeline rank ``r`` of
    data-parallel replica ``d`` (a rank's TP group is one NPU, as in pipesim); a rank's DP
    collective runs on the NPUs of its replicas (DP_EP: those of its expert-parallel class),
    named by ``pg_name`` in ``comm_group.json`` (ids from 1: ASTRA-sim reads 0 as every NPU)."""

    def __init__(self, result: SimulationResult, P: int) -> None:
        from ..system.topology import Placement
        from ..workload.model import CommGroup

        place = Placement.of(result.workload.header, result.system, P)
        self.P, self.replicas = P, place.dp
        active = [layer for layer in result.workload.layers if layer.wg_comm.active]
        kinds = {layer.wg_comm.group for layer in active}
        self.comm_type = {layer.index: COMM_TYPES[layer.wg_comm.type.value] for layer in active}
        # replicas d and d' share a group when d = d' mod classes
        self.classes = place.ep if CommGroup.DP_EP in kinds and place.ep > 1 else 1
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
            fh.write(_delimited(meta.SerializeToString()))
            for chunk in nodes:
                fh.write(chunk)
            fh.write(tail)
    except OSError as err:
        raise ConfigError(f"--chakra: cannot write {path}: {err.strerror or err}") from None


class _Tags:
    """The run's transfers in tag order (tag = index): each one's fields."""

    def __init__(self, sends: Sends, order: np.ndarray) -> None:
        self.n = len(order)
        self.src = sends.src_rank[order]
        self.dst = sends.dst_rank[order]
        self.src_stage = sends.src_stage[order]
        self.dst_stage = sends.dst_stage[order]
        self.data = sends.data[order]
        self.datas = sends.datas
        self.microbatch = sends.microbatch[order]
        self.iteration = sends.iteration[order]
        self.nbytes = sends.nbytes[order]


@dataclass
class _Links:
    """Which actions send and receive each tag: (action, tag) pairs sorted by action, then tag
    (actions are global indices, rank after rank)."""

    send_action: np.ndarray
    send_tag: np.ndarray
    recv_action: np.ndarray
    recv_tag: np.ndarray


def _match_transfers(acts: Actions, tags: _Tags) -> _Links:
    """Each transfer's producing action (on its source rank: the F of its stage and microbatch
    for an activation, the B, else the I, for a gradient) and consuming one (the same kinds on
    its destination rank), in one sorted search: a key met by several actions names them all."""
    P = len(acts.bounds) - 1
    n_it = int(max(acts.iteration.max(initial=0), tags.iteration.max(initial=0))) + 1
    n_st = int(max(acts.stage.max(initial=0), tags.src_stage.max(initial=0),
                   tags.dst_stage.max(initial=0))) + 1
    n_kd = len(acts.kinds) + 1
    n_mb = int(max(acts.microbatch.max(initial=0), tags.microbatch.max(initial=0))) + 1

    def key(rank, it, stage, kind, mb):
        return (((rank * n_it + it) * n_st + stage) * n_kd + kind) * n_mb + mb

    rank_of = np.repeat(np.arange(P), np.diff(acts.bounds))
    akey = key(rank_of, acts.iteration, acts.stage, acts.kind, acts.microbatch)
    perm = np.argsort(akey, kind="stable")
    skey = akey[perm]
    code = {k: i for i, k in enumerate(acts.kinds)}
    none = len(acts.kinds)          # a kind no action has
    activation = tags.data == (tags.datas.index("F") if "F" in tags.datas else -1)
    first = np.where(activation, code.get("F", none), code.get("B", none))
    second = np.where(activation, none, code.get("I", none))

    unique = not bool((skey[1:] == skey[:-1]).any())

    def search(q):
        lo = np.searchsorted(skey, q, "left")
        if unique:   # one action per key: found or not
            return lo, lo + (skey[np.minimum(lo, len(skey) - 1)] == q) if len(skey) else lo
        return lo, np.searchsorted(skey, q, "right")

    def find(rank, stage):
        lo, hi = search(key(rank, tags.iteration, stage, first, tags.microbatch))
        miss = np.flatnonzero(hi == lo)
        if len(miss):      # a gradient's producer: the B, else the I
            a, b = search(key(rank[miss], tags.iteration[miss], stage[miss], second[miss],
                              tags.microbatch[miss]))
            lo[miss], hi[miss] = a, b
        return lo, hi

    slo, shi = find(tags.src, tags.src_stage)
    rlo, rhi = find(tags.dst, tags.dst_stage)
    bad = (shi == slo) | (rhi == rlo)
    if bad.any():
        t = int(np.flatnonzero(bad)[0])
        side, rank = (("producing", tags.src[t]) if shi[t] == slo[t] else
                      ("consuming", tags.dst[t]))
        raise ConfigError(f"--chakra: transfer {tags.src_stage[t]}->{tags.dst_stage[t]} of "
                          f"microbatch {tags.microbatch[t]} has no {side} action on rank "
                          f"{rank}")

    def pairs(lo, hi):
        counts = hi - lo
        tag = np.repeat(np.arange(tags.n), counts)
        within = np.arange(len(tag)) - np.repeat(np.cumsum(counts) - counts, counts)
        action = perm[np.repeat(lo, counts) + within]
        o = np.lexsort((tag, action))
        return action[o], tag[o]

    return _Links(*pairs(slo, shi), *pairs(rlo, rhi))


@dataclass
class _Layout:
    """Where each node goes: a rank's nodes are, step after step, the step's receives, its
    compute nodes, its sends (a step: one action, or an overlapped pair's two halves); ids are
    positions in the rank's file."""

    node_bounds: np.ndarray    # P + 1: first node of each rank, over all ranks
    comp_id: np.ndarray        # per action: its node id (in its rank)
    recv_id: np.ndarray        # per (action, tag) receive pair
    send_id: np.ndarray
    step: np.ndarray           # per action: its step (global)
    step_first: np.ndarray     # per step: its first action
    step_last: np.ndarray      # per step: its last action
    recv_step: np.ndarray      # per receive pair: its step
    recv_step_first: np.ndarray   # per step: its first receive pair


def _steps(acts: Actions) -> np.ndarray:
    """Per action, whether the next action is the second half of its overlapped pair: both
    halves of one pair number and iteration on one rank, pairs taken left to right (pipesim's
    OVERLAP_F_B: it starts when both halves' inputs are in, sends both outputs when it ends)."""
    n = len(acts.pair)
    joined = np.zeros(n, dtype=bool)
    if n < 2:
        return joined
    rank_end = np.zeros(n, dtype=bool)
    rank_end[acts.bounds[1:][acts.bounds[1:] > 0] - 1] = True
    cand = ((acts.pair[:-1] != NO_PAIR) & (acts.pair[1:] == acts.pair[:-1])
            & (acts.iteration[1:] == acts.iteration[:-1]) & ~rank_end[:-1])
    last = -2
    for x in np.flatnonzero(cand).tolist():
        if x != last + 1:        # not the second half of the pair just taken
            joined[x] = True
            last = x
    return joined


def _layout(acts: Actions, links: _Links) -> _Layout:
    n = len(acts.stage)
    joined = _steps(acts)
    starts = np.ones(n, dtype=bool)
    starts[1:] = ~joined[:-1]
    step = np.cumsum(starts) - 1
    n_steps = int(step[-1]) + 1 if n else 0
    step_first = np.flatnonzero(starts)
    step_last = np.append(step_first[1:], n) - 1
    size_c = step_last - step_first + 1
    recv_step, send_step = step[links.recv_action], step[links.send_action]
    size_r = np.bincount(recv_step, minlength=n_steps)
    size_s = np.bincount(send_step, minlength=n_steps)
    size = size_r + size_c + size_s
    at = np.cumsum(size) - size                   # first node of each step, over all ranks
    rank_first_step = np.searchsorted(step_first, acts.bounds)   # P + 1
    node_bounds = np.append(at, at[-1] + size[-1] if n_steps else 0)[rank_first_step]
    recv_first = np.cumsum(size_r) - size_r       # first receive pair of each step
    send_first = np.cumsum(size_s) - size_s
    rank_of_step = np.repeat(np.arange(len(acts.bounds) - 1), np.diff(rank_first_step))
    base = at - node_bounds[rank_of_step]         # first node id of each step in its rank
    comp_id = base[step] + size_r[step] + (np.arange(n) - step_first[step])
    recv_id = base[recv_step] + (np.arange(len(recv_step)) - recv_first[recv_step])
    send_id = (base[send_step] + size_r[send_step] + size_c[send_step]
               + (np.arange(len(send_step)) - send_first[send_step]))
    return _Layout(node_bounds, comp_id, recv_id, send_id, step, step_first, step_last,
                   recv_step, recv_first)


_C08, _C12, _C22, _C2A, _C52 = b"\x08", b"\x12", b"\x22", b"\x2a", b"\x52"
_TAG_NAME = b"\x0a\x08comm_tag\x38"                               # comm_tag, int32_val
ID = np.int32       # piece ids
_MB_NAME = b"\x0a" + bytes([len(NS + "microbatch")]) + (NS + "microbatch").encode() + b"\x48"


def _decimals(pieces: Pieces, values: np.ndarray, base: dict) -> np.ndarray:
    """Piece ids of the values' decimal strings (the numbers in node names)."""
    top = int(values.max(initial=0)) + 1
    if base.get("n", 0) < top:
        base["ids"] = pieces.add_all([str(i).encode() for i in range(top)])
        base["n"] = top
    return base["ids"][values]


def _distinct(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """np.unique(values, return_inverse=True) for non-negative integers; a table over the
    values' range when it is small (no sort)."""
    top = int(values.max(initial=0)) + 1 if len(values) else 0
    if values.dtype.kind not in "iu" or top > 4 * len(values) + 1024 or \
            int(values.min(initial=0)) < 0:
        uniq, inverse = np.unique(values, return_inverse=True)
        return uniq, inverse.reshape(-1)
    seen = np.zeros(top, dtype=bool)
    seen[values] = True
    uniq = np.flatnonzero(seen)
    index = np.cumsum(seen) - 1
    return uniq, index[values]


def _pieces_by(pieces: Pieces, cols: list[np.ndarray], make) -> np.ndarray:
    """Per row of the (integer) columns, the piece ``make(*row)``, made once per distinct
    row (the columns' values folded into one code a column at a time: no overflow)."""
    n = len(cols[0])
    code = np.zeros(n, np.int64)
    for c in cols:
        c = c - c.min(initial=0)
        _, code = _distinct(code * (int(c.max(initial=0)) + 1) + c)
    top = int(code.max(initial=-1)) + 1
    first = np.empty(top, np.int64)
    first[code[::-1]] = np.arange(n - 1, -1, -1)       # each code's first row
    rows = zip(*[c[first].tolist() for c in cols])
    return pieces.add_all([make(*row) for row in rows])[code]


def _digits(values: np.ndarray) -> np.ndarray:
    """Decimal digits of non-negative integers."""
    d = np.ones(len(values), np.int64)
    for k in range(1, 19):
        d += values >= 10 ** k
    return d


def _with_length(pieces: Pieces, cols: list) -> np.ndarray:
    """A table of nodes (a row each, a piece id per column; a column may be one id for all),
    each behind its length prefix (protobuf's length-delimited framing)."""
    n = max(len(c) for c in cols if isinstance(c, np.ndarray))
    rows = np.empty((n, len(cols) + 1), dtype=ID)
    total = np.zeros(n, np.int64)
    for i, c in enumerate(cols, 1):
        rows[:, i] = c
        total += pieces.lengths(c)
    if n and int(total.max()) >= pieces.n_varints:
        raise AssertionError("a Chakra node longer than the varint table")
    rows[:, 0] = total
    return rows


def _compute_rows(pieces: Pieces, acts: Actions, layout: _Layout, types,
                  export: ChakraExport) -> np.ndarray:
    """A COMP_NODE per action: id, name (``3F1``), type, the rank's previous compute node as
    its control dependency, its step's receives as data dependencies (on the step's first
    half), duration, attributes."""
    n = len(acts.stage)
    E = pieces.add(b"")
    kinds = acts.kinds
    # name: its length, the stage and kind, then the microbatch (a table of decimals)
    name_head = _pieces_by(pieces, [acts.stage, acts.kind, _digits(acts.microbatch)],
                           lambda st, kd, digits: _C12 + varint(len(str(st)) + len(kinds[kd])
                                                                + digits)
                           + f"{st}{kinds[kd]}".encode())
    # control dependency: the rank's previous action
    has_prev = np.ones(n, dtype=bool)
    has_prev[acts.bounds[:-1][acts.bounds[:-1] < n]] = False
    prev = np.roll(layout.comp_id, 1)
    comp_type = b"\x18" + varint(types.COMP_NODE)
    ctrl = [np.where(has_prev, pieces.add(comp_type + _C22), pieces.add(comp_type)),
            np.where(has_prev, varint_width(prev), E), np.where(has_prev, prev, E)]
    # duration: whole microseconds, and the exact ns to the ps (end - start carries noise)
    uniq, dur = np.unique(acts.end - acts.start, return_inverse=True)
    dur = dur.reshape(-1)
    durs = [round(d, 3) for d in uniq.tolist()]
    micros = [int(round(d / 1000.0)) for d in durs]
    rounded = np.array([m * 1000 != d for m, d in zip(micros, durs)], dtype=bool)
    export.rounded = int(rounded[dur].sum())

    def fixed(d, st, kd, ch, it, pair) -> bytes:   # an action's attributes but its microbatch
        return (b"\x38" + varint(micros[d]) if micros[d] else b"") + b"".join(
            _attr_field(y) for y in (
                _bool("is_cpu_op", False), _int(NS + "stage", st), _str(NS + "kind", kinds[kd]),
                _int(NS + "chunk", ch), _int(NS + "iteration", it),
                _double(NS + "duration_ns", durs[d]))
            + ((_int(NS + "pair", pair),) if pair != NO_PAIR else ()))

    attrs = _pieces_by(pieces, [dur, acts.stage, acts.kind, acts.chunk, acts.iteration,
                                acts.pair], fixed)
    microbatch = _pieces_by(pieces, [acts.microbatch], lambda mb: _attr_field(
        _int(NS + "microbatch", mb)))
    return _with_length(pieces, [
        pieces.add(_C08), layout.comp_id, name_head, _decimals(pieces, acts.microbatch, {}),
        *ctrl, *_receive_deps(pieces, layout, n, E), attrs, microbatch])


def _receive_deps(pieces: Pieces, layout: _Layout, n: int, E: int) -> list[np.ndarray]:
    """The data-dependency columns: the key and packed length, then a column per receive (as
    many as the step with the most), on each step's first action."""
    n_steps = len(layout.step_first)
    size = np.bincount(layout.recv_step, minlength=n_steps)
    most = int(size.max(initial=0))
    head = np.full(n, E, ID)
    has = size > 0
    packed = np.bincount(layout.recv_step, weights=varint_width(layout.recv_id),
                         minlength=n_steps).astype(np.int64)
    head[layout.step_first[has]] = _pieces_by(pieces, [packed[has]],
                                              lambda k: _C2A + varint(k))
    deps = np.full((n, most), E, ID)
    k = np.arange(len(layout.recv_step)) - layout.recv_step_first[layout.recv_step]
    deps[layout.step_first[layout.recv_step], k] = layout.recv_id
    return [head, *deps.T]


def _transfer_rows(pieces: Pieces, tags: _Tags, links: _Links, layout: _Layout, types,
                   P: int, npu: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """A COMM_RECV_NODE and a COMM_SEND_NODE per (action, tag) pair: id, name (``2RECV_F5``),
    type, the send's data dependency (its step's last compute node), attributes (comm_src,
    comm_dst: ranks + ``npu``; comm_size, comm_tag)."""
    nb_uniq, nb_code = _distinct(tags.nbytes)
    tag = np.arange(tags.n)
    # the attributes: the link's and the size's, then comm_tag up to its value
    link_tag = _pieces_by(pieces, [tags.src, tags.dst, nb_code, varint_width(tag)],
                          lambda src, dst, nb, w: _transfer_attrs(src + npu, dst + npu,
                                                                  int(nb_uniq[nb]))
                          + _C52 + varint(11 + w) + _TAG_NAME)
    digits = _digits(tags.microbatch)
    decimals = _decimals(pieces, tags.microbatch, {})
    rows = []
    for word, stage, ids, which, node_type in (
            ("RECV_", tags.dst_stage, layout.recv_id, links.recv_tag, types.COMM_RECV_NODE),
            ("SEND_", tags.src_stage, layout.send_id, links.send_tag, types.COMM_SEND_NODE)):
        name_head = _pieces_by(pieces, [stage, tags.data, digits], lambda st, d, digits: (
            lambda head: _C12 + varint(len(head) + digits) + head)(
                f"{st}{word}{tags.datas[d]}".encode()))
        cols = [pieces.add(_C08), ids, name_head[which], decimals[which]]
        if word == "SEND_":   # a data dependency on the action that produced the data
            producer = layout.comp_id[layout.step_last[layout.step[links.send_action]]]
            cols += [pieces.add(b"\x18" + varint(node_type) + _C2A), varint_width(producer),
                     producer]
        else:
            cols.append(pieces.add(b"\x18" + varint(node_type)))
        cols += [link_tag[which], tag[which]]
        rows.append(_with_length(pieces, cols))
    return rows[0], rows[1]


def _rank_rows(r: int, acts: Actions, links: _Links, layout: _Layout, comp: np.ndarray,
               recv: np.ndarray, send: np.ndarray, E: int) -> np.ndarray:
    """Rank ``r``'s nodes as rows of piece ids, in its file's order (row = node id)."""
    lo, hi = acts.bounds[r], acts.bounds[r + 1]
    width = max(comp.shape[1], recv.shape[1], send.shape[1])
    rows = np.full((layout.node_bounds[r + 1] - layout.node_bounds[r], width), E, ID)
    rows[layout.comp_id[lo:hi], :comp.shape[1]] = comp[lo:hi]
    for action, ids, table in ((links.recv_action, layout.recv_id, recv),
                               (links.send_action, layout.send_id, send)):
        a, b = np.searchsorted(action, [lo, hi])
        rows[ids[a:b], :table.shape[1]] = table[a:b]
    return rows


def _collectives_by_rank(result: SimulationResult, P: int) -> list[list]:
    colls: list[list] = [[] for _ in range(P)]
    for c in result.records.collectives:
        colls[c.rank].append(c)
    for cs in colls:
        cs.sort(key=lambda c: (c.start, c.ready))
    return colls


def _collective_nodes(colls: list, acts: Actions, layout: _Layout, r: int, types,
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
        ours = (_str(NS + "collective", "dp"), _int(NS + "chunk", c.chunk),
                _int(NS + "layer", c.layer), _int(NS + "bytes", int(c.nbytes)),
                _double(NS + "duration_ns", dur))
        if group is None:
            parts.append(_node(nid, f"dp_collective chunk{c.chunk} layer{c.layer}",
                               types.COMP_NODE, ctrl, (), int(round(dur / 1000.0)),
                               b"".join(_attr_field(x) for x in (
                                   _bool("is_cpu_op", True),) + ours)))
        else:
            parts.append(_node(nid, f"dp_collective chunk{c.chunk} layer{c.layer}",
                               types.COMM_COLL_NODE, ctrl, (), 0, b"".join(
                                   _attr_field(x) for x in (
                                       _bool("is_cpu_op", True),
                                       _int("comm_type", group[1][c.layer]),
                                       _int("comm_size", max(int(c.nbytes), 1)),
                                       _str("pg_name", group[0])) + ours)))
        prev = nid
        nid += 1
        export.collective_nodes += 1
    return b"".join(parts)


# -- Chakra's Node in protobuf's wire format ---------------------------------------------------
# Millions of nodes: with protobuf's own runtime (upb, protobuf 7.36) a compute node built as a
# Node object and serialized cost 42 us, and 13 us copied from a parsed template with its varying
# fields set (20,000 nodes on the 2-CPU machine at load 5, where the loop below spends ~4 us a
# node), so the nodes are encoded here, field by field, as et_def.proto defines them (Node: id 1,
# name 2, type 3, ctrl_deps 4, data_deps 5 (packed), duration_micros 7, attr 10; AttributeProto:
# name 1, double_val 3, int32_val 7, int64_val 9, bool_val 27, string_val 29); the tests read them
# back with chakra's own decoder and hold the bytes to a golden. Each distinct piece is encoded
# once and the nodes gathered from them with numpy (``chakra_wire``).
_varint = varint


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
        "`comm_size` in bytes, `pg_name`) on the NPU's second slot (`is_cpu_op`), after the "
        "compute node that made its gradient ready; `comm_group.json` lists each group's NPUs "
        "(`pg_name` -> NPUs). ASTRA-sim prices these collectives itself, on `network.yml`'s "
        "links with `system.json`'s `direct` implementations: its times are its own (pipesim's "
        "are in the attribute `pipesim.duration_ns`). Their `update_time`, runtime-profile "
        "costs outside actions and once-per-iteration rows are not written. ASTRA-sim ignores "
        "a comm-group file whose path contains the word `empty`.")
