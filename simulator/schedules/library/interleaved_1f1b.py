"""Interleaved 1F1B (Megatron virtual pipeline; PyTorch ``ScheduleInterleaved1F1B``).

Each rank holds v chunks, stage s on rank s mod P. Microbatches go in groups of N: the forward
order is, group after group, chunk 0 for every microbatch of the group, then chunk 1, ...; the
k-th backward takes the k-th entry of the same order with chunk v-1-c. Rank r runs
``min(2(P-r-1) + (v-1)N, M·v)`` warm-up forwards, then one F and one B per step, then the
remaining backwards. Orders are action for action PyTorch 2.13's runtime order.

Group size N, as PyTorch and Megatron choose it:
- default: PyTorch's: ``N = M // max(1, M // P)``, which needs M to be a multiple of
  ``max(1, M // P)`` (N = P whenever P divides M; M < P is allowed, N = M);
- ``group_size=N``: Megatron's rule, ``P <= N <= M`` and ``M mod N`` either 0 or at least P (a
  last, smaller group of ``M mod N`` microbatches). With the same N both give the same order.
With v = 1 the groups do not change the order and are not checked (PyTorch still refuses some M).
"""

from __future__ import annotations

from ...errors import ConfigError
from ..action import Action, Kind
from ..registration import fb_sizes, register
from ..schedule import Schedule, loop_placement


def megatron_warmup(pp: int, rank: int, vpp: int, microbatches: int, group: int) -> int:
    """Rank ``rank``'s warm-up forwards in Megatron-LM's interleaved loop
    (forward_backward_pipelining_with_interleaving: (P - rank - 1) x 2 + (v - 1) x the
    microbatch group, at most every forward). The order alone cannot tell P - 1 of v·M from
    all of them (both run every forward before the first backward), and Megatron exchanges the
    two differently, so the count is this rule's."""
    return min(2 * (pp - rank - 1) + (vpp - 1) * group, vpp * microbatches)


def warmup_of(schedule: Schedule) -> tuple[int, ...]:
    """Every rank's warm-up forwards of an interleaved-1f1b schedule: the generator's, else
    Megatron's rule at the schedule's group size (its meta's, else the default one)."""
    given = schedule.meta.get("warmup")
    if given:
        return tuple(given)
    pp, vpp, m = schedule.pp, schedule.vpp, schedule.microbatches
    group = schedule.meta.get("group_size")
    if group is None:
        try:
            group = resolve_group_size(pp, m, vpp, None, schedule.name)
        except ConfigError:
            group = pp       # Megatron's default microbatch group
    return tuple(megatron_warmup(pp, r, vpp, m, group) for r in range(pp))


def resolve_group_size(pp: int, microbatches: int, vpp: int, group_size: int | None,
                       schedule: str) -> int:
    """The microbatch group size N, or ConfigError naming the option and the rule it breaks."""
    m = microbatches
    if group_size is None:
        rounds = max(1, m // pp)
        if vpp > 1 and m % rounds != 0:
            raise ConfigError(
                f"--microbatches: {schedule} with --pp {pp} needs M to be a multiple of "
                f"max(1, M // P) = {rounds} (PyTorch's groups of M // {rounds}), got {m}; "
                f"or pass --group-size N with {pp} <= N <= {m} and M mod N = 0 or >= {pp} "
                f"(Megatron)")
        return m // rounds
    if group_size < 1:
        raise ConfigError(f"--group-size: expected a positive number, got {group_size}")
    if not pp <= group_size <= m:
        raise ConfigError(f"--group-size: expected P <= N <= M ({pp} <= N <= {m}), "
                          f"got {group_size}")
    rest = m % group_size
    if 0 < rest < pp:
        raise ConfigError(f"--group-size: M mod N must be 0 or at least P = {pp} (a last group "
                          f"smaller than P stalls the pipeline), got {m} mod {group_size} = "
                          f"{rest}")
    return group_size


def forward_table(microbatches: int, vpp: int, group_size: int) -> list[tuple[int, int]]:
    """(chunk, microbatch) in forward order: per group, every chunk over the group's microbatches."""
    table = []
    for start in range(0, microbatches, group_size):
        group = range(start, min(start + group_size, microbatches))
        table += [(chunk, mb) for chunk in range(vpp) for mb in group]
    return table


def interleaved_order(rank: int, pp: int, vpp: int, microbatches: int, group_size: int,
                      warmup: int, split_backward: bool = False, w_delay: int = 0) -> list[Action]:
    """One rank's interleaved order after ``warmup`` forwards.

    ``split_backward``: each backward is an I, and W of the k-th backward follows the
    (k + w_delay)-th backward step; the rest of the Ws close the list (PyTorch's zero bubble).
    """
    table = forward_table(microbatches, vpp, group_size)
    fwd = [Action(c * pp + rank, Kind.F, mb) for c, mb in table]
    bwd_kind = Kind.I if split_backward else Kind.B
    bwd = [Action((vpp - 1 - c) * pp + rank, bwd_kind, mb) for c, mb in table]
    total = len(table)
    acts = fwd[:warmup]
    w_next = 0
    for k in range(total):
        if warmup + k < total:
            acts.append(fwd[warmup + k])
        acts.append(bwd[k])
        if split_backward and k >= w_delay:
            acts.append(Action(bwd[w_next].stage, Kind.W, bwd[w_next].microbatch))
            w_next += 1
    if split_backward:
        acts += [Action(b.stage, Kind.W, b.microbatch) for b in bwd[w_next:]]
    return acts


def _closed_form(pp: int, microbatches: int, vpp: int) -> float:
    return (pp - 1) / (vpp * microbatches + pp - 1)


@register("interleaved-1f1b",
          summary="Interleaved 1F1B (Megatron virtual pipeline, PyTorch Interleaved1F1B): v chunks "
                  "per rank (loop placement), microbatch groups of N",
          closed_form=_closed_form,
          formula="(P-1)/(vM+P-1)",
          default_vpp=2, variable_vpp=True, aliases=("interleaved", "interleaved1f1b"),
          sizes=fb_sizes, torch_class="Interleaved1F1B", megatron="interleaved",
          default_for="vpp>1")
def generate(pp: int, microbatches: int, vpp: int = 2, group_size: int | None = None,
             **_: object) -> Schedule:
    n = resolve_group_size(pp, microbatches, vpp, group_size, "interleaved-1f1b")
    warmup = tuple(megatron_warmup(pp, r, vpp, microbatches, n) for r in range(pp))
    ranks = tuple(tuple(interleaved_order(r, pp, vpp, microbatches, n, warmup[r]))
                  for r in range(pp))
    # the warm-up counts decide Megatron's exchanges without overlap (engine/program.py,
    # _paired_exchanges): a rank of only warm-up forwards has no steady F-B pairs
    return Schedule("interleaved-1f1b", pp, vpp, microbatches, loop_placement(pp, vpp), ranks,
                    meta={"group_size": n, "warmup": warmup})
