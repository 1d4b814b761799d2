"""PyTorch-format CSV: round trips, torch's own cells (idle, comms, OVERLAP_F_B), precise errors."""

from __future__ import annotations

import pytest

from simulator.errors import ConfigError, ScheduleError
from simulator.schedules import generate, loop_placement, v_placement
from simulator.cli.main import main
from simulator.schedules import registry
from simulator.schedules.csv_io import load_schedule_csv, write_schedule_csv
from simulator.schedules.runtimes import torch_cannot_run, torch_cannot_run_named


def _write(tmp_path, text: str):
    path = tmp_path / "s.csv"
    path.write_text(text)
    return path


@pytest.mark.parametrize("name,pp,m,v", [
    ("1f1b", 4, 8, 1), ("interleaved-1f1b", 4, 8, 2), ("zb-h1", 3, 6, 2), ("zb-h2", 4, 8, 1),
    ("zb-v", 4, 8, 2), ("dualpipe-v", 4, 8, 2), ("looped-bfs", 2, 3, 3)])
def test_round_trip_keeps_every_action_and_the_layout(tmp_path, name, pp, m, v):
    sched = generate(name, pp, m, v)
    path = tmp_path / "s.csv"
    write_schedule_csv(sched, path)
    back = load_schedule_csv(path, name=name)
    assert back.ranks == sched.ranks
    assert (back.pp, back.vpp, back.microbatches, back.placement) == (
        sched.pp, sched.vpp, sched.microbatches, sched.placement)


def test_written_like_torch_dump_csv(tmp_path):
    path = tmp_path / "s.csv"
    write_schedule_csv(generate("1f1b", 2, 2), path)
    assert path.read_bytes() == b"0F0,0F1,0B0,0B1\r\n1F0,1B0,1F1,1B1\r\n"


def test_pairs_are_written_as_torch_overlap_cells(tmp_path):
    path = tmp_path / "s.csv"
    write_schedule_csv(generate("dualpipe-v", 2, 4), path)
    rows = path.read_text().splitlines()
    assert rows[0].split(",")[7:11] == ["(0F3;3B1)OVERLAP_F_B", "(3F2;0B0)OVERLAP_F_B", "3B2",
                                        "(3F3;0B1)OVERLAP_F_B"]


def test_reads_torch_cells_skipping_idle_communication_and_fsdp_actions(tmp_path):
    path = _write(tmp_path,
                  "0UNSHARD,0F0,0SEND_F0,,0F1,0SEND_F1,0RECV_B0,0B0,0RECV_B1,0B1,0REDUCE_GRAD\n"
                  ",1RECV_F0,1F0,1B0,1SEND_B0,1RECV_F1,1F1,1B1,1SEND_B1,1RESHARD\n")
    sched = load_schedule_csv(path)
    assert sched.as_strings() == [["0F0", "0F1", "0B0", "0B1"], ["1F0", "1B0", "1F1", "1B1"]]
    assert sched.meta["skipped_comm_actions"] == 11
    assert (sched.pp, sched.vpp, sched.microbatches) == (2, 1, 2)


def test_reads_overlap_cells_and_at_notation_as_pairs(tmp_path):
    torch_style = load_schedule_csv(_write(tmp_path, "0F0,(0F1;0B0)OVERLAP_F_B,0B1\n"), vpp=1)
    ours = load_schedule_csv(_write(tmp_path, "0F0,0F1@0,0B0@0,0B1\n"), vpp=1)
    assert torch_style.ranks == ours.ranks
    assert torch_style.as_strings() == [["0F0", "0F1@0", "0B0@0", "0B1"]]


def test_placement_is_v_when_rank_r_holds_r_and_2p_minus_1_minus_r(tmp_path):
    v = load_schedule_csv(_write(tmp_path, "0F0,3F0,3B0,0B0\n1F0,2F0,2B0,1B0\n"))
    assert v.placement == v_placement(2)
    loop = load_schedule_csv(_write(tmp_path, "0F0,2F0,2B0,0B0\n1F0,3F0,3B0,1B0\n"))
    assert loop.placement == loop_placement(2, 2)


def test_explicit_placement(tmp_path):
    path = _write(tmp_path, "0F0,3F0,3B0,0B0\n1F0,2F0,2B0,1B0\n")
    assert load_schedule_csv(path, placement="v").placement == (0, 1, 1, 0)
    assert load_schedule_csv(path, placement=[0, 1, 1, 0]).placement == (0, 1, 1, 0)
    with pytest.raises(ScheduleError) as err:
        load_schedule_csv(path, placement="loop")
    assert str(err.value) == ("rank 0, position 1, action 3F0: stage 3 runs on rank 1 "
                              "(placement), not on rank 0")
    with pytest.raises(ScheduleError) as err:
        load_schedule_csv(path, placement="zigzag")
    assert str(err.value) == (f"{path}: placement: expected 'loop', 'v' or one rank per stage, "
                              "found 'zigzag'")
    with pytest.raises(ScheduleError) as err:
        load_schedule_csv(path, placement="v", vpp=3)
    assert str(err.value) == (f"{path}: placement 'v' holds 2 stages per rank, but the schedule "
                              "has vpp 3")


def test_bad_cell_names_rank_column_and_text(tmp_path):
    path = _write(tmp_path, "0F0,0F1,0B0,0B1\n1F0,1X0,1F1,1B1\n")
    with pytest.raises(ScheduleError) as err:
        load_schedule_csv(path)
    assert str(err.value) == (
        f"rank 1, position 1, action 1X0: {path}: expected an action like '3F1', '0B2', '1I0', "
        "'2W5', '(0F3;7B1)OVERLAP_F_B' or a communication action, found '1X0'")
    assert (err.value.rank, err.value.position, err.value.action) == (1, 1, "1X0")


def test_overlap_cell_with_other_than_two_actions(tmp_path):
    path = _write(tmp_path, "0F0,(0F1;0B0;0B1)OVERLAP_F_B\n")
    with pytest.raises(ScheduleError) as err:
        load_schedule_csv(path)
    assert str(err.value) == (f"rank 0, position 1, action (0F1;0B0;0B1)OVERLAP_F_B: {path}: an "
                              "OVERLAP_F_B cell holds two actions '(xFm;yBn)', found 3")


def test_a_loaded_schedule_is_validated_unless_asked_not_to(tmp_path):
    path = _write(tmp_path, "0F0,0B0\n1B0,1F0\n")
    with pytest.raises(ScheduleError) as err:
        load_schedule_csv(path)
    assert str(err.value).startswith("rank 1, position 0, action 1B0: deadlock: waits for 1F0")
    assert load_schedule_csv(path, check=False).as_strings() == [["0F0", "0B0"], ["1B0", "1F0"]]


def test_unreadable_empty_and_actionless_files(tmp_path):
    missing = tmp_path / "nope.csv"
    with pytest.raises(ScheduleError) as err:
        load_schedule_csv(missing)
    assert str(err.value) == f"{missing}: cannot read: No such file or directory"
    with pytest.raises(ScheduleError) as err:
        load_schedule_csv(_write(tmp_path, "\n\n"))
    assert str(err.value) == (f"{tmp_path / 's.csv'}: expected one row of actions per rank, "
                              "found no rows")
    with pytest.raises(ScheduleError) as err:
        load_schedule_csv(_write(tmp_path, "0SEND_F0,,\n1RECV_F0\n"))
    assert str(err.value) == (f"{tmp_path / 's.csv'}: no compute actions (F, B, I, W) in 2 "
                              "row(s)")


def test_vpp_smaller_than_the_stages_used(tmp_path):
    path = _write(tmp_path, "0F0,2F0,2B0,0B0\n1F0,3F0,3B0,1B0\n")
    with pytest.raises(ScheduleError) as err:
        load_schedule_csv(path, vpp=1)
    assert str(err.value) == (f"{path}: vpp 1 gives 2 stages for 2 ranks, but the file uses "
                              "stage 3")


@pytest.mark.parametrize("name, pp, m, why", [
    ("2bw", 2, 4, "2bw runs several minibatches without a flush and stashes weight versions; "
                  "torch's runtime runs one minibatch per step"),
    ("dualpipe", 2, 4, "dualpipe runs two stages on the same weights (two model copies); "
                       "torch's runtime holds one copy per stage"),
])
def test_a_schedule_torch_cannot_run_gets_no_csv(tmp_path, name, pp, m, why):
    path = tmp_path / "s.csv"
    with pytest.raises(ConfigError) as err:
        write_schedule_csv(generate(name, pp, m), path)
    assert str(err.value) == f"--csv: {why}, so no CSV is written"
    assert not path.exists()


def test_the_registration_says_what_a_built_schedule_shows():
    """`schedule --csv` refuses from the registration before building: for every library
    schedule the registration's answer is the built schedule's."""
    for name in registry.names():
        spec = registry.get(name)
        if spec.needs_costs:
            continue
        pp, m = (4, 8) if name != "hanayo" else (4, 4)
        built = torch_cannot_run(generate(name, pp, m))
        assert torch_cannot_run_named(spec.name, spec.flushes, spec.shares_weights) == built, name


def test_schedule_csv_of_dualpipe_is_refused_before_it_is_built(tmp_path, capsys, monkeypatch):
    """P 24, M 10^6 would be refused by size (or take seconds to build): the CSV's refusal,
    which the schedule's name alone gives, comes first."""
    def not_built(*_a, **_k):
        raise AssertionError("the schedule was built before the refusal")

    monkeypatch.setattr(registry, "generate", not_built)
    out = tmp_path / "s.csv"
    assert main(["schedule", "dualpipe", "--pp", "24", "-m", "1000000", "--csv", str(out)]) == 2
    assert capsys.readouterr().err == (
        "pipesim: error: --csv: dualpipe runs two stages on the same weights (two model copies); "
        "torch's runtime holds one copy per stage, so no CSV is written\n")
    assert not out.exists()
