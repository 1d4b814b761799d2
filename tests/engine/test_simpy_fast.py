"""The engine's one use of SimPy internals (``simpy_fast.fire_at``) must stay what a Timeout
does; these tests fail loudly when a SimPy release changes Timeout or Event internals (the queue
entry fire_at makes against a Timeout's: the harness, tests/engine/equivalence.py)."""

from __future__ import annotations

import inspect

import simpy
from simpy.events import NORMAL, PENDING, Timeout

from simulator.engine.simpy_fast import fire_at


def test_simpy_major_version_is_4():
    assert simpy.__version__.split(".")[0] == "4", (
        f"SimPy {simpy.__version__}: fire_at was written against SimPy 4's Event internals; "
        "re-check simulator/engine/simpy_fast.py before moving the pin in pyproject.toml")


def test_timeout_sets_the_fields_fire_at_sets():
    """A Timeout is an Event with ``_ok = True``, ``_value`` and one NORMAL queue entry."""
    env = simpy.Environment()
    bare = env.event()
    assert bare._value is PENDING and bare.callbacks == [] and not bare.triggered
    t = Timeout(env, 5.0, value=None)
    assert t._ok is True and t._value is None and t.triggered
    assert set(vars(t)) == {"env", "callbacks", "_value", "_ok", "_delay"}, (
        f"Timeout's fields changed: {sorted(vars(t))} (bare event: {sorted(vars(bare))})")
    src = inspect.getsource(Timeout.__init__)
    for line in ("self._ok = True", "self._value = value", "env.schedule(self, NORMAL, delay)"):
        assert line in src, f"SimPy's Timeout.__init__ no longer does {line!r}"
    when, priority, _, event = env._queue[-1]
    assert (when, priority, event) == (5.0, NORMAL, t)


def test_fire_at_wakes_in_the_order_timeouts_would():
    """Events fired for one instant resume waiters in creation order, interleaved with
    Timeouts exactly as if each had been a Timeout."""
    env = simpy.Environment()
    order = []

    def waiter(name, ev):
        yield ev
        order.append((name, env.now))

    def sleeper(name, delay):
        yield env.timeout(delay)
        order.append((name, env.now))

    a, b = env.event(), env.event()
    env.process(waiter("a", a))
    env.process(sleeper("t", 3.0))
    env.process(waiter("b", b))

    def firer():
        yield env.timeout(1.0)
        fire_at(env, b, 2.0)
        fire_at(env, a, 2.0)

    env.process(firer())
    env.run()
    assert order == [("t", 3.0), ("b", 3.0), ("a", 3.0)]
