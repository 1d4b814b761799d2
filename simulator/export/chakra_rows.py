"""A Chakra export's nodes as rows of piece ids (:class:`~.chakra_wire.Pieces`): a compute node
per action, a receive and a send node per transfer, each a row whose pieces, gathered, are the
node's protobuf bytes with its length prefix."""

from __future__ import annotations

import numpy as np

from ..workload.chakra_pb import NS
from .chakra_layout import Layout, Links, Tags
from .chakra_tables import NO_PAIR, Actions
from .chakra_wire import (Pieces, attr_field, boolean, double, int64, string, transfer_attrs,
                          varint, varint_width)

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


def compute_rows(pieces: Pieces, acts: Actions, layout: Layout, types
                 ) -> tuple[np.ndarray, int]:
    """A COMP_NODE per action: id, name (``3F1``), type, the rank's previous compute node as
    its control dependency, its step's receives as data dependencies (on the step's first
    half), duration, attributes; and how many durations are not whole microseconds."""
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
    n_rounded = int(rounded[dur].sum())

    def fixed(d, st, kd, ch, it, pair) -> bytes:   # an action's attributes but its microbatch
        return (b"\x38" + varint(micros[d]) if micros[d] else b"") + b"".join(
            attr_field(y) for y in (
                boolean("is_cpu_op", False), int64(NS + "stage", st),
                string(NS + "kind", kinds[kd]),
                int64(NS + "chunk", ch), int64(NS + "iteration", it),
                double(NS + "duration_ns", durs[d]))
            + ((int64(NS + "pair", pair),) if pair != NO_PAIR else ()))

    attrs = _pieces_by(pieces, [dur, acts.stage, acts.kind, acts.chunk, acts.iteration,
                                acts.pair], fixed)
    microbatch = _pieces_by(pieces, [acts.microbatch], lambda mb: attr_field(
        int64(NS + "microbatch", mb)))
    return _with_length(pieces, [
        pieces.add(_C08), layout.comp_id, name_head, _decimals(pieces, acts.microbatch, {}),
        *ctrl, *_receive_deps(pieces, layout, n, E), attrs, microbatch]), n_rounded


def _receive_deps(pieces: Pieces, layout: Layout, n: int, E: int) -> list[np.ndarray]:
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


def transfer_rows(pieces: Pieces, tags: Tags, links: Links, layout: Layout, types,
                   P: int, npu: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """A COMM_RECV_NODE and a COMM_SEND_NODE per (action, tag) pair: id, name (``2RECV_F5``),
    type, the send's data dependency (its step's last compute node), attributes (comm_src,
    comm_dst: ranks + ``npu``; comm_size, comm_tag)."""
    nb_uniq, nb_code = _distinct(tags.nbytes)
    tag = np.arange(tags.n)
    # the attributes: the link's and the size's, then comm_tag up to its value
    link_tag = _pieces_by(pieces, [tags.src, tags.dst, nb_code, varint_width(tag)],
                          lambda src, dst, nb, w: transfer_attrs(src + npu, dst + npu,
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


def rank_rows(r: int, acts: Actions, links: Links, layout: Layout, comp: np.ndarray,
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
