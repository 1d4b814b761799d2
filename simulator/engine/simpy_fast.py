"""The one place the engine reaches into SimPy's internals.

Waking a waiter at a known future time is the engine's commonest step (a receive whose data
lands ``delay`` ns after the send, an iteration barrier). ``env.timeout(delay)`` would need a new
event plus a callback that triggers the waiter's event; :func:`fire_at` instead schedules the
waiter's own bare event exactly as :class:`simpy.events.Timeout`'s constructor schedules itself:
it marks the event as succeeded with value None (``_ok``, ``_value``) and pushes it on the queue
with ``NORMAL`` priority after ``delay``. The queue entry (time, priority, insertion id, event)
is the one a Timeout made at this instant would get, so the order of events - and so every
simulated time - is the same as with a Timeout.

This relies on SimPy 4's ``Event._ok`` / ``Event._value`` and ``Environment.schedule``;
pyproject pins ``simpy<5`` and tests/engine/test_simpy_fast.py fails loudly if a SimPy release
changes what a Timeout sets.

Fast path `fire_at` (docs/performance.md, "Fast paths"): it removes 27 % of `pipesim run`'s
whole-process CPU on the 1M-action case against a Timeout whose callback triggers the waiter.
"""

from __future__ import annotations

import simpy
from simpy.events import NORMAL

__all__ = ["fire_at", "NORMAL"]


def fire_at(env: simpy.Environment, event: simpy.Event, delay: float) -> None:
    """Trigger the bare, untriggered ``event`` ``delay`` ns from now (value None), as a
    ``Timeout(env, delay)`` created now would fire."""
    event._ok = True
    event._value = None
    env.schedule(event, NORMAL, delay)
