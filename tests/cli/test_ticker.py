"""The progress line of a long run: nothing off a terminal or for a short run, an elapsed-time
line (then erased) for a long one."""

from __future__ import annotations

import io
import threading
from pathlib import Path

from simulator.cli.ticker import ticker


class FakeTerminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_nothing_when_not_a_terminal():
    out = io.StringIO()
    with ticker("simulating x", stream=out, delay=0.0):
        threading.Event().wait(0.05)
    assert out.getvalue() == ""


def test_a_short_run_prints_nothing():
    out = FakeTerminal()
    with ticker("simulating x", stream=out, delay=5.0):
        pass
    assert out.getvalue() == ""


def test_a_long_run_shows_elapsed_time_then_erases_it():
    out = FakeTerminal()
    with ticker("simulating x", stream=out, delay=0.0):
        threading.Event().wait(0.1)
    text = out.getvalue()
    assert text.startswith("\rpipesim: simulating x ... 0 s ")
    assert text.endswith("\r\033[K")


def _terminal_ticker(monkeypatch) -> FakeTerminal:
    """stderr a terminal, and the ticker's line shown at once (not after two seconds)."""
    import functools

    from simulator.cli import run_impl
    from simulator.cli.commands import schedule

    err = FakeTerminal()
    for user in (run_impl, schedule):    # the modules that show it
        monkeypatch.setattr(user, "ticker", functools.partial(ticker, delay=0.0))
    monkeypatch.setattr("sys.stderr", err)
    return err


def test_schedule_auto_shows_its_synthesis_on_a_terminal(monkeypatch, capsys):
    from simulator.cli.main import main

    err = _terminal_ticker(monkeypatch)
    assert main(["schedule", "auto", "--pp", "4", "-m", "16", "--json", "-"]) == 0
    text = err.getvalue()
    assert text.startswith("\rpipesim: synthesizing auto with pp 4, 16 microbatches ... 0 s ")
    assert text.endswith("\r\033[K")   # erased: the terminal is left as it was
    assert capsys.readouterr().out.startswith('{"schema_version"')   # stdout untouched


def test_run_auto_says_it_synthesizes(monkeypatch, capsys):
    from simulator.cli.main import main

    tiny = str(Path(__file__).resolve().parents[2] / "tests" / "data" / "tiny_model.txt")
    err = _terminal_ticker(monkeypatch)
    assert main(["run", tiny, "-s", "auto", "--pp", "2", "-m", "16", "--json", "-"]) == 0
    assert err.getvalue().startswith(
        f"\rpipesim: synthesizing auto and simulating {tiny} ... 0 s ")


def test_schedule_auto_off_a_terminal_prints_no_progress(capsys):
    from simulator.cli.main import main

    assert main(["schedule", "auto", "--pp", "4", "-m", "16", "--json", "-"]) == 0
    assert capsys.readouterr().err == ""
