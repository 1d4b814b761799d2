"""The workloads a plan runs: the file given, or one generated per TP from the model flags, and
every hand-made candidate over them (:func:`enumerate_space`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, NamedTuple

from ..errors import ConfigError
from ..workload.generator import ModelSpec, ParallelSpec, check, render
from ..workload.gpus import gpu_preset
from ..workload.parser import load_workload
from ..workload.stage_layers import end_rows, n_model_layers
from .candidates import Candidate, ScheduleChoice, divisors, enumerate_candidates
from .settings import PlanSettings, plan_cps, plan_eps, screen_runs


class TpWorkload(NamedTuple):
    """A workload generated from the model flags at one tensor-parallel (and context-parallel)
    size."""

    tp: int | None   # None: the file given, its TP from its header
    path: str
    cp: int = 1
    ep: int = 1


class Space(NamedTuple):
    """Every hand-made candidate of a plan and what the search needs of its workloads."""

    candidates: list[Candidate]
    workloads: dict[str, Any]   # the loaded workloads, by path
    layers: dict[str, int]      # transformer layers, by the candidates' ``workload`` field
    auto_layers: int            # the layers ``auto`` is given (the last workload's)


_WORKLOADS: dict[str, Any] = {}


def cached_workload(path: str):
    """``path`` loaded once per process (every screen of a worker reads the same files)."""
    wl = _WORKLOADS.get(path)
    if wl is None:
        wl = _WORKLOADS[path] = load_workload(path)
    return wl


def _sizes(settings: PlanSettings, cps: list[int], eps: list[int]):
    """The (CP, EP, TP) of every workload a plan generates: ``--tp``, else the divisors of
    N / CP up to ``tp_max``."""
    for cp in cps:
        tps = [settings.tp] if settings.tp is not None else [
            t for t in divisors(settings.gpus // cp) if t <= settings.tp_max]
        for ep in eps:
            for tp in tps:
                yield cp, ep, tp


def generate_workloads(settings: PlanSettings, where: Path) -> list[TpWorkload]:
    """One workload file per TP (``--tp``, else the divisors of N / CP up to ``tp_max`` the
    model allows), context-parallel size (:func:`~.settings.plan_cps`) and expert-parallel
    size (:func:`~.settings.plan_eps`), written into ``where`` so that ``best.command`` can run
    it: ``plan-<arch>-<layers>l-tp<T>.txt`` (``-cp<C>`` added at CP > 1, ``-ep<E>`` at
    EP > 1)."""
    fields = dict(settings.model or ())
    model = ModelSpec(**fields)
    gpu = gpu_preset(settings.gpu)
    out: list[TpWorkload] = []
    refused = []
    cps, eps = plan_cps(settings), plan_eps(settings)
    for cp, ep, tp in _sizes(settings, cps, eps):
        what = (f"TP {tp}" + (f" CP {cp}" if len(cps) > 1 else "")
                + (f" EP {ep}" if len(eps) > 1 else ""))
        if settings.gpus % (tp * cp):
            refused.append(f"{what}: --gpus {settings.gpus} is not a multiple of tp x cp")
            continue
        par = ParallelSpec(tp=tp, pp=1, vpp=1, ga=1, dp=settings.gpus // (tp * cp), cp=cp,
                           ep=ep, fp8=settings.fp8, runtime=settings.model_runtime,
                           **dict(settings.code))
        try:
            check(model, par, "model")
            text = render(model, par, gpu, "model", settings.efficiency)
        except ConfigError as err:
            refused.append(f"{what}: {err}")
            continue
        path = where / (f"plan-{model.arch}-{model.layers}l-tp{tp}"
                        + (f"-cp{cp}" if cp > 1 else "") + (f"-ep{ep}" if ep > 1 else "")
                        + ".txt")
        try:
            where.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
        except OSError as err:
            raise ConfigError(f"cannot write the generated workload {path}: "
                              f"{err.strerror or err}") from None
        out.append(TpWorkload(tp, str(path), cp, ep))
    if not out and settings.tp is not None and len(cps) == 1 and len(eps) == 1:
        raise ConfigError(f"--tp {settings.tp}: {refused[0].split(': ', 1)[1]}")
    if not out and settings.tp is not None:
        searched = (f"--cp-max {settings.cp_max}: no context-parallel" if len(cps) > 1 else
                    f"--ep-max {settings.ep_max}: no expert-parallel")
        raise ConfigError(f"{searched} size fits the model at --tp {settings.tp}; "
                          f"{refused[0]}")
    if not out:
        raise ConfigError(f"--tp-max {settings.tp_max}: no tensor-parallel size fits the "
                          f"model; {refused[0] if refused else ''}".rstrip("; "))
    return out


def enumerate_space(settings: PlanSettings, table: list[ScheduleChoice],
                    workload_dir: str | Path | None) -> Space:
    """Every hand-made candidate of every workload (one per TP with model flags), the workloads
    by path, their layer counts and the number of layers ``auto`` is given (the last
    workload's); refuses a global batch no pipeline degree divides."""
    if settings.model is not None:     # with a global batch: check_settings
        sources = generate_workloads(settings, Path(workload_dir or "."))
    else:
        sources = [TpWorkload(None, settings.workload)]
    candidates: list[Candidate] = []
    workloads: dict[str, Any] = {}
    layers: dict[str, int] = {}   # per workload (by the candidates' ``workload`` field)
    tried_dps: set[int] = set()
    for tp, path, cp, ep in sources:
        wl = workloads[path] = cached_workload(path)
        h = wl.header
        if tp is None:
            tp = max(1, h.tp)
            if settings.tp is not None and settings.tp != tp:
                raise ConfigError(f"--tp {settings.tp}: {settings.workload} is written for "
                                  f"tensor-parallel size {tp} (model_parallel_NPU_group); "
                                  "generate it at that TP, or plan from the model flags")
            if settings.gpus % tp:
                raise ConfigError(f"--gpus {settings.gpus}: expected a multiple of the "
                                  f"workload's tensor-parallel size {tp} ({settings.workload})")
        global_batch = (settings.global_batch if settings.global_batch is not None
                        else h.ga * h.dp)
        tried_dps.update(settings.gpus // (tp * cp * pp)
                         for pp in divisors(settings.gpus // (tp * cp)))
        n_layers = n_model_layers(wl)
        layers[path if settings.model else ""] = n_layers
        layered = wl.layout == "aicb" or n_layers < len(wl.layers)
        candidates += enumerate_candidates(tp, settings.gpus, global_batch, n_layers, table,
                                           len(candidates), path if settings.model else "",
                                           settings.split, layered,
                                           end_rows(wl) if settings.split else (False, False),
                                           cp=cp, ep=ep, runs=screen_runs(settings))
    if not any(global_batch % dp == 0 for dp in tried_dps):
        raise ConfigError(f"{settings.batch_flag} {batch_shown(settings, global_batch)}: no "
                          "pipeline degree gives a whole number of microbatches per "
                          "data-parallel group; expected a multiple of one of DP = "
                          f"{', '.join(map(str, sorted(tried_dps)))}{batch_unit(settings)} "
                          f"(--gpus {settings.gpus})")
    return Space(candidates, workloads, layers, n_layers)


def micro_batch_of(settings: PlanSettings) -> int:
    """Sequences per microbatch: the model's (model flags), else 1 (a file's microbatch)."""
    return int(dict(settings.model or ()).get("micro_batch") or 1)


def batch_shown(settings: PlanSettings, microbatches: int) -> int:
    """The global batch in the unit of the option it came from."""
    if settings.batch_flag == "--global-batch-size":
        return microbatches * micro_batch_of(settings)
    return microbatches


def batch_unit(settings: PlanSettings) -> str:
    b = micro_batch_of(settings)
    return f" x --micro-batch {b}" if settings.batch_flag == "--global-batch-size" and b > 1 \
        else ""
