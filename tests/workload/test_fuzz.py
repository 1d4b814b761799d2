"""Fuzz: mutated real files either parse or raise WorkloadError pointing inside the file.

Seeds are the real files in ../shared/workloads-real (where ../shared is beside the checkout),
the hand-made tiny_model.txt, DLRM and HYBRID_CUSTOMIZED examples, and the first rows of the big
real files with line 2 set to match. Runs are derandomized so CI is reproducible.
"""

from __future__ import annotations

import re
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from simulator.errors import WorkloadError
from simulator.workload import Workload
from simulator.workload.parser import parse_workload_bytes

from shared_files import real_files

TESTS = Path(__file__).resolve().parents[1]
HEAD_ROWS = 40


def _seeds() -> list[str]:
    seeds = [p.read_text() for p in real_files("*.txt")]
    seeds.append((TESTS / "data" / "tiny_model.txt").read_text())
    seeds.append("HYBRID_DLRM\t2\n3\n" + "".join(
        f"mlp{k}\t-1\t{100 + k}\tALLTOALL\t4096\t50\tNONE\t0\t70\tALLREDUCE\t8192\t5\n"
        for k in range(3)))
    seeds.append("HYBRID_CUSTOMIZED\n2\n"
                 "a\t-1\t5\tALLGATHER\t64\t5\tREDUCESCATTER\t64\t5\tALLREDUCE\t64\t1 MODEL\n"
                 "b\t-1\t5\tNONE\t0\t5\tNONE\t0\t5\tALLREDUCE\t64\t1\tDATA\n")
    for path in real_files("workload_*.txt") + real_files("DeepSeek*.txt"):
        lines = path.read_text().split("\n")
        seeds.append("\n".join([lines[0], str(HEAD_ROWS), *lines[2:2 + HEAD_ROWS]]) + "\n")
    return seeds


SEEDS = _seeds()
_PIECES = re.compile(r"(\s+)")
JUNK = st.text(alphabet=st.sampled_from(list("0123456789-+.:_eEnaNfiALRDUCE_PX \t\n\r\x00\x1b"
                                              "\u00e9\u0661\u2028\ufeff")), max_size=12)
MUTATIONS = ("drop_token", "swap_tokens", "junk_token", "dup_token", "drop_line", "dup_line",
             "swap_lines", "truncate", "insert_bytes")


def _mutate(text: str, draw) -> bytes:
    data = None
    for kind in draw(st.lists(st.sampled_from(MUTATIONS), min_size=1, max_size=3)):
        if data is not None or kind in ("truncate", "insert_bytes"):
            data = text.encode() if data is None else data
            at = draw(st.integers(0, len(data)))
            if kind == "truncate":
                data = data[:at]
            else:
                data = data[:at] + draw(st.binary(min_size=1, max_size=8)) + data[at:]
            continue
        if kind.endswith("_line") or kind == "swap_lines":
            lines = text.split("\n")
            i, j = draw(st.integers(0, len(lines) - 1)), draw(st.integers(0, len(lines) - 1))
            if kind == "drop_line":
                del lines[i]
            elif kind == "dup_line":
                lines.insert(i, lines[i])
            else:
                lines[i], lines[j] = lines[j], lines[i]
            text = "\n".join(lines)
            continue
        pieces = _PIECES.split(text)
        tokens = [k for k, p in enumerate(pieces) if p and not p.isspace()]
        if not tokens:
            continue
        i, j = draw(st.sampled_from(tokens)), draw(st.sampled_from(tokens))
        if kind == "drop_token":
            pieces[i] = ""
        elif kind == "swap_tokens":
            pieces[i], pieces[j] = pieces[j], pieces[i]
        elif kind == "junk_token":
            pieces[i] = draw(JUNK)
        else:
            pieces[i] = pieces[i] + " " + pieces[i]
        text = "".join(pieces)
    return text.encode() if data is None else data


def _check(data: bytes) -> None:
    try:
        workload = parse_workload_bytes(data, "fuzz.txt")
    except WorkloadError as err:
        message = str(err)
        assert "\n" not in message and message.startswith("fuzz.txt:")
        n_lines = data.count(b"\n") + 1
        assert err.line is not None and 1 <= err.line <= max(n_lines, 2)
        assert err.column is not None and err.column >= 1
        return
    assert isinstance(workload, Workload)
    assert [layer.index for layer in workload.layers] == list(range(len(workload.layers)))
    lines = [layer.line for layer in workload.layers]
    assert lines == sorted(set(lines)) and lines[0] >= 3


@settings(max_examples=150, derandomize=True, deadline=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(SEEDS), st.data())
def test_mutated_real_files(seed, data):
    _check(_mutate(seed, data.draw))


@settings(max_examples=50, derandomize=True, deadline=None)
@given(st.binary(max_size=300))
def test_arbitrary_bytes(blob):
    _check(blob)


def test_seeds_parse_unmutated():
    """The fuzz starts from valid files (the L65B copy is the one known-bad seed)."""
    bad = []
    for seed in SEEDS:
        try:
            parse_workload_bytes(seed.encode(), "seed")
        except WorkloadError as err:
            bad.append(str(err))
    l65b = any("L65B-M1-C05" in p.name for p in real_files("*.txt"))
    assert bad == ["seed:2:1: layer count: expected as many layer rows as declared "
                   "(line 2 declares 839 layer rows, found 33)"] * l65b
