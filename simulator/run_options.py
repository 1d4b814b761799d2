"""The options of one run, written and checked once: ``pipesim run``, ``compare``, ``sweep`` and
``simulate()`` all take a :class:`RunOptions`.

Each field carries its help, its command-line flag and how a value is checked (vidur's
dataclass-config style); a RunOptions is checked when it is made (:func:`check`, one wording:
``--flag: expected ..., got ...``). :func:`click_options` turns the fields into click options,
and :data:`SWEEPABLE` lists every option that changes a simulated number: a sweep spec may set
or vary any of them. Options that only choose outputs (``--gantt``, ``--trace``, ``--log-level``)
are not here, but what they will draw counts against the budget: four fields only the API
and the CLI set (``schedule_options``, ``trace_layers``, ``gantt``, ``validate``) have no flag. :meth:`RunOptions.engine_options` is what the engine reads.
"""

from __future__ import annotations

from collections import namedtuple
from typing import Any, Callable, Mapping, NamedTuple

from .engine.options import (ADAM_STEP_BYTES_PER_PARAM, COUNT_ZEROS_BYTES_PER_PARAM,
                             FP16_UNSCALE_BYTES_PER_PARAM, MAIN_PARAMS_NORM_BYTES_PER_PARAM,
                             PER_TOKEN_SCALE_PASSES,
                             FSDP_STEP_BYTES_PER_PARAM,
                             DDPSettings, EngineOptions, parse_slow_rank)
from .errors import ConfigError
from .system.config import PARAM_DTYPES
from .system.runtime_profile import P2P_MODES
from .workload.parser import LAYOUTS
from .workload.partition import RECOMPUTE_METHODS, RECOMPUTE_MODES
from .workload.stage_layers import PipelineSplit

ENGINES = ("simpy", "evaluator")


class OptionField(NamedTuple):
    """One option of :class:`RunOptions`: its name, type, default and ``metadata`` (its help, its
    flag and how a value is checked: :func:`_opt`), as the checks, click and sweeps read it."""

    name: str
    type: Any
    default: Any
    metadata: dict[str, Any]


def _opt(name: str, type: Any, default: Any, help: str, *, flag: str | None = None,
         short: str | None = None, kind: str = "any", metavar: str | None = None,
         choices: tuple[str, ...] = (), multiple: bool = False,
         api_only: bool = False) -> OptionField:
    """One field: ``kind`` is how a value is checked (positive, non_negative, number,
    non_negative_number, bool, choice, string, slow_rank, mapping); ``api_only``: set by
    :func:`simulator.api.simulate`'s callers, no command-line flag and no sweep key."""
    return OptionField(name, type, default, {
        "help": help, "flag": flag, "short": short, "kind": kind, "metavar": metavar,
        "choices": choices, "multiple": multiple, "api_only": api_only})


# every field of RunOptions, in order
FIELDS: tuple[OptionField, ...] = (
    _opt("schedule", str | None, None,
         "Registered schedule (see `pipesim schedule --list`); default 1f1b, or "
         "interleaved-1f1b when vpp > 1.", short="-s", kind="string"),
    _opt("pp", int | None, None, "Pipeline stages (overrides the header's pp).",
         kind="positive"),
    _opt("microbatches", int | None, None,
         "Microbatches per iteration (overrides the header's ga).", short="-m", kind="positive"),
    _opt("vpp", int | None, None, "Virtual stages (chunks) per rank.", kind="positive"),
    _opt("decoder_first_pipeline_num_layers", int | None, None,
         "Transformer layers on the first pipeline rank, Megatron-LM's rule: the ranks between "
         "the first and the last split the rest evenly (default: whole layers split evenly, "
         "the first chunks one more).", kind="positive", metavar="N"),
    _opt("decoder_last_pipeline_num_layers", int | None, None,
         "Transformer layers on the last pipeline rank (Megatron-LM's rule, as above).",
         kind="positive", metavar="N"),
    _opt("account_for_embedding_in_pipeline_split", bool, False,
         "Count the embedding as one layer when splitting the layers evenly (Megatron-LM's "
         "rule): the first chunk holds one transformer layer less (at one layer a chunk, "
         "the embedding alone).", kind="bool"),
    _opt("account_for_loss_in_pipeline_split", bool, False,
         "Count the LM head and loss as one layer when splitting the layers evenly "
         "(Megatron-LM's rule): the last chunk holds one transformer layer less (at one layer "
         "a chunk, the final norm, LM head and loss alone).", kind="bool"),
    _opt("pipeline_parallel_layers_per_stage", int | None, None,
         "Layers per stage, torchtitan's rule: ceil((layers + first-less + last-less) / N) "
         "stages, which must be pp x vpp; the effective layers split evenly, the first stages "
         "one more.", kind="positive", metavar="N"),
    _opt("pipeline_parallel_first_stage_less_layers", int | None, None,
         "torchtitan's split: the embedding counts as N layers on the first stage (torchtitan's "
         "default 1).", kind="non_negative", metavar="N"),
    _opt("pipeline_parallel_last_stage_less_layers", int | None, None,
         "torchtitan's split: the final norm and LM head count as N layers on the last stage "
         "(torchtitan's default 1).", kind="non_negative", metavar="N"),
    _opt("iterations", int, 1,
         "Iterations to simulate (with --jitter: the spread of iteration times).",
         kind="positive"),
    _opt("layout", str, "auto",
         "How to read the rows: the whole model once, or an AICB stage trace.", kind="choice",
         choices=LAYOUTS),
    _opt("p2p", str | None, None,
         "Point-to-point semantics: isend/irecv, blocking send/recv (document 001's naive "
         "order), Megatron's batched send/recv pairs, or torch's runtimes (docs/model.md). "
         "Default: the system's runtime.p2p, else async.", kind="choice", choices=P2P_MODES),
    _opt("memory_limit", float | None, None,
         "Per-GPU memory in GiB (2^30 bytes), default the system's memory capacity; an "
         "overflow is reported as out of memory.", kind="positive_number", metavar="GIB"),
    _opt("jitter", float, 0.0,
         "Scale compute times by seeded lognormal noise with this sigma (mean 1).",
         kind="non_negative_number", metavar="SIGMA"),
    _opt("seed", int, 0, "Seed for --jitter.", kind="non_negative"),
    _opt("slow_rank", tuple[str, ...], (),
         "Make rank R's compute FACTOR times slower (repeatable).", kind="slow_rank",
         metavar="R:FACTOR", multiple=True),
    _opt("recompute", str, "file",
         "Activation recompute: file (the header's checkpoint lists), none, or full (Megatron-LM's "
         "full checkpointing, grouped by --recompute-method and --recompute-num-layers; by "
         "default every layer recomputes its forward before its backward and keeps only its "
         "input).",
         kind="choice", choices=RECOMPUTE_MODES),
    _opt("recompute_method", str | None, None,
         "With --recompute full, Megatron-LM's --recompute-method: uniform (each chunk's layers "
         "in groups of --recompute-num-layers, each group keeping only its input and re-running "
         "its whole forward before its backward) or block (the first --recompute-num-layers "
         "layers of each chunk recompute one by one, the others keep their activations). "
         "Default uniform.", kind="choice", choices=RECOMPUTE_METHODS),
    _opt("recompute_num_layers", int | None, None,
         "With --recompute full, Megatron-LM's --recompute-num-layers: the layers of a uniform "
         "group, or the recomputed layers of each chunk with block. Default 1.",
         kind="positive", metavar="N"),
    _opt("pp_comm", int | None, None,
         "Bytes one microbatch sends between adjacent stages (overrides the file's pp_comm; "
         "when the file has none it is derived from the rows, with a warning).",
         kind="non_negative", metavar="BYTES"),
    _opt("gpus", int | None, None,
         "World size; DP = N / (TP x PP) must be whole (default: the header's all_gpus).",
         kind="positive", metavar="N"),
    _opt("dp", int | None, None, "Data-parallel size instead of --gpus.", kind="positive",
         metavar="D"),
    _opt("max_actions", int | None, None,
         "Refuse a run with more actions than N before building it (default 700000, about "
         "10 s; 0 = no limit).", kind="non_negative", metavar="N"),
    _opt("engine", str, "simpy",
         "simpy: the event-driven engine; evaluator: the exact critical-path sweep (same "
         "timeline, faster; falls back to simpy with a note where it does not apply).",
         kind="choice", choices=ENGINES),
    _opt("param_dtype", str | None, None,
         "The parameters' dtype as Megatron-LM trains them: bf16 (bf16 weights, fp32 main "
         "gradients, fp32 master weights and Adam state: 18 B a parameter) or fp32 (16 B). "
         "Default: the system's memory, else 16 B a parameter with a warning. Not generate's "
         "--precision (the activations' dtype).", kind="choice", choices=PARAM_DTYPES),
    _opt("megatron_ddp", bool, False,
         "Data parallelism as Megatron-LM's DDP (engine/tail.py) instead of each row's DP "
         "collective as the file states it: without the overlap flags, every gradient "
         "reduced after the rank's last backward, blocking; then the optimizer step. Implied "
         "by the four flags below and by --megatron-args.", kind="bool"),
    _opt("fsdp", int | None, None,
         "torchtitan's FSDP2 over N data-parallel ranks (data_parallel_shard_degree): the "
         "weights in fp32, their fp32 gradients and Adam's state sharded over N; each "
         "transformer layer's weights gathered whole in --param-dtype (default bf16) while it "
         "computes, the next layer's beside it. With a pipeline its collectives are priced as "
         "Megatron's distributed optimizer's with both overlaps (the gradients "
         "reduce-scattered in fp32 behind the last backward, the weights all-gathered behind "
         "the forward); without one every microbatch gathers the layers before its forward "
         "(and its backward, --fsdp-reshard-after-forward) and reduce-scatters after its "
         "backward; its step is Adam on the fp32 shard. Set by --torchtitan.", kind="positive",
         metavar="N"),
    _opt("fsdp_reshard_after_forward", str, "default",
         "torchtitan's fsdp_reshard_after_forward with --fsdp: default (on without a "
         "pipeline, off with one), always or never; on, a microbatch's backward gathers its "
         "layers again. always with a pipeline is refused (not modelled).", kind="choice",
         choices=("default", "always", "never")),
    _opt("use_distributed_optimizer", bool, False,
         "Megatron-LM's distributed optimizer: gradients reduce-scattered over DP, the step on "
         "1/DP of the parameters, the parameters all-gathered after it.", kind="bool"),
    _opt("overlap_grad_reduce", bool, False,
         "Megatron-LM's bucketed reduction: each bucket of gradients reduced as soon as the "
         "last microbatch's backward fills it, behind the rest of the backward.", kind="bool"),
    _opt("overlap_param_gather", bool, False,
         "With --use-distributed-optimizer: the parameter all-gather behind the next "
         "iteration's forward.", kind="bool"),
    _opt("optimizer_post_validation", bool, False,
         "The zero-bubble fork's --enable-optimizer-post-validation (Megatron-LM's DDP): no "
         "barrier before the optimizer step; each pipeline rank steps once its own gradients "
         "are reduced and the partial global state has come from the rank before it, then "
         "starts the next iteration, so iterations overlap (the steady state shows from the "
         "second: --iterations 2 or more).", kind="bool"),
    _opt("ddp_bucket_size", int | None, None,
         "Parameters per gradient bucket with --overlap-grad-reduce (default Megatron-LM's "
         "max(40M, 1M x DP)).", kind="positive", metavar="PARAMS"),
    _opt("grad_reduce_dtype", str, "fp32",
         "The gradient reduction's dtype with Megatron-LM's DDP: fp32 (Megatron's default "
         "with --bf16), bf16 (--grad-reduce-in-bf16), fp16 (--fp16 without "
         "--accumulate-allreduce-grads-in-fp32).", kind="choice",
         choices=("fp32", "bf16", "fp16")),
    _opt("fp16_loss_scale", bool, False,
         "Megatron-LM's --fp16 loss scaling: the optimizer step also unscales every main "
         "gradient and checks it for inf/NaN (8 B a parameter through HBM). Set by "
         "--megatron-args with --fp16.", kind="bool"),
    _opt("log_num_zeros_in_grad", bool, False,
         "Megatron-LM's --log-num-zeros-in-grad: each step also counts the zeros of every "
         "fp32 main gradient it updates (4 B a parameter through HBM). Set by --megatron-args.",
         kind="bool"),
    _opt("log_params_norm", bool, False,
         "Megatron-LM's --log-params-norm: each iteration also takes the parameters' L2 norm "
         "(with bf16 weights over the step's fp32 main copies, 4 B a parameter; otherwise over "
         "every training weight of the rank, its own bytes). Set by --megatron-args.",
         kind="bool"),
    _opt("calculate_per_token_loss", bool, False,
         "Megatron-LM's --calculate-per-token-loss: once the gradients are reduced, the whole "
         "gradient buffer is divided by the iteration's tokens (each gradient read and written "
         "in the reduction's dtype). Set by --megatron-args.", kind="bool"),
    _opt("tp_comm_overlap", bool, False,
         "Megatron-LM's --tp-comm-overlap: tensor-parallel collectives pipelined with their "
         "GEMMs, hidden up to the GEMMs' length (default: blocking).", kind="bool"),
    _opt("p2p_scatter_gather", bool, False,
         "Megatron-LM of 2021-22's scatter_gather_tensors_in_pipeline, for activations "
         "replicated over TP (no sequence parallelism): each stage-to-stage transfer is split "
         "over the stage's TP ranks, each sending 1/TP of it, and all-gathered over the TP "
         "group on arrival (default: every TP rank sends the whole tensor).", kind="bool"),
    _opt("strict", bool, False,
         "Treat every warning as an error (exit 2): no number pipesim cannot stand behind.",
         kind="bool"),
    _opt("layer_by_layer", bool, False,
         "Reference path: one simulation event per layer state instead of per action "
         "(slower; same timeline).", kind="bool"),

    # -- set by API callers only (no flag, no sweep key) -----------------------------------------
    _opt("schedule_options", Mapping[str, Any] | None, None,
         "Keyword options of the schedule's generator (``-O KEY=VALUE``).", flag="--option",
         kind="mapping", api_only=True),
    _opt("trace_layers", bool, False,
         "Keep every layer's start and end (for --trace); counted against --max-actions as a "
         "trace's cost.", kind="bool", api_only=True),
    _opt("gantt", bool, False,
         "The run will be drawn as a Gantt chart: its bars count against --max-actions.",
         kind="bool", api_only=True),
    _opt("validate", bool, True, "Check the schedule before it runs.", kind="bool",
         api_only=True),
)

# a NamedTuple, not a dataclass: start-up (simulator/__init__.py); made from FIELDS, the one
# declaration of the options (RunOptions below adds the checks and the methods)
_RunOptionsFields = namedtuple("_RunOptionsFields", [f.name for f in FIELDS],
                               defaults=[f.default for f in FIELDS])
_RunOptionsFields.__annotations__ = {f.name: f.type for f in FIELDS}


class RunOptions(_RunOptionsFields):
    """Everything about one run that is neither the workload nor the system (the fields, their
    help and checks: :data:`FIELDS`)."""

    __slots__ = ()

    def __new__(cls, *args: Any, **kwargs: Any) -> "RunOptions":
        # the one check of every option, however the RunOptions is made
        given = super().__new__(cls, *args, **kwargs)
        return tuple.__new__(cls, [check(f, v) for f, v in zip(FIELDS, given)])

    def _replace(self, **changes: Any) -> "RunOptions":
        """A copy with ``changes``, checked as a new RunOptions is."""
        return type(self)(**{**self._asdict(), **changes})

    @classmethod
    def from_values(cls, values: Mapping[str, Any], source: str = "") -> "RunOptions":
        """Options from a mapping (CLI keyword arguments or a sweep point: other names are
        skipped); a bad value's message names ``source`` (``sweep: jitter: ...``) when given."""
        known = set(cls._fields)
        try:
            return cls(**{k: v for k, v in values.items() if k in known})
        except OptionError as err:
            if not source:
                raise
            raise ConfigError(err.where(source)) from None

    @classmethod
    def given(cls, options: "RunOptions | None", keywords: Mapping[str, Any]) -> "RunOptions":
        """The keyword shim of :func:`simulator.api.simulate` and ``compare`` (the one place API
        keywords become options): ``options`` with ``keywords`` laid over it. The keywords are
        the fields' names (``memory_limit`` in GiB), plus ``memory_limit_gb`` (the limit in GB of
        10^9 bytes, for callers that count bytes in powers of ten) and ``slow_ranks``, a mapping
        rank -> factor (``slow_rank``)."""
        values = dict(keywords)
        if "memory_limit_gb" in values:
            gb = values.pop("memory_limit_gb")
            # x 10^9 first, then a power of two: the bytes are exactly gb x 10^9, as given
            values["memory_limit"] = gb if not gb else gb * 1e9 / 2**30
        if "slow_ranks" in values:
            slow = values.pop("slow_ranks") or {}
            values["slow_rank"] = tuple(f"{r}:{float(f)!r}" for r, f in slow.items())
        unknown = sorted(set(values) - set(cls._fields))
        if unknown:
            raise TypeError(f"simulate() got an unexpected keyword argument {unknown[0]!r}")
        base = cls() if options is None else options
        if not values:
            return base
        return cls(**{**base._asdict(), **values})

    def pipeline_split(self) -> PipelineSplit:
        """The runtimes' layer-split options as given (all unset: pipesim's default split)."""
        return PipelineSplit(self.decoder_first_pipeline_num_layers,
                             self.decoder_last_pipeline_num_layers,
                             self.account_for_embedding_in_pipeline_split,
                             self.account_for_loss_in_pipeline_split,
                             self.pipeline_parallel_layers_per_stage,
                             self.pipeline_parallel_first_stage_less_layers,
                             self.pipeline_parallel_last_stage_less_layers)

    def recompute_grouping(self) -> tuple[str, int]:
        """(method, layers) of ``--recompute full`` (default uniform, 1: each layer alone);
        either option with another ``--recompute`` is refused, as Megatron-LM takes them only
        with full recompute."""
        if self.recompute != "full":
            for name in ("recompute_method", "recompute_num_layers"):
                if getattr(self, name) is not None:
                    raise ConfigError(f"--{name.replace('_', '-')}: needs --recompute full, "
                                      f"got --recompute {self.recompute}")
        return self.recompute_method or "uniform", self.recompute_num_layers or 1

    def check_sharding(self) -> None:
        """FSDP and Megatron-LM's distributed optimizer each shard the optimizer state: both
        asked for is refused (by the options alone, before any work)."""
        if self.fsdp is not None and self.use_distributed_optimizer:
            raise ConfigError("--fsdp and --use-distributed-optimizer: give one (FSDP shards "
                              "the optimizer state itself)")

    def slow_ranks(self) -> tuple[tuple[int, float], ...]:
        """(rank, factor) pairs, sorted; a rank given twice multiplies its factors."""
        slow: dict[int, float] = {}
        for text in self.slow_rank:
            r, f = parse_slow_rank(text)
            slow[r] = slow.get(r, 1.0) * f
        return tuple(sorted(slow.items()))

    def memory_limit_bytes(self, capacity_bytes: float) -> float | None:
        """``--memory-limit`` (GiB) in bytes, else the system's capacity (None: none)."""
        if self.memory_limit is None:
            return capacity_bytes if capacity_bytes > 0 else None
        return self.memory_limit * 2**30

    def engine_options(self, capacity_bytes: float) -> EngineOptions:
        """What the engine reads, in its own terms (bytes, a sigma, (rank, factor) pairs)."""
        if self.layer_by_layer and (self.jitter > 0 or self.slow_rank):
            raise ConfigError("--layer-by-layer: the reference path runs without --jitter and "
                              "--slow-rank")
        return EngineOptions(
            p2p=self.p2p, memory_limit_bytes=self.memory_limit_bytes(capacity_bytes),
            jitter_sigma=self.jitter, seed=self.seed, slow_ranks=self.slow_ranks(),
            trace_layers=self.trace_layers, layer_by_layer=self.layer_by_layer,
            ddp=self.ddp_settings(), tp_comm_overlap=self.tp_comm_overlap,
            p2p_scatter_gather=self.p2p_scatter_gather)

    @property
    def uses_megatron_ddp(self) -> bool:
        return (self.megatron_ddp or self.use_distributed_optimizer or self.overlap_grad_reduce
                or self.overlap_param_gather or self.ddp_bucket_size is not None
                or self.fp16_loss_scale or self.optimizer_post_validation
                or self.log_num_zeros_in_grad or self.log_params_norm
                or self.calculate_per_token_loss or self.fsdp is not None)

    def ddp_settings(self) -> DDPSettings | None:
        """Megatron-LM's data parallelism as asked (None: each row's DP collective as the file
        states it); a combination Megatron refuses is refused."""
        if not self.uses_megatron_ddp:
            return None
        if self.fsdp is not None:
            for name in ("optimizer_post_validation", "log_num_zeros_in_grad",
                         "log_params_norm", "calculate_per_token_loss"):
                if getattr(self, name):
                    raise ConfigError(f"--{name.replace('_', '-')}: expected Megatron-LM's "
                                      "optimizer, got --fsdp (torchtitan's FSDP2)")
            # FSDP2's collectives as the distributed optimizer's with both overlaps: the fp32
            # gradients reduce-scattered as the backward produces them, the weights all-gathered
            # in the compute dtype behind the forward; the step on the fp32 shard; without a
            # pipeline, every microbatch's (DDPSettings.reshards)
            return DDPSettings(True, True, True, 4.0,
                               4.0 if self.param_dtype == "fp32" else 2.0, None,
                               FSDP_STEP_BYTES_PER_PARAM, zeroes_buffer=False, fsdp=True,
                               reshard=self.fsdp_reshard_after_forward)
        if self.overlap_param_gather and not self.use_distributed_optimizer:
            raise ConfigError("--overlap-param-gather: needs --use-distributed-optimizer (as "
                              "in Megatron-LM)")
        if self.ddp_bucket_size is not None and not self.overlap_grad_reduce:
            raise ConfigError("--ddp-bucket-size: needs --overlap-grad-reduce (without it "
                              "Megatron-LM reduces each chunk as one bucket)")
        step = ADAM_STEP_BYTES_PER_PARAM + (FP16_UNSCALE_BYTES_PER_PARAM
                                            if self.fp16_loss_scale else 0.0)
        if self.log_num_zeros_in_grad:
            step += COUNT_ZEROS_BYTES_PER_PARAM
        unsharded = 0.0
        if self.log_params_norm:
            if self.param_dtype == "bf16" and not self.fp16_loss_scale:
                step += MAIN_PARAMS_NORM_BYTES_PER_PARAM     # --bf16: the fp32 main copies
            else:   # the fp16 (--fp16) or fp32 training weights, all of the rank's
                unsharded = 2.0 if self.fp16_loss_scale else 4.0
        grad_bytes = 4.0 if self.grad_reduce_dtype == "fp32" else 2.0
        if self.calculate_per_token_loss:
            unsharded += PER_TOKEN_SCALE_PASSES * grad_bytes
        return DDPSettings(self.overlap_grad_reduce, self.use_distributed_optimizer,
                           self.overlap_param_gather, grad_bytes, 2.0,
                           self.ddp_bucket_size, step,
                           post_validation=self.optimizer_post_validation,
                           unsharded_step_bytes_per_param=unsharded)


class OptionError(ConfigError):
    """A value of the wrong kind for one option: ``--flag: expected ..., got ...``."""

    def __init__(self, name: str, flag: str, expected: str, value: Any) -> None:
        self.name, self.expected, self.value = name, expected, value
        super().__init__(f"{flag}: expected {expected}, got {value!r}")

    def where(self, source: str) -> str:
        """The same line naming the option as ``source`` calls it (``sweep: jitter``)."""
        return f"{source}: {self.name}: expected {self.expected}, got {self.value!r}"


def flag_of(f) -> str:
    return f.metadata.get("flag") or "--" + f.name.replace("_", "-")


def check(f, value: Any, source: str = "") -> Any:
    """``value`` for field ``f``, normalised, or an :class:`OptionError` naming the option (as
    ``source`` calls it when given)."""
    meta = f.metadata
    if value is None and f.default is None:
        return None
    where = f"{source}: {f.name}" if source else flag_of(f)
    kind = meta["kind"]
    if meta["multiple"]:
        items = value if isinstance(value, (list, tuple)) else [value]
        return tuple(_check_one(kind, meta, v, f.name, where) for v in items)
    return _check_one(kind, meta, value, f.name, where)


def _check_one(kind: str, meta: dict, value: Any, name: str, where: str) -> Any:
    def bad(expected: str) -> OptionError:
        return OptionError(name, where, expected, value)

    is_int = isinstance(value, int) and not isinstance(value, bool)
    is_num = isinstance(value, (int, float)) and not isinstance(value, bool) and value == value
    if kind == "positive":
        if not is_int or value < 1:
            raise bad("a positive integer")
    elif kind == "non_negative":
        if not is_int or value < 0:
            raise bad("a whole number >= 0")
    elif kind == "positive_number":
        if not is_num or value <= 0:
            raise bad("a positive number")
        value = float(value)
    elif kind == "non_negative_number":
        if not is_num or value < 0:
            raise bad("a number >= 0")
        value = float(value)
    elif kind == "bool":
        if not isinstance(value, bool):
            raise bad("true or false")
    elif kind == "choice":
        if value not in meta["choices"]:
            raise bad("one of " + ", ".join(meta["choices"]))
    elif kind == "string":
        if not isinstance(value, str):
            raise bad("a string")
    elif kind == "mapping":
        if not isinstance(value, Mapping):
            raise bad("a mapping of KEY to VALUE")
    elif kind == "slow_rank":
        if not isinstance(value, str):
            raise bad("R:FACTOR like 2:1.5")
        parse_slow_rank(value)
    return value


# every option that changes a simulated number, as a command line or a sweep may set it
OPTION_FIELDS = tuple(f for f in FIELDS if not f.metadata["api_only"])
SWEEPABLE: tuple[str, ...] = tuple(f.name for f in OPTION_FIELDS)


def click_options(*, skip: tuple[str, ...] = ()) -> Callable:
    """A decorator adding one click option per RunOptions field (help, flag, type, default)."""

    def deco(fn: Callable) -> Callable:
        for f in reversed(OPTION_FIELDS):
            if f.name not in skip:
                fn = click_option_of(f)(fn)
        return fn

    return deco


def click_option_of(f) -> Callable:
    """The click option of RunOptions field ``f``."""
    # click only when a command is declared: a plain `pipesim run` is read without it (start-up)
    import click

    meta = f.metadata
    names = [flag_of(f)] + ([meta["short"]] if meta["short"] else [])
    kw: dict[str, Any] = {"help": meta["help"], "metavar": meta["metavar"]}
    kind = meta["kind"]
    if kind == "bool":
        kw.update(is_flag=True, default=False)
    elif kind == "choice":
        kw.update(type=click.Choice(meta["choices"]), default=f.default,
                  show_default=f.default is not None, metavar=None)
    elif meta["multiple"]:
        kw.update(multiple=True, default=())
    elif kind in ("positive", "non_negative"):
        # checked by RunOptions (one-line messages of our own), not click's IntRange
        kw.update(type=int, default=f.default, show_default=f.default is not None)
    elif kind in ("positive_number", "non_negative_number"):
        kw.update(type=float, default=f.default, show_default=bool(f.default))
    else:
        kw.update(default=f.default)
    return click.option(*names, f.name, **kw)
