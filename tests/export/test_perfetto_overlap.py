"""An overlapped pair's halves carry torch's name of their OVERLAP_F_B step in the trace."""

from __future__ import annotations

from simulator import simulate
from simulator.export.perfetto import build_trace
from simulator.workload import uniform_workload


def test_pair_halves_name_their_overlap_step():
    wl = uniform_workload(4, pp=2, ga=4, pp_comm=1024)
    trace = build_trace(simulate(wl, "dualpipe-v", pp=2, microbatches=4, vpp=2))
    halves = sorted((ev["pid"] - 1, ev["name"], ev["args"]["pair"], ev["args"]["overlap"])
                    for ev in trace["traceEvents"]
                    if ev.get("cat") == "compute" and "pair" in ev.get("args", {}))
    assert halves == [
        (0, "0B0", 1, "(3F2;0B0)OVERLAP_F_B"), (0, "0B1", 2, "(3F3;0B1)OVERLAP_F_B"),
        (0, "0F3", 0, "(0F3;3B1)OVERLAP_F_B"), (0, "3B1", 0, "(0F3;3B1)OVERLAP_F_B"),
        (0, "3F2", 1, "(3F2;0B0)OVERLAP_F_B"), (0, "3F3", 2, "(3F3;0B1)OVERLAP_F_B"),
        (1, "1B0", 0, "(2F2;1B0)OVERLAP_F_B"), (1, "1B1", 2, "(2F3;1B1)OVERLAP_F_B"),
        (1, "1F3", 1, "(1F3;2B1)OVERLAP_F_B"), (1, "2B1", 1, "(1F3;2B1)OVERLAP_F_B"),
        (1, "2F2", 0, "(2F2;1B0)OVERLAP_F_B"), (1, "2F3", 2, "(2F3;1B1)OVERLAP_F_B")]
