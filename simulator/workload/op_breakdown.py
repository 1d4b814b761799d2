"""The per-op breakdown of a generated file's rows: each distinct row's kernels with their
shape, bytes, FLOPs, what bounds them and their time on the GPU preset (``pipesim generate
--ops FILE`` writes it as JSON; ``pipesim inspect WORKLOAD --ops FILE`` shows it beside the
file's rows and checks that each row's compute columns still hold the sum of its ops)."""

from __future__ import annotations

import json

from ..errors import ConfigError
from .kernel_presets import kernel_preset
from .kernels import PHASES, launched, row_times

FORMAT = "pipesim-ops-1"


def breakdown(rows, gpu_key: str) -> dict:
    """``rows`` (the generator's RowSpecs, file order) as the breakdown's JSON-able dict: each
    distinct row (name and ops) once, with the file lines it is written on counted."""
    gpu = kernel_preset(gpu_key)
    out: list[dict] = []
    seen: dict = {}
    for r in rows:
        key = (r.name, r.ops)
        if key in seen:
            seen[key]["count"] += 1
            continue
        (f, i, w), priced = row_times(r.ops, gpu)
        kernels = [sum(1 for p in priced if p.op.phase == ph and launched(p))
                   for ph in PHASES]
        entry = {"row": r.name, "count": 1, "fwd_ns": f, "ig_ns": i, "wg_ns": w,
                 "kernels": kernels, "kernel_gap_ns": gpu.kernel_gap_ns, "ops": [
            {"name": p.op.name, "phase": p.op.phase, "kind": p.op.kind,
             "shape": [p.op.m, p.op.n, p.op.k, p.op.batch] if p.op.kind == "gemm" else None,
             "seq": p.op.seq if p.op.kind == "flash" else None,
             "tile": list(p.tile) if p.tile else None, "tiles": p.tiles, "waves": p.waves,
             "flops": p.flops, "bytes": p.nbytes, "bound": p.bound, "ns": p.ns}
            for p in priced]}
        seen[key] = entry
        out.append(entry)
    return {"format": FORMAT, "gpu": gpu_key, "rows": out}


def load(path: str) -> dict:
    try:
        with open(path) as fh:
            data = json.load(fh)
    except OSError as err:
        raise ConfigError(f"--ops: cannot read {path}: {err.strerror or err}") from None
    except ValueError as err:
        raise ConfigError(f"--ops: {path} is not JSON ({err})") from None
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise ConfigError(f"--ops: {path} is not a per-op breakdown written by pipesim "
                          f"generate --ops (expected format {FORMAT!r})")
    return data


def check_rows(data: dict, layers) -> list[str]:
    """Rows of the file whose compute columns are not the sum of the breakdown's ops for a row
    of that name (the file was edited, or the breakdown belongs to another file)."""
    by_name: dict[str, list[tuple[int, int, int]]] = {}
    for e in data["rows"]:
        by_name.setdefault(e["row"], []).append((e["fwd_ns"], e["ig_ns"], e["wg_ns"]))
    bad = []
    for layer in layers:
        sums = by_name.get(layer.name)
        cols = (layer.fwd_compute, layer.ig_compute, layer.wg_compute)
        if sums is None:
            bad.append(f"line {layer.line}: row {layer.name} has no ops in the breakdown")
        elif cols not in sums:
            bad.append(f"line {layer.line}: row {layer.name}'s compute {cols} is not the sum "
                       f"of its ops {sums[0]}")
    return bad


def render(data: dict, problems: list[str], limit: int = 5) -> list[str]:
    lines = [f"  per-op breakdown ({data['gpu']}; ns per microbatch; F / IG / WG = forward, "
             "input grad, weight grad):"]
    for e in data["rows"]:
        lines.append(f"    {e['row']} (x{e['count']}): F {e['fwd_ns']}, IG {e['ig_ns']}, "
                     f"WG {e['wg_ns']}" + (
                         f" (with {' / '.join(map(str, e['kernels']))} kernels' gaps of "
                         f"{e['kernel_gap_ns']} ns)" if e.get("kernel_gap_ns") and any(e["kernels"]) else ""))
        for o in e["ops"]:
            what = ""
            if o["kind"] == "gemm":
                m, n, k, b = o["shape"]
                what = f"{m}x{n}x{k}" + (f" x{b}" if b > 1 else "")
                what += f", {o['tiles']} tiles of {o['tile'][0]}x{o['tile'][1]} in " \
                        f"{o['waves']} waves"
            elif o["kind"] == "flash":
                # the kernel's rate depends on its sequence length (the preset's points)
                what = f"{o['flops']:,} FLOPs" + (f", sequence {o['seq']}" if o.get("seq")
                                                  else "")
            else:
                what = f"{o['bytes']:,} B"
            lines.append(f"      {o['phase']:>3} {o['name']:<32} {o['ns']:>12} ns  "
                         f"{o['bound']:<6} {what}")
    if problems:
        shown = problems[:limit]
        lines += [f"  warning: {p}" for p in shown]
        if len(problems) > limit:
            lines.append(f"  warning: ... and {len(problems) - limit} more rows")
    else:
        lines.append("  every row's compute columns are the sum of its ops")
    return lines
