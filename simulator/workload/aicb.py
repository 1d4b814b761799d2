"""The AICB stage layout: find it, recover the per-microbatch block, and lay it out as a pipeline.

A SimAI/AICB file (one with ``ga:``) is one pipeline stage's trace, unrolled over the ``ga``
microbatches: iteration-level rows (grad_norm, grad_gather, ... the DP/optimizer work), then
``ga`` repeats of one microbatch's rows (embedding, the transformer sub-layers, the final
projection), then iteration-level rows again (cross_entropy, optimizer). Its ``vpp:`` holds the
layers per stage, not virtual stages.

How the block is found (:func:`recover_stage`):

- ``ga >= 2``: by structure. Rows are compared by their signature (name, the three comm tokens
  and their byte counts; compute times are left out because AICB's first repeat carries a stale
  value in one cell). The block is the longest run of rows that repeats exactly ``ga`` times back
  to back; it must not itself be a repetition of a shorter unit (that is a uniform model written
  once, not a stage unrolled over microbatches). Where the repeats disagree in a compute time or
  update time, the value most repeats have is used and a note says so.
- ``ga == 1``: nothing repeats, so the iteration rows are recognised by AICB's names (a leading
  run of ``grad_*``, ``moe_grad_norm*``, ``embedding_grads``, ``layernorm``, ``norm`` rows and a
  trailing run of ``cross_entropy*``/``optimizer*`` rows); what lies between is the block. A
  file without ``ga:`` whose rows show neither those names nor transformer layers is not read
  as a stage trace even when the layout is forced.

Inside the block the transformer layers are found by structure too: the shortest unit of rows
that repeats the most rows back to back is one layer. Its first row is the layer's first row
whose name starts with ``attention`` (the phase of a repeat is otherwise ambiguous); earlier
rows with that same signature start layers too (DeepSeek's dense first layer), rows before the
first layer are the head (embedding, first stage) and rows after the last full unit the tail
(final projection, last stage).

The block is taken as ONE stage (the header's ``pp`` stages of it make the model, as AICB writes
it); :func:`partition_aicb` splits that model's ``pp x L`` transformer layers into the schedule's
chunks (remainder to the first chunks), the head going to chunk 0 and the tail to the last chunk,
and the iteration rows run once per iteration on every rank.
"""

from __future__ import annotations

from collections import Counter
from itertools import accumulate, repeat
from operator import attrgetter, eq

from ..errors import ConfigError, WorkloadError
from .chunks import LayerRows, chunk_bounds, recompute_plan, row_bounds_from_layers
from .iteration_rows import POST_NAME, PRE_NAME, chunk_shares
from .model import AicbStage, Layer, Partition, Workload, new_layer

# AICB's iteration-level row names, used only when ga == 1 (nothing repeats to find the block by)
_PRE_NAME = PRE_NAME
_POST_NAME = POST_NAME
_LAYER_NAME = ("attention", "mlp", "moe")
_TIMED = ("fwd_compute", "ig_compute", "wg_compute", "update_time")
_timed = attrgetter(*_TIMED)


class NotAicb(Exception):
    """The rows do not have the AICB stage structure; ``found`` says what was found instead."""

    def __init__(self, found: str, line: int | None = None) -> None:
        super().__init__(found)
        self.found = found
        self.line = line


# -- public entry points -------------------------------------------------------------------

def detect_layout(workload: Workload) -> Workload:
    """The parser's hook: decide (``layout == "model"``, auto) or force (``"aicb"``) the layout.

    Auto reads a file as the AICB layout when its header has ``ga:`` and the block is found
    (for ``ga: 1`` also when the block's layer count equals ``vpp:`` or it has no layers, since
    nothing repeats to confirm it). Forcing ``aicb`` on rows without that structure is a
    :class:`WorkloadError` saying what was expected and found.
    """
    forced = workload.layout == "aicb"
    h = workload.header
    if not forced and "ga" in h.defaults_used:
        return workload
    try:
        stage = recover_stage(workload)
    except NotAicb as err:
        if forced:
            raise WorkloadError(workload.path, err.line, None, "layout", expected_text(h.ga),
                                err.found) from None
        return workload._replace(layout="model", layout_detected=(
            f"{workload.path}: read as the model layout (the rows are the whole model once): "
            f"the header has ga: {h.ga} and no layout:, and the rows are not an AICB stage "
            f"trace ({err.found})"))
    if not forced and h.ga == 1 and stage.layers_per_stage not in (0, h.vpp):
        return workload._replace(layout="model", layout_detected=(
            f"{workload.path}: read as the model layout (the rows are the whole model once): "
            f"the header has ga: 1 and no layout:, and the {stage.layers_per_stage} layer(s) "
            f"between AICB's iteration rows are not its vpp: {h.vpp}"))
    detected = "" if forced else (
        f"{workload.path}: read as an AICB stage trace (one stage of {h.pp} unrolled over the "
        f"microbatches): the header has ga: {h.ga} and no layout:, and " + (
            f"lines {stage.repeat_lines[0][0]}-{stage.repeat_lines[-1][1]} are {h.ga} repeats "
            f"of a {stage.block_rows}-row block" if stage.found_by == "repetition" else
            f"lines {stage.repeat_lines[0][0]}-{stage.repeat_lines[0][1]} lie between AICB's "
            "iteration rows") + f" of {stage.layers_per_stage} transformer layer(s)")
    return workload._replace(layout="aicb", aicb=stage, layout_detected=detected,
                             warnings=tuple(workload.warnings) + stage.notes)


def expected_text(ga: int) -> str:
    return (f"the AICB stage layout: iteration rows, then {ga} (ga) repeats of one "
            "microbatch's rows, then iteration rows")


def recover_stage(workload: Workload) -> AicbStage:
    """Find the block and its layers; raises :class:`NotAicb` when the rows lack the structure."""
    rows = workload.layers
    h = workload.header
    ga = h.ga
    notes: list[str] = []
    if ga >= 2:
        pre, size, others = _find_repeats(rows, ga)
        found_by = "repetition"
        if others:
            alt = ", ".join(f"line {rows[p].line}" for p in others)
            notes.append(f"{workload.path}: the repeated block could also start at {alt}; "
                         f"using line {rows[pre].line}")
    else:
        pre, size = _find_by_names(rows)
        found_by = "names"
    block = _representative(rows, pre, size, ga, workload.path, notes)
    head_len, spans, tail_start = _split_block(block)
    L = len(spans)
    if ga >= 2 and L == 0:
        raise NotAicb("a repeated block with no transformer layers")
    if L == 0 and size == len(rows) and "ga" in h.defaults_used:
        # no ga: key, no AICB iteration rows, no layers: nothing says this is a stage trace
        raise NotAicb("no iteration rows and no layers", rows[0].line)
    if L and L != h.vpp and "vpp" not in h.defaults_used:
        notes.append(f"{workload.path}:1: vpp: is {h.vpp}, but the block (lines "
                     f"{block[0].line}-{block[-1].line}) has {L} transformer layer(s); AICB "
                     f"writes layers per stage in vpp:, so the block is taken as one stage of "
                     f"{L} layer(s) ({h.pp * L} in the model over pp {h.pp})")
    stage_layers = tuple(tuple(block[a:b]) for a, b in spans)
    _check_model_rows(workload, h.pp, sum(b - a for a, b in spans), len(block) - len(spans))
    model, model_spans, offsets, iteration = _build_model(block, head_len, spans, tail_start,
                                                          h.pp, rows[:pre] + rows[pre + ga * size:])
    return AicbStage(
        found_by=found_by, repeats=ga, block_start=pre, block_rows=size,
        repeat_lines=tuple((rows[pre + k * size].line, rows[pre + (k + 1) * size - 1].line)
                           for k in range(ga)),
        pre=tuple(rows[:pre]), post=tuple(rows[pre + ga * size:]),
        head=tuple(block[:head_len]), layers=stage_layers, tail=tuple(block[tail_start:]),
        stages=h.pp, model=model, layer_spans=model_spans, offsets=offsets,
        iteration=iteration, notes=tuple(notes))


def partition_aicb(workload: Workload, n_chunks: int) -> Partition:
    """Split the recovered model into ``n_chunks`` chunks (see the module docstring)."""
    st: AicbStage = workload.aicb  # type: ignore[assignment]
    chunks = tuple(tuple(st.model[a:b]) for a, b in chunk_rows(st, n_chunks, workload.path,
                                                                workload.header.stage_layers))
    recompute = _recompute(workload, st, chunks)
    rows = sum(b - a for a, b in st.layer_spans)
    per_layer = rows / len(st.layer_spans) if st.layer_spans else 1.0
    return Partition(chunks=chunks, iteration_layers=st.iteration, recompute=recompute,
                     rows_per_layer=per_layer,
                     iteration_share=chunk_shares(chunks, st.stages) if st.iteration else (),
                     iteration_stages=st.stages)


def chunk_layers(st: AicbStage, n_chunks: int, path: str = "<workload>",
                 counts: tuple[int, ...] = ()) -> list[tuple[int, int]]:
    """[first, last) transformer layer (model order) of each chunk; remainder to the first, or
    ``counts`` layers each (the header's ``stage_layers:``)."""
    if counts:
        return list(zip(accumulate(counts, initial=0), accumulate(counts)))
    n_layers = st.model_layers
    if n_chunks < 1:
        raise ConfigError(f"number of pipeline stages must be >= 1, got {n_chunks}")
    if n_chunks > max(n_layers, 1):
        raise ConfigError(
            f"{path}: cannot split the {n_layers} transformer layer(s) of the AICB model "
            f"({st.stages} stage(s) x {st.layers_per_stage} layer(s) recovered from the block) "
            f"into {n_chunks} pipeline chunks (pp x vpp); every chunk needs at least one layer")
    return chunk_bounds(n_layers, n_chunks)


def chunk_rows(st: AicbStage, n_chunks: int, path: str = "<workload>",
               counts: tuple[int, ...] = ()) -> list[tuple[int, int]]:
    """[start, stop) in ``st.model`` of each chunk: its layers, the head on the first chunk and
    the tail on the last."""
    spans = tuple(st.layer_spans)
    found = LayerRows(spans[0][0] if spans else 0, spans, spans[-1][1] if spans else 0)
    return row_bounds_from_layers(found, len(st.model), chunk_layers(st, n_chunks, path, counts))


# -- finding the block ---------------------------------------------------------------------

def signature(layer: Layer) -> tuple:
    """What must match between repeats: the name and every collective (type token and bytes)."""
    return (layer.name, layer.fwd_comm.raw, layer.fwd_comm.bytes, layer.ig_comm.raw,
            layer.ig_comm.bytes, layer.wg_comm.raw, layer.wg_comm.bytes)


def _ids(rows) -> list[int]:
    table: dict[tuple, int] = {}
    return [table.setdefault(signature(r), len(table)) for r in rows]


def _find_repeats(rows: tuple[Layer, ...], ga: int) -> tuple[int, int, list[int]]:
    """(first row, rows per repeat, other possible first rows) of the longest block repeated
    ``ga`` times back to back."""
    n = len(rows)
    ids = _ids(rows)
    # the longest block first (real files stop at once); every row of the repeats is written
    # at least ga times, which bounds the block (a file of distinct rows is refused at once)
    for size in range(_often_stretch(ids, ga) // ga, 0, -1):
        slack = n - ga * size
        span = (ga - 1) * size
        # repeats start at s when rows s .. s+span-1 all equal the row `size` further on: a run
        # of span 1s in `same`, searched in C (a file with no repeat tries every size: a loop
        # over each start took 3.3 s for 10k distinct rows at ga 2)
        same = bytes(map(eq, ids[:slack + span], ids[size:]))
        ok = [s for s in _runs_from(same, span, slack) if _maximal(ids, s, size, ga)]
        if not ok:
            continue
        pre = ok[0]
        period = _period(ids[pre:pre + size])
        if period < size:
            raise NotAicb(f"each repeat is {size // period} x the same {period} rows")
        return pre, size, ok[1:]
    raise NotAicb(f"no block of rows repeated {ga} times")


def _often_stretch(ids: list[int], times: int) -> int:
    """The most consecutive rows each written at least ``times`` times in all: any ``times``
    back-to-back repeats of a block lie within such a stretch, which bounds the block."""
    count = Counter(ids)
    return max(map(len, bytes(count[i] >= times for i in ids).split(b"\0")))


def _runs_from(same: bytes, span: int, last: int) -> list[int]:
    """Every s <= ``last`` with ``same[s:s + span]`` all ones."""
    if span == 0:
        return list(range(last + 1))
    ones = b"\1" * span
    out: list[int] = []
    s = same.find(ones, 0, last + span)
    while s >= 0:
        out.append(s)
        s = same.find(ones, s + 1, last + span)
    return out


def _maximal(ids: list[int], start: int, size: int, ga: int) -> bool:
    """The ``ga`` repeats from ``start`` are not part of a longer run of the same block (a model
    written once with more than ``ga`` identical layers is not an AICB stage)."""
    block = ids[start:start + size]
    end = start + ga * size
    return ids[start - size:start] != block and ids[end:end + size] != block


def _period(ids: list[int]) -> int:
    """The smallest p dividing len(ids) such that ids is len/p copies of its first p entries."""
    n = len(ids)
    for p in range(1, n // 2 + 1):
        if n % p == 0 and ids[p:] == ids[:-p]:
            return p
    return n


def _longest_match_run(ids: list[int], p: int, at_least: int = 1) -> tuple[int, int]:
    """[start, stop) of the first longest run of i with ids[i] == ids[i + p] ((0, 0) if none,
    or if none is ``at_least`` long).

    In C, not a Python loop: the block split tries every period, so a stage trace of P stages
    (rows ~ P) costs O(P^2) comparisons (P = 2000: 0.9 s in a loop)."""
    matches = bytes(map(eq, ids, ids[p:]))          # 1 where ids[i] == ids[i + p]
    if matches.find(b"\1" * max(1, at_least)) < 0:
        return 0, 0
    longest = max(map(len, matches.split(b"\0")))
    if not longest:
        return 0, 0
    start = matches.find(b"\1" * longest)           # inside no longer run: it is the longest
    return start, start + longest


def _find_by_names(rows: tuple[Layer, ...]) -> tuple[int, int]:
    pre = 0
    while pre < len(rows) and _PRE_NAME.match(rows[pre].name):
        pre += 1
    end = len(rows)
    while end > pre and _POST_NAME.match(rows[end - 1].name):
        end -= 1
    if end <= pre:
        raise NotAicb("no rows between the iteration rows", rows[0].line if rows else None)
    return pre, end - pre


def _representative(rows: tuple[Layer, ...], pre: int, size: int, ga: int, path: str,
                    notes: list[str]) -> tuple[Layer, ...]:
    """The block's rows, each cell the value most repeats have (ties: the later repeat's)."""
    out = []
    for off in range(size):
        first = rows[pre + off]
        ref = _timed(first)
        later = rows[pre + size + off:pre + ga * size:size]     # the same row in repeats 2..ga
        if all(map(eq, map(_timed, later), repeat(ref))):
            out.append(first)   # the repeats agree (the common case): nothing to choose
            continue
        changes = {}
        for fld in _TIMED:
            values = [getattr(rows[pre + k * size + off], fld) for k in range(ga)]
            counts = Counter(values)
            if len(counts) == 1:
                continue
            best = max(counts.values())
            chosen = next(v for v in reversed(values) if counts[v] == best)
            if chosen != getattr(first, fld):
                changes[fld] = chosen
            odd = ", ".join(f"{v} in {c} repeat(s)" for v, c in counts.items() if v != chosen)
            notes.append(f"{path}:{first.line}: {first.name} {fld} differs between the "
                         f"microbatch repeats ({odd}; {chosen} in {counts[chosen]}); using "
                         f"{chosen}")
        out.append(first._replace(**changes) if changes else first)
    return tuple(out)


# -- the block's layers --------------------------------------------------------------------

def _split_block(block: tuple[Layer, ...]) -> tuple[int, list[tuple[int, int]], int]:
    """(head rows, [start, stop) of each layer, first tail row) within the block."""
    ids = _ids(block)
    n = len(ids)
    best = None  # (covered rows, -period, run start, run stop)
    # two periods or more: every row of them is written twice or more, and a period is at
    # most half of such a stretch (a block of distinct rows tries none)
    for p in range(1, min(n, _often_stretch(ids, 2)) // 2 + 1):
        # a later period wins only by covering more rows: a run of L matches covers at most
        # L + p, so one shorter than best - p + 1 cannot
        start, stop = _longest_match_run(ids, p, best[0] - p + 1 if best else 1)
        if stop == start:
            continue
        stop += p   # rows start..stop-1 repeat with period p
        units = (stop - start) // p
        if units < 2:
            continue
        key = (units * p, -p, start, stop)
        if best is None or key[:2] > best[:2]:
            best = key
    if best is None:
        return _split_by_names(block)
    _, neg_p, start, stop = best
    p = -neg_p
    phase = next((o for o in range(p) if start + o < stop and
                  block[start + o].name.lower().startswith("attention")), 0)
    first = start + phase
    units = (stop - first) // p
    end = first + units * p
    lead = ids[first]
    starts = [i for i in range(first) if ids[i] == lead] + list(range(first, end, p))
    spans = [(a, b) for a, b in zip(starts, starts[1:] + [end])]
    return starts[0], spans, end


def _split_by_names(block: tuple[Layer, ...]) -> tuple[int, list[tuple[int, int]], int]:
    """No repeated unit: a layer starts at each ``attention*`` row after a non-attention row and
    the last one ends after the last ``attention*``/``mlp*``/``moe*`` row."""
    def is_attn(i: int) -> bool:
        return block[i].name.lower().startswith("attention")

    starts = [i for i in range(len(block)) if is_attn(i) and (i == 0 or not is_attn(i - 1))]
    if not starts:
        return len(block), [], len(block)
    end = max(i for i in range(len(block)) if block[i].name.lower().startswith(_LAYER_NAME)) + 1
    end = max(end, starts[-1] + 1)
    return starts[0], list(zip(starts, starts[1:] + [end])), end


# The most rows the model built from a stage trace may have (pp copies of the block's layer
# rows): far above any real model (pp 64 x 100 layers x 6 rows is 38,400) and a few hundred MB
# at most; a header's pp: beyond it would make the parse itself unbounded.
MAX_MODEL_ROWS = 200_000


def _check_model_rows(workload: Workload, pp: int, layer_rows: int, other_rows: int) -> None:
    """Refuse, before building it, a model of more than :data:`MAX_MODEL_ROWS` rows."""
    rows = pp * layer_rows + other_rows
    if rows > MAX_MODEL_ROWS:
        most = max(1, (MAX_MODEL_ROWS - other_rows) // max(1, layer_rows))
        raise WorkloadError(
            workload.path, 1, None, "pp",
            f"at most {most:,} stages for this stage trace (its block has {layer_rows:,} layer "
            f"row(s); the model is pp copies of them, at most {MAX_MODEL_ROWS:,} rows)",
            str(pp))


def _build_model(block, head_len, spans, tail_start, stages, iteration_rows):
    """The model in order (head, ``stages`` copies of the layers, tail), re-indexed."""
    picks: list[tuple[Layer, int]] = [(block[i], i) for i in range(head_len)]
    model_spans = []
    # a block without layers has nothing to copy: the loop is bounded by the rows it builds
    # (checked by _check_model_rows), never by the header's pp alone
    for _ in range(stages if spans else 0):
        for a, b in spans:
            model_spans.append((len(picks), len(picks) + b - a))
            picks += [(block[i], i) for i in range(a, b)]
    picks += [(block[i], i) for i in range(tail_start, len(block))]
    model = tuple(_reindexed(layer, k) for k, (layer, _) in enumerate(picks))
    offsets = tuple(off for _, off in picks)
    iteration = tuple(_reindexed(layer, len(model) + k) for k, layer in enumerate(iteration_rows))
    return model, tuple(model_spans), offsets, iteration


def _reindexed(r: Layer, index: int) -> Layer:
    """``r._replace(index=index)`` without its keyword handling (the model's every row)."""
    return new_layer(index, r.name, r.fwd_compute, r.fwd_comm, r.ig_compute, r.ig_comm,
                     r.wg_compute, r.wg_comm, r.update_time, r.line, r.policy, r.reserved)


def _recompute(workload: Workload, st: AicbStage,
               chunks: tuple[tuple[Layer, ...], ...]) -> tuple[dict[int, tuple[int, ...]], ...]:
    """Header checkpoint rows (file indices) mapped to every model row at the same block offset."""
    h = workload.header
    if not h.checkpoint_initiates:
        return tuple({} for _ in chunks)
    lo, hi = st.block_start, st.block_start + st.repeats * st.block_rows

    def model_rows(file_rows: tuple[int, ...]) -> tuple[int, ...]:
        offs = {(i - lo) % st.block_rows for i in file_rows if lo <= i < hi}
        return tuple(k for k, off in enumerate(st.offsets) if off in offs)

    ckpts, inits = model_rows(h.checkpoints), model_rows(h.checkpoint_initiates)
    return tuple(recompute_plan(c, ckpts, inits) for c in chunks)
