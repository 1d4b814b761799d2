"""Source document 000's event lines (``pipesim run --log-level debug``)."""

from __future__ import annotations

import logging

from ..schedules.phases import COOLDOWN, WARMUP
from ..schedules.action import Kind

log = logging.getLogger("pipesim.engine")

_KIND_WORD = {Kind.F: "forward", Kind.B: "backward", Kind.I: "input-gradient backward",
              Kind.W: "weight-gradient backward"}


def log_step(rank: int, acts: tuple, phases: tuple, now: float, starting: bool,
             virtual: bool) -> None:
    """``[WARMUP] Stage 0 starting forward for microbatch 0``, ``[PP_FWD_DONE] ...`` and so on."""
    for a, phase in zip(acts, phases):
        if not starting:
            tag = "PP_FWD_DONE" if a.kind == Kind.F else "PP_BWD_DONE"
            log.debug("t=%.0f [%s] Stage %d completed %s for microbatch %d", now, tag, rank,
                      _KIND_WORD[a.kind], a.microbatch)
            continue
        if phase == WARMUP:
            tag = "WARMUP"
        elif phase == COOLDOWN:
            tag = "COOLDOWN"
        else:
            tag = "STEADY-1F" if a.kind == Kind.F else "STEADY-1B"
        chunk = f" (virtual stage {a.stage})" if virtual else ""
        log.debug("t=%.0f [%s] Stage %d starting %s for microbatch %d%s", now, tag, rank,
                  _KIND_WORD[a.kind], a.microbatch, chunk)


def log_complete(rank: int, now: float) -> None:
    log.debug("t=%.0f [PP_COMPLETE] Stage %d finished all microbatches", now, rank)
