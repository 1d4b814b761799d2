"""`pipesim sweep` and `pipesim plot` from the command line, and the progress bar."""

from __future__ import annotations

import io
import re

import pytest

from simulator.cli.main import main

from .helpers import workload_text, write

SPEC = """\
workload: w.txt
grid:
  schedule: [1f1b, dualpipe-v]
  pp: [2, 4]
exclude:
  - {schedule: dualpipe-v, pp: 8}
"""


@pytest.fixture
def spec(tmp_path):
    write(tmp_path / "w.txt", workload_text(8, pp_comm=1 << 20))
    return write(tmp_path / "sweep.yaml", SPEC)


def test_sweep_reports_counts_files_failures_and_notes(spec, tmp_path, capsys):
    out = tmp_path / "out"
    assert main(["sweep", str(spec), "--out", str(out), "-j", "1"]) == 0
    cap = capsys.readouterr()
    lines = cap.out.splitlines()
    assert re.fullmatch(r"pipesim sweep: 4 of 4 points run \(3 ok, 1 failed\) in \d+\.\d\d s "
                        r"on 1 local worker\(s\)", lines[0])
    assert lines[1:3] == [
        f"  {out / 'results.csv'}",
        "  first failure: point 3 (schedule=dualpipe-v, pp=4): --microbatches: dualpipe-v needs "
        "at least as many microbatches as stages (2 x pp = 8), got 4"]
    # the summary: the points that ran, fastest first, then the failed one with its error
    assert lines[3:] == [
        "",
        "point  schedule    pp  iteration time   bubble  peak memory  status",
        "─" * 160,
        "    0  1f1b         2      160.858 us  70.16 %   136.00 MiB  ok",
        "    2  dualpipe-v   2      249.715 us  80.78 %   170.00 MiB  ok",
        "    1  1f1b         4      271.715 us  91.17 %   136.00 MiB  ok",
        "    3  dualpipe-v   4               -        -            -  error: --microbatches: "
        "dualpipe-v needs at least as many microbatches as stages (2 x pp = 8), got 4"]
    assert cap.err == f"pipesim: note: {spec}: exclude[0] matches no point\n"


def test_sweep_quiet_and_resume(spec, tmp_path, capsys):
    out = tmp_path / "out"
    assert main(["sweep", str(spec), "--out", str(out), "-j", "1", "--quiet"]) == 0
    assert capsys.readouterr().out == ""
    assert main(["sweep", str(spec), "--out", str(out), "-j", "1"]) == 2
    assert capsys.readouterr().err == (f"pipesim: error: --out: {out / 'results.csv'} exists; "
                                       "pass --resume to complete that sweep, or choose another "
                                       "--out\n")
    assert main(["sweep", str(spec), "--out", str(out), "-j", "1", "--resume"]) == 0
    assert "0 of 4 points run (0 ok, 0 failed; 4 were already done)" in capsys.readouterr().out


def test_bad_spec_and_options_are_one_line_errors(tmp_path, spec, capsys):
    bad = write(tmp_path / "bad.yaml", "workload: w.txt\ngrid:\n  pp: [2, x]\n")
    assert main(["sweep", str(bad), "--out", str(tmp_path / "o")]) == 2
    assert capsys.readouterr().err == (f"pipesim: error: {bad}: grid.pp: expected a list of "
                                       "positive integers, found 'x'\n")
    assert main(["sweep", str(spec), "--out", str(tmp_path / "o"), "--address", "h:1"]) == 2
    assert capsys.readouterr().err == ("pipesim: error: --address: only with --executor ray or "
                                       "dask\n")
    assert main(["plot", str(tmp_path / "nothing")]) == 2
    assert capsys.readouterr().err == (
        f"pipesim: error: {tmp_path / 'nothing'}: no results.parquet or results.csv here; run "
        f"`pipesim sweep SPEC --out {tmp_path / 'nothing'}` first\n")


def test_sweep_plot_and_plot_command(tmp_path, capsys):
    write(tmp_path / "w.txt", workload_text(8, pp_comm=1 << 20))
    spec = write(tmp_path / "s.yaml", "workload: w.txt\ngrid:\n  schedule: [gpipe, 1f1b]\n"
                 "  pp: [2, 4]\n  microbatches: [4, 8]\n  system.links.bandwidth_gbps: [10, 100]\n")
    out = tmp_path / "out"
    assert main(["sweep", str(spec), "--out", str(out), "-j", "2", "--plot"]) == 0
    names = ["bubble_vs_microbatches.png", "makespan_vs_pp.png",
             "makespan_vs_links_bandwidth_gbps.png"]
    assert capsys.readouterr().out.splitlines()[-3:] == [f"  {out / n}" for n in names]
    for n in names:
        assert (out / n).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        (out / n).unlink()
    assert main(["plot", str(out)]) == 0
    assert capsys.readouterr().out.splitlines() == [f"  {out / n}" for n in names]
    assert all((out / n).is_file() for n in names)


def test_plot_with_nothing_varying_says_so(tmp_path, capsys):
    write(tmp_path / "w.txt", workload_text(8))
    spec = write(tmp_path / "s.yaml", "workload: w.txt\ngrid:\n  schedule: [gpipe, 1f1b]\n")
    assert main(["sweep", str(spec), "--out", str(tmp_path / "o"), "-j", "1", "-q"]) == 0
    assert main(["plot", str(tmp_path / "o")]) == 0
    assert capsys.readouterr().out == ("  no plots: the table varies none of microbatches, pp, "
                                       "link bandwidth\n")
    assert sorted(p.name for p in (tmp_path / "o").iterdir()) == ["results.csv"]


def test_progress_bar_counts_done_and_failed():
    from rich.console import Console

    from simulator.sweep.progress import RichReporter

    buf = io.StringIO()
    console = Console(file=buf, force_terminal=True, width=160, color_system=None)
    rep = RichReporter("demo.yaml", console=console)
    rep.start(3, 2, 4, "local")
    for ok in (True, False, True):
        rep.advance(ok)
    rep.close()
    text = buf.getvalue()
    assert "demo.yaml (4 local, 2 done before)" in text
    assert "3/3" in text and "1 failed" in text and "pts/s" in text
    quiet = RichReporter("demo.yaml", enabled=False, console=console)
    quiet.start(3, 0, 1, "local")
    quiet.advance(True)
    quiet.close()
    assert buf.getvalue() == text


def test_strict_sweep_fails_points_with_warnings_and_keeps_the_warnings_column(tmp_path, capsys):
    import json

    import pandas as pd

    write(tmp_path / "w.txt", workload_text(8, pp_comm=0))     # pp_comm 0: transfers free
    spec = write(tmp_path / "s.yaml", "workload: w.txt\ngrid:\n  pp: [1, 2]\n")
    out = tmp_path / "lax"
    assert main(["sweep", str(spec), "--out", str(out), "-j", "1", "-q"]) == 0
    table = pd.read_csv(out / "results.csv")
    assert list(table["status"]) == ["ok", "ok"]
    assert [[w["code"] for w in json.loads(x)] for x in table["warnings"]] == [
        ["memory_unknown"], ["p2p_free", "memory_unknown"]]
    out = tmp_path / "strict"
    assert main(["sweep", str(spec), "--out", str(out), "-j", "1", "-q", "--strict"]) == 0
    table = pd.read_csv(out / "results.csv")
    assert list(table["status"]) == ["error", "error"]
    assert table["error"][1].startswith("--strict: ") and table["error"][1].endswith(
        "[p2p_free]")


def test_a_sweep_varies_every_run_option_p2p_and_jitter_included(tmp_path, capsys):
    """Every option that changes a number is a sweep key (simulator.run_options): the table's
    numbers equal `pipesim run` with the same flags."""
    import pandas as pd

    from simulator import simulate

    w = write(tmp_path / "w.txt", workload_text(8, pp_comm=1 << 20))
    spec = write(tmp_path / "s.yaml", "workload: w.txt\niterations: 3\nseed: 7\n"
                 "slow_rank: '1:1.5'\ngrid:\n  p2p: [async, batched]\n  jitter: [0.0, 0.2]\n")
    out = tmp_path / "out"
    assert main(["sweep", str(spec), "--out", str(out), "-j", "1", "-q"]) == 0
    table = pd.read_csv(out / "results.csv")
    assert list(table["status"]) == ["ok"] * 4
    assert list(zip(table["p2p"], table["jitter"])) == [
        ("async", 0.0), ("async", 0.2), ("batched", 0.0), ("batched", 0.2)]
    for row in table.itertuples():
        r = simulate(w, p2p=row.p2p, jitter=row.jitter, seed=7, iterations=3,
                     slow_ranks={1: 1.5})
        assert row.makespan_ns == r.makespan_ns and row.p2p_mode == row.p2p
    assert table["makespan_ns"][0] != table["makespan_ns"][1]      # jitter changes it
