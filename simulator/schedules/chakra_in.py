"""Chakra execution traces (``PREFIX.<rank>.et``, ASTRA-sim 2.0's workload) as a pipesim run:
a :class:`Schedule` and a :class:`Workload` whose per-stage costs are the traces' durations.

The traces must be of a pipeline's shape: per rank, compute nodes (``COMP_NODE``) run in one
order (their id order, which is ASTRA-sim's order for a chain), each naming its stage, kind and
microbatch (pipesim's ``pipesim.stage/.kind/.microbatch`` attributes, or a name in torch's
notation such as ``3F1``); every transfer a ``COMM_SEND_NODE`` on its source matched by one
``COMM_RECV_NODE`` on its destination on (tag, src, dst, size), all of one size (the run's
``pp_comm``). Every action of a stage and kind lasts the same (pipesim charges one cost per stage
and kind). Anything else is refused in one line naming the file, the node and why.

Durations are ``pipesim.duration_ns`` when present (pipesim's own exports: exact), else
``duration_micros`` x 1000. The links are the exporter's (``pipesim.link_*`` in the metadata),
returned as system overrides for the caller to apply; without them the run's system decides.
"""

from __future__ import annotations

import io
import os
import re
from dataclasses import dataclass, field

from ..errors import ConfigError, PipesimError
from ..input_file import MAX_TRACE_BYTES, InputFileError, read_input_bytes
from ..workload.builder import make_layer
from ..workload.chakra_pb import NS, attr_value, chakra
from ..workload.model import Header, Workload
from .action import Action, Kind
from .schedule import Schedule

_RANK_FILE = re.compile(r"^(?P<base>.*)\.(?P<rank>\d+)\.et$")


@dataclass
class ImportedTraces:
    workload: Workload
    schedule: Schedule
    links: dict = field(default_factory=dict)   # system overrides ({"links.bandwidth_gbps": x})


@dataclass
class _Rank:
    path: str
    meta: dict
    compute: list   # (node id, name, stage, kind, microbatch, duration ns, pair or None)
    sends: list     # (node id, name, (tag, src, dst, size), bytes)
    recvs: list


def rank_files(prefix: str) -> list[str]:
    """``PREFIX.0.et`` .. ``PREFIX.<n-1>.et``: every rank from 0 up, none missing."""
    folder = os.path.dirname(prefix) or "."
    base = os.path.basename(prefix)
    try:
        names = os.listdir(folder)
    except OSError as err:
        raise ConfigError(f"--chakra-in: cannot read {folder}: {err.strerror or err}") from None
    ranks = set()
    for name in names:
        m = _RANK_FILE.match(name)
        if m and m.group("base") == base:
            ranks.add(int(m.group("rank")))
    if not ranks:
        raise ConfigError(f"--chakra-in: no {prefix}.<rank>.et file (expected {prefix}.0.et, "
                          f"{prefix}.1.et, ...)")
    n = max(ranks) + 1
    missing = sorted(set(range(n)) - ranks)
    if missing:
        raise ConfigError(f"--chakra-in: {prefix}.{missing[0]}.et: missing (found ranks "
                          f"{', '.join(map(str, sorted(ranks)))}; expected every rank 0..{n - 1})")
    return [f"{prefix}.{r}.et" for r in range(n)]


def read_chakra(prefix: str) -> ImportedTraces:
    """Read ``PREFIX.<rank>.et`` for every rank into a workload and a schedule."""
    ch = chakra("--chakra-in")
    paths = rank_files(prefix)
    ranks = [_read_rank(ch, path, r) for r, path in enumerate(paths)]
    P = len(ranks)
    meta = ranks[0].meta
    declared = meta.get(NS + "pp")
    if declared is not None and declared != P:
        raise ConfigError(f"--chakra-in: {paths[0]}: {NS}pp says {declared} ranks, found {P} "
                          f"files ({paths[-1]} is the last)")
    pp_comm = _match_transfers(ranks)

    # the schedule: per rank its compute actions in id order; placement from the stages
    placement: dict[int, int] = {}
    steps = []
    costs: dict[tuple[int, str], tuple[float, str, int]] = {}   # (stage, kind) -> (ns, where)
    microbatches = set()
    for r, rank in enumerate(ranks):
        acts = []
        for nid, name, stage, kind, mb, dur, pair in rank.compute:
            where = f"{rank.path}: node {nid} {name!r}"
            other = placement.setdefault(stage, r)
            if other != r:
                raise ConfigError(f"--chakra-in: {where}: stage {stage} on rank {r}, but on "
                                  f"rank {other} in {ranks[other].path}")
            seen = costs.get((stage, kind))
            if seen is None:
                costs[(stage, kind)] = (dur, where)
            elif abs(seen[0] - dur) > 1e-3:
                raise ConfigError(f"--chakra-in: {where}: lasts {dur:g} ns, but {seen[1]} "
                                  f"(the same stage {stage} and kind {kind}) {seen[0]:g} ns; "
                                  "pipesim charges one cost per stage and kind")
            microbatches.add(mb)
            acts.append(Action(stage, Kind(kind), mb, pair))
        steps.append(tuple(acts))
    n_stages = max(placement) + 1 if placement else 0
    missing = sorted(set(range(n_stages)) - set(placement))
    if missing or not n_stages:
        raise ConfigError(f"--chakra-in: {prefix}: no compute node for stage "
                          f"{missing[0] if missing else 0} (stages must be 0..{n_stages - 1})")
    M = max(microbatches) + 1
    stage_chunk = tuple(meta.get(NS + "stage_chunk") or range(n_stages))
    pipelines_text = meta.get(NS + "pipelines")
    pipelines = (tuple(tuple(int(x) for x in p.split(",")) for p in pipelines_text.split(";"))
                 if pipelines_text else ())
    vpp = n_stages // P if n_stages % P == 0 else 1
    name = meta.get(NS + "schedule") or "chakra"
    try:
        schedule = Schedule(name, P, int(meta.get(NS + "vpp", vpp)), M,
                            tuple(placement[s] for s in range(n_stages)), steps,
                            pipelines=pipelines, stage_chunk=stage_chunk,
                            flush=bool(meta.get(NS + "flush", True)))
    except PipesimError as err:
        raise ConfigError(f"--chakra-in: {prefix}: {err}") from None

    # the workload: one layer per model chunk, F / I / W of its stages (B = I + W)
    n_chunks = max(stage_chunk) + 1
    layers = []
    for c in range(n_chunks):
        stages = [s for s in range(n_stages) if stage_chunk[s] == c]
        f = _cost(costs, stages, "F")
        i = _cost(costs, stages, "I")
        w = _cost(costs, stages, "W")
        b = _cost(costs, stages, "B")
        if i is None and w is None:
            i, w = (b or 0), 0
        else:
            i, w = i or 0, w or 0
            if b is not None and b != i + w:
                raise ConfigError(f"--chakra-in: {prefix}: stage(s) {stages}: B lasts {b:g} ns "
                                  f"but I + W {i + w:g} ns; pipesim's B is I + W")
        layers.append(make_layer(c, _int(f or 0), _int(i), _int(w)))
    header = Header(policy="HYBRID_TRANSFORMER_FWD_IN_BCKWD", tp=1, pp=P, vpp=schedule.vpp,
                    ga=M, all_gpus=P, pp_comm=pp_comm)
    workload = Workload(path=f"{prefix}.*.et", header=header, layers=tuple(layers))
    links = {}
    if NS + "link_bandwidth_gbps" in meta and pp_comm > 0:
        links = {"links.bandwidth_gbps": meta[NS + "link_bandwidth_gbps"],
                 "links.latency_ns": meta[NS + "link_latency_ns"]}
    return ImportedTraces(workload, schedule, links)


def _int(x: float) -> float | int:
    return int(x) if float(x).is_integer() else x


def _cost(costs: dict, stages: list[int], kind: str) -> float | None:
    found = [costs[(s, kind)][0] for s in stages if (s, kind) in costs]
    if not found:
        return None
    if len(set(found)) > 1:
        raise ConfigError(f"--chakra-in: stages {stages} share a model chunk but their {kind} "
                          f"last {sorted(set(found))} ns")
    return found[0]


_NAME = re.compile(r"^\s*(\d+)\s*([FBIW])\s*(\d+)\s*$")


def _read_rank(ch, path: str, rank: int) -> _Rank:
    pb = ch.pb

    try:   # the one reader: a FIFO or /dev/zero is refused, not read forever
        fh = io.BytesIO(read_input_bytes(path, MAX_TRACE_BYTES))
    except InputFileError as err:
        raise ConfigError(f"--chakra-in: cannot read {path}: {err.problem}") from None
    with fh:
        meta_msg = pb.GlobalMetadata()
        try:
            if not ch.decode(fh, meta_msg):
                raise ConfigError(f"--chakra-in: {path}: empty (expected a GlobalMetadata "
                                  "message, then Node messages)")
        except ConfigError:
            raise
        except Exception as err:
            raise ConfigError(f"--chakra-in: {path}: not a Chakra ET ({err})") from None
        meta = {a.name: attr_value(a) for a in meta_msg.attr}
        out = _Rank(path, meta, [], [], [])
        nodes = []
        while True:
            node = pb.Node()
            try:
                if not ch.decode(fh, node):
                    break
            except Exception as err:
                raise ConfigError(f"--chakra-in: {path}: node {len(nodes)}: not a Chakra Node "
                                  f"message ({err})") from None
            nodes.append(node)
    nodes.sort(key=lambda n: n.id)
    names = {v: k for k, v in pb.NodeType.items()}
    for node in nodes:
        attrs = {a.name: attr_value(a) for a in node.attr}
        where = f"{path}: node {node.id} {node.name!r}"
        if node.type == pb.COMP_NODE:
            if attrs.get("is_cpu_op"):
                raise ConfigError(f"--chakra-in: {where}: a node on the second (is_cpu_op) "
                                  "slot; pipesim imports GPU compute, send and receive nodes only")
            stage, kind, mb = attrs.get(NS + "stage"), attrs.get(NS + "kind"), \
                attrs.get(NS + "microbatch")
            if stage is None or kind is None or mb is None:
                m = _NAME.match(node.name)
                if not m:
                    raise ConfigError(f"--chakra-in: {where}: no stage, kind and microbatch "
                                      f"(expected attributes {NS}stage/kind/microbatch or a "
                                      "name in torch's notation such as 3F1)")
                stage, kind, mb = int(m.group(1)), m.group(2), int(m.group(3))
            if kind not in ("F", "B", "I", "W"):
                raise ConfigError(f"--chakra-in: {where}: kind {kind!r}; expected F, B, I or W")
            if attrs.get(NS + "iteration", 0):
                raise ConfigError(f"--chakra-in: {where}: iteration {attrs[NS + 'iteration']}; "
                                  "pipesim imports one iteration")
            dur = attrs.get(NS + "duration_ns")
            if dur is None:
                dur = float(node.duration_micros) * 1000.0
            pair = attrs.get(NS + "pair")   # an overlapped F/B pair's half (OVERLAP_F_B)
            out.compute.append((node.id, node.name, int(stage), kind, int(mb), float(dur),
                                None if pair is None else int(pair)))
        elif node.type in (pb.COMM_SEND_NODE, pb.COMM_RECV_NODE):
            missing = [k for k in ("comm_src", "comm_dst", "comm_size", "comm_tag")
                       if k not in attrs]
            if missing:
                raise ConfigError(f"--chakra-in: {where}: no {missing[0]} attribute")
            key = (int(attrs["comm_tag"]), int(attrs["comm_src"]), int(attrs["comm_dst"]),
                   int(attrs["comm_size"]))
            nbytes = int(attrs.get(NS + "bytes", key[3]))
            mine = key[1] if node.type == pb.COMM_SEND_NODE else key[2]
            if mine != rank:
                side = "comm_src" if node.type == pb.COMM_SEND_NODE else "comm_dst"
                raise ConfigError(f"--chakra-in: {where}: {side} {mine}, but this is rank "
                                  f"{rank}'s file")
            (out.sends if node.type == pb.COMM_SEND_NODE else out.recvs).append(
                (node.id, node.name, key, nbytes))
        else:
            raise ConfigError(f"--chakra-in: {where}: node type "
                              f"{names.get(node.type, node.type)}; pipesim runs COMP_NODE, "
                              "COMM_SEND_NODE and COMM_RECV_NODE")
    return out


def _match_transfers(ranks: list[_Rank]) -> int:
    """Every send matched by one receive (and the other way); the one size they move."""
    recvs: dict[tuple, tuple[str, tuple]] = {}
    for rank in ranks:
        for nid, name, key, nbytes in rank.recvs:
            where = f"{rank.path}: node {nid} {name!r}"
            if key in recvs:
                raise ConfigError(f"--chakra-in: {where}: a second receive with tag {key[0]} "
                                  f"from rank {key[1]} (the first: {recvs[key][0]})")
            recvs[key] = (where, (nid, name, key, nbytes))
    sizes: dict[int, str] = {}
    for rank in ranks:
        for nid, name, key, nbytes in rank.sends:
            where = f"{rank.path}: node {nid} {name!r}"
            if key not in recvs:
                raise ConfigError(f"--chakra-in: {where}: no receive on rank {key[2]} with tag "
                                  f"{key[0]}, source {key[1]} and size {key[3]}")
            recvs.pop(key)
            sizes.setdefault(nbytes, where)
    if recvs:
        where, (_, _, key, _) = min(recvs.values())
        raise ConfigError(f"--chakra-in: {where}: no send on rank {key[1]} with tag {key[0]}, "
                          f"destination {key[2]} and size {key[3]}")
    if len(sizes) > 1:
        (a, wa), (b, wb) = sorted(sizes.items())[:2]
        raise ConfigError(f"--chakra-in: {wb}: moves {b} bytes, but {wa} {a}; pipesim moves one "
                          "size (pp_comm) between stages")
    return next(iter(sizes), 0)
