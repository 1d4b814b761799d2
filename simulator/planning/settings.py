"""What a plan depends on (:class:`PlanSettings`), its one validation, and the system it runs on."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from ..errors import ConfigError
from ..schedules.runtimes import RUNTIMES
from ..system.config import load_system
from ..system.overlay import apply_calibration
from ..workload.generator import MAX_LAYERS
from .candidates import OVERLAPPED_RUNS, divisors

DEFAULT_CONFIRM = 3
# The largest world size a plan searches (--gpus): beyond the largest clusters built, and its
# candidates (every divisor, times every schedule) stay a few thousand.
MAX_PLAN_GPUS = 1 << 17


@dataclass(frozen=True)
class PlanSettings:
    """What a plan depends on (``--resume`` refuses a folder planned with other settings)."""

    workload: str
    gpus: int
    memory_limit_gib: float | None = None   # GiB; None: the system's capacity; 0: no limit
    global_batch: int | None = None
    system: str | None = None
    calibration: str | None = None
    p2p: str | None = None
    jitter: float = 0.0
    iterations: int = 1
    seed: int = 0
    confirm: int = DEFAULT_CONFIRM
    max_actions: int | None = None
    prune: bool = True   # skip candidates whose lower bound is above the best (not with jitter)
    # instead of a file: `pipesim generate`'s model flags (arch, layers, hidden, heads, seq,
    # micro_batch, ffn, vocab, kv_heads) as sorted (key, value) pairs, the GPU preset and its
    # efficiency; TP then varies over the divisors of N up to tp_max
    model: tuple[tuple[str, Any], ...] | None = None
    gpu: str = "a100"
    efficiency: float | None = None
    tp_max: int = 8
    schedules: tuple[str, ...] | None = None   # hand-made schedules searched (None: all)
    runtime: str | None = None   # keep only what this runtime runs (torch|megatron|torchtitan)
    # Megatron-LM's layer-split options for every candidate (a PipelineSplit's fields); empty:
    # pipesim's default split, and the end-stage variants of :func:`end_stage_splits`
    split: tuple = ()
    tp: int | None = None   # --tp: the one tensor-parallel size searched (model flags)
    batch_flag: str = "--global-batch"   # the option the global batch came from (its errors)
    # how a full-recompute retry groups the layers: (--recompute-method, --recompute-num-layers);
    # empty: Megatron-LM's uniform 1, every layer alone
    recompute_grouping: tuple = ()
    # the training state and data parallelism every candidate runs with, as (run option,
    # value) pairs: --param-dtype, --use-distributed-optimizer, a Megatron launch file's DDP
    # flags, and ("fsdp", True): FSDP over each candidate's data parallelism
    state: tuple = ()
    # Transformer Engine's FP8 recipe of the generated candidates (a launch file's
    # --fp8-format / --fp8-recipe); "": bf16
    fp8: str = ""
    # context parallelism of every generated candidate (--cp, a launch file's): each rank holds
    # s/cp tokens of every sequence, DP = N / (TP x CP x PP); None: every divisor of N up to
    # cp_max is searched (--cp-max)
    cp: int | None = 1
    cp_max: int = 1
    # expert parallelism of every generated candidate (moe; --ep, a launch file's): the
    # experts split over EP of the data-parallel ranks; None: every divisor of the experts up
    # to ep_max is searched (--ep-max)
    ep: int | None = 1
    ep_max: int = 1
    # whose model code the generated candidates run (a launch file's runtime:
    # activations.MODEL_RUNTIMES): their kernels (layer_ops) and what their loss keeps and holds
    model_runtime: str = "megatron"
    # a launch file's choices among Megatron-LM's kernels for the generated candidates
    # (LaunchSettings.code_fields: generator.ParallelSpec's keywords); (): Megatron's defaults
    code: tuple = ()
    # the ranks' order every candidate is placed in where a Megatron-LM launch file states
    # another than the system's topology.order (tp-pp-dp with --use-tp-pp-dp-mapping, else
    # Megatron's default); None: the system's
    rank_order: str | None = None


def plan_cps(settings: PlanSettings) -> list[int]:
    """The context-parallel sizes a plan generates its candidates at: the one given, else
    every divisor of N up to ``cp_max``."""
    if settings.cp is not None:
        return [settings.cp]
    return [c for c in divisors(settings.gpus) if c <= settings.cp_max]


def plan_eps(settings: PlanSettings) -> list[int]:
    """The expert-parallel sizes a plan generates its candidates at: the one given, else
    every divisor of the model's experts (and of N) up to ``ep_max``."""
    if settings.ep is not None:
        return [settings.ep]
    experts = int(dict(settings.model or ()).get("experts") or 1)
    return [e for e in divisors(experts) if e <= settings.ep_max and settings.gpus % e == 0]


def screen_runs(settings: PlanSettings) -> int:
    """The iterations each candidate's screen runs: two where the launch's optimizer steps
    without a barrier (``--enable-optimizer-post-validation``), so that the iterations overlap
    and the second, the steady state, ranks it; else one."""
    return OVERLAPPED_RUNS if dict(settings.state).get("optimizer_post_validation") else 1


def state_options(state: tuple, dp: int) -> dict:
    """The run options of a candidate's training state and data parallelism (``state``'s, FSDP
    over the candidate's ``dp`` ranks: its data-parallel size times its context parallelism,
    torchtitan's ``dp_shard_cp`` mesh)."""
    out = dict(state)
    if out.pop("fsdp", False) and dp > 1:
        out["fsdp"] = dp
    return out


def recompute_options(grouping: tuple, recompute: str) -> dict:
    """The run options of a candidate's recompute grouping (none unless it is ``full``)."""
    if recompute != "full" or not grouping:
        return {}
    return {"recompute_method": grouping[0], "recompute_num_layers": grouping[1]}


def _check_size(name: str, size: int | None, most: int, what: str) -> None:
    """A size the plan is given (``--cp``, ``--ep``) or searches up to (``--cp-max``, ...):
    positive, and one of the two."""
    if size is not None and size < 1:
        raise ConfigError(f"--{name}: expected a positive integer, got {size}")
    if most < 1:
        raise ConfigError(f"--{name}-max: expected a positive integer, got {most}")
    if size is not None and most > 1:
        raise ConfigError(f"--{name} {size} and --{name}-max {most}: give one (the {what} "
                          "size, or the largest one searched)")


def _given(settings: PlanSettings, name: str) -> str:
    """The option that set size ``name`` (cp, ep): ``--cp C``, else ``--cp-max C``."""
    size = getattr(settings, name)
    return f"--{name} {size}" if size is not None else \
        f"--{name}-max {getattr(settings, f'{name}_max')}"


def check_settings(settings: PlanSettings) -> None:
    if settings.gpus < 1:
        raise ConfigError(f"--gpus: expected a positive number of GPUs, got {settings.gpus}")
    if settings.gpus > MAX_PLAN_GPUS:
        raise ConfigError(f"--gpus: {settings.gpus:,} GPUs, above the largest world size a plan "
                          f"searches ({MAX_PLAN_GPUS:,})")
    layers = dict(settings.model or ()).get("layers")
    if layers is not None:
        if layers > MAX_LAYERS:
            raise ConfigError(f"--layers: {layers:,} layers, above the most pipesim generates "
                              f"({MAX_LAYERS:,}; real models have a few hundred)")
    if settings.global_batch is not None and settings.global_batch < 1:
        raise ConfigError(f"--global-batch: expected a positive number of microbatches, got "
                          f"{settings.global_batch}")
    if settings.tp is not None and settings.tp < 1:
        raise ConfigError(f"--tp: expected a positive integer, got {settings.tp}")
    if settings.tp is not None and settings.gpus % settings.tp:
        raise ConfigError(f"--tp {settings.tp}: expected a divisor of --gpus {settings.gpus}")
    for name, what in (("cp", "context-parallel"), ("ep", "expert-parallel")):
        _check_size(name, getattr(settings, name), getattr(settings, f"{name}_max"), what)
    arch = dict(settings.model or ()).get("arch")
    if (settings.ep_max > 1 or (settings.ep or 1) > 1) and arch != "moe":
        raise ConfigError(f"{_given(settings, 'ep')}: expected the moe model (experts to "
                          "split), found " + (f"the {arch} model" if arch else
                                              f"the workload file {settings.workload}"))
    if plan_cps(settings) != [1] and settings.model is None:
        raise ConfigError(f"{_given(settings, 'cp')}: expected the model flags or a launch "
                          "file (plan generates its candidates at a context parallelism); "
                          f"{settings.workload}'s rows hold the sequence share they were "
                          "generated for")
    if settings.cp is not None and settings.gpus % (settings.cp * (settings.tp or 1)):
        raise ConfigError(f"--gpus {settings.gpus}: expected a multiple of "
                          + (f"--tp {settings.tp} x " if settings.tp else "")
                          + f"--cp {settings.cp}")
    if settings.model is not None and settings.global_batch is None:
        raise ConfigError("--global-batch-size: needed with the model flags (sequences "
                          "per iteration across DP, as in Megatron-LM)")
    if settings.memory_limit_gib is not None and not settings.memory_limit_gib >= 0:
        raise ConfigError(f"--memory-limit: expected a non-negative number of GiB, got "
                          f"{settings.memory_limit_gib:g}")
    if settings.jitter < 0 or not math.isfinite(settings.jitter):
        raise ConfigError(f"--jitter: expected a non-negative sigma, got {settings.jitter:g}")
    if settings.iterations < 1:
        raise ConfigError(f"--iterations: expected a positive integer, got {settings.iterations}")
    if settings.confirm < 1:
        raise ConfigError(f"--confirm: expected a positive integer, got {settings.confirm}")

    if settings.runtime is not None and settings.runtime not in RUNTIMES:
        raise ConfigError(f"--runtime: expected one of {', '.join(RUNTIMES)}, got "
                          f"{settings.runtime!r}")



def load_plan_system(settings: PlanSettings):
    system = load_system(settings.system)
    if settings.calibration is not None:
        system = apply_calibration(system, settings.calibration)
    if settings.rank_order is not None:
        system = system.with_overrides({"topology.order": settings.rank_order},
                                       "the launch file's rank order")
    return system
