"""Source document 000's event lines (``pipesim run --log-level debug``).

``logging`` is imported only once something asks for it (start-up: a run that logs nothing does
not load it); until it is imported nothing can have turned the event log on."""

from __future__ import annotations

import sys

from ..schedules.phases import COOLDOWN, WARMUP
from ..schedules.action import Kind

LOGGER = "pipesim.engine"


def debug_enabled() -> bool:
    """Whether the event lines are wanted (``pipesim.engine`` at DEBUG)."""
    logging = sys.modules.get("logging")
    return logging is not None and logging.getLogger(LOGGER).isEnabledFor(logging.DEBUG)


def _log():
    import logging  # deferred: see the module docstring (start-up)

    return logging.getLogger(LOGGER)

_KIND_WORD = {Kind.F: "forward", Kind.B: "backward", Kind.I: "input-gradient backward",
              Kind.W: "weight-gradient backward"}


def log_step(rank: int, acts: tuple, phases: tuple, now: float, starting: bool,
             virtual: bool) -> None:
    """``[WARMUP] Stage 0 starting forward for microbatch 0``, ``[PP_FWD_DONE] ...`` and so on."""
    log = _log()
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
    _log().debug("t=%.0f [PP_COMPLETE] Stage %d finished all microbatches", now, rank)
