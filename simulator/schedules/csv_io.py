"""Schedules as CSV in PyTorch's format: one row per rank, one action string per cell.

This is what ``torch.distributed.pipelining``'s ``_dump_csv`` writes and ``_load_csv`` reads
(torchtitan loads custom schedules this way), so a schedule can go both ways between pipesim and
torch. Each cell is one step of the rank's ``steps``. Reading accepts what torch writes: empty
cells (torch's idle steps) are skipped, as are FSDP actions (``0UNSHARD``, ``0REDUCE_GRAD``...)
and, unless ``lowered`` asks to keep them, torch's communication actions (``2SEND_F1``,
``1RECV_B0``): pipesim adds communication itself (``comm_pass``). With ``lowered`` they are read
into a lowered schedule, as torch's comm-action CSV (``_dump_csv(format="comms")``) holds
them. An overlapped pair is torch's ``(0F3;7B1)OVERLAP_F_B`` cell; two cells in the old
``0F3@k`` notation are still read as one (deprecated, for one release). Writing produces
torch's notation, pairs as ``OVERLAP_F_B`` cells, and a lowered schedule's communication
actions as they are in its steps.

Positions in errors are 0-based cell indices in the row; ranks are 0-based row indices.
"""

from __future__ import annotations

import csv
import io
import re
from pathlib import Path
from typing import Sequence

from ..errors import ConfigError, ScheduleError
from ..input_file import MAX_CSV_BYTES, InputFileError, read_input_bytes
from .action import Action, Kind
from .runtimes import torch_cannot_run
from .schedule import Schedule, loop_placement, v_placement
from .validate import validate

_COMM = re.compile(r"^\d+(SEND_F|RECV_F|SEND_B|RECV_B)\d+$")
_FSDP = re.compile(r"^\d+(UNSHARD|RESHARD|REDUCE_GRAD)\d*$")
_OVERLAP = re.compile(r"^\((.*)\)OVERLAP_F_B$")


def load_schedule_csv(path: str | Path, name: str = "custom", vpp: int | None = None,
                      placement: str | Sequence[int] | None = None,
                      check: bool = True, lowered: bool = False) -> Schedule:
    """Read a schedule; pp = number of rows, stages and microbatches from the largest indices.

    ``vpp`` defaults to (largest stage + 1) / pp. ``placement`` is ``"loop"``, ``"v"`` or one rank
    per stage; by default V if every rank r holds exactly stages {r, 2P-1-r}, else loop. With
    ``check`` the result is validated (:func:`validate`) before it is returned. With ``lowered``
    the SEND/RECV cells are kept: the result is a lowered schedule (``meta["lowered"]`` is
    ``"at-use"`` when every receive is right before the step that needs it, else ``"early"``).
    """
    path = Path(path)

    try:
        data = read_input_bytes(path, MAX_CSV_BYTES)
    except InputFileError as err:
        raise ScheduleError(f"{path}: cannot read: {err.problem}") from None
    try:
        rows = list(csv.reader(io.StringIO(data.decode("utf-8"), newline="")))
    except (csv.Error, UnicodeDecodeError) as err:
        raise ScheduleError(f"{path}: not a CSV file: {err}") from None
    while rows and not any(cell.strip() for cell in rows[-1]):
        rows.pop()  # trailing blank lines
    if not rows:
        raise ScheduleError(f"{path}: expected one row of actions per rank, found no rows")

    ranks: list[tuple[Action, ...]] = []
    skipped = 0
    for r, row in enumerate(rows):
        acts: list[Action] = []
        for c, cell in enumerate(row):
            text = cell.strip()
            if not text:
                continue
            if _FSDP.match(text):
                skipped += 1
                continue
            if _COMM.match(text):
                if lowered:
                    acts.append(Action.parse(text))
                else:
                    skipped += 1
                continue
            overlap = _OVERLAP.match(text)
            if overlap:
                halves = [h.strip() for h in overlap.group(1).split(";") if h.strip()]
                if len(halves) != 2:
                    raise ScheduleError(f"{path}: an OVERLAP_F_B cell holds two actions "
                                        f"'(xFm;yBn)', found {len(halves)}", r, c, text)
                first, second = (_parse_cell(path, h, r, c) for h in halves)
                acts.append(Action.overlap(first, second))
                continue
            acts.append(_parse_cell(path, text, r, c))
        ranks.append(tuple(acts))

    pp = len(ranks)
    all_acts = [h for acts in ranks for a in acts if not a.is_comm for h in a.halves]
    if not all_acts:
        raise ScheduleError(f"{path}: no compute actions (F, B, I, W) in {pp} row(s)")
    n_stages = max(a.stage for a in all_acts) + 1
    if vpp is None:
        vpp = -(-n_stages // pp)
    elif pp * vpp < n_stages:
        raise ScheduleError(f"{path}: vpp {vpp} gives {pp * vpp} stages for {pp} ranks, but the "
                            f"file uses stage {n_stages - 1}")
    microbatches = max(a.microbatch for a in all_acts) + 1
    stage_map = _placement(path, placement, pp, vpp, ranks)
    meta: dict = {"source": str(path), "skipped_comm_actions": skipped}
    if lowered:
        meta["lowered"] = _receives(ranks)
    sched = Schedule(name, pp, vpp, microbatches, stage_map, tuple(ranks), meta=meta)
    if check:
        validate(sched)
    return sched


def write_schedule_csv(schedule: Schedule, path: str | Path) -> None:
    """Write one row per rank, one cell per step, in torch's notation (pairs as
    ``(xFm;yBn)OVERLAP_F_B`` cells, a lowered schedule's ``2SEND_F1``/``3RECV_F1`` cells as
    they are); a schedule torch's runtime cannot run is refused with the reason."""
    why = torch_cannot_run(schedule)
    if why is not None:
        raise ConfigError(f"--csv: {why}, so no CSV is written")
    with open(path, "w", newline="") as fh:
        writer = csv.writer(fh)
        for row in schedule.step_strings():
            writer.writerow(row)


def _receives(ranks: list[tuple[Action, ...]]) -> str:
    """``"at-use"`` when each RECV is in the run of receives right before the compute step that
    consumes its data, else ``"early"``: where a lowered schedule read from a file posts its
    receives."""
    for acts in ranks:
        pending: set[tuple] = set()
        for a in acts:
            if a.kind in (Kind.RECV_F, Kind.RECV_B):
                pending.add((a.stage, a.kind == Kind.RECV_F, a.microbatch))
            elif a.kind in (Kind.SEND_F, Kind.SEND_B):
                if pending:
                    return "early"
            else:
                used = {(h.stage, h.kind == Kind.F, h.microbatch) for h in a.halves}
                if not pending <= used:
                    return "early"
                pending = set()
        if pending:
            return "early"
    return "at-use"


def _parse_cell(path: Path, text: str, rank: int, col: int) -> Action:
    try:
        return Action.parse(text)
    except ScheduleError:
        raise ScheduleError(f"{path}: expected an action like '3F1', '0B2', '1I0', '2W5', "
                            f"'(0F3;7B1)OVERLAP_F_B' or a communication action, found {text!r}",
                            rank, col, text) from None


def _placement(path: Path, placement: str | Sequence[int] | None, pp: int, vpp: int,
               ranks: list[tuple[Action, ...]]) -> tuple[int, ...]:
    if placement is None:
        v = v_placement(pp)
        held = [{h.stage for a in acts if not a.is_comm for h in a.halves} for acts in ranks]
        if vpp == 2 and all(h == {r, 2 * pp - 1 - r} for r, h in enumerate(held)):
            return v
        return loop_placement(pp, vpp)
    if isinstance(placement, str):
        key = placement.lower()
        if key == "loop":
            return loop_placement(pp, vpp)
        if key == "v":
            if vpp != 2:
                raise ScheduleError(f"{path}: placement 'v' holds 2 stages per rank, but the "
                                    f"schedule has vpp {vpp}")
            return v_placement(pp)
        raise ScheduleError(f"{path}: placement: expected 'loop', 'v' or one rank per stage, "
                            f"found {placement!r}")
    stage_map = tuple(int(r) for r in placement)
    if len(stage_map) != pp * vpp:
        raise ScheduleError(f"{path}: placement: expected one rank per stage ({pp * vpp}), "
                            f"found {len(stage_map)}")
    return stage_map
