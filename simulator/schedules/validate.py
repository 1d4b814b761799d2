"""Check that a schedule can run: right actions on the right ranks, in an order with no deadlock.

A generator bug or a hand-written CSV must fail here with the rank, the position (0-based index
in that rank's list) and the action, not later as a hang or a wrong number in the engine.

Rules:
- every stage in ``0 .. n_stages-1`` and microbatch in ``0 .. M-1`` is covered exactly once by F,
  and by either one B or one I and one W (never a mix), on the rank ``placement`` gives the stage
  (with several pipelines, each microbatch enters one, and the stages of that one cover it);
- W comes after its I on the same rank;
- an overlapped pair (OVERLAP_F_B) holds two actions, one F and one B/I (in the compute view
  ``ranks`` its halves carry one ``pair`` number, on no other action of the rank);
- running the per-rank lists as a dataflow never gets stuck, under :mod:`.deps`' rule (what
  each action needs; a pair's halves start together).

Positions of compute actions are indices in the compute view ``ranks`` (a pair's halves count
one each). A lowered schedule (``comm_pass.add_communication``) is checked further
(:func:`_check_comm`), with positions that are indices in its ``steps``: every SEND and RECV
names data crossing to another rank, each SEND has its one RECV on the peer and each RECV its
SEND, a compute's input from another rank is received before it on its rank and its output
sent after it, and the lists run without getting stuck when sends and posted receives never
block and a compute waits until the data it receives was sent (torch's runtime).

Fast path `validate_fast_pass` (docs/performance.md, "Fast paths"): :func:`_rules_hold` removes
85 % of `pipesim run --engine evaluator`'s whole-process CPU on the 1M-action case against the
explaining checks alone.
"""

from __future__ import annotations

from array import array
from itertools import compress
from operator import attrgetter

from ..errors import ScheduleError
from .action import RECVS, SENDS, Action, Kind
from .deps import KIND_CODE, B, F, I, W, need_rows, needs, needs_table, neighbour_stages
from .ops import comm_action, transfer_of, transfers
from .phases import rank_in_order, rank_kinds, rank_stages, rank_unpaired
from .rank_actions import RankActions, microbatches_of
from .schedule import Schedule

Key = tuple[int, str, int]
_microbatch = attrgetter("microbatch")


def validate(schedule: Schedule) -> None:
    """Raise :class:`ScheduleError` naming rank, position and action for the first problem.

    One validator: a fast first pass (:func:`_rules_hold`: the rules over flat flags, or over
    counters for ranks whose kinds each take microbatches in turn) decides; only when it finds
    a problem do the explaining checks (:func:`_explain`) walk the schedule to name it."""
    _check_shape(schedule)
    if not _rules_hold(schedule):
        _explain(schedule)
    if schedule.lowered:
        _check_comm(schedule)


def _explain(s: Schedule) -> None:
    """The first problem as a :class:`ScheduleError`: per-action checks in rank order, then
    pairs, completeness and the dataflow (the order the rules are listed in above)."""
    where = _check_actions(s)
    _check_pairs(s)
    _check_complete(s, where)
    _check_dataflow(s, where)


def _compute_steps(s: Schedule, rank: int) -> list[tuple[int, tuple[Action, ...]]]:
    """Rank ``rank``'s compute steps as (position in ``ranks`` of the first half, halves)."""
    out = []
    pos = 0
    for a in s.steps[rank]:
        if a.kind in SENDS or a.kind in RECVS:
            continue
        halves = a.sub or (a,)
        out.append((pos, halves))
        pos += len(halves)
    return out


_PAIR_KINDS = ([F, I], [F, B])   # an overlapped pair's kinds, sorted: an F with an I or a B
_IS_F = bytes(1 if c == ord("F") else 0 for c in range(256))
_IS_B = bytes(1 if c == ord("B") else 0 for c in range(256))


def _rules_hold(s: Schedule) -> bool:
    """True when every rule holds; False when anything is off (or the schedule has several
    pipelines), and then :func:`_explain` finds and names the first problem. It accepts exactly
    what the explaining checks accept: the same rules, in the same order of visits."""
    if len(s.pipelines) != 1:
        return False
    simple = _one_stage_ranks(s)
    if simple is not None:
        return _megatron_order(s, simple) or _runs_in_turn(s, simple)
    seen = bytearray(s.n_stages * 4 * s.microbatches)
    codes = _codes(s, seen)
    return codes is not None and _covered(s, seen) and _runs_through(s, codes)

def _one_stage_ranks(s: Schedule) -> list[int] | None:
    """Per rank its one stage, when every rank holds one stage of its own (placed there) and
    runs exactly its M forwards and M full backwards, each kind taking microbatches 0, 1, 2,
    ... in turn, with no pair and no communication in its steps (1F1B, GPipe at v = 1): then
    no action can be a duplicate, misplaced or missing, and the dataflow runs on counters.
    None when any rank is otherwise (the flat flags take it). Reads the facts the generator
    recorded (``phases.known_rank_facts``) where it did, else the actions in C passes."""
    M, placement = s.microbatches, s.placement
    if s.n_stages != s.pp:
        return None
    stage_of: list[int] = []
    in_turn = list(range(M))
    for rank, acts in enumerate(s.ranks):
        if s.steps[rank] is not acts or len(acts) != 2 * M:
            return None
        kinds = rank_kinds(s, rank)
        stages = rank_stages(s, rank)
        if len(stages) != 1 or kinds.count("F") != M or kinds.count("B") != M:
            return None
        (st,) = stages
        if type(st) is not int or not 0 <= st < s.n_stages or placement[st] != rank:
            return None
        if (type(acts) is not RankActions and set(map(type, acts)) != {Action}) \
                or not rank_unpaired(s, rank):
            return None
        if not rank_in_order(s, rank):
            mbs = list(microbatches_of(acts))
            if set(map(type, mbs)) != {int}:
                return None
            code = kinds.encode()
            if list(compress(mbs, code.translate(_IS_F))) != in_turn or \
                    list(compress(mbs, code.translate(_IS_B))) != in_turn:
                return None
        stage_of.append(st)
    if sorted(stage_of) != list(range(s.n_stages)):
        return None
    return stage_of


def _megatron_order(s: Schedule, stage_of: list[int]) -> bool:
    """True when every rank of :func:`_one_stage_ranks`' schedule runs Megatron's 1F1B order
    for its place in the pipeline (``min(S-1-i, M)`` warm-up forwards at place i, one F then
    one B, the cool-down backwards): an order known to run, so its dataflow needs no walk
    (:func:`_runs_in_turn` took ~0.5 s at 1M actions; tests check it agrees). False: any
    other order (the counters decide it)."""
    pipe, M = s.pipelines[0], s.microbatches
    place = {st: i for i, st in enumerate(pipe)}
    for rank, st in enumerate(stage_of):
        w = min(len(pipe) - 1 - place[st], M)
        if rank_kinds(s, rank) != "F" * w + "FB" * (M - w) + "B" * w:
            return False
    return True


def _runs_in_turn(s: Schedule, stage_of: list[int]) -> bool:
    """The dataflow of :func:`_one_stage_ranks`' schedules. As each kind takes microbatches in
    turn, a (kind, stage)'s progress is one counter, the actions of that row of
    :class:`~.deps.Codec` done so far, and the m-th action's need ``deps.need_rows`` gives as
    row x is met when more than m of row x are done (the "nothing" row counts M). A rank
    blocked on a neighbour is looked at again only once that neighbour has moved (as
    :func:`_runs_through`). Hot loop, one letter per step: a closed form per visit (the
    positions of each kind's m-th action) made 1.5x more visits and ran slower."""
    P, S, M = s.pp, s.n_stages, s.microbatches
    prev, nxt = neighbour_stages(s.pipelines, S)
    rows = need_rows(prev, nxt)
    one, either, other = rows.one, rows.either, rows.other
    done = [0] * (4 * S + 1)        # per row, how many of its actions are done
    done[rows.none] = M
    kinds = [rank_kinds(s, r) for r in range(P)]
    pointer = [0] * P
    neighbours = [[s.placement[o] for o in (prev[st], nxt[st]) if o >= 0] for st in stage_of]
    queued = bytearray(b"\x01" * P)
    todo = list(range(P - 1, -1, -1))
    while todo:
        rank = todo.pop()
        queued[rank] = 0
        st = stage_of[rank]
        f_row, b_row = F * S + st, B * S + st
        f_one, b_either, b_other = one[f_row], either[b_row], other[b_row]
        if one[b_row] != f_row or either[f_row] != rows.none:
            return False    # a rule the loop below does not hold: the explaining checks judge
        k = kinds[rank]
        end = len(k)
        i = start = pointer[rank]
        # the rank's own two rows as locals (a B's one need is its own F: checked above)
        f, b = done[f_row], done[b_row]
        while i < end:
            if k[i] == "F":
                if done[f_one] <= f:
                    break
                f += 1
            else:
                if f <= b or (done[b_either] <= b and done[b_other] <= b):
                    break
                b += 1
            i += 1
        if i != start:
            done[f_row], done[b_row] = f, b
            pointer[rank] = i
            for other_rank in neighbours[rank]:
                if not queued[other_rank]:
                    queued[other_rank] = 1
                    todo.append(other_rank)
    return all(pointer[r] == len(kinds[r]) for r in range(P))


def _codes(s: Schedule, seen: bytearray) -> list[array] | None:
    """Per rank, each compute action's code (:class:`~.deps.Codec`), checking the per-action
    rules in one linear pass over flat flags (``seen``, indexed by code): None at the first
    problem. The second half of an overlapped pair is stored as -1 - code, so a step is a code
    and any negative one after it. A rank whose steps are its compute view (no pair, no
    communication) is walked without looking at the steps."""
    n_st, M, placement = s.n_stages, s.microbatches, s.placement
    SM = n_st * M
    kind_code, f_code, b_code, w_code = KIND_CODE, F, B, W     # locals: the loop is hot
    SM2, SM3 = 2 * SM, 3 * SM
    codes: list[array] = []
    for rank, acts in enumerate(s.ranks):
        steps = s.steps[rank]
        seconds = () if steps is acts else _second_halves(steps)
        if seconds is None:
            return None
        out = array("q")
        put = out.append
        for a in acts:
            if type(a) is not Action:
                return None
            st, mb = a.stage, a.microbatch
            k = kind_code.get(a.kind)
            if k is None or type(st) is not int or type(mb) is not int or not 0 <= st < n_st \
                    or not 0 <= mb < M or placement[st] != rank:
                return None
            base = st * M + mb                    # its F; its I, W and B at +SM, +2SM, +3SM
            code = base + k * SM
            if seen[code]:
                return None                       # duplicate
            if k == b_code:
                if seen[base + SM] or seen[base + SM2]:
                    return None                   # B mixed with I/W
            elif k != f_code:
                if seen[base + SM3]:
                    return None                   # I/W mixed with B
                if k == w_code and not seen[base + SM]:
                    return None                   # W before its I
            seen[code] = 1
            put(code)
        for i in seconds:
            out[i] = -1 - out[i]
        codes.append(out)
    return codes


def _covered(s: Schedule, seen: bytearray) -> bool:
    """Every stage has M forwards and, per microbatch, a B or an I and a W. :func:`_codes` let
    no code in twice, no B beside an I or a W and no W without its I, so each (stage,
    microbatch) holds at most one F and at most one of B and W: all of them are there when the
    counts over all stages are S x M."""
    SM = s.n_stages * s.microbatches
    return seen.count(1, F * SM, F * SM + SM) == SM and \
        seen.count(1, W * SM, W * SM + SM) + seen.count(1, B * SM, B * SM + SM) == SM


def _runs_through(s: Schedule, codes: list[array]) -> bool:
    """Run the lists under :mod:`.deps`' rule: code ``row * M + m`` needs ``one[row] * M + m``
    and one of ``either[row] * M + m`` and ``other[row] * M + m`` (``deps.need_rows``; the
    "nothing" row is kept done). Hot loop, kept whole: the single-step check is :func:`met`
    inlined."""
    n_st, M, placement = s.n_stages, s.microbatches, s.placement
    prev, nxt = neighbour_stages(s.pipelines, n_st)
    rows = need_rows(prev, nxt)
    one = [r * M for r in rows.one]
    either = [r * M for r in rows.either]
    other = [r * M for r in rows.other]
    done = bytearray(4 * n_st * M) + b"\x01" * M

    def met(code: int) -> bool:
        row, m = divmod(code, M)
        return bool(done[one[row] + m] and (done[either[row] + m] or done[other[row] + m]))

    P = s.pp
    pointer = [0] * P
    lengths = [len(x) for x in codes]
    # A rank blocked on a neighbour is looked at again only once that neighbour has moved (a
    # sweep over every rank per round was O(P^2) for a pipeline fill: 5 s at P = 2000). The
    # lists end where they end whatever the order ranks are visited in: each action is done
    # once what it needs is done, and nothing is ever undone.
    neighbours: list[set[int]] = [set() for _ in range(P)]
    for st in range(n_st):
        r = placement[st]
        for o in (prev[st], nxt[st]):
            if o >= 0 and placement[o] != r:
                neighbours[placement[o]].add(r)
    queued = bytearray(b"\x01" * P)
    todo = list(range(P - 1, -1, -1))
    while todo:
        rank = todo.pop()
        queued[rank] = 0
        rc = codes[rank]
        i = start = pointer[rank]
        n = lengths[rank]
        while i < n:
            c = rc[i]
            if i + 1 < n and rc[i + 1] < 0:   # an overlapped pair: both halves' needs
                c2 = -1 - rc[i + 1]
                if not (met(c) and met(c2)):
                    break
                done[c] = done[c2] = 1
                i += 2
                continue
            # met(c), inlined for single steps (most of them)
            row, m = divmod(c, M)
            if not done[one[row] + m] or not (done[either[row] + m] or done[other[row] + m]):
                break
            done[c] = 1
            i += 1
        if i != start:
            pointer[rank] = i
            for o in neighbours[rank]:
                if not queued[o]:
                    queued[o] = 1
                    todo.append(o)
    return pointer == lengths


def _second_halves(steps: tuple[Action, ...]) -> list[int] | None:
    """Positions in the compute view of the second halves of a rank's overlapped pairs; None
    when a pair is not one F and one B/I with one number of its own, or a half is outside a
    pair (the detailed checks then name the problem)."""
    out: list[int] = []
    numbers: set[int] = set()
    kind_code = KIND_CODE
    pos = 0
    for step in steps:
        if step.sub:
            halves = step.sub
            if step.kind != Kind.OVERLAP_F_B or len(halves) != 2:
                return None
            number = halves[0].pair
            if number is None or halves[1].pair != number or number in numbers:
                return None
            numbers.add(number)
            if sorted(kind_code.get(h.kind, 9) for h in halves) not in _PAIR_KINDS:
                return None
            out.append(pos + 1)
            pos += 2
        elif step.kind in SENDS or step.kind in RECVS:
            continue
        elif step.pair is not None:
            return None
        else:
            pos += 1
    return out

def _check_shape(s: Schedule) -> None:
    if s.pp < 1:
        raise ScheduleError(f"pp must be at least 1, got {s.pp}")
    if s.vpp < 1:
        raise ScheduleError(f"vpp must be at least 1, got {s.vpp}")
    if s.microbatches < 1:
        raise ScheduleError(f"microbatches must be at least 1, got {s.microbatches}")
    if len(s.ranks) != s.pp:
        raise ScheduleError(f"expected one action list per rank ({s.pp} for pp={s.pp}), "
                            f"found {len(s.ranks)}")
    if len(s.placement) != s.pp * s.vpp:
        raise ScheduleError(f"placement: expected pp*vpp = {s.pp}*{s.vpp} = {s.pp * s.vpp} "
                            f"stages, found {len(s.placement)}")
    for stage, rank in enumerate(s.placement):
        if not 0 <= rank < s.pp:
            raise ScheduleError(f"placement: stage {stage} on rank {rank}, expected a rank in "
                                f"0..{s.pp - 1}")
    seen: dict[int, int] = {}
    for i, pipe in enumerate(s.pipelines):
        for stage in pipe:
            if not 0 <= stage < s.n_stages:
                raise ScheduleError(f"pipelines[{i}]: stage {stage} does not exist "
                                    f"({s.n_stages} stages)")
            if stage in seen:
                raise ScheduleError(f"pipelines: stage {stage} is in pipelines {seen[stage]} "
                                    f"and {i}; expected each stage in one pipeline")
            seen[stage] = i
    missing = [st for st in range(s.n_stages) if st not in seen]
    if missing:
        raise ScheduleError(f"pipelines: stage {missing[0]} is in no pipeline")
    if len(s.stage_chunk) != s.n_stages:
        raise ScheduleError(f"stage_chunk: expected {s.n_stages} entries, "
                            f"found {len(s.stage_chunk)}")
    for i, pipe in enumerate(s.pipelines):  # data flows through consecutive layer chunks
        chunks = [s.stage_chunk[st] for st in pipe]
        if chunks != list(range(chunks[0], chunks[0] + len(chunks))):
            raise ScheduleError(f"pipelines[{i}]: its stages compute chunks {chunks}, expected "
                                "consecutive chunks in model order")


def check_place(s: Schedule, rank: int, pos: int, a: Action) -> None:
    """An action at ``rank``/``pos`` names an existing stage and microbatch of that rank."""
    if not isinstance(a, Action):
        raise ScheduleError(f"expected an Action, found {type(a).__name__} {a!r}", rank, pos)
    if a.kind not in KIND_CODE or a.sub:
        raise ScheduleError(f"expected a compute action (F, B, I or W) here, found "
                            f"{a.kind}", rank, pos, str(a))
    if not 0 <= a.stage < s.n_stages:
        raise ScheduleError(f"stage {a.stage} does not exist (stages are "
                            f"0..{s.n_stages - 1})", rank, pos, str(a))
    if not 0 <= a.microbatch < s.microbatches:
        raise ScheduleError(f"microbatch {a.microbatch} does not exist (microbatches "
                            f"are 0..{s.microbatches - 1})", rank, pos, str(a))
    owner = s.placement[a.stage]
    if owner != rank:
        raise ScheduleError(f"stage {a.stage} runs on rank {owner} (placement), "
                            f"not on rank {rank}", rank, pos, str(a))


def _check_actions(s: Schedule) -> dict[Key, tuple[int, int]]:
    """Per-action checks in rank order; returns where each action is: key -> (rank, position)."""
    where: dict[Key, tuple[int, int]] = {}
    for rank, acts in enumerate(s.ranks):
        for pos, a in enumerate(acts):
            check_place(s, rank, pos, a)
            st, kind, mb = key = (a.stage, a.kind, a.microbatch)
            if key in where:
                r0, p0 = where[key]
                raise ScheduleError(f"duplicate: {_name(key)} already at rank {r0} "
                                    f"position {p0}", rank, pos, str(a))
            where[key] = (rank, pos)
            if kind == Kind.B and ((st, Kind.I, mb) in where or (st, Kind.W, mb) in where):
                other = (st, Kind.I, mb) if (st, Kind.I, mb) in where else (st, Kind.W, mb)
                raise ScheduleError(f"full backward mixed with split backward: "
                                    f"{_name(other)} at position {where[other][1]}; expected "
                                    f"either B or both I and W per stage and microbatch",
                                    rank, pos, str(a))
            if kind in "IW" and (st, Kind.B, mb) in where:
                raise ScheduleError(f"split backward mixed with full backward: "
                                    f"{_name((st, 'B', mb))} at position "
                                    f"{where[(st, 'B', mb)][1]}; expected either B or both I "
                                    f"and W per stage and microbatch", rank, pos, str(a))
            if kind == Kind.W and (st, Kind.I, mb) not in where:
                later = _find(s.ranks[rank], (st, Kind.I, mb), pos + 1)
                found = (f"it is at position {later}" if later is not None
                         else "there is none")
                raise ScheduleError(f"weight gradient before its input gradient "
                                    f"{_name((st, 'I', mb))} ({found})", rank, pos, str(a))
    return where


def _check_pairs(s: Schedule) -> None:
    for rank, acts in enumerate(s.ranks):
        halves: dict[int, list[int]] = {}
        for pos, a in enumerate(acts):
            if a.pair is not None:
                halves.setdefault(a.pair, []).append(pos)
        for pair, positions in halves.items():
            first = acts[positions[0]]
            if len(positions) != 2:
                raise ScheduleError(f"overlapped pair @{pair} has {len(positions)} action(s) on "
                                    f"this rank, expected 2 (one F, one B or I)",
                                    rank, positions[0], str(first))
            p0, p1 = positions
            if p1 != p0 + 1:
                raise ScheduleError(f"overlapped pair @{pair}: its other half {acts[p1]} is at "
                                    f"position {p1}, expected the next position {p0 + 1}",
                                    rank, p0, str(first))
            kinds = sorted(acts[p].kind for p in positions)
            if kinds not in ([Kind.B, Kind.F], [Kind.F, Kind.I]):
                raise ScheduleError(f"overlapped pair @{pair} is {acts[p0]} and {acts[p1]}, "
                                    f"expected one F and one B or I", rank, p0, str(first))


def _carried(s: Schedule, where: dict[Key, tuple[int, int]]) -> list[list[int]]:
    """The microbatches each pipeline carries.

    One pipeline carries all M. With several (DualPipe feeds microbatches from both ends) each
    microbatch enters exactly one: the pipeline whose first stage runs its forward.
    """
    if len(s.pipelines) == 1:
        return [list(range(s.microbatches))]
    carried: list[list[int]] = [[] for _ in s.pipelines]
    for mb in range(s.microbatches):
        entries = [k for k, pipe in enumerate(s.pipelines) if (pipe[0], Kind.F, mb) in where]
        if len(entries) != 1:
            firsts = " or ".join(f"{pipe[0]}F{mb}" for pipe in s.pipelines)
            found = ("none" if not entries else
                     " and ".join(f"{s.pipelines[k][0]}F{mb}" for k in entries))
            raise ScheduleError(f"microbatch {mb} must enter exactly one pipeline: expected "
                                f"{firsts}, found {found}")
        carried[entries[0]].append(mb)
    return carried


def _check_complete(s: Schedule, where: dict[Key, tuple[int, int]]) -> None:
    of_pipeline = "" if len(s.pipelines) == 1 else " of its pipeline"
    carried = _carried(s, where)
    for pipe, mbs in zip(s.pipelines, carried):
        for stage in pipe:
            rank = s.placement[stage]
            for mb in mbs:
                _check_covered(stage, mb, rank, where, of_pipeline)
    if len(s.pipelines) > 1:
        pipeline_of = {st: k for k, pipe in enumerate(s.pipelines) for st in pipe}
        entered = [set(mbs) for mbs in carried]
        for (stage, kind, mb), (rank, pos) in sorted(where.items(), key=lambda kv: kv[1]):
            k = pipeline_of[stage]
            if mb not in entered[k]:
                j = next(j for j, e in enumerate(entered) if mb in e)
                raise ScheduleError(f"microbatch {mb} does not go through pipeline {k} (stages "
                                    f"{', '.join(map(str, s.pipelines[k]))}): it enters "
                                    f"pipeline {j} at stage {s.pipelines[j][0]}",
                                    rank, pos, f"{stage}{kind}{mb}")


def _check_covered(stage: int, mb: int, rank: int, where: dict[Key, tuple[int, int]],
                   of_pipeline: str) -> None:
    if (stage, Kind.F, mb) not in where:
        raise ScheduleError(f"not in the schedule: every stage runs a forward for every "
                            f"microbatch{of_pipeline}", rank, None, f"{stage}F{mb}")
    if (stage, Kind.B, mb) in where:
        return
    i_at = where.get((stage, Kind.I, mb))
    w_at = where.get((stage, Kind.W, mb))
    if i_at and w_at:
        return
    if i_at or w_at:
        have, absent = (Kind.I, Kind.W) if i_at else (Kind.W, Kind.I)
        pos = (i_at or w_at)[1]
        raise ScheduleError(f"not in the schedule: a split backward needs both I and W "
                            f"({stage}{have}{mb} is at position {pos})",
                            rank, None, f"{stage}{absent}{mb}")
    raise ScheduleError(f"not in the schedule, nor {stage}I{mb} and {stage}W{mb}: every stage "
                        f"runs a backward for every microbatch{of_pipeline}",
                        rank, None, f"{stage}B{mb}")


def _check_dataflow(s: Schedule, where: dict[Key, tuple[int, int]]) -> None:
    """Run all ranks' lists as far as their dependencies allow; stuck before the end = deadlock."""
    prev, nxt = neighbour_stages(s.pipelines, s.n_stages)

    table = needs_table(prev, nxt)
    rule = {kind: [table[(st, kind)] for st in range(s.n_stages)] for kind in KIND_CODE}

    def needs_of(a: Action) -> list[Key]:
        """:mod:`.deps`' needs of ``a``, each as the action that meets it here (of a need
        met by either a B or an I, the one the schedule holds: :func:`_check_complete` let
        exactly one in)."""
        mb = a.microbatch
        out = []
        for alternatives in rule[a.kind][a.stage]:
            if len(alternatives) == 1:
                st, k = alternatives[0]
                out.append((st, k, mb))
                continue
            for st, k in alternatives:
                key = (st, k, mb)
                if key in where:
                    break
            out.append(key)
        return out

    done: set[Key] = set()
    steps = [_compute_steps(s, r) for r in range(s.pp)]
    pointer = [0] * s.pp            # index of each rank's next compute step

    def step_of(rank: int) -> list[Action]:
        return list(steps[rank][pointer[rank]][1])

    def position_of(rank: int) -> int:
        """Position in ``ranks`` of the rank's next compute step."""
        return steps[rank][pointer[rank]][0]

    def unmet(step: list[Action]) -> list[Key]:
        return [d for a in step for d in needs_of(a) if d not in done]

    progress = True
    while progress:
        progress = False
        for rank in range(s.pp):
            while pointer[rank] < len(steps[rank]):
                step = step_of(rank)
                if unmet(step):
                    break
                for a in step:
                    done.add((a.stage, a.kind, a.microbatch))
                pointer[rank] += 1
                progress = True

    blocked = [r for r in range(s.pp) if pointer[r] < len(steps[r])]
    if not blocked:
        return
    rank = _culprit(blocked, lambda r: [where[d][0] for d in unmet(step_of(r))])
    step = step_of(rank)
    stuck = next(a for a in step if any(d not in done for d in needs_of(a)))
    position = position_of(rank) + step.index(stuck)
    waits = []
    for dep in needs_of(stuck):
        if dep in done:
            continue
        r, p = where[dep]
        own = " (its own overlapped half: a pair's halves start together)" if any(
            a.key == dep for a in step) else ""
        waits.append(f"{_name(dep)} (rank {r} position {p}){own}")
    message = "deadlock: waits for " + ", ".join(waits)
    if len(step) == 2:
        partner = step[1] if stuck is step[0] else step[0]
        message += f"; overlapped with {partner}"
    others = "; ".join(f"rank {r} at position {position_of(r)} "
                       f"({s.ranks[r][position_of(r)]})" for r in blocked if r != rank)
    if others:
        message += f"; also blocked: {others}"
    raise ScheduleError(message, rank, position, str(stuck))


def _check_comm(s: Schedule) -> None:
    """A lowered schedule's SENDs and RECVs (see the module's docstring); positions are
    indices in ``steps``."""
    sends: dict[tuple, tuple] = {}
    recvs: dict[tuple, tuple] = {}
    keys: dict[tuple[int, int], tuple] = {}    # (rank, position) -> its transfer's key
    for rank, acts in enumerate(s.steps):
        for pos, a in enumerate(acts):
            if a.kind in SENDS or a.kind in RECVS:
                t = transfer_of(s, a, rank, pos)
                keys[(rank, pos)] = t.key
                table = sends if t.op == "send" else recvs
                if t.key in table:
                    r0, p0 = table[t.key][:2]
                    raise ScheduleError(f"duplicate: {a.plain} already at rank {r0} position "
                                        f"{p0}", rank, pos, a.plain)
                table[t.key] = (rank, pos, a, t)
    for key, (rank, pos, a, t) in sends.items():
        if key not in recvs:
            raise ScheduleError(f"no {_comm_name(t, 'recv')} on rank {t.dst_rank}: every send "
                                "needs its receive on the peer", rank, pos, a.plain)
    for key, (rank, pos, a, t) in recvs.items():
        if key not in sends:
            raise ScheduleError(f"no {_comm_name(t, 'send')} on rank {t.src_rank}: every "
                                "receive needs its send on the peer", rank, pos, a.plain)
    for rank, acts in enumerate(s.steps):
        received: set[tuple] = set()
        unsent: dict[tuple, tuple[int, Action, object]] = {}
        for pos, a in enumerate(acts):
            if a.kind in RECVS:
                received.add(keys[(rank, pos)])
                continue
            if a.kind in SENDS:
                t = sends[keys[(rank, pos)]][3]
                if unsent.pop(t.key, None) is None:
                    later = next((p for p in range(pos + 1, len(acts))
                                  if any(t in transfers(s, h, rank, "send")
                                         for h in acts[p].halves)), None)
                    producer = f"{t.src_stage}{'F' if a.kind == Kind.SEND_F else 'B/I'}" \
                               f"{t.microbatch}"
                    found = (f"it is at position {later}" if later is not None
                             else "it is not on this rank")
                    raise ScheduleError(f"sends data before computing it ({producer}: {found})",
                                        rank, pos, a.plain)
                continue
            for h in a.halves:
                for t in transfers(s, h, rank, "recv"):
                    if t.key not in received:
                        raise ScheduleError(f"{h.plain} takes its input from rank "
                                            f"{t.src_rank}, but no {_comm_name(t, 'recv')} is "
                                            "before it on this rank", rank, pos, a.plain)
                for t in transfers(s, h, rank, "send"):
                    unsent[t.key] = (pos, h, t)
        if unsent:
            pos, h, t = min(unsent.values(), key=lambda v: v[0])
            raise ScheduleError(f"{h.plain}'s output goes to rank {t.dst_rank}, but no "
                                f"{_comm_name(t, 'send')} follows it on this rank",
                                rank, pos, str(acts[pos].plain))
    _run_lowered(s, sends, keys)


def _comm_name(t, op: str) -> str:
    return comm_action(t._replace(op=op)).plain


def _run_lowered(s: Schedule, sends: dict[tuple, tuple],
                 keys: dict[tuple[int, int], tuple]) -> None:
    """Run the lowered lists: SENDs and RECVs never block; a compute waits for its local
    inputs and for the SENDs of the data it receives."""
    P = s.pp
    prev, nxt = neighbour_stages(s.pipelines, s.n_stages)
    placement = s.placement
    rule: dict[tuple[int, str], tuple] = {}     # (stage, kind) -> deps.needs
    done: set = set()
    sent: set = set()

    def unmet(rank: int, a: Action) -> list[str]:
        """What compute ``a`` on ``rank`` still waits for, as 'ACTION (rank r position p)':
        the sends of what it receives, and :mod:`.deps`' needs met on its own rank (the
        others come with those receives)."""
        out = []
        for t in transfers(s, a, rank, "recv"):
            if t.key not in sent:
                r, p, send = sends[t.key][:3]
                out.append((r, f"{send.plain} (rank {r} position {p})"))
        st, kind, mb = a.stage, a.kind, a.microbatch
        need = rule.get((st, kind))
        if need is None:
            need = rule[(st, kind)] = needs(st, kind, prev, nxt)
        for alternatives in need:
            stage, first = alternatives[0]
            if placement[stage] == rank and not any((x, k, mb) in done
                                                    for x, k in alternatives):
                out.append((rank, f"{stage}{first}{mb} (rank {rank})"))
        return out

    pointer = [0] * P
    progress = True
    while progress:
        progress = False
        for rank in range(P):
            acts = s.steps[rank]
            while pointer[rank] < len(acts):
                a = acts[pointer[rank]]
                if a.kind in SENDS:
                    sent.add(keys[(rank, pointer[rank])])
                elif a.kind not in RECVS:
                    if any(unmet(rank, h) for h in a.halves):
                        break
                    for h in a.halves:
                        done.add((h.stage, h.kind, h.microbatch))
                pointer[rank] += 1
                progress = True
    blocked = [r for r in range(P) if pointer[r] < len(s.steps[r])]
    if not blocked:
        return

    def waits(r: int) -> list:
        return [w for h in s.steps[r][pointer[r]].halves for w in unmet(r, h)]

    rank = _culprit(blocked, lambda r: [w[0] for w in waits(r)])
    step = s.steps[rank][pointer[rank]]
    message = "deadlock: waits for " + ", ".join(w[1] for w in waits(rank))
    others = "; ".join(f"rank {r} at position {pointer[r]} ({s.steps[r][pointer[r]].plain})"
                       for r in blocked if r != rank)
    if others:
        message += f"; also blocked: {others}"
    raise ScheduleError(message, rank, pointer[rank], step.plain)


def _culprit(blocked: list[int], waits_on) -> int:
    """The rank to blame: one waiting on its own later action, else the lowest rank on a cycle.

    Every blocked rank waits for an action of a blocked rank, so following the first wait from
    any blocked rank ends in a cycle; ranks merely downstream of the cycle are not the cause.
    """
    for r in blocked:
        if r in waits_on(r):
            return r
    seen: list[int] = []
    r = blocked[0]
    while r not in seen:
        seen.append(r)
        r = waits_on(r)[0]
    return min(seen[seen.index(r):])


def _find(acts: tuple[Action, ...], key: Key, start: int) -> int | None:
    for pos in range(start, len(acts)):
        if acts[pos].key == key:
            return pos
    return None


def _name(key: Key) -> str:
    return f"{key[0]}{key[1]}{key[2]}"
