"""From a schedule (after the comm pass) to each rank's op list, with the timing of every
compute step worked out before the run.

Ops are plain tuples, cheap to walk in the hot loop:

- ``(COMPUTE, cost, actions)``: one action, or the two halves of an overlapped pair;
- ``(RECV, key, src_rank, None, transfer)`` and ``(SEND, key, dst_rank, bytes, transfer)``;
- ``(BATCH, ops)``: sends and receives posted together (blocking / batched point-to-point);
- torch's runtimes (``torch-single`` / ``torch-multi``, see docs/model.md): ``(IRECV, key, src,
  None, transfer)`` posts a receive, ``(WAIT, key, src, None, transfer)`` waits for it,
  ``(TSEND, key, dst, bytes, transfer)`` posts a send without waiting, ``(WAITSENDS, keys,
  transfers)`` waits for earlier sends; every send left is waited for at the end of the step.

A :class:`StepCost` is shared by every step with the same stages, kinds, roles and phases: only
the microbatch differs between them. It carries the runtime profile's launch overhead (``pre``)
and the costs the profile replaces (calibrated action costs, the first stage's torch backward).

Fast path `rank_ops` (docs/performance.md, "Fast paths"): a rank's ops are generated when walked
(:class:`RankOps`), more than 90 % cheaper than lists built from the comm pass: 0.03 s against
9.6 s at 1M actions (tests/engine/reference_program.py builds those lists).
"""

from __future__ import annotations

from array import array
from collections import Counter
from collections.abc import Sequence
from itertools import compress, count
from operator import attrgetter
from typing import NamedTuple

from ..errors import ConfigError
from ..schedules.comm_pass import GRADIENT, Compute, Transfer, lowered_for
from ..schedules.ops import iter_ops, peer as transfer_peer
from ..schedules.phases import (COOLDOWN, STEADY, WARMUP, PhaseLabels, _ONLY_B, _ONLY_W,
                                labels_of_kinds, rank_kinds, rank_stages, rank_unpaired)
from ..schedules.library.interleaved_1f1b import warmup_of
from ..schedules.registry import megatron_of, torch_class_of, torch_runtime_of
from ..schedules.schedule import Schedule
from ..system.collectives import ring_time_ns
from ..system.config import SystemConfig
from ..system.topology import LinkModel
from ..workload.model import CommGroup, CommType, Header, Partition
from ..system.per_runtime import for_runtime
from ..system.runtime_profile import RuntimeProfile
from .costs import (WEIGHT_GRADIENT, ActionCost, ChunkCosts, DPCollective, Segment,
                    overlapped, partition_costs)
from .memory import MemoryModel, build_memory_model
from .records import TransferRecord
from .tail import TailPlan, compile_tail, fsdp_gathers
from ..schedules.action import Kind

RECV, COMPUTE, SEND, BATCH, IRECV, WAIT, TSEND, WAITSENDS = 0, 1, 2, 3, 4, 5, 6, 7
# the modes whose transfers follow from each action (a receive right before it, a send right
# after it), unless the schedule came lowered; the others read the lowered steps (RankOps)
RULE_MODES = ("async", "blocking", "batched", "torch-single")
EMPTY = ActionCost(0.0, 0.0, (), 0)
_stage, _microbatch = attrgetter("stage"), attrgetter("microbatch")


# a NamedTuple, not a dataclass: start-up (simulator/__init__.py)
class StepCost(NamedTuple):
    """Timing of a compute step (see the module docstring)."""

    duration: float          # without variation
    compute: float           # the part variation scales
    comm: float              # blocking collectives inside the step
    paired: bool
    shares: tuple  # per action: (start fraction, end fraction, chunk, ActionCost, DP kind|None)
    dp: tuple[tuple[int, float, DPCollective], ...]  # (chunk, offset in step, collective)
    phases: tuple[str, ...]  # Warmup / Steady / Cooldown of each action
    pre: float = 0.0         # launch overhead paid before the step starts (runtime profile)

    @property
    def total(self) -> float:
        """``pre + duration``: the one timeout of the fast path."""
        return self.pre + self.duration




# a NamedTuple, not a dataclass: start-up (simulator/__init__.py)
class Program(NamedTuple):
    """Everything a run needs that does not change from run to run: compiled once, then reused
    by any number of runs (sweep points that differ only in run options, repeated iterations,
    both engines). Nothing here is mutated by a run.

    ``p2p_option`` is the point-to-point mode asked for (the option, or the system's
    ``runtime.p2p``); ``p2p`` the one compiled (``torch`` resolved to ``torch-single`` for gpipe
    and 1f1b, ``torch-multi`` otherwise). ``compiled[r]`` is rank r's op list (module docstring),
    ``tail`` the iteration's tail (each rank's share of the once-per-iteration rows, the DP
    collectives and the barrier: :mod:`.tail`), ``labels[r]`` the phase of each of its
    actions."""

    schedule: Schedule
    partition: Partition
    header: Header
    system: SystemConfig
    pp_comm: int
    p2p_option: str
    p2p: str
    links: LinkModel
    costs: tuple[ChunkCosts, ...]
    memory: MemoryModel
    tail: TailPlan
    labels: tuple[Sequence[str], ...]
    compiled: tuple
    layer_ops_per_iteration: int

    @property
    def profile(self) -> RuntimeProfile:
        return self.system.runtime

    @classmethod
    def compile(cls, schedule: Schedule, partition: Partition, header: Header,
                system: SystemConfig, *, p2p: str | None = None,
                pp_comm: int | None = None, links: LinkModel | None = None,
                ddp=None, tp_comm_overlap: bool = False,
                p2p_scatter_gather: bool = False) -> "Program":
        """Cost the chunks, lay out memory, add the communication and compile every rank's op
        list for point-to-point mode ``p2p`` (None: the system's ``runtime.p2p``); ``ddp``
        (:class:`~simulator.engine.options.DDPSettings`): Megatron-LM's data parallelism in
        place of the rows' own DP collectives; ``tp_comm_overlap``: costs.py's overlap rule;
        ``p2p_scatter_gather``: each transfer split over the stage's TP ranks and all-gathered
        over them on arrival (:meth:`~simulator.system.topology.LinkModel.with_p2p_split`)."""
        profile = system.runtime
        mode = p2p or profile.p2p
        # torch: the runtime the schedule's spec names (single-stage for GPipe and 1F1B)
        compiled_mode = mode if mode != "torch" else torch_runtime_of(schedule.name)
        system = for_runtime(system, compiled_mode)   # that runtime's own figures, if any
        profile = system.runtime
        pp_comm = header.pp_comm if pp_comm is None else pp_comm
        memory = build_memory_model(schedule, partition, header, system, compiled_mode, pp_comm)
        if links is None or links.system is not system:   # the plan's, unless the runtime's own
            links = LinkModel(header, system, schedule.pp)  # figures changed the system above
        costs = partition_costs(partition, header, system, links, tp_comm_overlap,
                                fsdp_gathers(schedule, partition, header, system, links, ddp),
                                ddp is not None and ddp.regathers_backward(schedule.pp))
        tail = compile_tail(schedule, partition, header, system, links, ddp=ddp, costs=costs,
                            tp_overlap=tp_comm_overlap)
        if p2p_scatter_gather and header.tp > 1:
            # the stage-to-stage transfers only (the collectives and the tail keep their
            # links): Megatron-LM's split_tensor_into_1d_equal_chunks before the send and
            # gather_split_1d_tensor after the receive (p2p_communication.py at 6985e58)
            gather = ring_time_ns(CommType.ALLGATHER, pp_comm, header.tp,
                                  links.collective(CommGroup.TP, CommType.ALLGATHER))
            links = links.with_p2p_split(header.tp, gather)
        costs = tail.chunk_costs(costs)   # Megatron's buckets in place of the rows' collectives
        labels = tuple(labels_of_kinds(rank_kinds(schedule, r))   # the letters every pass reads
                       for r in range(len(schedule.ranks)))
        builder = ProgramBuilder(schedule, costs, list(labels), compiled_mode, pp_comm,
                                 profile, ddp is not None and ddp.reshards(schedule.pp))
        if compiled_mode in RULE_MODES and (compiled_mode == "async" or not schedule.lowered):
            # its transfers follow from each action
            compiled = tuple(builder.compile_async(r) for r in range(schedule.pp))
        else:   # early receives (torch-multi), or a schedule given lowered: its own steps
            lowered, early = lowered_for(schedule, compiled_mode == "torch-multi")
            compiled = tuple(builder.compile_lowered(r, lowered, early)
                             for r in range(schedule.pp))
        layer_ops = sum(ops.layer_ops() for ops in compiled)
        layer_ops += tail.layer_ops
        return cls(schedule, partition, header, system, pp_comm, mode, compiled_mode, links,
                   tuple(costs), memory, tail, labels, compiled, layer_ops)


# a plain class, not a dataclass: start-up (simulator/__init__.py). The compiler's working
# state, made once per Program, never compared or printed.
class ProgramBuilder:
    """Compiles a schedule into the engines' steps, one rank at a time."""

    def __init__(self, schedule: Schedule, costs: list[ChunkCosts],
                 labels: list[Sequence[str]], p2p: str, pp_comm: int,
                 runtime: RuntimeProfile | None = None, every_backward: bool = False) -> None:
        self.schedule = schedule
        self.costs = costs
        # every weight-carrying backward issues its DP collectives (FSDP2 resharding), not
        # only each stage's last
        self.every_backward = every_backward
        self.labels = labels      # phase of every action, per rank
        self.p2p = p2p            # async | blocking | batched | torch-single | torch-multi
        self.pp_comm = pp_comm
        self.runtime = rt = RuntimeProfile() if runtime is None else runtime
        sched = schedule
        self.overrides: dict[tuple[int, str], float] = {}
        if rt.calibrated(sched.pp, sched.vpp):
            self.overrides = rt.action_costs()
            for stage, _ in self.overrides:
                if stage >= sched.n_stages:
                    raise ConfigError(
                        f"runtime.action_costs_ns: stage {stage} does not exist (calibrated "
                        f"for pp {sched.pp}, vpp {sched.vpp}: stages 0-{sched.n_stages - 1})")
        # torch's first stage computes no input gradient: its I is empty, its W the backward
        self.torch_first = ({p[0] for p in sched.pipelines}
                            if rt.first_stage_backward == "torch" else set())
        self.overhead = rt.action_overhead_ns if rt.has_overheads else None
        if megatron_pairs(sched, p2p):
            n = sched.meta.get("group_size") or sched.pp
            if sched.pp <= 2:
                # megatron/training/arguments.py: two ranks would exchange several tensors
                # with each other in one batch
                raise ConfigError(
                    f"--p2p batched: {sched.name} without overlap needs more than 2 pipeline "
                    f"ranks, got {sched.pp} (Megatron-LM asserts it: two ranks would exchange "
                    "several tensors in one batch); use --p2p async (Megatron's "
                    "--overlap-p2p-communication, its default)")
            if n > sched.pp and sched.microbatches > n:
                # Megatron posts the first stage's receives of such groups ahead of use, aligned
                # with the last stage's sends (recv_tensor_from_previous_stage), which
                # _paired_exchanges does not model: the run would stop in a deadlock
                raise ConfigError(
                    f"--p2p batched: {sched.name} in groups of {n} microbatches (more than P = "
                    f"{sched.pp}, {sched.microbatches} in all) needs the first stage's "
                    "receives posted ahead of use, which pipesim does not model; use --p2p "
                    "async (Megatron's --overlap-p2p-communication, its default) or groups of "
                    f"P (-O group_size={sched.pp}, with M a multiple of it)")

    def _roles(self, rank: int) -> tuple[list[bool], set[int]]:
        """Per action of ``rank``: does it carry the weights (W, or a B not split), and the
        positions of the last weight-carrying backward of each stage (and minibatch), which
        issue the DP collectives (with no flush, e.g. 2BW, each minibatch of the continuous
        schedule reduces its own)."""
        actions = self.schedule.ranks[rank]
        split = {(a.stage, a.microbatch) for a in actions if a.kind == Kind.W}
        weight_bwd = [a.kind == Kind.W
                      or (a.kind == Kind.B and (a.stage, a.microbatch) not in split)
                      for a in actions]
        if self.every_backward:
            return weight_bwd, {i for i, w in enumerate(weight_bwd) if w}
        per_minibatch = self.schedule.meta.get("microbatches_per_iteration") or 0
        last_wb: dict[tuple[int, int], int] = {}
        for i, a in enumerate(actions):
            if weight_bwd[i]:
                minibatch = a.microbatch // per_minibatch if per_minibatch else 0
                last_wb[(a.stage, minibatch)] = i
        return weight_bwd, set(last_wb.values())

    def _step_key(self, rank: int, pos: int, step: tuple, weight_bwd: list[bool],
                  last: set[int], labels: Sequence[str] | None = None) -> tuple:
        """The :meth:`step_cost` key of the step at action position ``pos`` (``labels``: the
        rank's labels, if the caller holds them as a list)."""
        actions = self.schedule.ranks[rank]
        if labels is None:
            labels = self.labels[rank]
        n = len(step)
        key = tuple((a.stage, a.kind, weight_bwd[pos + k], pos + k in last,
                     labels[pos + k]) for k, a in enumerate(step))
        # a pair run as two steps (torch-multi) is one launch
        first = step[0]
        if n == 1 and first.pair is not None:
            if pos > 0 and actions[pos - 1].pair == first.pair:
                key += (None,)
            elif pos + 1 < len(actions) and actions[pos + 1].pair == first.pair:
                key += (actions[pos + 1].kind,)
        return key

    def compile_lowered(self, rank: int, lowered: Schedule, early: bool) -> "RankOps":
        """Rank ``rank``'s op list read off ``lowered``'s steps (receives posted ``early`` or at
        use), kept compact: each compute step's cost index, the transfers made again from the
        steps when walked (:class:`RankOps`)."""
        weight_bwd, last = self._roles(rank)
        labels = list(self.labels[rank])     # read once per action below
        index: dict[tuple, int] = {}
        table: list[StepCost] = []
        first: list[tuple] = []
        steps = array("I")
        pos = 0   # compute steps appear in the order of the rank's actions
        for op in iter_ops(lowered, rank, early):
            if type(op) is Compute:
                key = self._step_key(rank, pos, op.actions, weight_bwd, last, labels)
                i = index.get(key)
                if i is None:
                    i = index[key] = len(table)
                    table.append(self.step_cost(key))
                    first.append(op.actions)
                steps.append(i)
                pos += len(op.actions)
        return RankOps(self.schedule, rank, tuple(table), steps, self.pp_comm, tuple(first),
                       mode=self.p2p, lowered=(lowered, early))

    def compile_async(self, rank: int) -> "RankOps":
        """Rank ``rank``'s op list for a mode of :data:`RULE_MODES`, kept compact: the comm
        pass's receives and sends follow from each action (see :class:`RankOps`), so only
        each step's cost is stored (an index into a small table, in order of first use)."""
        actions = self.schedule.ranks[rank]
        runs = self._steps_in_runs(rank)
        if runs is not None:
            table, first, steps, uses = runs
            return RankOps(self.schedule, rank, table, steps, self.pp_comm, first, uses,
                           mode=self.p2p)
        weight_bwd, last = self._roles(rank)
        labels = list(self.labels[rank])
        index: dict[tuple, int] = {}
        table_: list[StepCost] = []
        first_: list[tuple] = []        # per table entry: the actions of its first step
        steps = array("I")
        put = steps.append
        quick: dict[tuple, int] = {}   # plain single actions: (stage, kind, roles, label)
        n = len(actions)
        pos = 0
        while pos < n:
            a = actions[pos]
            pair = a.pair
            if pair is not None and pos + 1 < n and actions[pos + 1].pair == pair:
                step: tuple = (a, actions[pos + 1])
            else:
                step = (a,)
            q = (a.stage, a.kind, weight_bwd[pos], pos in last, labels[pos]) \
                if pair is None else None
            i = quick.get(q) if q is not None else None
            if i is None:
                key = self._step_key(rank, pos, step, weight_bwd, last, labels)
                i = index.get(key)
                if i is None:
                    i = index[key] = len(table_)
                    table_.append(self.step_cost(key))
                    first_.append(step)
                if q is not None:
                    quick[q] = i
            put(i)
            pos += len(step)
        return RankOps(self.schedule, rank, tuple(table_), steps, self.pp_comm, tuple(first_),
                       mode=self.p2p)

    def _steps_in_runs(self, rank: int) -> tuple[tuple, tuple, array, tuple | None] | None:
        """:meth:`compile_async`'s table, first steps and step indices, equal to its walk's
        (and how many steps use each entry, where counted in passing),
        without a Python statement per action: a rank of single actions (no overlapped pair)
        whose phases are runs of positions (:class:`PhaseLabels`), with a flush.

        A step's key is (stage, kind, carries weights, issues the DP collectives, phase).
        Within a phase run every action but a few has the key its stage and kind give (a
        backward carries the weights, a W does, a B whose weights a W computes does not; none
        issues the collectives), so the keys of a run are one C ``map`` over the rank's kind
        string (and stages, with several); the exceptions (the last weight-carrying backward
        of each stage, the B's a W completes) are set one by one. None: any other rank (the
        walk decides it)."""
        actions = self.schedule.ranks[rank]
        labels = self.labels[rank]
        n = len(actions)
        if (not isinstance(labels, PhaseLabels) or n == 0 or self.every_backward
                or self.schedule.meta.get("microbatches_per_iteration")
                or not rank_unpaired(self.schedule, rank)):
            return None
        kinds = rank_kinds(self.schedule, rank)
        if kinds.strip("FBIW"):
            return None
        own = rank_stages(self.schedule, rank)
        stages = [next(iter(own))] * n if len(own) == 1 else list(map(_stage, actions))
        # positions of the B's that carry no weights (their W does)
        no_weights: set[int] = set()
        raw = kinds.encode("ascii")
        if "W" in kinds and "B" in kinds:
            mbs = list(map(_microbatch, actions))
            w = raw.translate(_ONLY_W)
            split = set(zip(compress(stages, w), compress(mbs, w)))
            no_weights = {i for i in compress(count(), raw.translate(_ONLY_B))
                          if (stages[i], mbs[i]) in split}
        # the last weight-carrying backward of each stage issues its DP collectives
        last_of: dict[int, int] = {}
        for i in range(n - 1, -1, -1):
            k = kinds[i]
            if (k == "W" or (k == "B" and i not in no_weights)) and stages[i] not in last_of:
                last_of[stages[i]] = i
                if len(last_of) == len(own):
                    break
        last = set(last_of.values())
        kind_of = {k: Kind(k) for k in set(kinds)}
        pseudo: dict[tuple, int] = {}          # key -> a number of its own, while building

        def number(key: tuple) -> int:
            c = pseudo.get(key)
            if c is None:
                c = pseudo[key] = len(pseudo)
            return c

        bounds = ((0, labels.steady, WARMUP), (labels.steady, labels.cooldown, STEADY),
                  (labels.cooldown, n, COOLDOWN))
        codes: list[int] | bytearray
        if len(own) == 1:    # one byte per action: the kind letters translated, run by run
            (st,) = own
            codes = bytearray()
            for lo, hi, label in bounds:
                if lo < hi:
                    letters = bytearray(256)
                    for k in kind_of:
                        letters[ord(k)] = number((st, kind_of[k], k in "BW", False, label))
                    codes += raw[lo:hi].translate(letters)
        else:
            codes = []
            for lo, hi, label in bounds:
                if lo < hi:
                    plain = {(s, k): number((s, kind_of[k], k in "BW", False, label))
                             for s in own for k in kind_of}
                    codes += map(plain.__getitem__, zip(stages[lo:hi], kinds[lo:hi]))
        for i in sorted(last | no_weights):
            a = actions[i]
            weights = a.kind == Kind.W or (a.kind == Kind.B and i not in no_weights)
            codes[i] = number((a.stage, a.kind, weights, i in last, labels[i]))
        # table entries in order of first use, as the walk numbers them
        if isinstance(codes, bytearray):
            first_pos = {c: p for c in range(len(pseudo)) if (p := codes.find(c)) >= 0}
        else:
            first_pos = dict(zip(reversed(codes), range(n - 1, -1, -1)))   # first wins
        order = sorted(first_pos, key=first_pos.__getitem__)
        keys = list(pseudo)
        renumber = [0] * len(keys)
        for j, c in enumerate(order):
            renumber[c] = j
        table = tuple(self.step_cost((keys[c],)) for c in order)
        first = tuple((actions[first_pos[c]],) for c in order)
        if isinstance(codes, bytearray):
            steps = array("I", iter(codes.translate(bytes(renumber).ljust(256, b"\0"))))
            return table, first, steps, tuple(codes.count(c) for c in order)
        steps = array("I", map(renumber.__getitem__, codes))
        return table, first, steps, None


    def action_cost(self, stage: int, kind: str) -> tuple[ActionCost, str]:
        """What one action costs and which DP list it issues (the profile may replace the
        rows' sum: torch's first-stage backward, a calibrated cost)."""
        c = self.costs[self.schedule.stage_chunk[stage]]
        dp_kind = kind
        if stage in self.torch_first and kind in (Kind.I, Kind.W):
            cost, dp_kind = (EMPTY, Kind.I) if kind == Kind.I else (c.B, Kind.B)
        else:
            cost = c.of(kind)
        target = self.overrides.get((stage, kind)) if self.overrides else None
        if target is not None:
            cost = _rescaled(cost, target)
        return cost, dp_kind

    def step_cost(self, key: tuple) -> StepCost:
        """``key``: per action (stage, kind, carries weights, issues the DP collectives, phase);
        a pair run as two steps (torch-multi) ends the first half's key with its partner's kind
        (the pair's one launch overhead is the larger of the two) and the second half's with
        None (no launch of its own)."""
        continues = key[-1] is None
        kinds = [k[1] for k in key if type(k) is tuple]
        if type(key[-1]) is not tuple:        # a pair run as two steps: see ``compile``
            if not continues:
                kinds.append(key[-1])
            key = key[:-1]
        chunk_of = self.schedule.stage_chunk
        effective = [self.action_cost(stage, kind) for stage, kind, *_ in key]
        costs = [c for c, _ in effective]
        total = sum(c.duration for c in costs)
        comm = sum(c.comm for c in costs)
        paired = len(costs) > 1
        # an overlapped pair: its blocking collectives hide behind the pair's compute, never
        # more than that compute takes (costs.overlapped, the --tp-comm-overlap rule)
        duration = overlapped(total - comm, comm) if paired else total
        shares = []
        dp = []
        acc = 0.0
        for (stage, kind, weights, issues_dp, _), (c, dp_kind) in zip(key, effective):
            lo = acc / total if total else 0.0
            acc += c.duration
            hi = acc / total if total else 0.0
            chunk = chunk_of[stage]
            shares.append((lo, hi, chunk, c, dp_kind if issues_dp else None))
            if issues_dp:
                offset = lo * duration
                scale = (duration / total) if total else 0.0
                ready = {seg.layer: seg.offset + seg.duration for seg in c.segments
                         if seg.state == WEIGHT_GRADIENT}
                for d in self.costs[chunk].dp_after(dp_kind):
                    dp.append((chunk, offset + ready.get(d.layer, c.duration) * scale, d))
        pre = 0.0
        if self.overhead and not continues:
            pre = max(self.overhead[k] for k in kinds)
        return StepCost(duration, total - comm, comm, paired, tuple(shares), tuple(dp),
                        tuple(k[4] for k in key), pre)


class RankOps(Sequence):
    """A rank's op list: the one compiled form of a schedule below it, generated when walked
    (what ``ProgramBuilder.compile`` lists, equal op for op). Per compute step only the index
    of its :class:`StepCost` is stored (4 bytes); its actions are the schedule's. In the modes
    of :data:`RULE_MODES` the receives and sends follow from each action as the comm pass
    places them (a receive before the step when the input comes from another rank, a send
    after it when the output goes to one), per step-cost index once (:meth:`plan`, from
    ``ops.peer``); otherwise (``lowered``: torch-multi's early receives, a schedule given
    lowered) they are read off the lowered schedule's steps (``ops.iter_ops``). ``mode``
    blocking wraps each transfer in a BATCH of its own, batched puts adjacent ones in one,
    torch-single posts and waits as torch's single-stage runtime (:func:`_single_stage`),
    torch-multi posts its sends without waiting. A million actions then cost a few MB instead
    of a few hundred."""

    def __init__(self, schedule: Schedule, rank: int, costs: tuple[StepCost, ...],
                 steps: array, pp_comm: int, examples: tuple[tuple, ...],
                 uses: tuple[int, ...] | None = None, *, mode: str = "async",
                 lowered: tuple[Schedule, bool] | None = None) -> None:
        """``examples[i]``: the actions of a step with cost ``costs[i]`` (the index fixes each
        action's stage and kind); ``uses[i]``: how many steps have it, when known."""
        self.schedule = schedule
        self._uses = uses
        self.examples = examples
        self.rank = rank
        self.costs = costs
        self.steps = steps
        self.pp_comm = pp_comm
        # per (stage, kind): (data, upstream stage, its rank) / (data, downstream, its rank),
        # filled for the stages the rank's steps hold when first asked (a table over every
        # stage on every rank grew with P^2 v: 4.9 GB at P = 2000)
        self._recv: dict[tuple[int, str], tuple | None] = {}
        self._send: dict[tuple[int, str], tuple | None] = {}
        self._len: int | None = None
        self._plan: list[tuple] | None = None
        self.mode = mode
        self.lowered = lowered

    def recv_of(self, stage: int, kind: str) -> tuple | None:
        """(data, upstream stage, its rank) an action of ``stage`` and ``kind`` receives, or
        None when its input is on this rank (any stage: an unchecked list may hold others')."""
        key = (stage, kind)
        if key not in self._recv:
            self._recv[key] = self._peer(stage, kind, True)
        return self._recv[key]

    def send_of(self, stage: int, kind: str) -> tuple | None:
        """(data, downstream stage, its rank) an action sends, or None (see :meth:`recv_of`)."""
        key = (stage, kind)
        if key not in self._send:
            self._send[key] = self._peer(stage, kind, False)
        return self._send[key]

    def _peer(self, stage: int, kind: str, recv: bool) -> tuple | None:
        return transfer_peer(self.schedule, stage, kind, self.rank, recv)

    def receive(self, stage: int, kind: str, microbatch: int) -> Transfer:
        """The :class:`Transfer` an action of ``stage``, ``kind`` and ``microbatch`` on this
        rank receives (it must receive one): what a wait on it is described by."""
        data, other, src = self.recv_of(stage, kind)
        return Transfer("recv", data, other, stage, microbatch, src, self.rank)

    def plan(self) -> list[tuple]:
        """Per step-cost index (which fixes each action's stage and kind): (cost, number of
        actions, receives, sends), a receive / send being (position in the step, data, other
        stage, peer rank) for each action that needs one. Derived once."""
        if self._plan is None:
            self._plan = self._derive_plan()
        return self._plan

    def _derive_plan(self) -> list[tuple]:
        out = []
        for cost, acts in zip(self.costs, self.examples):
            recvs, sends = [], []
            for k, a in enumerate(acts):
                r = self.recv_of(a.stage, a.kind)
                if r is not None:
                    recvs.append((k,) + r)
                r = self.send_of(a.stage, a.kind)
                if r is not None:
                    sends.append((k,) + r)
            out.append((cost, len(cost.shares), tuple(recvs), tuple(sends)))
        return out

    def __iter__(self):
        """The ops, as ``ProgramBuilder.compile`` lists them (the SimPy engine's step-by-step
        walk reads them)."""
        ops = self._async_ops() if self.lowered is None else self._lowered_ops()
        if self.mode == "async":
            return ops
        if self.mode == "torch-single":
            return _single_stage(ops, _is_gpipe(self.schedule))
        if self.mode == "torch-multi":   # receives posted early by the comm pass
            return ((TSEND,) + op[1:] if op[0] == SEND else op for op in ops)
        if megatron_pairs(self.schedule, self.mode):
            ops = _paired_exchanges(ops, warmup_of(self.schedule)[self.rank])
        return _rendezvous(ops, self.mode == "batched")

    def _lowered_ops(self):
        """The ops of a lowered schedule's steps (``ops.iter_ops``), each compute step with
        its cost."""
        lowered, early = self.lowered
        costs = self.costs
        index = iter(self.steps)
        nbytes = self.pp_comm
        for op in iter_ops(lowered, self.rank, early):
            if type(op) is Compute:
                yield (COMPUTE, costs[next(index)], op.actions)
            elif op.op == "recv":
                yield (RECV, op.key, op.src_rank, None, op)
            elif op.op == "send":
                yield (SEND, op.key, op.dst_rank, nbytes, op)
            elif op.op == "irecv":
                yield (IRECV, op.key, op.src_rank, None, op)
            else:   # "wait"
                yield (WAIT, op.key, op.src_rank, None, op)

    def _async_ops(self):
        """The asynchronous ops: receives, the step, sends."""
        actions = self.schedule.ranks[self.rank]
        plan = self.plan()
        rank = self.rank
        nbytes = self.pp_comm
        new = tuple.__new__
        pos = 0
        for i in self.steps:
            cost, n, recvs, sends = plan[i]
            if n == 1:
                step = (actions[pos],)
                pos += 1
            else:
                step = actions[pos:pos + 2]
                pos += 2
            for k, data, other, peer in recvs:
                a = step[k]
                st, mb = a.stage, a.microbatch
                yield (RECV, (data, st, mb), peer, None,
                       new(Transfer, ("recv", data, other, st, mb, peer, rank)))
            yield (COMPUTE, cost, step)
            for k, data, other, peer in sends:
                a = step[k]
                mb = a.microbatch
                yield (SEND, (data, other, mb), peer, nbytes,
                       new(Transfer, ("send", data, a.stage, other, mb, rank, peer)))

    def send_records(self, rank: int, times, it: int, nbytes: int):
        """One pass over the sends as :class:`TransferRecord`s of iteration ``it``, each with
        the next (issued, start, end) of ``times``; stops early when ``times`` runs out (what
        the transfer columns read)."""
        actions = self.schedule.ranks[self.rank]
        plan = self.plan()
        new = tuple.__new__
        pos = 0
        for i in self.steps:
            _, n, _, sends = plan[i]
            for k, data, other, peer in sends:
                x = next(times, None)
                if x is None:
                    return
                a = actions[pos + k]
                yield new(TransferRecord, (rank, peer, a.stage, other, data, a.microbatch, it,
                                           nbytes, x[0], x[1], x[2]))
            pos += n

    def layer_ops(self) -> int:
        """Layer-level operations of one pass over the list."""
        use = (dict(enumerate(self._uses)) if self._uses is not None
               else Counter(self.steps))
        return sum(n * sum(share[3].layer_ops for share in self.costs[i].shares)
                   for i, n in use.items())

    def __len__(self) -> int:
        if self._len is None:
            self._len = sum(1 for _ in self)
        return self._len

    def __getitem__(self, index):
        return list(self)[index]

    def __eq__(self, other) -> bool:
        if isinstance(other, (list, tuple, RankOps)):
            return list(self) == list(other)
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"<RankOps rank {self.rank}: {len(self.steps)} steps>"


def _is_gpipe(schedule: Schedule) -> bool:
    """torch runs the schedule as ScheduleGPipe (its spec's class): :func:`_single_stage`'s
    GPipe rules."""
    return torch_class_of(schedule.name) == "GPipe"


def _single_stage(ops, gpipe: bool):
    """torch's single-stage runtime (ScheduleGPipe, Schedule1F1B) over the naive order
    ``ops`` (receives at use), generated as they are walked.

    A receive is posted right before the compute that needs it and waited for at once.
    1F1B: a send followed by a receive of the other direction (send forward + receive
    backward, or the reverse) is one fused batch, posted together and waited for together;
    any other send is waited for just before the rank posts its next send. GPipe: nothing is
    fused; the forward sends are waited for when the forwards are done, the backward sends at
    the end of the step."""
    unwaited: list[tuple] = []          # posted sends not waited for yet
    backward_seen = False
    ops = iter(ops)
    op = next(ops, None)
    while op is not None:
        code = op[0]
        if gpipe and not backward_seen and (
                (code == RECV and op[4].data == GRADIENT)
                or (code == COMPUTE and op[2][0].kind != Kind.F)):
            backward_seen = True
            if unwaited:
                yield (WAITSENDS, tuple(o[1] for o in unwaited), tuple(o[4] for o in unwaited))
                unwaited.clear()
        if code == COMPUTE:
            yield op
        elif code == RECV:
            yield (IRECV,) + op[1:]
            yield (WAIT,) + op[1:]
        else:   # SEND
            nxt = next(ops, None)
            fused = (not gpipe and nxt is not None and nxt[0] == RECV
                     and nxt[4].data != op[4].data)
            if not gpipe and unwaited:
                yield (WAITSENDS, tuple(o[1] for o in unwaited), tuple(o[4] for o in unwaited))
                unwaited.clear()
            yield (TSEND,) + op[1:]
            if fused:
                yield (IRECV,) + nxt[1:]
                yield (WAITSENDS, (op[1],), (op[4],))
                yield (WAIT,) + nxt[1:]
                op = next(ops, None)
            else:
                unwaited.append(op)
                op = nxt
            continue
        op = next(ops, None)


def megatron_pairs(schedule: Schedule, mode: str) -> bool:
    """Whether ``schedule``'s exchanges in ``mode`` are Megatron's interleaved loop's
    (:func:`_paired_exchanges`): batched, the comm pass's own placement, virtual stages."""
    return (mode == "batched" and schedule.vpp > 1 and not schedule.lowered
            and megatron_of(schedule.name) == "interleaved")


def _is_one(op, kind: str) -> bool:
    """Whether ``op`` is a compute step of one action of ``kind``."""
    return op[0] == COMPUTE and len(op[2]) == 1 and op[2][0].kind == kind


def _paired_exchanges(ops, warmup: int):
    """``ops`` with each steady-state forward (past the rank's ``warmup`` forwards) and the
    backward that follows it run back to back, their exchanges moved to either side, as
    Megatron-LM's interleaved schedule runs them without --overlap-p2p-communication
    (forward_backward_pipelining_with_interleaving: F, B, then one
    send_forward_backward_recv_forward_backward with both sends and the next pair's two
    receives). The backward's receive joins the exchange before the forward, the forward's
    sends the one after the backward; warm-up forwards and cool-down backwards keep theirs
    (send_forward_recv_forward, send_backward_recv_backward), and so does a rank whose
    forwards are all warm-up (its forwards, then its backwards; Megatron's send of its last
    forward and its recv_backward, made back to back, are one exchange here)."""
    before: list = []       # transfers to post before the next compute step
    held = None             # a steady forward whose follower is not known yet
    mid: list = []          # the transfers after it
    forwards = 0
    for op in ops:
        if op[0] != COMPUTE:
            (mid if held is not None else before).append(op)
            continue
        if held is not None:
            if _is_one(op, "B"):
                yield from before
                yield from (t for t in mid if t[0] != SEND)
                yield held
                yield op
                before, held, mid = [t for t in mid if t[0] == SEND], None, []
                continue
            yield from before
            yield held
            before, held, mid = mid, None, []
        if _is_one(op, "F") and forwards >= warmup:
            forwards += 1
            held = op
        else:
            forwards += _is_one(op, "F")
            yield from before
            yield op
            before = []
    yield from before
    if held is not None:
        yield held
        yield from mid


def _rendezvous(ops, batched: bool):
    """``ops`` with each transfer in a BATCH of its own (blocking), or the adjacent ones in
    one (batched: Megatron's send_forward_recv_backward and friends), as
    ``ProgramBuilder.compile`` groups them."""
    group: list[tuple] = []
    for op in ops:
        if op[0] == COMPUTE:
            if group:
                yield (BATCH, tuple(group))
                group = []
            yield op
        elif batched:
            group.append(op)
        else:
            yield (BATCH, (op,))
    if group:
        yield (BATCH, tuple(group))


def _rescaled(cost: ActionCost, target: float) -> ActionCost:
    """``cost`` stretched to last ``target`` ns, every layer state in proportion (equal shares
    when the rows sum to nothing)."""
    segs = cost.segments
    if cost.duration > 0:
        f = target / cost.duration
        new = tuple(Segment(s.layer, s.state, s.offset * f, s.duration * f) for s in segs)
        return ActionCost(target, cost.comm * f, new, cost.layer_ops)
    if not segs:
        return ActionCost(target, 0.0, (), cost.layer_ops)
    each = target / len(segs)
    new = tuple(Segment(s.layer, s.state, i * each, each) for i, s in enumerate(segs))
    return ActionCost(target, 0.0, new, cost.layer_ops)
