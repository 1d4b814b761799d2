"""The real workload files in ../shared/workloads-real/ (never copied into this repository): each
is the upstream file byte for byte as its provenance row in SOURCES.md there says, and each,
``more/`` included, runs at --pp 1, 2, 4 or is refused in one line naming it - never a traceback. What the runs print is
asserted elsewhere; here only that each one runs or is refused.
"""

from __future__ import annotations

import hashlib
import json
import re
import shlex
from pathlib import Path

import pytest

from simulator.cli.main import main

from shared_files import REAL_DIR as REAL, needs_real, real_files

pytestmark = needs_real
FILES = [p.relative_to(REAL).as_posix() for p in real_files()]
SOURCED = [f for f in FILES if not f.startswith("more/")]   # more/ has one provenance paragraph
L65B = "L65B-M1-C05_Llama65B_megatron_tp8_pp1_mbs1_A100.txt"
# (file, P) pairs that cannot run: the malformed L65B at any P; the one-layer micro tests cannot
# be split into P > 1 stages (SimAI's is an AICB trace with no transformer layer at all).
REFUSED = {(L65B, 1), (L65B, 2), (L65B, 4),
           ("microAllReduce.txt", 2), ("microAllReduce.txt", 4),
           ("astra-sim-1.0/microAllReduce.txt", 2), ("astra-sim-1.0/microAllReduce.txt", 4)}
# more/: AICB's Example.txt is its computation-time profile, not a workload; the L65B copy is
# the malformed file again; the one-layer micro tests cannot make 2 or 4 stages.
MORE_REFUSED = {("more/aicb__Example.txt", 1), ("more/aicb__Example.txt", 2),
                ("more/aicb__Example.txt", 4)} | {
    (f"more/{name}", pp) for pp in (1, 2, 4)
    for name in ("aicb__L65B-M1-C05_Llama65B_megatron_tp8_pp1_mbs1_A100.txt",)} | {
    (f"more/{name}", pp) for pp in (2, 4)
    for name in ("astra1__microAllReduce.txt", "astra1__microAllToAll.txt",
                 "simai__microAllReduce.txt")}


def _sources() -> dict[str, tuple[str, int]]:
    """SOURCES.md's provenance rows: copied-as path -> (git blob id, bytes)."""
    rows = {}
    for line in (REAL / "SOURCES.md").read_text().splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 7 and re.fullmatch(r"[0-9a-f]{40}", cells[4]):
            rows[cells[0]] = (cells[4], int(cells[5]))
    return rows


def _git_blob(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def test_every_shared_file_is_the_upstream_blob_named_in_sources():
    rows = _sources()
    assert sorted(rows) == SOURCED, "each .txt outside more/ needs its SOURCES.md row"
    for name, (blob, size) in rows.items():
        data = (REAL / name).read_bytes()
        assert (len(data), _git_blob(data)) == (size, blob), name
        assert size < 200_000, name


def test_the_issue_14_files_are_there():
    """The aicb and ASTRA-sim 1.0 files the issue's items 1-5 and 8 were found on."""
    assert {"aicb/all_reduce.txt", "aicb/L7B-M1-C04_Llama7B_megatron_tp2_pp1_mbs1_A100.txt",
            "G13B-M1-C01_GPT13B_megatron_tp8_pp1_mbs1_A100.txt",
            "astra-sim-1.0/Resnet50_DataParallel.txt", "astra-sim-1.0/microAllReduce.txt",
            "astra-sim-1.0/DLRM_HybridParallel.txt",
            "astra-sim-1.0/sample_per_layer_parallel_HybridCustomized.txt"} <= set(FILES)
    # CRLF kept, as upstream has it
    assert (REAL / "astra-sim-1.0" / "Resnet50_DataParallel.txt").read_bytes().startswith(
        b"DATA\r\n54\r\n")


@pytest.mark.parametrize("pp", [1, 2, 4])
@pytest.mark.parametrize("name", FILES)
def test_real_file_runs_or_is_refused_in_one_line(name, pp, capsys):
    path = REAL / name
    rc = main(["run", str(path), "--pp", str(pp), "--json", "-"])
    out, err = capsys.readouterr()
    assert "Traceback" not in err
    if (name, pp) in REFUSED | MORE_REFUSED:
        assert rc == 2 and out == ""
        assert err.startswith(f"pipesim: error: {path}") and err.count("\n") == 1, err
    else:
        assert rc == 0, err
        summary = json.loads(out)
        assert (summary["workload"], summary["pp"]) == (str(path), pp)
        assert summary["makespan_ns"] > 0 and len(summary["stages"]) == pp

