"""Fit the memory model's per-action bytes (``memory.activation_bytes_per_layer`` and
``memory.actions``) to what one traced schedule's actions kept and briefly needed
(:mod:`.memory_trace`), in the forms that carry over to other schedules and stage sizes.

What is fitted, each a median over the traced stages (the model: engine/memory.py):

- the stash per layer: a forward's kept bytes over its stage's layers;
- a forward's transient: what it needs above its stash (a block's output before its residual
  add, on torch), fixed per action;
- an I's kept bytes per layer, less the input gradient its send holds (``fixed: -pp_comm``:
  the runtime's rule counts that tensor apart), and an I's, W's and B's transient above the
  higher of its start and end levels. A first stage's backward on torch is one W (its I does
  nothing): there it gives B's transient where the trace has no B.
"""

from __future__ import annotations

from statistics import median


def fit_memory(per_action: dict[tuple[int, str], tuple[float, float]],
               layers: dict[int, int], first_stages: set[int], pp_comm: int) -> dict:
    """The ``memory:`` fragment of a calibration from ``per_action[(stage, kind)] = (kept,
    transient above the action's start)``, ``layers[stage]`` (layers of its chunk) and the
    stages with no previous stage."""
    def values(kind: str, first: bool | None = None):
        return [(s, kept, trans) for (s, k), (kept, trans) in sorted(per_action.items())
                if k == kind and (first is None or (s in first_stages) == first)]

    out: dict = {}
    actions: dict[str, dict] = {}
    forwards = values("F")
    if forwards:
        out["activation_bytes_per_layer"] = round(median(kept / layers[s]
                                                         for s, kept, _ in forwards))
        actions["F"] = {"transient": round(median(max(0.0, t - kept)
                                                  for _, kept, t in forwards))}
    inputs = [v for v in values("I", first=False) if v[1] > 0]
    if inputs:
        actions["I"] = {
            "keeps": {"per_layer": round(median(kept / layers[s] for s, kept, _ in inputs)),
                      "fixed": -pp_comm},
            "transient": round(median(max(0.0, t - kept) for _, kept, t in inputs))}
    weights = values("W", first=False)
    if weights:
        actions["W"] = {"transient": round(median(t for _, _, t in weights))}
    full = values("B") or values("W", first=True)
    if full:
        actions["B"] = {"transient": round(median(t for _, _, t in full))}
    if actions:
        out["actions"] = {"*": actions}
    return out
