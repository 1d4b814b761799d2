"""The iteration's tail (``engine/tail.py``) is the one piece both walks call: a rule added there
(here an optimizer step per rank after its DP collectives, written once in a subclass) gives the
SimPy engine's step-by-step walk, its lookahead and the evaluator one timeline, to the bit, and
the times the rule says under known costs."""

from __future__ import annotations

import pytest

from simulator.engine.costs import DPCollective
from simulator.engine.evaluator import evaluate
from simulator.engine.options import EngineOptions
from simulator.engine.records import RunRecords
from simulator.engine.runtime import Runtime, _Run
from simulator.engine.tail import RankTail, Tail, TailPlan
from simulator.schedules import generate
from simulator.workload import Comm, CommGroup, CommType, uniform_workload
from simulator.workload.partition import partition

from .cases import SYSTEM, assert_same

STEP_NS = 777.0
DP = Comm(CommType.ALLREDUCE, CommGroup.DP, 20000, "ALLREDUCE")


class OptimizerTail(Tail):
    """An optimizer step of ``STEP_NS`` on every rank, once its compute and its DP collectives
    (and their updates) are done: the whole rule, in the tail only."""

    __slots__ = ("latest",)

    def __init__(self, ranks, rec) -> None:
        super().__init__(ranks, rec)
        self.latest = [0.0] * len(ranks)

    def dp(self, r, it, start, items, stretch):
        n = len(self.rec.collectives)
        super().dp(r, it, start, items, stretch)
        updates = [d.update_ns for _, _, d in items]
        for c, u in zip(self.rec.collectives[n:], updates):
            self.latest[r] = max(self.latest[r], c.end + u)

    def finish(self, r, it, now):
        busy, records = super().finish(r, it, now)
        for c, d in zip(records, self.ranks[r].dp):
            self.latest[r] = max(self.latest[r], c.end + d.update_ns)
        start = max(now + busy, self.latest[r])
        self.latest[r] = 0.0
        return start - now + STEP_NS, records


class OptimizerPlan(TailPlan):
    def start(self, rec: RunRecords) -> Tail:
        return OptimizerTail(self.ranks, rec)


def _runtime(tail_of, name="1f1b", pp=4, m=8, vpp=1, iterations=2, **options):
    sched = generate(name, pp, m, vpp)
    wl = uniform_workload(2 * sched.n_chunks, 1000, 700, 500, pp=pp, ga=m, pp_comm=4096,
                          wg_comm=DP, update_time=40)
    rt = Runtime(sched, partition(wl, sched.n_chunks), wl.header, SYSTEM,
                 iterations=iterations, options=EngineOptions(p2p="async", **options))
    program = rt.program._replace(tail=tail_of(rt.program.tail))
    return Runtime.of(program, iterations=iterations, options=rt.options)


def _three_walks(rt):
    step_by_step = _Run(rt, look_ahead=False).run()
    lookahead = rt.run()
    evaluated = evaluate(rt)
    assert_same(step_by_step, lookahead)
    assert_same(step_by_step, evaluated)
    return step_by_step


ROWS = (RankTail(300.0, (DPCollective(-7, 100.0, 250.0, 30.0, 4096),), 2),
        RankTail(0.0, (DPCollective(-8, 0.0, 125.0, 0.0, 1024),), 0),
        RankTail(450.0, (), 1),
        RankTail(0.0, (), 0))


@pytest.mark.parametrize("name,vpp", [("1f1b", 1), ("interleaved-1f1b", 2), ("zb-h1", 1)])
@pytest.mark.parametrize("rows", [None, ROWS])
def test_an_optimizer_step_written_once_in_the_tail_holds_for_both_walks(name, vpp, rows):
    def plain(plan):
        return plan if rows is None else TailPlan(rows)

    def with_step(plan):
        return OptimizerPlan(plain(plan).ranks)

    base = _three_walks(_runtime(plain, name, vpp=vpp, iterations=1))
    stepped = _three_walks(_runtime(with_step, name, vpp=vpp, iterations=1))
    # every rank: its step starts when its own end and its collectives' ends (plus updates)
    # are past, and the iteration ends with the last step (integer costs: exact sums)
    ends = []
    for r, finish in enumerate(base.rank_finish[0]):
        dp = [c.end + (40.0 if c.layer >= 0 else {-7: 30.0, -8: 0.0}[c.layer])
              for c in base.collectives if c.rank == r]
        ends.append(max([finish] + dp) + STEP_NS)
    assert stepped.rank_finish[0] == ends
    assert stepped.iteration_bounds == [(0.0, max(ends))]
    assert base.iteration_bounds[0][1] < max(ends)


def test_the_step_and_the_barrier_carry_over_iterations_slow_ranks_and_jitter():
    rt = _runtime(lambda plan: OptimizerPlan(ROWS), "interleaved-1f1b", vpp=2, iterations=3,
                  jitter_sigma=0.2, seed=5, slow_ranks=((1, 1.5),))
    rec = _three_walks(rt)
    assert len(rec.iteration_bounds) == 3
    assert all(b[0] == a[1] for a, b in zip(rec.iteration_bounds, rec.iteration_bounds[1:]))


def test_the_rows_run_after_the_last_action_then_their_collectives_then_the_barrier():
    """Known costs: rank 0's rows take 300 ns from its last action's end, their collective is
    ready 100 ns in, runs 250 ns on the free stream and adds its 30 ns update; the iteration
    ends at the latest of every rank's end and every collective end plus update."""
    base = _three_walks(_runtime(lambda plan: plan, iterations=1))
    rows = _three_walks(_runtime(lambda plan: TailPlan(ROWS), iterations=1))
    last = [max(a.end for a in base.actions if a.rank == r) for r in range(4)]
    assert rows.rank_finish[0] == [last[0] + 300.0, last[1], last[2] + 450.0, last[3]]
    mine = [c for c in rows.collectives if c.layer == -7]
    assert [(c.rank, c.ready, c.end - c.start) for c in mine] == [(0, last[0] + 100.0, 250.0)]
    ends = rows.rank_finish[0] + [c.end + 30.0 for c in mine] + [
        c.end + 40.0 for c in rows.collectives if c.layer >= 0]
    assert rows.iteration_bounds == [(0.0, max(ends))]
