"""Run-time choices that are not part of the workload or the system."""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import ConfigError
from ..system.runtime_profile import P2P_MODES

__all__ = ["EngineOptions", "P2P_MODES", "parse_slow_rank"]


@dataclass(frozen=True)
class EngineOptions:
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
    OutOfMemoryError.
    """

    p2p: str | None = None
    memory_limit_bytes: float | None = None
    jitter_sigma: float = 0.0
    seed: int = 0
    slow_ranks: tuple[tuple[int, float], ...] = ()
    trace_layers: bool = False
    layer_by_layer: bool = False   # reference path: one SimPy event per layer state (slower)

    def __post_init__(self) -> None:
        if self.p2p is not None and self.p2p not in P2P_MODES:
            raise ConfigError(f"--p2p: expected one of {', '.join(P2P_MODES)}, got {self.p2p!r}")
        if not self.jitter_sigma >= 0:
            raise ConfigError(f"--jitter: expected a non-negative sigma, got {self.jitter_sigma!r}")
        if self.memory_limit_bytes is not None and not self.memory_limit_bytes > 0:
            raise ConfigError(f"--memory-limit: expected a positive size in GB, got "
                              f"{self.memory_limit_bytes / 1e9!r}")
        if self.layer_by_layer and (self.jitter_sigma > 0 or self.slow_ranks):
            raise ConfigError("--layer-by-layer: the reference path runs without --jitter and "
                              "--slow-rank")
        for rank, factor in self.slow_ranks:
            if not factor > 0:
                raise ConfigError(f"--slow-rank: expected RANK:FACTOR with FACTOR > 0, got "
                                  f"{rank}:{factor}")


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
