"""Which training runtimes accept a configuration, before anything is simulated.

A plan is only worth what a runtime will run. Each rule below is a condition under which the
runtime refuses the configuration or hangs on it, taken from the runtime's own source (cited
per rule; tests/schedules/test_runtimes.py has one test per rule). The verdict per runtime says
how it would run the configuration (``how``) or, in plain words, the rule it breaks (``rule``):

- ``torch``: ``torch.distributed.pipelining`` 2.13, by its schedule class when one exists, else
  from the CSV (``_PipelineScheduleRuntime._load_csv``);
- ``megatron``: Megatron-LM (``megatron/training/arguments.py`` and megatron-core's
  ``pipeline_parallel/schedules.py``): 1F1B, and interleaved 1F1B with virtual stages; and
  zb-greedy on the zero-bubble fork of Megatron-LM (sail-sg/zero-bubble-pipeline-parallelism,
  ``--enable-zero-bubble``), which lays out that schedule itself, and the fork's V-Half and V-Min
  (``--zero-bubble-v-schedule`` in the half and min memory setups);
- ``torchtitan``: torchtitan 0.3 (``torchtitan/distributed/pipeline_parallel.py``), which runs
  torch's classes or a CSV and places the stages itself.
"""

from __future__ import annotations

from typing import NamedTuple

from ..errors import ConfigError
from ..workload.inputs.zero_bubble_fork import fork_layer_flags, zb_v_setup
from ..workload.stage_layers import chunk_layers_of, empty_chunk
from .library.interleaved_1f1b import resolve_group_size
from .registration import TORCH_SINGLE_STAGE as SINGLE_STAGE   # one stage per rank
from .registry import megatron_of, torch_class_of   # a schedule's torch class, Megatron's schedule
from .schedule import Schedule, loop_placement, v_placement

RUNTIMES = ("torch", "megatron", "torchtitan")

V_CLASSES = ("ZBVZeroBubble", "DualPipeV")   # torchtitan places their stages in a V



def torch_cannot_run(schedule: Schedule) -> str | None:
    """Why torch's runtime cannot run ``schedule`` from a compute-only CSV (None: it can).

    torch's ``_PipelineScheduleRuntime`` runs one minibatch per ``step()`` with one copy of each
    stage's weights (design notes, section 8): a schedule without a flush (PipeDream-2BW: several
    minibatches, weight stashing) or with two stages sharing weights (bidirectional DualPipe: two
    model copies) is not expressible in its format."""
    return torch_cannot_run_named(schedule.name, schedule.flush,
                                  len(set(schedule.stage_chunk)) < len(schedule.stage_chunk))


def torch_cannot_run_named(name: str, flushes: bool, shares_weights: bool) -> str | None:
    """:func:`torch_cannot_run` from what the schedule's registration says, before it is built
    (``pipesim schedule --csv`` refuses from the parameters alone)."""
    if not flushes:
        return (f"{name} runs several minibatches without a flush and stashes weight "
                "versions; torch's runtime runs one minibatch per step")
    if shares_weights:
        return (f"{name} runs two stages on the same weights (two model copies); "
                "torch's runtime holds one copy per stage")
    return None


# a NamedTuple, not a dataclass: start-up (simulator/__init__.py)
class Verdict(NamedTuple):
    runtime: str
    accepts: bool
    how: str = ""            # what the runtime runs (class, CSV, Megatron schedule)
    rule: str | None = None  # the rule broken (refused), or why the class was not used

    @property
    def short(self) -> str:
        """One word for a table: the class, ``csv``, or ``no``."""
        if not self.accepts:
            return "no"
        return "csv" if self.how.startswith("csv") else "yes"

    def to_dict(self) -> dict:
        return {"accepts": self.accepts, "how": self.how, "rule": self.rule}


class Shape(NamedTuple):
    """What the rules look at: the schedule and its sizes, the placement of its stages, and
    the transformer layers per stage (``layer_cut`` set: the split cuts a layer)."""

    schedule: str                     # registered name
    pp: int
    vpp: int
    microbatches: int
    placement: str = "loop"           # "loop", "v" or "other"
    layers: tuple[int, ...] = ()      # whole transformer layers per stage (model order)
    layer_cut: str | None = None
    csv_reason: str | None = None     # set: torch's CSV format cannot hold the schedule
    group_size: int | None = None     # interleaved 1F1B's microbatch group N
    ends: tuple[bool, bool] = (False, False)   # the first stage holds the embedding rows, the
                                               # last the LM head / loss rows
    max_pending: float | None = None  # zb-greedy's memory limit, in forwards


def torch_class_rule(cls: str, pp: int, vpp: int, m: int) -> str | None:
    """Why torch's class ``cls`` refuses P, v, M (None: it accepts)."""
    if cls in SINGLE_STAGE and vpp != 1:
        return f"Schedule{cls} runs one stage per rank, got {vpp}"
    if cls == "1F1B" and m < pp:
        # schedules.py Schedule1F1B.__init__: n_microbatches < self._num_stages -> ValueError
        return f"Schedule1F1B needs at least as many microbatches as stages (M {m} < P {pp})"
    if cls in ("Interleaved1F1B", "InterleavedZeroBubble"):
        rounds = max(1, m // pp)
        # schedules.py: number_of_rounds = max(1, n_microbatches // pp_group_size);
        # n_microbatches % number_of_rounds != 0 -> ValueError
        if m % rounds:
            return (f"Schedule{cls} needs M to be a multiple of its rounds, max(1, M // P) = "
                    f"{rounds} (M {m}, P {pp})")
    if cls in V_CLASSES and vpp != 2:
        # schedules.py ScheduleZBVZeroBubble / ScheduleDualPipeV: n_local_stages != 2
        return f"Schedule{cls} needs exactly 2 stages per rank, got {vpp}"
    if cls == "DualPipeV" and m < 2 * pp:
        # schedules.py ScheduleDualPipeV: n_microbatches < self._num_stages -> ValueError
        return f"ScheduleDualPipeV needs at least as many microbatches as stages (M {m} < {2 * pp})"
    return None


def torch_verdict(s: Shape) -> Verdict:
    cls = torch_class_of(s.schedule)
    why = torch_class_rule(cls, s.pp, s.vpp, s.microbatches) if cls else None
    if cls is not None and why is None:
        return Verdict("torch", True, f"Schedule{cls}")
    if s.csv_reason is not None:
        return Verdict("torch", False, "", s.csv_reason if why is None else f"{why}; and "
                       f"{s.csv_reason}")
    note = why if why is not None else f"torch has no class for {s.schedule}"
    return Verdict("torch", True, "csv (_PipelineScheduleRuntime._load_csv)", note)


def megatron_verdict(s: Shape) -> Verdict:
    def no(rule: str) -> Verdict:
        return Verdict("megatron", False, "", rule)

    megatron = megatron_of(s.schedule)
    if megatron == "1f1b" and s.vpp == 1:
        how = "1F1B (forward_backward_pipelining_without_interleaving)"
    elif megatron == "interleaved" and s.vpp > 1:
        how = "interleaved 1F1B (forward_backward_pipelining_with_interleaving)"
        if s.pp < 2:
            # arguments.py: virtual stages need --pipeline-model-parallel-size > 1 (> 2 with
            # --no-overlap-p2p-communication)
            return no(f"Megatron-LM runs virtual stages only with 2 or more pipeline ranks "
                      f"(pp {s.pp})")
        n = s.group_size if s.group_size is not None else s.pp
        # megatron/core/pipeline_parallel/schedules.py, forward_backward_pipelining_with_
        # interleaving: N > M or N < P -> ValueError; 0 < M mod N < P -> RuntimeError
        if not s.pp <= n <= s.microbatches:
            return no(f"Megatron-LM's interleaved schedule needs P <= N <= M microbatches per "
                      f"group (P {s.pp}, N {n}, M {s.microbatches})")
        if 0 < s.microbatches % n < s.pp:
            return no(f"Megatron-LM's interleaved schedule needs M mod N to be 0 or at least "
                      f"P (M {s.microbatches}, N {n}, P {s.pp})")
    elif megatron == "zero-bubble":
        pending = s.max_pending if s.max_pending is not None else s.pp
        how = ("the zero-bubble fork's own layout (sail-sg/zero-bubble-pipeline-parallelism: "
               f"--enable-zero-bubble --zero-bubble-max-pending-backward {pending:g})")
        if s.pp < 2:
            # megatron/arguments.py (tag zero-bubble-v0.1.0): "zero bubble must be enabled
            # with pipeline parallelism"
            return no(f"the zero-bubble fork runs --enable-zero-bubble only with 2 or more "
                      f"pipeline ranks (pp {s.pp})")
        if pending != int(pending):
            # arguments.py: int(args.zero_bubble_max_pending_backward)
            return no(f"the zero-bubble fork's --zero-bubble-max-pending-backward is a whole "
                      f"number of forwards (max_pending {pending:g})")
        if s.layers and fork_layer_flags(s.layers, s.pp, s.vpp, False) is None:
            return no("the zero-bubble fork places the layers evenly over the stages, or "
                      "padded to a multiple of them (--allow-padding-num-layers: a padding "
                      "layer off the last stage, then off the first ones); got "
                      f"{' '.join(map(str, s.layers))}")
    elif megatron == "zero-bubble-v":
        setup = zb_v_setup(s.schedule)
        how = ("the zero-bubble fork's V schedule (sail-sg/zero-bubble-pipeline-parallelism: "
               f"--zero-bubble-v-schedule --zero-bubble-v-schedule-mem-setup {setup})")
        if s.pp < 2:
            # megatron/arguments.py (tag zero-bubble-v0.1.0): the V schedule turns zero bubble
            # on, "zero bubble must be enabled with pipeline parallelism"
            return no(f"the zero-bubble fork runs --zero-bubble-v-schedule only with 2 or more "
                      f"pipeline ranks (pp {s.pp})")
        if s.layers and fork_layer_flags(s.layers, s.pp, s.vpp, True) is None:
            # arguments.py: num_layers divisible by pp, an even count per stage; the V's two
            # chunks a rank take half each (ParallelTransformer's offsets)
            return no(f"the zero-bubble fork's V schedule places the layers evenly, the same "
                      f"number on each of the {len(s.layers)} chunks (got "
                      f"{' '.join(map(str, s.layers))})")
    elif megatron == "interleaved":
        return no("Megatron-LM runs interleaved 1F1B only with 2 or more virtual stages; at "
                  "vpp 1 it runs 1F1B (-s 1f1b)")
    else:
        return no(f"Megatron-LM has no {s.schedule} schedule (it runs 1F1B, interleaved "
                  f"1F1B with virtual stages, and zb-greedy, v-zb, v-half and v-min on the "
                  f"zero-bubble fork)")
    if s.layer_cut is not None:
        return no(f"Megatron-LM places whole transformer layers; {s.layer_cut}")
    if s.layers and empty_chunk(s.layers, *s.ends) is not None:
        # a first stage of the embedding alone, a last of the loss alone: its account flags
        return no("Megatron-LM's layout gives every stage a layer or an embedding/loss; "
                  "a stage here holds no transformer layer")
    return Verdict("megatron", True, how)


def torchtitan_verdict(s: Shape) -> Verdict:
    def no(rule: str) -> Verdict:
        return Verdict("torchtitan", False, "", rule)

    stages = s.pp * s.vpp
    if s.pp == 1 and s.vpp > 1:
        # parallel_dims.py: pp_enabled is pp > 1; trainer.py builds a pipeline only then and
        # otherwise runs the microbatches one after another on the whole model
        return no(f"torchtitan builds no pipeline at pipeline_parallel_degree 1 (pp_enabled is "
                  f"pp > 1), so not {s.vpp} stages on one rank: it runs 1f1b at vpp 1")
    cls = torch_class_of(s.schedule)
    why = torch_class_rule(cls, s.pp, s.vpp, s.microbatches) if cls else None
    if cls is not None and why is None:
        how = cls
    elif s.csv_reason is not None:
        return no(s.csv_reason)
    elif s.placement == "other":
        # pipeline_parallel.py _get_pp_rank_to_stage_indices_mapping: "loop", or "v" for
        # ZBVZeroBubble/DualPipeV with 2 stages per rank; the CSV's own placement is not read
        return no(f"torchtitan places stages in a loop, or in a V with 2 per rank; "
                  f"{s.schedule}'s placement is neither (the CSV would load and hang)")
    elif s.placement == "v" and s.vpp != 2:
        return no("torchtitan places V stages only 2 per rank")
    else:
        how = "csv (pipeline_parallel_schedule_csv)"
    if s.microbatches < stages:
        # torchtitan#775: PP hangs when microbatches < stages; pipeline_parallel.py
        # _build_pipeline_schedule warns n_microbatches < num_total_stages
        return no(f"torchtitan needs at least as many microbatches as stages (M "
                  f"{s.microbatches} < {stages}): fewer hang (torchtitan#775)")
    if s.layer_cut is not None:
        return no(f"torchtitan places whole transformer layers; {s.layer_cut}")
    return Verdict("torchtitan", True, how, why)


def check_runtimes(shape: Shape) -> dict[str, Verdict]:
    """The verdict of each runtime in :data:`RUNTIMES`."""
    return {"torch": torch_verdict(shape), "megatron": megatron_verdict(shape),
            "torchtitan": torchtitan_verdict(shape)}


def placement_kind(schedule) -> str:
    """``loop`` (stage s on rank s mod P), ``v`` (rank r holds r and 2P-1-r) or ``other``."""
    placed = tuple(schedule.placement)
    if placed == loop_placement(schedule.pp, schedule.vpp):
        return "loop"
    if schedule.vpp == 2 and placed == v_placement(schedule.pp):
        return "v"
    return "other"


def shape_of(schedule, workload=None, partition=None, options: dict | None = None) -> Shape:
    """The :class:`Shape` of a built schedule, with the layers of ``partition`` (its chunks
    from ``workload``) when given."""
    layers: tuple[int, ...] = ()
    cut = None
    ends = (False, False)
    if workload is not None and partition is not None:
        found = chunk_layers_of(workload, partition.chunks)
        layers, cut = found.counts, found.cut
        ends = (found.embedding_chunk == 0, found.head_chunk == len(partition.chunks) - 1)
    group = None
    if megatron_of(schedule.name) == "interleaved":   # Megatron's rule reads its group N
        try:
            group = resolve_group_size(schedule.pp, schedule.microbatches, schedule.vpp,
                                       (options or {}).get("group_size"), schedule.name)
        except ConfigError:
            group = None
    pending = (schedule.meta or {}).get("max_pending") \
        if megatron_of(schedule.name) == "zero-bubble" else None
    return Shape(schedule.name, schedule.pp, schedule.vpp, schedule.microbatches,
                 placement_kind(schedule), layers, cut, torch_cannot_run(schedule), group, ends,
                 pending)
