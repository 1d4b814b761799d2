"""The Perfetto / Chrome trace against the simulated timeline."""

from __future__ import annotations

import json
from collections import defaultdict
from decimal import ROUND_DOWN, Decimal

import pytest
from hypothesis import given
from hypothesis import strategies as st

from simulator import simulate
from simulator.errors import ConfigError
from simulator.export.perfetto import (assign_lanes, build_trace, counter_events, inflight_samples,
                                       us, write_trace)
from simulator.schedules import registry
from simulator.workload import uniform_workload

from .conftest import run


def perfetto_ns(text: str) -> list[dict]:
    """The trace's events with ts/dur as Perfetto's two readings give them (integer ns), after
    checking that the readings agree: the decimal text cut after the third decimal, and the
    double times 1000 truncated."""
    as_text = json.loads(text, parse_float=Decimal)["traceEvents"]
    as_float = json.loads(text)["traceEvents"]
    out = []
    for d, f in zip(as_text, as_float):
        ev = dict(f)
        for key in ("ts", "dur"):
            if key in d:
                by_text = int((d[key] * 1000).to_integral_value(rounding=ROUND_DOWN))
                by_float = int(f[key] * 1000.0)
                assert by_text == by_float, (key, d[key], by_text, by_float)
                ev[key] = by_text
        out.append(ev)
    return out


def trace_of(result) -> tuple[dict, list[dict]]:
    trace = build_trace(result)
    return trace, perfetto_ns(json.dumps(trace))


def slices(events, cat=None):
    return [e for e in events if e["ph"] == "X" and (cat is None or e["cat"] == cat)]


def assert_tracks_nest(events) -> int:
    """Slices on one (pid, tid) either nest or are disjoint (touching allowed)."""
    tracks = defaultdict(list)
    for e in slices(events):
        tracks[(e["pid"], e["tid"])].append((e["ts"], e["ts"] + e["dur"], e["name"]))
    for key, spans in tracks.items():
        spans.sort(key=lambda s: (s[0], -s[1]))
        stack = []
        for s, e, name in spans:
            while stack and stack[-1][1] <= s and not (s == e == stack[-1][1]):
                stack.pop()
            assert not stack or e <= stack[-1][1], f"{key}: {name} [{s},{e}] overlaps {stack[-1]}"
            stack.append((s, e, name))
    return len(tracks)


def test_hand_worked_compute_slices():
    # P=2, M=1, GPipe, one layer per stage, F = 1000 ns, I + W = 2000 ns, no communication
    wl = uniform_workload(2, 1000, 1500, 500)
    r = simulate(wl, "gpipe", pp=2, microbatches=1)
    _, events = trace_of(r)
    got = [(e["name"], e["pid"], e["tid"], e["ts"], e["dur"], e["args"]["phase"])
           for e in slices(events, "compute")]
    assert sorted(got, key=lambda g: g[3]) == [
        ("0F0", 1, 1, 0, 1000, "Steady"),     # one microbatch: a single 1F1B step
        ("1F0", 2, 1, 1000, 1000, "Steady"),
        ("1B0", 2, 1, 2000, 2000, "Steady"),
        ("0B0", 1, 1, 4000, 2000, "Steady"),
    ]
    compute = {e["name"]: e for e in slices(events, "compute")}
    assert compute["1B0"]["args"] == {"stage": 1, "chunk": 1, "microbatch": 0, "kind": "B",
                                      "pass": "full backward", "layers": "1-1",
                                      "phase": "Steady", "iteration": 0}


@pytest.mark.parametrize("schedule,pp,m,vpp", [("1f1b", 4, 8, None), ("gpipe", 3, 5, None),
                                               ("interleaved-1f1b", 2, 4, 2), ("zb-v", 2, 4, None),
                                               ("dualpipe-v", 2, 4, None)])
def test_one_compute_slice_per_action_at_its_simulated_times(schedule, pp, m, vpp):
    r = run(schedule, pp, m, vpp, trace_layers=True)
    _, events = trace_of(r)
    got = sorted((e["pid"] - 1, e["args"]["stage"], e["args"]["kind"], e["args"]["microbatch"],
                  e["ts"], e["ts"] + e["dur"]) for e in slices(events, "compute"))
    want = sorted((a.rank, a.stage, a.kind, a.microbatch, round(a.start), round(a.end))
                  for a in r.records.actions)
    assert got == want
    for e in slices(events, "compute"):
        a, b = r.partition.layer_range(e["args"]["chunk"])
        assert e["args"]["layers"] == f"{a}-{b}"
        assert e["name"] == f"{e['args']['stage']}{e['args']['kind']}{e['args']['microbatch']}"


def test_fractional_times_round_once_to_whole_ns():
    # 333-byte transfers at 8 Gb/s with 0.5 ns latency end at fractions of a nanosecond
    from simulator.system import SystemConfig
    from simulator.system.config import LinkConfig

    wl = uniform_workload(4, 1001, 603, 397, pp=4, pp_comm=333)
    r = simulate(wl, "1f1b", SystemConfig(links=LinkConfig(8.0, 0.5)), pp=4, microbatches=6)
    assert any(a.start != round(a.start) for a in r.records.actions)
    _, events = trace_of(r)
    want = sorted((a.rank + 1, round(a.start), round(a.end) - round(a.start))
                  for a in r.records.actions)
    assert sorted((e["pid"], e["ts"], e["dur"]) for e in slices(events, "compute")) == want
    assert_tracks_nest(events)


@pytest.mark.parametrize("name", registry.names())
def test_every_track_nests_for_every_schedule(name):
    spec = registry.get(name)
    wl = uniform_workload(16, 1000, 700, 300, pp=4, pp_comm=1 << 20)
    try:
        r = simulate(wl, name, pp=4, microbatches=8, vpp=2 if spec.variable_vpp else None,
                     trace_layers=True)
    except ConfigError as err:  # a schedule that does not take P=4, M=8
        pytest.skip(str(err))
    _, events = trace_of(r)
    assert assert_tracks_nest(events) > r.schedule.pp


def test_overlapping_transfers_go_to_separate_tracks():
    # latency (100 ns) after serialisation (400 ns) lets the next transfer on a link start
    # before the previous one arrives: a second send track keeps the slices nested
    r = run("gpipe", 2, 4, fwd=10, ig=10, wg=10)   # forwards every 20 ns, 500 ns transfers
    spans = sorted((t.start, t.end) for t in r.records.transfers if t.src_rank == 0)
    assert any(b[0] < a[1] for a, b in zip(spans, spans[1:]))
    trace, events = trace_of(r)
    names = {(e["pid"], e["args"]["name"]) for e in trace["traceEvents"]
             if e["ph"] == "M" and e["name"] == "thread_name"}
    assert {(1, "send → rank 1"), (1, "send → rank 1 (2)"), (2, "recv ← rank 0"),
            (2, "recv ← rank 0 (2)")} <= names
    assert_tracks_nest(events)


def test_flows_pair_every_send_with_its_receive(one_f_one_b):
    r = one_f_one_b
    _, events = trace_of(r)
    by_id = defaultdict(dict)
    for e in events:
        if e["ph"] in ("s", "f"):
            assert e["ph"] not in by_id[e["id"]], f"flow {e['id']} has two {e['ph']} events"
            by_id[e["id"]][e["ph"]] = e
    assert len(by_id) == len(r.records.transfers) == 2 * (4 - 1) * 8
    tracks = defaultdict(list)
    for e in slices(events):
        tracks[(e["pid"], e["tid"])].append(e)
    sends = defaultdict(int)
    for flow in by_id.values():
        s, f = flow["s"], flow["f"]
        assert f["bp"] == "e" and "bp" not in s
        assert s["ts"] < f["ts"]
        # each end lies strictly inside a slice of its own track: the send and the receive
        s_in = [x for x in tracks[(s["pid"], s["tid"])] if x["ts"] < s["ts"] < x["ts"] + x["dur"]]
        f_in = [x for x in tracks[(f["pid"], f["tid"])] if x["ts"] < f["ts"] < x["ts"] + x["dur"]]
        assert [x["name"][:5] for x in s_in] == ["send "]
        assert [x["name"][:5] for x in f_in] == ["recv "]
        assert s_in[0]["name"][5:] == f_in[0]["name"][5:]
        sa, fa = s_in[0]["args"], f_in[0]["args"]
        assert sa == fa
        assert (s["pid"], f["pid"]) == (sa["src_rank"] + 1, sa["dst_rank"] + 1)
        sends[(sa["src_rank"], sa["dst_rank"], sa["data"], sa["microbatch"])] += 1
    want = defaultdict(int)
    for t in r.records.transfers:
        want[(t.src_rank, t.dst_rank, "activation" if t.data == "F" else "gradient",
              t.microbatch)] += 1
    assert sends == want


def test_free_transfers_flow_between_the_compute_slices():
    # pp_comm 0: nothing occupies a link, so the arrows join producer and consumer actions
    r = simulate(uniform_workload(4, 1000, 600, 400), "1f1b", pp=2, microbatches=2)
    _, events = trace_of(r)
    assert not slices(events, "p2p")
    compute = slices(events, "compute")
    flows = defaultdict(dict)
    for e in events:
        if e["ph"] in ("s", "f"):
            flows[e["id"]][e["ph"]] = e
    pairs = set()
    for flow in flows.values():
        ends = []
        for ph in ("s", "f"):
            ev = flow[ph]
            inside = [c["name"] for c in compute if c["pid"] == ev["pid"] and c["tid"] == ev["tid"]
                      and c["ts"] <= ev["ts"] < c["ts"] + c["dur"]]
            assert len(inside) == 1
            ends.append(inside[0])
        pairs.add(tuple(ends))
    assert pairs == {("0F0", "1F0"), ("0F1", "1F1"), ("1B0", "0B0"), ("1B1", "0B1")}


def test_layer_states_nest_in_their_actions():
    r = run("zb-h1", 2, 4, trace_layers=True)
    assert r.records.layers
    _, events = trace_of(r)
    layers = slices(events, "layer")
    assert len(layers) == len(r.records.layers)
    compute = slices(events, "compute")
    for e in layers:
        parents = [c for c in compute if c["pid"] == e["pid"] and c["ts"] <= e["ts"]
                   and e["ts"] + e["dur"] <= c["ts"] + c["dur"]
                   and c["args"]["microbatch"] == e["args"]["microbatch"]]
        assert parents, e
        kinds = {p["args"]["kind"] for p in parents}
        state = e["args"]["state"]
        assert kinds & {"Forward_Pass": {"F"}, "Input_Gradient": {"I", "B"},
                        "Weight_Gradient": {"W", "B"},
                        "Forward_In_BackPass": {"I", "B"}}[state]
        assert e["name"] == f"{state} L{e['args']['layer']}"
        assert e["args"]["name"] == f"layer{e['args']['layer']}"
    assert_tracks_nest(events)


def test_no_layer_slices_without_trace_layers(one_f_one_b):
    _, events = trace_of(one_f_one_b)
    assert not slices(events, "layer")


def test_collectives_on_their_own_stream(one_f_one_b):
    r = one_f_one_b
    _, events = trace_of(r)
    dp = slices(events, "dp")
    assert sorted((e["pid"] - 1, e["args"]["layer"], e["ts"], e["ts"] + e["dur"]) for e in dp) == \
        sorted((c.rank, c.layer, round(c.start), round(c.end)) for c in r.records.collectives)
    assert {e["name"].split()[0] for e in dp} == {"allreduce"}
    compute_tids = {e["tid"] for e in slices(events, "compute")}
    assert not compute_tids & {e["tid"] for e in dp}


def test_last_event_ends_at_the_makespan(one_f_one_b):
    r = one_f_one_b
    _, events = trace_of(r)
    ends = [e["ts"] + e["dur"] for e in slices(events)]
    assert max(ends) == round(r.makespan_ns)
    # and the ranks' own events reach it: the last DP collective ends the iteration
    rank_ends = [e["ts"] + e["dur"] for e in slices(events) if e["pid"] <= r.schedule.pp]
    assert max(rank_ends) == round(r.makespan_ns)
    its = slices(events, "iteration")
    assert [(e["name"], e["ts"], e["dur"]) for e in its] == [("iteration 0", 0,
                                                               round(r.makespan_ns))]


def test_metadata_names_ranks_stages_and_tracks():
    r = run("zb-v", 2, 4)
    trace, _ = trace_of(r)
    meta = [e for e in trace["traceEvents"] if e["ph"] == "M"]
    procs = {e["pid"]: e["args"]["name"] for e in meta if e["name"] == "process_name"}
    assert procs == {1: "rank 0 (stages 0, 3)", 2: "rank 1 (stages 1, 2)",
                     3: "pipeline (zb-v, P=2, M=4, v=2)"}
    threads = {(e["pid"], e["tid"]): e["args"]["name"] for e in meta
               if e["name"] == "thread_name"}
    assert threads[(1, 1)] == threads[(2, 1)] == "compute"
    assert threads[(3, 1)] == "iterations"
    assert {n for n in threads.values() if n.startswith("DP")} == {"DP collectives"}
    order = {e["pid"]: e["args"]["sort_index"] for e in meta if e["name"] == "process_sort_index"}
    assert order == {3: 0, 1: 1, 2: 2}
    assert all(e["pid"] > 0 and e.get("tid", 1) > 0 for e in trace["traceEvents"])
    assert list(trace) == ["traceEvents", "displayTimeUnit"] and trace["displayTimeUnit"] == "ns"


def test_inflight_counter_peaks_match_the_summary():
    for name, vpp in (("1f1b", None), ("gpipe", None), ("interleaved-1f1b", 2), ("zb-h1", None),
                      ("zb-v", None)):
        r = run(name, 4, 8, vpp)
        _, events = trace_of(r)
        peaks = defaultdict(int)
        last = {}
        for e in events:
            if e["ph"] == "C" and e["name"] == "in flight":
                peaks[e["pid"] - 1] = max(peaks[e["pid"] - 1], e["args"]["microbatches"])
                last[e["pid"] - 1] = e["args"]
        assert [peaks[s["rank"]] for s in r.summary["stages"]] == \
            [s["peak_inflight_microbatches"] for s in r.summary["stages"]], name
        assert all(v == {"microbatches": 0, "activations": 0} for v in last.values())


def test_inflight_samples_of_1f1b_rank0(one_f_one_b):
    # rank 0 of 1F1B, P=4: 4 forwards before its first backward, then one in one out
    samples = inflight_samples(one_f_one_b, 0)
    counts = [s[1]["microbatches"] for s in samples]
    assert counts == [0, 1, 2, 3, 4, 3, 4, 3, 4, 3, 4, 3, 4, 3, 2, 1, 0]


def test_counter_events_merge_equal_times_and_drop_repeats():
    evs = counter_events(3, "x", [(0.0, {"v": 0}), (10.4, {"v": 1}), (10.2, {"v": 2}),
                                  (20.0, {"v": 2}), (30.0, {"v": 0})])
    assert [(e["ts"], e["args"]) for e in evs] == [(0.0, {"v": 0}), (0.01, {"v": 2}),
                                                   (0.03, {"v": 0})]
    assert all(e["ph"] == "C" and e["pid"] == 3 and e["name"] == "x" for e in evs)


def test_a_memory_counter_per_rank_reaches_its_peak(one_f_one_b):
    r = one_f_one_b
    _, events = trace_of(r)
    mem = [e for e in events if e["ph"] == "C" and e["name"] == "memory"]
    peaks = [s["peak_memory_bytes"] for s in r.to_dict()["ranks"]]
    assert [max(e["args"]["bytes"] for e in mem if e["pid"] == rank + 1)
            for rank in range(r.schedule.pp)] == peaks


def test_assign_lanes_first_free_lane_in_start_order():
    spans = [(0, 10), (5, 15), (10, 20), (12, 13), (15, 15), (20, 30)]
    assert assign_lanes(spans) == [0, 1, 0, 2, 1, 0]


@given(st.integers(min_value=0, max_value=10**13))
def test_us_reads_back_as_the_same_nanosecond_both_ways(q):
    v = us(q)
    assert int(v * 1000.0) == q
    text = json.dumps(v)
    assert int((Decimal(text) * 1000).to_integral_value(rounding=ROUND_DOWN)) == q


def test_write_trace_is_json_that_loads(tmp_path, one_f_one_b):
    path = write_trace(one_f_one_b, tmp_path / "t.json")
    data = json.loads(path.read_text())
    assert data["displayTimeUnit"] == "ns"
    assert data == json.loads(json.dumps(build_trace(one_f_one_b)))


def test_write_trace_unwritable_path_is_one_line_error(tmp_path, one_f_one_b):
    with pytest.raises(ConfigError) as err:
        write_trace(one_f_one_b, tmp_path / "missing" / "t.json")
    assert str(err.value) == (f"--trace: cannot write {str(tmp_path / 'missing' / 't.json')!r}: "
                              "No such file or directory")
