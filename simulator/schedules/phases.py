"""Pipeline phases of a rank's action order (Megatron's naming, generalised).

Steady state starts at the forward that is immediately followed (among forwards and
gradient-carrying backwards) by the first backward, so 1F1B's warm-up is ``P-r-1`` forwards; the
backward that follows the last forward still belongs to the steady 1F1B step; everything after it
is cool-down. Weight-gradient-only actions (W) take the phase of their position.
"""

from __future__ import annotations

from collections.abc import Sequence

from .action import Action, Kind

WARMUP, STEADY, COOLDOWN = "Warmup", "Steady", "Cooldown"


def phase_labels(actions: Sequence[Action]) -> list[str]:
    n = len(actions)
    if n == 0:
        return []
    grad = [i for i, a in enumerate(actions) if a.kind in (Kind.B, Kind.I)]
    fwd = [i for i, a in enumerate(actions) if a.kind == Kind.F]
    if not grad or not fwd:
        return [WARMUP if a.kind == Kind.F else COOLDOWN for a in actions]
    first_b = grad[0]
    before = [i for i in fwd if i < first_b]
    steady_start = before[-1] if before else first_b
    last_f = fwd[-1]
    after = [i for i in grad if i > last_f]
    cooldown_start = after[0] + 1 if after else n
    return [WARMUP if i < steady_start else COOLDOWN if i >= cooldown_start else STEADY
            for i in range(n)]


def phase_counts(actions: Sequence[Action], labels: Sequence[str]) -> dict[str, int]:
    """warm-up forwards, steady forwards (= 1F1B steps), cool-down gradient backwards."""
    warm = sum(1 for a, p in zip(actions, labels) if p == WARMUP and a.kind == Kind.F)
    steady = sum(1 for a, p in zip(actions, labels) if p == STEADY and a.kind == Kind.F)
    cool = sum(1 for a, p in zip(actions, labels) if p == COOLDOWN and a.kind in (Kind.B, Kind.I))
    return {"warmup": warm, "steady": steady, "cooldown": cool}


def peak_inflight(actions: Sequence[Action]) -> tuple[int, int]:
    """(microbatches, stage-microbatch activations) held at most, from the order alone.

    A stage's activations for a microbatch are held from its forward until its last
    weight-carrying backward (W, or B when the backward is not split).
    """
    split = {(a.stage, a.microbatch) for a in actions if a.kind == Kind.W}
    held: dict[tuple[int, int], None] = {}
    per_mb: dict[int, int] = {}
    peak_mb = peak_act = 0
    for a in actions:
        key = (a.stage, a.microbatch)
        if a.kind == Kind.F:
            held[key] = None
            per_mb[a.microbatch] = per_mb.get(a.microbatch, 0) + 1
            peak_act = max(peak_act, len(held))
            peak_mb = max(peak_mb, len(per_mb))
        elif (a.kind == Kind.W or (a.kind == Kind.B and key not in split)) and key in held:
            del held[key]
            per_mb[a.microbatch] -= 1
            if per_mb[a.microbatch] == 0:
                del per_mb[a.microbatch]
    return peak_mb, peak_act
