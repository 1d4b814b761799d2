"""A picture (--plot, --gantt) into a folder that does not exist yet makes the folder; a folder
that cannot be made is still one line before any work."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from simulator.cli.main import main

REPO = Path(__file__).resolve().parents[2]
DOC000 = REPO / "workloads" / "doc000-1f1b-test.txt"
PNG = b"\x89PNG\r\n\x1a\n"


def test_plan_plot_into_a_new_out_folder(tmp_path, capsys):
    out = tmp_path / "plan-out"
    assert main(["plan", str(DOC000), "--gpus", "4", "-s", "1f1b,gpipe", "-j", "1",
                 "--confirm", "1", "--out", str(out), "--plot", str(out / "plan.png")]) == 0
    assert (out / "plan.png").read_bytes()[:8] == PNG
    assert json.loads((out / "plan.json").read_text())["best"]["schedule"]
    capsys.readouterr()


def test_run_and_compare_gantt_into_new_folders(tmp_path, capsys):
    assert main(["run", str(DOC000), "--gantt", str(tmp_path / "a" / "b" / "g.png")]) == 0
    assert (tmp_path / "a" / "b" / "g.png").read_bytes()[:8] == PNG
    assert main(["compare", str(DOC000), "-s", "1f1b,gpipe", "--gantt",
                 str(tmp_path / "c" / "cmp.svg")]) == 0
    assert (tmp_path / "c" / "cmp.svg").read_text().startswith("<?xml")
    capsys.readouterr()


def test_a_folder_that_cannot_be_made_is_refused_first(tmp_path, capsys, monkeypatch):
    locked = tmp_path / "locked"
    locked.mkdir(mode=0o500)
    if os.geteuid() == 0:
        # root writes in any folder: the access check answers as the folder's mode bits do
        # for anyone else
        real = os.access
        monkeypatch.setattr(os, "access", lambda path, mode: False if os.fspath(path) == str(
            locked) else real(path, mode))
    assert main(["run", str(DOC000), "--gantt", str(locked / "new" / "g.png")]) == 2
    assert capsys.readouterr().err == (f"pipesim: error: --gantt: cannot write "
                                       f"{locked / 'new' / 'g.png'}: permission denied in "
                                       f"{locked}\n")


def test_a_file_in_the_way_is_refused_first(tmp_path, capsys):
    (tmp_path / "f").write_text("")
    assert main(["run", str(DOC000), "--gantt", str(tmp_path / "f" / "g.png")]) == 2
    assert capsys.readouterr().err == (f"pipesim: error: --gantt: cannot write "
                                       f"{tmp_path / 'f' / 'g.png'}: {tmp_path / 'f'} is not a "
                                       f"folder\n")
