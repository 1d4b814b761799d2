"""What an action needs before it can run (the dependency rule), and the one integer code of an
action.

The rule, for microbatch m, with prev(s) and next(s) the stages before and after stage s in its
pipeline:

- F(s, m) needs F(prev(s), m): its input activation;
- B(s, m) and I(s, m) need F(s, m) (the activation they differentiate) and the input gradient
  of next(s) for m, which next(s)'s B carries or, with the backward split, its I;
- W(s, m) needs I(s, m);
- an overlapped pair's two halves start together: each half's needs are met before the pair
  starts, so neither half can wait on the other.

A pipeline's first stage's F and its last stage's B or I need nothing from a neighbour. Every
need is of the same microbatch, so the rule is a table over (stage, kind) (:func:`needs`);
:func:`need_rows` lays it out over the codes' rows for the hot loops that inline it (the
validator's walks, the list schedulers).

The code of an action: ``(kind * n_stages + stage) * microbatches + microbatch``, kinds numbered
F 0, I 1, W 2, B 3 (:data:`KIND_CODE`). The codes of one (kind, stage), its row
``kind * n_stages + stage``, are consecutive, one per microbatch; all forwards come first, so
``code // (n_stages * microbatches)`` is the kind and ``code % (n_stages * microbatches)`` the
(stage, microbatch) that the F, I, W and B of one stage and microbatch share.
"""

from __future__ import annotations

from typing import NamedTuple, Sequence

from .action import Action, Kind

F, I, W, B = 0, 1, 2, 3   # noqa: E741 -- kind codes
KIND_CODE = {Kind.F: F, Kind.I: I, Kind.W: W, Kind.B: B}
KIND_OF_CODE = (Kind.F, Kind.I, Kind.W, Kind.B)
# what carries the input gradient of (s, m) to the stage before: its B or, split, its I (the
# order messages name them in)
INPUT_GRADIENT = (Kind.B, Kind.I)

Need = tuple[tuple[int, Kind], ...]   # (stage, kind)s of the same microbatch: any one meets it


def neighbour_stages(pipelines: Sequence[Sequence[int]], n_stages: int
                     ) -> tuple[list[int], list[int]]:
    """Per stage its previous and next stage in its pipeline, -1 where there is none (a stage
    listed in two pipelines takes its first pipeline's, as ``Schedule.prev_stage`` does)."""
    prev = [-1] * n_stages
    nxt = [-1] * n_stages
    placed = bytearray(n_stages)
    for pipe in pipelines:
        for i, st in enumerate(pipe):
            if 0 <= st < n_stages and not placed[st]:
                placed[st] = 1
                if i > 0:
                    prev[st] = pipe[i - 1]
                if i + 1 < len(pipe):
                    nxt[st] = pipe[i + 1]
    return prev, nxt


def needs(stage: int, kind: Kind, prev: Sequence[int], nxt: Sequence[int]) -> tuple[Need, ...]:
    """What ``kind`` on ``stage`` needs, for every microbatch m: each entry is met when any one
    of its (stage, kind)s has run for m (``prev``/``nxt`` as :func:`neighbour_stages` gives)."""
    if kind == Kind.F:
        p = prev[stage]
        return () if p < 0 else (((p, Kind.F),),)
    if kind == Kind.W:
        return (((stage, Kind.I),),)
    own = ((stage, Kind.F),)
    n = nxt[stage]
    return (own,) if n < 0 else (own, tuple((n, k) for k in INPUT_GRADIENT))


def needs_table(prev: Sequence[int], nxt: Sequence[int]) -> dict[tuple[int, Kind], tuple[Need, ...]]:
    """:func:`needs` of every (stage, kind), for loops that ask it per action."""
    return {(st, kind): needs(st, kind, prev, nxt) for st in range(len(prev))
            for kind in KIND_OF_CODE}


def dependents_table(table: dict[tuple[int, Kind], tuple[Need, ...]]
                     ) -> dict[tuple[int, Kind], tuple[tuple[int, Kind], ...]]:
    """The rule read backwards: per (stage, kind), the (stage, kind)s whose needs name it (of
    the same microbatch), for list schedulers that wake what an action's end may make ready."""
    out: dict[tuple[int, Kind], list[tuple[int, Kind]]] = {key: [] for key in table}
    for key, need in table.items():
        for alternatives in need:
            for named in alternatives:
                out[named].append(key)
    return {key: tuple(v) for key, v in out.items()}


def ready(need: tuple[Need, ...], microbatch: int, ended: dict, now: float) -> bool:
    """Whether every need of an action of ``microbatch`` is met at time ``now``, ``ended``
    mapping each (stage, kind, microbatch) that ran to the time it ended (a list scheduler's
    clock; 0 for all where time does not matter)."""
    later = now + 1
    for alternatives in need:
        for st, kind in alternatives:
            if ended.get((st, kind, microbatch), later) <= now:
                break
        else:
            return False
    return True


class Codec(NamedTuple):
    """The integer code of the compute actions of ``n_stages`` stages and ``microbatches``
    microbatches (the module's docstring)."""

    n_stages: int
    microbatches: int

    def row(self, stage: int, kind: Kind) -> int:
        return KIND_CODE[kind] * self.n_stages + stage

    def code(self, stage: int, kind: Kind, microbatch: int) -> int:
        return (KIND_CODE[kind] * self.n_stages + stage) * self.microbatches + microbatch

    def encode(self, a: Action) -> int:
        return (KIND_CODE[a.kind] * self.n_stages + a.stage) * self.microbatches + a.microbatch

    def decode(self, code: int) -> Action:
        row, mb = divmod(code, self.microbatches)
        kind, stage = divmod(row, self.n_stages)
        return Action(stage, KIND_OF_CODE[kind], mb)

    @property
    def size(self) -> int:
        """How many codes there are: 4 x stages x microbatches."""
        return 4 * self.n_stages * self.microbatches


class NeedRows(NamedTuple):
    """:func:`needs` over the rows of :class:`Codec`: code ``row * M + m`` needs
    ``one[row] * M + m`` and one of ``either[row] * M + m``, ``other[row] * M + m``. Row
    ``none`` (= 4 x stages, one past the last real row) stands for "nothing": a walk keeps it
    met for every microbatch."""

    one: list[int]
    either: list[int]
    other: list[int]
    none: int


def need_rows(prev: Sequence[int], nxt: Sequence[int]) -> NeedRows:
    """The rule as :class:`NeedRows`, built from :func:`needs` itself."""
    S = len(prev)
    none = 4 * S
    one = [none] * (none + 1)
    either = [none] * (none + 1)
    other = [none] * (none + 1)
    for kind, k in KIND_CODE.items():
        for st in range(S):
            row = k * S + st
            singles = []
            for need in needs(st, kind, prev, nxt):
                rows = [KIND_CODE[kd] * S + s for s, kd in need]
                if len(rows) == 1:
                    singles.append(rows[0])
                else:
                    assert len(rows) == 2 and either[row] == none, "a need the rows cannot hold"
                    either[row], other[row] = rows
            assert len(singles) <= 1, "a need the rows cannot hold"
            if singles:
                one[row] = singles[0]
    return NeedRows(one, either, other, none)
