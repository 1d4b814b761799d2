"""Calibration from GPU traces: an action's work is the device time of what its span launched.

Two sources. A real CUDA trace (HolisticTraceAnalysis's test data, read from
../shared/traces-gpu; its README there has the provenance):
its launches, correlation ids, kernels on two streams and copies, read as torch's profiler
writes them. And the recorded CPU pipeline traces turned into GPU traces by a fixed rule (each
compute span launches one kernel taking 1.5x its CPU work, queued on one stream, so the
device runs behind the CPU; transfers
launch NCCL kernels; the device timeline carries copies of the labels), so every busy time and
end is known exactly.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from benchmarks.fidelity.cases import CASES, workload_text
from simulator.calibration import read_traces, trace_files
from simulator.calibration.fit import action_costs, calibrate
from simulator.calibration.traces import read_rank

from shared_files import GPU_TRACES_DIR, needs_gpu_traces

DATA = Path(__file__).resolve().parents[1] / "data"
GPU_TRACE = GPU_TRACES_DIR / "hta_alexnet_forward.json.gz"
USER = r"^fidelity:(?P<stage>\d+)(?P<kind>[FBIW])(?P<mb>\d+)$"


def _real() -> dict:
    """The real trace with its two inner AlexNet forwards labelled as two actions."""
    data = json.load(gzip.open(GPU_TRACE, "rt"))
    inner = {1694039994167986: "fidelity:0F0", 1694040009854190: "fidelity:0F1"}
    for ev in data["traceEvents"]:
        if ev.get("cat") == "user_annotation" and ev.get("ts") in inner:
            ev["name"] = inner[ev["ts"]]
    return data


@needs_gpu_traces
def test_real_cuda_trace_busy_is_the_device_work_its_span_launched():
    data = _real()
    acts = read_rank(GPU_TRACE, data,
                     label_pattern=USER).iterations[0].actions
    assert [(a.label, a.busy_ns, a.span_ns) for a in acts] == [
        ("fidelity:0F0", 5_335_000, 15_632_425_000),   # cuDNN autotuning on the CPU
        ("fidelity:0F1", 5_270_000, 243_351_000)]
    # the same from the raw events: the union of the kernels and copies whose correlation id
    # a cuda_runtime launch inside the span carries (streams 7 and 20 overlap)
    ev = data["traceEvents"]
    for a in acts:
        s, e = a.start_ns / 1000, a.end_ns / 1000
        corr = {x["args"]["correlation"] for x in ev if x.get("cat") == "cuda_runtime"
                and s <= x["ts"] <= e}
        dev = sorted((x["ts"], x["ts"] + x["dur"]) for x in ev
                     if x.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")
                     and x["args"].get("correlation") in corr)
        union, cur = 0, None
        for lo, hi in dev:
            if cur is None or lo > cur[1]:
                union += 0 if cur is None else cur[1] - cur[0]
                cur = [lo, hi]
            else:
                cur[1] = max(cur[1], hi)
        union += cur[1] - cur[0]
        assert a.busy_ns == union * 1000
        assert len(dev) in (40, 41)


@needs_gpu_traces
def test_real_cuda_trace_cpu_operators_would_say_otherwise():
    """Without the device events the same spans read as their CPU operator time: what a GPU
    calibration must not use."""
    data = _real()
    data["traceEvents"] = [e for e in data["traceEvents"]
                           if e.get("cat") not in ("kernel", "gpu_memcpy", "gpu_memset")]
    acts = read_rank(Path("cpu-view.json"), data, label_pattern=USER).iterations[0].actions
    assert [a.busy_ns for a in acts] == [15_630_475_000, 241_697_000]


KERNEL_STREAM = 7


def to_gpu(cpu: dict, rank: int) -> tuple[dict, dict[str, tuple[int, int]]]:
    """A CPU pipeline trace as a GPU one: every compute span launches one kernel of 1.5x its
    CPU work (whole ns), queued on one stream after the previous kernel and at least 10 µs
    after the launch; a transfer span launches an NCCL kernel; each compute kernel has a
    ``gpu_user_annotation`` copy of its label. Returns the trace and, per label occurrence
    ``(label, start ns)``, the kernel's time, its end and the CPU span's end (ns)."""
    from simulator.calibration.traces import _ns, _parse_label

    labels = []
    for ev in cpu["traceEvents"]:
        if ev.get("ph") == "X" and isinstance(ev.get("name"), str) \
                and ev["name"].startswith("PP:"):
            labels.append(ev)
    one = read_rank(Path("cpu.json"), cpu)
    busy = {(a.label, a.start_ns): a.busy_ns for it in one.iterations for a in it.actions}
    out = list(cpu["traceEvents"])
    free = 0
    corr = 10_000_000
    known = {}
    for ev in sorted(labels, key=lambda e: e["ts"]):
        start = _ns(ev["ts"])
        parsed = _parse_label(ev["name"], rank, None, Path("x"))
        kind = parsed[0][1]
        corr += 1
        launch = start + 1_000
        out.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel",
                    "pid": ev["pid"], "tid": ev["tid"], "ts": launch / 1000, "dur": 3,
                    "args": {"correlation": corr}})
        k0 = max(launch + 9_000, free)
        if kind in ("SEND_F", "RECV_F", "SEND_B", "RECV_B"):
            out.append({"ph": "X", "cat": "kernel", "name": "ncclDevKernel_SendRecv",
                        "pid": rank, "tid": KERNEL_STREAM + 1, "ts": k0 / 1000, "dur": 50,
                        "args": {"correlation": corr}})
            continue
        if kind not in ("F", "B", "I", "W") and not ev["name"].endswith("OVERLAP_F_B"):
            continue
        kns = busy.get((ev["name"], start), 0) * 3 // 2
        free = k0 + kns
        known[(ev["name"], start)] = (kns, free, start + _ns(ev["dur"]))
        out.append({"ph": "X", "cat": "kernel", "name": "stage_kernel", "pid": rank,
                    "tid": KERNEL_STREAM, "ts": k0 / 1000, "dur": kns / 1000,
                    "args": {"correlation": corr}})
        out.append({"ph": "X", "cat": "gpu_user_annotation", "name": ev["name"], "pid": rank,
                    "tid": KERNEL_STREAM, "ts": k0 / 1000, "dur": kns / 1000})
    return {**cpu, "traceEvents": out}, known


@pytest.fixture(scope="module")
def gpu_run(tmp_path_factory) -> tuple[Path, dict]:
    src = DATA / "traces" / "ScheduleInterleaved1F1B"
    out = tmp_path_factory.mktemp("gpu") / "ScheduleInterleaved1F1B"
    out.mkdir()
    known = {}
    for r in range(4):
        cpu = json.load(gzip.open(src / f"rank{r}.json.gz", "rt"))
        gpu, k = to_gpu(cpu, r)
        known[r] = k
        (out / f"rank{r}.json").write_text(json.dumps(gpu))
    return out, known


def test_pipeline_gpu_trace_reads_kernel_time_and_end(gpu_run):
    folder, known = gpu_run
    ts = read_traces(trace_files([folder]))
    assert (ts.pp, ts.vpp, ts.microbatches, ts.n_iterations) == (4, 2, 8, 5)
    n = later = 0
    for rt in ts.ranks:
        for it in rt.iterations:
            for a in it.compute:
                kns, kend, span_end = known[rt.rank][(a.label, a.start_ns)]
                assert a.busy_ns == kns
                assert a.end_ns == max(kend, span_end)
                n += 1
                later += kend > span_end
    assert n == 4 * 5 * 32     # the device copies of the labels are not read as actions
    assert later > 0           # the device ran behind the CPU: those actions end later


def test_pipeline_gpu_trace_calibrates_on_the_kernel_time(gpu_run, tmp_path):
    folder, _ = gpu_run
    cpu = read_traces(trace_files([DATA / "traces" / "ScheduleInterleaved1F1B"]))
    gpu = read_traces(trace_files([folder]))
    cpu_costs, gpu_costs = action_costs(cpu), action_costs(gpu)
    assert gpu_costs.keys() == cpu_costs.keys()
    for key, v in cpu_costs.items():       # 1.5x the CPU work, each kernel floored to a ns
        assert v * 1.5 - 1 <= gpu_costs[key] <= v * 1.5
    wl = tmp_path / "uniform.txt"
    wl.write_text(workload_text(CASES["uniform"]))
    cal = calibrate([folder], wl)
    assert cal.schedule == "interleaved-1f1b"
    assert cal.action_costs == gpu_costs
