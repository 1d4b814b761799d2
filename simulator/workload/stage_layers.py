"""Transformer layers, not rows: which rows make each layer, how many layers each chunk holds, and
the header's ``stage_layers:`` split.

A runtime (Megatron-LM, torchtitan) places whole transformer layers on stages; a file's rows are
finer (attention and MLP rows, AICB's sub-layer rows). This module finds the layers among the rows
(the same rule that recovers an AICB stage's layers: a repeated unit of rows, else one layer per
``attention*`` row; a file with neither has one layer per row), so that every split is one of
whole layers: the default (:func:`default_chunk_layers`), Megatron-LM's uneven first and last
stages and its embedding/loss accounting (:func:`megatron_chunk_layers`), or the header's
``stage_layers: 5 6 6 7``. :func:`chunk_layers_of` tells a given split in layers, or says it cuts
one.
"""

from __future__ import annotations

from typing import NamedTuple

from ..errors import ConfigError, WorkloadError
from .chunks import LayerRows, row_bounds_from_layers
from .iteration_rows import model_rows
from .model import Layer, Workload


def layer_rows(rows: tuple[Layer, ...]) -> LayerRows:
    """The layers among a model-layout file's rows. A repeated unit that holds several
    attention blocks is not one layer (an AICB stage trace read as one model repeats whole
    microbatches): then each ``attention*`` block starts a layer."""
    from .aicb import _split_block, _split_by_names   # the rules that recover an AICB stage's

    head, spans, tail = _split_block(tuple(rows))
    if any(_attention_starts(rows, a, b) > 1 for a, b in spans):
        head, spans, tail = _split_by_names(tuple(rows))
    if not spans:
        return LayerRows(0, tuple((i, i + 1) for i in range(len(rows))), len(rows))
    return LayerRows(head, tuple(spans), tail)


def _attention_starts(rows: tuple[Layer, ...], a: int, b: int) -> int:
    """``attention*`` blocks that start within rows [a, b)."""
    def attn(i: int) -> bool:
        return rows[i].name.lower().startswith("attention")

    return sum(1 for i in range(a, b) if attn(i) and (i == a or not attn(i - 1)))


def n_model_layers(workload: Workload) -> int:
    """Transformer layers in the model the file describes."""
    if workload.layout == "aicb" and workload.aicb is not None:
        return workload.aicb.model_layers
    return len(layer_rows(model_rows(workload)[0]).spans)


def end_rows(workload: Workload) -> tuple[bool, bool]:
    """Whether the file has rows before its first transformer layer (the embedding) and after
    its last (the final norm, LM head and loss): what a first or last chunk of no layers
    holds."""
    if workload.layout == "aicb" and workload.aicb is not None:
        spans = workload.aicb.layer_spans
        if not spans:
            return False, False
        return spans[0][0] > 0, spans[-1][1] < len(workload.aicb.model)
    rows = model_rows(workload)[0]
    found = layer_rows(rows)
    return found.head > 0, found.tail < len(rows)


def empty_chunk(counts: tuple[int, ...], head: bool, tail: bool) -> int | None:
    """The first chunk of ``counts`` (layers per chunk, model order) that would hold no rows:
    a chunk of no layers, unless it is the first and the file has rows before the first layer
    (``head``) or the last and the file has rows after the last (``tail``); None when every
    chunk holds something. The one rule for every split (the runtimes' options, the header's
    ``stage_layers:``, ``pipesim generate``'s)."""
    if len(counts) < 2:
        return None
    last = len(counts) - 1
    return next((c for c, k in enumerate(counts)
                 if k == 0 and not ((c == 0 and head) or (c == last and tail))), None)


def check_stage_layers(workload: Workload) -> None:
    """``stage_layers:`` must add up to the file's transformer layers (once the layout is
    known), and give a chunk no layers only where it holds the embedding (the first) or the
    LM head / loss rows (the last)."""
    counts = workload.header.stage_layers
    if not counts:
        return
    n = n_model_layers(workload)
    column = workload.header.stage_layers_column or None
    if sum(counts) != n:
        raise WorkloadError(workload.path, 1, column,
                            "stage_layers", f"layer counts adding up to the file's {n} "
                            "transformer layers", f"{' '.join(map(str, counts))} "
                            f"(sum {sum(counts)})")
    if 0 in counts:
        c = empty_chunk(counts, *end_rows(workload))
        if c is not None:
            raise WorkloadError(workload.path, 1, column, "stage_layers",
                                "a layer count >= 1 per stage, 0 only for the first stage where "
                                "the file has rows before the first layer (the embedding) or "
                                "the last where it has rows after the last (the LM head / loss)",
                                f"{' '.join(map(str, counts))} (stage {c} would hold no rows)")


def check_stage_count(workload: Workload, n_chunks: int) -> None:
    """A run's pp x vpp must be the number of counts ``stage_layers:`` gives."""
    counts = workload.header.stage_layers
    check_stage_layers(workload)
    if counts and len(counts) != n_chunks:
        raise ConfigError(f"{workload.path}:1: stage_layers: gives {len(counts)} stages "
                          f"({' '.join(map(str, counts))}), the run has pp x vpp = {n_chunks}; "
                          "set --pp/--vpp to match or drop stage_layers: from the header")


def default_chunk_layers(num_layers: int, n_chunks: int) -> tuple[int, ...]:
    """pipesim's split of ``num_layers`` whole transformer layers over ``n_chunks`` chunks
    (pp x vpp, model order) when nothing else is said: an even split, the first
    ``num_layers % n_chunks`` chunks one layer more.

    Where the layers divide evenly this is Megatron-LM's default (``num_layers / (pp x vpp)`` a
    chunk) and torchtitan's split with ``pipeline_parallel_{first,last}_stage_less_layers = 0``;
    where they do not, Megatron-LM runs it with ``--pipeline-model-parallel-layout`` and
    torchtitan with ``module_fqns_per_model_part`` (docs/workload-format.md)."""
    base, extra = divmod(num_layers, n_chunks)
    return tuple(base + (1 if c < extra else 0) for c in range(n_chunks))


def megatron_chunk_layers(num_layers: int, pp: int, vpp: int = 1, first: int | None = None,
                          last: int | None = None, account_for_embedding: bool = False,
                          account_for_loss: bool = False) -> tuple[int, ...]:
    """Transformer layers of each of the ``pp x vpp`` chunks, in model order (chunk ``k`` is
    virtual stage ``k // pp`` on pipeline rank ``k % pp``), as Megatron-LM places them from
    ``--num-layers``, ``--pipeline-model-parallel-size``, its virtual stages per rank,
    ``--decoder-first-pipeline-num-layers`` (``first``), ``--decoder-last-pipeline-num-layers``
    (``last``), ``--account-for-embedding-in-pipeline-split`` and
    ``--account-for-loss-in-pipeline-split``; raises :class:`ConfigError` (one line naming the
    option and what was expected) where Megatron-LM refuses the arguments.

    The rule (megatron-core ``transformer_block.get_num_layers_to_build``,
    ``transformer_layer.get_transformer_layer_offset`` and ``TransformerConfig.__post_init__``):

    - ``first``/``last`` given: rank 0 holds ``first`` layers, rank ``pp - 1`` holds ``last``,
      each other rank ``(num_layers - first - last) / (pp - 2)``; every rank splits its layers
      evenly over its ``vpp`` chunks, so each of these counts must divide by ``vpp``. They do not
      combine with the account flags.
    - otherwise ``num_layers`` (plus one with each account flag) divides by ``pp``, each rank's
      share by ``vpp``; each flag then takes one layer's place from the first chunk (the
      embedding) or the last (the loss), which may leave it none.
    """
    first_flag, last_flag = "--decoder-first-pipeline-num-layers", "--decoder-last-pipeline-num-layers"
    if first is not None or last is not None:
        if account_for_embedding or account_for_loss:
            raise ConfigError(f"{first_flag if first is not None else last_flag}: expected no "
                         "--account-for-embedding-in-pipeline-split or --account-for-loss-in-"
                         "pipeline-split with it (Megatron-LM takes one or the other)")
        if pp < 2:
            raise ConfigError(f"{first_flag if first is not None else last_flag}: expected --pp >= 2 "
                         f"(uneven first and last pipeline stages), got pp {pp}")
        for flag, n in ((first_flag, first), (last_flag, last)):
            if n is not None and (n < 1 or n % vpp):
                raise ConfigError(f"{flag}: expected a positive multiple of the {vpp} virtual "
                             f"stage(s) per rank, got {n}")
        middle_layers = num_layers - (first or 0) - (last or 0)
        middle_ranks = pp - (first is not None) - (last is not None)
        given = " + ".join(str(n) for n in (first, last) if n is not None)
        if middle_layers < 0 or bool(middle_layers) != bool(middle_ranks) or (
                middle_ranks and middle_layers % (middle_ranks * vpp)):
            raise ConfigError(f"{first_flag if first is not None else last_flag}: expected the "
                         f"{num_layers} layers less {given} to split evenly over the other "
                         f"{middle_ranks} pipeline rank(s) x {vpp} virtual stage(s), got "
                         f"{middle_layers} layer(s) left")
        per_middle = middle_layers // middle_ranks if middle_ranks else 0
        per_rank = [per_middle] * pp
        if first is not None:
            per_rank[0] = first
        if last is not None:
            per_rank[-1] = last
        return tuple(per_rank[k % pp] // vpp for k in range(pp * vpp))
    total = num_layers + int(account_for_embedding) + int(account_for_loss)
    counted = f"{num_layers} layers" + (f" + {total - num_layers} (embedding/loss)"
                                        if total != num_layers else "")
    if total % pp or (total // pp) % vpp:
        flag = ("--account-for-embedding-in-pipeline-split" if account_for_embedding else
                "--account-for-loss-in-pipeline-split" if account_for_loss else "--pp")
        raise ConfigError(f"{flag}: expected {counted} to split evenly over pp {pp} x vpp {vpp} "
                     f"(Megatron-LM's even split), got {total} over {pp * vpp} chunk(s)")
    counts = [total // (pp * vpp)] * (pp * vpp)
    counts[0] -= int(account_for_embedding)
    counts[-1] -= int(account_for_loss)
    if min(counts) < 0:
        raise ConfigError("--account-for-embedding-in-pipeline-split: expected at least one layer "
                     f"in the first and last chunk, got {counted} over {pp * vpp} chunk(s)")
    return tuple(counts)


class TorchtitanSplitError(ConfigError):
    """torchtitan refusing its split: ``option`` is the one at fault (``"stages"``: more stages
    than effective layers; ``"first"`` / ``"last"``: that stage's less-layers), ``limit`` the most
    torchtitan allows it. A reader of torchtitan's own config names its key from these."""

    # defaults keep it picklable (a sweep's worker sends it back by its message)
    def __init__(self, message: str, option: str | None = None, limit: int | None = None) -> None:
        super().__init__(message)
        self.option = option
        self.limit = limit


def torchtitan_chunk_layers(num_layers: int, n_stages: int, first_less: int = 1,
                            last_less: int = 1) -> tuple[int, ...]:
    """Transformer layers of each of ``n_stages`` stages (model order) as torchtitan's automatic
    split places them (``pipeline_parallel.py``, ``_generate_llm_fqn_per_model_part``): the
    embedding counts as ``first_less`` layers and the final norm and LM head as ``last_less``
    (``pipeline_parallel_{first,last}_stage_less_layers``, default 1 each); the
    ``num_layers + first_less + last_less`` effective layers split evenly, the first stages one
    more, and the first and the last stage then hold that many transformer layers less. Raises
    :class:`TorchtitanSplitError` where torchtitan refuses."""
    if n_stages == 1:
        return (num_layers,)
    effective = num_layers + first_less + last_less
    per, extra = divmod(effective, n_stages)
    flag = "--pipeline-parallel-layers-per-stage"
    if per < 1:
        raise TorchtitanSplitError(f"{flag}: expected at most {effective} stages (torchtitan: "
                                   f"every stage needs an effective layer), got {n_stages}",
                                   "stages", effective)
    for name, less in (("first", first_less), ("last", last_less)):
        if less > per:
            raise TorchtitanSplitError(f"--pipeline-parallel-{name}-stage-less-layers: expected "
                                       f"at most {per} (torchtitan: the fewest effective layers "
                                       f"a stage holds), got {less}", name, per)
    counts = [per + (1 if k < extra else 0) for k in range(n_stages)]
    counts[0] -= first_less
    counts[-1] -= last_less
    return tuple(counts)


def torchtitan_stages(num_layers: int, layers_per_stage: int, first_less: int = 1,
                      last_less: int = 1) -> int:
    """The stages (pp x vpp) torchtitan builds from ``pipeline_parallel_layers_per_stage``:
    ``ceil((num_layers + first_less + last_less) / layers_per_stage)``."""
    return -(-(num_layers + first_less + last_less) // layers_per_stage)


# a NamedTuple, not a dataclass: start-up (simulator/__init__.py)
class PipelineSplit(NamedTuple):
    """The runtimes' options that set how layers split over stages: Megatron-LM's
    (:func:`megatron_chunk_layers`) or torchtitan's (:func:`torchtitan_chunk_layers`); none
    given: pipesim's default split (:func:`default_chunk_layers`)."""

    first: int | None = None               # --decoder-first-pipeline-num-layers
    last: int | None = None                # --decoder-last-pipeline-num-layers
    account_for_embedding: bool = False    # --account-for-embedding-in-pipeline-split
    account_for_loss: bool = False         # --account-for-loss-in-pipeline-split
    layers_per_stage: int | None = None    # torchtitan's pipeline_parallel_layers_per_stage
    first_less: int | None = None          # ..._first_stage_less_layers (torchtitan: 1)
    last_less: int | None = None           # ..._last_stage_less_layers (torchtitan: 1)

    @property
    def megatron(self) -> bool:
        return (self.first is not None or self.last is not None or self.account_for_embedding
                or self.account_for_loss)

    @property
    def torchtitan(self) -> bool:
        return (self.layers_per_stage is not None or self.first_less is not None
                or self.last_less is not None)

    @property
    def given(self) -> bool:
        return self.megatron or self.torchtitan

    def counts(self, num_layers: int, pp: int, vpp: int) -> tuple[int, ...]:
        """Layers per chunk at ``pp`` x ``vpp`` under the runtime's rule these options belong to
        (none: Megatron-LM's even split; :class:`ConfigError` where the runtime refuses them, or
        where both runtimes' are given)."""
        if self.megatron and self.torchtitan:
            raise ConfigError(f"{self.flags()[-1].split()[0]}: expected Megatron-LM's or "
                              f"torchtitan's split options, not both (got "
                              f"{self.flags()[0].split()[0]} too)")
        if not self.torchtitan:   # none given: Megatron-LM's even split
            return megatron_chunk_layers(num_layers, pp, vpp, self.first, self.last,
                                         self.account_for_embedding, self.account_for_loss)
        first_less = 1 if self.first_less is None else self.first_less
        last_less = 1 if self.last_less is None else self.last_less
        stages = pp * vpp
        if self.layers_per_stage is not None:
            made = torchtitan_stages(num_layers, self.layers_per_stage, first_less, last_less)
            if made != stages:
                fix = (f"--vpp {made // pp}" if made % pp == 0 else
                       f"a pipeline degree dividing {made}")
                raise ConfigError(
                    f"--pipeline-parallel-layers-per-stage: expected pp x vpp = {stages} stages "
                    f"from ceil(({num_layers} layers + {first_less} + {last_less}) / "
                    f"{self.layers_per_stage}), got {made}; set {fix}")
        return torchtitan_chunk_layers(num_layers, stages, first_less, last_less)

    def flags(self) -> list[str]:
        """The options as the runtime's command line writes them (torchtitan's as
        pipesim's flags for its ``[parallelism]`` keys)."""
        out = []
        if self.first is not None:
            out.append(f"--decoder-first-pipeline-num-layers {self.first}")
        if self.last is not None:
            out.append(f"--decoder-last-pipeline-num-layers {self.last}")
        if self.account_for_embedding:
            out.append("--account-for-embedding-in-pipeline-split")
        if self.account_for_loss:
            out.append("--account-for-loss-in-pipeline-split")
        if self.layers_per_stage is not None:
            out.append(f"--pipeline-parallel-layers-per-stage {self.layers_per_stage}")
        if self.first_less is not None:
            out.append(f"--pipeline-parallel-first-stage-less-layers {self.first_less}")
        if self.last_less is not None:
            out.append(f"--pipeline-parallel-last-stage-less-layers {self.last_less}")
        return out


def megatron_split_of(counts: tuple[int, ...], pp: int, vpp: int) -> PipelineSplit | None:
    """The Megatron-LM options whose split (:func:`megatron_chunk_layers`) is ``counts`` (layers
    per chunk, model order), the fewest first; None when only
    ``--pipeline-model-parallel-layout`` writes it."""
    n = sum(counts)
    first = sum(counts[0::pp])
    last = sum(counts[pp - 1::pp])
    tries = [PipelineSplit(), PipelineSplit(account_for_embedding=True),
             PipelineSplit(account_for_loss=True), PipelineSplit(None, None, True, True)]
    if pp >= 2:
        tries += [PipelineSplit(first), PipelineSplit(None, last), PipelineSplit(first, last)]
    for split in tries:
        try:
            if split.counts(n, pp, vpp) == tuple(counts):
                return split
        except ConfigError:
            continue
    return None


def with_split(workload: Workload, pp: int, vpp: int, split: PipelineSplit) -> Workload:
    """``workload`` with the layers per chunk that ``split`` gives at ``pp`` x ``vpp`` (as the
    header's ``stage_layers:`` would), or unchanged when nothing is given; refuses, in one line,
    what Megatron-LM refuses and a chunk that would hold no rows."""
    if not split.given:
        return workload
    flag = split.flags()[0].split()[0]
    if workload.header.stage_layers:
        raise ConfigError(f"{flag}: expected no stage_layers: in the header of {workload.path} "
                          "(both set the layers per stage), found stage_layers: "
                          + " ".join(map(str, workload.header.stage_layers)))
    counts = split.counts(n_model_layers(workload), pp, vpp)
    if 0 in counts:
        empty = empty_chunk(counts, *end_rows(workload))
        if empty is not None:
            raise ConfigError(f"{flag}: expected every chunk to hold a layer or the embedding "
                              f"/ LM head rows; chunk {empty} of {' '.join(map(str, counts))} "
                              f"holds nothing in {workload.path}")
    return workload._replace(header=workload.header._replace(stage_layers=counts))


def split_note(workload: Workload, n_chunks: int, split: PipelineSplit) -> str | None:
    """What a run says about its layers per chunk when a rule, not the file, chose an uneven
    split (None: an even split, the header's ``stage_layers:``, or a file without layers)."""
    counts = workload.header.stage_layers
    if split.given:
        return (f"layers per chunk: {' '.join(map(str, counts))} ("
                f"{'Megatron-LM' if split.megatron else 'torchtitan'}'s split with "
                f"{' '.join(split.flags())})")
    if counts or n_chunks < 2:
        return None
    n = n_model_layers(workload)
    if n % n_chunks == 0 or (workload.layout != "aicb" and
                             n == len(model_rows(workload)[0])):
        return None
    return (f"layers per chunk: {' '.join(map(str, default_chunk_layers(n, n_chunks)))}: the "
            f"file's {n} transformer layers do not divide by pp x vpp = {n_chunks}, so the "
            f"first chunks hold one more (docs/workload-format.md; "
            "--decoder-first/last-pipeline-num-layers set another split)")


def layer_bounds(counts: tuple[int, ...]) -> list[tuple[int, int]]:
    """[first, last) layer of each stage from its count."""
    out, at = [], 0
    for c in counts:
        out.append((at, at + c))
        at += c
    return out


class ChunkLayers(NamedTuple):
    """Transformer layers of each chunk of a partition, or where the split cuts a layer."""

    counts: tuple[int, ...]           # whole layers per chunk (model order)
    total: int                        # layers in the model
    embedding_chunk: int | None       # the chunk with the rows before the first layer
    head_chunk: int | None            # the chunk with the rows after the last layer
    cut: str | None = None            # set: the split cuts a layer (the counts are then empty)


def chunk_layers_of(workload: Workload, chunks: tuple[tuple[Layer, ...], ...]) -> ChunkLayers:
    """How many whole transformer layers each chunk holds (rows matched by their index)."""
    if workload.layout == "aicb" and workload.aicb is not None:
        st = workload.aicb
        rows = st.model
        spans = st.layer_spans
        head = spans[0][0] if spans else len(rows)
        tail = spans[-1][1] if spans else len(rows)
        found = LayerRows(head, tuple(spans), tail)
    else:
        rows = model_rows(workload)[0]
        found = layer_rows(rows)
    chunk_of = {}
    for c, chunk in enumerate(chunks):
        for r in chunk:
            chunk_of[r.index] = c
    pos = {r.index: p for p, r in enumerate(rows)}
    owner = [None] * len(rows)
    for idx, c in chunk_of.items():
        if idx in pos:
            owner[pos[idx]] = c
    counts = [0] * len(chunks)
    for k, (a, b) in enumerate(found.spans):
        held = {owner[p] for p in range(a, b)}
        if len(held) != 1:
            first = rows[a]
            where = sorted(c for c in held if c is not None)
            return ChunkLayers((), len(found.spans), None, None,
                               f"the split cuts transformer layer {k} (rows {rows[a].name}.."
                               f"{rows[b - 1].name}, lines {first.line}-{rows[b - 1].line}) "
                               f"between stages {' and '.join(map(str, where))}")
        counts[held.pop()] += 1
    emb = owner[0] if found.head > 0 else None
    head = owner[-1] if found.tail < len(rows) else None
    return ChunkLayers(tuple(counts), len(found.spans), emb, head)
