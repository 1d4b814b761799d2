"""`pipesim run` read without click: both readers name the same options, click's messages and
completion stay click's. That the plain reader gives click's keyword arguments, or None for
anything it does not take on, line by line, is the harness's (tests/engine/equivalence.py,
twin ``cli_plain_reader``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from simulator.cli.commands.run import command
from simulator.cli.run_impl import _table

REPO = Path(__file__).resolve().parents[2]
DOC000 = str(REPO / "workloads" / "doc000-1f1b-test.txt")
SYSTEM = str(REPO / "configs" / "system" / "default.yaml")


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
