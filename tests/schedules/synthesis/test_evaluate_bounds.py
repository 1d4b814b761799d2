"""The exact evaluator and the lower bound, on cases worked out by hand."""

from __future__ import annotations

import pytest

from simulator.schedules.synthesis.bounds import lower_bound
from simulator.schedules.synthesis.costs import StageCosts
from simulator.schedules.synthesis.evaluate import Problem, evaluate
from simulator.schedules import generate, names
from simulator.schedules.action import Action


@pytest.mark.parametrize("name, vpp, makespan", [
    ("1f1b", 1, 33), ("gpipe", 1, 33), ("zb-h1", 1, 27), ("zb-h2", 1, 27), ("zb-v", 2, 51)])
def test_unit_costs_match_the_design_notes(name, vpp, makespan):
    sched = generate(name, 4, 8, vpp)
    assert evaluate(sched, StageCosts.unit(4 * vpp)).makespan == makespan


def test_times_with_comm_by_hand():
    # one microbatch, f=(1,2) i=(3,4) w=(5,6), comm 1:
    # 0F0 [0,1] -> 1F0 [2,4] 1I0 [4,8] 1W0 [8,14]; 0I0 [9,12] 0W0 [12,17]
    costs = StageCosts((1, 2), (3, 4), (5, 6), 1)
    sched = generate("zb-h1", 2, 1)
    ev = evaluate(sched, costs)
    assert ev.start == {Action(0, "F", 0): 0, Action(1, "F", 0): 2, Action(1, "I", 0): 4,
                        Action(1, "W", 0): 8, Action(0, "I", 0): 9, Action(0, "W", 0): 12}
    assert ev.makespan == 17
    assert lower_bound(Problem(2, 1, costs), 1) == 17


def test_v_placement_has_no_comm_between_a_ranks_own_chunks():
    # P=1, V: stages 0 and 1 both on rank 0, so comm never applies
    costs = StageCosts((1, 1), (1, 1), (1, 1), 100)
    prob = Problem(1, 1, costs, (0, 0))
    assert prob.fwd_comm == [0.0, 0.0] and prob.bwd_comm == [0.0, 0.0]


def test_a_full_backward_carries_the_input_gradient_as_an_input_gradient_does():
    # 0F0 [0,1] -> 1F0 [2,4] 1B0 [4,14] (i then w) -> 0I0 [15,18] 0W0 [18,23]
    prob = Problem(2, 1, StageCosts((1, 2), (3, 4), (5, 6), 1))
    code = prob.codec.encode
    orders = [[code(Action(0, k, 0)) for k in "FIW"], [code(Action(1, k, 0)) for k in "FB"]]
    end = prob.times(orders)
    assert [end[x] for x in orders[0] + orders[1]] == [1, 18, 23, 4, 14]


@pytest.mark.parametrize("placement", [(0, 1, 2), (0, 1, 1, 0)])
def test_the_evaluators_needs_are_the_dependency_rule(placement):
    """Problem's tables are deps' rule on one pipeline 0..S-1, the comm on a need between ranks."""
    from simulator.schedules.deps import needs, neighbour_stages

    S, M = len(placement), 3
    ones = (1,) * S
    prob = Problem(max(placement) + 1, M, StageCosts(ones, ones, ones, 1.0), placement)
    prev, nxt = neighbour_stages((tuple(range(S)),), S)
    for st in range(S):
        for kind in "FIW":
            for mb in range(M):
                want = [(prob.codec.code(s2, "I" if len(alt) > 1 else k2, mb),
                         1.0 if placement[s2] != placement[st] else 0.0)
                        for alt in needs(st, kind, prev, nxt) for s2, k2 in alt[:1]]
                assert prob.split_needs(prob.codec.code(st, kind, mb)) == want


def test_deadlocked_order_is_none():
    prob = Problem(2, 1, StageCosts.unit(2))
    # rank 0 wants its I before it sends the forward rank 1 needs
    orders = [[prob.codec.encode(Action(0, "I", 0)), prob.codec.encode(Action(0, "F", 0)),
               prob.codec.encode(Action(0, "W", 0))],
              [prob.codec.encode(Action(1, k, 0)) for k in "FIW"]]
    assert prob.times(orders) is None


@pytest.mark.parametrize("M", [1, 2, 5, 9])
@pytest.mark.parametrize("K", [1, 2, 4, 8])
def test_unit_cost_bound(M, K):
    # K >= P, M >= P: 3M + P - 1 (the last rank's work after the first forward reaches it);
    # K = 1: rank 0 holds one microbatch for its whole round trip, 2P + 1 units, M times;
    # M = 2: rank 0 runs its 2 forwards, waits for the first I (at 7), then 4 backwards
    bound = lower_bound(Problem(4, M, StageCosts.unit(4)), K)
    if K >= 4 and M >= 4:
        assert bound == 3 * M + 3
    if K >= 2 and M == 2:
        assert bound == 11
    if K == 1:
        assert bound == 9 * M


COSTS = {
    "unit": lambda n: StageCosts.unit(n),
    "heavy-first": lambda n: StageCosts((3,) + (1,) * (n - 1), (2,) + (1,) * (n - 1),
                                        (2,) + (1,) * (n - 1), 0),
    "heavy-last": lambda n: StageCosts((1,) * (n - 1) + (2,), (1,) * (n - 1) + (3,),
                                       (1,) * (n - 1) + (1,), 0),
    "I!=W, comm": lambda n: StageCosts((1.0,) * n, (1.5,) * n, (0.5,) * n, 0.25),
    "zero W": lambda n: StageCosts((1,) * n, (2,) * n, (0,) * n, 1),
}


@pytest.mark.parametrize("costs", sorted(COSTS))
@pytest.mark.parametrize("name", names())
def test_bound_never_exceeds_a_registered_schedule(name, costs):
    for pp, m in ((4, 8), (3, 5)):
        try:
            sched = generate(name, pp, m)
        except Exception:
            continue
        if len(sched.pipelines) != 1 or not sched.flush or any(
                a.pair is not None for acts in sched.ranks for a in acts):
            continue
        c = COSTS[costs](sched.n_stages)
        ev = evaluate(sched, c)
        prob = Problem.for_schedule(sched, c)
        assert lower_bound(prob, max(ev.peak_inflight)) <= ev.makespan + 1e-9, (name, pp, m)
