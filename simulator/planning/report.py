"""A plan's answer: the ranked outcomes with their counts (:class:`Plan`, ``--json``'s shape), the
``pipesim run`` command of a candidate, and the refusal when nothing fits."""

from __future__ import annotations

import shlex
from dataclasses import dataclass, field
from typing import Any

from ..errors import ConfigError
from ..units import fmt_bytes
from ..workload.stage_layers import PipelineSplit
from .screen import Outcome
from .settings import PlanSettings, recompute_options, state_options


@dataclass
class Plan:
    settings: PlanSettings
    outcomes: list[Outcome]            # ranked: feasible first by the objective, then the rest
    memory_limit_bytes: float
    objective: str                     # "makespan_ns" or "p95_ns"
    notes: list[str] = field(default_factory=list)
    screened: int = 0                  # candidates run in this call (not taken from --resume)
    resumed: int = 0                   # taken from --out's candidates (--resume)
    pruned: int = 0                    # not run: their lower bound was above the best
    ruled_out: int = 0                 # not run: their sizes alone rule them out
    # actions counted against --max-work: the sure part before any ran, then each later round,
    # retry and synthesis as it came (the budget's estimate of the whole plan)
    work_estimate: int = 0
    work_done: int = 0                 # actions of the screens that ran
    # what may change the answer: candidates --max-work left unscreened
    warnings: list[str] = field(default_factory=list)

    @property
    def best(self) -> Outcome:
        return self.outcomes[0]

    def to_dict(self) -> dict[str, Any]:
        best = self.best.row()
        return {"workload": self.settings.workload, "gpus": self.settings.gpus,
                "memory_limit_bytes": self.memory_limit_bytes, "objective": self.objective,
                "runtime": self.settings.runtime,
                "counts": {"candidates": len(self.outcomes), "screened": self.screened,
                           "resumed": self.resumed, "pruned": self.pruned,
                           "ruled_out": self.ruled_out, "work_estimate": self.work_estimate,
                           "work_done": self.work_done},
                "candidates": [o.row() for o in self.outcomes], "best": best,
                "notes": list(self.notes)}



def command_for(settings: PlanSettings, o: Outcome, schedule_file: str | None = None) -> str:
    """The ``pipesim run`` command that reproduces ``o``'s ``makespan_ns`` (where the
    iterations overlap, the mean of its ``iteration_times_ns`` after the first)."""
    c = o.candidate
    words = ["pipesim", "run", c.workload or settings.workload, "--gpus", str(settings.gpus),
             "--pp", str(c.pp), "-m", str(c.microbatches), "--vpp", str(c.vpp)]
    if schedule_file is not None:
        words += ["--schedule-file", schedule_file]
    else:
        words += ["-s", c.schedule]
        for key, value in c.options.items():
            words += ["-O", f"{key}={value}"]
    for flag in PipelineSplit(*c.split).flags() if c.split else ():
        words += flag.split()
    if c.recompute != "file":
        words += ["--recompute", c.recompute]
    for key, value in recompute_options(settings.recompute_grouping, c.recompute).items():
        words += ["--" + key.replace("_", "-"), str(value)]
    state = state_options(settings.state, c.shard_ranks)
    if settings.runtime == "megatron":
        state["megatron_ddp"] = True
    for key, value in sorted(state.items(), key=lambda kv: kv[0] != "megatron_ddp"):
        words += ["--" + key.replace("_", "-")] + ([] if value is True else [str(value)])
    if settings.system is not None:
        words += ["--system", settings.system]
    if settings.calibration is not None:
        words += ["--calibration", settings.calibration]
    if settings.rank_order is not None:   # the launch's, not the system file's
        words += ["--set", f"topology.order={settings.rank_order}"]
    if settings.p2p is not None:
        words += ["--p2p", settings.p2p]
    if settings.memory_limit_gib is not None:
        words += ["--memory-limit", f"{settings.memory_limit_gib:g}"]
    if settings.jitter > 0:
        words += ["--jitter", f"{settings.jitter:g}", "--iterations",
                  str(max(settings.iterations, c.runs)), "--seed", str(settings.seed)]
    elif c.runs > 1:
        words += ["--iterations", str(c.runs)]
    if settings.max_actions is not None:
        words += ["--max-actions", str(settings.max_actions)]
    return shlex.join(words)


def objective_of(o: Outcome, objective: str) -> float:
    value = getattr(o, objective)
    return value if value is not None else o.makespan_ns


def judge_memory(outcomes: list[Outcome], limit: float) -> None:
    if limit <= 0:
        return
    for o in outcomes:
        if o.feasible and o.peak_memory_bytes > limit:
            o.feasible = False
            o.reason = (f"peak memory {fmt_bytes(o.peak_memory_bytes)} per GPU over the limit "
                        f"{fmt_bytes(limit)}")


def no_fit(outcomes: list[Outcome], limit: float, settings: PlanSettings,
            unretried: str = "") -> None:
    ran = [o for o in outcomes if o.peak_memory_bytes is not None]
    if not ran and settings.runtime is not None:
        refused = [o.reason for o in outcomes
                   if o.reason and o.reason.startswith(f"{settings.runtime} does not run it")]
        if refused:
            raise ConfigError(f"--runtime {settings.runtime}: no candidate it runs on --gpus "
                              f"{settings.gpus}; the first refused: {refused[0]}")
    if not ran:
        first = next((o.reason for o in outcomes if o.reason), "no candidate")
        raise ConfigError(f"{settings.workload}: no candidate could run on --gpus "
                          f"{settings.gpus}; the first reason: {first}")
    low = min(ran, key=lambda o: (o.peak_memory_bytes, o.candidate.index))
    c = low.candidate
    option = ("--memory-limit" if settings.memory_limit_gib is not None
              else "the system's memory.capacity_gib (or give --memory-limit)")
    raise ConfigError(f"--memory-limit {fmt_bytes(limit)}: no feasible configuration; the "
                      f"smallest peak memory found is {fmt_bytes(low.peak_memory_bytes)} per GPU "
                      f"(pp {c.pp}, vpp {c.vpp}, {c.schedule}"
                      f"{', full recompute' if c.recompute == 'full' else ''}); raise {option}, "
                      f"add GPUs (--gpus) or lower {settings.batch_flag}{unretried}")
