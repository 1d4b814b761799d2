"""Numeric verification: run a schedule on a small numpy MLP and compare with one device.

``verify_schedule(schedule)`` executes the schedule's per-rank op lists (after the comm pass) on
real arrays, trains the same model on one device, and reports loss and gradient errors plus the
executor's activation peaks beside the simulator's. See docs/verification.md.
"""

from .compare import (RankActivations, VerificationFailed, VerifyReport, array_errors,
                      verify_schedule)
from .executor import Execution, ExecutionDeadlock, RankStats, execute
from .model import Model, build_model, make_batch
from .reference import ReferenceRun, train
from .semantics import Training, training_of

__all__ = ["VerifyReport", "VerificationFailed", "RankActivations", "verify_schedule",
           "array_errors", "Execution", "ExecutionDeadlock", "RankStats", "execute", "Model",
           "build_model", "make_batch", "ReferenceRun", "train", "Training", "training_of"]
