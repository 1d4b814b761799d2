"""`pipesim compare` as a user meets it: the table, JSON only on stdout, stacked Gantt, errors."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET

import pytest

from simulator.cli.main import main

HEADER = ("HYBRID_TRANSFORMER_FWD_IN_BCKWD model_parallel_NPU_group: 1 ep: 1 pp: 4 vpp: 1 ga: 8 "
          "all_gpus: 4 checkpoints: 0 checkpoint_initiates: 0 pp_comm: 0\n")
ROW = "layer -1 1000 NONE 0 1000 NONE 0 1000 NONE 0 0\n"


@pytest.fixture
def workload(tmp_path):
    """8 identical layers, F = I = W = 1 us each, P=4, M=8 in the header, no communication."""
    path = tmp_path / "uniform.txt"
    path.write_text(HEADER + "8\n" + ROW * 8)
    return path


def compare(capsys, *args):
    rc = main(["compare", *map(str, args)])
    out = capsys.readouterr()
    return rc, out.out, out.err


def test_table(capsys, workload):
    rc, out, err = compare(capsys, workload, "--schedules", "1f1b,gpipe,interleaved-1f1b,zb-v",
                           "--vpp", "2")
    assert rc == 0 and err == ""
    assert out.splitlines() == [
        f"pipesim compare: {workload}, P=4, M=8",
        "",
        "schedule          v  iteration time   bubble  closed form  peak in flight  "
        "peak memory  p2p traffic  speed-up vs 1f1b",
        "─" * 117,
        "1f1b              1       66.000 us  27.27 %      27.27 %               4  "
        "        0 B          0 B             1.00x",
        "gpipe             1       66.000 us  27.27 %      27.27 %               8  "
        "        0 B          0 B             1.00x",
        "interleaved-1f1b  2       57.000 us  15.79 %      15.79 %               8  "
        "        0 B          0 B             1.16x",
        "zb-v              2       51.000 us   5.88 %       5.88 %               8  "
        "        0 B          0 B             1.29x",
        "",
        "note: --vpp 2 applies to interleaved-1f1b; 1f1b (v=1), gpipe (v=1), zb-v (v=2) run "
        "their own virtual stages",
        "",
        "warnings (2): numbers above rest on these assumptions",
        f"  ! {workload} says pp_comm: 0 and no activation size can be derived from its rows "
        "(no tensor-parallel forward collective); the 3 stage boundaries move 0 bytes, so "
        "transfers cost nothing and activations take no memory [set --pp-comm]",
        f"  ! rank(s) 0, 1, 2, 3 hold 0 B: {workload} names no parameter sizes for their layers "
        "(no weight-gradient ALLREDUCE/REDUCESCATTER bytes) and no activation size (pp_comm 0) "
        "[set --set memory.params_per_layer=N, memory.activation_bytes_per_layer=B or "
        "--pp-comm]",
    ]


def test_json_dash_prints_the_list_only(capsys, workload):
    rc, out, err = compare(capsys, workload, "-s", "zb-v,1f1b", "--json", "-")
    assert rc == 0 and err == ""
    data = json.loads(out)
    assert [(d["schedule"], d["makespan_ns"], d["error"]) for d in data] == [
        ("zb-v", 51000.0, None), ("1f1b", 66000.0, None)]
    assert data[1]["speedup"] == pytest.approx(51 / 66)
    assert data[0]["baseline"] == "zb-v"


def test_json_to_a_file_and_the_table(capsys, workload, tmp_path):
    dest = tmp_path / "rows.json"
    rc, out, _ = compare(capsys, workload, "-s", "1f1b", "--json", dest)
    assert rc == 0
    assert out.startswith(f"pipesim compare: {workload}, P=4, M=8\n\nschedule")
    assert [d["schedule"] for d in json.loads(dest.read_text())] == ["1f1b"]


def test_illegal_schedule_reported_in_its_row(capsys, workload):
    rc, out, err = compare(capsys, workload, "-s", "dualpipe-v,1f1b", "-m", "4")
    assert rc == 0 and err == ""
    lines = out.splitlines()
    assert lines[4].startswith("dualpipe-v")
    assert lines[4].endswith("  error: --microbatches: dualpipe-v needs at least as many "
                             "microbatches as stages (2 x pp = 8), got 4")
    assert lines[5].split()[:3] == ["1f1b", "1", "42.000"]


def test_none_can_run(capsys, workload):
    rc, out, err = compare(capsys, workload, "-s", "dualpipe-v,dualpipe", "-m", "3", "--json", "-")
    assert rc == 2
    assert [d["error"] is not None for d in json.loads(out)] == [True, True]
    assert err == ("pipesim: error: --schedules: none of dualpipe-v, dualpipe could run; each row "
                   "says why\n")


def test_pp_and_microbatches_override_the_header(capsys, workload):
    rc, out, _ = compare(capsys, workload, "-s", "1f1b", "--pp", "2", "-m", "2", "--json", "-")
    assert rc == 0
    (d,) = json.loads(out)
    assert (d["pp"], d["microbatches"], d["makespan_ns"]) == (2, 2, 3 * 12000.0)


def test_stacked_gantt(capsys, workload, tmp_path):
    png = tmp_path / "cmp.png"
    rc, _, err = compare(capsys, workload, "-s", "1f1b,dualpipe-v,zb-v", "-m", "4", "--gantt",
                         png)
    assert rc == 0 and err == ""
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    svg = tmp_path / "cmp.svg"
    rc, _, _ = compare(capsys, workload, "-s", "1f1b,dualpipe-v,zb-v", "-m", "4", "--gantt", svg)
    text = svg.read_text()
    assert ET.fromstring(text).tag == "{http://www.w3.org/2000/svg}svg"
    # a chart per schedule that ran, titled; the failed one is left out
    assert text.count("1f1b (v=1)") == 1 and text.count("zb-v (v=2)") == 1
    assert "dualpipe-v (v=" not in text
    assert "speed-up 1.40× over 1f1b" in text   # 1F1B 42 us, ZB-V at M=4: 30 us


def test_bad_gantt_extension_fails_before_running(capsys, workload, tmp_path):
    rc, out, err = compare(capsys, workload, "-s", "1f1b", "--gantt", tmp_path / "c.jpeg")
    assert rc == 2 and out == ""
    assert err == (f"pipesim: error: --gantt: cannot tell the image format of "
                   f"{str(tmp_path / 'c.jpeg')!r}: expected a name ending in .png, .svg or "
                   ".pdf, found '.jpeg'\n")


def test_unknown_schedule(capsys, workload):
    rc, out, err = compare(capsys, workload, "-s", "1f1b,zb-x")
    assert rc == 2 and out == ""
    assert err.startswith("pipesim: error: --schedules: unknown schedule 'zb-x'; expected one "
                          "of: ")
    assert "1f1b" in err and err.count("\n") == 1


def test_schedules_is_required(capsys, workload):
    rc, _, err = compare(capsys, workload)
    assert rc == 2
    assert "Missing option '--schedules'" in err


@pytest.fixture
def memory_system(tmp_path):
    """1000 parameters a layer (16 B each: 32,000 B a 2-layer stage) and 1 MiB of activations a
    layer and microbatch."""
    path = tmp_path / "mem.yaml"
    path.write_text("memory:\n  params_per_layer: 1000\n  activation_bytes_per_layer: 1048576\n")
    return path


def test_peak_memory_and_own_virtual_stages(capsys, workload, memory_system):
    rc, out, err = compare(capsys, workload, "-s", "1f1b,gpipe,interleaved-1f1b:2,zb-h1,zb-h1:2",
                           "--system", memory_system)
    assert rc == 0 and err == ""
    assert out.splitlines()[2:9] == [
        "schedule            v  iteration time   bubble  closed form  peak in flight  "
        "peak memory  p2p traffic  speed-up vs 1f1b",
        "─" * 119,
        "1f1b                1       66.000 us  27.27 %      27.27 %               4  "
        "   8.03 MiB          0 B             1.00x",
        "gpipe               1       66.000 us  27.27 %      27.27 %               8  "
        "  16.03 MiB          0 B             1.00x",
        "interleaved-1f1b:2  2       57.000 us  15.79 %      15.79 %               8  "
        "  11.03 MiB          0 B             1.16x",
        "zb-h1               1       54.000 us  11.11 %      11.11 %               4  "
        "   8.03 MiB          0 B             1.22x",
        "zb-h1:2             2       51.000 us   5.88 %       5.88 %               8  "
        "   8.03 MiB          0 B             1.29x",
    ]
    rc, out, _ = compare(capsys, workload, "-s", "1f1b,gpipe,interleaved-1f1b:2,zb-h1,zb-h1:2",
                         "--system", memory_system, "--json", "-")
    # rank 0 holds 2 layers' 32,000 B of static memory and, at its peak, 1F1B's 4 microbatches
    # of 2 layers (8 MiB), GPipe's 8 (16 MiB), interleaving's 11 one-layer chunks (Megatron's
    # warm-up 2(P-1) + (v-1)P = 10, and one), the interleaved zero-bubble schedule's 8
    assert [(d["schedule"], d["vpp"], d["vpp_set_by"], d["peak_memory_bytes"],
             d["peak_memory_rank"]) for d in json.loads(out)] == [
        ("1f1b", 1, "default", 32000 + 8 * 2**20, 0),
        ("gpipe", 1, "default", 32000 + 16 * 2**20, 0),
        ("interleaved-1f1b", 2, "--schedules", 32000 + 11 * 2**20, 0),
        ("zb-h1", 1, "default", 32000 + 8 * 2**20, 0),
        ("zb-h1", 2, "--schedules", 32000 + 8 * 2**20, 0)]


def test_common_vpp_leaves_zb_h1_alone_and_says_so(capsys, workload):
    rc, out, _ = compare(capsys, workload, "-s", "1f1b,interleaved-1f1b,zb-h1", "--vpp", "4",
                         "--pp", "2")
    assert rc == 0
    lines = out.splitlines()
    assert [line.split()[:2] for line in lines[4:7]] == [
        ["1f1b", "1"], ["interleaved-1f1b", "4"], ["zb-h1", "1"]]
    assert lines[7:9] == ["", "note: --vpp 4 applies to interleaved-1f1b; 1f1b (v=1), zb-h1 (v=1) "
                         "run their own virtual stages; zb-h1:4 asks for its interleaved form"]


def test_speedups_are_over_the_first_entry_as_written(capsys, workload):
    rc, out, _ = compare(capsys, workload, "-s", "interleaved-1f1b:2,1f1b", "--json", "-")
    assert rc == 0
    assert [(d["baseline"], d["speedup"]) for d in json.loads(out)] == [
        ("interleaved-1f1b:2", 1.0), ("interleaved-1f1b:2", pytest.approx(57 / 66))]


@pytest.mark.parametrize("args,message", [
    (["-s", "1f1b,zb-h1", "--vpp", "2"],
     "--vpp 2: none of 1f1b, zb-h1 interleaves (--vpp reaches hanayo, interleaved-1f1b, "
     "looped-bfs); give a schedule its own count instead, e.g. zb-h1:2"),
    (["-s", "1f1b,gpipe", "--vpp", "2"],
     "--vpp 2: none of 1f1b, gpipe interleaves (--vpp reaches hanayo, interleaved-1f1b, "
     "looped-bfs)"),
    (["-s", "1f1b,zb-v:3"], "--schedules: zb-v:3: zb-v runs 2 virtual stage(s) per rank, not 3"),
    (["-s", "1f1b,zb-v:x"], "--schedules: 'zb-v:x': expected NAME or NAME:V with V a positive "
                            "number of virtual stages per rank"),
    (["-s", "interleaved-1f1b:2,interleaved-1f1b:2"],
     "--schedules: 'interleaved-1f1b:2' is given twice"),
])
def test_virtual_stage_refusals(capsys, workload, args, message):
    rc, out, err = compare(capsys, workload, *args)
    assert (rc, out, err) == (2, "", f"pipesim: error: {message}\n")


def test_gantt_titles_carry_the_peak_memory(capsys, workload, memory_system, tmp_path):
    svg = tmp_path / "cmp.svg"
    rc, _, _ = compare(capsys, workload, "-s", "1f1b,gpipe", "--system", memory_system,
                       "--gantt", svg)
    text = svg.read_text()
    assert rc == 0
    assert text.count("peak memory 8.03 MiB") == 1 and text.count("peak memory 16.03 MiB") == 1


def test_json_schema_names_the_memory_and_vpp_fields(capsys):
    rc, out, _ = compare(capsys, "--json-schema")
    row = json.loads(out)["$defs"]["CompareRow"]
    assert rc == 0
    assert {k: row["properties"][k] for k in ("peak_memory_bytes", "peak_memory_rank",
                                               "vpp_set_by")} == {
        "peak_memory_bytes": {"anyOf": [{"type": "integer"}, {"type": "null"}],
                              "description": "the largest rank's peak memory"},
        "peak_memory_rank": {"anyOf": [{"type": "integer"}, {"type": "null"}],
                             "description": "the rank that holds it"},
        "vpp_set_by": {"type": "string", "description": "what chose vpp: --schedules (NAME:V), "
                       "--vpp (a schedule that interleaves), or default"}}
    assert {"peak_memory_bytes", "peak_memory_rank", "vpp_set_by"} <= set(row["required"])
