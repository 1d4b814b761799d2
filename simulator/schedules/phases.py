"""Pipeline phases of a rank's action order (Megatron's naming, generalised).

Steady state starts at the forward that is immediately followed (among forwards and
gradient-carrying backwards) by the first backward, so 1F1B's warm-up is ``P-r-1`` forwards; the
backward that follows the last forward still belongs to the steady 1F1B step; everything after it
is cool-down. Weight-gradient-only actions (W) take the phase of their position.

The phases are three runs of positions, so a rank's labels are kept as the two positions where
they change (:class:`PhaseLabels`), found by scanning the warm-up and the cool-down only: a
million actions need no million-entry list of labels. The per-rank counts and the in-flight peak
read the kinds as one string (:func:`kind_string`), counted in C where the order allows.
"""

from __future__ import annotations

from array import array
from collections.abc import Sequence
from itertools import accumulate, chain, compress, count, repeat
from operator import attrgetter, lt

from .action import Action, Kind
from .rank_actions import RankActions

WARMUP, STEADY, COOLDOWN = "Warmup", "Steady", "Cooldown"

_kind = attrgetter("kind")
_pair = attrgetter("pair")
_stage = attrgetter("stage")
_microbatch = attrgetter("microbatch")


def kind_string(actions: Sequence[Action]) -> str:
    """The kinds of ``actions`` as one string, a letter per action (``"FFFBFB..."``): counted
    and masked in C. A kind of more than one letter (not a compute kind) reads as ``?``."""
    kinds = "".join(map(_kind, actions))
    if len(kinds) != len(actions):
        kinds = "".join(k if len(k) == 1 else "?" for k in map(_kind, actions))
    return kinds


def rank_kinds(schedule, rank: int) -> str:
    """:func:`kind_string` of ``schedule.ranks[rank]``, kept with the schedule: the compile
    and the summary both read it."""
    cache = schedule.__dict__.setdefault("_kind_strings", {})
    kinds = cache.get(rank)
    if kinds is None:
        acts = schedule.ranks[rank]
        kinds = cache[rank] = acts.kinds if type(acts) is RankActions else kind_string(acts)
    return kinds


def rank_stages(schedule, rank: int) -> frozenset[int]:
    """The stages ``schedule.ranks[rank]``'s actions name (an unchecked list may name others
    than its placement's), kept with the schedule like :func:`rank_kinds`."""
    cache = schedule.__dict__.setdefault("_action_stages", {})
    stages = cache.get(rank)
    if stages is None:
        acts = schedule.ranks[rank]
        stages = cache[rank] = (frozenset((acts.stage,) if acts else ())
                                if type(acts) is RankActions else frozenset(map(_stage, acts)))
    return stages


def rank_unpaired(schedule, rank: int) -> bool:
    """No action of ``schedule.ranks[rank]`` carries an overlapped-pair number; kept with the
    schedule like :func:`rank_kinds`."""
    cache = schedule.__dict__.setdefault("_unpaired", {})
    unpaired = cache.get(rank)
    if unpaired is None:
        acts = schedule.ranks[rank]
        unpaired = cache[rank] = (type(acts) is RankActions
                                  or list(map(_pair, acts)).count(None) == len(acts))
    return unpaired


def known_rank_facts(schedule, rank: int, kinds: str, stages: frozenset[int],
                     in_order: bool = False) -> None:
    """Record what a generator knows of rank ``rank``'s actions as it builds them (their
    :func:`rank_kinds` and :func:`rank_stages`; no pair numbers; ``in_order``: the actions of
    each kind take microbatches 0, 1, 2, ... in turn), so nothing reads them back one by
    one."""
    schedule.__dict__.setdefault("_kind_strings", {})[rank] = kinds
    schedule.__dict__.setdefault("_action_stages", {})[rank] = stages
    schedule.__dict__.setdefault("_unpaired", {})[rank] = True
    schedule.__dict__.setdefault("_in_order", {})[rank] = in_order


def rank_in_order(schedule, rank: int) -> bool:
    """Whether the schedule's generator recorded that each kind of ``schedule.ranks[rank]``
    takes microbatches 0, 1, 2, ... in turn (False: not known)."""
    return schedule.__dict__.get("_in_order", {}).get(rank, False)


class PhaseLabels(Sequence):
    """The phase of each of a rank's ``n`` actions: Warmup before ``steady``, Cooldown from
    ``cooldown`` on, Steady between. Reads (and compares equal) as the list of labels."""

    __slots__ = ("n", "steady", "cooldown")

    def __init__(self, n: int, steady: int, cooldown: int) -> None:
        self.n = n
        self.steady = steady
        self.cooldown = cooldown

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, index):
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(self.n))]
        if index < 0:
            index += self.n
        if not 0 <= index < self.n:
            raise IndexError("phase label index out of range")
        return WARMUP if index < self.steady else COOLDOWN if index >= self.cooldown else STEADY

    def __iter__(self):
        return chain(repeat(WARMUP, self.steady), repeat(STEADY, self.cooldown - self.steady),
                     repeat(COOLDOWN, self.n - self.cooldown))

    def __eq__(self, other) -> bool:
        if isinstance(other, PhaseLabels):
            return (self.n, self.steady, self.cooldown) == (other.n, other.steady,
                                                            other.cooldown)
        if isinstance(other, (list, tuple)):
            return len(other) == self.n and list(self) == list(other)
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return (f"PhaseLabels(n={self.n}, steady={self.steady}, cooldown={self.cooldown})")


def phase_labels(actions: Sequence[Action]) -> Sequence[str]:
    """The phase of each action (:func:`labels_of_kinds` of their kind letters)."""
    return labels_of_kinds(actions.kinds if isinstance(actions, RankActions)
                           else kind_string(actions))


def labels_of_kinds(kinds: str) -> Sequence[str]:
    """The phase of each action of a rank given as its kind letters (:func:`rank_kinds`): a
    :class:`PhaseLabels` (a plain list for a rank with forwards and weight-gradient-only
    actions but no gradient-carrying backward, whose labels follow the kinds rather than
    positions). Found with ``str.find``, in C (P 2000 ranks of 1F1B: 0.35 s one Action at a
    time)."""
    n = len(kinds)
    f, b, i = Kind.F.value, Kind.B.value, Kind.I.value
    first_b = min((x for x in (kinds.find(b), kinds.find(i)) if x >= 0), default=None)
    last_f = kinds.rfind(f)
    if first_b is None or last_f < 0:
        if last_f < 0:                       # no forward: everything is cool-down
            return PhaseLabels(n, 0, 0)
        if kinds.count(f) == n:
            return PhaseLabels(n, n, n)
        return [WARMUP if c == f else COOLDOWN for c in kinds]
    steady_start = kinds.rfind(f, 0, first_b)
    after = min((x for x in (kinds.find(b, last_f + 1), kinds.find(i, last_f + 1)) if x >= 0),
                default=None)
    return PhaseLabels(n, first_b if steady_start < 0 else steady_start,
                       n if after is None else after + 1)


def phase_counts(actions: Sequence[Action], labels: Sequence[str],
                 kinds: str | None = None) -> dict[str, int]:
    """warm-up forwards, steady forwards (= 1F1B steps), cool-down gradient backwards.
    ``kinds``: :func:`kind_string` of ``actions``, if the caller has it."""
    if isinstance(labels, PhaseLabels):
        k = kind_string(actions) if kinds is None else kinds
        s, c = labels.steady, labels.cooldown
        return {"warmup": k.count("F", 0, s), "steady": k.count("F", s, c),
                "cooldown": k.count("B", c) + k.count("I", c)}
    warm = sum(1 for a, p in zip(actions, labels) if p == WARMUP and a.kind == Kind.F)
    steady = sum(1 for a, p in zip(actions, labels) if p == STEADY and a.kind == Kind.F)
    cool = sum(1 for a, p in zip(actions, labels) if p == COOLDOWN and a.kind in (Kind.B, Kind.I))
    return {"warmup": warm, "steady": steady, "cooldown": cool}


# +1 for a forward, -1 (as a signed byte) for the backward that frees its activations
_HOLD_FB = bytes.maketrans(b"FB", b"\x01\xff")
_HOLD_FW = bytes.maketrans(b"FIW", b"\x01\x00\xff")


def peak_inflight(actions: Sequence[Action], kinds: str | None = None,
                  stages: frozenset[int] | None = None,
                  in_order: bool = False) -> tuple[int, int]:
    """(microbatches, stage-microbatch activations) held at most, from the order alone.

    A stage's activations for a microbatch are held from its forward until its last
    weight-carrying backward (W, or B when the backward is not split). ``kinds``: the
    :func:`kind_string` of ``actions``, ``stages`` the stages they name, if the caller has
    them; ``in_order``: each kind takes microbatches 0, 1, 2, ... in turn (known, e.g.
    :func:`rank_in_order`).
    """
    kinds = kind_string(actions) if kinds is None else kinds
    fast = _peak_one_stage(actions, kinds, stages, in_order)
    if fast is not None:
        return fast, fast
    # the walk, over the kind letters and two plain lists instead of the actions' attributes
    stages_of = list(map(_stage, actions))
    mbs = list(map(_microbatch, actions))
    split = ({(s, m) for k, s, m in zip(kinds, stages_of, mbs) if k == "W"}
             if "W" in kinds else frozenset())
    held: set[tuple[int, int]] = set()
    per_mb: dict[int, int] = {}
    get = per_mb.get
    peak_mb = peak_act = 0
    for k, s, m in zip(kinds, stages_of, mbs):
        if k == "F":
            held.add((s, m))
            per_mb[m] = get(m, 0) + 1
            if len(held) > peak_act:
                peak_act = len(held)
            if len(per_mb) > peak_mb:
                peak_mb = len(per_mb)
        elif k == "W" or (k == "B" and (s, m) not in split):
            key = (s, m)
            if key in held:
                held.remove(key)
                left = per_mb[m] - 1
                if left:
                    per_mb[m] = left
                else:
                    del per_mb[m]
    return peak_mb, peak_act


def _peak_one_stage(actions: Sequence[Action], kinds: str,
                    stages: frozenset[int] | None = None, in_order: bool = False) -> int | None:
    """:func:`peak_inflight` of a rank running one stage whose backward is either whole (F/B)
    or split (F/I/W), where every forward's microbatch is new and every freeing backward's
    microbatch was forwarded before and not yet freed: then a microbatch is one activation, the
    count held is a running sum of +1 / -1 and its peak is taken in C. None when the order is
    anything else (the general walk decides it)."""
    n = len(actions)
    if n == 0:
        return 0
    if not kinds.strip("FB"):
        table, free = _HOLD_FB, _ONLY_B
    elif not kinds.strip("FIW"):
        table, free = _HOLD_FW, _ONLY_W
    else:
        return None
    if len(set(map(_stage, actions)) if stages is None else stages) != 1:
        return None
    raw = kinds.encode("ascii")
    held = list(accumulate(array("b", raw.translate(table))))   # after each action
    if not in_order:
        fmask = raw.translate(_ONLY_F)
        free_mask = raw.translate(free)
        mbs = list(map(_microbatch, actions))
        fwd = list(compress(mbs, fmask))
        freed = list(compress(mbs, free_mask))
        in_order = fwd == list(range(len(fwd))) and freed == list(range(len(freed)))
    if in_order:
        # forwarded and freed in microbatch order (1F1B, GPipe, ZB-H1): the b-th free comes
        # after its forward exactly when more than b forwards precede it, i.e. when the
        # count never goes below zero
        if min(held) < 0:
            return None
    else:
        first = dict(zip(fwd, compress(count(), fmask)))
        if len(first) != len(fwd) or len(set(freed)) != len(freed):
            return None       # a microbatch forwarded or freed twice
        if not first.keys() >= set(freed):
            return None       # freed without a forward
        if not all(map(lt, map(first.__getitem__, freed), compress(count(), free_mask))):
            return None       # freed before its forward
    return max(0, max(held))


def _only(kind: str) -> bytes:
    """A translation table marking ``kind`` with 1 and every other byte with 0."""
    return bytes(1 if b == ord(kind) else 0 for b in range(256))


_ONLY_F, _ONLY_B, _ONLY_W = _only("F"), _only("B"), _only("W")
