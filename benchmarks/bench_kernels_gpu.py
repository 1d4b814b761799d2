"""Measure GEMM, attention and memory-bound kernels and one transformer layer's forward and
backward on the GPU at hand (bf16), beside the kernel-level model's per-op prediction.

    python benchmarks/bench_kernels_gpu.py --out results/DATE-kernels-GPU.json   # on a GPU
    python benchmarks/bench_kernels_gpu.py --predict-only --gpu h100             # anywhere

The ops are those pipesim generate prices (simulator/workload/layer_ops.py) for a few real
layer shapes; each is timed with CUDA events (median of --repeats after a warm-up) and compared
with :func:`simulator.workload.kernels.price` on the preset of the GPU (a100, h100, h200: read
from torch.cuda.get_device_name, or --gpu). Needs torch with CUDA on the device; the predictions
alone need neither. Runs in well under 10 minutes on an A100 or H100.
"""

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
    return out


def _time(fn, repeats: int) -> float:
    import torch

    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    times = []
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


def _gpt_layer(h: int, heads: int, dev, dt):
    import torch
    import torch.nn.functional as F

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
            b, s, _ = x.shape
            q, k, v = self.qkv(self.ln1(x)).view(b, s, 3, heads, h // heads).permute(
                2, 0, 3, 1, 4)
            a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            x = x + F.dropout(self.proj(a.transpose(1, 2).reshape(b, s, h)), 0.1, True)
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
