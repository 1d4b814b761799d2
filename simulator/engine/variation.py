"""Run-to-run variation: a slow rank, and seeded lognormal jitter of compute times.

Each rank draws from its own stream, seeded by (seed, rank), in its own order, so the result
does not depend on how the ranks' events interleave: same seed, same result.
"""

from __future__ import annotations

import math

from .options import EngineOptions
from .program import StepCost


class RankVariation:
    """Compute-time factors for one rank: slow-rank factor × exp(N(-σ²/2, σ)) (mean 1)."""

    def __init__(self, options: EngineOptions, rank: int) -> None:
        self.slow = 1.0
        for r, f in options.slow_ranks:
            if r == rank:
                self.slow *= f
        self.sigma = options.jitter_sigma
        self.rng = None
        if self.sigma > 0:
            import numpy as np  # only for jitter: keeps `pipesim run` start-up light

            self.rng = np.random.default_rng([options.seed, rank])
        self.mu = -0.5 * self.sigma * self.sigma

    @classmethod
    def of(cls, options: EngineOptions, rank: int) -> "RankVariation | None":
        v = cls(options, rank)
        return None if v.rng is None and v.slow == 1.0 else v

    def duration(self, cost: StepCost) -> float:
        """The step's duration with its compute (not its collectives) scaled."""
        factor = self.slow
        if self.rng is not None:
            factor *= math.exp(self.rng.normal(self.mu, self.sigma))
        if cost.paired:
            return max(cost.compute * factor, cost.comm)
        return cost.compute * factor + cost.comm
