"""Which weights each microbatch is trained with, and what single-device training to compare with.

A flushing schedule (everything but PipeDream-2BW) is one iteration: every microbatch runs on the
initial weights and the gradient is the mean over all M microbatches; the reference is plain
single-device training on the same M microbatches.

A schedule without a flush (``flush=False``) must say in ``meta`` which weight version each
microbatch runs with (``weight_version``: the number of optimizer steps included) and how many
microbatches make a minibatch (``microbatches_per_iteration``); the executor follows that claim.
The reference follows PipeDream-2BW's paper instead (Narayanan et al., ICML'21, §3.1):
``W(t+1) = W(t) - lr * grad f_t(W(t-1))``, one step stale, with ``W(-1) = W(0)`` (the first two
minibatches both run on the initial weights), so a wrong claim shows up as wrong gradients.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import ConfigError
from ..schedules.schedule import Schedule

SYNCHRONOUS = "synchronous"
TWO_BW = "pipedream-2bw"


@dataclass(frozen=True)
class Training:
    semantics: str
    iterations: int
    microbatches_per_iteration: int
    weight_version: tuple[int, ...]  # per microbatch: optimizer steps in the weights it uses
    staleness: int                   # reference: minibatch i's gradient at W(max(i-staleness, 0))

    def minibatch(self, microbatch: int) -> int:
        return microbatch // self.microbatches_per_iteration


def training_of(schedule: Schedule) -> Training:
    """The training semantics a schedule implements (see the module docstring)."""
    if schedule.flush:
        return Training(SYNCHRONOUS, 1, schedule.microbatches, (0,) * schedule.microbatches, 0)
    meta = schedule.meta
    versions = meta.get("weight_version")
    per_iter = meta.get("microbatches_per_iteration")
    if versions is None or per_iter is None:
        raise ConfigError(f"schedule {schedule.name!r} has no flush but its meta does not declare "
                          f"'weight_version' and 'microbatches_per_iteration'; verify cannot tell "
                          f"which weights each microbatch uses")
    if len(versions) != schedule.microbatches:
        raise ConfigError(f"schedule {schedule.name!r}: meta 'weight_version' has "
                          f"{len(versions)} entries, expected one per microbatch "
                          f"({schedule.microbatches})")
    if per_iter < 1 or schedule.microbatches % per_iter:
        raise ConfigError(f"schedule {schedule.name!r}: {schedule.microbatches} microbatches do "
                          f"not split into minibatches of {per_iter}")
    staleness = meta.get("staleness", 1)
    if staleness != 1:
        raise ConfigError(f"schedule {schedule.name!r}: staleness {staleness} is not "
                          f"PipeDream-2BW's 1; verify knows no reference for it")
    return Training(TWO_BW, schedule.microbatches // per_iter, per_iter,
                    tuple(int(v) for v in versions), 1)
