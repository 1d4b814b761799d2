"""The search space: every (TP, pp, vpp, microbatches, schedule, split) a plan screens, as
:class:`Candidate` records, and the cost-aware candidates (``auto``, ``zb-greedy``, ``v-zb``)
added on the shapes that win."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, NamedTuple

from ..errors import ConfigError
from ..workload.stage_layers import PipelineSplit, default_chunk_layers, empty_chunk

AUTO = "auto"
# the zero-bubble fork's own layout (--enable-zero-bubble), laid out on the winning shapes as
# auto is, under its two documented limits of pending backwards: p (ZB-1p) and 2p (ZB-2p)
ZB_GREEDY = "zb-greedy"
ZB_PENDING = (1, 2)
# the fork's own V layout (--zero-bubble-v-schedule), laid out on the same shapes at v = 2
V_ZB = "v-zb"
VARIABLE_VPPS = (1, 2, 4)   # chunks per rank tried for a schedule that takes any number
AUTO_VPPS = (1, 2)
AUTO_SHAPES = 2            # pipeline degrees auto is synthesized on
AUTO_ITERATIONS = 200      # auto's local-search moves per start (-O iterations=...)
AUTO_MAX_ACTIONS = 3_000   # larger shapes are not synthesized (listed with the reason)
# the cost-aware candidates a winning shape gets: auto at each v and two caps, zb-greedy at
# each limit, v-zb once
COST_AWARE_PER_SHAPE = 2 * len(AUTO_VPPS) + len(ZB_PENDING) + 1
# iterations a candidate runs when its iterations overlap (--optimizer-post-validation): the
# first holds the pipeline's fill, the second is the steady state
OVERLAPPED_RUNS = 2


class ScheduleChoice(NamedTuple):
    """A hand-made schedule as the enumeration needs it."""

    name: str
    variable_vpp: bool   # takes any number of chunks per rank (tried at VARIABLE_VPPS)
    default_vpp: int     # else its own


@dataclass(frozen=True)
class Candidate:
    index: int
    tp: int
    pp: int
    dp: int
    vpp: int
    microbatches: int
    schedule: str
    max_in_flight: int | None = None   # auto's cap K
    search_iterations: int | None = None   # auto's local-search moves per start
    max_pending: int | None = None     # zb-greedy's memory limit, in forwards
    recompute: str = "file"
    reason: str | None = None          # set: infeasible before it runs
    workload: str = ""                 # the file it runs (one per TP with model flags)
    split: tuple = ()                  # a PipelineSplit's fields; empty: the default split
    cp: int = 1                        # context parallelism (its workload's rows hold s/cp)
    ep: int = 1                        # expert parallelism (its workload's experts over ep)
    # iterations one screen runs: OVERLAPPED_RUNS where the iterations overlap (the
    # optimizer's post-validation), ranked by the last, the steady state
    runs: int = 1

    @property
    def key(self) -> str:
        k = f"tp{self.tp}-pp{self.pp}-v{self.vpp}-m{self.microbatches}-{self.schedule}"
        k += f"-k{self.max_in_flight}" if self.max_in_flight is not None else ""
        k += f"-pending{self.max_pending}" if self.max_pending is not None else ""
        k += split_key(self.split)
        k += f"-cp{self.cp}" if self.cp > 1 else ""
        k += f"-ep{self.ep}" if self.ep > 1 else ""
        return k + (f"-r{self.recompute}" if self.recompute != "file" else "")

    @property
    def shard_ranks(self) -> int:
        """The ranks FSDP shards over: DP x CP (torchtitan's ``dp_shard_cp`` mesh)."""
        return self.dp * self.cp

    @property
    def split_options(self) -> dict[str, Any]:
        """The split as :func:`simulator.api.simulate` keywords (none: the default split)."""
        if not self.split:
            return {}
        return dict(zip(SPLIT_OPTIONS, PipelineSplit(*self.split)))


    @property
    def options(self) -> dict[str, int]:
        out = {}
        if self.max_in_flight is not None:
            out["max_in_flight"] = self.max_in_flight
        if self.search_iterations is not None:
            out["iterations"] = self.search_iterations
        if self.max_pending is not None:
            out["max_pending"] = self.max_pending
        return out


# the RunOptions fields of a PipelineSplit's fields, in order
SPLIT_OPTIONS = ("decoder_first_pipeline_num_layers", "decoder_last_pipeline_num_layers",
                 "account_for_embedding_in_pipeline_split", "account_for_loss_in_pipeline_split",
                 "pipeline_parallel_layers_per_stage", "pipeline_parallel_first_stage_less_layers",
                 "pipeline_parallel_last_stage_less_layers")


def split_key(split: tuple) -> str:
    """The candidate key's part for a split (empty for the default)."""
    if not split:
        return ""
    sp = PipelineSplit(*split)
    return ("-split" + (f"-f{sp.first}" if sp.first is not None else "")
            + (f"-l{sp.last}" if sp.last is not None else "")
            + ("-ae" if sp.account_for_embedding else "") + ("-al" if sp.account_for_loss else "")
            + (f"-lps{sp.layers_per_stage}" if sp.layers_per_stage is not None else "")
            + (f"-fl{sp.first_less}" if sp.first_less is not None else "")
            + (f"-ll{sp.last_less}" if sp.last_less is not None else ""))


def split_label(split: tuple) -> str:
    """The split in words for a table (empty for the default): Megatron-LM's options by what
    they set, e.g. ``first 5, last 7`` or ``embedding and loss as layers``."""
    if not split:
        return ""
    sp = PipelineSplit(*split)
    ends = [name for name, on in (("embedding", sp.account_for_embedding),
                                  ("loss", sp.account_for_loss)) if on]
    parts = [f"{what} {n}" for what, n in (("first", sp.first), ("last", sp.last),
                                           ("layers a stage", sp.layers_per_stage),
                                           ("first less", sp.first_less),
                                           ("last less", sp.last_less)) if n is not None]
    if ends:
        parts.append(" and ".join(ends) + " as layers")
    return ", ".join(parts)


# Megatron-LM's own rebalancing of the end stages, searched where it gives another split
END_STAGE_SPLITS = (PipelineSplit(account_for_loss=True),
                    PipelineSplit(account_for_embedding=True),
                    PipelineSplit(account_for_embedding=True, account_for_loss=True))
# the schedules whose layouts Megatron-LM's split options set
END_STAGE_SCHEDULES = ("1f1b", "interleaved-1f1b")


def end_stage_splits(n_layers: int, pp: int, vpp: int) -> list[tuple]:
    """The splits of :data:`END_STAGE_SPLITS` Megatron-LM accepts at ``pp`` x ``vpp`` that differ
    from the default split and from each other (the embedding's and the loss's place counted as
    a layer: a lighter first or last chunk)."""
    seen = {default_chunk_layers(n_layers, pp * vpp)}
    out = []
    for sp in END_STAGE_SPLITS:
        try:
            counts = sp.counts(n_layers, pp, vpp)
        except ConfigError:
            continue
        if counts not in seen and (len(counts) < 2 or min(counts) > 0):
            seen.add(counts)
            out.append(tuple(sp))
    return out


def ends_only(split: tuple, n_layers: int, pp: int, vpp: int, ends: tuple[bool, bool]) -> bool:
    """Whether ``split`` (a PipelineSplit's fields) places more chunks than layers by leaving
    only an end chunk without layers, one that holds the file's embedding (``ends[0]``) or LM
    head / loss rows (``ends[1]``): the run takes it (:func:`.stage_layers.empty_chunk`)."""
    if not split:
        return False
    try:
        counts = PipelineSplit(*split).counts(n_layers, pp, vpp)
    except ConfigError:
        return False
    return empty_chunk(counts, *ends) is None


def divisors(n: int) -> list[int]:
    """The divisors of ``n`` in increasing order, in O(sqrt n)."""
    small, large = [], []
    d = 1
    while d * d <= n:
        if n % d == 0:
            small.append(d)
            if d * d != n:
                large.append(n // d)
        d += 1
    return small + large[::-1]


def enumerate_candidates(tp: int, gpus: int, global_batch: int, n_layers: int,
                         schedules: list[ScheduleChoice], first: int = 0,
                         workload: str = "", split: tuple = (),
                         layered: bool = False,
                         ends: tuple[bool, bool] = (False, False),
                         cp: int = 1, ep: int = 1, runs: int = 1) -> list[Candidate]:
    """Every (pp, vpp, schedule, K) for ``gpus`` GPUs at tensor-parallel size ``tp``, context
    parallelism ``cp`` (DP = gpus / (tp x cp x pp)) and expert parallelism ``ep`` (which must
    divide DP x CP, Megatron-LM's rule).

    ``schedules``: the hand-made schedules (``auto`` is added later by
    :func:`auto_candidates`). A shape the sizes alone rule out (DP not dividing the global batch, more chunks than
    layers, a split Megatron-LM refuses) is a candidate with its ``reason``. ``split``: the
    split every candidate runs; else, where the file has layers of several rows (``layered``),
    the Megatron-LM schedules also run at each of :func:`end_stage_splits`. ``ends``: the file
    has rows before its first layer and after its last (:func:`ends_only`). ``runs``: the
    iterations each screen runs (:data:`OVERLAPPED_RUNS` where they overlap).
    """
    out: list[Candidate] = []

    def add(**kw: Any) -> None:
        out.append(Candidate(first + len(out), workload=workload, cp=cp, ep=ep, runs=runs,
                             **kw))

    for pp in divisors(gpus // (tp * cp)):
        dp = gpus // (tp * cp * pp)
        m = global_batch // dp
        shape_reason = None
        if global_batch % dp:
            shape_reason = (f"global batch {global_batch} is not a multiple of DP {dp}")
            m = 0
        elif m < 1:
            shape_reason = f"global batch {global_batch} < DP {dp}"
        elif (dp * cp) % ep:
            shape_reason = (f"DP {dp}" + (f" x CP {cp}" if cp > 1 else "")
                            + f" is not a multiple of EP {ep} (the experts are split over the "
                            "data-parallel ranks)")
        for choice in schedules:
            for v in (VARIABLE_VPPS if choice.variable_vpp else (choice.default_vpp,)):
                reason = shape_reason
                if reason is None and pp * v > n_layers and not ends_only(split, n_layers, pp,
                                                                          v, ends):
                    reason = f"{pp * v} chunks for {n_layers} layers"
                if reason is None and split:
                    try:
                        PipelineSplit(*split).counts(n_layers, pp, v)
                    except ConfigError as err:
                        reason = str(err)
                add(tp=tp, pp=pp, dp=dp, vpp=v, microbatches=m, schedule=choice.name,
                    reason=reason, split=split)
                if reason is None and not split and layered and pp > 1 and \
                        choice.name in END_STAGE_SCHEDULES:
                    for variant in end_stage_splits(n_layers, pp, v):
                        add(tp=tp, pp=pp, dp=dp, vpp=v, microbatches=m, schedule=choice.name,
                            split=variant)
    return out


def auto_candidates(first: int, shapes: list[Candidate], n_layers: int) -> list[Candidate]:
    """``auto`` at v = 1, 2 and K = P*v, 2*P*v on each shape's (tp, pp, dp, microbatches)."""
    out = []
    for c in shapes:
        for v in AUTO_VPPS:
            base = c.pp * v
            for k in (base, 2 * base):
                reason = None
                if c.pp * v > n_layers:
                    reason = f"{c.pp * v} chunks for {n_layers} layers"
                elif 3 * c.pp * v * c.microbatches > AUTO_MAX_ACTIONS:
                    reason = (f"auto not synthesized above {AUTO_MAX_ACTIONS} actions "
                              f"({3 * c.pp * v * c.microbatches})")
                out.append(Candidate(first + len(out), c.tp, c.pp, c.dp, v, c.microbatches,
                                     AUTO, k, AUTO_ITERATIONS, reason=reason,
                                     workload=c.workload, split=c.split if v == c.vpp else (),
                                     cp=c.cp, ep=c.ep, runs=c.runs))
    return out


def zb_greedy_candidates(first: int, shapes: list[Candidate]) -> list[Candidate]:
    """``zb-greedy`` at v = 1 under p and 2p pending backwards on each shape's (tp, pp, dp,
    microbatches); ``shapes`` have two or more pipeline ranks (the fork's rule)."""
    out = []
    for c in shapes:
        for k in ZB_PENDING:
            out.append(Candidate(first + len(out), c.tp, c.pp, c.dp, 1, c.microbatches,
                                 ZB_GREEDY, max_pending=k * c.pp, workload=c.workload,
                                 split=c.split if c.vpp == 1 else (), cp=c.cp, ep=c.ep,
                                 runs=c.runs))
    return out


def v_zb_candidates(first: int, shapes: list[Candidate], n_layers: int) -> list[Candidate]:
    """``v-zb`` (two chunks a rank in a V) on each shape's (tp, pp, dp, microbatches);
    ``shapes`` have two or more pipeline ranks (the fork's rule)."""
    out = []
    for c in shapes:
        reason = f"{2 * c.pp} chunks for {n_layers} layers" if 2 * c.pp > n_layers else None
        out.append(Candidate(first + len(out), c.tp, c.pp, c.dp, 2, c.microbatches, V_ZB,
                             reason=reason, workload=c.workload,
                             split=c.split if c.vpp == 2 else (), cp=c.cp, ep=c.ep,
                             runs=c.runs))
    return out
