"""Run a schedule on the numpy model and compare it with single-device training.

Errors are absolute (``|pipeline - reference|``, largest element) and relative per array
(largest absolute error of an array over the largest magnitude of its reference), maximised over
every parameter array (weights and biases of every layer) of every minibatch. The executor's
activation peaks are set beside :func:`simulator.metrics.phases.peak_inflight`, the simulator's
figures from the order alone; ``ok`` needs the numbers within ``tolerance`` and the peaks equal.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..errors import PipesimError
from ..schedules.phases import peak_inflight
from ..schedules.schedule import Schedule
from ..schedules.validate import validate as check
from .executor import Execution, execute
from .model import Model, Params, build_model, make_batch
from .reference import ReferenceRun, train
from .semantics import Training, training_of

TOLERANCE = 1e-10
ROWS = 2       # samples per microbatch
LR = 0.1       # SGD learning rate (matters only where updates feed later minibatches: 2bw)


class VerificationFailed(PipesimError):
    """The schedule ran but does not reproduce single-device training (CLI exit 1)."""

    exit_code = 1


@dataclass(frozen=True)
class RankActivations:
    rank: int
    executor: tuple[int, int]   # (microbatches, stage-microbatch activations) held at most
    simulator: tuple[int, int]  # peak_inflight of the rank's action order
    peak_bytes: int             # bytes the executor's stash held at most

    @property
    def agree(self) -> bool:
        return self.executor == self.simulator


@dataclass(frozen=True)
class VerifyReport:
    schedule: str
    pp: int
    vpp: int
    microbatches: int            # per iteration (minibatch)
    loss_error: float
    max_abs_grad_error: float
    max_rel_grad_error: float
    ok: bool
    tolerance: float
    semantics: str
    iterations: int
    layers: int
    widths: tuple[int, ...]
    seed: int
    losses: tuple[float, ...]    # pipeline losses, one per minibatch
    max_weight_error: float      # parameters after the run's SGD updates
    activations: tuple[RankActivations, ...] = field(default=())
    peak_weight_versions: int = 1
    ops: int = 0

    @property
    def activations_agree(self) -> bool:
        return all(r.agree for r in self.activations)

    @property
    def largest_error(self) -> float:
        return max(self.loss_error, self.max_abs_grad_error, self.max_rel_grad_error,
                   self.max_weight_error)

    def failure(self) -> str | None:
        """Why the report is not ok, in one line (None when it is)."""
        why = []
        if self.largest_error > self.tolerance:
            why.append(f"largest error {self.largest_error:.1e} exceeds the tolerance "
                       f"{self.tolerance:.0e}")
        bad = [str(r.rank) for r in self.activations if not r.agree]
        if bad:
            why.append(f"activation peaks differ from the simulator's on rank(s) "
                       f"{', '.join(bad)}")
        if not why:
            return None
        return (f"{self.schedule} (pp {self.pp}, vpp {self.vpp}, {self.microbatches} "
                f"microbatches) does not match single-device training: " + "; ".join(why))

    def to_dict(self) -> dict:
        """JSON form: the eight keys ``pipesim verify --json`` promises first, then details."""
        return {
            "schedule": self.schedule, "pp": self.pp, "vpp": self.vpp,
            "microbatches": self.microbatches, "loss_error": self.loss_error,
            "max_abs_grad_error": self.max_abs_grad_error,
            "max_rel_grad_error": self.max_rel_grad_error, "ok": self.ok,
            "tolerance": self.tolerance, "semantics": self.semantics,
            "iterations": self.iterations, "layers": self.layers, "widths": list(self.widths),
            "seed": self.seed, "losses": list(self.losses),
            "max_weight_error": self.max_weight_error,
            "activations_agree": self.activations_agree,
            "activations": [{"rank": r.rank, "executor": list(r.executor),
                             "simulator": list(r.simulator), "peak_bytes": r.peak_bytes}
                            for r in self.activations],
            "peak_weight_versions": self.peak_weight_versions, "ops": self.ops,
        }


def verify_schedule(schedule: Schedule, *, layers: int | None = None, seed: int = 0,
                    rows: int = ROWS, lr: float = LR, tolerance: float = TOLERANCE,
                    validate: bool = True) -> VerifyReport:
    """Train the numpy MLP (``layers`` layers, default 2 per chunk + 1) as ``schedule`` orders it.

    With ``validate`` the schedule first goes through the validator (a ScheduleError there is
    raised as is); without it, broken schedules reach the executor, which raises its own errors.
    """
    if validate:
        check(schedule)
    training = training_of(schedule)
    n_layers = 2 * schedule.n_chunks + 1 if layers is None else layers
    model = build_model(n_layers, schedule.n_chunks, seed)
    xs, ts = make_batch(model, schedule.microbatches, rows, seed)
    run = execute(schedule, model, xs, ts, lr=lr)
    ref = train(model, xs, ts, training.microbatches_per_iteration, lr, training.staleness)
    return _report(schedule, training, model, seed, tolerance, run, ref)


def _report(schedule: Schedule, training: Training, model: Model, seed: int, tolerance: float,
            run: Execution, ref: ReferenceRun) -> VerifyReport:
    loss_error = max(abs(a - b) for a, b in zip(run.losses, ref.losses, strict=True))
    abs_err = rel_err = 0.0
    for got, want in zip(run.grads, ref.grads, strict=True):
        a, r = array_errors(got, want)
        abs_err, rel_err = max(abs_err, a), max(rel_err, r)
    weight_error, _ = array_errors(run.final_params, ref.final_params)
    acts = tuple(
        RankActivations(st.rank, (st.peak_microbatches, st.peak_activations),
                        peak_inflight(schedule.ranks[st.rank]), st.peak_bytes)
        for st in run.ranks)
    ok = (max(loss_error, abs_err, rel_err, weight_error) <= tolerance
          and all(r.agree for r in acts))
    return VerifyReport(
        schedule.name, schedule.pp, schedule.vpp, training.microbatches_per_iteration,
        loss_error, abs_err, rel_err, ok, tolerance, training.semantics, training.iterations,
        model.n_layers, model.widths, seed, run.losses, weight_error, acts,
        max(run.peak_weight_versions), run.ops)


def array_errors(got: Params, want: Params) -> tuple[float, float]:
    """(max absolute error, max per-array relative error) over matching (W, b) lists."""
    abs_err = rel_err = 0.0
    for pair_got, pair_want in zip(got, want, strict=True):
        for g, w in zip(pair_got, pair_want):
            err = float(np.max(np.abs(g - w)))
            scale = float(np.max(np.abs(w)))
            abs_err = max(abs_err, err)
            rel_err = max(rel_err, err / scale if scale > 0 else err)
    return abs_err, rel_err
