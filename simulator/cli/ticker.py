"""A progress line for a run that takes a while: silent for the first two seconds (most runs
are over by then), then an elapsed-time line on stderr, rewritten in place, removed at the end.
Only on a terminal: redirected output and tests see nothing."""

from __future__ import annotations

import sys
import time
from contextlib import contextmanager
from typing import Iterator

DELAY_S = 2.0
EVERY_S = 0.5


@contextmanager
def ticker(label: str, stream=None, delay: float = DELAY_S) -> Iterator[None]:
    stream = stream if stream is not None else sys.stderr
    if not getattr(stream, "isatty", lambda: False)():
        yield
        return
    import threading   # only on a terminal: a redirected run does not load it

    done = threading.Event()
    start = time.monotonic()
    shown = [False]

    def tick() -> None:
        if done.wait(delay):
            return
        while not done.is_set():
            stream.write(f"\rpipesim: {label} ... {time.monotonic() - start:.0f} s ")
            stream.flush()
            shown[0] = True
            done.wait(EVERY_S)

    thread = threading.Thread(target=tick, daemon=True)
    thread.start()
    try:
        yield
    finally:
        done.set()
        thread.join()
        if shown[0]:
            stream.write("\r\033[K")
            stream.flush()
