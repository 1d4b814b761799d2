"""V-Half: V-shape schedule with half of 1F1B's activation memory (Qi et al. 2024, "Pipeline
Parallelism with Controllable Memory"), built the way the zero-bubble repository builds it
(sail-sg/zero-bubble-pipeline-parallelism, scheduler/zbv_greedy.py). The machinery here is
shared with V-Min (``v_min.py``). The fork's runtime runs this order under
``--zero-bubble-v-schedule --zero-bubble-v-schedule-mem-setup half`` (``min``: V-Min), built by
its ``v_schedule_greedy.py`` at tag zero-bubble-v0.1.0: ``tests/schedules/test_v_schedules.py``
checks both, action for action, against that module's orders.

V placement: rank r runs stage r ("F" going down) and stage 2P-1-r ("f" coming back up).
Every rank repeats one building block per microbatch, six unit slots long: F, f, B and b (input
gradients of the up and down chunk) at fixed offsets, and the two weight gradients W (up chunk)
and w (down chunk) in the free slots. The offsets fix the memory: activations live from a
chunk's forward to its W, so the later the block places forwards relative to backwards, the
less is held. Then, as in the repository:

1. microbatch m's block starts 6m slots after m-1's; W fills each rank's free slots (oldest
   backward first);
2. warm-up and cool-down actions move to the earliest free slot their dependencies allow, as
   long as the rank's peak memory does not grow (the steady state, from rank 0's first b to the
   first forward of the last microbatch, stays put); then every rank runs as early as possible
   at unit costs ("squeeze");
3. step 2 again without the Ws, for the cool-down only; the Ws are put back, W (up chunk) before
   w (down chunk) when both wait.

Each rank's order is its actions sorted by slot. Types are numbered as in the repository:
0 F, 1 f, 2 B, 3 b, then W (4: one list in steps 1-3; 4 up and 5 down in the end)
(:func:`rank_types`). Which action must end before which is the project's dependency rule
(``deps.needs`` for the V placement's pipeline, read over the types: :func:`data_deps`); the
repository's construction adds two ordering rules of its own (:func:`same_type_order`,
:func:`w_order`).
"""

from __future__ import annotations

from ...errors import ConfigError
from ..action import Action, Kind
from ..deps import needs, neighbour_stages
from ..registration import register
from ..schedule import Schedule, v_placement

Slots = list[list[int]]     # per type, the slot of microbatch 0, 1, ...
DataDeps = tuple[tuple[tuple[tuple[int, int], ...], ...], ...]   # [rank][type]: (rank, type)s
Waits = tuple[tuple[tuple[tuple[int, int, int], ...], ...], ...]  # [rank][type]: (rank, type, dmb)s


def v_half_pattern(pp: int) -> list[list[int]]:
    """Per rank, the offsets of F, f, B, b in the six-slot block that holds P/2 microbatches."""
    gap = 3 if pp % 2 == 0 else 0
    return [[2 * i, 3 * pp - i - 2, 3 * pp + gap + 2 * i - 1, 6 * pp + gap - i - 2]
            for i in range(pp)]


def v_min_pattern(pp: int) -> list[list[int]]:
    """Per rank, the offsets of F, f, B, b in the block that holds P/3 microbatches."""
    gap = 2 if pp % 3 == 0 else 0
    return [[i, 2 * pp - i - 1, 2 * pp + gap + i, 4 * pp + gap - i - 1] for i in range(pp)]


def put_w(slots: Slots, split: bool = False) -> Slots:
    """Add the weight gradients in the free slots, oldest backward first (one W list, or W for
    the up chunk's B and w for the down chunk's b when ``split``)."""
    out = [list(t) for t in slots[:4]] + ([[], []] if split else [[]])
    events = sorted((t, kind) for kind in range(4) for t in slots[kind])
    busy = {t for t, _ in events}
    waiting = [0, 0]
    last = max(busy)
    nxt = 0
    for t in range(last + 1):
        if t in busy:
            kind = events[nxt][1]
            nxt += 1
            if kind >= 2:
                waiting[kind - 2 if split else 0] += 1
            continue
        for w in (0, 1):
            if waiting[w]:
                out[4 + w].append(t)
                waiting[w] -= 1
                break
    t = last
    for w in (0, 1):
        while waiting[w]:
            t += 1
            out[4 + w].append(t)
            waiting[w] -= 1
    return out


def peak_memory(slots: Slots) -> int:
    """Most activations held on the rank: +1 per forward, -1 per W; without W lists, each free
    slot retires one pending W (as :func:`put_w` would place it). A rank runs one action per
    slot, so the walk goes event to event and retires a gap's pending W's at once (held only
    falls there: the peak is reached at an event)."""
    delta = (1, 1, 0, 0, -1, -1)
    events = sorted((t, kind) for kind, times in enumerate(slots) for t in times)
    has_w = len(slots) > 4
    held = peak = waiting = 0
    prev = -1
    for t, kind in events:
        if not has_w and waiting and t - prev > 1:
            k = min(t - prev - 1, waiting)
            held -= k
            waiting -= k
        held += delta[kind]
        if kind == 2 or kind == 3:
            waiting += 1
        if held > peak:
            peak = held
        prev = t
    return peak


def rank_types(pp: int, r: int) -> list[tuple[int, Kind]]:
    """The (stage, kind) of each type on rank ``r``: F and b on its down stage, f and B on its
    up stage (the two stages ``v_placement`` puts on it), W of the up chunk, w of the down one."""
    down, up = (s for s, rank in enumerate(v_placement(pp)) if rank == r)
    return [(down, Kind.F), (up, Kind.F), (up, Kind.I), (down, Kind.I), (up, Kind.W), (down, Kind.W)]


def data_deps(pp: int) -> DataDeps:
    """Per rank and type, the (rank, type)s of the same microbatch that must end first:
    ``deps.needs`` for the one pipeline through the V placement's stages. The construction
    splits every backward, so a need for the next stage's input gradient is met by its I (B is
    no type here). The single W list of steps 1-3 (type 4) stands for either chunk's W, so it
    has no data dependency (:func:`w_order` places it).

    These are the direct needs. zbv_greedy.py writes the same order with implied needs among
    them: f also after the rank's own F, b after the rank's B where the rule names its own F.
    Both walks take the latest of what an action waits for, and every slot lies after those of
    its own waits, so an implied need never decides a slot."""
    n = 2 * pp
    prev, nxt = neighbour_stages((tuple(range(n)),), n)
    type_of = {action: (r, kind) for r in range(pp)
               for kind, action in enumerate(rank_types(pp, r)[:4])}
    out = []
    for r in range(pp):
        row = []
        for stage, kind in rank_types(pp, r)[:4]:
            deps = []
            for need in needs(stage, kind, prev, nxt):
                met = [type_of[a] for a in need if a in type_of]
                assert len(met) == 1, f"need {need} of {stage}{kind} is no one type"
                deps.append(met[0])
            row.append(tuple(deps))
        row.append(())
        out.append(tuple(row))
    return tuple(out)


def same_type_order(r: int, kind: int) -> tuple[int, int, int]:
    """Ordering rule, not a data dependency: a type's microbatch follows the same type's
    previous microbatch on the rank, as (rank, type, microbatch offset). The reference
    construction (zbv_greedy.py) orders every type by microbatch this way, in its moves and in
    its squeeze, so no move overtakes."""
    return (r, kind, -1)


def w_order(slots: Slots, mb: int) -> int:
    """Ordering rule for the single W list of steps 1-3 (which stands for either chunk's W, so
    ``deps`` gives it no data dependency): the m-th W follows the rank's m-th backward of either
    chunk, oldest first, as :func:`put_w` pairs them and as zbv_greedy.py moves them. The slot
    of that backward."""
    return sorted(slots[2] + slots[3])[mb]


def waits(pp: int) -> Waits:
    """Per rank and type 0-4, what must end first as (rank, type, microbatch offset): the data
    dependencies (:func:`data_deps`, offset 0), then :func:`same_type_order`."""
    return tuple(tuple(tuple((q, k, 0) for q, k in deps) + (same_type_order(r, kind),)
                       for kind, deps in enumerate(row))
                 for r, row in enumerate(data_deps(pp)))


def _in_slot_order(ranks: list[Slots]):
    """All (slot, rank, type, microbatch), in the order the repository visits them."""
    return sorted((t, r, kind, mb) for r, slots in enumerate(ranks)
                  for kind, times in enumerate(slots) for mb, t in enumerate(times))


def squeeze(ranks: list[Slots]) -> list[Slots]:
    """Start slots when every action runs as early as what it waits for (:func:`waits`) and its
    rank's previous action (in slot order) allow, at unit cost. A W waits only for the rank's
    order (its backward is earlier in it, where :func:`w_order` put it)."""
    before = waits(len(ranks))
    end: dict[tuple[int, int, int], int] = {}
    rank_free = [0] * len(ranks)
    out = [[[0] * len(times) for times in slots] for slots in ranks]
    for _, r, kind, mb in _in_slot_order(ranks):
        start = rank_free[r]
        for q, k, dmb in before[r][kind]:
            if mb + dmb >= 0 and end[(q, k, mb + dmb)] > start:
                start = end[(q, k, mb + dmb)]
        out[r][kind][mb] = start
        end[(r, kind, mb)] = rank_free[r] = start + 1
    return out


def _slot_deps(before: Waits, ranks: list[Slots], r: int, kind: int, mb: int) -> int:
    """The earliest slot an action may move to: one after the latest of what it waits for
    (:func:`waits`; for the single W list, :func:`w_order` too)."""
    latest = -1
    for q, k, dmb in before[r][kind]:
        if mb + dmb >= 0 and ranks[q][k][mb + dmb] > latest:
            latest = ranks[q][k][mb + dmb]
    if kind == 4:
        latest = max(latest, w_order(ranks[r], mb))
    return latest + 1


def reorder(ranks: list[Slots], with_w: bool) -> list[Slots]:
    """Step 2 (``with_w``: warm-up and cool-down) or step 3 (cool-down only), then squeeze."""
    ranks = [put_w(s) if with_w else [list(t) for t in s] for s in ranks]
    before = waits(len(ranks))
    budget = max(peak_memory(s) for s in ranks)
    last_mb = len(ranks[0][0]) - 1
    occupied = [set() for _ in ranks]
    phase = 0                       # 0 warm-up, 1 steady (kept), 2 cool-down
    pending = _in_slot_order(ranks)
    # visit in slot order; an action only ever moves earlier, before every action not yet
    # visited, so visiting by the original slots is visiting by the current ones
    for t, r, kind, mb in pending:
        if kind == 3 and r == 0 and phase == 0:
            phase = 1
        if phase == 1:
            if kind == 0 and mb == last_mb:
                phase = 2
            occupied[r].add(t)
            continue
        if phase == 0 and not with_w:
            occupied[r].add(t)
            continue
        earliest = _slot_deps(before, ranks, r, kind, mb)
        placed = False
        for s in range(earliest, t):
            if s in occupied[r]:
                continue
            ranks[r][kind][mb] = s
            if peak_memory(ranks[r]) <= budget:
                placed = True
                break
        if not placed:
            ranks[r][kind][mb] = t
        occupied[r].add(ranks[r][kind][mb])
    if not with_w:
        ranks = [put_w(s) for s in ranks]
    return squeeze(ranks)


def controllable_memory_ranks(pp: int, microbatches: int,
                              pattern: list[list[int]]) -> tuple[tuple[Action, ...], ...]:
    """Steps 1-3 of the module docstring; each rank's actions sorted by slot."""
    ranks = [[list(range(x, x + 6 * microbatches, 6)) for x in offsets] for offsets in pattern]
    ranks = [s[:4] for s in reorder(ranks, with_w=True)]
    ranks = [put_w(s[:4], split=True) for s in reorder(ranks, with_w=False)]
    out = []
    for r, slots in enumerate(ranks):
        what = rank_types(pp, r)
        acts = sorted((t, Action(what[kind][0], what[kind][1], mb))
                      for kind, times in enumerate(slots) for mb, t in enumerate(times))
        out.append(tuple(a for _, a in acts))
    return tuple(out)


def build_work(pp: int, microbatches: int, vpp: int, actions: int) -> int:
    """The construction moves each action over earlier slots, rechecking the rank's memory:
    about 10 engine actions' time per action at P = 8, growing with P (measured: 80 us per
    action at P = 8, 390 us at P = 64, on a loaded 2-core machine)."""
    return actions * (8 + pp // 3)


def check(name: str, vpp: int) -> None:
    if vpp != 2:
        raise ConfigError(f"--vpp: {name} runs exactly 2 chunks per rank (V placement), "
                          f"got --vpp {vpp}")


@register("v-half", megatron="zero-bubble-v",
          summary="V-Half (controllable-memory V schedule): about half of 1F1B's "
          "activation memory; the zero-bubble fork's own order (--zero-bubble-v-schedule)",
          default_vpp=2, aliases=("vhalf",), work=build_work)
def generate(pp: int, microbatches: int, vpp: int = 2, **_: object) -> Schedule:
    check("v-half", vpp)
    return Schedule("v-half", pp, 2, microbatches, v_placement(pp),
                    controllable_memory_ranks(pp, microbatches, v_half_pattern(pp)))
