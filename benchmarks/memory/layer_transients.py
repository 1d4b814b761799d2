"""One transformer layer's working memory inside F, B, I and W as torch's CPU allocator gives it,
held against what ``pipesim generate`` writes from the shape
(``simulator.workload.activations.transformer_transient_bytes``).

    python -m benchmarks.memory.layer_transients [--json OUT.json] [--markdown OUT.md]

The layer is the harness's (``live.TransformerLayer``, 1-byte dropout masks as on CUDA, fp32),
its attention written out (scores kept) or through ``F.scaled_dot_product_attention`` (flash:
no scores, no attention dropout).
Each action runs under the profiler with memory events on the second microbatch (the weights'
gradients then exist, as for every microbatch but a step's first). Transient, as pipesim counts
it: the highest level inside the action above the higher of its start and its end. F, B and W
run as torch's runtime runs them (``stage_backward`` for a full backward,
``stage_backward_input`` then ``stage_backward_weight`` for a split one). Needs torch.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from simulator.workload.activations import transformer_transient_bytes  # noqa: E402

BYTES = 4          # fp32, as the harness runs
# (hidden, heads, seq, batch, ffn multiple, flash): the harness's shape, then one size changed at
# a time; then the same with flash attention
SHAPES = ((256, 4, 128, 1, 4, False), (256, 4, 256, 1, 4, False), (256, 8, 128, 1, 4, False),
          (256, 4, 128, 1, 2, False), (512, 4, 128, 1, 4, False), (256, 4, 128, 2, 4, False),
          (256, 4, 128, 1, 4, True), (256, 4, 256, 1, 4, True), (256, 8, 128, 1, 4, True),
          (512, 4, 128, 1, 4, True))


def _levels(fn):
    """``fn()``'s result, its peak and its end, in bytes above its start."""
    import torch
    from torch.profiler import ProfilerActivity, profile
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "t.json"
        with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
            out = fn()
        prof.export_chrome_trace(str(path))
        events = json.loads(path.read_text())["traceEvents"]
    del torch
    level = peak = 0
    for _, n in sorted((e["ts"], e["args"]["Bytes"]) for e in events
                       if e.get("name") == "[memory]"):
        level += n
        peak = max(peak, level)
    return out, peak, level


def measure(hidden: int, heads: int, seq: int, batch: int, mult: int,
            flash: bool = False) -> dict[str, int]:
    """Transient bytes of F, B, I and W of one layer of this shape."""
    import torch
    from torch.distributed.pipelining._backward import (stage_backward, stage_backward_input,
                                                        stage_backward_weight)
    from benchmarks.memory.live import TransformerLayer
    torch.manual_seed(0)
    torch.set_num_threads(1)
    causal = torch.ones(seq, seq, dtype=torch.bool).triu(1)
    layer = TransformerLayer(hidden, mult * hidden, heads, causal, bool_masks=True, flash=flash)
    out: dict[str, int] = {}
    for split in (False, True):
        for _ in range(2):     # the second microbatch: the gradients exist
            x = torch.randn(batch, seq, hidden).requires_grad_()
            y, peak, end = _levels(lambda: layer(x))
            out["F"] = peak - max(0, end)
            g = torch.randn_like(y)
            if not split:
                _, peak, end = _levels(lambda: stage_backward([y], [g], [x]))
                out["B"] = peak - max(0, end)
                continue
            (_, groups), peak, end = _levels(
                lambda: stage_backward_input([y], [g], [x], layer.parameters()))
            out["I"] = peak - max(0, end)
            y = None       # the runtime drops the stage's output before its W
            _, peak, end = _levels(lambda: stage_backward_weight(layer.parameters(), groups))
            out["W"] = peak - max(0, end)
    return out


def run(shapes=SHAPES) -> list[dict]:
    rows = []
    for h, a, s, b, mult, flash in shapes:
        counted = transformer_transient_bytes(s, b, h, a, mult * h, flash_attention=flash,
                                              dtype_bytes=BYTES)
        measured = measure(h, a, s, b, mult, flash)
        rows.append({"hidden": h, "heads": a, "seq": s, "batch": b, "ffn": mult * h,
                     "flash": flash, "measured": measured, "counted": dict(zip("FBIW", counted))})
    return rows


def markdown(rows: list[dict]) -> str:
    lines = ["One layer's transient bytes, measured (torch's CPU allocator) / counted from the "
             "shape, fp32, 1-byte masks.", "",
             "| h | a | s | b | ffn | flash | F | B | I | W |",
             "|---:|---:|---:|---:|---:|---|---|---|---|---|"]
    for r in rows:
        cells = [f"{r['measured'][k]} / {r['counted'][k]}" for k in "FBIW"]
        lines.append(f"| {r['hidden']} | {r['heads']} | {r['seq']} | {r['batch']} | {r['ffn']} | "
                     f"{'yes' if r['flash'] else 'no'} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json")
    ap.add_argument("--markdown")
    args = ap.parse_args(argv)
    rows = run()
    text = markdown(rows)
    print(text, end="")
    if args.markdown:
        Path(args.markdown).write_text(text)
    if args.json:
        Path(args.json).write_text(json.dumps({"rows": rows}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
