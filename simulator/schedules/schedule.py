"""A schedule as plain data: per rank, the ordered steps it runs.

Generating an order (``library/``), checking it (``validate``), adding communication
(``comm_pass``) and timing it (``simulator.engine``) are separate steps.

The schedule IR is torch's (``torch.distributed.pipelining``'s ``_Action``): ``steps[r]`` is rank
r's list of :class:`Action` s, compute (F, B, I, W), an overlapped pair as one OVERLAP_F_B action
whose ``sub`` are its halves, and, once lowered by ``comm_pass.add_communication``, the SEND_F /
RECV_F / SEND_B / RECV_B actions. ``ranks`` is the per-compute-action view the engine, metrics
and records read: per rank the compute actions in order, a pair as its two halves carrying the
pair's number (``0F3@0``, ``3B1@0``), communication left out.
"""

from __future__ import annotations

from functools import cached_property
from operator import attrgetter, countOf
from typing import Iterable, NamedTuple, Sequence

from .action import Action, Kind
from .rank_actions import RankActions

_PAIR = attrgetter("pair")
_KIND = attrgetter("kind")
_COMM = frozenset((Kind.SEND_F, Kind.RECV_F, Kind.SEND_B, Kind.RECV_B))
_GROUPED = _COMM | {Kind.OVERLAP_F_B}   # kinds that make the steps differ from the view


class _Fields(NamedTuple):
    name: str
    pp: int
    vpp: int
    microbatches: int
    placement: tuple[int, ...]
    steps: tuple[tuple[Action, ...], ...]
    pipelines: tuple[tuple[int, ...], ...] = ()
    stage_chunk: tuple[int, ...] = ()
    flush: bool = True
    meta: dict | None = None


# a NamedTuple, not a dataclass: start-up (simulator/__init__.py). No __slots__: the cached
# properties below keep their values in the instance's __dict__.
class Schedule(_Fields):
    """Per-rank steps plus the stage layout they assume.

    - ``placement[s]`` is the rank that runs virtual stage ``s``.
    - ``steps[r]``: rank r's actions in order (see the module's docstring).
    - ``pipelines`` are the stage sequences data flows through (stage k feeds k+1 within one);
      one pipeline ``0..n_stages-1`` unless a schedule feeds microbatches from both ends.
    - ``stage_chunk[s]`` is the model chunk (contiguous layer range) stage ``s`` computes;
      identity unless two stages share weights (bidirectional DualPipe).
    - ``flush``: the iteration ends with a pipeline flush (all but PipeDream-2BW).
    - ``meta``: notes of the generator (not compared).

    The steps may also be given in the deprecated per-compute-action form (a pair as two
    consecutive halves sharing a ``pair`` number), positionally or as ``ranks=``; they are
    stored as OVERLAP_F_B actions. ``ranks=`` wins over ``steps``, so
    ``s._replace(ranks=...)`` replaces the steps.
    """

    def __new__(cls, name: str, pp: int, vpp: int, microbatches: int,
                placement: tuple[int, ...],
                steps: Iterable[Sequence[Action]] = (),
                pipelines: tuple[tuple[int, ...], ...] = (),
                stage_chunk: tuple[int, ...] = (), flush: bool = True,
                meta: dict | None = None, *,
                ranks: Iterable[Sequence[Action]] | None = None) -> "Schedule":
        stored, flat, comm, overlap = _normalize(steps if ranks is None else ranks)
        self = tuple.__new__(cls, (name, pp, vpp, microbatches, placement, stored,
                                   pipelines or (tuple(range(len(placement))),),
                                   stage_chunk or tuple(range(len(placement))), flush,
                                   {} if meta is None else meta))
        self._flat = flat
        self._has_comm = comm
        self._has_overlap = overlap
        return self

    @classmethod
    def _make(cls, iterable) -> "Schedule":
        return cls(*iterable)

    def _replace(self, **changes) -> "Schedule":
        """A copy with ``changes`` (``ranks=`` replaces the steps), normalised as a new one."""
        return Schedule(**{**self._asdict(), **changes})

    # compared and hashed as a frozen record of every field but ``meta``
    def __eq__(self, other: object) -> bool:
        if other.__class__ is not self.__class__:
            return NotImplemented
        return self[:9] == other[:9]

    def __ne__(self, other: object) -> bool:
        if other.__class__ is not self.__class__:
            return NotImplemented
        return self[:9] != other[:9]

    def __hash__(self) -> int:
        return hash(self[:9])

    @property
    def ranks(self) -> tuple[tuple[Action, ...], ...]:
        """Per rank, the compute actions in order: a pair's halves in place, numbered (cached:
        built once with the schedule)."""
        return self._flat

    @property
    def has_overlap(self) -> bool:
        """Some step is an overlapped F/B pair (OVERLAP_F_B)."""
        return self._has_overlap

    @property
    def lowered(self) -> bool:
        """The steps carry their communication (``comm_pass.add_communication``)."""
        return self._has_comm or bool(self.meta.get("lowered"))

    def compute_steps(self) -> tuple[tuple[Action, ...], ...]:
        """``steps`` without the communication actions."""
        if not self._has_comm:
            return self.steps
        return tuple(tuple(a for a in acts if a.kind not in _COMM) for acts in self.steps)

    def step_strings(self) -> list[list[str]]:
        """Per rank, the steps in torch's notation (``0F7``, ``(0F7;7B3)OVERLAP_F_B``,
        ``2SEND_F1``)."""
        return [[a.plain for a in acts] for acts in self.steps]

    @property
    def n_stages(self) -> int:
        return len(self.placement)

    @property
    def n_chunks(self) -> int:
        return max(self.stage_chunk) + 1 if self.stage_chunk else 0

    def stages_of(self, rank: int) -> tuple[int, ...]:
        return self._stages_by_rank.get(rank, ())

    @cached_property
    def _stages_by_rank(self) -> dict[int, tuple[int, ...]]:
        """Each rank's stages, in stage order: one pass over the placement (asking each rank
        with a scan of it was O(P^2), 3.5 s at P = 2000)."""
        out: dict[int, list[int]] = {}
        for s, r in enumerate(self.placement):
            out.setdefault(r, []).append(s)
        return {r: tuple(v) for r, v in out.items()}

    @cached_property
    def _neighbours(self) -> tuple[dict[int, int | None], dict[int, int | None]]:
        prev: dict[int, int | None] = {}
        nxt: dict[int, int | None] = {}
        for pipe in self.pipelines:
            for i, stage in enumerate(pipe):
                prev.setdefault(stage, pipe[i - 1] if i > 0 else None)
                nxt.setdefault(stage, pipe[i + 1] if i + 1 < len(pipe) else None)
        return prev, nxt

    def prev_stage(self, stage: int) -> int | None:
        """The stage feeding ``stage`` its activations (None for a pipeline's first stage)."""
        return self._neighbours[0].get(stage)

    def next_stage(self, stage: int) -> int | None:
        """The stage ``stage`` sends its activations to (None for a pipeline's last stage)."""
        return self._neighbours[1].get(stage)

    @property
    def split_backward(self) -> bool:
        return any(a.kind in (Kind.I, Kind.W) for acts in self.ranks for a in acts)

    def as_strings(self) -> list[list[str]]:
        """Per rank, the compute view as strings (a pair's halves as ``0F3@0``)."""
        return [[str(a) for a in acts] for acts in self.ranks]


def _normalize(given: Iterable[Sequence[Action]]):
    """(steps, compute view, has comm actions, has overlapped pairs) of the given per-rank
    lists, in either form.

    The deprecated form's pairs (consecutive halves sharing a ``pair`` number) become
    OVERLAP_F_B actions; an OVERLAP_F_B action's halves without a number get the pair's index
    on its rank. A half whose number has no neighbour to pair with stays as it is, for the
    validator to name. Lists with neither pairs nor communication are kept as they are: both
    the steps and the view.
    """
    steps: list[tuple[Action, ...]] = []
    flat: list[tuple[Action, ...]] = []
    any_comm = any_overlap = False
    for acts in given:
        if type(acts) is RankActions:   # compute actions only, as columns: kept as they are
            steps.append(acts)
            flat.append(acts)
            continue
        acts = tuple(acts)
        try:
            plain = (countOf(map(_PAIR, acts), None) == len(acts)
                     and not set(map(_KIND, acts)) & _GROUPED)
        except AttributeError:    # not actions: the validator names them
            plain = True
        if plain:
            steps.append(acts)
            flat.append(acts)
            continue
        out: list[Action] = []
        view: list[Action] = []
        k = 0   # pairs so far on this rank
        i, n = 0, len(acts)
        while i < n:
            a = acts[i]
            if a.sub:
                halves = a.sub
                if all(h.pair is None for h in halves):
                    halves = tuple(h._replace(pair=k) for h in halves)
                    a = a._replace(sub=halves)
                out.append(a)
                view.extend(halves)
                k += 1
                any_overlap = True
            elif a.pair is not None and i + 1 < n and acts[i + 1].pair == a.pair \
                    and not acts[i + 1].sub:
                b = acts[i + 1]
                out.append(Action.overlap(a, b))
                view.extend((a, b))
                k += 1
                any_overlap = True
                i += 2
                continue
            else:
                out.append(a)
                if a.kind in _COMM:
                    any_comm = True
                else:
                    view.append(a)
            i += 1
        steps.append(tuple(out))
        flat.append(tuple(view))
    return tuple(steps), tuple(flat), any_comm, any_overlap


def loop_placement(pp: int, vpp: int) -> tuple[int, ...]:
    """Stage s on rank s mod pp (Megatron interleaved, looped BFS)."""
    return tuple(s % pp for s in range(pp * vpp))


def v_placement(pp: int) -> tuple[int, ...]:
    """Rank r holds stages r and 2pp-1-r (ZB-V, DualPipeV)."""
    return tuple(list(range(pp)) + list(range(pp - 1, -1, -1)))
