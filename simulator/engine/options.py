"""Run-time choices that are not part of the workload or the system, in the engine's terms.

A run's options are written and checked once, as :class:`simulator.run_options.RunOptions`;
:meth:`~simulator.run_options.RunOptions.engine_options` makes the one EngineOptions a run's
engine reads (bytes, a sigma, (rank, factor) pairs).
"""

from __future__ import annotations

from typing import NamedTuple

from ..errors import ConfigError
from ..system.runtime_profile import P2P_MODES   # re-exported: the modes p2p may name

__all__ = ["EngineOptions", "P2P_MODES", "parse_slow_rank"]


# a NamedTuple, not a dataclass: start-up (simulator/__init__.py)
class EngineOptions(NamedTuple):
    """``p2p``: ``async`` (isend/irecv: a send never waits for its receiver), ``blocking`` (a send
    completes when the matching receive is posted and the data is across; document 001's naive
    order, which deadlocks 1F1B), ``batched`` (Megatron's fused send/recv pairs,
    batch_isend_irecv: adjacent sends and receives are posted together and complete together),
    ``torch`` (torch.distributed.pipelining on gloo: rendezvous transfers, torch's single-stage
    rules for gpipe and 1f1b, its multi-stage rules - receives posted early, sends waited at the
    end of the step - for every other schedule; ``torch-single`` / ``torch-multi`` force one;
    see docs/model.md). None: the system's ``runtime.p2p`` (``async`` unless it says otherwise).

    ``jitter_sigma``: compute times scaled by seeded lognormal noise of mean 1; ``slow_ranks``:
    (rank, factor) pairs multiplying one rank's compute; ``memory_limit_bytes``: an overflow is an
    OutOfMemoryError. Not checked here: RunOptions checked the values it was made from.
    """

    p2p: str | None = None
    memory_limit_bytes: float | None = None
    jitter_sigma: float = 0.0
    seed: int = 0
    slow_ranks: tuple[tuple[int, float], ...] = ()
    trace_layers: bool = False
    layer_by_layer: bool = False   # reference path: one SimPy event per layer state (slower)


def parse_slow_rank(text: str) -> tuple[int, float]:
    """``"2:1.5"`` -> (2, 1.5)."""
    rank, sep, factor = text.partition(":")
    try:
        if not sep:
            raise ValueError
        r, f = int(rank), float(factor)
    except ValueError:
        raise ConfigError(f"--slow-rank: expected RANK:FACTOR like 2:1.5, got {text!r}") from None
    if r < 0 or not f > 0:
        raise ConfigError(f"--slow-rank: expected RANK >= 0 and FACTOR > 0, got {text!r}")
    return r, f
