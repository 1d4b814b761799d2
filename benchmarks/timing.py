"""Wall-clock primitives: the median of repeated runs in one process, the bare SimPy floor, and
the number of SimPy events a call processes (so engine cost can be put per event)."""

from __future__ import annotations

import contextlib
import statistics
import time
from dataclasses import dataclass
from typing import Any, Callable, Iterator

import simpy


def median_seconds(fn: Callable[[], Any], repeats: int, warmup: int = 1) -> tuple[float, list[float]]:
    """Median wall time of ``repeats`` calls after ``warmup`` untimed ones (lazy imports, caches)."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times), times


def bare_loop(n: int) -> None:
    """One process yielding ``n`` timeouts: the least any SimPy run of ``n`` events can cost."""
    env = simpy.Environment()

    def proc():
        timeout = env.timeout
        for _ in range(n):
            yield timeout(1)

    env.process(proc())
    env.run()


@contextlib.contextmanager
def counting_events() -> Iterator[list[int]]:
    """Count the events processed by every environment created inside the block.

    Patches the ``simpy.Environment`` attribute, which is how the engine creates its
    environment; yields a one-item list holding the count (0 if the engine bypassed it).
    """
    base = simpy.Environment
    counter = [0]

    class Counting(base):  # type: ignore[misc, valid-type]
        def step(self) -> None:
            base.step(self)           # raises EmptySchedule at the end: not an event
            counter[0] += 1

    simpy.Environment = Counting
    try:
        yield counter
    finally:
        simpy.Environment = base


@dataclass
class SimTiming:
    """One timed ``simulate()`` case."""

    median_s: float
    times: list[float]
    layer_ops: int
    events: int | None          # SimPy events processed by one run (None: could not count)
    actions: int
    transfers: int
    described: str              # layout, schedule, P, v, M as resolved by simulate()


def time_simulate(workload: Any, repeats: int, **kwargs: Any) -> SimTiming:
    """Time ``simulate(workload, **kwargs)`` (the call only; the summary is not built)."""
    from simulator import simulate

    median, times = median_seconds(lambda: simulate(workload, **kwargs), repeats)
    with counting_events() as counter:
        result = simulate(workload, **kwargs)
    s = result.schedule
    layout = getattr(result.workload, "layout", "?")
    described = f"{layout} layout, {s.name} P={s.pp} v={s.vpp} M={s.microbatches}"
    return SimTiming(median, times, int(result.summary["layer_ops"]), counter[0] or None,
                     len(result.records.actions), len(result.records.transfers), described)
