"""simulator.calibration.memory_trace: the allocator's [memory] events of a profiler trace,
per rank and per (stage, kind).

The committed traces (tests/data/memtraces, recorded by its record.py) are a real torch 2.13 run
of ScheduleZBVZeroBubble, P = 4, M = 8, 16 pre-LN MLP blocks (hidden h = 64, R = 32 rows per
microbatch, float32, 2 blocks per stage), freshly spawned processes with the profiler on from
their start. One activation (or its gradient) between stages is A = R·h·4 = 8192 B."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from simulator.calibration.memory_trace import read_memory
from simulator.calibration.traces import TraceError

MEM = Path(__file__).resolve().parents[1] / "data" / "memtraces" / "ScheduleZBVZeroBubble"
R, H, M = 32, 64, 8
A = R * H * 4                        # one activation between stages: 8192 B
WEIGHTS = 531456                     # 4 blocks (2 per stage) x (8h^2 + 7h) x 4 B
STASH = 2 * (10 * H + 2) * R * 4     # F keeps per block: LN out, mean, rstd, fc1 out, GELU out,
                                     # block out: (10h + 2)·R floats
I_KEPT = 2 * 6 * H * R * 4           # I keeps per block the grads of LN out, fc1 out, fc2 out


@pytest.fixture(scope="module")
def ranks():
    return [read_memory(MEM / f"rank{r}.json.gz") for r in range(4)]


def test_absolute_basis_and_pinned_peaks(ranks):
    assert [m.basis for m in ranks] == ["absolute"] * 4
    assert [m.device for m in ranks] == ["cpu"] * 4
    assert [m.peak_bytes for m in ranks] == [2903060, 2919424, 3049472, 3262976]
    assert [m.step_peaks for m in ranks] == [(p, p) for p in (2903060, 2919424, 3049472,
                                                              3262976)]


def test_static_bytes_are_weights_and_what_torch_keeps_across_steps(ranks):
    # a middle rank (stages 1, 6): per stage M forward receive buffers, M gradient receive
    # buffers, and the M input gradients I left on them (.grad until the next step)
    assert ranks[1].static_bytes == WEIGHTS + 2 * 3 * M * A == 924672
    # rank 0 (stages 0, 7): stage 0 receives only gradients, stage 7 only activations plus
    # its I's input gradients and its M outputs (return_outputs=True), and the data
    assert ranks[0].static_bytes == WEIGHTS + 2 * M * A + 4 * M * A == 924672
    # rank 3 (stages 3, 4, the turn of the V): stage 3 receives activations, stage 4 gradients;
    # stage 4's input is stage 3's output by reference (kept), its input gradient is stage 3's
    # gradient input by reference, stage 3's I leaves its input gradients: 5 M
    assert ranks[3].static_bytes == WEIGHTS + 5 * M * A == 859136
    assert all(m.step_start_bytes == m.step_end_bytes == (m.static_bytes,) * 2 for m in ranks)


def test_forward_input_and_weight_halves_per_stage(ranks):
    per = ranks[1].per_action()
    assert per[(1, "F")] == {"kept": STASH, "freed": 2 * A, "allocated": STASH + 2 * A,
                             "transient": STASH + A, "samples": 2 * M}
    assert per[(1, "I")]["kept"] == I_KEPT == 98304
    # W frees the stash but the stage's output (held by its send until step() ends) and what I
    # kept but the input gradient (left on the receive buffer until the next step)
    assert per[(1, "W")]["kept"] == -(STASH - A) - (I_KEPT - A) == -246272
    assert per[(6, "F")] == per[(1, "F")]


def test_first_stage_input_half_does_nothing_and_v_turn_hands_off_by_reference(ranks):
    assert ranks[0].per_action()[(0, "I")] == {"kept": 0.0, "freed": 0.0, "allocated": 0.0,
                                               "transient": 0.0, "samples": 2 * M}
    per3 = ranks[3].per_action()
    # stage 3's F hands its output to stage 4 by reference, dropping the one of the last step
    assert per3[(3, "F")]["kept"] == STASH - A
    assert per3[(4, "I")]["kept"] == I_KEPT - A


def _trace(events: list[dict], path: Path) -> Path:
    path.write_text(json.dumps({"traceEvents": events}))
    return path


def _span(name: str, ts: float, dur: float) -> dict:
    return {"ph": "X", "cat": "user_annotation", "name": name, "ts": ts, "dur": dur,
            "pid": 1, "tid": 1}


def _mem(ts: float, nbytes: int, total: int, dtype: int = 0, did: int = -1) -> dict:
    return {"ph": "i", "s": "t", "name": "[memory]", "ts": ts, "pid": 1, "tid": 1,
            "args": {"Total Reserved": 0, "Total Allocated": total, "Bytes": nbytes,
                     "Device Type": dtype, "Device Id": did}}


def _small(first_total: int) -> list[dict]:
    """Weights 1000 B before the step; F0 allocates 300, 200, frees 200 (keeps 300, peak +500);
    B0 allocates 50, frees 300 and 50."""
    base = first_total - 1000
    return [_mem(1.0, 1000, base + 1000),
            _span("ProfilerStep#3", 10.0, 100.0),
            _span("PP:0F0", 20.0, 10.0),
            _mem(21.0, 300, base + 1300), _mem(22.0, 200, base + 1500),
            _mem(23.0, -200, base + 1300),
            _span("PP:0B0", 40.0, 10.0),
            _mem(41.0, 50, base + 1350), _mem(42.0, -300, base + 1050),
            _mem(43.0, -50, base + 1000)]


def test_hand_built_trace_exact(tmp_path):
    m = read_memory(_trace(_small(1000), tmp_path / "t.json"))
    assert (m.basis, m.static_bytes, m.peak_bytes, m.peak_whole_bytes) == \
        ("absolute", 1000, 1500, 1500)
    per = m.per_action()
    assert per[(0, "F")] == {"kept": 300.0, "freed": 200.0, "allocated": 500.0,
                             "transient": 500.0, "samples": 1}
    assert per[(0, "B")] == {"kept": -300.0, "freed": 350.0, "allocated": 50.0,
                             "transient": 50.0, "samples": 1}


def test_a_profiler_started_late_falls_back_to_deltas(tmp_path):
    # the allocator already counted 4000 B when this trace began: the running sum is used
    m = read_memory(_trace(_small(5000), tmp_path / "t.json"))
    assert (m.basis, m.static_bytes, m.peak_bytes) == ("deltas", 1000, 1500)


def test_refusals_are_one_line_exit_2(tmp_path):
    no_mem = _trace([e for e in _small(1000) if e["name"] != "[memory]"], tmp_path / "n.json")
    with pytest.raises(TraceError) as err:
        read_memory(no_mem)
    assert str(err.value) == (
        f"{no_mem}: expected the allocator's [memory] events, found none; record the trace "
        "with torch.profiler.profile(..., profile_memory=True), started before the model is "
        "built")
    assert err.value.exit_code == 2

    mixed = _trace(_small(1000) + [_mem(44.0, 64, 64, dtype=1, did=0)], tmp_path / "m.json")
    with pytest.raises(TraceError) as err:
        read_memory(mixed)
    assert str(err.value) == (f"{mixed}: [memory] events of 2 devices (cpu, cuda:0); expected "
                              "one device per trace, or name one (device='cuda:0')")
    assert read_memory(mixed, device="cuda:0").peak_whole_bytes == 64
    assert read_memory(mixed, device="cpu").peak_bytes == 1500

    cut = tmp_path / "cut.json.gz"
    cut.write_bytes(gzip.compress(json.dumps({"traceEvents": _small(1000)}).encode())[:-40])
    with pytest.raises(TraceError) as err:
        read_memory(cut)
    assert "truncated" in str(err.value) and "\n" not in str(err.value)

    bad = _trace(_small(1000)[:1] + [{**_mem(2.0, 1, 1), "args": {"Bytes": "x"}}],
                 tmp_path / "b.json")
    with pytest.raises(TraceError) as err:
        read_memory(bad)
    assert str(err.value).startswith(f"{bad}: [memory] event #1: expected a number 'ts' and "
                                     "integer args 'Bytes', 'Total Allocated'")
