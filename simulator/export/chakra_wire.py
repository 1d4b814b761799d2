"""Protobuf's wire format for millions of Chakra nodes: every distinct encoded piece once, a node
a row of piece ids, the file gathered with numpy in one operation.

A Node's bytes are few kinds of pieces: varints (ids, tags, lengths), field keys, a handful of
encoded attributes that repeat from node to node (a transfer's link and size, an action's stage,
kind, chunk and iteration, a duration), the decimal numbers of its name. :class:`Pieces` keeps
each once in one buffer, the varints of 0 .. n-1 first (the piece id of varint ``v`` is ``v``), so
the exporter builds, per node, a row of piece ids with numpy alone and :meth:`Pieces.gather` turns
a table of rows into the bytes (protobuf's own runtime cost 13-42 us a node, a Python loop ~4 us).
"""

from __future__ import annotations

import struct

import numpy as np

from ..workload.chakra_pb import NS

ROWS_PER_GATHER = 1 << 16     # bounds the per-byte index: ~100 bytes x 8 per row


def varint_width(values: np.ndarray) -> np.ndarray:
    """Bytes of each (non-negative) value as a varint."""
    v = np.asarray(values, dtype=np.int64)
    w = np.ones(v.shape, dtype=np.int64)
    for k in range(1, 10):
        w += v >= (1 << (7 * k))
    return w


def varint_table(n: int) -> tuple[bytes, np.ndarray, np.ndarray]:
    """The varints of 0 .. n-1 back to back, their offsets and widths (a byte width at a
    time: a Python loop per value took 0.8 s at 2^20)."""
    chunks, lo, width = [], 0, 1
    while lo < n:
        hi = min(n, 1 << (7 * width))
        v = np.arange(lo, hi, dtype=np.uint64)
        cols = np.empty((hi - lo, width), dtype=np.uint8)
        for b in range(width):
            cols[:, b] = ((v >> np.uint64(7 * b)) & np.uint64(0x7F)) | np.uint64(
                0x80 if b < width - 1 else 0)
        chunks.append(cols.tobytes())
        lo, width = hi, width + 1
    widths = varint_width(np.arange(n))
    return b"".join(chunks), np.cumsum(widths) - widths, widths


def varint(n: int) -> bytes:
    """One value as protobuf writes it (a negative one in 10 bytes)."""
    v = n & 0xFFFFFFFFFFFFFFFF
    out = bytearray()
    while v > 0x7F:
        out.append(0x80 | (v & 0x7F))
        v >>= 7
    out.append(v)
    return bytes(out)


class Pieces:
    """Distinct byte pieces in one buffer, addressed by id; varint ``v`` (v < ``n_varints``)
    is piece ``v``."""

    def __init__(self, n_varints: int) -> None:
        buf, offs, widths = varint_table(n_varints)
        self.n_varints = n_varints
        self._bufs = [buf]
        self._offs = [offs]
        self._lens = [widths]
        self._size = len(buf)
        self._count = n_varints
        self._ids: dict[bytes, int] = {}
        self._pool = None

    def add(self, piece: bytes) -> int:
        """The id of ``piece`` (added once)."""
        got = self._ids.get(piece)
        if got is None:
            got = self._ids[piece] = self._count
            self._bufs.append(piece)
            self._offs.append(np.array([self._size], np.int64))
            self._lens.append(np.array([len(piece)], np.int64))
            self._size += len(piece)
            self._count += 1
            self._pool = None
        return got

    def add_all(self, pieces: list[bytes]) -> np.ndarray:
        """Ids of ``pieces`` (each added once), as an array."""
        return np.fromiter((self.add(p) for p in pieces), np.int64, len(pieces))

    def _arrays(self):
        if self._pool is None:
            self._pool = (np.frombuffer(b"".join(self._bufs), dtype=np.uint8),
                          np.concatenate(self._offs), np.concatenate(self._lens))
        return self._pool

    def lengths(self, ids):
        """The pieces' lengths (an id or an array of them)."""
        return self._arrays()[2][ids]

    def gather(self, rows: np.ndarray):
        """The pieces of ``rows`` (a table of ids, read row after row), in chunks (arrays of
        bytes): a
        byte index that steps by one inside a piece and jumps at each piece's start (a
        cumulative sum of those steps), then one take from the buffer."""
        pool, offs, lens = self._arrays()
        index = None
        for lo in range(0, len(rows), ROWS_PER_GATHER):
            ids = rows[lo:lo + ROWS_PER_GATHER].ravel()
            ln = lens[ids]
            keep = ln > 0
            ids, ln = ids[keep], ln[keep]
            if not len(ids):
                continue
            at = offs[ids]
            starts = np.cumsum(ln) - ln
            size = int(starts[-1] + ln[-1])
            if index is None or len(index) < size:     # buffers reused: no page faults
                index = np.empty(max(size, 1 << 20), dtype=np.intp)
            step = index[:size]
            step.fill(1)
            step[starts[1:]] = at[1:] - (at[:-1] + ln[:-1] - 1)
            step[0] = at[0]
            np.cumsum(step, out=step)
            yield pool[step]     # (fancy indexing with intp: measured 2-4x take's speed)


# -- Chakra's Node in protobuf's wire format ---------------------------------------------------
# Millions of nodes: with protobuf's own runtime (upb, protobuf 7.36) a compute node built as a
# Node object and serialized cost 42 us, and 13 us copied from a parsed template with its varying
# fields set (20,000 nodes on the 2-CPU machine at load 5, where a Python loop spent ~4 us a
# node), so the nodes are encoded here, field by field, as et_def.proto defines them (Node: id 1,
# name 2, type 3, ctrl_deps 4, data_deps 5 (packed), duration_micros 7, attr 10; AttributeProto:
# name 1, double_val 3, int32_val 7, int64_val 9, bool_val 27, string_val 29); the tests read them
# back with chakra's own decoder and hold the bytes to a golden. Below: one field or node at a
# time (the few made per run); above, :class:`Pieces`: the millions.


def delimited(data: bytes) -> bytes:
    """chakra's ``protolib.encodeMessage`` framing: the size as a varint, then the message."""
    return varint(len(data)) + data


def attr_name(name: str) -> bytes:
    raw = name.encode()
    return b"\x0a" + varint(len(raw)) + raw


def int64(name: str, v: int) -> bytes:
    return attr_name(name) + b"\x48" + varint(int(v))          # int64_val


def int32(name: str, v: int) -> bytes:
    return attr_name(name) + b"\x38" + varint(int(v))          # int32_val


def double(name: str, v: float) -> bytes:
    return attr_name(name) + b"\x19" + struct.pack("<d", v)     # double_val


def boolean(name: str, v: bool) -> bytes:
    return attr_name(name) + b"\xd8\x01" + (b"\x01" if v else b"\x00")   # bool_val


def string(name: str, v: str) -> bytes:
    raw = v.encode()
    return attr_name(name) + b"\xea\x01" + varint(len(raw)) + raw        # string_val


def attr_field(attr: bytes) -> bytes:
    return b"\x52" + varint(len(attr)) + attr              # Node.attr


def node_bytes(nid: int, name: str, ntype: int, ctrl, data, micros: int, attrs: bytes) -> bytes:
    raw = name.encode()
    parts = [b"\x08", varint(nid), b"\x12", varint(len(raw)), raw, b"\x18", varint(ntype)]
    if ctrl:
        p = b"".join(map(varint, ctrl))
        parts += (b"\x22", varint(len(p)), p)
    if data:
        p = b"".join(map(varint, data))
        parts += (b"\x2a", varint(len(p)), p)
    if micros:
        parts += (b"\x38", varint(micros))
    parts.append(attrs)
    body = b"".join(parts)
    return varint(len(body)) + body


def transfer_attrs(src: int, dst: int, nbytes: int) -> bytes:
    """A transfer's attributes but its tag (the same on its send and its receive node)."""
    return b"".join(attr_field(x) for x in (
        boolean("is_cpu_op", False), int32("comm_src", src), int32("comm_dst", dst),
        int64("comm_size", max(int(nbytes), 1)), int64(NS + "bytes", int(nbytes))))
