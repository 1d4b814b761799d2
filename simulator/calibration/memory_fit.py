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

Where the traced stages' rows differ in size (``rows``: a heavy last stage), one number per
layer cannot serve both: every kept amount is fitted as ``{per_layer, per_param}`` (bytes per
layer plus bytes per parameter of its rows) and every transient as ``{fixed, per_param}``
(per parameter of the stage's largest row), from the medians of the stages of each size (a
last stage, which also holds its output and the loss, only where its size has no other
stage). A full backward's transient, seen only on the first stage, takes the W transient's
bytes per parameter. Rows all of one size give exactly the fit above.

- what the last stage's loss keeps for the backward (``loss_keeps_bytes``): what its forward
  keeps above the stash the fit gives its rows (the multi-stage runtime computes the loss
  inside the forward's span), plus what the traces show the loss keeping after that span
  (``loss_outside``, memory_retention: torch's single-stage schedules). The stash per layer is
  the median over the other stages where there are others.
"""

from __future__ import annotations

from statistics import median

from ..engine.memory import layer_params
from ..system.config import MemoryConfig
from ..system.memory_actions import action_bytes, memory_actions_from_dict


def fit_memory(per_action: dict[tuple[int, str], tuple[float, float]],
               layers: dict[int, int], first_stages: set[int], pp_comm: int,
               rows: list | None = None, grad_bytes_per_param: float = 0.0,
               split_keeps: dict[int, float] | None = None,
               w_transients: dict[int, float] | None = None,
               loss_outside: float = 0.0) -> dict:
    """The ``memory:`` fragment of a calibration from ``per_action[(stage, kind)] = (kept,
    transient above the action's start)``, ``layers[stage]`` (layers of its chunk) and the
    stages with no previous stage; ``rows`` (each stage's workload rows, optional) lets rows
    of different sizes be fitted per parameter, counted as the run counts them (the header's
    ``grad_bytes_per_param``, else 2). ``split_keeps[stage]``: what a split backward's I would
    keep until its W, by the forward's operators (:mod:`.forward_ops`); used where the traced
    class has no I (its input gradient, counted apart as held by its send, taken off; the I's
    working memory unseen: 0); ``w_transients[stage]``: a W's working memory by them (its
    widest weight's gradient), likewise where the class has no W; ``loss_outside``: what the
    loss keeps after the last stage's forward span (memory_retention)."""
    per_action, by_ops = with_split_keeps(per_action, first_stages, pp_comm, split_keeps)
    if w_transients and not any(k == "W" and s not in first_stages for s, k in per_action):
        per_action = {**per_action, **{(s, "W"): (0.0, float(t)) for s, t in
                                       w_transients.items() if s not in first_stages and t}}
    params = _row_params(rows, grad_bytes_per_param)
    # an I counted from the operators holds for a first stage's layers too (torch's first
    # stage computes no I, so only a traced one is left out)
    i_first = None if by_ops else False
    if params and len({p for ps in params.values() for p in ps}) > 1:
        return _with_loss(_fit_sized(per_action, params, first_stages, pp_comm, i_first),
                          per_action, layers, params, loss_outside)
    def values(kind: str, first: bool | None = None):
        return [(s, kept, trans) for (s, k), (kept, trans) in sorted(per_action.items())
                if k == kind and (first is None or (s in first_stages) == first)]

    out: dict = {}
    actions: dict[str, dict] = {}
    forwards = values("F")
    if forwards:
        # the last stage's forward also keeps what the loss saves: the others give the stash
        last = max(s for s, _, _ in forwards)
        stashes = [(s, kept) for s, kept, _ in forwards if s != last] or \
            [(s, kept) for s, kept, _ in forwards]
        out["activation_bytes_per_layer"] = round(median(kept / layers[s]
                                                         for s, kept in stashes))
        actions["F"] = {"transient": round(median(max(0.0, t - kept)
                                                  for _, kept, t in forwards))}
    inputs = [v for v in values("I", first=i_first) if v[1] > 0]
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
    return _with_loss(out, per_action, layers, params, loss_outside)


def _with_loss(out: dict, per_action: dict, layers: dict[int, int],
               params: dict[int, list[float]], loss_outside: float) -> dict:
    """``out`` with ``loss_keeps_bytes``: the last stage's forward's kept bytes above the
    stash the fit gives its rows, plus ``loss_outside`` (written where more than 0)."""
    forwards = {s: kept for (s, k), (kept, _) in per_action.items() if k == "F"}
    above = 0.0
    if forwards:
        last = max(forwards)
        actions = memory_actions_from_dict(out.get("actions", {}), "the fit", "memory.actions")
        given = action_bytes(actions, last, "F", "keeps", layers[last],
                             sum(params.get(last, ())))
        stash = given if given is not None else \
            out.get("activation_bytes_per_layer", 0) * layers[last]
        above = forwards[last] - stash
    loss = round(max(0.0, above) + loss_outside)
    return {**out, "loss_keeps_bytes": loss} if loss > 0 else out


def with_split_keeps(per_action: dict, first_stages: set[int], pp_comm: int,
                     split_keeps: dict[int, float] | None) -> dict:
    """(``per_action`` with an I per stage from ``split_keeps`` where it has none (a class
    without a split backward): its level rises by the weights' output gradients (the last
    one is the gradient it received, already in its buffer; the input gradient it makes in
    its place is held by its send, which the fit takes off as ``fixed: -pp_comm``), and it
    needs nothing above that, whether they were added)."""
    if not split_keeps or any(k == "I" and s not in first_stages and v[0] > 0
                              for (s, k), v in per_action.items()):
        return per_action, False
    out = dict(per_action)
    for s, nbytes in split_keeps.items():
        if nbytes > 0:
            out[(s, "I")] = (float(nbytes), float(nbytes))
    return out, True


def _row_params(rows, grad_bytes_per_param: float) -> dict[int, list[float]]:
    """Parameters of each stage's rows, counted as a run counts them (engine/memory.py)."""
    if not rows:
        return {}
    cfg = MemoryConfig(grad_bytes_per_param=grad_bytes_per_param)
    return {s: [layer_params(layer, cfg) for layer in chunk] for s, chunk in enumerate(rows)}


def _solve(points: list[tuple[float, float, float]]) -> tuple[float, float]:
    """Least squares ``v = a·x + b·y`` over (x, y, v) points (two unknowns)."""
    sxx = sum(x * x for x, _, _ in points)
    sxy = sum(x * y for x, y, _ in points)
    syy = sum(y * y for _, y, _ in points)
    sxv = sum(x * v for x, _, v in points)
    syv = sum(y * v for _, y, v in points)
    det = sxx * syy - sxy * sxy
    if not det:
        return 0.0, 0.0
    return (sxv * syy - syv * sxy) / det, (syv * sxx - sxv * sxy) / det


def _fit_sized(per_action, params: dict[int, list[float]], first_stages: set[int],
               pp_comm: int, i_first: bool | None = False) -> dict:
    last = max(params)

    def groups(kind: str, first: bool | None, pick) -> list[tuple[int, float, float, float]]:
        """(layers, parameters, largest row's parameters, median of ``pick``) per size (an I
        that keeps nothing, a first stage's, left out)."""
        by: dict[tuple, list[tuple[int, tuple]]] = {}
        for (s, k), v in sorted(per_action.items()):
            if k == kind and s in params and (first is None or (s in first_stages) == first) \
                    and (k != "I" or v[0] > 0):
                by.setdefault(tuple(params[s]), []).append((s, v))
        out = []
        for size, found in sorted(by.items()):
            kept = [v for s, v in found if s != last] or [v for _, v in found]
            out.append((len(size), sum(size), max(size, default=0.0),
                        median(pick(v) for v in kept)))
        return out

    def kept(kind: str, first: bool | None, fixed: float = 0.0) -> dict:
        g = groups(kind, first, lambda v: v[0])
        a, b = _solve([(n, p, v) for n, p, _, v in g])
        out = {"per_layer": round(a), "per_param": round(b, 6)}
        return {**out, "fixed": fixed} if fixed else out

    def transient(kind: str, first: bool | None, pick, slope: float | None = None) -> dict:
        g = groups(kind, first, pick)
        if slope is None:
            slope = _solve([(1.0, top, v) for _, _, top, v in g])[1] if len(g) > 1 else 0.0
        fixed = median(v - slope * top for _, _, top, v in g)
        return {"fixed": round(fixed), "per_param": round(slope, 6)}

    out: dict = {}
    actions: dict[str, dict] = {}
    if any(k == "F" for _, k in per_action):
        actions["F"] = {"keeps": kept("F", None),
                        "transient": transient("F", None, lambda v: max(0.0, v[1] - v[0]))}
    if any(k == "I" and (i_first is None or s not in first_stages) and v[0] > 0
           for (s, k), v in per_action.items()):
        actions["I"] = {"keeps": kept("I", i_first, -pp_comm),
                        "transient": transient("I", i_first,
                                               lambda v: max(0.0, v[1] - v[0]))}
    w_slope = None
    if any(k == "W" and s not in first_stages for s, k in per_action):
        actions["W"] = {"transient": transient("W", False, lambda v: v[1])}
        w_slope = actions["W"]["transient"]["per_param"]
    if any(k == "B" for _, k in per_action):
        actions["B"] = {"transient": transient("B", None, lambda v: v[1])}
    elif any(k == "W" and s in first_stages for s, k in per_action):
        actions["B"] = {"transient": transient("W", True, lambda v: v[1], w_slope or 0.0)}
    if actions:
        out["actions"] = {"*": actions}
    return out
