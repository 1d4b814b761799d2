"""The ``--out`` folder: the settings a plan ran with and every outcome as it comes, read back by
``--resume`` (which refuses a folder planned with other settings)."""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path
from typing import Any

from ..errors import ConfigError
from .candidates import Candidate
from .screen import Outcome
from .settings import PlanSettings

CANDIDATES_FILE = "candidates.jsonl"
SETTINGS_FILE = "plan-settings.json"


def read_resumed(out_dir: Path, settings: PlanSettings, resume: bool
                  ) -> dict[str, dict[str, Any]]:
    """Outcomes already in ``out_dir`` (with ``resume``), by candidate key."""
    settings_path = out_dir / SETTINGS_FILE
    mine = json.dumps(asdict(settings), sort_keys=True)
    done: dict[str, dict[str, Any]] = {}
    if resume and settings_path.exists():
        if settings_path.read_text().strip() != mine:
            raise ConfigError(f"--resume: {out_dir} holds a plan with other settings "
                              f"({settings_path}); use another --out or drop --resume")
        path = out_dir / CANDIDATES_FILE
        if path.exists():
            for line in path.read_text().splitlines():
                try:
                    row = json.loads(line)
                except json.JSONDecodeError:
                    continue   # a line cut short by an interrupted plan: run it again
                done[row["key"]] = row
    out_dir.mkdir(parents=True, exist_ok=True)
    settings_path.write_text(mine + "\n")
    if not resume:
        (out_dir / CANDIDATES_FILE).write_text("")
    return done


def outcome_from_row(c: Candidate, row: dict[str, Any]) -> Outcome:
    return Outcome(c, row["makespan_ns"], row["p95_ns"], row["peak_memory_bytes"],
                   row["bubble_ratio"], None, row["engine"], row["feasible"], row["reason"],
                   lower_bound_ns=row.get("lower_bound_ns"), runtimes=row.get("runtimes"))
