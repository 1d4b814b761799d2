"""The progress line of a long run: nothing off a terminal or for a short run, an elapsed-time
line (then erased) for a long one."""

from __future__ import annotations

import io
import threading

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
