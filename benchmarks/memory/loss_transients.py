"""What the last stage's loss keeps and holds, as torch's CPU allocator gives it, held against
what ``pipesim generate`` writes from the shape (``simulator.workload.activations.
loss_memory_bytes``), for each runtime's own cross-entropy:

- torchtitan's: ``F.cross_entropy(pred.flatten(0, 1).float(), labels.flatten(0, 1))`` (its
  ``cross_entropy_loss``), the logits deleted before the backward as its train step does;
- Megatron-LM's: megatron-core's ``vocab_parallel_cross_entropy`` itself (one TP rank, gloo).

    python -m benchmarks.memory.loss_transients [--json OUT.json]

Each loss runs on a narrow LM head's logits (``x @ W.T``, W without a gradient) under the
profiler with memory events: kept is the level at the forward's end above its
start (the logits deleted), the forward's working memory its peak above that end, the
backward's its peak above its start. Per logit (bytes), in
bf16 and fp32. Needs torch; Megatron-LM's rows need megatron-core (else they are left out).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from benchmarks.memory.layer_transients import _levels  # noqa: E402
from simulator.workload.activations import loss_memory_bytes  # noqa: E402

# a narrow head whose own gradient (x's, 8 values a token) is 2-4 % of a logit's byte: what is
# measured is the loss's
TOKENS, VOCAB, HIDDEN = 256, 1000, 8


def _torchtitan_loss(pred, labels):
    import torch.nn.functional as F
    return F.cross_entropy(pred.flatten(0, 1).float(), labels.flatten(0, 1))


@contextlib.contextmanager
def _megatron_loss():
    """megatron-core's vocab-parallel cross-entropy on a TP group of one (None when
    megatron-core is not installed), its process group and parallel state set up for the
    measurement and torn down after it when they were not there before."""
    try:
        import torch
        from megatron.core import parallel_state
        from megatron.core.tensor_parallel.cross_entropy import vocab_parallel_cross_entropy
    except ImportError:
        yield None
        return
    group = not torch.distributed.is_initialized()
    if group:
        os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
        os.environ.setdefault("MASTER_PORT", "29533")
        torch.distributed.init_process_group("gloo", rank=0, world_size=1)
    state = not parallel_state.model_parallel_is_initialized()
    if state:
        parallel_state.initialize_model_parallel(1, 1)
    try:
        yield lambda pred, labels: vocab_parallel_cross_entropy(pred, labels).sum()
    finally:
        if state:
            parallel_state.destroy_model_parallel()
        if group:
            torch.distributed.destroy_process_group()


def measure(runtime: str, dtype_bytes: int) -> dict[str, float] | None:
    """Bytes a logit the loss keeps, and holds in its forward and its backward; None when the
    runtime's code is not installed."""
    if runtime == "torchtitan":
        return _measure(_torchtitan_loss, dtype_bytes)
    with _megatron_loss() as loss_fn:
        return None if loss_fn is None else _measure(loss_fn, dtype_bytes)


def _measure(loss_fn, dtype_bytes: int) -> dict[str, float]:
    import torch

    torch.manual_seed(0)
    torch.set_num_threads(1)
    dt = torch.bfloat16 if dtype_bytes == 2 else torch.float32
    w = torch.randn(VOCAB, HIDDEN, dtype=dt)
    x = torch.randn(TOKENS, 1, HIDDEN, dtype=dt, requires_grad=True)    # [s, b, h]
    labels = torch.randint(0, VOCAB, (TOKENS, 1))

    def forward():
        pred = x @ w.t()
        loss = loss_fn(pred, labels)
        del pred            # as torchtitan's train step, before the backward
        return loss

    loss, peak, end = _levels(forward)
    _, back, _ = _levels(lambda: loss.backward())
    n = TOKENS * VOCAB
    return {"keeps": end / n, "f_transient": (peak - end) / n, "b_transient": back / n}


def rows() -> list[dict]:
    out = []
    for runtime in ("torchtitan", "megatron"):
        for d in (2, 4):
            got = measure(runtime, d)
            if got is None:
                continue
            rule = dict(zip(("keeps", "f_transient", "b_transient"),
                            (b / (TOKENS * VOCAB) for b in loss_memory_bytes(TOKENS * VOCAB, d,
                                                                              runtime))))
            out.append({"runtime": runtime, "dtype_bytes": d, "measured": got, "rule": rule})
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args(argv)
    table = rows()
    print("| runtime | logits | kept (measured / rule) | F above it | B |")
    print("|---|---|---|---|---|")
    for r in table:
        m, p = r["measured"], r["rule"]
        print(f"| {r['runtime']} | {'bf16' if r['dtype_bytes'] == 2 else 'fp32'} | "
              + " | ".join(f"{m[k]:.3f} / {p[k]:g}" for k in ("keeps", "f_transient",
                                                              "b_transient")) + " |")
    if args.json:
        args.json.write_text(json.dumps(table, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
