"""`pipesim run` as a user meets it: report, JSON, debug events, one-line errors and exit codes."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from simulator.cli.main import main

REPO = Path(__file__).resolve().parents[2]
DOC000 = REPO / "workloads" / "doc000-1f1b-test.txt"

HEADER = ("HYBRID_TRANSFORMER_FWD_IN_BCKWD model_parallel_NPU_group: 1 ep: 1 pp: 2 vpp: 1 ga: 4 "
          "all_gpus: 2 checkpoints: 0 checkpoint_initiates: 0 pp_comm: 0\n")
ROW = "layer -1 100 NONE 0 100 NONE 0 100 NONE 0 0\n"


def run(capsys, *args):
    rc = main(["run", *map(str, args)])
    out = capsys.readouterr()
    return rc, out.out, out.err


def test_json_summary_on_stdout_only(capsys):
    rc, out, err = run(capsys, DOC000, "--json", "-", "--system", REPO / "configs/system/default.yaml")
    assert rc == 0 and err == ""
    d = json.loads(out)
    assert (d["schedule"], d["pp"], d["vpp"], d["microbatches"], d["iterations"]) == ("1f1b", 4, 1, 8, 1)
    assert [(s["warmup"], s["steady"], s["cooldown"]) for s in d["stages"]] == [
        (3, 5, 3), (2, 6, 2), (1, 7, 1), (0, 8, 0)]
    assert d["theoretical_bubble_ratio"] == pytest.approx(3 / 11)
    assert d["layer_ops"] == 8 * 3 * 8
    for key in ("makespan_ns", "bubble_ratio", "stages", "links", "p2p_bytes"):
        assert key in d
    for s in d["stages"]:
        assert set(s) >= {"stage", "rank", "busy_ns", "idle_ns", "bubble_ratio", "warmup", "steady",
                          "cooldown", "peak_inflight_microbatches", "bytes_sent", "bytes_received"}


def test_options_override_the_header(capsys, tmp_path):
    wl = tmp_path / "w.txt"
    wl.write_text(HEADER + "4\n" + ROW * 4)
    rc, out, _ = run(capsys, wl, "--pp", "4", "--microbatches", "8", "-s", "gpipe", "--json", "-")
    d = json.loads(out)
    assert rc == 0 and (d["schedule"], d["pp"], d["microbatches"]) == ("gpipe", 4, 8)
    assert d["makespan_ns"] == (8 + 4 - 1) * 300
    assert d["bubble_ratio"] == pytest.approx(3 / 11, abs=1e-9)


def test_report_and_json_file(capsys, tmp_path):
    dest = tmp_path / "out.json"
    rc, out, _ = run(capsys, DOC000, "--json", dest)
    assert rc == 0
    assert "bubble ratio" in out and "(P-1)/(M+P-1): 27.27 %" in out
    assert "3/5/3" in out and "0/8/0" in out
    assert json.loads(dest.read_text())["pp"] == 4


def test_debug_log_lines_on_stderr(capsys):
    rc, _, err = run(capsys, DOC000, "--log-level", "debug")
    assert rc == 0
    assert "[WARMUP] Stage 0 starting forward for microbatch 0" in err
    assert "[COOLDOWN] Stage 0 starting backward for microbatch 7" in err
    assert "[PP_COMPLETE] Stage 3 finished all microbatches" in err


@pytest.mark.parametrize("text,where", [
    (HEADER + "1\nlayer -1 abc NONE 0 100 NONE 0 100 NONE 0 0\n", ":3:"),      # bad number
    (HEADER + "1\nlayer -1 100 NONE 0 100 NONE 0 100 NONE 0\n", ":3:"),        # missing column
    (HEADER + "2\n" + ROW, ":2:"),                                              # row count
    ("", ":1"),                                                                # empty file
    ("\x00\x01\x02junk\xff", ":1:"),                                           # binary junk
    (HEADER.replace("pp: 2", "pp: two") + "1\n" + ROW, ":1:"),                 # bad header value
])
def test_malformed_workloads_give_one_line_and_exit_2(capsys, tmp_path, text, where):
    wl = tmp_path / "bad.txt"
    wl.write_bytes(text.encode("latin-1"))
    rc, out, err = run(capsys, wl)
    assert rc == 2 and out == ""
    assert err.startswith(f"pipesim: error: {wl}{where}")
    assert err.count("\n") == 1 and "Traceback" not in err


@pytest.mark.parametrize("args,msg", [
    (["--pp", "0"], "--pp: expected a positive integer, got 0"),
    (["--schedule", "nope"], "--schedule: unknown schedule 'nope'"),
    (["--pp", "40"], "cannot split 8 layer rows into 40 pipeline chunks"),
    (["--system", "/nonexistent.yaml"], "--system: cannot read /nonexistent.yaml"),
    (["--schedule", "1f1b", "--vpp", "2"], "--vpp: 1f1b runs one chunk per rank"),
])
def test_bad_options_are_named(capsys, args, msg):
    rc, _, err = run(capsys, DOC000, *args)
    assert rc == 2
    assert msg in err and err.count("\n") == 1


def test_missing_workload_file(capsys, tmp_path):
    rc, _, err = run(capsys, tmp_path / "none.txt")
    assert rc == 2 and str(tmp_path / "none.txt") in err


def test_real_files_run_or_are_refused_without_traceback(real_dir):
    for path in sorted(real_dir.glob("*.txt")):
        proc = subprocess.run([sys.executable, "-m", "simulator", "run", str(path), "--json", "-"],
                              capture_output=True, text=True, cwd=REPO, timeout=120)
        assert "Traceback" not in proc.stderr, path
        if path.name.startswith("L65B"):
            assert proc.returncode == 2
            assert "declares 839 layer rows, found 33" in proc.stderr and str(path) in proc.stderr
        else:
            assert proc.returncode == 0, (path, proc.stderr)
            assert json.loads(proc.stdout)["makespan_ns"] > 0


def test_schedule_file_round_trip_and_refusal(capsys, tmp_path):
    csv = tmp_path / "1f1b.csv"
    assert main(["schedule", "1f1b", "--pp", "4", "--microbatches", "8", "--csv", str(csv)]) == 0
    capsys.readouterr()
    rc, out, _ = run(capsys, DOC000, "--schedule-file", csv, "--json", "-")
    custom = json.loads(out)
    rc2, out2, _ = run(capsys, DOC000, "-s", "1f1b", "--json", "-")
    named = json.loads(out2)
    assert rc == rc2 == 0
    assert custom["makespan_ns"] == named["makespan_ns"]
    assert [s["busy_ns"] for s in custom["stages"]] == [s["busy_ns"] for s in named["stages"]]
    # swap rank 0's first backward in front of its forward: the validator names it
    rows = csv.read_text().splitlines()
    cells = rows[0].split(",")
    i, j = cells.index("0F0"), cells.index("0B0")
    cells[i], cells[j] = cells[j], cells[i]
    rows[0] = ",".join(cells)
    bad = tmp_path / "bad.csv"
    bad.write_text("\n".join(rows) + "\n")
    rc, out, err = run(capsys, DOC000, "--schedule-file", bad)
    assert rc == 2 and out == ""
    assert err.startswith("pipesim: error: rank 0, position 0, action 0B0: ")
    assert err.count("\n") == 1


def test_schedule_options_and_system_overrides(capsys, tmp_path):
    wl = tmp_path / "w.txt"
    wl.write_text(HEADER.replace("pp_comm: 0", "pp_comm: 1000") + "4\n" + ROW * 4)
    rc, out, _ = run(capsys, wl, "-s", "2bw", "-O", "iterations=3", "--json", "-")
    d = json.loads(out)
    assert rc == 0 and d["minibatches"] == 3 and d["microbatches"] == 12
    # 1000 B at 8 Gb/s = 1000 ns + latency per transfer: slower links, longer iteration
    rc, fast, _ = run(capsys, wl, "--json", "-", "--set", "links.latency_ns=0")
    rc2, slow, _ = run(capsys, wl, "--json", "-", "--set", "links.bandwidth_gbps=8",
                       "--set", "links.latency_ns=0")
    assert rc == rc2 == 0
    assert json.loads(slow)["makespan_ns"] > json.loads(fast)["makespan_ns"]


@pytest.mark.parametrize("args,msg", [
    (["-O", "foo=1"], "--option: 1f1b has no option 'foo'; it takes no options"),
    (["-s", "interleaved-1f1b", "-O", "waves=2"],
     "--option: interleaved-1f1b has no option 'waves'; it takes group_size"),
    (["-O", "x"], "--option: expected KEY=VALUE, got 'x'"),
    (["--set", "links.speed=1"], "--set: unknown system key 'links.speed'"),
])
def test_bad_schedule_options_and_overrides_are_named(capsys, args, msg):
    rc, _, err = run(capsys, DOC000, *args)
    assert rc == 2 and err == f"pipesim: error: {msg}\n"


@pytest.mark.parametrize("argv,msg", [
    (["run"], "Missing argument 'WORKLOAD'."),
    (["nope"], "No such command 'nope'."),
    (["run", "x.txt", "--p2p", "smoke"], "Invalid value for '--p2p': 'smoke' is not one of "
                                          "'async', 'blocking', 'batched', 'torch', "
                                          "'torch-single', 'torch-multi'."),
])
def test_usage_errors_are_one_line(capsys, argv, msg):
    assert main(argv) == 2
    captured = capsys.readouterr()
    assert captured.err == f"pipesim: error: {msg}\n" and captured.out == ""


def test_simai_formula_shown_only_for_aicb_stage_traces(capsys, real_dir):
    aicb = real_dir / "workload_gpt13b_128g.txt"
    rc, out, _ = run(capsys, aicb, "--json", "-")
    d = json.loads(out)
    assert rc == 0 and d["layout"] == "aicb"
    assert (d["simai"]["pp"], d["simai"]["ga"], d["simai"]["vpp"]) == (2, 16, 20)
    assert d["simai"]["bubble_at_schedule_ns"] == pytest.approx(20 * d["simai"]["bubble_ns"])
    assert d["pipeline_bubble_ns"]["mean_ns"] > 0
    rc, out, _ = run(capsys, aicb)
    assert "SimAI's formula" in out and "pipeline bubble" in out
    # a model-layout file is the whole model once, not one stage over ga microbatches
    rc, out, _ = run(capsys, DOC000, "--json", "-")
    assert "simai" not in json.loads(out)


def test_the_stage_table_in_the_one_table_style(capsys):
    rc, out, _ = run(capsys, DOC000)
    lines = out.splitlines()
    start = lines.index(next(line for line in lines if line.startswith("stage  ")))
    assert rc == 0
    assert lines[start:start + 6] == [
        "stage  layers       busy       idle   bubble  bubble(own)  warm/steady/cool  peak mb  "
        "  peak mem       sent   received",
        "─" * 118,
        "    0  0-1     48.000 ms  18.368 ms  27.68 %      27.68 %             3/5/3        4  "
        "136.00 MiB   8.00 MiB   8.00 MiB",
        "    1  2-3     48.000 ms  18.368 ms  27.68 %      20.43 %             2/6/2        3  "
        "102.00 MiB  16.00 MiB  16.00 MiB",
        "    2  4-5     48.000 ms  18.368 ms  27.68 %      11.56 %             1/7/1        2  "
        " 68.00 MiB  16.00 MiB  16.00 MiB",
        "    3  6-7     48.000 ms  18.368 ms  27.68 %       0.48 %             0/8/0        1  "
        " 34.00 MiB   8.00 MiB   8.00 MiB",
    ]
