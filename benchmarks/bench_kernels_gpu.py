"""Measure GEMM, attention and memory-bound kernels and one transformer layer's forward and
backward on the GPU at hand (bf16), beside the kernel-level model's per-op prediction.

    python benchmarks/bench_kernels_gpu.py --out results/DATE-kernels-GPU.json   # on a GPU
    python benchmarks/bench_kernels_gpu.py --predict-only --gpu h100             # anywhere

The ops are those pipesim generate prices (simulator/workload/layer_ops.py) for a few real
layer shapes; each is timed with CUDA events (median of --repeats after a warm-up) and compared
with :func:`simulator.workload.kernels.price` on the preset of the GPU (a100, h100, h200: read
from torch.cuda.get_device_name, or --gpu). Needs torch with CUDA on the device; the predictions
alone need neither. Runs in well under 10 minutes on an A100 or H100. The zero-bubble shapes'
rows (:data:`ZB_SHAPES`) run on the CPU too, as a dry run of the code (``python -m pytest -m
gpu_script``)."""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

# (label, M, N, K, batch): GEMMs of real layers on one GPU (b*s tokens x width / T)
GEMMS = (
    ("22B tp8 qkv", 8192, 2304, 6144, 1),
    ("22B tp8 proj", 8192, 6144, 768, 1),
    ("22B tp8 fc1", 8192, 3072, 6144, 1),
    ("22B tp8 fc2", 8192, 6144, 3072, 1),
    ("22B tp8 fc1 wgrad", 6144, 3072, 8192, 1),
    ("175B tp8 qkv (b1)", 2048, 4608, 12288, 1),
    ("175B tp8 fc1 (b1)", 2048, 6144, 12288, 1),
    ("1.7B tp1 fc2", 2048, 2304, 9216, 1),
    ("70B tp8 gate+up", 4096, 7168, 8192, 1),
    ("LM head 51200/8", 2048, 6400, 12288, 1),
    ("QK^T 32 heads, d 128", 2048, 2048, 128, 32),
    ("tiny", 64, 64, 64, 1),
    # the shape of the presets' sustained GEMM rate (kernel_presets.py [MLI-A100]): measured,
    # it checks the fraction itself on the GPU at hand
    ("8192^3 (the sustained rate's shape)", 8192, 8192, 8192, 1),
)
# (label, elements, bytes per element moved, torch op): memory-bound kernels
ELEMENTWISE = (
    ("layernorm 8192 x 6144", 8192 * 6144, "layernorm"),
    ("gelu 8192 x 3072", 8192 * 3072, "gelu"),
    ("dropout 8192 x 6144", 8192 * 6144, "dropout"),
    ("softmax 32 x 2048 x 2048", 32 * 2048 * 2048, "softmax"),
    # the presets' elementwise rate (kernel_presets.py [MLI-VEC]): its own shape, a * 1.2 on 4M
    # FP32 elements, and 64x that, which no L2 holds: measured, they check the fraction itself
    ("a * 1.2, 4M fp32 (the elementwise rate's shape)", 4 * 2 ** 20, "scale_fp32"),
    ("a * 1.2, 256M fp32 (past the L2)", 256 * 2 ** 20, "scale_fp32"),
)
# (label, b, heads, s, d): causal flash attention (torch's scaled_dot_product_attention)
ATTENTION = (
    ("flash b1 h8 s4096 d128", 1, 8, 4096, 128),
    ("flash b4 h16 s2048 d128", 4, 16, 2048, 128),
)
# one GPT layer on one GPU (tp 1): b, s, h, heads
LAYER = (1, 2048, 4096, 32)
# Megatron-LM's GPT layer as the zero-bubble runs ran it (fp16, attention without flash,
# dropout 0.1, tp 1): label, b, s, h, heads. The source's profile of these shapes (its Table 9,
# benchmarks/data/published-runs-extra.json) has a layer's forward as long as its input-gradient
# backward (T_F = T_B within 3 %), where the model prices the forward 14-18 % shorter; the rows
# below separate what can make the difference: each kernel of the attention core alone (the
# forward's dropout draws random numbers, its backward reads the mask), the three layouts of one
# linear's GEMMs, and the host time a synchronized timer adds to a forward.
ZB_SHAPES = (
    ("zb 1.5B", 6, 1024, 2304, 24),
    ("zb 14.6B", 1, 1024, 5120, 40),
)


def _bytes(kind: str, n: int) -> int:
    d = 2
    return {"layernorm": 2 * d * n, "gelu": 2 * d * n, "dropout": (2 * d + 1) * n,
            "softmax": 2 * d * n, "scale_fp32": 8 * n}[kind]


def predictions(gpu_key: str) -> list[dict]:
    from simulator.workload import layer_ops
    from simulator.workload.generator import ModelSpec, ParallelSpec
    from simulator.workload.kernel_presets import kernel_preset
    from simulator.workload.kernels import flash, gemm, memory, price, row_times

    gpu = kernel_preset(gpu_key)
    out = []
    for label, m, n, k, b in GEMMS:
        p = price(gemm(label, "fwd", m, n, k, batch=b), gpu)
        out.append({"op": label, "kind": "gemm", "shape": [m, n, k, b], "predicted_ns": p.ns,
                    "bound": p.bound})
    for label, elems, kind in ELEMENTWISE:
        p = price(memory(label, "fwd", _bytes(kind, elems)), gpu)
        out.append({"op": label, "kind": kind, "elements": elems, "predicted_ns": p.ns})
    for label, b, heads, s, d in ATTENTION:
        fwd = 4 * b * heads * s * s * d // 2
        for phase, flops in (("fwd", fwd), ("ig", fwd * 5 // 2)):
            p = price(flash(label, phase, flops, s), gpu)
            out.append({"op": f"{label} {'forward' if phase == 'fwd' else 'backward'}",
                        "kind": "flash", "shape": [b, heads, s, d], "predicted_ns": p.ns})
    b, s, h, heads = LAYER
    model = ModelSpec("gpt", 1, h, heads, s, b)
    par = ParallelSpec(tp=1, sequence_parallel=False, flash_attention=True)
    f = ig = wg = 0
    for ops in (layer_ops.attention_column_ops(model, par), layer_ops.attention_row_ops(model, par),
                layer_ops.mlp_column_ops(model, par), layer_ops.mlp_row_ops(model, par)):
        t, _ = row_times(ops, gpu)
        f, ig, wg = f + t[0], ig + t[1], wg + t[2]
    out.append({"op": f"gpt layer b{b} s{s} h{h} forward", "kind": "layer", "predicted_ns": f})
    out.append({"op": f"gpt layer b{b} s{s} h{h} backward (input + weight grads)",
                "kind": "layer", "predicted_ns": ig + wg})
    for label, b, s, h, heads in ZB_SHAPES:
        out += zb_predictions(gpu, label, b, s, h, heads)
    return out


def zb_predictions(gpu, label: str, b: int, s: int, h: int, heads: int) -> list[dict]:
    """The unfused fp16 layer of :data:`ZB_SHAPES`: its forward, input-gradient and weight-
    gradient time (the zero-bubble runtime's F, B and W), the attention core's kernels one by
    one, one linear's three GEMMs as layer_ops prices them (fc1: forward x Wᵀ, input gradient
    dy W, weight gradient xᵀ dy; Megatron computes the last as dyᵀ x, the same product
    transposed, which is what is measured), a plain copy of the scores (the bandwidth the dropout is compared with) and the
    host's part of a synchronized forward (predicted 0: the model has the host ahead)."""
    from simulator.workload import layer_ops
    from simulator.workload.generator import ModelSpec, ParallelSpec
    from simulator.workload.kernels import gemm, memory, price, row_times

    model = ModelSpec("gpt", 1, h, heads, s, b)
    par = ParallelSpec(tp=1, sequence_parallel=False, flash_attention=False, precision="fp16")
    t = [0, 0, 0]
    for ops in (layer_ops.attention_column_ops(model, par), layer_ops.attention_row_ops(model, par),
                layer_ops.mlp_column_ops(model, par), layer_ops.mlp_row_ops(model, par)):
        row, _ = row_times(ops, gpu)
        t = [a + r for a, r in zip(t, row)]
    rows = [{"op": f"{label} layer {what}", "kind": "zb_layer", "shape": [b, s, h, heads],
             "predicted_ns": ns}
            for what, ns in (("F", t[0]), ("B (input grads)", t[1]), ("W (weight grads)", t[2]))]
    for op in layer_ops._attention_core(model, par):
        rows.append({"op": f"{label} core {op.name}", "kind": "zb_core",
                     "shape": [b, s, h, heads], "predicted_ns": price(op, gpu).ns})
    tokens, f = b * s, 4 * h
    for what, m, n, k in (("x Wt (forward)", tokens, f, h), ("dy W (input grad)", tokens, h, f),
                          ("dyt x (weight grad)", h, f, tokens)):
        rows.append({"op": f"{label} fc1 {what}", "kind": "zb_gemm", "shape": [m, n, k, 1],
                     "predicted_ns": price(gemm(what, "fwd", m, n, k), gpu).ns})
    scores = b * heads * s * s
    rows.append({"op": f"{label} copy of the scores", "kind": "zb_copy", "elements": scores,
                 "predicted_ns": price(memory("copy", "fwd", 4 * scores), gpu).ns})
    rows.append({"op": f"{label} host time a synchronized F adds", "kind": "zb_host",
                 "predicted_ns": 0})
    return rows


def _time(fn, repeats: int, dev: str = "cuda") -> float:
    """Median ns of ``fn`` after a warm-up: CUDA events on a GPU; on the CPU (``dev`` "cpu",
    a dry run of the script's code, whose times say nothing of a GPU) the host's clock."""
    import time

    import torch

    for _ in range(3):
        fn()
    times = []
    if dev != "cuda":
        for _ in range(repeats):
            t0 = time.perf_counter()
            fn()
            times.append((time.perf_counter() - t0) * 1e9)
        return statistics.median(times)
    torch.cuda.synchronize()
    for _ in range(repeats):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end) * 1e6)     # ms -> ns
    return statistics.median(times)


def measure(rows: list[dict], repeats: int) -> None:
    import torch
    import torch.nn.functional as F

    dev, dt = "cuda", torch.bfloat16
    torch.manual_seed(0)
    by_op = {r["op"]: r for r in rows}
    for label, m, n, k, b in GEMMS:
        a = torch.randn(b, m, k, device=dev, dtype=dt)
        w = torch.randn(b, k, n, device=dev, dtype=dt)
        by_op[label]["measured_ns"] = _time(lambda: torch.bmm(a, w) if b > 1 else a[0] @ w[0],
                                            repeats)
    for label, elems, kind in ELEMENTWISE:
        if kind == "softmax":
            x = torch.randn(32, 2048, 2048, device=dev, dtype=dt)
            fn = lambda: torch.softmax(x, dim=-1)        # noqa: E731
        elif kind == "scale_fp32":
            x = torch.randn(elems, device=dev, dtype=torch.float32)
            fn = lambda: x * 1.2                          # noqa: E731
        else:
            cols = 6144 if kind != "gelu" else 3072
            x = torch.randn(elems // cols, cols, device=dev, dtype=dt)
            if kind == "layernorm":
                ln = torch.nn.LayerNorm(cols, device=dev, dtype=dt)
                fn = lambda: ln(x)                        # noqa: E731
            elif kind == "gelu":
                fn = lambda: F.gelu(x)                    # noqa: E731
            else:
                fn = lambda: F.dropout(x, 0.1, True)      # noqa: E731
        by_op[label]["measured_ns"] = _time(fn, repeats)
    for label, b, heads, s, d in ATTENTION:
        q, k_, v = (torch.randn(b, heads, s, d, device=dev, dtype=dt, requires_grad=True)
                    for _ in range(3))
        out = F.scaled_dot_product_attention(q, k_, v, is_causal=True)
        grad = torch.randn_like(out)
        by_op[f"{label} forward"]["measured_ns"] = _time(
            lambda: F.scaled_dot_product_attention(q, k_, v, is_causal=True), repeats)

        def fwd_bwd():
            o = F.scaled_dot_product_attention(q, k_, v, is_causal=True)
            o.backward(grad)
        both = _time(fwd_bwd, repeats)
        by_op[f"{label} backward"]["measured_ns"] = both - by_op[f"{label} forward"][
            "measured_ns"]
    b, s, h, heads = LAYER
    layer = _gpt_layer(h, heads, dev, dt)
    x = torch.randn(b, s, h, device=dev, dtype=dt, requires_grad=True)
    gy = torch.randn(b, s, h, device=dev, dtype=dt)
    name = f"gpt layer b{b} s{s} h{h}"
    fwd = _time(lambda: layer(x), repeats)
    both = _time(lambda: layer(x).backward(gy), repeats)
    by_op[f"{name} forward"]["measured_ns"] = fwd
    by_op[f"{name} backward (input + weight grads)"]["measured_ns"] = both - fwd
    for label, b, s, h, heads in ZB_SHAPES:
        zb_measure(by_op, label, b, s, h, heads, repeats)


def zb_measure(by_op: dict, label: str, b: int, s: int, h: int, heads: int,
               repeats: int, dev: str = "cuda") -> None:
    """Times the rows of :func:`zb_predictions` (fp16, as the zero-bubble runs; fp32 in a dry
    run on the CPU, ``dev`` "cpu", which checks the code, not the times)."""
    import time

    import torch
    import torch.nn.functional as F

    dt = torch.float16 if dev == "cuda" else torch.float32
    sync = torch.cuda.synchronize if dev == "cuda" else (lambda: None)
    layer = _gpt_layer(h, heads, dev, dt, flash=False)
    x = torch.randn(s, b, h, device=dev, dtype=dt, requires_grad=True)
    gy = torch.randn(s, b, h, device=dev, dtype=dt)
    fwd = _time(lambda: layer(x), repeats, dev)
    ig = _time(lambda: torch.autograd.grad(layer(x), x, gy), repeats, dev) - fwd
    both = _time(lambda: layer(x).backward(gy), repeats, dev) - fwd
    for what, ns in (("F", fwd), ("B (input grads)", ig), ("W (weight grads)", both - ig)):
        by_op[f"{label} layer {what}"]["measured_ns"] = ns
    # the host's part: a forward timed on the host between two synchronizations (the zero-
    # bubble source's ScheduleTimers) less the same forward's GPU time
    walls = []
    for _ in range(repeats):
        sync()
        t0 = time.perf_counter()
        layer(x)
        sync()
        walls.append((time.perf_counter() - t0) * 1e9)
    by_op[f"{label} host time a synchronized F adds"]["measured_ns"] = \
        statistics.median(walls) - fwd
    # the attention core's kernels one by one, in Megatron's layout ([b * heads, s, d])
    bh, d = b * heads, h // heads
    q, k, v = (torch.randn(bh, s, d, device=dev, dtype=dt) for _ in range(3))
    buf = torch.empty(bh, s, s, device=dev, dtype=dt)
    scores = torch.baddbmm(buf, q, k.transpose(1, 2), beta=0.0, alpha=d ** -0.5)
    probs = torch.softmax(scores, dim=-1)
    mask = torch.rand_like(probs) > 0.1
    dropped = probs * mask / 0.9
    g = torch.randn(bh, s, d, device=dev, dtype=dt)
    gp = torch.randn_like(probs)
    core = {
        "attention_scores": lambda: torch.baddbmm(buf, q, k.transpose(1, 2), beta=0.0,
                                                  alpha=d ** -0.5),
        # Megatron's fused kernel applies the causal mask in the same pass
        "scale_mask_softmax": lambda: torch.softmax(scores, dim=-1),
        "attention_dropout": lambda: F.dropout(probs, 0.1, True),
        "attention_context": lambda: torch.bmm(dropped, v),
        "attention_context_dgrad_probs": lambda: torch.bmm(g, v.transpose(1, 2)),
        "attention_context_dgrad_v": lambda: torch.bmm(dropped.transpose(1, 2), g),
        "attention_dropout_bwd": lambda: gp * mask / 0.9,
        "scale_mask_softmax_bwd": lambda: torch._softmax_backward_data(gp, probs, -1, dt),
        "attention_scores_dgrad_q": lambda: torch.bmm(gp, k),
        "attention_scores_dgrad_k": lambda: torch.bmm(gp.transpose(1, 2), q),
    }
    for name, fn in core.items():
        by_op[f"{label} core {name}"]["measured_ns"] = _time(fn, repeats, dev)
    copy = torch.empty_like(probs)
    by_op[f"{label} copy of the scores"]["measured_ns"] = _time(lambda: copy.copy_(probs),
                                                                 repeats, dev)
    tokens, f = b * s, 4 * h
    xs = torch.randn(tokens, h, device=dev, dtype=dt)
    w = torch.randn(f, h, device=dev, dtype=dt)
    dy = torch.randn(tokens, f, device=dev, dtype=dt)
    for what, fn in (("x Wt (forward)", lambda: xs @ w.t()), ("dy W (input grad)", lambda: dy @ w),
                     ("dyt x (weight grad)", lambda: dy.t() @ xs)):
        by_op[f"{label} fc1 {what}"]["measured_ns"] = _time(fn, repeats, dev)


def _gpt_layer(h: int, heads: int, dev, dt, flash: bool = True):
    """A GPT layer on one GPU (LayerNorm, QKV, attention, projection, GELU MLP, dropout 0.1
    before each residual add). ``flash``: causal SDPA on [b, s, h]; else Megatron-LM's core
    without flash attention in its [s, b, h] layout: the scores by baddbmm into a buffer,
    softmax, dropout 0.1 on the probabilities, bmm with V (eager torch: Megatron fuses the
    bias, dropout and add, and masks inside its softmax kernel)."""
    import torch
    import torch.nn.functional as F

    d = h // heads

    def core(q, k, v):         # [..., s, d] each: [b, heads] flash, [b * heads] not
        if flash:
            return F.scaled_dot_product_attention(q, k, v, is_causal=True)
        buf = torch.empty(q.shape[0], q.shape[1], k.shape[1], device=q.device, dtype=q.dtype)
        p = torch.softmax(torch.baddbmm(buf, q, k.transpose(1, 2), beta=0.0, alpha=d ** -0.5),
                          dim=-1)
        return torch.bmm(F.dropout(p, 0.1, True), v)

    class Layer(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.ln1 = torch.nn.LayerNorm(h)
            self.qkv = torch.nn.Linear(h, 3 * h)
            self.proj = torch.nn.Linear(h, h)
            self.ln2 = torch.nn.LayerNorm(h)
            self.fc1 = torch.nn.Linear(h, 4 * h)
            self.fc2 = torch.nn.Linear(4 * h, h)

        def forward(self, x):
            if flash:     # [b, s, h]
                b, s, _ = x.shape
                q, k, v = self.qkv(self.ln1(x)).view(b, s, 3, heads, d).permute(2, 0, 3, 1, 4)
                c = core(q, k, v).transpose(1, 2).reshape(b, s, h)
            else:         # [s, b, h]
                s, b, _ = x.shape
                q, k, v = self.qkv(self.ln1(x)).view(s, b * heads, 3 * d).split(d, dim=-1)
                c = core(q.transpose(0, 1), k.transpose(0, 1), v.transpose(0, 1))
                c = c.transpose(0, 1).reshape(s, b, h)
            x = x + F.dropout(self.proj(c), 0.1, True)
            return x + F.dropout(self.fc2(F.gelu(self.fc1(self.ln2(x)))), 0.1, True)

    return Layer().to(device=dev, dtype=dt)


def _gpu_key(name: str) -> str:
    for key in ("h200", "h100", "a100"):
        if key in name.lower():
            return key
    raise SystemExit(f"bench_kernels_gpu: --gpu: no preset for {name!r} (a100, h100, h200)")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gpu", choices=("a100", "h100", "h200"), default=None,
                    help="the preset to predict with (default: from the device's name)")
    ap.add_argument("--predict-only", action="store_true", help="print the predictions only")
    ap.add_argument("--repeats", type=int, default=20)
    ap.add_argument("--out", type=Path, default=None, help="write the rows as JSON here")
    args = ap.parse_args(argv)
    device = None
    if args.predict_only:
        if args.gpu is None:
            ap.error("--predict-only needs --gpu")
        key = args.gpu
    else:
        import torch

        if not torch.cuda.is_available():
            print("bench_kernels_gpu: no CUDA device (use --predict-only)", file=sys.stderr)
            return 2
        device = torch.cuda.get_device_name()
        key = args.gpu or _gpu_key(device)
    rows = predictions(key)
    if not args.predict_only:
        measure(rows, args.repeats)
    print(f"preset {key}" + (f", device {device}" if device else ""))
    print(f"{'op':<52} {'predicted us':>13} {'measured us':>12} {'error':>8}")
    for r in rows:
        m = r.get("measured_ns")
        err = f"{100 * (r['predicted_ns'] - m) / m:+.1f} %" if m else "-"
        print(f"{r['op']:<52} {r['predicted_ns'] / 1e3:>13.1f} "
              f"{(m / 1e3 if m else float('nan')):>12.1f} {err:>8}")
    if args.out:
        args.out.write_text(json.dumps({"preset": key, "device": device, "rows": rows},
                                       indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
