"""PipeDream-2BW (Narayanan et al., ICML'21): 1F1B with no flush, two weight versions, 1-stale.

``iterations`` minibatches of M microbatches run as one continuous 1F1B stream: iteration i's
microbatches are numbered i*M .. i*M+M-1, and no rank drains between minibatches (the only
warm-up is before microbatch 0, the only cool-down after the last one). Each stage applies its
optimizer step after the backward of a minibatch's last microbatch; the new weights are first
used by the minibatch after next (W(t+1) = W(t) - lr * grad f(W(t-1))), so minibatch i runs
on version max(i-1, 0) and a stage never holds more than two versions. That needs M >= P: with
fewer microbatches per minibatch, three minibatches can be in flight on one stage.
"""

from __future__ import annotations

from ...errors import ConfigError
from ..registration import register
from ..schedule import Schedule, loop_placement
from .one_f_one_b import one_f_one_b_rank


def _closed_form(pp: int, microbatches: int, vpp: int) -> float:
    # One fill and one drain for the whole run; `microbatches` is the schedule's total, I*M.
    return (pp - 1) / (microbatches + pp - 1)


def weight_version(microbatch: int, microbatches: int) -> int:
    """Optimizer steps included in the weights microbatch ``microbatch`` runs with (1-stale)."""
    return max(microbatch // microbatches - 1, 0)


def _sizes(pp: int, microbatches: int, vpp: int, options: dict) -> tuple[int, int]:
    iterations = options.get("iterations", 2)
    n = iterations if isinstance(iterations, int) and iterations > 0 else 1
    return pp, 2 * pp * microbatches * n


@register("2bw", summary="PipeDream-2BW: 1F1B across minibatches without a flush, two weight "
          "versions per stage, 1-stale updates; option iterations (default 2)",
          closed_form=_closed_form, formula="(P-1)/(IM+P-1), I minibatches",
          aliases=("pipedream-2bw", "two-bw"), sizes=_sizes, flushes=False)
def generate(pp: int, microbatches: int, vpp: int = 1, iterations: int = 2,
             **_: object) -> Schedule:
    if vpp != 1:
        raise ConfigError(f"--vpp: 2bw runs one chunk per rank, got --vpp {vpp}")
    if isinstance(iterations, bool) or not isinstance(iterations, int) or iterations < 1:
        raise ConfigError(f"iterations: expected a positive whole number of minibatches for 2bw, "
                          f"got {iterations!r}")
    if microbatches < pp:
        raise ConfigError(f"--microbatches: 2bw needs at least pp = {pp} microbatches per "
                          f"minibatch so that two weight versions suffice, got {microbatches}")
    total = iterations * microbatches
    ranks = tuple(one_f_one_b_rank(r, pp, total) for r in range(pp))
    return Schedule(
        "2bw", pp, 1, total, loop_placement(pp, 1), ranks, flush=False,
        meta={"weight_versions": 2, "staleness": 1, "iterations": iterations,
              "microbatches_per_iteration": microbatches,
              "weight_version": tuple(weight_version(m, microbatches) for m in range(total))},
    )
