"""``pipesim inspect WORKLOAD``: what pipesim reads from a workload file, before simulating it.

Shows the header (and which keys were defaulted), the layout (model, or an AICB stage trace and
how its block was found: line numbers of the iteration rows, the microbatch repeats, the head,
the transformer layers and the tail), how the rows map onto pipeline chunks, and every warning.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import click

from ...errors import ConfigError
from ...metrics.types import SCHEMA_VERSION
from ...schema import schema_of
from ...workload.aicb import NotAicb, chunk_layers, recover_stage
from ...workload.model import Layer, Workload
from ...workload.parser import load_workload
from ...workload.partition import partition
from ..jsonout import json_option, schema_option, write_json


def inspect_workload(workload: Workload, pp: int | None = None,
                     vpp: int | None = None) -> dict[str, Any]:
    """The facts ``pipesim inspect`` prints, as a JSON-able dict.

    ``pp``/``vpp`` default to the header's (an AICB file's ``vpp:`` is layers per stage, so one
    chunk per rank there); the chunk table uses loop placement (chunk c on rank c mod pp).
    """

    h = workload.header
    P = pp or h.pp
    V = vpp or (h.vpp if workload.layout == "model" else 1)
    out: dict[str, Any] = {
        "path": workload.path,
        "policy": h.policy,
        "rows": len(workload.layers),
        "header": {"tp": h.tp, "ep": h.ep, "pp": h.pp, "vpp": h.vpp, "ga": h.ga,
                   "all_gpus": h.all_gpus, "dp": h.dp, "pp_comm": h.pp_comm,
                   "checkpoints": list(h.checkpoints),
                   "checkpoint_initiates": list(h.checkpoint_initiates)},
        "defaults_used": list(h.defaults_used),
        "unknown_keys": [list(k) for k in h.unknown_keys],
        "layout": workload.layout,
        "layout_detected": workload.layout_detected,
        "aicb": workload.aicb.to_dict() if workload.aicb is not None else None,
        "not_aicb": None,
        "chunks": [],
        "iteration_rows": 0,
        "pp": P,
        "vpp": V,
        "warnings": list(workload.warnings),
    }
    if workload.layout == "model" and "ga" not in h.defaults_used:
        try:
            recover_stage(workload)
            out["not_aicb"] = (f"ga: {h.ga} with a block of {h.vpp} layer(s) expected; "
                               "the rows were read as the whole model")
        except NotAicb as err:
            out["not_aicb"] = err.found

    part = partition(workload, P * V)
    out["iteration_rows"] = len(part.iteration_layers)
    layer_ranges = None
    if workload.aicb is not None:
        layer_ranges = chunk_layers(workload.aicb, P * V, workload.path)
    for c, rows in enumerate(part.chunks):
        entry = {
            "chunk": c,
            "rank": c % P,
            "rows": len(rows),
            "model_rows": list(part.layer_range(c)),
            "lines": _lines(rows),
            "names": _name_runs(rows),
        }
        if layer_ranges is not None:
            entry["names"] = _aicb_chunk(workload.aicb, c, len(part.chunks), layer_ranges[c])
            entry["transformer_layers"] = list(layer_ranges[c])
        out["chunks"].append(entry)
    return out


def _aicb_chunk(st, c: int, n: int, layers: tuple[int, int]) -> str:
    parts = []
    if c == 0 and st.head:
        parts.append("head (" + ", ".join(r.name for r in st.head) + ")")
    a, b = layers
    if b > a:
        parts.append(f"transformer layers {a}-{b - 1} of {st.model_layers}")
    if c == n - 1 and st.tail:
        parts.append("tail (" + ", ".join(r.name for r in st.tail) + ")")
    return " + ".join(parts) or "no rows"


def _lines(rows: tuple[Layer, ...]) -> list[int]:
    return [min(r.line for r in rows), max(r.line for r in rows)] if rows else []


def _name_runs(rows: tuple[Layer, ...], limit: int = 6) -> str:
    """``embedding_layer, 20 x [attention_column..mlp_row], final_column``-style summary."""
    names = [r.name for r in rows]
    parts: list[str] = []
    i = 0
    while i < len(names):
        best = (1, 1)  # (unit length, repeats)
        for p in range(1, min(16, (len(names) - i) // 2) + 1):
            k = 1
            while names[i + k * p:i + (k + 1) * p] == names[i:i + p]:
                k += 1
            if k > 1 and k * p > best[0] * best[1]:
                best = (p, k)
        p, k = best
        if k > 1:
            unit = names[i] if p == 1 else f"[{names[i]}..{names[i + p - 1]}]"
            parts.append(f"{k} x {unit}")
        else:
            parts.append(names[i])
        i += p * k
    if len(parts) > limit:
        parts = parts[:3] + [f"... ({len(parts) - 5} more)"] + parts[-2:]
    return ", ".join(parts)


def _span(rows: list[dict]) -> str:
    if not rows:
        return "none"
    names = ", ".join(r["name"] for r in rows)
    return f"lines {rows[0]['line']}-{rows[-1]['line']} ({names})"


def render(d: dict[str, Any]) -> str:
    h = d["header"]
    lines = [
        f"pipesim inspect: {d['path']}",
        f"  policy {d['policy']}, {d['rows']} layer rows",
        f"  header: tp {h['tp']}, ep {h['ep']}, pp {h['pp']}, vpp {h['vpp']}, ga {h['ga']}, "
        f"all_gpus {h['all_gpus']} (dp {h['dp']}), pp_comm {h['pp_comm']} bytes",
    ]
    if h["checkpoints"] or h["checkpoint_initiates"]:
        lines.append(f"  recompute: checkpoints {h['checkpoints']}, initiates "
                     f"{h['checkpoint_initiates']}")
    lines.append("  header defaults used: " + (", ".join(d["defaults_used"]) or "none"))
    if d["layout_detected"]:
        lines.append(f"  layout decided from the rows (warned in a run): {d['layout_detected']}")
    a = d["aicb"]
    if a is None:
        lines.append("  layout: model (the rows are the whole model, once)")
        if d["not_aicb"]:
            lines.append(f"    not the AICB stage layout (ga: {h['ga']}): {d['not_aicb']}")
    else:
        how = (f"{a['repeats']} repeats of a block of {a['block_rows']} rows" if
               a["found_by"] == "repetition" else
               f"one block of {a['block_rows']} rows between AICB-named iteration rows (ga 1)")
        reps = a["repeat_lines"]
        shown = ", ".join(f"{x}-{y}" for x, y in reps[:3])
        if len(reps) > 4:
            shown += f", ..., {reps[-1][0]}-{reps[-1][1]}"
        elif len(reps) == 4:
            shown += f", {reps[3][0]}-{reps[3][1]}"
        layer_lines = a["layer_lines"]
        sizes = sorted(set(a["layer_rows"]))
        lines += [
            f"  layout: aicb (one stage's trace over ga microbatches; found by {how})",
            f"    iteration rows before: {_span(a['iteration_rows_before'])}",
            f"    microbatch repeats: lines {shown}",
            f"    iteration rows after:  {_span(a['iteration_rows_after'])}",
            f"    block head (first stage): {_span(a['head'])}",
            (f"    transformer layers: {a['layers_per_stage']} per stage, lines "
             f"{layer_lines[0][0]}-{layer_lines[-1][1]} ({'/'.join(map(str, sizes))} rows "
             "per layer)") if layer_lines else "    transformer layers: none",
            f"    block tail (last stage): {_span(a['tail'])}",
            f"    model: {a['stages_in_model']} stage(s) x {a['layers_per_stage']} layer(s) = "
            f"{a['model_layers']} transformer layers",
        ]
    lines.append("")
    lines.append(f"  pipeline: pp {d['pp']} x vpp {d['vpp']} = {len(d['chunks'])} chunk(s) "
                 "(chunk c on rank c mod pp)")
    for c in d["chunks"]:
        lo, hi = c["model_rows"]
        where = f"lines {c['lines'][0]}-{c['lines'][1]}" if c["lines"] else "no rows"
        lines.append(f"    chunk {c['chunk']} (rank {c['rank']}): {c['rows']} rows "
                     f"[{lo}-{hi}], {where}: {c['names']}")
    if d["iteration_rows"]:
        lines.append(f"    every rank, once per iteration after its last microbatch: "
                     f"{d['iteration_rows']} iteration rows")
    for w in d["warnings"]:
        lines.append(f"  warning: {w}")
    return "\n".join(lines)


@dataclass(frozen=True)
class InspectChunk:
    """One model chunk of the chunk table (loop placement)."""

    chunk: int = field(metadata={"help": "chunk (virtual stage) index"})
    rank: int = field(metadata={"help": "rank it runs on (chunk mod pp)"})
    rows: int = field(metadata={"help": "rows it runs per microbatch"})
    model_rows: tuple[int, int] = field(metadata={"help": "[first, last] model row index"})
    lines: tuple[int, int] | None = field(metadata={"help": "[first, last] file line"})
    names: str = field(metadata={"help": "its rows' names, runs folded"})
    transformer_layers: tuple[int, int] | None = field(
        default=None, metadata={"help": "AICB layout: [first, last) transformer layer"})


@dataclass(frozen=True)
class InspectJson:
    """``pipesim inspect --json``: what pipesim reads from a workload file."""

    schema_version: str = field(metadata={"help": "version of this JSON's shape"})
    path: str = field(metadata={"help": "the file"})
    policy: str = field(metadata={"help": "parallelism policy (header token 0)"})
    rows: int = field(metadata={"help": "layer rows"})
    header: dict[str, Any] = field(metadata={"help": "the header's values (defaults filled)"})
    defaults_used: tuple[str, ...] = field(metadata={"help": "header keys absent, defaulted"})
    unknown_keys: tuple[tuple[str, str], ...] = field(metadata={"help": "kept, not used"})
    layout: str = field(metadata={"help": "model or aicb"})
    layout_detected: str = field(metadata={
        "help": "how the rows decided the layout (a run's layout_detected warning); empty when "
                "the header's layout: or --layout says"})
    aicb: dict[str, Any] | None = field(metadata={"help": "what was recovered (AICB layout)"})
    not_aicb: str | None = field(metadata={"help": "why a file with ga: is not a stage trace"})
    chunks: tuple[InspectChunk, ...] = field(metadata={"help": "the chunk table"})
    iteration_rows: int = field(metadata={"help": "rows run once per iteration"})
    pp: int = field(metadata={"help": "pipeline ranks of the chunk table"})
    vpp: int = field(metadata={"help": "chunks per rank of the chunk table"})
    warnings: tuple[str, ...] = field(metadata={"help": "what the parser noted"})
    ops: dict[str, Any] | None = field(
        default=None, metadata={"help": "--ops: each distinct row's kernels (name, phase, "
                                        "kind, shape, tile, waves, FLOPs, bytes, bound, ns) "
                                        "and the rows whose columns are not their sum"})


def _schema() -> dict:
    return schema_of(InspectJson, "pipesim inspect --json")


@click.command("inspect")
@click.argument("workload", type=click.Path(dir_okay=False))
@click.option("--layout", type=click.Choice(["auto", "model", "aicb"]), default="auto",
              show_default=True, help="How to read the rows: the whole model once, or an AICB "
              "stage trace.")
@click.option("--pp", type=int, default=None, help="Pipeline stages for the chunk table "
              "(default: the header's pp).")
@click.option("--vpp", type=int, default=None, help="Chunks per rank for the chunk table "
              "(default: the header's vpp in the model layout, 1 in the AICB layout).")
@click.option("--ops", "ops_path", type=click.Path(dir_okay=False), default=None,
              help="A per-op breakdown written by `pipesim generate --ops`: show each row's "
                   "kernels and check the file's rows still hold their sums.")
@json_option("the facts")
@schema_option(_schema)
def command(workload, layout, pp, vpp, ops_path, json_dest):
    """Explain what pipesim reads from WORKLOAD: header, layout, recovered block, chunks."""

    for name, value in (("pp", pp), ("vpp", vpp)):
        if value is not None and value < 1:
            raise ConfigError(f"--{name}: expected a positive integer, got {value}")
    wl = load_workload(workload, layout=layout)
    data = inspect_workload(wl, pp, vpp)
    ops_lines = None
    if ops_path is not None:
        from ...workload import op_breakdown

        ops = op_breakdown.load(ops_path)
        problems = op_breakdown.check_rows(ops, wl.layers)
        data["ops"] = {**ops, "mismatches": problems}
        ops_lines = op_breakdown.render(ops, problems)
    if json_dest is not None:
        write_json({**data, "schema_version": SCHEMA_VERSION}, json_dest)
    if json_dest != "-":
        click.echo(render(data))
        if ops_lines:
            click.echo("\n".join(ops_lines))
