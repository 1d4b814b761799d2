"""Layer rows (line 3 on) of a workload file, and the token helpers the header parser shares.

One row per layer, whitespace-separated (SimAI reads them with ``operator>>``, so tabs, runs of
spaces and padded cells are all fine). Comm types are matched as SimAI's Workload.cc does:
case-sensitive prefix ``ALLREDUCE``/``ALLTOALL``/``ALLGATHER``/``REDUCESCATTER`` plus a group
suffix; any other token (``NONE``, ``BROADCAST``, lower case) means no communication. A prefix
with an unknown suffix is refused: SimAI would give it no process group at all.

Rows are the hot path of loading (2.6k rows in the biggest real file), so tokens come from
``str.split`` and the common all-digits numbers skip the regex.
"""

from __future__ import annotations

import re
from operator import itemgetter

from ..errors import WorkloadError
from .model import POLICIES, Comm, CommGroup, CommType, Layer, new_layer

MAX_INT = 2**63 - 1  # SimAI's Tick / comm size are 64-bit

ROW_FIELDS = ("name", "reserved", "fwd_compute", "fwd_comm_type", "fwd_comm_bytes", "ig_compute",
              "ig_comm_type", "ig_comm_bytes", "wg_compute", "wg_comm_type", "wg_comm_bytes",
              "update_time", "policy")
CUSTOMIZED = "HYBRID_CUSTOMIZED"  # its rows carry the layer's own policy as a 13th column

_INT_PATTERN = r"([+-]?[0-9]+)(?:\.0*)?"  # an integer, or a float with a zero fraction
_TOKEN_PATTERN = r"\S+"                   # same whitespace as str.split()
_NUMBER_COLUMNS = (2, 4, 5, 7, 8, 10, 11)
_numbers = itemgetter(*_NUMBER_COLUMNS)

_COMM_BASES = (("ALLREDUCE", CommType.ALLREDUCE), ("ALLTOALL", CommType.ALLTOALL),
               ("ALLGATHER", CommType.ALLGATHER), ("REDUCESCATTER", CommType.REDUCESCATTER))
_SUFFIX_GROUPS = {"_EP": CommGroup.EP, "_DP_EP": CommGroup.DP_EP, "_ETP": CommGroup.ETP}


# Python's int() refuses strings of more than 4300 digits (a ValueError); any integer of more
# digits than this is far out of every field's range, so it is read as this stand-in instead
_LONG = 40
_BEYOND = 10 ** _LONG


def to_int(token: str) -> int | None:
    """The integer a token spells (``8388608.0`` counts), or None if it is not one; a token of
    more than 40 digits reads as 10^40 (beyond every field's range: refused as written)."""
    if token.isdigit() and token.isascii():
        return int(token) if len(token) <= _LONG else _BEYOND
    match = re.fullmatch(_INT_PATTERN, token)   # rare (``8388608.0``): compiled on first use
    if match is None:
        return None
    digits = match.group(1)
    if len(digits.lstrip("+-")) > _LONG:
        return -_BEYOND if digits.startswith("-") else _BEYOND
    return int(digits)


def column_of(line: str, k: int) -> int:
    """1-based character column of whitespace-separated token ``k`` (end of line if absent)."""
    for i, match in enumerate(re.finditer(_TOKEN_PATTERN, line)):   # error messages only
        if i == k:
            return match.start() + 1
    return end_column(line)


def end_column(line: str) -> int:
    """The column just after the last token: where a missing token should have been."""
    return len(line.rstrip()) + 1


def int_range_text(minimum: int) -> str:
    return f"an integer >= {minimum} and < 2^63" if minimum > -MAX_INT else "an integer"


def parse_rows(lines: list[str], first_line: int, policy: str, path: str) -> tuple[Layer, ...]:
    """Layers of ``lines`` (file line ``first_line`` on); blank lines are skipped, as SimAI does."""
    width = 13 if policy == CUSTOMIZED else 12
    ints: dict[str, int] = {}      # token -> value; real files repeat a few numbers a lot
    get_int = ints.get
    # (token, DP default?, bytes) -> Comm; a bool, not the CommGroup, in the key: an Enum's hash
    # is Python code
    comms: dict[tuple[str, bool, int], Comm] = {}
    layers: list[Layer] = []
    append = layers.append
    # line text -> the first row read from it: an AICB file repeats each microbatch's lines ga
    # times, and the same text reads the same (only the index and line number differ)
    seen: dict[str, Layer] = {}
    for offset, line in enumerate(lines):
        row = seen.get(line)
        if row is not None:
            append(new_layer(len(layers), row.name, row.fwd_compute, row.fwd_comm,
                             row.ig_compute, row.ig_comm, row.wg_compute, row.wg_comm,
                             row.update_time, first_line + offset, row.policy, row.reserved))
            continue
        parts = line.split()
        if not parts:
            continue
        lineno = first_line + offset
        if len(parts) != width:
            _wrong_width(parts, width, line, lineno, path)
        vals = list(map(get_int, _numbers(parts)))
        if None in vals:
            for j, k in enumerate(_NUMBER_COLUMNS):
                if vals[j] is None:
                    tok = parts[k]
                    value = get_int(tok)
                    if value is None:
                        value = ints[tok] = _number(tok, 0, line, lineno, k, path)
                    vals[j] = value
        reserved = parts[1]
        if reserved != "-1":
            _number(reserved, -MAX_INT, line, lineno, 1, path)
        fwd = comms.get((parts[3], False, vals[1]))
        if fwd is None:
            fwd = _comm(parts, 3, CommGroup.TP, vals[1], comms, line, lineno, path)
        ig = comms.get((parts[6], False, vals[3]))
        if ig is None:
            ig = _comm(parts, 6, CommGroup.TP, vals[3], comms, line, lineno, path)
        wg = comms.get((parts[9], True, vals[5]))
        if wg is None:
            wg = _comm(parts, 9, CommGroup.DP, vals[5], comms, line, lineno, path)
        layer_policy = None
        if width == 13:
            layer_policy = parts[12]
            if layer_policy not in POLICIES:
                raise WorkloadError(path, lineno, column_of(line, 12), "policy",
                                    f"the layer's policy, one of {', '.join(POLICIES)}",
                                    layer_policy)
        row = new_layer(len(layers), parts[0], vals[0], fwd, vals[2], ig, vals[4], wg, vals[6],
                        lineno, layer_policy, reserved)
        seen[line] = row
        append(row)
    return tuple(layers)


def _number(tok: str, minimum: int, line: str, lineno: int, k: int, path: str) -> int:
    if tok.isdigit() and tok.isascii() and len(tok) < 19:
        return int(tok)
    value = to_int(tok)
    if value is None or not minimum <= value <= MAX_INT:
        raise WorkloadError(path, lineno, column_of(line, k), ROW_FIELDS[k],
                            int_range_text(minimum), tok)
    return value


def _comm(parts: list[str], k: int, default: CommGroup, nbytes: int,
          cache: dict[tuple[str, bool, int], Comm], line: str, lineno: int, path: str) -> Comm:
    """The Comm of column ``k``, made once per (token, default group, bytes) and cached."""
    ctype, group = _comm_kind(parts[k], default, line, lineno, k, path)
    comm = cache[(parts[k], default is CommGroup.DP, nbytes)] = Comm(ctype, group, nbytes, parts[k])
    return comm


def _comm_kind(tok: str, default: CommGroup, line: str, lineno: int, k: int,
               path: str) -> tuple[CommType, CommGroup]:
    for base, ctype in _COMM_BASES:
        if tok.startswith(base):
            suffix = tok[len(base):]
            if not suffix:
                return ctype, default
            group = _SUFFIX_GROUPS.get(suffix)
            if group is not None:
                return ctype, group
            note = " (ASTRA-sim 1.0's ALLREDUCEALLTOALL is not supported)" \
                if tok.startswith("ALLREDUCEALLTOALL") else ""
            raise WorkloadError(path, lineno, column_of(line, k), ROW_FIELDS[k],
                                f"{base}, {base}_EP, {base}_DP_EP or {base}_ETP{note}", tok)
    return CommType.NONE, default


def _wrong_width(parts: list[str], width: int, line: str, lineno: int, path: str):
    layout = " ".join(ROW_FIELDS[:width])
    if len(parts) < width:
        raise WorkloadError(path, lineno, end_column(line), ROW_FIELDS[len(parts)],
                            f"{width} columns ({layout})",
                            f"{len(parts)} column{'s' if len(parts) > 1 else ''}")
    raise WorkloadError(path, lineno, column_of(line, width), "row",
                        f"{width} columns ({layout}), nothing after {ROW_FIELDS[width - 1]}",
                        parts[width])
