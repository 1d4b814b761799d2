"""`pipesim run` read without click: the same keyword arguments as click's reading, or None
(click reads the line) for anything the plain reader does not take on."""

from __future__ import annotations

from pathlib import Path

import pytest

from simulator.cli.commands.run import command
from simulator.cli.run_impl import _table, parse_run_args

REPO = Path(__file__).resolve().parents[2]
DOC000 = str(REPO / "workloads" / "doc000-1f1b-test.txt")
SYSTEM = str(REPO / "configs" / "system" / "default.yaml")


def click_reading(args: list[str]) -> dict:
    ctx = command.make_context("run", list(args))
    return dict(ctx.params)


def test_every_option_of_the_click_command_is_in_the_plain_reader():
    """Both readers come from RUN_ARGS: click's command and the plain reader's flag table name
    the same options under the same flags."""
    theirs = {p.name: sorted(p.opts + p.secondary_opts) for p in command.params
              if p.expose_value}
    ours: dict[str, list] = {}
    for flag, (dest, _, _) in _table()[0].items():
        ours.setdefault(dest, []).append(flag)
    ours = {dest: sorted(flags) for dest, flags in ours.items()}
    ours["workload"] = ["workload"]
    assert ours == theirs
    assert "--pp" in theirs["pp"] and theirs["schedule"] == ["--schedule", "-s"]


@pytest.mark.parametrize("args", [
    [DOC000],
    [DOC000, "--json", "-"],
    [DOC000, "--json"],                          # bare: stdout
    ["--json", "--system", SYSTEM, DOC000],     # bare before another option
    ["--json", "-", DOC000],
    [DOC000, "--json=out.json", "--trace", "t.json", "--gantt", "g.png"],
    [DOC000, "--json=", "--json", "x.json"],     # the last one wins
    [DOC000, "-s", "zb-h1", "--pp", "4", "-m", "8", "--vpp", "2", "--iterations", "3"],
    [DOC000, "--schedule=interleaved-1f1b", "--microbatches=16", "--layout", "aicb"],
    [DOC000, "-O", "group_size=4", "--option", "waves=2", "--set", "links.bandwidth_gbps=1"],
    [DOC000, "--slow-rank", "1:1.5", "--slow-rank", "2:2", "--jitter", "0.1", "--seed", "7"],
    [DOC000, "--memory-limit", "80", "--p2p", "batched", "--recompute", "full"],
    [DOC000, "--pp-comm", "0", "--gpus", "16", "--max-actions", "1_000", "--engine", "evaluator"],
    [DOC000, "--strict", "--layer-by-layer", "--log-level", "debug", "--dp", "2"],
    [DOC000, "--schedule-file", "s.csv", "--calibration", "c.yaml", "--system", SYSTEM],
    [DOC000, "--pp", " 3", "--jitter", "1e-3", "--memory-limit", "inf"],   # int()/float() rules
    ["", "--pp", "0"],                          # an empty workload name is click's too
])
def test_same_reading_as_click(args):
    assert parse_run_args(args) == click_reading(args)


@pytest.mark.parametrize("args", [
    [],                                    # missing WORKLOAD
    [DOC000, DOC000],                      # an extra argument
    [DOC000, "--help"], [DOC000, "-h"], [DOC000, "--json-schema"],
    [DOC000, "--nosuch"], [DOC000, "--pp"], [DOC000, "--pp", "x"], [DOC000, "--pp", "-1"],
    [DOC000, "--pp=2.0"], [DOC000, "--jitter", "abc"], [DOC000, "--layout", "AICB"],
    [DOC000, "--log-level", "DEBUG"],      # click accepts any case: its reading
    [DOC000, "--strict=yes"], [DOC000, "-s2bw"], [DOC000, "--", "x"], ["-"],
    [DOC000, "--json=--pp"], [str(REPO)], [DOC000, "--system", str(REPO)],
])
def test_lines_click_must_read(args):
    assert parse_run_args(args) is None


def test_a_line_click_must_read_gives_clicks_message(capsys):
    from simulator.cli.main import main
    assert main(["run", DOC000, "--pp", "x"]) == 2
    assert capsys.readouterr().err == (
        "pipesim: error: Invalid value for '--pp': 'x' is not a valid integer.\n")
    assert main(["run", str(REPO)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("pipesim: error: Invalid value for 'WORKLOAD': ") and "directory" in err


def test_shell_completion_still_goes_through_click(monkeypatch, capsys):
    from simulator.cli.main import main
    monkeypatch.setenv("_PIPESIM_COMPLETE", "bash_complete")
    monkeypatch.setenv("COMP_WORDS", "pipesim run --lay")
    monkeypatch.setenv("COMP_CWORD", "2")
    with pytest.raises(SystemExit) as done:      # click's completion ends the process
        main(["run", DOC000])
    assert done.value.code == 0
    assert capsys.readouterr().out == "plain,--layout\nplain,--layer-by-layer\nplain,--layers\n"


def test_echo_writes_plain_text_as_click_does_and_leaves_the_rest_to_click(capsys):
    from simulator.cli.echo import echo
    echo("pipesim: 1f1b ≈ 3 µs")
    echo("oops", err=True)
    echo("\x1b[31mred\x1b[0m")          # click strips styles when the stream is not a terminal
    out = capsys.readouterr()
    assert (out.out, out.err) == ("pipesim: 1f1b ≈ 3 µs\nred\n", "oops\n")
