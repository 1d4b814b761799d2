"""One plan's search: screen the candidates in rounds, pruning by lower bound, retry what does
not fit with full recompute, synthesize ``auto`` on the winning shapes, confirm and rank."""

from __future__ import annotations

import contextlib
import json
import math
from dataclasses import replace
from pathlib import Path
from typing import Any, Callable, Iterator

from ..errors import ConfigError
from ..sweep.executors import make_executor
from .bounds import ShapeBounds
from .budgets import ROUND, WorkEstimate, candidate_work
from .candidates import (AUTO, AUTO_SHAPES, COST_AWARE_PER_SHAPE, V_ZB, ZB_GREEDY, Candidate,
                         auto_candidates, v_zb_candidates, zb_greedy_candidates)
from .report import Plan, command_for, judge_memory, no_fit, objective_of
from .resume import CANDIDATES_FILE, outcome_from_row, read_resumed
from .screen import (Outcome, ScreenContext, fits, not_launchable, refused_before_running,
                     run_candidate, screen_one)
from .settings import PlanSettings



class Search:
    """One plan's screening state: the candidates so far, their outcomes and lower bounds, the
    work spent against ``--max-work``, the counters the report prints, and the candidates file
    (``--out``) each outcome is appended to as it comes."""

    def __init__(self, settings: PlanSettings, system: Any, workloads: dict[str, Any],
                 candidates: list[Candidate], limit: float, ctx: ScreenContext,
                 work: WorkEstimate, work_bound: int, executor: str, jobs: int | None,
                 address: str | None, progress: Callable[[int, int], None] | None,
                 shape_bound: ShapeBounds) -> None:
        self.settings, self.system, self.workloads = settings, system, workloads
        self.candidates, self.limit, self.ctx = candidates, limit, ctx
        # the work counted against --max-work: what check_work counted, then each screen the
        # search adds beyond it; ``done``: the work of what ran (the estimate's check)
        self.work, self.work_bound, self.counted = work.total, work_bound, set(work.counted)
        self.done = 0
        self.executor, self.jobs, self.address, self.progress = executor, jobs, address, progress
        self.notes: list[str] = []
        self.warnings: list[str] = []
        self.left_out = ""   # the no-fit error's last words: what the budget left out
        self.shape_bound = shape_bound
        self.bounds: dict[int, float | None] = {}
        # under jitter the ranking is by p95, which a bound on the plain makespan does not bound
        self.prune = settings.prune and settings.jitter == 0
        self.floor: dict[int, float] = {}   # a recompute retry: its own run without recompute
        self.outcomes: dict[int, Outcome] = {}
        self.resumed: dict[str, dict[str, Any]] = {}
        self.sink = None
        self.workers = contextlib.ExitStack()   # the executor, open until close()
        self._pool = None
        self.total = len(candidates) + AUTO_SHAPES * COST_AWARE_PER_SHAPE
        self.screened = self.resumed_count = self.pruned_count = self.ruled_out = 0

    def open(self, out_dir: str | Path | None, resume: bool) -> None:
        """Read what ``out_dir`` already holds (with ``resume``) and append to it from now."""
        if out_dir is not None:
            out_dir = Path(out_dir)
            self.resumed = read_resumed(out_dir, self.settings, resume)
            self.sink = open(out_dir / CANDIDATES_FILE, "a")
        elif resume:
            raise ConfigError("--resume: needs --out DIR (the folder of the plan to complete)")

    def close(self) -> None:
        if self.sink is not None:
            self.sink.close()
        self.workers.close()

    def _map(self, tasks: list[tuple[ScreenContext, Candidate]]) -> Iterator[Outcome]:
        """The screens of ``tasks``: in this process for one task or ``--jobs 1`` (local), else
        on the executor, started once per plan (a pool's start-up costs about a screen's worth
        of time, so one per round would be paid a dozen times)."""
        if not tasks:
            return
        if self.executor == "local" and (self.jobs == 1 or len(tasks) == 1):
            for task in tasks:
                yield screen_one(task)
            return
        if self._pool is None:
            self._pool = self.workers.enter_context(
                make_executor(self.executor, self.jobs, self.address))
        yield from self._pool.map_unordered(screen_one, tasks)

    def lower_bound(self, c: Candidate) -> float | None:
        """The shape's bound (below), raised for a full-recompute retry to the makespan of the
        same candidate without recompute: replaying forwards only lengthens actions, and with
        the orders fixed the makespan cannot shrink."""
        base = self.shape_bound(c)
        f = self.floor.get(c.index)
        if f is None:
            return base
        return f if base is None else max(base, f)

    def _tell(self) -> None:
        if self.progress is not None:
            self.progress(len(self.outcomes), self.total)

    def _best_fitting(self) -> float:
        """The best makespan a candidate must beat to matter: of those that fit and, without
        --runtime, that Megatron-LM or torchtitan runs (the winner is one of them)."""
        any_runtime = self.settings.runtime is not None
        return min((o.makespan_ns for o in self.outcomes.values() if fits(o, self.limit)
                    and (any_runtime or not not_launchable(o))), default=math.inf)

    def record(self, o: Outcome) -> None:
        o.lower_bound_ns = self.bounds.get(o.candidate.index)
        self.outcomes[o.candidate.index] = o
        if self.sink is not None:
            self.sink.write(json.dumps(o.row()) + "\n")
            self.sink.flush()

    def screen(self, batch: list[Candidate]) -> None:
        """Run ``batch`` in rounds, cheapest lower bound first; after each round, a candidate
        whose bound is above the best fitting makespan so far is not run (it cannot win). The
        rounds have a fixed size, so what is pruned does not depend on the workers' timing."""
        todo = []
        for c in batch:
            row = self.resumed.get(c.key)
            if row is not None:
                self.outcomes[c.index] = outcome_from_row(c, row)
                self.resumed_count += 1
            else:
                todo.append(c)
        self._tell()
        bounds = self.bounds
        bounds.update((c.index, self.lower_bound(c)) for c in todo)
        todo.sort(key=lambda c: (bounds[c.index] if bounds[c.index] is not None else -1.0,
                                 c.index))
        while todo:
            best = self._best_fitting()
            keep, pruned = [], []
            for c in todo:
                b = bounds[c.index]
                (pruned if self.prune and b is not None and b > best else keep).append(c)
            for c in pruned:
                self.record(Outcome(c, reason=f"not run: its lower bound {_ms(bounds[c.index])} "
                                              f"is above the best found, {_ms(best)}"))
                self.pruned_count += 1
            if pruned:
                self._tell()
            todo, now = keep[ROUND:], keep[:ROUND]
            now, cut = self._within_work(now)
            if cut:
                self._cut(cut + todo)
                todo = []
            for o in self._map([(self.ctx, c) for c in now]):
                self.record(o)
                if o.candidate.reason is not None:   # refused by its sizes, nothing ran
                    self.ruled_out += 1
                else:
                    self.screened += 1
                    self.done += candidate_work(o.candidate, self.ctx.max_actions)
                self._tell()

    def _within_work(self, now: list[Candidate]) -> tuple[list[Candidate], list[Candidate]]:
        """The round's candidates that keep the plan within --max-work (counting those not yet
        counted), and the first one past it with the rest of the round."""
        for n, c in enumerate(now):
            if c.index in self.counted:
                continue
            w = candidate_work(c, self.ctx.max_actions)
            if self.work_bound > 0 and self.work + w > self.work_bound:
                return now[:n], now[n:]
            self.work += w
        return now, []

    def _cut(self, rest: list[Candidate]) -> None:
        """``rest`` not screened: the plan would pass --max-work (listed with the reason, and a
        note naming the limit that screens them)."""
        extra = sum(candidate_work(c, self.ctx.max_actions) for c in rest
                    if c.index not in self.counted)
        for c in rest:
            self.record(Outcome(c, reason=f"not screened: the plan would pass --max-work "
                                          f"{self.work_bound}"))
        note = (f"{len(rest)} candidate(s) not screened: the plan would pass --max-work "
                f"{self.work_bound} (pass --max-work {self.work + extra} to screen them)")
        self.warnings.append(note)   # the winner may be among them
        self.left_out += "; " + note
        self._tell()

    def retry_with_recompute(self) -> None:
        """What does not fit, once more with full recompute (less memory, more compute), while
        the plan stays within --max-work (what is not retried keeps its reason, over the memory
        limit, and a note says so)."""
        outcomes, limit = self.outcomes, self.limit
        over = [c for c in self.candidates if c.recompute == "file"
                and outcomes[c.index].peak_memory_bytes is not None
                and outcomes[c.index].peak_memory_bytes > limit]
        retry, skipped, extra = [], 0, 0
        for c in over:
            w = candidate_work(replace(c, recompute="full"), self.ctx.max_actions)
            if self.work_bound > 0 and self.work + w > self.work_bound:
                skipped += 1
                extra += w
                continue
            self.work += w
            retry.append(c)
        if skipped:
            unretried = (f"{skipped} candidate(s) over the memory limit not tried again "
                         f"with full recompute: the plan would pass --max-work "
                         f"{self.work_bound} (pass --max-work {self.work + extra} to try them)")
            self.notes.append(unretried)
            self.left_out += "; " + unretried
        over = retry
        redo = [replace(c, index=len(self.candidates) + k, recompute="full")
                for k, c in enumerate(over)]
        self.floor.update((r.index, outcomes[c.index].makespan_ns) for r, c in zip(redo, over))
        self.counted.update(r.index for r in redo)   # counted above
        self.candidates = self.candidates + redo
        self.total = len(self.candidates) + AUTO_SHAPES * COST_AWARE_PER_SHAPE
        self.screen(redo)

    def synthesize_autos(self, n_layers: int, floor_autos: int) -> None:
        """``auto`` on the pipeline degrees whose best hand-made schedule fits and is fastest,
        and ``zb-greedy`` on those of two or more ranks, synthesized while the plan stays
        within --max-work (those left out say so); the floor held for auto until now is
        counted again, on the shapes chosen."""
        outcomes, limit = self.outcomes, self.limit
        fitting = sorted((outcomes[c.index] for c in self.candidates
                          if outcomes[c.index].feasible and (
                              limit <= 0 or outcomes[c.index].peak_memory_bytes <= limit)),
                         key=lambda o: (o.makespan_ns, o.candidate.index))

        def best_shapes(least_pp: int) -> list[Candidate]:
            shapes: list[Candidate] = []
            for o in fitting:
                c = o.candidate
                if len(shapes) < AUTO_SHAPES and c.pp >= least_pp and (
                        c.tp, c.cp, c.ep, c.pp) not in {(s.tp, s.cp, s.ep, s.pp) for s in shapes}:
                    shapes.append(c)
            return shapes

        autos = auto_candidates(len(self.candidates), best_shapes(1), n_layers)
        autos += zb_greedy_candidates(len(self.candidates) + len(autos), best_shapes(2))
        autos += v_zb_candidates(len(self.candidates) + len(autos), best_shapes(2), n_layers)
        # what --runtime megatron refuses by its schedule and sizes is not laid out
        autos = [a if (why := refused_before_running(self.settings.runtime, a,
                                                     self.settings.state)) is None
                 else replace(a, reason=why) for a in autos]
        self.work -= floor_autos
        skipped, extra = 0, 0
        best_yet = self._best_fitting()
        for n, a in enumerate(autos):
            b = self.lower_bound(a)
            if self.prune and b is not None and b > best_yet:
                continue   # its bound already rules it out: screen() prunes it, nothing runs
            w = candidate_work(a, self.ctx.max_actions)
            if self.work_bound > 0 and self.work + w > self.work_bound:
                skipped += 1
                extra += w
                autos[n] = replace(a, reason=f"{a.schedule} not synthesized: the plan would "
                                             f"pass --max-work {self.work_bound}")
                continue
            self.work += w
            self.counted.add(a.index)
        if skipped:
            kinds = [f"{n} {name}" for name in (AUTO, ZB_GREEDY, V_ZB)
                     if (n := sum(1 for a in autos if a.schedule == name and a.reason
                                  and a.reason.startswith(f"{name} not synthesized")))]
            self.notes.append(f"{' and '.join(kinds)} candidate(s) not synthesized: the plan "
                              f"would pass --max-work {self.work_bound} (pass --max-work "
                              f"{self.work + extra} to synthesize them)")
        self.candidates = self.candidates + autos
        self.total = len(self.candidates)
        self.screen(autos)

    def rank(self) -> Plan:
        """Confirm the best ``confirm`` fitting candidates on the SimPy engine (with jitter when
        asked), rank by what it says, and list the rest after them."""
        settings, limit, notes = self.settings, self.limit, self.notes
        ordered = [self.outcomes[c.index] for c in self.candidates]
        objective = "p95_ns" if settings.jitter > 0 else "makespan_ns"
        judge_memory(ordered, limit)
        # by default the winner is one Megatron-LM or torchtitan launches; --runtime NAME has
        # already kept only what NAME runs
        first = (lambda o: 0) if settings.runtime is not None else not_launchable
        fits = sorted((o for o in ordered if o.feasible),
                      key=lambda o: (first(o), o.makespan_ns, o.candidate.index))
        if not fits:
            no_fit(ordered, limit, settings, self.left_out)
        confirmed = fits[:settings.confirm]
        self.done += sum(candidate_work(o.candidate, self.ctx.max_actions)
                         for o in confirmed) * settings.iterations
        for n, o in enumerate(confirmed):
            again = run_candidate(self.ctx, o.candidate, "simpy", settings.jitter,
                                  settings.iterations, settings.seed, o.schedule)
            again.lower_bound_ns = o.lower_bound_ns
            if again.feasible:
                confirmed[n] = again
            else:
                confirmed[n].feasible, confirmed[n].reason = False, again.reason
        judge_memory(confirmed, limit)
        confirmed.sort(key=lambda o: (first(o), objective_of(o, objective), o.candidate.index))
        rest = fits[settings.confirm:]
        ranked = [o for o in confirmed if o.feasible] + rest
        if not ranked:
            no_fit(ordered, limit, settings, self.left_out)
        dropped = [o for o in confirmed if not o.feasible] + [o for o in ordered if not o.feasible]
        if settings.jitter > 0 and rest:
            notes.append(f"p95 is measured for the {len(confirmed)} confirmed candidates only; "
                         "the others are ranked by their evaluated makespan")
        best = ranked[0]
        faster = sum(1 for o in ranked if first(o) and o.makespan_ns < best.makespan_ns)
        if faster and not first(best):
            notes.append(f"{faster} faster candidate(s) run on neither Megatron-LM nor "
                         "torchtitan (listed after the winner); --runtime torch lets one win")
        if best.candidate.runs > 1:
            notes.append(f"the launch's optimizer steps without a barrier "
                         f"(--enable-optimizer-post-validation): each candidate ran "
                         f"{best.candidate.runs} iterations and is timed by those after the "
                         "first, whose fill the overlap of iterations hides")
        best.command = command_for(settings, best)
        return Plan(settings, ranked + dropped, limit, objective, notes, self.screened,
                    self.resumed_count, self.pruned_count, self.ruled_out, self.work,
                    self.done, self.warnings)


def _ms(ns: float) -> str:
    return f"{ns / 1e6:.3f} ms"
