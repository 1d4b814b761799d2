"""Traces that are not one pipeline run: one line naming the file and what was expected."""

from __future__ import annotations

import gzip
import json
import re
from pathlib import Path

import pytest

from simulator.calibration import TraceError, read_traces, trace_files
from simulator.errors import ConfigError

TRACES = Path(__file__).resolve().parents[1] / "data" / "traces"


def load(cls: str, rank: int) -> dict:
    with gzip.open(TRACES / cls / f"rank{rank}.json.gz", "rt") as f:
        return json.load(f)


def save(path: Path, data: dict) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data))
    return path


def copy_run(tmp_path: Path, cls: str, edit=None, ranks=range(4)) -> list[Path]:
    out = []
    for r in ranks:
        data = load(cls, r)
        if edit is not None:
            data = edit(r, data) or data
        out.append(save(tmp_path / f"rank{r}.json", data))
    return out


def drop_info(_r, data):
    data.pop("distributedInfo")


def error(paths, **kw) -> str:
    with pytest.raises(TraceError) as e:
        read_traces(paths, **kw)
    msg = str(e.value)
    assert "\n" not in msg and e.value.exit_code == 2 and isinstance(e.value, ConfigError)
    return msg


def test_truncated_json(tmp_path):
    p = tmp_path / "rank0.json"
    p.write_text(json.dumps(load("ScheduleGPipe", 0))[:5000])
    assert re.fullmatch(re.escape(str(p)) + r":1:\d+: expected a complete Chrome trace JSON "
                        r"\(\{\"traceEvents\": \[\.\.\.\]\}\), the file ends early \(truncated\?\)"
                        r": .*", error([p]))


def test_truncated_gzip(tmp_path):
    p = tmp_path / "rank0.json.gz"
    p.write_bytes((TRACES / "ScheduleGPipe" / "rank0.json.gz").read_bytes()[:3000])
    assert error([p]) == (f"{p}: expected a gzip-compressed Chrome trace, the gzip data is "
                          "truncated or damaged")


def test_not_a_trace(tmp_path):
    p = save(tmp_path / "x.json", {"events": []})
    assert error([p]) == f"{p}: expected a Chrome trace JSON object with a \"traceEvents\" list"
    assert error([tmp_path / "nope.json"]) == f"{tmp_path / 'nope.json'}: no such trace file"
    assert error([]) == "calibrate: expected one profiler trace per pipeline rank, got none"


def test_no_pipelining_labels(tmp_path):
    p = save(tmp_path / "rank0.json", {"traceEvents": [
        {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "ts": 0, "dur": 5, "pid": 1, "tid": 1}]})
    assert error([p]) == (f"{p}: expected pipelining labels ('PP:<action>', 'Forward <mb>' / "
                          "'Backward <mb>' or --label-pattern), found none (Schedule1F1B records "
                          "none: label the compute and give --label-pattern)")


def test_missing_rank(tmp_path):
    paths = copy_run(tmp_path, "ScheduleInterleaved1F1B", ranks=(0, 1, 3))
    assert error(paths) == (f"{tmp_path}/: missing the trace of rank 2: expected one trace per "
                            "rank 0..3, found ranks 0, 1, 3")


def test_missing_rank_without_distributed_info(tmp_path):
    paths = copy_run(tmp_path, "ScheduleInterleaved1F1B", drop_info, ranks=(0, 1, 3))
    assert error(paths) == (f"{tmp_path}/: no compute action of stage 2; expected stages 0..7 "
                            "over the 3 traces")


def test_same_rank_twice(tmp_path):
    p = TRACES / "ScheduleGPipe" / "rank0.json.gz"
    assert error([p, p]) == f"{p}: distributedInfo.rank 0 again (also in {p}); expected one " \
        "trace per rank"


def test_stage_on_two_ranks(tmp_path):
    a = save(tmp_path / "a.json", {k: v for k, v in load("ScheduleInterleaved1F1B", 0).items()
                                   if k != "distributedInfo"})
    b = save(tmp_path / "b.json", json.loads(a.read_text()))
    assert error([a, b]) == (f"{b}: stage 0 also runs on rank 0 ({a}); expected each stage on "
                             "one rank")


def test_traces_of_two_different_runs(tmp_path):
    """GPipe's rank 0 beside Interleaved1F1B's ranks 1-3: stage 4 is nowhere."""
    paths = [save(tmp_path / "rank0.json", load("ScheduleGPipe", 0))]
    paths += copy_run(tmp_path, "ScheduleInterleaved1F1B", ranks=(1, 2, 3))
    assert error(paths) == (f"{tmp_path}/: no compute action of stage 4; expected stages 0..7 "
                            "over the 4 traces")


def test_stages_not_even_over_ranks(tmp_path):
    """Interleaved1F1B's ranks 0-2 (stages 0-2, 4-6) with GPipe's rank 3 (stage 3): 7 stages."""
    paths = copy_run(tmp_path, "ScheduleInterleaved1F1B", ranks=(0, 1, 2))
    paths.append(save(tmp_path / "rank3.json", load("ScheduleGPipe", 3)))
    assert error(paths) == (f"{tmp_path}/: 7 stages do not divide over 4 ranks; expected the "
                            "same number of stages on every rank (a missing trace?)")


def test_missing_microbatch(tmp_path):
    def edit(r, data):
        if r == 1:
            drop = [e for e in data["traceEvents"] if e.get("name") == "PP:1F3"][0]
            data["traceEvents"].remove(drop)
    paths = copy_run(tmp_path, "ScheduleInterleaved1F1B", edit)
    assert error(paths) == (f"{paths[1]}: iteration 0: no 1F3; expected microbatches 0..7 on "
                            "every stage")


def test_iteration_missing_on_one_rank(tmp_path):
    def edit(r, data):
        if r == 2:
            data["traceEvents"] = [e for e in data["traceEvents"] if e.get("name") != "ITER1"]
    paths = copy_run(tmp_path, "ScheduleGPipe", edit)
    assert error(paths) == f"{paths[2]}: 4 iteration(s); expected 5 like the other ranks"


def test_no_iteration_markers_reads_one_iteration(tmp_path):
    def edit(_r, data):
        data["traceEvents"] = [e for e in data["traceEvents"]
                               if not str(e.get("name", "")).startswith("ITER")]
    paths = copy_run(tmp_path, "ScheduleGPipe", edit)
    assert error(paths) == (f"{paths[0]}: iteration 0: 0F0 twice; expected each action once per "
                            "iteration (no ProfilerStep#k or ITER... spans: the whole trace is "
                            "read as one iteration)")


def test_profiler_steps_mark_iterations(tmp_path):
    def edit(_r, data):
        for e in data["traceEvents"]:
            if str(e.get("name", "")).startswith("ITER"):
                e["name"] = f"ProfilerStep#{int(e['name'][4:]) + 3}"
    ts = read_traces(copy_run(tmp_path, "ScheduleGPipe", edit))
    ref = read_traces(trace_files([TRACES / "ScheduleGPipe"]))
    assert ts.n_iterations == 5 and ts.orders(4) == ref.orders(4)
    assert ts.iteration_times_ns() == ref.iteration_times_ns()


def test_bad_labels(tmp_path):
    def bad(name):
        def edit(r, data):
            if r == 0:
                ev = next(e for e in data["traceEvents"] if e.get("name") == "PP:0F0")
                ev["name"] = name
        return copy_run(tmp_path, "ScheduleInterleaved1F1B", edit)
    paths = bad("PP:0F")
    assert error(paths) == (f"{paths[0]}: label 'PP:0F': expected a microbatch number after F")
    paths = bad("PP:0X1")
    assert error(paths).startswith(f"{paths[0]}: label 'PP:0X1': expected "
                                   "'PP:<stage><kind><microbatch>'")
    paths = bad("PP:(0F0)OVERLAP_F_B")
    assert error(paths) == (f"{paths[0]}: label 'PP:(0F0)OVERLAP_F_B': expected an overlapped "
                            "pair like 'PP:(0F7;7B3)OVERLAP_F_B'")


def test_bad_label_pattern():
    files = trace_files([TRACES / "Schedule1F1B"])
    assert error(files, label_pattern=r"fidelity:(\d+)") == (
        "--label-pattern: expected named groups (?P<kind>...) and (?P<mb>...) (and "
        "(?P<stage>...) unless the stage is the rank), found 'fidelity:(\\\\d+)'")
    assert error(files, label_pattern="(").startswith(
        "--label-pattern: expected a regular expression, '(' does not compile: ")
    assert error(files, label_pattern=r"^fidelity:(?P<stage>\d+)(?P<kind>[A-Z]\d)(?P<mb>\d*)$"
                 ) == (f"{files[0]}: label 'fidelity:0F0': --label-pattern group 'kind' must be "
                       "one of F, B, I, W, found 'F0'")


def test_label_pattern_without_stage_takes_the_rank():
    files = trace_files([TRACES / "Schedule1F1B"])
    ts = read_traces(files, label_pattern=r"^fidelity:\d+(?P<kind>[FB])(?P<mb>\d+)$")
    assert ts.placement == (0, 1, 2, 3)
    assert ts.orders(0)[3][:4] == ["3F0", "3B0", "3F1", "3B1"]


def test_event_times_must_be_numbers(tmp_path):
    p = save(tmp_path / "rank0.json", {"traceEvents": [
        {"ph": "X", "cat": "user_annotation", "name": "PP:0F0", "ts": "12", "dur": 5}]})
    assert error([p]) == (f"{p}: event 'PP:0F0': expected numbers 'ts' and 'dur' >= 0 (µs), "
                          "found ts='12', dur=5")
