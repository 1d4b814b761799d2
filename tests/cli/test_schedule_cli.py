"""`pipesim schedule`: listing, JSON, CSV export and one-line errors (exit 2)."""

from __future__ import annotations

import json

from simulator.cli.main import main
from simulator.schedules import names


def run(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_readable_listing_one_line_per_rank(capsys):
    code, out, err = run(capsys, "schedule", "1f1b", "--pp", "2", "--microbatches", "3")
    assert (code, err) == (0, "")
    assert out == ("1f1b: pp=2 vpp=1 microbatches=3\n"
                   "rank 0: 0F0 0F1 0B0 0F2 0B1 0B2\n"
                   "rank 1: 1F0 1B0 1F1 1B1 1F2 1B2\n")


def test_json_is_exactly_the_documented_object(capsys):
    code, out, err = run(capsys, "schedule", "interleaved-1f1b", "--pp", "2", "-m", "4",
                         "--vpp", "2", "--json")
    assert (code, err) == (0, "")
    assert json.loads(out) == {
        "schedule": "interleaved-1f1b", "pp": 2, "vpp": 2, "microbatches": 4,
        "ranks": [
            "0F0 0F1 2F0 2F1 0F2 2B0 0F3 2B1 2F2 0B0 2F3 0B1 2B2 2B3 0B2 0B3".split(),
            "1F0 1F1 3F0 3B0 3F1 3B1 1F2 1B0 1F3 1B1 3F2 3B2 3F3 3B3 1B2 1B3".split()],
        "schema_version": "2"}


def test_json_writes_overlapped_pairs_as_two_entries_suffixed_at_k(capsys):
    code, out, _ = run(capsys, "schedule", "dualpipe-v", "--pp", "2", "-m", "4", "--json")
    assert code == 0
    rank0 = json.loads(out)["ranks"][0]
    assert rank0[7:11] == ["0F3@0", "3B1@0", "3F2@1", "0B0@1"]


def test_default_vpp_and_group_size(capsys):
    code, out, _ = run(capsys, "schedule", "interleaved", "--pp", "4", "-m", "10", "--json")
    assert code == 0
    doc = json.loads(out)
    assert (doc["schedule"], doc["vpp"]) == ("interleaved-1f1b", 2)
    code, out2, _ = run(capsys, "schedule", "interleaved", "--pp", "4", "-m", "10",
                        "--group-size", "5", "--json")
    assert out2 == out


def test_csv_export(capsys, tmp_path):
    path = tmp_path / "zb.csv"
    code, out, err = run(capsys, "schedule", "zb-h1", "--pp", "2", "-m", "2", "--csv", str(path))
    assert (code, err) == (0, "")
    assert out.startswith("zb-h1: pp=2 vpp=1 microbatches=2\n")
    assert path.read_bytes() == b"0F0,0F1,0I0,0W0,0I1,0W1\r\n1F0,1I0,1F1,1I1,1W0,1W1\r\n"


def test_list_names_every_schedule_with_its_formula(capsys):
    code, out, err = run(capsys, "schedule", "--list")
    assert (code, err) == (0, "")
    lines = out.splitlines()
    listed = [line.split()[0] for line in lines if not line.startswith(" ")]
    # auto, zb-greedy and v-zb: the cost-aware ones
    assert listed == sorted(names() + ["auto", "v-zb", "zb-greedy"])
    zb = lines.index(next(line for line in lines if line.startswith("zb-h1 ")))
    assert lines[zb + 1].split() == ["formula:", "(P-1)/(3vM+P-1)"]


def test_unknown_schedule_is_one_line_and_exit_2(capsys):
    code, out, err = run(capsys, "schedule", "zigzag", "--pp", "2", "-m", "2")
    assert (code, out) == (2, "")
    assert err == ("pipesim: error: NAME: unknown schedule 'zigzag'; expected one of: "
                   + ", ".join(sorted(names())) + "\n")


def test_illegal_combinations_are_one_line_and_exit_2(capsys):
    code, out, err = run(capsys, "schedule", "interleaved-1f1b", "--pp", "4", "-m", "8",
                         "--group-size", "3")
    assert (code, out) == (2, "")
    assert err == "pipesim: error: --group-size: expected P <= N <= M (4 <= N <= 8), got 3\n"
    code, _, err = run(capsys, "schedule", "zb-h2", "--pp", "4", "-m", "8", "--vpp", "2")
    assert code == 2
    assert err == ("pipesim: error: --vpp: zb-h2 runs one chunk per rank, got --vpp 2; use zb-v "
                   "for two chunks per rank\n")
    code, _, err = run(capsys, "schedule", "1f1b", "-m", "8")
    assert (code, err) == (2, "pipesim: error: --pp: required to build schedule '1f1b'\n")
    code, _, err = run(capsys, "schedule")
    assert (code, err) == (2, "pipesim: error: NAME: expected a schedule name (see `pipesim "
                              "schedule --list`)\n")


def test_unwritable_csv_path(capsys, tmp_path):
    path = tmp_path / "missing-dir" / "s.csv"
    code, out, err = run(capsys, "schedule", "1f1b", "--pp", "2", "-m", "2", "--csv", str(path))
    assert (code, out) == (2, "")
    assert err == (f"pipesim: error: --csv: cannot write {path}: folder {path.parent} does not "
                   "exist\n")


def test_schedule_takes_run_s_schedule_options(capsys):
    code, out, err = run(capsys, "schedule", "2bw", "--pp", "2", "-m", "2", "-O", "iterations=3",
                         "--json")
    assert code == 0 and json.loads(out)["microbatches"] == 6      # 3 minibatches of 2
    code, out, err = run(capsys, "schedule", "1f1b", "--pp", "2", "-m", "2", "-O", "waves=2")
    assert (code, err) == (2, "pipesim: error: --option: 1f1b has no option 'waves'; it takes "
                              "no options\n")
