"""The kernel model's GEMMs against measured H100 kernel times: OpenXLA's default matmul
performance table (``xla/service/gpu/model/matmul_interpolator_data.h``, the ``sm_90`` section).

XLA's ``matmul_perf_table_gen`` compiles each dot (batch b, m x k times k x n), runs it five
times and keeps the median kernel time a CUPTI tracer gives; the table stores 2·b·m·n·k FLOPs
over that time. Those are kernel durations on a real H100 (sm_90), over a grid of shapes from
256 to 4096 a side: an independent check of the tile and wave model (`simulator/workload/
kernels.py`) at every size, set by nothing here. The file belongs to another project: point to
it in an XLA checkout (openxla/xla, or a fork that keeps the file), it is not copied here.

    python benchmarks/bench_gemm_xla_table.py --xla-table PATH/matmul_interpolator_data.h
    python benchmarks/bench_gemm_xla_table.py --xla-table PATH --table-source "openxla/xla COMMIT" \
        --json benchmarks/results/DATE-gemm-xla-h100.json

Prints, for BF16 GEMMs, the h100 preset's predicted time over the measured one (above 1: the
model is slower than the GPU was) by the size of the product (its FLOPs), median and range, and
separately the products with few output tiles for the SMs (the tile model's single partial wave:
what split-K or stream-K kernels spread over more SMs).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import statistics
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

DTYPE = "bf16xbf16->bf16"
# FLOPs per product: the classes the report is split into (upper bounds)
CLASSES = ((1e9, "under 1 GFLOP"), (1e10, "1-10 GFLOP"), (1e11, "10-100 GFLOP"),
           (float("inf"), "100 GFLOP and more"))
_ENTRY = re.compile(r"entries\s*\{\s*b:\s*(\d+)\s*m:\s*(\d+)\s*n:\s*(\d+)\s*k:\s*(\d+)\s*"
                    r"((?:flops\s*\{[^}]*\}\s*)+)\}")
_FLOPS = re.compile(r'flops\s*\{\s*key:\s*"([^"]+)"\s*value:\s*(\d+)\s*\}')
# a device's section opens with its key and a message value ("sm_90", "sm_100_B200", "gfx942"
# of AMD's GPUs...); a flops entry's key takes a number. A section ends where the next device's
# begins, whatever the device: the table holds AMD GPUs after the H100 since mid-2026
_DEVICE = re.compile(r'key:\s*"([^"]+)"\s*value\s*\{')


def read_table(text: str, device: str = "sm_90", dtype: str = DTYPE) -> list[dict]:
    """The ``device`` section's entries of ``dtype``: b, m, n, k and the measured FLOP/s.
    ValueError when the file has no such section (not XLA's table, or another version)."""
    starts = [(m.start(), m.group(1)) for m in _DEVICE.finditer(text)]
    section = next(((pos, starts[i + 1][0] if i + 1 < len(starts) else len(text))
                    for i, (pos, key) in enumerate(starts) if key == device), None)
    if section is None:
        found = ", ".join(sorted({k for _, k in starts})) or "none"
        raise ValueError(f"no {device!r} section (found: {found})")
    rows = []
    for e in _ENTRY.finditer(text, *section):
        values = dict(_FLOPS.findall(e.group(5)))
        if dtype in values:
            b, m, n, k = (int(e.group(i)) for i in range(1, 5))
            rows.append({"b": b, "m": m, "n": n, "k": k, "flops_per_s": int(values[dtype])})
    if not rows:
        raise ValueError(f"the {device!r} section has no {dtype} entries")
    return rows


def compare(rows: list[dict], gpu_key: str = "h100") -> list[dict]:
    """Each entry with the preset's predicted and the measured kernel time (ns)."""
    from simulator.workload.kernel_presets import kernel_preset
    from simulator.workload.kernels import gemm, price

    gpu = kernel_preset(gpu_key)
    out = []
    for r in rows:
        flops = 2 * r["b"] * r["m"] * r["n"] * r["k"]
        measured = flops / r["flops_per_s"] * 1e9
        p = price(gemm("xla", "fwd", r["m"], r["n"], r["k"], batch=r["b"]), gpu)
        out.append({**r, "flops": flops, "measured_ns": measured, "predicted_ns": p.ns,
                    "ratio": p.ns / measured, "bound": p.bound, "tiles": p.tiles,
                    "waves": p.waves, "few_tiles": p.bound == "math" and p.tiles < gpu.sms})
    return out


def summary(rows: list[dict]) -> dict:
    def stats(group: list[dict]) -> dict | None:
        if not group:
            return None
        r = sorted(x["ratio"] for x in group)
        return {"products": len(r), "median": statistics.median(r), "min": r[0],
                "max": r[-1], "median_measured_ns": statistics.median(
                    x["measured_ns"] for x in group)}

    full = [r for r in rows if not r["few_tiles"]]
    out, lower = {}, 0.0
    for upper, name in CLASSES:
        out[name] = stats([r for r in full if lower <= r["flops"] < upper])
        lower = upper
    out["fewer output tiles than SMs"] = stats([r for r in rows if r["few_tiles"]])
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--xla-table", type=Path, required=True,
                    help="xla/service/gpu/model/matmul_interpolator_data.h of an XLA checkout")
    ap.add_argument("--json", type=Path, default=None, help="write the comparison here")
    ap.add_argument("--table-source", default="",
                    help="where the table comes from (repository and commit), for the record")
    args = ap.parse_args(argv)
    try:
        text = args.xla_table.read_text()
        rows = compare(read_table(text))
    except (OSError, ValueError) as err:
        print(f"bench_gemm_xla_table: {args.xla_table}: {err}", file=sys.stderr)
        return 2
    s = summary(rows)
    print(f"{len(rows)} BF16 products of XLA's sm_90 table against the h100 preset "
          "(predicted / measured kernel time):")
    for name, st in s.items():
        if st is not None:
            print(f"  {name:28s} {st['products']:4d} products: median {st['median']:.2f} "
                  f"({st['min']:.2f} to {st['max']:.2f}); measured median "
                  f"{st['median_measured_ns'] / 1e3:.1f} us")
    if args.json is not None:
        args.json.write_text(json.dumps({
            "source": "OpenXLA xla/service/gpu/model/matmul_interpolator_data.h, sm_90, "
                      + DTYPE, "table_source": args.table_source,
            "table_sha256": hashlib.sha256(text.encode()).hexdigest(),
            "gpu_preset": "h100", "summary": s,
            "products": [{k: r[k] for k in ("b", "m", "n", "k", "predicted_ns", "ratio",
                                           "bound", "tiles", "waves")} for r in rows]},
            indent=1) + "\n")
        print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
