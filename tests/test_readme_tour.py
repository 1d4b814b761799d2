"""The README's tour, as a new user types it: every `pipesim ...` line runs from the checkout
(exit 0), reading only files the project ships, and the `inspect` example reads an AICB-layout
file the project made itself."""

from __future__ import annotations

import os
import shlex
from pathlib import Path

import pytest

from simulator.cli.main import main

REPO = Path(__file__).resolve().parents[1]


def _tour() -> list[list[str]]:
    """The tour block's commands, with its shell variables expanded."""
    text = (REPO / "README.md").read_text()
    block = text.split("## A short tour", 1)[1].split("```bash", 1)[1].split("```", 1)[0]
    env, commands = {}, []
    for line in block.splitlines():
        line = line.split(" #", 1)[0].strip()
        if not line:
            continue
        if "=" in line.split()[0] and not line.startswith("pipesim"):
            name, value = line.split("=", 1)
            env[name] = value
            continue
        for name, value in env.items():
            line = line.replace("$" + name, value)
        commands.append(shlex.split(line))
    return commands


TOUR = _tour()


def test_the_tour_has_its_commands():
    assert len(TOUR) >= 10 and all(c[0] == "pipesim" for c in TOUR)


def test_every_tour_command_runs_in_order(tmp_path, monkeypatch, capsys):
    """In order (calibrate writes what the next line reads), in a scratch folder holding links
    to the checkout's folders, so the outputs the tour writes (gantt.png, sweep-out, ...) land
    there, and every input it reads is the project's."""
    for name in ("workloads", "configs", "benchmarks", "tests"):
        os.symlink(REPO / name, tmp_path / name)
    monkeypatch.chdir(tmp_path)
    for command in TOUR:
        args = command[1:]
        assert not any("shared" in Path(a).parts for a in args), "only files the project ships"
        if args[0] == "sweep":   # the example grid is 144 points: the same spec on a corner
            spec = tmp_path / "configs-sweep.yaml"
            spec.write_text((REPO / args[1]).read_text()
                            .replace("../../workloads", str(REPO / "workloads"))
                            .replace("pp: [2, 4, 8]", "pp: [2]")
                            .replace("microbatches: [8, 16, 32, 64]", "microbatches: [8]"))
            args = ["sweep", str(spec), *args[2:]]
        assert main(args) == 0, (command, capsys.readouterr().err)
        capsys.readouterr()


def test_inspect_example_is_an_aicb_layout_file_the_project_made(capsys, monkeypatch):
    lines = [c for c in TOUR if c[1] == "inspect"]
    assert len(lines) == 1
    target = lines[0][2]
    assert (REPO / target).is_file() and target.startswith("workloads/generated/")
    monkeypatch.chdir(REPO)
    assert main(["inspect", target]) == 0
    assert "layout: aicb" in capsys.readouterr().out
