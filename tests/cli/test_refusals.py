"""Every command refuses what it cannot do in one line, exit 2, before doing the work (issue 26):
special and binary files, numbers YAML reads as text, header counts that would make the parse
unbounded, sizes above each command's budget, output paths that cannot be written, a folder
another run is writing, and the fuzzer's reproducers. How long a refusal takes is measured by
benchmarks/bench_fuzz.py; here the exact line and the exit code."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from simulator.cli.main import main

ROOT = Path(__file__).resolve().parents[2]
GPT = str(ROOT / "workloads" / "gpt-24l.txt")
TINY = str(ROOT / "tests" / "data" / "tiny_model.txt")


def _refused(capsys, args) -> str:
    """The one line pipesim printed, after checking it refused with exit 2 and printed nothing
    else."""
    assert main(args) == 2
    captured = capsys.readouterr()
    lines = captured.err.splitlines()
    assert len(lines) == 1, captured.err
    assert lines[0].startswith("pipesim: error: ")
    return lines[0][len("pipesim: error: "):]


# -- one reader for every input file -------------------------------------------------------

@pytest.fixture
def fifo(tmp_path) -> str:
    path = tmp_path / "fifo"
    os.mkfifo(path)
    return str(path)


def test_a_fifo_is_refused_before_it_is_opened_as_any_input(capsys, fifo):
    assert _refused(capsys, ["run", fifo]) == (
        f"{fifo}: file: expected a regular workload file, found 'a FIFO (named pipe)'")
    assert _refused(capsys, ["run", GPT, "--system", fifo]) == (
        f"--system: cannot read {fifo}: is a FIFO (named pipe), not a regular file")
    assert _refused(capsys, ["run", GPT, "--calibration", fifo]) == (
        f"--calibration: cannot read {fifo}: is a FIFO (named pipe), not a regular file")
    assert _refused(capsys, ["schedule", "auto", "--pp", "2", "-m", "2", "--stage-costs",
                             fifo]) == (
        f"--stage-costs: cannot read {fifo}: is a FIFO (named pipe), not a regular file")
    assert _refused(capsys, ["verify", "--schedule-file", fifo]) == (
        f"{fifo}: cannot read: is a FIFO (named pipe), not a regular file")


def test_dev_zero_is_refused_not_read_until_memory_runs_out(capsys, tmp_path):
    assert _refused(capsys, ["run", "/dev/zero"]) == (
        "/dev/zero: file: expected a regular workload file, found 'a character device'")
    assert _refused(capsys, ["run", GPT, "--system", "/dev/zero"]) == (
        "--system: cannot read /dev/zero: is a character device, not a regular file")
    assert _refused(capsys, ["sweep", "/dev/zero", "--out", str(tmp_path / "o")]) == (
        "/dev/zero: cannot read the sweep spec: is a character device, not a regular file")


def test_a_binary_yaml_is_one_line_at_its_first_bad_byte(capsys, tmp_path):
    f = tmp_path / "b.yaml"
    f.write_bytes(b"a:\n  \xff\xfe\x00")
    want = f"{f}:2:3: not UTF-8 text (byte 0xff); expected a YAML file"
    assert _refused(capsys, ["run", GPT, "--calibration", str(f)]) == want
    assert _refused(capsys, ["run", GPT, "--system", str(f)]) == want
    assert _refused(capsys, ["sweep", str(f), "--out", str(tmp_path / "o")]) == want
    assert _refused(capsys, ["schedule", "auto", "--pp", "2", "-m", "2", "--stage-costs",
                             str(f)]) == want


def test_a_file_above_its_kinds_size_limit_is_refused_unread(capsys, tmp_path, monkeypatch):
    import simulator.yaml_file as yaml_file

    monkeypatch.setattr(yaml_file, "MAX_YAML_BYTES", 1000)
    f = tmp_path / "big.yaml"
    f.write_text("a: 1\n" * 300)
    assert _refused(capsys, ["run", GPT, "--system", str(f)]) == (
        f"--system: cannot read {f}: 1,500 bytes, above the limit of 1,000 bytes for this kind "
        "of file")


@pytest.mark.parametrize("written, fix", [("1e308", "1.0e+308"), ("1.0e308", "1.0e+308"),
                                          ("-2E-3", "-2.0E-3"), (".5e3", "0.5e+3")])
def test_a_number_yaml_reads_as_text_says_so_at_its_line(capsys, tmp_path, written, fix):
    f = tmp_path / "costs.yaml"
    f.write_text(f"f: [1, 1]\ni: [1, {written}]\nw: [1, 1]\n")
    fix = fix.replace("E", "e")
    assert _refused(capsys, ["schedule", "auto", "--pp", "2", "-m", "2", "--stage-costs",
                             str(f)]) == (
        f"{f}:2:8: YAML reads {written} as text, not a number; write {fix} (or quote it if "
        "it is text)")


def test_a_quoted_number_like_text_is_text(tmp_path):
    from simulator.yaml_file import read_yaml

    f = tmp_path / "a.yaml"
    f.write_text("name: '1e3'\nx: 1.0e+3\n")
    assert read_yaml(f, "x") == {"name": "1e3", "x": 1000.0}


def test_numbers_beyond_a_float_are_refused_at_their_line(capsys, tmp_path):
    f = tmp_path / "costs.yaml"
    f.write_text("f: [1, " + "1" + "0" * 400 + "]\ni: [1, 1]\nw: [1, 1]\n")
    assert _refused(capsys, ["schedule", "auto", "--pp", "2", "-m", "2", "--stage-costs",
                             str(f)]) == (
        f"{f}:1:8: a 401-digit integer is beyond the largest number pipesim takes "
        "(1.79769e+308)")
    f.write_text("comm: 1.0e+400\n")
    assert _refused(capsys, ["run", GPT, "--calibration", str(f)]) == (
        f"{f}:1:7: 1.0e+400 is beyond the largest number pipesim takes (1.79769e+308)")


def test_yaml_nested_too_deeply_is_one_line(capsys, tmp_path):
    f = tmp_path / "deep.yaml"
    f.write_text("a: " + "[" * 100_000 + "]" * 100_000 + "\n")
    line = _refused(capsys, ["run", GPT, "--system", str(f)])
    assert line.startswith(f"{f}")
    assert "invalid YAML" in line


# -- header counts -------------------------------------------------------------------------

def test_an_aicb_header_pp_that_would_build_millions_of_rows_is_refused_where_read(
        capsys, tmp_path):
    rows = ["embedding_layer\t-1\t10\tNONE\t0\t10\tNONE\t0\t10\tNONE\t0\t10",
            "attention_column\t-1\t10\tNONE\t0\t10\tNONE\t0\t10\tNONE\t0\t10",
            "mlp_column\t-1\t10\tNONE\t0\t10\tNONE\t0\t10\tNONE\t0\t10"] * 2
    f = tmp_path / "w.txt"
    f.write_text("HYBRID_TRANSFORMER_FWD_IN_BCKWD model_parallel_NPU_group: 1 pp: 1000000 "
                 "vpp: 1 ga: 2 all_gpus: 1000000 pp_comm: 8\n6\n" + "\n".join(rows) + "\n")
    want = (f"{f}:1: pp: expected at most 99,999 stages for this stage trace (its block has 2 "
            "layer row(s); the model is pp copies of them, at most 200,000 rows), found "
            "'1000000'")
    assert _refused(capsys, ["run", str(f), "--pp", "2"]) == want
    assert _refused(capsys, ["inspect", str(f)]) == want


# -- one size budget, every command --------------------------------------------------------

def test_schedule_refuses_more_actions_than_its_budget(capsys):
    assert _refused(capsys, ["schedule", "1f1b", "--pp", "100000", "-m", "100000"]) == (
        "--max-actions: 1f1b with pp 100000, vpp 1, 100000 microbatches has up to "
        "20,000,000,000 actions, above the limit of 700,000 (about 10 s to build); pass "
        "--max-actions 20000000000 (or 0 for no limit) to run it anyway")
    assert _refused(capsys, ["schedule", "1f1b", "--pp", "4", "-m", "8", "--max-actions",
                             "60"]).startswith("--max-actions: 1f1b with pp 4, vpp 1, 8 "
                                               "microbatches has up to 64 actions")
    assert main(["schedule", "1f1b", "--pp", "4", "-m", "8", "--max-actions", "64"]) == 0


def test_schedule_counts_its_ranks_where_they_cost_more_than_the_actions(capsys):
    # the fuzz's slowest accepted schedule: 600,000 actions on 100,000 ranks took 8-10 s of CPU
    assert _refused(capsys, ["schedule", "interleaved-1f1b", "--pp", "100000", "-m", "1",
                             "--vpp", "3"]) == (
        "--max-actions: interleaved-1f1b with pp 100000, vpp 3, 1 microbatches has up to "
        "600,000 actions, and building it costs as much as 1,600,000 (each of its 100,000 ranks "
        "costs as much as 16 actions), above the limit of 700,000 (about 10 s to build); pass "
        "--max-actions 1600000 (or 0 for no limit) to run it anyway")


def test_verify_counts_actions_times_mlp_layers(capsys):
    assert _refused(capsys, ["verify", "1f1b", "--pp", "4", "-m", "10000000"]) == (
        "--max-actions: 1f1b with pp 4, vpp 1, 10000000 microbatches and 3 MLP layer(s) per "
        "chunk runs up to 240,000,000 actions x layers, above the limit of 50,000 (about "
        "10 s); pass --max-actions 240000000 (or 0 for no limit) to run it anyway")
    assert _refused(capsys, ["verify", "1f1b", "--pp", "2", "-m", "2", "--layers",
                             "1000000000"]) == (
        "--max-actions: 1f1b with pp 2, vpp 1, 2 microbatches and 500000000 MLP layer(s) per "
        "chunk runs up to 4,000,000,000 actions x layers, above the limit of 50,000 (about "
        "10 s); pass --max-actions 4000000000 (or 0 for no limit) to run it anyway")


def test_auto_refuses_a_synthesis_above_its_budget_from_the_sizes_alone(capsys):
    # its first start alone (a greedy start and the fusing step: 2,100,000 evaluations at
    # pp 4, M 10000, unit costs) above the limit: refused before any of it, with the whole
    # search's figure (at the default 30,000,000 it runs: that start meets the lower bound)
    assert _refused(capsys, ["schedule", "auto", "--pp", "4", "-m", "10000", "-O",
                             "max_evaluations=2000000"]) == (
        "-O max_evaluations: synthesizing auto with pp 4, vpp 1, 10000 microbatches takes "
        "about 348,854,000 action evaluations, above the limit of 2,000,000 (about 0.67 s); "
        "pass -O max_evaluations=348854000 (or 0 for no limit) to synthesize it anyway")
    # a limit below its first start (a greedy start and the fusing step: 816) is refused from
    # the sizes; at 816 the first start meets the lower bound and ends the search
    assert _refused(capsys, ["schedule", "auto", "--pp", "4", "-m", "8", "-O",
                             "max_evaluations=815"]).startswith(
        "-O max_evaluations: synthesizing auto with pp 4, vpp 1, 8 microbatches takes about "
        "354,016 action evaluations, above the limit of 815")
    assert main(["schedule", "auto", "--pp", "4", "-m", "8", "-O",
                 "max_evaluations=816"]) == 0


def test_the_synthesis_estimate_grows_with_the_work():
    from simulator.schedules.synthesis.search import synthesis_work

    from simulator.schedules.synthesis.search import _seed_work

    seeds = _seed_work(4, 8, 1)   # building the hand-made starts, in engine actions
    assert seeds == 832   # 1f1b, gpipe, interleaved, looped-bfs 64 each; hanayo 256; zb-h1/h2 96; 2bw 128
    # every greedy policy (54) at 9.5 evaluations per action, 3 x 2000 moves at 1.2, fusing
    # 1.0 x 8 microbatches, 4 evaluations per engine action of the hand-made starts
    assert synthesis_work(4, 8, 1, 2000) == round(96 * (54 * 9.5 + 3 * 2000 * 1.2 + 8)) + 4 * seeds
    assert synthesis_work(4, 8, 1, 0) == round(96 * (54 * 9.5 + 8)) + 4 * seeds
    assert synthesis_work(4, 8, 2, 200) == round(192 * (96 * 9.5 + 3 * 200 * 1.2 + 8)) + \
        4 * _seed_work(4, 8, 2)
    # unit costs: 6.5 per start, 0.55 per move, 0.25 x M fusing
    assert synthesis_work(4, 8, 1, 2000, unit_costs=True) == \
        round(96 * (54 * 6.5 + 3 * 2000 * 0.55 + 0.25 * 8)) + 4 * seeds
    # big problems get fewer moves: P = 32, M = 256 (24,576 actions) 65 a start, within the
    # default budget with stage costs and without; twice the microbatches is not
    assert synthesis_work(32, 256, 1, 2000) == round(24576 * (54 * 9.5 + 3 * 65 * 1.2 + 256)) \
        + 4 * _seed_work(32, 256, 1) < 30_000_000
    assert synthesis_work(32, 256, 1, 2000, unit_costs=True) < 30_000_000 < \
        synthesis_work(32, 512, 1, 2000)


def test_plan_caps_the_world_size_and_the_model_flags_layers(capsys):
    assert _refused(capsys, ["plan", GPT, "--gpus", str(2**40)]) == (
        "--gpus: 1,099,511,627,776 GPUs, above the largest world size a plan searches "
        "(131,072)")
    assert _refused(capsys, ["plan", "--gpus", "8", "--model", "gpt", "--layers", "1000000000",
                             "--hidden", "1024", "--heads", "16", "--seq", "1024",
                             "--global-batch", "8"]) == (
        "--layers: 1,000,000,000 layers, above the most pipesim generates (10,000; real models "
        "have a few hundred)")


def test_plan_refuses_more_work_over_all_candidates_than_max_work(capsys):
    # found by the fuzz: each candidate within the per-candidate budget, their sum ~8 s
    # (12 us per action); without pruning every screen is sure, counted from the sizes alone
    # before any screen runs (with pruning the plan runs, each later round counted as it comes)
    assert _refused(capsys, ["plan", GPT, "--gpus", "8", "--global-batch", "1000",
                             "--no-prune"]) == (
        f"--max-work: plan of {GPT} on 8 GPUs screens 59 candidate(s) of 631,500 actions in "
        "all, synthesizes auto on its 2 cheapest pipeline degree(s) (at least 209,764) and "
        "confirms the best 3 x 1 iteration(s) (up to 144,000), 985,264 actions, above the "
        "limit of 700,000 (about 8 s); pass --max-work 985264 (or 0 for no limit), or a "
        "lower --max-actions to list the largest candidates infeasible")
    # confirming runs count as iterations: 1f1b at pp 1, 8 microbatches is 16 actions
    assert _refused(capsys, ["plan", TINY, "--gpus", "2", "-s", "1f1b", "--iterations", "5",
                             "--max-work", "5939"]) == (
        f"--max-work: plan of {TINY} on 2 GPUs screens 1 candidate(s) of 16 actions in all, "
        "synthesizes auto on its 2 cheapest pipeline degree(s) (at least 5,844) and confirms "
        "the best 3 x 5 iteration(s) (up to 80), 5,940 actions, above the limit of 5,939 "
        "(about 0.07 s); pass --max-work 5940 (or 0 for no limit), or a lower --max-actions to "
        "list the largest candidates infeasible")
    assert main(["plan", TINY, "--gpus", "2", "-s", "1f1b", "--iterations", "5", "--max-work",
                 "5940", "-j", "1", "--json", "-"]) == 0
    capsys.readouterr()
    # confirming under jitter for a million iterations ran without end
    assert _refused(capsys, ["plan", TINY, "--gpus", "2", "--jitter", "0.1", "--iterations",
                             "1000000"]) == (
        # 17: vpp 4 at pp 1 is more chunks than the file's 2 layers
        f"--max-work: plan of {TINY} on 2 GPUs screens 17 candidate(s) of 1,360 actions in all, "
        "synthesizes auto on its 2 cheapest pipeline degree(s) (at least 5,844) and confirms "
        "the best 3 x 1000000 iteration(s) (up to 896,000,000), 896,007,204 actions, above the "
        "limit of 700,000 (about 8 s); pass --max-work 896007204 (or 0 for no limit), or a "
        "lower --max-actions to list the largest candidates infeasible")


def test_plan_counts_the_syntheses_of_auto_in_max_work(capsys, tmp_path):
    """A TP 1 copy of gpt-24l on 7 GPUs has one shape, pp 7: its screens are 65,184 actions,
    auto's syntheses there at least 252,992 more (each a worst case: no start at the bound)."""
    wl = tmp_path / "tp1.txt"
    wl.write_text(Path(GPT).read_text().replace("model_parallel_NPU_group: 2",
                                                "model_parallel_NPU_group: 1", 1))
    assert _refused(capsys, ["plan", str(wl), "--gpus", "7", "--global-batch", "48",
                             "--max-work", "100000"]) == (
        # 17: vpp 4 at pp 7 is 28 chunks, more than the file's 24 layers
        f"--max-work: plan of {wl} on 7 GPUs screens 17 candidate(s) of 65,184 actions in all, "
        "synthesizes auto on its 2 cheapest pipeline degree(s) (at least 252,992) and "
        "confirms the best 3 x 1 iteration(s) (up to 45,696), 363,872 actions, above the "
        "limit of 100,000 (about 1 s); pass --max-work 363872 (or 0 for no limit), or a "
        "lower --max-actions to list the largest candidates infeasible")


def test_divisors_in_order_in_square_root_time():
    from simulator.planning.plan import divisors

    for n in range(1, 500):
        assert divisors(n) == [d for d in range(1, n + 1) if n % d == 0]
    assert divisors(2**40)[-3:] == [2**38, 2**39, 2**40]   # a loop to N would take minutes


def test_generate_caps_layers_and_the_aicb_unroll(capsys, tmp_path):
    out = str(tmp_path / "w.txt")
    shape = ["--hidden", "1024", "--heads", "16", "--seq", "1024", "--micro-batch", "1"]
    assert _refused(capsys, ["generate", "--model", "gpt", "--layers", "1000000000", *shape,
                             "-o", out]) == (
        "--layers: 1,000,000,000 layers, above the most pipesim generates (10,000; real models "
        "have a few hundred)")
    assert _refused(capsys, ["generate", "--model", "gpt", "--layers", "24", *shape, "--layout",
                             "aicb", "--pp", "2", "--ga", "100000000", "-o", out]) == (
        "--ga: 100,000,000 microbatches x 12 layers per stage unroll into 1,200,000,000 layers "
        "of rows, above the most pipesim generates (10,000)")
    assert not Path(out).exists()


def _spec(tmp_path, n: int) -> Path:
    spec = tmp_path / "s.yaml"
    values = ", ".join(str(i) for i in range(1, n + 1))
    spec.write_text(f"workload: {GPT}\ngrid:\n  microbatches: [{values}]\n"
                    f"  seed: [{values}]\n  jitter: [0.0, 0.1]\n")
    return spec


def test_sweep_counts_its_points_before_expanding_them(capsys, tmp_path):
    spec = _spec(tmp_path, 300)
    assert _refused(capsys, ["sweep", str(spec), "--out", str(tmp_path / "o")]) == (
        f"--max-points: the sweep {spec} has up to 180,000 points (axes of 300 x 300 x 2 "
        "values), above the limit of 100,000; pass --max-points 180000 (or 0 for no limit) to "
        "run it anyway")
    assert _refused(capsys, ["sweep", str(_spec(tmp_path, 2)), "--out", str(tmp_path / "o"),
                             "--max-points", "7"]).startswith(
        "--max-points: the sweep")
    assert not (tmp_path / "o").exists()


def test_a_p2000_run_builds_no_table_over_every_stage_on_every_rank():
    """The engine's per-rank peer table holds the stages the rank's steps name (at P = 2000 a
    table over every stage cost 4.9 GB)."""
    from simulator.engine.program import RankOps
    from simulator.schedules import registry

    sched = registry.generate("1f1b", 64, 4)
    ops = RankOps(sched, 5, (), None, 0, ())
    assert ops._recv == {} and ops._send == {}
    assert ops.recv_of(5, "F")[1:] == (4, 4)      # (data, upstream stage, its rank)
    assert list(ops._recv) == [(5, "F")]


# -- output paths, before the work ---------------------------------------------------------

def test_output_paths_are_checked_before_the_work(capsys, tmp_path):
    afile = tmp_path / "afile"
    afile.write_text("x")
    bad = str(afile / "out.png")
    assert _refused(capsys, ["run", GPT, "--gantt", bad]) == (
        f"--gantt: cannot write {bad}: {afile} is not a folder")
    assert _refused(capsys, ["run", GPT, "--json", str(tmp_path)]) == (
        f"--json: cannot write {tmp_path}: is a folder; expected a file name")
    missing = str(tmp_path / "no" / "t.json")
    assert _refused(capsys, ["run", GPT, "--trace", missing]) == (
        f"--trace: cannot write {missing}: folder {tmp_path / 'no'} does not exist")
    assert _refused(capsys, ["schedule", "1f1b", "--pp", "2", "-m", "2", "--csv", bad]) == (
        f"--csv: cannot write {bad}: {afile} is not a folder")
    assert _refused(capsys, ["plan", TINY, "--gpus", "2", "--plot", bad]) == (
        f"--plot: cannot write {bad}: {afile} is not a folder")
    out = str(afile / "o")
    assert _refused(capsys, ["plan", TINY, "--gpus", "2", "--out", out]) == (
        f"--out: cannot write {out}: {afile} is not a folder")
    assert _refused(capsys, ["sweep", str(_spec(tmp_path, 2)), "--out", out]) == (
        f"--out: cannot write {out}: {afile} is not a folder")
    cal = str(afile / "c.yaml")
    assert _refused(capsys, ["calibrate", str(tmp_path), "-w", GPT, "-o", cal]) == (
        f"--output: cannot write {cal}: {afile} is not a folder")


def test_a_full_stdout_is_one_line_not_an_internal_error(tmp_path):
    import subprocess
    import sys

    if not Path("/dev/full").exists():
        pytest.skip("no /dev/full on this system")
    with open("/dev/full", "w") as full:
        proc = subprocess.run([sys.executable, "-m", "simulator", "schedule", "1f1b", "--pp",
                               "2", "-m", "2"], stdout=full, stderr=subprocess.PIPE, text=True,
                              cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert proc.returncode == 2
    assert proc.stderr == "pipesim: error: cannot write the output: No space left on device\n"


def test_a_second_run_on_an_output_folder_in_use_is_refused(capsys, tmp_path):
    from simulator.cli.outputs import out_dir_lock

    out = tmp_path / "o"
    with out_dir_lock(out, "--out"):
        line = _refused(capsys, ["sweep", str(_spec(tmp_path, 2)), "--out", str(out)])
        assert line == (f"--out: {out} is being written by another pipesim run (pid "
                        f"{os.getpid()}); wait for it to finish or choose another folder")
        line = _refused(capsys, ["plan", TINY, "--gpus", "2", "--out", str(out)])
        assert line.startswith(f"--out: {out} is being written by another pipesim run")
    with out_dir_lock(out, "--out"):   # released when the first is done
        pass


# -- the smaller things ----------------------------------------------------------------------

def test_schedule_list_names_auto(capsys):
    assert main(["schedule", "--list"]) == 0
    assert any(line.startswith("auto ") for line in capsys.readouterr().out.splitlines())


def test_a_p1_run_says_its_bubble_is_the_dp_tail(capsys, tmp_path):
    f = tmp_path / "w.txt"
    f.write_text("HYBRID_TRANSFORMER_FWD_IN_BCKWD model_parallel_NPU_group: 1 ep: 1 pp: 1 vpp: 1 "
                 "ga: 2 all_gpus: 8 checkpoints: 0 checkpoint_initiates: 0 pp_comm: 0\n2\n"
                 "l1 -1 0 NONE 0 0 NONE 0 0 ALLREDUCE 1048576 0\n"
                 "l2 -1 0 NONE 0 0 NONE 0 0 ALLREDUCE 1048576 0\n")
    assert main(["run", str(f)]) == 0
    out = capsys.readouterr().out.splitlines()
    at = next(i for i, line in enumerate(out) if line.startswith("  bubble ratio"))
    assert out[at].startswith("  bubble ratio        100.00 %")
    assert out[at + 1] == ("    of which          100.00 % is the DP/optimizer tail after the "
                           "last compute, 0.00 % the pipeline bubble")
    assert out[at + 2].startswith("  pipeline bubble     0 ns per rank")


def test_no_tail_line_when_the_pipeline_bubble_is_most_of_it(capsys):
    assert main(["run", GPT]) == 0
    assert "of which" not in capsys.readouterr().out


# -- the fuzzer's reproducers ----------------------------------------------------------------

REPRODUCERS = {
    "hang_aicb_header_pp1000000.txt": (["--pp", "2"], 2),
    "memblowup_aicb_header_pp2e40.txt": (["--pp", "2"], 2),
    "slow_memblowup_P2000_1f1b_96k_actions.txt": (["-s", "1f1b"], 0),
    "slow_memblowup_P1000_looped-bfs_96k_actions.txt": (["-s", "looped-bfs"], 0),
    "hang_pp1000.txt": ([], 2),
    "hang_vpp1000_ga1000_8rows.txt": ([], 2),
    "memblowup_ga_8388608_float.txt": ([], 2),
    "slow_refusal_pp1000_vpp8.txt": ([], 2),
    "hang_aicb_pp_2pow40_looped_bfs.txt": (["-s", "looped-bfs"], 2),
}


def test_every_reproducer_is_covered(fuzz_min_dir):
    files = {p.name for p in fuzz_min_dir.iterdir() if p.name != "README.md"}
    assert files == set(REPRODUCERS) | {"internal_error_binary_yaml.yaml",
                                        "internal_error_costs_int_10e400.yaml"}


@pytest.mark.parametrize("name", sorted(REPRODUCERS))
def test_a_workload_reproducer_is_refused_or_runs(name, fuzz_min_dir, capsys):
    args, code = REPRODUCERS[name]
    if name.startswith("slow_memblowup"):
        args = [*args, "--engine", "evaluator", "--json", os.devnull]
    assert main(["run", str(fuzz_min_dir / name), *args]) == code
    err = capsys.readouterr().err
    if code == 2:
        assert len(err.splitlines()) == 1 and err.startswith("pipesim: error: ")


def test_the_yaml_reproducers_are_refused_in_one_line(fuzz_min_dir, capsys, tmp_path):
    binary = str(fuzz_min_dir / "internal_error_binary_yaml.yaml")
    want = f"{binary}:1:3: not UTF-8 text (byte 0xff); expected a YAML file"
    for args in (["run", GPT, "--calibration", binary], ["run", GPT, "--system", binary],
                 ["sweep", binary, "--out", str(tmp_path / "o")],
                 ["schedule", "auto", "--pp", "4", "-m", "8", "--stage-costs", binary]):
        assert _refused(capsys, args) == want
    costs = str(fuzz_min_dir / "internal_error_costs_int_10e400.yaml")
    assert _refused(capsys, ["schedule", "auto", "--pp", "4", "-m", "8", "--stage-costs",
                             costs]).startswith(f"{costs}:1:8: a 401-digit integer is beyond")


def test_run_counts_the_actions_of_every_iteration(capsys, tmp_path):
    assert _refused(capsys, ["run", GPT, "--iterations", "1000000"]) == (
        "--max-actions: 1f1b with pp 4, vpp 1, 16 microbatches x 1000000 iterations runs up to "
        "128,000,000 actions, above the limit of 700,000 (about 10 s of simulation); pass "
        "--max-actions 128000000 (or 0 for no limit) to run it anyway")
    csv = tmp_path / "s.csv"
    assert main(["schedule", "1f1b", "--pp", "4", "-m", "16", "--csv", str(csv)]) == 0
    capsys.readouterr()
    assert _refused(capsys, ["run", GPT, "--schedule-file", str(csv), "--iterations",
                             "10000"]) == (
        "--max-actions: schedule custom (4 ranks) x 10000 iteration(s) runs 1,280,000 actions, "
        "above the limit of 700,000 (about 10 s of simulation); pass --max-actions 1280000 (or "
        "0 for no limit) to run it anyway")


def test_a_p2p_mode_that_costs_more_per_action_counts_its_actions_more(capsys, tmp_path):
    # the 10,000-case fuzz's one run over 10 s: 576,000 actions on torch's multi-stage runtime
    assert _refused(capsys, ["run", GPT, "-s", "looped-bfs", "--vpp", "3", "-m", "24", "--p2p",
                             "torch", "--iterations", "1000"]) == (
        "--max-actions: looped-bfs with pp 4, vpp 3, 24 microbatches x 1000 iterations runs up "
        "to 576,000 actions, each counted 2x with --p2p torch (1,152,000), above the limit of "
        "700,000 (about 10 s of simulation); pass --max-actions 1152000 (or 0 for no limit) to "
        "run it anyway")
    assert _refused(capsys, ["run", GPT, "-m", "24", "--p2p", "batched", "--iterations",
                             "1000"]).startswith(
        "--max-actions: 1f1b with pp 4, vpp 1, 24 microbatches x 1000 iterations runs up to "
        "192,000 actions, each counted 4x with --p2p batched (768,000), above the limit")
    system = tmp_path / "system.yaml"
    system.write_text("runtime:\n  p2p: blocking\n")   # the mode the system names counts too
    assert "each counted 3x with --p2p blocking (864,000)" in _refused(
        capsys, ["run", GPT, "--system", str(system), "-s", "gpipe", "-m", "24", "--iterations",
                 "1500"])
    csv = tmp_path / "s.csv"
    assert main(["schedule", "1f1b", "--pp", "4", "-m", "16", "--csv", str(csv)]) == 0
    capsys.readouterr()
    assert _refused(capsys, ["run", GPT, "--schedule-file", str(csv), "--p2p", "torch-single",
                             "--iterations", "5000"]) == (
        "--max-actions: schedule custom (4 ranks) x 5000 iteration(s) runs 640,000 actions, "
        "each counted 2x with --p2p torch-single (1,280,000), above the limit of 700,000 (about "
        "10 s of simulation); pass --max-actions 1280000 (or 0 for no limit) to run it anyway")


def test_the_schedules_of_one_compare_share_one_budget(capsys):
    # the 7,819-case fuzz's one run over 10 s: three schedules within the budget one by one
    assert _refused(capsys, ["compare", GPT, "-s", "v-min,zb-h2,zb-h1", "--pp", "2", "-m",
                             "100000"]) == (
        "--max-actions: compare runs 2 schedules of up to 1,200,000 actions in all (zb-h2 "
        "600,000, zb-h1 600,000), above the limit of 700,000 (about 10 s of simulation); pass "
        "--max-actions 1200000 (or 0 for no limit) to run them anyway")
    # one over the budget by itself is its own row, and costs the others nothing
    assert main(["compare", GPT, "-s", "v-min,1f1b", "--pp", "2", "-m", "1000", "--max-actions",
                 "5000", "--json", "-"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert rows[0]["error"].startswith("--max-actions: v-min with pp 2, vpp 2, 1000 microbatches")
    assert rows[1]["makespan_ns"] > 0


def test_chakra_collectives_is_checked_before_the_run(capsys):
    assert _refused(capsys, ["run", GPT, "--chakra-collectives", "nodes"]) == (
        "--chakra-collectives: needs --chakra DIR (where the traces go)")
    assert _refused(capsys, ["run", GPT, "--chakra", "x", "--chakra-collectives", "coll"]) == (
        "--chakra-collectives: expected one of durations, nodes, got 'coll'")


def test_a_generator_that_grows_faster_than_its_actions_is_counted_at_its_cost(capsys):
    assert _refused(capsys, ["schedule", "zb-v", "--pp", "1000", "-m", "8"]) == (
        "--max-actions: zb-v with pp 1000, vpp 2, 8 microbatches has up to 48,000 actions, and "
        "building it costs as much as 11,994,000 (its generator grows faster than its actions), "
        "above the limit of 700,000 (about 10 s to build); pass --max-actions 11994000 (or 0 "
        "for no limit) to run it anyway")
    line = _refused(capsys, ["run", GPT, "-s", "v-half", "--pp", "4", "-m", "20000"])
    assert line.startswith("--max-actions: v-half with pp 4, vpp 2, 20000 microbatches runs up "
                           "to 480,000 actions, and building it costs as much as 4,320,000")


def test_integers_past_pythons_4300_digit_limit_are_refused_as_written(capsys, tmp_path):
    costs = tmp_path / "c.yaml"
    costs.write_text("f: [1, " + "9" * 5000 + "]\n")
    assert _refused(capsys, ["schedule", "auto", "--pp", "2", "-m", "2", "--stage-costs",
                             str(costs)]) == (
        f"{costs}:1:8: a 5000-digit integer is beyond the largest number pipesim takes "
        "(1.79769e+308)")
    lines = Path(GPT).read_text().split("\n")
    lines[0] = lines[0].replace("pp: 4", "pp: " + "9" * 5000)
    w = tmp_path / "w.txt"
    w.write_text("\n".join(lines))
    assert _refused(capsys, ["run", str(w)]) == (
        f"{w}:1:71: pp: expected an integer >= 1 and < 2^63 after 'pp:', found "
        "'9999999999999999999999999999999999999...'")


def test_drawing_a_run_counts_against_the_budget(capsys, tmp_path):
    """Found by the fuzz: a 400,000-action GPipe drawn as a Gantt chart, and a trace of 1000
    iterations, each took over 10 s after the run itself; 200,000 actions of 25 layers each
    traced took 144 s and 11 GB. The bars, slices and layers they draw are counted up front."""
    png, trace = str(tmp_path / "g.png"), str(tmp_path / "t.json")
    assert _refused(capsys, ["run", GPT, "--pp", "8", "-m", "8000", "-s", "gpipe",
                             "--gantt", png]) == (
        "--max-actions: gpipe with pp 8, vpp 1, 8000 microbatches runs up to 128,000 actions, "
        "each counted 8x (--p2p async 1, --gantt 7: 1,024,000), above the limit of 700,000 "
        "(about 10 s of simulation); pass --max-actions 1024000 (or 0 for no limit) to run it "
        "anyway")
    # a trace draws each action's layers: 50 rows over 2 stages, 25 a forward or backward
    assert _refused(capsys, ["run", GPT, "--pp", "2", "-m", "50000", "-s", "gpipe", "--p2p",
                             "torch", "--trace", trace]) == (
        "--max-actions: gpipe with pp 2, vpp 1, 50000 microbatches runs up to 200,000 actions, "
        "each counted 64x (--p2p torch 2, --trace 62 (12 and 2 a layer): 12,800,000), above "
        "the limit of 700,000 (about 10 s of simulation); pass --max-actions 12800000 (or 0 "
        "for no limit) to run it anyway")
    assert not (tmp_path / "g.png").exists() and not (tmp_path / "t.json").exists()
    # the same runs undrawn stay within the budget, and a compare draws every schedule
    assert main(["run", GPT, "--pp", "8", "-m", "8000", "-s", "gpipe", "--json", "-"]) == 0
    capsys.readouterr()
    assert _refused(capsys, ["compare", GPT, "-s", "1f1b,gpipe", "--pp", "8", "-m", "4000",
                             "--gantt", png]) == (
        "--max-actions: compare runs 2 schedules of up to 1,024,000 actions in all (1f1b "
        "512,000, gpipe 512,000), above the limit of 700,000 (about 10 s of simulation); pass "
        "--max-actions 1024000 (or 0 for no limit) to run them anyway")


def test_hanayo_counts_what_its_builder_costs_per_wave(capsys):
    """Found by the fuzz: 1000 waves on 24 ranks, 192,000 actions, took 16 s to build (each
    walk of its order visited every rank at every step); its four walks are counted."""
    assert _refused(capsys, ["schedule", "hanayo", "--pp", "24", "-m", "4", "--vpp",
                             "1000"]) == (
        "--max-actions: hanayo with pp 24, vpp 1000, 4 microbatches has up to 192,000 actions, "
        "and building it costs as much as 768,000 (its generator grows faster than its "
        "actions), above the limit of 700,000 (about 10 s to build); pass --max-actions "
        "768000 (or 0 for no limit) to run it anyway")


def test_verify_auto_searches_as_schedule_auto_does(capsys):
    """Found by the fuzz (9.6 s): verify handed auto its minibatch count as the search's
    iterations (4 moves), so the synthesis budget counted a smaller search than the fusing step
    really made; only 2BW runs minibatches without a flush."""
    want = ("-O max_evaluations: synthesizing auto with pp 1, vpp 2, 5000 microbatches takes "
            "about 61,723,500 action evaluations, above the limit of 500,000 (about 0.17 s); "
            "pass -O max_evaluations=61723500 (or 0 for no limit) to synthesize it anyway")
    assert _refused(capsys, ["schedule", "auto", "--pp", "1", "-m", "5000", "--vpp", "2", "-O",
                             "max_evaluations=500000"]) == want
    assert _refused(capsys, ["verify", "auto", "--pp", "2", "-m", "4", "--iterations",
                             "3"]) == (
        "--iterations: auto flushes every iteration; verify runs one iteration")


@pytest.mark.parametrize("args", [[], ["--pp", "2"], ["-s", "looped-bfs"],
                                  ["-s", "looped-bfs", "--pp", "2"], ["-s", "gpipe", "--pp", "64"]])
def test_a_stage_trace_of_2pow40_stages_is_refused_in_under_a_second(args, fuzz_min_dir,
                                                                      capsys):
    """The layout detection builds the model from the file's rows: a block without transformer
    layers has nothing to copy, whatever the header's pp: 2^40 (it looped 2^40 times)."""
    import time

    path = fuzz_min_dir / "hang_aicb_pp_2pow40_looped_bfs.txt"
    start = time.perf_counter()
    line = _refused(capsys, ["run", str(path), *args])
    assert time.perf_counter() - start < 1.0
    chunks = {(): 2**40, ("--pp", "2"): 2, ("-s", "looped-bfs"): 2**41,
              ("-s", "looped-bfs", "--pp", "2"): 4, ("-s", "gpipe", "--pp", "64"): 64}
    assert line == (f"{path}: cannot split the 0 transformer layer(s) of the AICB model "
                    f"(1099511627776 stage(s) x 0 layer(s) recovered from the block) into "
                    f"{chunks[tuple(args)]} pipeline chunks (pp x vpp); every chunk needs at "
                    "least one layer")


def test_a_model_too_large_for_the_format_is_refused_naming_the_shape(capsys, tmp_path):
    """A sequence of 10^11 tokens prices an attention row above 2^63 ns: refused as the shape,
    not as a bad line of the workload it would have written (a fuzzer case)."""
    for command in (["run"], ["generate", "-o", str(tmp_path / "w.txt")]):
        assert _refused(capsys, [*command, "--model", "gpt", "--layers", "2", "--hidden",
                                 "1024", "--heads", "8", "--seq", "99999999999",
                                 "--micro-batch", "1", "--gpu", "a100"]) == (
            "the model is too large to price: its attention_column row comes to 2.6e+20 ns or "
            "bytes, above the format's 2^63 (expected a smaller --hidden, --vocab, --ffn, "
            "--seq or --micro-batch)")
