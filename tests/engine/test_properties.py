"""Properties of every simulated timeline, over random schedules, sizes and costs."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from simulator import simulate
from simulator.schedules import generate, get, names
from simulator.system import SystemConfig
from simulator.system.config import LinkConfig
from simulator.workload import make_layer
from simulator.workload.model import Header, Workload

from .cases import Drawn, vpps_of

SCHEDULES = sorted(names())
WITH_CLOSED_FORM = [n for n in SCHEDULES if get(n).closed_form is not None]
EPS = 1e-6

# where each registered closed form is exact under uniform costs (else: everywhere it is legal)
EXACT_WHEN = {
    "interleaved-1f1b": lambda P, M, v: M >= P,
    "looped-bfs": lambda P, M, v: M >= P,
    "zb-h1": lambda P, M, v: M >= P,
    "zb-h2": lambda P, M, v: M >= 2 * P - 1,
}


def _workload(n_layers: int, costs: list[tuple[int, int, int]], pp_comm: int) -> Workload:
    layers = tuple(make_layer(i, *costs[i % len(costs)]) for i in range(n_layers))
    return Workload("<random>", Header("HYBRID_TRANSFORMER", pp=1, pp_comm=pp_comm), layers)


@st.composite
def cases(draw, drawn: Drawn):
    name = draw(st.sampled_from(SCHEDULES))
    P = draw(st.integers(1, 5))
    M = draw(st.integers(1, 12))
    v = draw(st.sampled_from(vpps_of(name)))
    sched = drawn.generate(name, P, M, v) or generate("1f1b", P, M, 1)
    per_chunk = draw(st.integers(1, 3))
    costs = draw(st.lists(st.tuples(st.integers(0, 5000), st.integers(0, 5000),
                                    st.integers(0, 5000)), min_size=1, max_size=4))
    pp_comm = draw(st.sampled_from([0, 1000, 100_000]))
    link = LinkConfig(bandwidth_gbps=draw(st.sampled_from([8.0, 800.0])),
                      latency_ns=draw(st.sampled_from([0.0, 500.0])))
    return sched, _workload(sched.n_chunks * per_chunk, costs, pp_comm), SystemConfig(links=link)


def test_no_action_starts_before_its_dependencies_end_and_ranks_run_one_at_a_time():
    drawn = Drawn()
    run = settings(max_examples=120, deadline=None, derandomize=True, suppress_health_check=[
        HealthCheck.too_slow])(given(cases(drawn))(_starts_after_needs_and_one_at_a_time))
    run()
    drawn.check(0.5)


def _starts_after_needs_and_one_at_a_time(case):
    sched, wl, system = case
    r = simulate(wl, sched, system)
    end = {}
    for a in r.records.actions:
        end[(a.stage, a.kind, a.microbatch)] = a.end
    for a in r.records.actions:
        deps = []
        if a.kind == "F":
            prev = sched.prev_stage(a.stage)
            if prev is not None:
                deps.append((prev, "F", a.microbatch))
        elif a.kind in ("B", "I"):
            nxt = sched.next_stage(a.stage)
            if nxt is not None:
                deps.append((nxt, "I" if (nxt, "I", a.microbatch) in end else "B", a.microbatch))
            deps.append((a.stage, "F", a.microbatch))
        else:
            deps.append((a.stage, "I", a.microbatch))
        for d in deps:
            assert a.start >= end[d] - EPS, (a, d, end[d])
    for rank in range(sched.pp):
        acts = sorted((a for a in r.records.actions if a.rank == rank), key=lambda a: a.start)
        for x, y in zip(acts, acts[1:]):
            assert y.start >= x.end - EPS, (x, y)
    # a receive never gets data before it was sent and carried over the link
    for t in r.records.transfers:
        assert t.start >= t.issued - EPS and t.end >= t.start


def test_uniform_costs_give_the_closed_form_where_it_is_exact():
    drawn = Drawn()
    compared = []

    @settings(max_examples=80, deadline=None, derandomize=True,
              suppress_health_check=[HealthCheck.too_slow])
    @given(name=st.sampled_from(WITH_CLOSED_FORM), P=st.integers(1, 5), M=st.integers(1, 12),
           v=st.integers(1, 3), unit=st.sampled_from([1, 7, 1000]))
    def run(name, P, M, v, unit):
        spec = get(name)
        v = v if spec.variable_vpp else spec.default_vpp
        sched = drawn.generate(name, P, M, v)
        if sched is None or not EXACT_WHEN.get(name, lambda *_: True)(P, M, v):
            return
        wl = _workload(sched.n_chunks, [(unit, unit, unit)], 0)
        d = simulate(wl, sched).to_dict()
        simulated = d["bubble_ratio_own"] if spec.closed_form_basis == "own" else \
            d["bubble_ratio"]
        assert simulated == pytest.approx(d["theoretical_bubble_ratio"], abs=1e-9)
        compared.append(name)

    run()
    drawn.check(0.5)
    assert len(compared) >= 0.3 * drawn.drawn, f"{len(compared)} of {drawn.drawn} compared"
