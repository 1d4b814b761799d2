"""The multi-stage runtime's latency and exchange cost measured on the traces' transfers
(simulator/calibration/transfers.py), hand-worked to the ns, and read from a trace file."""

from __future__ import annotations

import json

from simulator.calibration.traces import (Iteration, RankTrace, TraceAction, TraceSet,
                                          read_rank)
from simulator.calibration.transfers import measured_exchange, transfers

MS = 1_000_000


def _act(stage, kind, mb, start, end=None, comm=None):
    end = start + 100_000 if end is None else end
    return TraceAction(stage, kind, mb, start, end, 0, None, f"PP:{stage}{kind}{mb}", comm)


def _two_ranks() -> TraceSet:
    """P = 2, stage 0 on rank 0, stage 1 on rank 1, M = 3. Five transfers (ns):

    - F0 0->1: send posted 1.0 ms, receive 0; 1F0 begins 0.5, its wait returns 1.3: waited,
      300 us; nothing the other way: one-way;
    - F1 0->1: posts 2.0 / 1.5, 1F1 begins 2.5, returns 2.52: found its data (20 us), not
      counted;
    - F2 0->1: posts 4.0 / 3.0, 1F2 begins 3.5, returns 4.5: waited, 500 us; while
    - B0 1->0 is in flight: posts 4.1 / 3.9, 0B0 begins 4.0, returns 4.8: waited, 700 us;
      the two overlap (4.0-4.5 and 4.1-4.8): two-way;
    - B1 1->0: posts 6.0 / 5.0, 0B1 begins 5.5, returns 6.4: waited, 400 us, one-way.

    One-way median (300 + 400) / 2 = 350 us: the latency; two-way median (500 + 700) / 2 =
    600 us: the exchange costs 250 us more."""
    r0 = [
        _act(0, "F", 0, 0), _act(0, "SEND_F", 0, 1.0 * MS, comm=(1_000_000, 9 * MS)),
        _act(0, "F", 1, 1.9 * MS), _act(0, "SEND_F", 1, 2.0 * MS, comm=(2_000_000, 9 * MS)),
        _act(0, "RECV_B", 0, 3.9 * MS, comm=(3_900_000, 4_800_000)),
        _act(0, "F", 2, 3.8 * MS), _act(0, "SEND_F", 2, 4.0 * MS, comm=(4_000_000, 9 * MS)),
        _act(0, "B", 0, 4.0 * MS, 5.0 * MS),
        _act(0, "RECV_B", 1, 5.0 * MS, comm=(5_000_000, 6_400_000)),
        _act(0, "B", 1, 5.5 * MS, 7.0 * MS),
    ]
    r1 = [
        _act(1, "RECV_F", 0, 0, comm=(0, 1_300_000)), _act(1, "F", 0, 0.5 * MS, 1.4 * MS),
        _act(1, "RECV_F", 1, 1.5 * MS, comm=(1_500_000, 2_520_000)),
        _act(1, "F", 1, 2.5 * MS, 2.6 * MS),
        _act(1, "RECV_F", 2, 3.0 * MS, comm=(3_000_000, 4_500_000)),
        _act(1, "F", 2, 3.5 * MS, 4.0 * MS),
        _act(1, "B", 0, 4.0 * MS), _act(1, "SEND_B", 0, 4.1 * MS, comm=(4_100_000, 9 * MS)),
        _act(1, "B", 1, 5.9 * MS), _act(1, "SEND_B", 1, 6.0 * MS, comm=(6_000_000, 9 * MS)),
    ]
    ranks = tuple(RankTrace(r, f"rank{r}.json", (Iteration(0, 0, 10 * MS, tuple(acts)),))
                  for r, acts in enumerate((r0, r1)))
    return TraceSet(ranks, 2, 1, 3, (0, 1), False)


def test_transfers_hand_worked():
    got = sorted((x.src, x.dst, x.start, x.done, x.waited, x.latency)
                 for x in transfers(_two_ranks()))
    assert got == [(0, 1, 1_000_000, 1_300_000, True, 300_000),
                   (0, 1, 2_000_000, 2_520_000, False, 520_000),
                   (0, 1, 4_000_000, 4_500_000, True, 500_000),
                   (1, 0, 4_100_000, 4_800_000, True, 700_000),
                   (1, 0, 6_000_000, 6_400_000, True, 400_000)]
    m = measured_exchange(_two_ranks())
    assert (m.latency_ns, m.exchange_ns, m.one_way, m.two_way) == (350_000.0, 250_000.0, 2, 2)
    assert m.describe() == ("latency 350.0 us, exchange 250.0 us (receives that waited for "
                            "their data, from the later post: 2 one-way, median 350.0 us; 2 "
                            "with a transfer in flight the other way, median 600.0 us)")


def test_no_annotated_transfer_measures_nothing():
    ts = _two_ranks()
    bare = tuple(RankTrace(r.rank, r.path, tuple(
        Iteration(it.index, it.start_ns, it.end_ns, tuple(
            TraceAction(a.stage, a.kind, a.microbatch, a.start_ns, a.end_ns, a.busy_ns,
                        a.pair, a.label) for a in it.actions)) for it in r.iterations))
        for r in ts.ranks)
    assert measured_exchange(TraceSet(bare, 2, 1, 3, (0, 1), False)) is None


def test_a_faster_two_way_transfer_costs_no_exchange():
    """Two-way receives that took less than the one-way ones: exchange 0, not negative."""
    ts = _two_ranks()
    r1 = ts.ranks[1]
    acts = tuple(TraceAction(a.stage, a.kind, a.microbatch, a.start_ns, a.end_ns, a.busy_ns,
                             a.pair, a.label, (3_000_000, 4_150_000))
                 if a.kind == "RECV_F" and a.microbatch == 2 else a
                 for a in r1.iterations[0].actions)
    ranks = (ts.ranks[0], RankTrace(1, r1.path, (Iteration(0, 0, 10 * MS, acts),)))
    m = measured_exchange(TraceSet(ranks, 2, 1, 3, (0, 1), False))
    # F2 now 150 us, B0 700 us: two-way median 425 us against one-way 350 us -> 75 us
    assert (m.exchange_ns, m.latency_ns) == (75_000.0, 350_000.0)
    acts = tuple(TraceAction(a.stage, a.kind, a.microbatch, a.start_ns, a.end_ns, a.busy_ns,
                             a.pair, a.label, (3_900_000, 4_250_000))
                 if a.kind == "RECV_B" and a.microbatch == 0 else a
                 for a in ts.ranks[0].iterations[0].actions)
    ranks = (RankTrace(0, "rank0.json", (Iteration(0, 0, 10 * MS, acts),)), ranks[1])
    m = measured_exchange(TraceSet(ranks, 2, 1, 3, (0, 1), False))
    # and B0 150 us: two-way median 150 us, under the one-way 350 us -> no exchange cost
    assert (m.exchange_ns, m.latency_ns, m.two_way_ns) == (0.0, 350_000.0, 150_000.0)


def test_the_reader_keeps_a_receive_span_s_gloo_annotation(tmp_path):
    """gloo's ``gloo:recv`` begins in the PP:RECV span that posts it and ends when the wait on
    it returns, long after that span: the action keeps (post, return) in ns."""
    ev = [
        {"ph": "X", "name": "ITER0", "cat": "user_annotation", "ts": 0, "dur": 5000,
         "pid": 1, "tid": 1},
        {"ph": "X", "name": "PP:1RECV_F0", "cat": "user_annotation", "ts": 10, "dur": 40,
         "pid": 1, "tid": 1},
        {"ph": "X", "name": "c10d::recv_", "cat": "cpu_op", "ts": 20, "dur": 5,
         "pid": 1, "tid": 1},
        {"ph": "X", "name": "gloo:recv", "cat": "user_annotation", "ts": 26.5, "dur": 1200,
         "pid": 1, "tid": 1},
        {"ph": "X", "name": "PP:1F0", "cat": "user_annotation", "ts": 100, "dur": 2000,
         "pid": 1, "tid": 1},
    ]
    p = tmp_path / "rank1.json"
    p.write_text(json.dumps({"traceEvents": ev}))
    acts = read_rank(p, rank=1).iterations[0].actions
    assert [(a.kind, a.comm) for a in acts] == [("RECV_F", (26_500, 1_226_500)), ("F", None)]
