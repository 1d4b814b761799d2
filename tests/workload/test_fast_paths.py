"""The parser's and the AICB recovery's fast paths build exactly what the general ones did."""

from __future__ import annotations

import re

import pytest

from simulator.workload import aicb
from simulator.workload.header import _tokens
from simulator.workload.model import Comm, CommGroup, CommType, Layer, new_layer
from simulator.workload.rows import parse_rows


def test_layer_fields_are_the_ones_the_positional_constructors_fill():
    # rows.parse_rows and aicb._reindexed build Layer positionally: a new field must be added there
    assert list(Layer._fields) == [
        "index", "name", "fwd_compute", "fwd_comm", "ig_compute", "ig_comm", "wg_compute",
        "wg_comm", "update_time", "line", "policy", "reserved"]
    c = Comm(CommType.ALLGATHER, CommGroup.EP, 8, "ALLGATHER_EP")
    d = Comm(CommType.ALLREDUCE, CommGroup.DP, 16, "ALLREDUCE")
    r = Layer(3, "mlp", 1, c, 2, c, 4, d, 5, line=9, policy="DATA", reserved="7")
    assert aicb._reindexed(r, 11) == r._replace(index=11)
    assert type(aicb._reindexed(r, 11)) is Layer


def test_new_layer_is_layer_with_every_field_in_its_place():
    c = Comm(CommType.ALLGATHER, CommGroup.EP, 8, "ALLGATHER_EP")
    d = Comm(CommType.ALLREDUCE, CommGroup.DP, 16, "ALLREDUCE")
    none = Comm(CommType.NONE, CommGroup.DP, 0, "NONE")
    args = (3, "mlp", 1, c, 2, d, 4, none, 5, 9, "DATA", "7")   # a distinct value per field
    made = new_layer(*args)
    assert type(made) is Layer and made == Layer(*args) and hash(made) == hash(Layer(*args))
    assert [getattr(made, name) for name in Layer._fields] == list(args)
    assert made.wg_comm is none and repr(made) == repr(Layer(*args))
    with pytest.raises(AttributeError):
        made.index = 4


def test_rows_share_comm_objects_per_token_default_group_and_bytes():
    lines = ["a -1 1 ALLREDUCE 8 2 ALLREDUCE 8 3 ALLREDUCE 8 0",
             "b -1 1 ALLREDUCE 8 2 NONE 0 3 ALLREDUCE 8.0 4"]
    a, b = parse_rows(lines, 3, "HYBRID_TRANSFORMER", "w.txt")
    assert a.fwd_comm is a.ig_comm is b.fwd_comm           # TP default, same token and bytes
    assert a.wg_comm is b.wg_comm and a.wg_comm is not a.fwd_comm   # DP default: its own
    assert (a.wg_comm.group, a.fwd_comm.group) == (CommGroup.DP, CommGroup.TP)
    assert (b.update_time, b.line, b.index, b.reserved) == (4, 4, 1, "-1")


def test_header_tokens_and_columns():
    assert _tokens("\tHYBRID  pp: 2\u00a0ga:\t4 ") == [
        ("HYBRID", 2), ("pp:", 10), ("2", 14), ("ga:", 16), ("4", 20)]
    assert _tokens("   ") == []
    for line in ("a\x1cb  c", " x\u2003y\u3000z\x0b", "pp_comm 8388608.0\r"):
        assert _tokens(line) == [(m.group(), m.start() + 1) for m in re.finditer(r"\S+", line)]


def test_reading_a_workload_by_name_is_what_pathlib_read(tmp_path, monkeypatch):
    from pathlib import Path

    import pytest

    from simulator.errors import WorkloadError
    from simulator.input_file import InputFileError, read_input_bytes
    from simulator.workload.parser import load_workload

    f = tmp_path / "w.txt"
    f.write_bytes(b"MICRO\n1\nl -1 1 NONE 0 1 NONE 0 1 NONE 0 0\n")
    monkeypatch.chdir(tmp_path)
    for name in ("w.txt", str(f), str(f) + "/", str(f) + "/.", str(tmp_path) + "//w.txt", f):
        assert read_input_bytes(name, 1000) == f.read_bytes()        # pathlib drops "/", "/."
    for name in ("missing.txt", str(f) + "/x"):
        with pytest.raises(InputFileError) as ours:
            read_input_bytes(name, 1000)
        with pytest.raises(OSError) as theirs:
            Path(name).read_bytes()
        assert ours.value.found == theirs.value.strerror
    for name in ("", ".", str(tmp_path)):
        with pytest.raises(InputFileError, match="^is a directory, not a regular file$"):
            read_input_bytes(name, 1000)
    with pytest.raises(WorkloadError, match=r"^missing\.txt: file: expected a readable workload "
                                            r"file, found 'No such file or directory'$"):
        load_workload("missing.txt")


def test_a_repeated_line_reads_as_its_first_reading_with_its_own_index_and_line():
    row = "a -1 1 ALLREDUCE 8 2 NONE 0 3 ALLREDUCE 16 0"
    lines = [row, "", "b -1 5 NONE 0 6 NONE 0 7 NONE 0 1", row, row.replace(" ", "  ", 1)]
    a1, b, a2, a3 = parse_rows(lines, 3, "HYBRID_TRANSFORMER", "w.txt")
    assert [(r.index, r.line) for r in (a1, b, a2, a3)] == [(0, 3), (1, 5), (2, 6), (3, 7)]
    for again in (a2, a3):
        assert again._replace(index=0, line=3) == a1
        assert again.fwd_comm is a1.fwd_comm and again.wg_comm is a1.wg_comm
