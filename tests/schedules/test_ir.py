"""The schedule IR (torch's ``_Action``): OVERLAP_F_B steps, communication kinds, lowering.

``data/flat_ranks.json`` and ``data/op_lists.json`` were recorded from pipesim before the IR
(when a pair was two actions sharing a ``pair`` number and ``add_communication`` returned op
tuples): the compute view and the engine's op tuples must not change. The early-receive lists
of ``op_lists.json`` were re-recorded once, when the early lowering came to walk torch's
bookkeeping rounds too (7 of its 18 cases moved; torch's own lists are pinned by
``test_lowering_goldens.py``).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from simulator.errors import DeadlockError, ScheduleError
from simulator.schedules import Action, Schedule, generate, loop_placement, v_placement
from simulator.schedules.action import Kind, Overlap
from simulator.schedules.comm_pass import Compute, add_communication, op_lists
from simulator.schedules.csv_io import load_schedule_csv, write_schedule_csv
from simulator.schedules.validate import validate
from simulator.verify import execute
from simulator.verify.compare import verify_schedule
from simulator.verify.model import build_model, make_batch

DATA = Path(__file__).parent / "data"
A = Action.parse


def _cases(name: str) -> list[dict]:
    return json.loads((DATA / name).read_text())


def _ids(case: dict) -> str:
    return f"{case['name']}-{case['pp']}x{case['microbatches']}"


# -- text ---------------------------------------------------------------------------------------

def test_overlap_reads_and_prints_as_torch():
    pair = A("(0F7;7B3)OVERLAP_F_B")
    assert pair == Overlap(-1, Kind.OVERLAP_F_B, -1, None, (Action(0, Kind.F, 7),
                                                             Action(7, Kind.B, 3)))
    assert pair == Action.overlap(A("0F7"), A("7B3")) and isinstance(pair, Action)
    assert str(pair) == pair.plain == "(0F7;7B3)OVERLAP_F_B"
    assert [str(h) for h in pair.halves] == ["0F7", "7B3"]
    assert str(A(" ( 0F7 ; 7B3 ) OVERLAP_F_B ")) == "(0F7;7B3)OVERLAP_F_B"


def test_communication_actions_read_and_print_as_torch():
    assert [str(A(t)) for t in ("2SEND_F1", "3RECV_F1", "1SEND_B0", "0RECV_B0")] == [
        "2SEND_F1", "3RECV_F1", "1SEND_B0", "0RECV_B0"]
    assert A("2SEND_F1") == Action(2, Kind.SEND_F, 1)
    assert A("2SEND_F1").is_comm and not A("2F1").is_comm


def test_the_old_at_spelling_is_still_read():
    assert A("4F3@1") == Action(4, Kind.F, 3, 1)
    old = Schedule("t", 1, 2, 2, (0, 0), ((A("0F0"), A("0F1@0"), A("1F0@0"), A("1B0"),
                                          A("0B0"), A("1F1"), A("1B1"), A("0B1")),))
    new = Schedule("t", 1, 2, 2, (0, 0), ((A("0F0"), A("(0F1;1F0)OVERLAP_F_B"), A("1B0"),
                                          A("0B0"), A("1F1"), A("1B1"), A("0B1")),))
    assert old == new
    assert new.step_strings() == [["0F0", "(0F1;1F0)OVERLAP_F_B", "1B0", "0B0", "1F1", "1B1",
                                   "0B1"]]
    assert new.as_strings() == [["0F0", "0F1@0", "1F0@0", "1B0", "0B0", "1F1", "1B1", "0B1"]]


def test_bad_overlap_text():
    with pytest.raises(ScheduleError) as err:
        A("(0F1;0B0;0B1)OVERLAP_F_B")
    assert str(err.value) == ("an OVERLAP_F_B action holds two actions '(xFm;yBn)', found 3 in "
                              "'(0F1;0B0;0B1)OVERLAP_F_B'")
    with pytest.raises(ScheduleError) as err:
        A("(0F1;0SEND_F0)OVERLAP_F_B")
    assert str(err.value) == ("an OVERLAP_F_B action holds compute actions like '0F7', found "
                              "'0SEND_F0' in '(0F1;0SEND_F0)OVERLAP_F_B'")


# -- the compute view -------------------------------------------------------------------------

@pytest.mark.parametrize("case", _cases("flat_ranks.json"), ids=_ids)
def test_the_compute_view_is_what_ranks_was(case):
    sched = generate(case["name"], case["pp"], case["microbatches"], case["vpp"])
    assert sched.as_strings() == case["ranks"]
    # the view is the steps with each pair's halves in place
    assert sched.ranks == tuple(tuple(h for a in acts for h in a.halves)
                                for acts in sched.steps)
    assert sched.has_overlap == any("@" in a for acts in case["ranks"] for a in acts)


def test_dualpipe_v_steps_hold_its_pairs():
    sched = generate("dualpipe-v", 2, 4)
    assert sched.step_strings() == [
        ["0F0", "0F1", "0F2", "3F0", "3I0", "3W0", "3F1", "(0F3;3B1)OVERLAP_F_B",
         "(3F2;0B0)OVERLAP_F_B", "3B2", "(3F3;0B1)OVERLAP_F_B", "3B3", "0I2", "0W2", "0I3",
         "0W3"],
        ["1F0", "2F0", "1F1", "2F1", "1F2", "2B0", "(2F2;1B0)OVERLAP_F_B",
         "(1F3;2B1)OVERLAP_F_B", "(2F3;1B1)OVERLAP_F_B", "2B2", "1B2", "2I3", "1I3", "2W3",
         "1W3"]]


def test_replace_ranks_replaces_the_steps():
    sched = generate("dualpipe-v", 2, 4)
    swapped = sched._replace(ranks=tuple(reversed(sched.ranks)))
    assert swapped.step_strings() == list(reversed(sched.step_strings()))
    assert sched._replace(name="x").steps == sched.steps


# -- CSV --------------------------------------------------------------------------------------

def test_overlap_csv_round_trip_and_the_old_spelling(tmp_path):
    sched = generate("dualpipe-v", 2, 4)
    path = tmp_path / "s.csv"
    write_schedule_csv(sched, path)
    assert path.read_text().splitlines() == [",".join(row) for row in sched.step_strings()]
    back = load_schedule_csv(path, name="dualpipe-v")
    assert back == sched
    old = tmp_path / "old.csv"
    old.write_text("\n".join(",".join(row) for row in sched.as_strings()) + "\n")
    assert load_schedule_csv(old, name="dualpipe-v") == sched


# -- lowering ---------------------------------------------------------------------------------

ONE_F_ONE_B_AT_USE = [
    ["0F0", "0SEND_F0", "0F1", "0SEND_F1", "0RECV_B0", "0B0", "0RECV_B1", "0B1"],
    ["1RECV_F0", "1F0", "1B0", "1SEND_B0", "1RECV_F1", "1F1", "1B1", "1SEND_B1"]]
# torch's _add_send_recv: rank 0's F1 posts 1RECV_F1 on rank 1 before rank 1 places 1B0
ONE_F_ONE_B_EARLY = [
    ["0F0", "0SEND_F0", "0F1", "0SEND_F1", "0RECV_B0", "0B0", "0RECV_B1", "0B1"],
    ["1RECV_F0", "1F0", "1RECV_F1", "1B0", "1SEND_B0", "1F1", "1B1", "1SEND_B1"]]


def test_lowered_1f1b_printed_exactly():
    sched = generate("1f1b", 2, 2)
    at_use = add_communication(sched)
    early = add_communication(sched, early_receives=True)
    assert isinstance(at_use, Schedule) and at_use.lowered and not sched.lowered
    assert at_use.step_strings() == ONE_F_ONE_B_AT_USE
    assert early.step_strings() == ONE_F_ONE_B_EARLY
    assert (at_use.meta["lowered"], early.meta["lowered"]) == ("at-use", "early")
    assert at_use.ranks == early.ranks == sched.ranks       # the compute view is unchanged
    assert [[str(op) for op in ops] for ops in op_lists(early)] == [
        ["0F0", "send 1F0 (0->1)", "0F1", "send 1F1 (0->1)", "irecv 0B0 (1->0)",
         "wait 0B0 (1->0)", "0B0", "irecv 0B1 (1->0)", "wait 0B1 (1->0)", "0B1"],
        ["irecv 1F0 (0->1)", "wait 1F0 (0->1)", "1F0", "irecv 1F1 (0->1)", "1B0",
         "send 0B0 (1->0)", "wait 1F1 (0->1)", "1F1", "1B1", "send 0B1 (1->0)"]]


def test_lowered_csv_is_torchs_comm_format(tmp_path):
    lowered = add_communication(generate("1f1b", 2, 2), early_receives=True)
    path = tmp_path / "comms.csv"
    write_schedule_csv(lowered, path)
    assert path.read_bytes() == (b"0F0,0SEND_F0,0F1,0SEND_F1,0RECV_B0,0B0,0RECV_B1,0B1\r\n"
                                 b"1RECV_F0,1F0,1RECV_F1,1B0,1SEND_B0,1F1,1B1,1SEND_B1\r\n")
    back = load_schedule_csv(path, name="1f1b", lowered=True)
    assert back == lowered and back.meta["lowered"] == "early"
    assert load_schedule_csv(path, name="1f1b") == generate("1f1b", 2, 2)   # comm skipped


@pytest.mark.parametrize("case", _cases("op_lists.json"), ids=_ids)
def test_op_lists_are_what_add_communication_returned(case):
    def enc(op):
        if isinstance(op, Compute):
            return "+".join(str(a) for a in op.actions)
        return (f"{op.op}_{op.data}{op.src_stage}>{op.dst_stage}:{op.microbatch}_"
                f"r{op.src_rank}>r{op.dst_rank}")

    sched = generate(case["name"], case["pp"], case["microbatches"], case["vpp"])
    for early, key in ((False, "at_use"), (True, "early")):
        lowered = add_communication(sched, early_receives=early)
        validate(lowered)
        assert [" ".join(map(enc, ops)) for ops in op_lists(sched, early)] == case[key]
        assert [" ".join(map(enc, ops)) for ops in op_lists(lowered)] == case[key]


# -- validating lowered schedules -------------------------------------------------------------

def _edit(lowered: Schedule, rank: int, text: str) -> Schedule:
    steps = list(lowered.steps)
    steps[rank] = tuple(A(t) for t in text.split())
    return lowered._replace(steps=tuple(steps))


def _refused(sched: Schedule) -> str:
    with pytest.raises(ScheduleError) as err:
        validate(sched)
    return str(err.value)


def test_a_send_without_its_receive_is_refused():
    lowered = add_communication(generate("1f1b", 2, 2))
    bad = _edit(lowered, 1, "1F0 1B0 1SEND_B0 1RECV_F1 1F1 1B1 1SEND_B1")
    assert _refused(bad) == ("rank 0, position 1, action 0SEND_F0: no 1RECV_F0 on rank 1: every "
                             "send needs its receive on the peer")


@pytest.mark.parametrize("rank,text,message", [
    (0, "0F0 0SEND_F0 0F1 0SEND_F1 0RECV_B0 0B0 0RECV_B1 0B1 0RECV_B1",
     "rank 0, position 8, action 0RECV_B1: duplicate: 0RECV_B1 already at rank 0 position 6"),
    (0, "0F0 0SEND_F0 0F1 0SEND_F1 0RECV_B0 0B0 0B1",
     "rank 1, position 7, action 1SEND_B1: no 0RECV_B1 on rank 0: every send needs its receive "
     "on the peer"),
    (1, "1RECV_F0 1F0 1B0 1RECV_F1 1F1 1B1 1SEND_B1",
     "rank 0, position 4, action 0RECV_B0: no 1SEND_B0 on rank 1: every receive needs its send "
     "on the peer"),
    (1, "1RECV_F0 1F0 1SEND_B0 1B0 1RECV_F1 1F1 1B1 1SEND_B1",
     "rank 1, position 2, action 1SEND_B0: sends data before computing it (1B/I0: it is at "
     "position 3)"),
    (1, "1F0 1RECV_F0 1B0 1SEND_B0 1RECV_F1 1F1 1B1 1SEND_B1",
     "rank 1, position 0, action 1F0: 1F0 takes its input from rank 0, but no 1RECV_F0 is before "
     "it on this rank"),
    (0, "0F0 0SEND_F1 0F1 0SEND_F0 0RECV_B0 0B0 0RECV_B1 0B1",
     "rank 0, position 1, action 0SEND_F1: sends data before computing it (0F1: it is at "
     "position 2)"),
    (0, "0F0 0F1 0SEND_F1 0RECV_B0 0B0 0SEND_F0 0RECV_B1 0B1",
     "rank 0, position 4, action 0B0: deadlock: waits for 1SEND_B0 (rank 1 position 3); also "
     "blocked: rank 1 at position 1 (1F0)"),
    (0, "0F0 0SEND_F0 0F1 0SEND_F1 0SEND_F2 0RECV_B0 0B0 0RECV_B1 0B1",
     "rank 0, position 4, action 0SEND_F2: microbatch 2 does not exist (microbatches are 0..1)"),
    (0, "0F0 0SEND_F0 0F1 0SEND_F1 0RECV_B0 0B0 0RECV_B1 0B1 0RECV_F1",
     "rank 0, position 8, action 0RECV_F1: stage 0 is its pipeline's first stage: there is no "
     "stage to receive from"),
])
def test_broken_lowered_lists_are_refused_naming_rank_position_action(rank, text, message):
    assert _refused(_edit(add_communication(generate("1f1b", 2, 2)), rank, text)) == message


def test_every_registered_schedule_lowers_to_a_valid_schedule():
    for name, pp, m in [("1f1b", 4, 8), ("gpipe", 3, 4), ("interleaved-1f1b", 4, 8),
                        ("looped-bfs", 2, 4), ("zb-h1", 4, 8), ("zb-h2", 4, 8), ("zb-v", 4, 8),
                        ("v-half", 4, 8), ("v-min", 4, 8), ("dualpipe", 4, 8),
                        ("dualpipe-v", 4, 8), ("hanayo", 4, 8), ("2bw", 2, 4)]:
        for early in (False, True):
            validate(add_communication(generate(name, pp, m), early_receives=early))


def test_a_torch_comm_csv_is_read_lowered_and_validated(tmp_path):
    path = tmp_path / "t.csv"
    path.write_text("0UNSHARD,0F0,0SEND_F0,,0F1,0SEND_F1,0RECV_B0,0B0,0RECV_B1,0B1,0REDUCE_GRAD\n"
                    ",1RECV_F0,1F0,1B0,1SEND_B0,1RECV_F1,1F1,1B1,1SEND_B1,1RESHARD\n")
    sched = load_schedule_csv(path, lowered=True)
    assert sched.step_strings() == ONE_F_ONE_B_AT_USE
    assert sched.meta["skipped_comm_actions"] == 3 and sched.meta["lowered"] == "at-use"
    path.write_text("0F0,0SEND_F0,0F1,0SEND_F1,0RECV_B0,0B0,0RECV_B1,0B1\n"
                    "1F0,1B0,1SEND_B0,1RECV_F1,1F1,1B1,1SEND_B1\n")
    with pytest.raises(ScheduleError) as err:
        load_schedule_csv(path, lowered=True)
    assert str(err.value) == ("rank 0, position 1, action 0SEND_F0: no 1RECV_F0 on rank 1: every "
                              "send needs its receive on the peer")


# -- running lowered schedules ----------------------------------------------------------------

@pytest.mark.parametrize("name,pp,m", [("1f1b", 2, 4), ("interleaved-1f1b", 2, 4),
                                       ("dualpipe-v", 2, 4), ("zb-v", 2, 4)])
def test_verify_runs_a_lowered_schedule(name, pp, m):
    sched = generate(name, pp, m)
    plain = verify_schedule(sched)
    for early in (False, True):
        report = verify_schedule(add_communication(sched, early_receives=early))
        assert report.ok and report.losses == plain.losses
        assert report.activations == plain.activations
    # posted early, a receive is two ops (irecv, wait) and a pair runs as two computes
    lowered = add_communication(sched, early_receives=True)
    recvs = sum(a.kind in (Kind.RECV_F, Kind.RECV_B) for acts in lowered.steps for a in acts)
    pairs = sum(a.kind == Kind.OVERLAP_F_B for acts in lowered.steps for a in acts)
    assert report.ops == plain.ops + recvs + pairs


def test_the_executor_runs_a_lowered_schedule_as_written():
    """validate=False: a lowered list without its SEND reaches the executor, which stalls."""
    lowered = add_communication(generate("1f1b", 2, 1))
    bad = _edit(lowered, 1, "1RECV_F0 1F0 1B0")
    model = build_model(2, 2)
    xs, ts = make_batch(model, 1, 2)
    with pytest.raises(DeadlockError) as err:
        execute(bad, model, xs, ts)
    assert str(err.value) == ("deadlock in the numeric executor after 5 ops: rank 0 waits on "
                              "recv 0B0 (1->0) from rank 1 (finished)")


def test_layouts_of_lowered_schedules():
    assert add_communication(generate("zb-v", 2, 4)).placement == v_placement(2)
    assert add_communication(generate("looped-bfs", 2, 4)).placement == loop_placement(2, 2)
