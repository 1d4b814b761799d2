"""Write docs/validation.md: SimAI's analytical pipeline bubble beside the simulated one, and
pipesim's iteration times against torch.distributed.pipelining (calibrated and not).

For the real files with pp > 1 (SimAI's workload_analytical.txt and workload_gpt13b_128g.txt, and
the DeepSeek-16B file), under 1f1b, interleaved-1f1b (v = 2) and zb-h1 (those registered when
this runs), on the built-in default system. Run from the repository root:

    python3 docs/make_validation.py            # writes docs/validation.md
    python3 docs/make_validation.py --check    # exit 1 if docs/validation.md is out of date

The files are read from ../shared/workloads-real/ beside the checkout (real files are never
copied into this repository; SOURCES.md there gives each one's repository and commit). The fidelity section reads committed
data only: the recorded traces in tests/data/traces/ (calibrated here, ~5 s) and the harness runs
under benchmarks/fidelity/results/ that carry calibrations (their measured medians and the
calibrations they fitted from their traces), newest first; FIDELITY_RUN is the newest.
"""

from __future__ import annotations

import argparse
import collections
import re
import sys
from pathlib import Path
from statistics import mean, median

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from simulator import simulate  # noqa: E402
from simulator.metrics import (SIMAI_BUBBLE_FORMULA, pipeline_bubble,  # noqa: E402
                                simai_pipeline_terms)
from simulator.errors import ConfigError  # noqa: E402
from simulator.schedules import names  # noqa: E402
from simulator.system.collectives import collective_time_ns  # noqa: E402
from simulator.system.config import SystemConfig  # noqa: E402
from simulator.workload.parser import load_workload  # noqa: E402

FOLDERS = (REPO.parent / "shared" / "workloads-real",)
FILES = ("workload_gpt13b_128g.txt", "workload_analytical.txt",
         "DeepSeek-16B-tp2-pp2-dp2-ep4-g32-mpdeptip.txt")
SCHEDULES = (("1f1b", None), ("interleaved-1f1b", 2), ("zb-h1", None))
OUT = REPO / "docs" / "validation.md"


def ms(ns: float) -> str:
    return f"{ns / 1e6:.3f}"


def find(name: str) -> Path | None:
    for folder in FOLDERS:
        if (folder / name).is_file():
            return folder / name
    return None


def rows_ns(rows, header, system: SystemConfig) -> float:
    """Compute plus blocking (forward, input-gradient) collectives of ``rows``, one microbatch."""
    return sum((r.fwd_compute + r.ig_compute + r.wg_compute) * system.gpu.compute_scale
               + collective_time_ns(r.fwd_comm, header, system, forward=True)
               + collective_time_ns(r.ig_comm, header, system) for r in rows)


def stage_costs(result) -> list[tuple[float, float]]:
    """Per rank: mean forward and mean backward (B, or I + W) action time per microbatch."""
    out = []
    for r in range(result.schedule.pp):
        acts = [a for a in result.records.actions if a.rank == r and a.iteration == 0]
        f = [a.end - a.start for a in acts if a.kind == "F"]
        b = sum(a.end - a.start for a in acts if a.kind != "F")
        out.append((sum(f) / len(f) * 1.0 if f else 0.0,
                    b / max(1, len({(a.stage, a.microbatch) for a in acts if a.kind == "F"}))))
    return out


def file_section(name: str, path: Path, system: SystemConfig, registered: list[str]) -> tuple:
    wl = load_workload(path)
    h = wl.header
    st = wl.aicb
    rows, notes = [], []
    runs = {}
    for sched, v in SCHEDULES:
        if sched not in registered:
            notes.append(f"`{sched}` is not registered in this build: no row.")
            continue
        try:
            result = simulate(wl, sched, system, vpp=v)
        except ConfigError as err:
            notes.append(f"`{sched}` refused P={h.pp}, M={h.ga}: {err}")
            continue
        runs[sched] = result
        s = result.schedule
        written = simai_pipeline_terms(wl, system)
        at_v = simai_pipeline_terms(wl, system, vpp=s.vpp)
        b = pipeline_bubble(result.records, result.schedule)
        rows.append(
            f"| `{name}` | {sched} | {s.pp} | {s.microbatches} | {s.vpp} | "
            f"{ms(written['bubble_ns'])} (vpp {h.vpp}) | {ms(at_v['bubble_ns'])} | "
            f"{ms(b['mean_ns'])} ({ms(b['min_ns'])}–{ms(b['max_ns'])}) | "
            f"{b['mean_ns'] / at_v['bubble_ns']:.2f} | {ms(written['iteration_ns'])} | "
            f"{ms(at_v['iteration_ns'])} | {ms(result.makespan_ns)} |")
    return rows, notes, runs, wl


def explain(name: str, wl, runs: dict, system: SystemConfig) -> list[str]:
    h, st = wl.header, wl.aicb
    terms = simai_pipeline_terms(wl, system)
    per_mb = terms["pre_bubble_ns"] / h.ga
    iteration_share = rows_ns(st.pre + st.post, h, system)
    out = [f"### `{name}`", ""]
    out.append(
        f"AICB stage trace: {st.repeats} repeats of a block of {st.block_rows} rows, "
        f"{st.layers_per_stage} transformer layers per stage, head "
        f"`{', '.join(r.name for r in st.head)}` on the first stage, tail "
        f"`{', '.join(r.name for r in st.tail) or '-'}` on the last, "
        f"{len(st.pre) + len(st.post)} iteration rows; header pp {h.pp}, ga {h.ga}, vpp {h.vpp}, "
        f"pp_comm {h.pp_comm} B.")
    out.append("")
    bullets = []
    if h.vpp != 1:
        bullets.append(
            f"**vpp.** SimAI divides by ga x vpp with vpp = {h.vpp}, which AICB fills with layers "
            f"per stage, not virtual stages: its bubble as written is {h.vpp}x smaller than its "
            "own formula with the schedule's real chunk count (the \"at the schedule's v\" "
            "column).")
    if "1f1b" in runs:
        r = runs["1f1b"]
        costs = stage_costs(r)
        fb = [f + b for f, b in costs]
        bub = pipeline_bubble(r.records, r.schedule)
        bullets.append(
            f"**Unequal stages.** SimAI charges every rank {ms(per_mb)} ms per microbatch (all "
            "rows but `embedding_layer`, including "
            f"{ms(iteration_share / h.ga)} ms of iteration rows spread over the ga microbatches). "
            f"The simulated stages take {ms(min(fb))}–{ms(max(fb))} ms (F+B per microbatch: "
            f"first stage {ms(fb[0])}, last {ms(fb[-1])}), because the first stage alone runs "
            f"the head ({ms(rows_ns(st.head, h, system))} ms per microbatch) and the last alone "
            f"the tail ({ms(rows_ns(st.tail, h, system))} ms). Under 1F1B the span is set by "
            "the slowest stage, and faster ranks wait for it at every steady step, so the "
            f"per-rank bubble ranges {ms(bub['min_ns'])}–{ms(bub['max_ns'])} ms.")
    transfer = system.links.transfer_ns(h.pp_comm)
    bullets.append(
        f"**Point-to-point transfers.** Every stage boundary carries pp_comm = {h.pp_comm} B per "
        f"microbatch and direction ({ms(transfer)} ms on the default 400 Gb/s, 2 µs link); the "
        "transfers on the warm-up and cool-down path add to the simulated bubble. SimAI's PP "
        "term is 0 at its default pp_overlap_ratio = 1 (it would be "
        f"{ms(terms['pp_comm_unoverlapped_ns'])} ms at ratio 0).")
    if "zb-h1" in runs and "1f1b" in runs:
        w = [a.end - a.start for a in runs["zb-h1"].records.actions
             if a.kind == "W" and a.iteration == 0]
        gain = pipeline_bubble(runs["1f1b"].records, runs["1f1b"].schedule)["mean_ns"] \
            - pipeline_bubble(runs["zb-h1"].records, runs["zb-h1"].schedule)["mean_ns"]
        text = (f"**ZB-H1.** SimAI's formula does not depend on the schedule. The simulation "
                f"splits B into I and W and defers W into the cool-down; with W = "
                f"{ms(mean(w) if w else 0)} ms per microbatch and stage (mean) that removes "
                f"{ms(gain)} ms of mean bubble here.")
        if abs(gain) < 1e3:
            text += (" The file's weight-gradient compute is (almost) zero (AICB without AIOB "
                     "writes 1 ns everywhere), so ZB-H1 runs like 1F1B.")
        bullets.append(text)
    if "interleaved-1f1b" in runs:
        bullets.append(
            "**Interleaved.** With v = 2 chunks per rank the warm-up is (P-1) chunk-sized "
            "steps instead of (P-1) stage-sized ones, so the bubble roughly halves, as the "
            "formula at v = 2 says; the remaining gap is again the unequal first and last "
            "chunks and the doubled number of stage-boundary transfers.")
    out += [f"- {b}" for b in bullets]
    out.append("")
    return out


def build() -> str:
    system = SystemConfig()
    registered = names()
    lines = [
        "# Validation: SimAI's analytical pipeline bubble beside the simulated one",
        "",
        "_Generated by `python3 docs/make_validation.py`; do not edit by hand._",
        "",
        "SimAI does not simulate pipeline parallelism. It runs one representative GPU through the "
        "file's rows and then adds a closed-form bubble (`Layer::report` in SimAI's "
        "`astra-sim-alibabacloud/astra-sim/workload/Layer.cc`, analytical mode):",
        "",
        f"    bubble = {SIMAI_BUBBLE_FORMULA}",
        "    Expose_PP_comm = 2 x vpp x ga x pp_comm / pp_bandwidth x (1 - pp_overlap_ratio)"
        "   (ratio 1 by default: 0)",
        "",
        "with pp, ga, vpp from the header. pipesim recovers the per-microbatch block of the same "
        "AICB file, gives it to every stage (embedding rows on the first, final rows on the last, "
        "iteration rows at the end of the iteration on every stage) and simulates a real "
        "pipeline with `ga` microbatches. `simulator.metrics.simai_pipeline_terms` computes "
        "SimAI's terms with the same collective cost model as the simulation, so the columns "
        "differ only in how the pipeline is accounted for.",
        "",
        "The files are SimAI's own: `workload_analytical.txt` from SimAI's `example/` folder "
        "(aliyun/SimAI, commit cef83f9d), `workload_gpt13b_128g.txt` and the DeepSeek-16B file "
        "from SimAI's pull-request branches (commits 120db6a2 and 51bf5478), read as they are "
        "(not copied into this repository).",
        "",
        "Columns (times in ms, one iteration, the built-in default system: TP rings 2400 Gb/s, "
        "other rings and point-to-point links 400 Gb/s):",
        "",
        "- **SimAI as written**: SimAI's bubble with the header's vpp (an AICB file's vpp is "
        "layers per stage).",
        "- **SimAI at the schedule's v**: the same formula with vpp = the schedule's chunks per "
        "rank (1 for 1f1b and zb-h1, 2 for interleaved-1f1b).",
        "- **simulated bubble**: per rank, the pipeline phase of the iteration (start to the end "
        "of the last compute action on any rank) minus the rank's own compute; mean over ranks "
        "(min–max). Iteration rows and DP collectives after the pipeline phase are not counted "
        "(`simulator.metrics.pipeline_bubble`).",
        "- **iteration**: SimAI's total (compute + exposed comm + bubble + PP term; as written, "
        "and with the bubble at the schedule's v) and the simulated iteration time (makespan, "
        "iteration rows and DP collectives included).",
        "",
        "| file | schedule | P | M | v | SimAI as written | SimAI at the schedule's v | "
        "simulated bubble mean (min–max) | simulated / SimAI at v | SimAI iteration as written | "
        "SimAI iteration at v | simulated iteration |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    sections: list[str] = []
    missing = []
    for name in FILES:
        path = find(name)
        if path is None:
            missing.append(name)
            continue
        rows, notes, runs, wl = file_section(name, path, system, registered)
        lines += rows
        sections += explain(name, wl, runs, system)
        sections += [f"- {n}" for n in notes] + ([""] if notes else [])
    lines.append("")
    if missing:
        lines += [f"Not found (not in ../shared/workloads-real): "
                  f"{', '.join(missing)}.", ""]
    table_rows = [ln for ln in lines if ln.startswith("| `")]
    lines += ["## Why the numbers differ", ""] + sections
    lines += changed_by_honest_defaults()
    fidelity = fidelity_section()
    memory = memory_section()
    astra = astrasim_section()
    published = published_runs_section()
    heldout = heldout_runs_section()
    lines += published + heldout + gemm_kernels_section() + torchtitan_memory_section() \
        + megatron_launches_section() + fidelity + memory + astra
    lines += [
        "## Reading the table",
        "",
        "- Where the stages are equal and the transfers small (SimAI's formula at the "
        "schedule's v against 1f1b on `workload_analytical.txt`), the two agree closely: the "
        "formula is 1F1B's (P-1)(F+B) bubble for a representative stage.",
        "- SimAI *as written* on AICB files is not a pipeline bubble of any real schedule: it "
        "divides by the layers per stage.",
        "- The simulation additionally shows what the formula cannot: the per-rank spread "
        "(first and last stages differ), the transfers between stages, and the schedule "
        "(ZB-H1 fills the cool-down with weight gradients, interleaving shortens warm-up).",
        "",
    ]
    return "\n".join(lines[:4] + where_things_stand(table_rows, fidelity, memory, astra,
                                                     published, heldout) + lines[4:])


def where_things_stand(table_rows: list[str], fidelity: list[str], memory: list[str],
                       astra: list[str] = (), published: list[str] = (),
                       heldout: list[str] = ()) -> list[str]:
    """The page's opening: one line per comparison, taken from the sections below."""
    out = ["## Where things stand", ""]
    bullet = next((ln for ln in published if ln.startswith("- **")), None)
    if bullet is not None:
        out.append("- **Against published GPU runs** (from launch settings alone): " + bullet[2:])
    bullet = next((ln for ln in heldout if ln.startswith("- **")), None)
    if bullet is not None:
        out.append("- **Against held-out published runs** (zero-bubble and interleaved "
                   "schedules, peak memory, Megatron-Core's H100 weak scaling, torchtitan's FSDP2): "
                   + bullet[2:])
    ratios = []
    for row in table_rows:
        cells = [c.strip() for c in row.strip().strip("|").split("|")]
        ratios.append((float(cells[8]), cells[0], cells[1]))
    if ratios:
        lo, hi = min(ratios), max(ratios)
        out.append(f"- **Against SimAI's analytical bubble** ({len(ratios)} runs: "
                   f"{len({r[1] for r in ratios})} of SimAI's AICB files x "
                   f"{len({r[2] for r in ratios})} schedules): the simulated bubble is "
                   f"{lo[0]:.2f}x ({lo[1]}, {lo[2]}) to {hi[0]:.2f}x ({hi[1]}, {hi[2]}) SimAI's "
                   "formula at the schedule's own v. As written, SimAI divides by the header's "
                   "vpp, which AICB fills with layers per stage: its bubble is that many times "
                   "smaller than its own formula. The formula cannot show unequal stages, "
                   "transfers or the schedule; the table and the reasons are below.")
    if "### Where this stands" in fidelity:
        i = fidelity.index("### Where this stands") + 2
        out += [f"- **Against torch.distributed.pipelining** (iteration time, CPU/gloo): "
                f"{fidelity[i][2].lower()}{fidelity[i][3:]}", f"- {fidelity[i + 1][2:]}"]
    bullet = next((ln for ln in memory if ln.startswith("- **")), None)
    if bullet is not None:
        out.append("- **Memory against torch's allocator** (per-rank peak): " + bullet[2:])
    out += ["- **Memory from the model's shape alone, " + ln[len("- **Shape only, "):]
            for ln in memory if ln.startswith("- **Shape only, ")]
    bullet = next((ln for ln in astra if ln.startswith("- **")), None)
    if bullet is not None:
        out.append("- **Against ASTRA-sim 2.0** (pipesim's Chakra exports replayed): " + bullet[2:])
    return out + [""]


def _published_summary(summary: dict) -> str:
    parts = []
    for key, name in (("kort", "Korthikanti Table 5"), ("nara", "Narayanan Table 1")):
        t = summary[key]
        if not t["runs"]:
            parts.append(f"{name}: none predicted")
            continue
        parts.append(f"{name} mean {100 * t['mean']:.1f} % / median {100 * t['median']:.1f} % "
                     f"/ worst {100 * t['worst']:.1f} % over {t['runs']} runs"
                     + (f" ({t['not_predicted']} out of memory)" if t["not_predicted"] else ""))
    tr = summary["size_trend"]
    parts.append(f"size trend {tr['ordered']} of {tr['pairs']} pairs ordered as measured")
    return "; ".join(parts)


def published_runs_section() -> list[str]:
    """pipesim against the published A100 runs of ../shared/published-runs/runs.json: the
    newest committed benchmarks/bench_published_runs.py records, before and after."""
    import json

    res = REPO / "benchmarks" / "results"
    after = sorted(res.glob("*-published-runs-after.json"))
    before = sorted(res.glob("*-published-runs-before.json"))
    if not after:
        return []
    a = json.loads(after[-1].read_text())
    b = json.loads(before[-1].read_text()) if before else None
    given = sorted(res.glob("*-published-runs-as-given.json"))
    g = json.loads(given[-1].read_text()) if given else None
    kern, flat = a["models"]["kernel"], a["models"].get("flat")
    base = b["models"]["flat"] if b else None
    out = ["## Published GPU runs: predicted from the launch settings alone", "",
           f"`python benchmarks/bench_published_runs.py` (record "
           f"`{after[-1].relative_to(REPO)}`, commit {a['commit']}"
           + (f"; before: `{before[-1].relative_to(REPO)}`, commit {b['commit']}" if b else "")
           + "): each of the 18 A100 runs of `../shared/published-runs/runs.json` generated from "
           "its shape, precision and sequence parallelism with a whole-layer `stage_layers:` "
           "split, then `pipesim run --layout model -s SCHEDULE --vpp V --recompute R --system "
           "configs/system/a100.yaml --engine evaluator` with the data parallelism the run's "
           "Megatron-LM arguments launch (`--megatron-ddp --grad-reduce-dtype fp16`: Megatron's "
           "DDP, every gradient reduced in fp16 after the backward, then the optimizer step "
           "over HBM). Nothing is tuned to these runs. "
           "Selective recompute is generated as the attention core's forward recomputed in the "
           "backward (its scores not kept) and run with `--recompute none`; before, pipesim had "
           "no selective recompute and ran those runs as none.", "",
           "- **Kernel-level compute**: " + _published_summary(kern["summary"]) + "."
           + (f" The Narayanan runs are launched as their authors' own script launches them "
              f"(`{a['corrections_file']}`: micro-batch sizes, interleaving and DDP of "
              "Megatron-LM's `examples/sc21/run_table_1.sh`); as `runs.json` gives them "
              f"(`{given[-1].relative_to(REPO)}`): "
              + _published_summary(g["models"]["kernel"]["summary"]) + "."
              if a.get("corrections_file") and g else ""),
           "- Before (one 0.50 efficiency, GEMM FLOPs only, recompute per row): "
           + (_published_summary(base["summary"]) if base else "not recorded") + ".",
           ]
    if flat:
        out.append("- The flat compute model on today's code (per-layer recompute, selective "
                   "recompute): " + _published_summary(flat["summary"]) + ".")
    out += ["", "Columns: measured (iteration time in s, or TFLOP/s per GPU by the source's "
            "FLOP formula); before; after; the simulated bubble after; the share of the "
            "predicted time that tensor- and data-parallel collectives and the optimizer step "
            "take (the run again with each free: the time saved).", "",
            "| run | measured | before | after | error after | bubble | TP comm | DP comm | "
            "step |",
            "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    base_rows = {r["id"]: r for r in base["rows"]} if base else {}

    def cell(r):
        if r is None:
            return "-"
        if r.get("predicted") is None:
            return r.get("error_text", "failed")
        return f"{r['predicted']:.2f} ({100 * r['error']:+.1f} %)"

    def pct(x):
        return "-" if x is None else f"{100 * x:.1f} %"

    for r in kern["rows"]:
        m = next(iter(r["measured"].values()))
        unit = " s" if r["id"].startswith("kort") else ""
        after_v = "-" if r.get("predicted") is None else f"{r['predicted']:.2f}"
        err = "-" if r.get("predicted") is None else f"{100 * r['error']:+.1f} %"
        out.append(f"| {r['id']} | {m}{unit} | {cell(base_rows.get(r['id']))} | {after_v} | "
                   f"{err} | {pct(r.get('bubble_ratio'))} | {pct(r.get('tp_share'))} | "
                   f"{pct(r.get('dp_share'))} | {pct(r.get('step_share'))} |")
    out += ["", "What is left, and where `runs.json`'s assumptions are questioned:", ""]
    out += [f"- {t}" for t in PUBLISHED_NOTES]
    if g:
        def band(rows):
            errs = [100 * r["error"] for r in rows
                    if r["id"].startswith("nara") and r.get("predicted") is not None]
            return f"{min(errs):+.1f} % to {max(errs):+.1f} %"
        out.append("- Narayanan's runs as their script launches them: errors from "
                   f"{band(kern['rows'])}; as `runs.json` gives them: {band(g['models']['kernel']['rows'])}. "
                   "The script's micro-batches and interleaving move the bubble and the DP "
                   "all-reduce; its code's unfused gradient accumulation moves the backward "
                   "(each weight gradient written, then added: a few per cent of the "
                   "iteration).")
    out += [""]
    return out


PUBLISHED_NOTES = (
    "A GEMM is priced at the rate a large aligned GEMM sustains on an A100 (73.7 % of the "
    "peak, the median of an 8192^3 FP16 product over seconds: mli/transformers-benchmarks), "
    "no longer at the best shape of a search (MAMF, 86 %), which made every run too fast "
    "(Korthikanti -7.5 to -17.8 %, Narayanan +16 to +26 %). The switch was made after those "
    "errors were seen, on the argument that a best-of-search maximum is the wrong quantity "
    "for a model of sustained training (the model's own definition of the fraction); the "
    "figure is the one sustained-rate measurement of an A100 GEMM found, not chosen among "
    "several, and nothing was fitted to these tables. Of the per-iteration work, Megatron's "
    "DDP prices the optimizer step's passes over HBM as Megatron-LM's code runs them "
    "(gradient norm, Adam, the master-to-model copy, the gradient buffer's zeroing; the step "
    "column: 4-6 % of the runs on one pipeline stage, about 1 % or less with many), and with "
    "--fp16 the loss scaler's unscale-and-check. The GPU's gap between kernels is the "
    "measured 1.5 us; "
    "the host's time before each action is the presets' 50 us estimate.",
    "The memory-bound kernels (norms, softmax, dropout, activations, residual adds, the "
    "loss's passes) run at the rate the same benchmark measured for a PyTorch elementwise "
    "kernel on the same A100 (a * 1.2 on 4M FP32 elements: 1.616 TB/s, 79.3 % of HBM), no "
    "longer at a read-only streaming kernel's 88 %, a bound no kernel that also writes meets. "
    "That switch too was made after the tables were seen to be fast (the held-out forwards "
    "more than the backwards), on the argument that every such kernel reads and writes; the "
    "figure is the benchmark's own, taken as printed. The A100's attention fractions "
    "(FlashAttention-2's 73 / 63 %) are still its paper's best case; a GPU at hand measures "
    "them all (issue item 8).",
    "`runs.json` assumes micro-batch 1 and no interleaving for every Narayanan run (\"not in "
    "Table 1\"). The authors' reproduction script for that table (Megatron-LM "
    "`examples/sc21/run_table_1.sh`, \"used to produce the results\") says otherwise: "
    "micro-batch 16 for 1.7B-7.5B, 8 for 18B, 4 for 39B, 2 for 76B and 145B, 1 above; "
    "interleaved 1F1B for 76B, 145B, 310B and 530B (5, 5, 3 and 1 layers a virtual stage: vpp "
    "3, 2, 2, 3); PyTorch's DDP (bucketed, overlapped with the last microbatch's backward) up "
    "to 18B and Megatron's local DDP (one fp16 all-reduce after the backward) above. The "
    "benchmark runs them so (`benchmarks/data/published-runs-corrections.json`; "
    "`--as-given` runs the file as it is); the band of errors each way is below. With PP > 1 "
    "Megatron also all-reduces the tied word embedding's gradient between the first and last "
    "stages; the benchmark's workloads carry it (`embedding_sync_params`, the launches tie "
    "their embeddings, Megatron's default) and it costs these runs under 0.1 %.",
    "The stages exchange activations as Megatron-LM's code of each source does "
    "(`bench_published_runs.megatron_p2p_args`): the 2021-22 code of these 18 runs batches and "
    "synchronizes every exchange (`--p2p batched`, both schedules) and splits it over the TP "
    "ranks, all-gathered on arrival, where the activations are replicated over TP "
    "(`--p2p-scatter-gather`, every run without sequence parallelism); the held-out runs' "
    "later code batches the non-interleaved 1F1B and overlaps the interleaved one (`async`). "
    "Against `async` without the split both tables move by under 0.5 point: the split makes "
    "the exposed transfers small.",
    "`runs.json` gives the Korthikanti runs' chunk counts (vpp 3 for 175B and 530B) from "
    "calculon's encoding, not from the paper (its Table 3 gives TP, PP and the batch); vpp "
    "changes the bubble of those runs (5-10 % predicted) and is worth checking against the "
    "paper's text.",
    "The 1T runs' simulated bubble (16-17 %) is above 1F1B's (P-1)/(M+P-1) = 11.0 % for P 64, "
    "M 512, and that is the LM head's doing: with the head, the final norm, the "
    "cross-entropy and the embedding made free the same run's bubble is 11.5 % and its time "
    "7 % less. The 11.0 % the issue compares with is the formula, not a measurement: "
    "Megatron-LM runs the LM head (a sixth of a 1T layer's forward FLOPs) and the loss on the "
    "last stage, beside its two layers, and the slowest stage sets a 1F1B pipeline's pace "
    "(hence Megatron's later `--account-for-loss-in-pipeline-split`).",
    "`runs.json` is silent on how the Narayanan runs accumulate weight gradients, and "
    "today's Megatron-LM fuses the accumulation into the weight-gradient GEMM "
    "(`--gradient-accumulation-fusion`, on by default). The commit their script names "
    "(6985e58, August 2021) predates that fusion (Megatron-LM 83b1e42, February 2022): its "
    "GEMM writes each fp16 weight gradient and autograd adds it into the fp16 `.grad` (6 B a "
    "weight read and written, not the fused GEMM's 4). The benchmark runs them so "
    "(`--no-gradient-accumulation-fusion`, with 16-bit main gradients since they reduce in "
    "fp16); it moves Narayanan's table from mean 7.0 / worst 11.3 % to the figures above. The "
    "Korthikanti runs' code (2022) fused only with fp32 accumulation and their arguments do "
    "not say which they used: they run as today's Megatron-LM runs `--fp16` (fused, 16-bit "
    "main gradients).",
    "Before, Narayanan's table looked close (median 5.9 %) because its one constant, 0.50, "
    "was taken from the same table's 1T run (163 TFLOP/s, 52 % of peak): a fit to the table "
    "being checked, which then ordered 1 of its 24 size pairs as measured.",
)


def excess_bullet(excess: dict, rows: list[dict]) -> str:
    """The source's measured iterations against its own model of them (bench_heldout_runs's
    source_model_excess): a per-microbatch cost outside the profile and the schedule."""
    each = "; ".join(f"{name} {e['median_ms']:.1f} ms ({e['min_ms']:.1f}-{e['max_ms']:.1f})"
                     for name, e in excess.items())

    def errs(names):
        v = [r["throughput_error"] for r in rows if r["schedule"] in names
             and r["id"].startswith("zb-tab4-") and "throughput_error" in r]
        return f"{100 * min(v):+.0f} to {100 * max(v):+.0f} %" if v else "-"

    return ("- **The source's own runs are slower than its own model of them, by a cost a "
            "microbatch.** Its measured iteration less m (T_F + T_B + T_W) / (1 - its bubble "
            "rate), from its own profiled times, per microbatch (median, range): " + each +
            ". The figure hardly moves from 1.5B to 28.3B or with the microbatch count, and "
            "interleaving one layer a chunk (three chunks a stage) doubles it: a runtime cost "
            "per microbatch and per chunk (data, the loss's reductions, each transfer's host "
            "side and synchronization) that neither the profile nor the schedule holds. pipesim "
            "prices the host's time before an action at the presets' 50 us estimate (a warning "
            "in every run); `pipesim calibrate` fits it from a trace of the real job. These are "
            "held-out numbers, so no constant was set from them; they explain much of the "
            "throughput error below (Table 4: 1F1B and ZB-1p " + errs(("1F1B", "ZB-1p")) +
            ", interleaved " + errs(("1F1B-I",)) + ").")


def whatif_bullets() -> list[str]:
    """The committed what-if records of bench_heldout_runs.py (``--set``: one system constant
    changed on every held-out run, ``*-heldout-whatif-*.json``), as one bullet: how the
    held-out figures move with it. Sensitivities, never the prediction."""
    import json

    recs = sorted((REPO / "benchmarks" / "results").glob("*-heldout-whatif-*.json"))
    docs = [(r, json.loads(r.read_text())) for r in recs]
    docs = [(r, d) for r, d in docs if d.get("what_if")]
    if not docs:
        return []

    def setting(what_if: list[str]) -> str:
        pairs = [w.split("=", 1) for w in what_if]
        keys = {k.rsplit(".", 1)[0] for k, _ in pairs}
        values = {v for _, v in pairs}
        if keys == {"runtime.action_overhead_ns"} and len(values) == 1:
            return (f"{float(values.pop()) / 1e3:g} us before each "
                    + ", ".join(k.rsplit(".", 1)[1] for k, _ in pairs))
        return " ".join(f"--set {w}" for w in what_if)

    def order(item):
        pairs = [w.split("=", 1) for w in item[1]["what_if"]]
        return (pairs[0][0], float(pairs[0][1]))

    docs.sort(key=order)

    def one(rec, d):
        s = d["summary"]
        t, z, i, k = (s["throughput"], s["zb_speedup_points"],
                      s["interleaved_speedup_points"], s["ranked_as_measured"])
        return (f"{setting(d['what_if'])} (`{rec.name}`): "
                f"throughput median {100 * t['median']:.1f} %, worst {100 * t['worst']:.1f} %; "
                f"zero-bubble speed-ups {z['median']:.1f} / {z['worst']:.1f} points; "
                f"interleaved {i['median']:.1f} / {i['worst']:.1f}; ranked "
                f"{k['as_measured']} of {k['settings']}")

    return ["- **What-if, not a prediction: the runtime's cost an action, and the transfers.** "
            "`python benchmarks/bench_heldout_runs.py --no-shares --set KEY=VALUE` runs every "
            "held-out run with system constants changed (every other number as above; the "
            "presets guess 50 us before each action and price a transfer inside a node at "
            "1840 Gb/s): " + "; ".join(one(r, d) for r, d in docs) + ". The schedules' "
            "pattern (interleaved 1F1B, which runs twice the actions a microbatch, gains least "
            "over 1F1B as measured; ZB-2p, whose W fill the bubbles, the most) is what a cost "
            "of a few hundred microseconds an action gives; slower transfers inside a node "
            "slow the batched 1F1B most (and the H100 runs' TP collectives: their worst) and "
            "leave the interleaved speed-ups as they are. No "
            "constant is taken from it: these are the held-out runs; a trace of the job "
            "(`pipesim calibrate`) or the GPU script (issue item 8) measures it."]


def megatron_launches_section() -> list[str]:
    """Megatron-LM's own launches through ``pipesim run --megatron-args`` (the newest
    benchmarks/bench_megatron_test_launches.py record): what ran, what was refused, and the
    flags still warned as not modelled, by how many launches carry each."""
    import json

    # one record a date (a later one of the same day replaces the earlier)
    recs = sorted((REPO / "benchmarks" / "results").glob("*-megatron-test-launches*.json"))
    if not recs:
        return []
    d = json.loads(recs[-1].read_text())
    s, rows = d["summary"], d["rows"]
    exits = {int(k): v for k, v in s["exits"].items()}
    rev = d["source"].split()[-1]
    other = sum(v for k, v in exits.items() if k not in (0, 2, 4))
    # the flag a refusal names, after "pipesim: error: --megatron-args FILE: "
    refused = collections.Counter(
        re.sub(r"^.*?--megatron-args \S+: (--[a-z0-9-]+).*$", r"\1", r["error"])
        for r in rows if r["exit"] == 2)
    top = ", ".join(f"`{f}` ({n})" for f, n in list(s["unmodelled_flags"].items())[:8])
    return ["## Megatron-LM's own launches", "",
            f"`python benchmarks/bench_megatron_test_launches.py --megatron GITDIR --rev {rev}` "
            f"(record `{recs[-1].relative_to(REPO)}`): each pretraining launch of Megatron-LM's "
            "functional tests (the `model_config.yaml` of each test case in its checkout, the "
            "arguments as its launcher passes them) through `pipesim run --megatron-args FILE "
            "--gpus N` on the GPU preset its name says.", "",
            f"- {s['launches']} launches: {exits.get(0, 0)} run, {exits.get(2, 0)} refused in "
            f"one line naming the flag, {exits.get(4, 0)} out of memory on its preset"
            + (f", {other} otherwise (a bug)" if other else ", no internal error") + ".",
            "- Refused, by the flag the line names: " + ", ".join(
                f"`{f}` ({n})" for f, n in refused.most_common()) + "; `--num-layers` is "
            "absent from the BERT, T5 and hybrid (Mamba) launches, models pipesim does not "
            "generate.",
            f"- The flags still warned as not modelled, by how many launches carry them: {top}.",
            ""]


def heldout_runs_section() -> list[str]:
    """pipesim against the published runs held out from its design
    (benchmarks/data/published-runs-extra.json): the newest committed
    benchmarks/bench_heldout_runs.py record."""
    import json

    recs = sorted((REPO / "benchmarks" / "results").glob("*-heldout-runs.json"))
    if not recs:
        return []
    a = json.loads(recs[-1].read_text())
    s = a["summary"]

    def pct(x):
        return "-" if x is None else f"{100 * x:.1f} %"

    t, m, z, k = (s["throughput"], s["peak_memory"], s["zb_speedup_points"],
                  s["ranked_as_measured"])
    i = s["interleaved_speedup_points"]
    sf, sb, bub = s["stage_forward"], s["stage_backward"], s["bubble_as_source_minus_source"]
    rows = a["rows"]

    def span(vals):
        return "-" if not vals else f"{100 * min(vals):.0f}-{100 * max(vals):.0f} %"

    big_bub = max([abs(r["bubble_as_source"] - r["source_bubble_rate"]) * 100 for r in rows
                   if "source_bubble_rate" in r and r.get("bubble_as_source") is not None
                   and "-1.5B-" not in r["id"] and r["schedule"] in ("1F1B", "ZB-1p")]
                  or [0.0])
    small = [r for r in rows if "source_bubble_rate" in r and "-1.5B-" in r["id"]
             and r["schedule"] != "1F1B-I" and r.get("bubble_as_source") is not None]
    small_pred = span([r["bubble_as_source"] for r in small])
    zbh2_bub = span([r["bubble_as_source"] for r in rows if r["schedule"] == "ZB-2p"
                     and r.get("bubble_as_source") is not None and "source_bubble_rate" in r])
    small_src = span([r["source_bubble_rate"] for r in small])
    isp = [x for x in a["speedups"] if x["schedule"] == "1F1B-I"]
    i_low = f"{min(x['predicted_points'] for x in isp):+.0f} to " \
        f"{max(x['predicted_points'] for x in isp):+.0f} points" if isp else "-"
    i_meas = f"{min(x['measured_points'] for x in isp):+.0f} to " \
        f"{max(x['measured_points'] for x in isp):+.0f}" if isp else "-"
    mem_by = "; ".join(
        f"{name} {span([abs(r['memory_error']) for r in rows if r['schedule'] == name and 'memory_error' in r])}"
        for name in sorted({r["schedule"] for r in rows if "memory_error" in r}))
    oom = [r["id"] for r in rows if r.get("error_text") == "out of memory"]
    tab12 = [x["difference_points"] for x in a["speedups"]
             if x["schedule"] == "ZB-2p" and any(r["id"].startswith("zb-tab12-")
                                                 and r["group"] == x["group"] for r in rows)]
    small_m = (f"{min(tab12):+.1f} to {max(tab12):+.1f}" if tab12 else "-")
    tab4 = [x["difference_points"] for x in a["speedups"]
            if x["schedule"] == "ZB-2p" and any(r["id"].startswith("zb-tab4-")
                                                and r["group"] == x["group"] for r in rows)]
    zb2p_t4 = f"{median(tab4):+.1f} points" if tab4 else "-"
    zb2p_t4_worst = f"{max(tab4, key=abs):+.1f}" if tab4 else "-"
    mc = [r for r in rows if r["id"].startswith("mcore-h100-")]
    zb_rows = [r for r in rows if not r["id"].startswith(("mcore-h100-", "nemo-", "titan-"))]
    titan = [r for r in rows if r["id"].startswith("titan-")]
    by_src = s.get("throughput_by_source", {})
    trend = s.get("weak_scaling_trend", {"pairs": 0})
    out = ["## Held-out published runs: zero bubble, interleaving, peak memory, H100, FSDP2", "",
           f"`python benchmarks/bench_heldout_runs.py` (record `{recs[-1].relative_to(REPO)}`, "
           f"commit {a['commit']}) over `{a['runs_file']}`: runs transcribed from Qi et al., "
           "\"Zero Bubble Pipeline Parallelism\" (ICLR 2024, arXiv 2401.10241): Table 4 (1F1B, "
           "ZB-1p, ZB-2p and interleaved 1F1B on GPT-3-like 1.5B, 6.2B, 14.6B and 28.3B models, "
           "8 to 32 A100 80GB, PP only, three microbatch counts each: throughput and memory), "
           "Table 12 (1F1B and ZB-2p with m <= p), Table 9 (the profiled F, B, W times per "
           "stage) and Table 5 (the bubble rates the authors computed from them). Each run goes "
           "the way the 18 runs above go (the same code builds and runs it), with the source's "
           "layer split (one layer fewer on the first and last stage); ZB-1p and ZB-2p run as "
           "the source's launch script launches them (`--enable-zero-bubble "
           "--zero-bubble-max-pending-backward` p or 2p), so with `zb-greedy`: the layout the "
           "fork's runtime computes for the run's own F / I / W costs and memory, checked "
           "order for order against the fork's scheduler. None of these numbers was used to "
           "set a constant.", "",
           f"- **Throughput** median |error| {pct(t['median'])}, worst {pct(t['worst'])} over "
           f"{t['runs']} runs" + (f" ({t['out_of_memory']} predicted out of memory)"
                                  if t["out_of_memory"] else "")
           + (f" ({t['not_expressible']} not expressible: interleaving with more chunks than "
              "layers, FP8)" if t["not_expressible"] else "")
           + f"; peak memory median {pct(m['median'])}, worst {pct(m['worst'])}; zero-bubble "
           f"speed-ups over 1F1B median |difference| {z['median']:.1f} points, worst "
           f"{z['worst']:.1f}; schedules ranked as measured in {k['as_measured']} of "
           f"{k['settings']} settings ({k['pairs_ordered']} of {k['pairs']} pairs). Targets "
           "(issue 34): median <= 8 %, worst <= 20 %, speed-ups within 2 points, every setting "
           "ranked as measured.",
           "- By source: " + "; ".join(
               f"{name} median {pct(st['median'])}, worst {pct(st['worst'])} ({st['runs']})"
               for name, st in by_src.items() if st["runs"]) + ".",
           "- By schedule: " + "; ".join(
               f"{name} median {pct(st['median'])}, worst {pct(st['worst'])} ({st['runs']})"
               for name, st in s["throughput_by_schedule"].items()) + ".",
           f"- Interleaved 1F1B's speed-up over 1F1B: median |difference| {i['median']:.1f} "
           f"points, worst {i['worst']:.1f} over {i['runs']} settings.", "",
           "Where the errors come from, each measured on these runs:", "",
           f"- **A layer's forward is priced too fast; its backward is close.** A middle "
           f"stage's forward per "
           f"microbatch is {100 * sf['signed_median']:+.1f} % (median, worst "
           f"{pct(sf['worst'])}) against the source's profiled T_F, its backward (B + W) "
           f"{100 * sb['signed_median']:+.1f} % (worst {pct(sb['worst'])}) against T_B + T_W, "
           f"over the {sf['runs']} Table 4 settings. These runs have no TP and no DP "
           f"(collectives made free save {pct(s['dp_share']['worst'])} and "
           f"{pct(s['tp_share']['worst'])} at most, Megatron's optimizer step "
           f"{pct(s['step_share']['worst'])}) and the pipeline's transfers made free "
           f"save {pct(s['p2p_share']['median'])} (median, {pct(s['p2p_share']['worst'])} at "
           "most): the time error is the compute of a layer at these small shapes (1024 to "
           "6144 tokens a microbatch). The backward is mostly GEMMs, the forward has more of "
           "the memory-bound kernels (the unfused attention's softmax and dropout, the norms), "
           "priced at an elementwise kernel's measured rate (79.3 % of HBM). The GPU's "
           "gap between kernels is priced (1.5 us a kernel, measured) and the host's time "
           "before each action is the presets' 50 us estimate; neither is near the shortfall "
           "(about 1 ms a layer's forward). The source's T_F is host time between two "
           "`torch.cuda.synchronize()` calls (its `ScheduleTimers`), an upper bound on the "
           "GPU's; what is left needs the kernels measured at these shapes (issue item 8).",
           *([excess_bullet(a["source_model_excess"], zb_rows)]
             if a.get("source_model_excess") else []),
           *whatif_bullets(),
           f"- **The schedule given the stage times is close, except where the LM head sets "
           f"the pace.** The simulated bubble as the source's scheduler counts it (the "
           f"largest of the stages' own spans, first F to last W, against a middle stage's "
           f"compute: a stage's wait for its first input is not counted) minus the source's "
           f"computed rate: "
           f"median {100 * bub['signed_median']:+.1f} points, worst {100 * bub['worst']:.1f}. "
           f"For 6.2B and up it is within {big_bub:.1f} points for 1F1B and ZB-1p (ZB-2p: "
           f"below); at "
           f"1.5B (h 2304) the last stage's LM head and loss, priced near peak while the "
           f"layers are priced too fast, outweigh the layer the source took off that stage, "
           f"and every rank waits for them (bubble {small_pred} against the source's "
           f"{small_src}). The vocabulary is 32,000, not the 51,200 the file first assumed: "
           f"the models' names are their parameter counts with a tied 32,000-token embedding "
           f"(14.63B and 28.28B; 14.73B and 28.40B with 51,200), and the authors' released "
           f"script tokenizes with a SentencePiece model. With 51,200 a middle rank's idle over "
           f"the whole iteration was 28-39 % at 1.5B: found while looking at that "
           f"bottleneck, so these runs are no longer unseen for the vocabulary. The bubble "
           f"was compared by a middle rank's idle over the whole iteration before (median "
           f"+2.4 points, worst 29.7, at 51,200), which counts the wait for the first input "
           f"the source's rate leaves out. Interleaved 1F1B runs as the source ran it, one layer a chunk (vpp = "
           f"(layers + 2) / pp, the first chunk the embedding alone and the last the LM head "
           f"alone): its speed-up over 1F1B is predicted {i_low} where the source measured "
           f"{i_meas}; its throughput is too high by as much as the layers' compute is too "
           f"fast, now that its bubble is small.",
           "- **Zero bubble steps without a barrier.** The source's launch script runs every "
           "zero-bubble schedule with `--enable-optimizer-post-validation` (its README: about "
           "8 % slower without it): each rank steps once its own gradients are done and the "
           "partial global state has come from the rank before it, so the iterations overlap "
           "and ZB-2p's parallelogram (each rank busy from its first F to its last W) tiles: "
           "an iteration is a rank's own span and its step, without the p - 1 forwards the "
           "pipeline takes to fill. The ZB runs are run so (`--optimizer-post-validation`, "
           "the last of three iterations: the steady state); 1F1B and 1F1B-I, Megatron-LM's "
           "own schedules, keep the barrier. With the barrier Table 4's ZB-2p speed-ups came "
           "out -6.2 points low (median; the record at d8aeea1); now "
           f"{zb2p_t4} (median, worst {zb2p_t4_worst}), and ZB-2p's throughput shows the "
           "forward's shortfall as the other schedules do. The fork lays ZB-2p out for "
           "near-zero bubble under a 2p memory limit (its Table 5: 0.1-4.3 %); run with the "
           f"fork's own layout for pipesim's costs it is {zbh2_bub} here, counted the same way "
           "(the handcrafted `zb-h2` was 2-14 %: with an I that frees most of a stash the "
           "fork starts more forwards under the same limit). With m <= p (Table 12) the ZB-2p speed-ups come out "
           f"{small_m} points high: there the gain is the W kept off the critical "
           "path, and the kernel model's forward is further off than its backward, so W is a "
           "larger share of a predicted microbatch than of a measured one.",
           f"- **Memory** (|error| by schedule): {mem_by}. "
           "The fork's layout keeps its limit in its own accounting (p or 2p forwards' "
           "activations, an I freeing what the W does not read), so ZB-1p peaks near 1F1B and "
           "ZB-2p near twice 1F1B's activations: the source measured ZB-1p 2 GB above 1F1B at "
           "1.5B, pipesim says 4.1 GB (with the handcrafted `zb-h1`, 1.6 GB). Which part of a microbatch pipesim keeps until its "
           "W was the memory model's question: the source's runtime (`WeightGradStore`) frees "
           "a layer's autograd graph at the I and keeps only each linear's input and output "
           "gradient for the W, which the header's `deferred_wgrad_bytes:` now says. " + (
               f"{len(oom)} runs are predicted out of an 80 GiB A100 that the source ran "
               f"({', '.join(oom)})." if oom else ""), "",
           "Assumptions made where the source is silent (each run's `assumptions` lists them): "
           "vocab 32000 (above), ffn 4h, fp16, no recompute, TP 1 and DP 1 (the GPU count equals the "
           "pipeline size), 'Memory (GB)' read as the peak over the GPUs, the source's RoCE "
           "between nodes priced as the a100 preset's links. Left out: Table 6 (ZB-V against "
           "the others on 16-32 GPUs; the layer counts of those settings are not given) and "
           "Table 11 (doubled micro-batch: its 14.6B and 28.3B microbatch counts are "
           "inconsistent between the paper's versions). The V-schedule runs of arXiv "
           "2405.15362 were not found in a form that could be transcribed with their settings.",
           ""]
    nemo = {r["id"]: r for r in rows if r["id"].startswith("nemo-") and "throughput_error" in r}
    if "nemo-h100-llama3-70b-fp8" in nemo:
        r = nemo["nemo-h100-llama3-70b-fp8"]
        out += [
           "**FP8: Megatron-Bridge's Llama 3 70B on 64 H100** (its performance summary, 25.11 "
           "container: TP 4, PP 8, VP 5, FP8 current scaling, 1602 tokens/s/GPU): run with its "
           "recipe's settings (the distributed optimizer with both overlaps and TP overlap, "
           "Megatron-Bridge's `recipes/common.py` and its FP8 70B H100 recipe) and priced as "
           "docs/model.md's FP8 (the linears' GEMMs at the FP8 peak's sustained fraction, each "
           "operand's amax read and cast, the linears' inputs kept in FP8): "
           f"{r['predicted_tokens_per_gpu_s']:.0f} tokens/s/GPU predicted, "
           f"{r['throughput_error'] * 100:+.1f} %, peak memory "
           f"{r['predicted_peak_memory_gb']:.1f} GB (the source gives none). It first came out "
           "of memory: the distributed optimizer and the FP8 inputs' memory were added after "
           "that was seen; its throughput set nothing. Its gradients are reduced in bf16, as "
           "the performance scripts the table was measured with set it (Megatron-Bridge "
           "5776a6d, scripts/performance/configs/llama); read at first as fp32, which gave "
           "83.9 GB and 1524.5 tokens/s/GPU. Until session 18 the benchmark generated it "
           "without its 8 K/V groups (full multi-head attention: a QKV projection 2.4 x "
           "Llama's, K and V kept 8 x): 78.5 GB and -4.8 %; with them it is the figure above.",
           ""]
    if "nemo-h100-llama31-405b-fp8" in nemo:
        r = nemo["nemo-h100-llama31-405b-fp8"]
        out += [
           "**Context parallelism: Megatron-Bridge's Llama 3.1 405B on 1024 H100** (the same "
           "25.11 table: TP 8, PP 8, CP 2, VP 8, GBS 512, FP8 current scaling, 292 tokens/s/GPU), "
           "transcribed after pipesim priced context parallelism and run once: "
           f"{r['predicted_tokens_per_gpu_s']:.0f} tokens/s/GPU predicted, "
           f"{r['throughput_error'] * 100:+.1f} %, peak memory "
           f"{r['predicted_peak_memory_gb']:.1f} GB. With the gradients read as fp32 (before the "
           "performance scripts were checked) it came out 0.7 GiB over the 80 GB; its "
           "throughput set nothing. It was first run without its 8 K/V groups (the benchmark "
           "dropped them, as for the 70B): +10.1 % and 71.5 GB then. Its ring of K and V "
           "(2 MiB a step across IB, 47 us behind 0.12 ms forward steps) shows nothing.", ""]
    if mc:
        out += [
           "**Another GPU: Megatron-Core's H100 weak scaling.** The Megatron-LM README's table "
           "(commit f2e5db4, Megatron-Core r0.8.0): 9 GPT models, 1.7B to 462B on 48 to 6144 "
           "H100, TP / PP / DP and the global batch given, vocabulary 131,072, sequence 4,096, "
           "`--overlap-grad-reduce --overlap-param-gather --tp-comm-overlap`; measured as TFLOP/s "
           "per GPU by Megatron-LM's own FLOP formula, so the prediction is that formula over the "
           "predicted time. What the README leaves out is Megatron's default (micro-batch 1, no "
           "interleaving, no recompute, GELU, ffn 4h). Errors: "
           + (f"median {pct(by_src['Megatron-Core weak scaling (H100)']['median'])}, worst "
              f"{pct(by_src['Megatron-Core weak scaling (H100)']['worst'])}"
              if by_src.get("Megatron-Core weak scaling (H100)", {}).get("runs") else "-")
           + (f"; the size trend (pairs more than 3 % apart) {trend['ordered']} of "
              f"{trend['pairs']} ordered as measured" if trend["pairs"] else "")
           + ". A data-parallel ring holds 8 / TP GPUs of each node and crosses between nodes "
           "on that many NICs (400 GB/s at TP 1, 50 GB/s at TP 8). The pipelined runs (70B "
           "and up) land within +2 to +10 %. The TP-1 and TP-2 runs (1.7B, 7.1B) are about a "
           "quarter too fast: their reduce-scatter and all-gather over 48 ranks hide behind the "
           "last backward and the first forward, so what is left is their compute at small "
           "GEMMs (h 2048-4096, 4,096 tokens, at the H100 fraction the A100's ratio derives) "
           "and their attention (cuDNN's, at the rate TE's benchmark gives for the sequence: "
           "42.6 % of the peak at 4,096, between its 33.2 % at 2,048 and 52.0 % at 8,192). At TP 8 (32B) the ring has one NIC a node "
           "and its communication shows for a third of the predicted time at micro-batch 1 "
           "(four microbatches): too slow by 12 %; the micro-batch size, unstated, decides how "
           "much of it a backward hides.", "",
           "| run | GPUs | TP / PP / DP | measured TFLOP/s per GPU | predicted | error |",
           "|---|---:|---|---:|---:|---:|"]
        for r in mc:
            if "predicted_tflops_per_gpu" not in r:
                out.append(f"| {r['id']} | - | - | {r['measured']['model_tflops_per_gpu']} | "
                           f"{r.get('error_text', 'failed')} | - |")
                continue
            run = next(x for x in json.loads((REPO / a["runs_file"]).read_text())["runs"]
                       if x["id"] == r["id"])
            out.append(f"| {r['id']} | {run['gpus']} | {run['tp']} / {run['pp']} / "
                       f"{run['dp']} | {r['measured']['model_tflops_per_gpu']} | "
                       f"{r['predicted_tflops_per_gpu']:.1f} | "
                       f"{100 * r['throughput_error']:+.1f} % |")
        out += [""]
    if titan:
        ts = by_src.get("torchtitan FSDP2 (A100)", {})
        ck = s.get("checkpointing_order", {"pairs": 0, "ordered": 0})
        om = s.get("out_of_memory_as_measured", {"runs": 0, "as_measured": 0})
        out += [
           "**Another runtime: torchtitan's FSDP2 on 64 A100.** torchtitan's docs/performance.md "
           "(pytorch/torchtitan 395a52627, 2024-04-18: Llama 2 13B and 70B at sequence 4,096; "
           "1ea476e9f, 2024-04-24: Llama 3 8B and 70B at 8,192), tokens per second per GPU "
           "under 1D FSDP2 (64 shards, no TP, no pipeline) with no, full, layer-selective "
           "(every second block, its default then) or op-selective activation checkpointing, "
           "and two settings it reports out of memory. Each runs as `pipesim run --torchtitan "
           "JOB --gpus 64` on the a100 preset, the job in today's torchtitan names (the Llama 2 "
           "shapes as model flags). Transcribed in session 27, after every constant was set: "
           + (f"median {pct(ts['median'])}, worst {pct(ts['worst'])} over {ts['runs']} runs, "
              "every one too fast" if ts.get("runs") else "-")
           + (f"; the out-of-memory settings predicted out of memory {om['as_measured']} of "
              f"{om['runs']}" if om["runs"] else "")
           + (f"; the checkpointing modes more than 3 % apart ordered as measured "
              f"{ck['ordered']} of {ck['pairs']}" if ck["pairs"] else "")
           + ". Their FSDP collectives hide behind the compute (made free, the Llama 3 8B "
           "iteration is 1 % shorter), so the gap is on the compute stream. Session 28 priced "
           "two of its causes from the code that ran, not from this table: torchtitan's llama "
           "model is eager PyTorch (separate projections and their gradient adds, RoPE in "
           "complex fp32, an unfused SwiGLU: docs/model.md), and FSDP2 copies each gathered "
           "layer out of the gather's buffer and each layer's gradients into the "
           "reduce-scatter's fp32 input on the compute stream (torch's _fsdp_collectives.py). "
           "Before them the median was 21.0 % and the worst 29.7 %, the worst the op-selective "
           "Llama 2 70B at batch 1, whose per-parameter copies weigh twice what they weigh at "
           "batch 2: the trend the copies explain. What is left is still too fast. The first "
           "candidate is contention: Lee et al. (arXiv 2507.03114, 2025) measured compute that "
           "overlaps a collective 18.9 % slower on average (up to 40 %) across A100, H100, MI250 "
           "and MI210, and 1D FSDP overlaps nearly all of its compute; pipesim's walks run "
           "overlapped compute at full speed. Host time is the other. A lent GPU is to measure "
           "them before a rule is written.", "",
           "| run | AC | measured tokens/s/GPU | predicted | error |", "|---|---|---:|---:|---:|"]
        for r in titan:
            if "oom_as_measured" in r:
                out.append(f"| {r['id']} | {r['schedule'].split(', ')[1]} | out of memory | "
                           + ("out of memory" if r["oom_as_measured"] else "fits") + " | - |")
                continue
            out.append(f"| {r['id']} | {r['schedule'].split(', ')[1]} | "
                       f"{r['measured']['tokens_per_gpu_s']} | "
                       f"{r['predicted_tokens_per_gpu_s']:.0f} | "
                       f"{100 * r['throughput_error']:+.1f} % |")
        out += [""]
    out += [
           "| run | measured samples/GPU/s | predicted | error | measured GB | predicted GB | "
           "bubble as the source counts it | source's bubble |",
           "|---|---:|---:|---:|---:|---:|---:|---:|"]
    for r in zb_rows:
        mm = r["measured"]
        if "error_text" in r:
            shown = mm.get("samples_per_gpu_s", "-")
            out.append(f"| {r['id']} | {shown} | {r['error_text']} | - | "
                       f"{mm.get('peak_memory_gb', '-')} | - | - | - |")
            continue
        out.append(f"| {r['id']} | {mm['samples_per_gpu_s']} | "
                   f"{r['predicted_samples_per_gpu_s']:.2f} | "
                   f"{100 * r['throughput_error']:+.1f} % | {mm.get('peak_memory_gb', '-')} | "
                   f"{r['predicted_peak_memory_gb']:.1f} | {pct(r.get('bubble_as_source'))} | "
                   f"{pct(r.get('source_bubble_rate'))} |")
    out += ["", "| setting | schedule | measured speed-up over 1F1B | predicted | difference |",
            "|---|---|---:|---:|---:|"]
    for sp in a["speedups"]:
        out.append(f"| {sp['group']} | {sp['schedule']} | {sp['measured_points']:+.1f} | "
                   f"{sp['predicted_points']:+.1f} | {sp['difference_points']:+.1f} |")
    out += ["", "| setting | measured order | predicted order |", "|---|---|---|"]
    for g in a["rankings"]:
        out.append(f"| {g['group']} | {' > '.join(g['measured'])} | "
                   f"{' > '.join(g['predicted'])}"
                   + ("" if g["as_measured"] else " (not as measured)") + " |")
    return out + [""]


def newest_record(kind: str) -> tuple[Path | None, dict | None]:
    """The newest committed ``benchmarks/results/<date>-<kind>.json`` and its contents, or
    (None, None) when there is none."""
    import json

    recs = sorted((REPO / "benchmarks" / "results").glob(f"*-{kind}.json"))
    return (recs[-1], json.loads(recs[-1].read_text())) if recs else (None, None)


def gemm_kernels_section() -> list[str]:
    """The h100 preset's GEMM prices against the kernel times of XLA's measured matmul table:
    the newest committed benchmarks/bench_gemm_xla_table.py record."""
    path, rec = newest_record("gemm-xla-h100")
    if rec is None:
        return []
    source = f" at {rec['table_source']}" if rec.get("table_source") else ""
    out = ["## GEMM kernels against measured H100 kernel times", "",
           f"`python benchmarks/bench_gemm_xla_table.py --xla-table PATH` (record "
           f"`benchmarks/results/{path.name}`): the {len(rec['products'])} BF16 products "
           "of OpenXLA's default matmul performance table for sm_90 "
           f"(`xla/service/gpu/model/matmul_interpolator_data.h`{source}: each dot's median "
           "kernel time over five runs, CUPTI-traced by XLA's `matmul_perf_table_gen`, 256 to "
           "4096 a side, batch 1 to 4), each priced by the h100 preset's tile and wave model. "
           "Predicted over measured time (above 1: the model is slower than the GPU was); "
           "nothing was fitted to it:", "", "| products | count | median | range | measured median |",
           "|---|---:|---:|---:|---:|"]
    for name, st in rec["summary"].items():
        if st is not None:
            out.append(f"| {name} | {st['products']} | {st['median']:.2f} | "
                       f"{st['min']:.2f} to {st['max']:.2f} | "
                       f"{st['median_measured_ns'] / 1e3:.1f} us |")
    big = [p for p in rec["products"] if 2 * p["b"] * p["m"] * p["n"] * p["k"] >= 1e11]
    rates = sorted(2 * p["b"] * p["m"] * p["n"] * p["k"] / (p["predicted_ns"] / p["ratio"]) / 1e3
                   for p in big)
    shortest = min(p["predicted_ns"] / p["ratio"] for p in rec["products"]) / 1e3
    return out + ["", f"- The large products (100 GFLOP and more) ran at {rates[0]:.0f}-"
                  f"{rates[-1]:.0f} TFLOP/s, {rates[0] / 9.89:.0f}-{rates[-1] / 9.89:.0f} % of "
                  "the 989 peak: the rates S. Bekman's search found as the H100's maximum (792-795, "
                  "[MAMF] in `simulator/workload/kernel_presets.py`), from which the preset's "
                  "sustained fraction is derived by the A100's sustained-to-maximum ratio (0.860, "
                  "[SUST]). XLA times each kernel alone, five times for a few hundred "
                  "microseconds, where a GPU holds its boost clock; the preset prices what a "
                  "training step sustains. So the table confirms the maximum the fraction "
                  "starts from and says nothing of the 0.860, which stays an assumption "
                  "(`benchmarks/bench_kernels_gpu.py` times an 8192^3 GEMM for a while on a "
                  "lent GPU).",
                  f"- Below them the model is fast, the more the smaller (no measured time is "
                  f"under {shortest:.1f} us): what the tile model leaves out, most likely a "
                  "kernel's fixed cost (its first loads and its epilogue, which the 1.5 us gap "
                  "between kernels does not hold) and tiles that do not fill a wave. Products "
                  "with fewer output tiles than SMs spread both ways: the library kernels split "
                  "their K over more SMs (split-K, stream-K), which the tile model does not, "
                  "so a long K is priced slow and a short one fast. No one constant fixes "
                  "both (a cost a wave of 1-5 us moves one class to 1 and the others off); "
                  "the GPU script (`benchmarks/bench_kernels_gpu.py`) measures the layers' own "
                  "shapes.", ""]


def torchtitan_memory_section() -> list[str]:
    """torchtitan's own Llama 3.1 8B FSDP runs' peak memory against pipesim's: the newest
    committed benchmarks/bench_torchtitan_memory.py record."""
    path, rec = newest_record("torchtitan-memory")
    if rec is None:
        return []
    out = ["## Peak memory of torchtitan's own runs", "",
           f"`python benchmarks/bench_torchtitan_memory.py` (record "
           f"`benchmarks/results/{path.name}`, commit {rec['commit']}): torchtitan's "
           "published Llama 3.1 8B runs with FSDP "
           "(`pytorch/torchtitan/benchmarks/llama3_h100_202412_torchtitan.md`, Tables 1 and 3, the rows without torch.compile and Float8: "
           "local batch 2, sequence 8,192, op-level selective checkpointing), each predicted "
           "from its job with `pipesim run --torchtitan`. The source reads torch's reserved "
           "peak (`max_reserved_gib`: the caching allocator's, at or above the allocated peak "
           "pipesim models). Its GPUs are H100 96GB HBM2e at 500 W, which no preset describes, "
           "so their throughput is not compared. The loss's memory (the fp32 copies of the "
           "logits, docs/model.md) was added after these rows were seen 45 % low (45.6 and "
           "35.1 GiB): they are not unseen data for that rule, and nothing was fitted to them.",
           "", "| run | GPUs | measured (max reserved) | predicted peak | error |",
           "|---|---:|---:|---:|---:|"]
    for r in rec["rows"]:
        out.append(f"| {r['id']} | {r['gpus']} | {r['measured']['max_reserved_gib']:.1f} GiB "
                   f"| {r['predicted_peak_gib']:.2f} GiB | {100 * r['memory_error']:+.1f} % |")
    return out + [""]


def astrasim_section() -> list[str]:
    """ASTRA-sim 2.0's analytical backend replaying pipesim's Chakra exports: the newest
    committed ``benchmarks/astrasim/run.py`` table, from committed data only."""
    import csv

    runs = sorted((REPO / "benchmarks" / "results").glob("*-astrasim/table.csv"))
    if not runs:
        return []
    rows = list(csv.DictReader(runs[-1].open()))
    rel = runs[-1].parent.relative_to(REPO)
    exact = [r for r in rows if round(float(r["pipesim_ns"])) == int(r["astrasim_ns"])]
    worst = max(rows, key=lambda r: abs(float(r["diff_pct"])))
    off = sorted({r["schedule"] for r in rows if r not in exact})
    out = ["## ASTRA-sim 2.0: pipesim's Chakra exports replayed", "",
           f"`benchmarks/astrasim/run.py` (data: `{rel}`) exports every schedule with "
           "`--chakra` (P = 4 and 8, M = 8 and 16, uniform and uneven stage costs, 1 MiB "
           "transfers on 64 B/ns links with 500 ns latency, whole-microsecond durations) and "
           "replays it with ASTRA-sim 2.0's congestion-unaware analytical binary (astra-sim "
           "518bd51, a user's build); its largest `sys[..] finished` time beside pipesim's "
           "makespan (`--p2p async`).", "",
           f"- **{len(exact)} of {len(rows)}** runs end at the same nanosecond; the other "
           f"{len(rows) - len(exact)} ({', '.join(off)}) differ by at most "
           f"{abs(float(worst['diff_pct'])):.4f} % ({worst['schedule']} P={worst['P']} "
           f"M={worst['M']} {worst['costs']}: {int(worst['astrasim_ns']) - round(float(worst['pipesim_ns'])):,} ns "
           "later in ASTRA-sim). Those are the schedules whose ranks send in both directions at "
           "once: ASTRA-sim runs one send at a time per NPU and holds it until the data lands, "
           "pipesim queues transfers per link, so two sends that start together overlap in "
           "pipesim and follow each other in ASTRA-sim.", "",
           "| schedule | runs | exact | largest difference |", "|---|---|---|---|"]
    for name in sorted({r["schedule"] for r in rows}):
        mine = [r for r in rows if r["schedule"] == name]
        same = sum(r in exact for r in mine)
        big = max(abs(float(r["diff_pct"])) for r in mine)
        out.append(f"| {name} | {len(mine)} | {same} | {big:.4f} % |")
    return out + [""]


# (file under ../shared/workloads-real, what pipesim 0.1 printed at --pp 4 before the honest defaults:
# p2p traffic, peak memory per stage in GiB, iteration time in ms)
BEFORE_HONEST = [
    ("G13B-M1-C01_GPT13B_megatron_tp8_pp1_mbs1_A100.txt", "0 B", "48.41/0/0/0", 260.752),
    ("aicb/G13B-M1-C02_GPT13B_megatron_tp8_pp1_mbs1_sp_A100.txt", "0 B", "48.41/0/0/0",
     416.392),
    ("aicb/L7B-M1-C04_Llama7B_megatron_tp2_pp1_mbs1_A100.txt", "0 B", "100.66/0/0/0", 146.816),
    ("workload_gpt7b_64g.txt", "0 B", "22.79/22.79/22.79/22.79", 74.617),
    ("workload_analytical.txt", "6.75 GiB", "406.69/387.21/368.09/349.05", 22362.524),
]


def changed_by_honest_defaults() -> list[str]:
    """What the honest defaults (derived pp_comm, iteration rows shared by stage) changed."""
    from simulator.units import fmt_bytes

    real = FOLDERS[0]
    out = [
        "## Numbers changed by the honest defaults",
        "",
        "Files without `pp_comm` now send the activation size derived from their rows, and "
        "AICB's whole-model DP/optimizer rows are shared by every stage in proportion to its "
        "parameters instead of sitting on stage 0 (docs/model.md, \"What pipesim assumes\"). "
        "At `--pp 4`, 1f1b, the built-in system (before: pipesim 0.1):",
        "",
        "| file | p2p before | p2p now | peak memory per stage before (GiB) | now (GiB) | "
        "iteration before (ms) | now (ms) | warnings now |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for name, p2p, mem, it in BEFORE_HONEST:
        r = simulate(real / name, pp=4)
        d = r.to_dict()
        now_mem = "/".join(f"{s['peak_memory_bytes'] / 2**30:.2f}" for s in d["stages"])
        codes = ", ".join(w["code"] for w in d["warnings"]) or "none"
        out.append(f"| `{name}` | {p2p} | {fmt_bytes(d['p2p_bytes'])} | {mem} | {now_mem} | "
                   f"{it:.3f} | {ms(d['makespan_ns'])} | {codes} |")
    out += [
        "",
        "In the SimAI comparison at the top of this page only the interleaved (v = 2) rows "
        "moved: each rank's share of the "
        "iteration rows now follows its two chunks' parameters (the first and last chunks carry "
        "the embedding and the output layer).",
        "",
    ]
    return out


def _calibrated_runs() -> list[Path]:
    """The harness runs (by folder name, newest first) that carry calibrations."""
    return sorted((d for d in (REPO / "benchmarks" / "fidelity" / "results").iterdir()
                   if (d / "calibrations").is_dir() and (d / "results.json").is_file()),
                  reverse=True)


def _layer_ns(run: Path) -> int:
    import json

    from benchmarks.fidelity.cases import BASE_NS

    return json.loads((run / "results.json").read_text()).get("layer_ns", BASE_NS)


def _default_layer(run: Path) -> bool:
    from benchmarks.fidelity.cases import BASE_NS

    return _layer_ns(run) == BASE_NS


# runs at the harness's default layer time make the headline and the run-to-run comparison;
# runs at another layer time get their own section and line
FIDELITY_RUNS = [r for r in _calibrated_runs() if _default_layer(r)]
OTHER_LAYER_RUNS = [r for r in _calibrated_runs() if not _default_layer(r)]
FIDELITY_RUN = (FIDELITY_RUNS[0] if FIDELITY_RUNS
                else REPO / "benchmarks" / "fidelity" / "results" / "none")
TRACES = REPO / "tests" / "data" / "traces"


def fidelity_section() -> list[str]:
    """Calibrated on one schedule's traces, the other torch classes predicted (and every class
    as the source in turn), on the recorded traces and on the harness's full run."""
    import json
    import tempfile

    from benchmarks.fidelity import predict
    from benchmarks.fidelity.cases import CASES, workload_text

    rel = FIDELITY_RUN.relative_to(REPO)
    man = json.loads((TRACES / "MANIFEST.json").read_text())
    load = man.get("loadavg_1min") or [float("nan"), float("nan")]
    out = [
        "## Fidelity: pipesim against torch.distributed.pipelining",
        "",
        "The harness in `benchmarks/fidelity/` runs the 7 torch schedule classes for real (CPU, "
        "gloo, P = 4 processes, M = 8, 16 layers whose passes take a known time) and records "
        "per-rank profiler traces. `pipesim calibrate` reads one class's traces and fits the "
        "per-(stage, kind) action times (medians over iterations of the operator time), the "
        "layer scales that carry them to another chunking, the per-action overhead, the step "
        "prologue and epilogue and torch's transfer parameters (latency, two-way exchange "
        "cost) by replaying the traced order with pipesim's own engine (`--p2p torch`). The "
        "calibration is then applied to every class: `pipesim run W -s SCHEDULE --vpp V "
        "--calibration calib.yaml`. Columns: the measured median iteration time and its spread "
        "((max - min) / median), the prediction from the per-layer costs alone (built-in "
        "ideal system), the prediction calibrated on ScheduleInterleaved1F1B (a multi-stage "
        "schedule whose chunks differ from the single-stage schedules' stages), its error, and "
        "that error over the spread (below 1: inside the run-to-run noise). Targets: every "
        "class within ±3 % of the measured median, and the ranking equal to the measured one "
        "wherever two medians differ by more than 3 %.",
        "",
        f"### Recorded traces (tests/data/traces, uniform case, {man['iterations']} profiled "
        f"iterations after {man['warmup']} warm-up)",
        "",
        "Reproduce a row: `pipesim calibrate tests/data/traces/ScheduleInterleaved1F1B "
        f"--workload {rel}/workloads/uniform.txt -o calib.yaml`, then `pipesim run "
        f"{rel}/workloads/uniform.txt -s zb-v --vpp 2 --calibration calib.yaml` "
        f"(`tests/calibration/test_fit.py` pins these rows). Recorded at load average "
        f"{load[0]:.1f} before and {load[1]:.1f} after.",
        "",
    ]
    with tempfile.TemporaryDirectory() as tmp:
        wl = Path(tmp) / "uniform.txt"
        wl.write_text(workload_text(CASES["uniform"]))
        measured, frags = predict.from_traces(TRACES, wl)
        evs = [predict.evaluate("uniform", wl, measured, frags)]
        out += predict.markdown(evs[0]) + [""]
    runs = []                      # per harness run: (folder, load average, its tables)
    for run in FIDELITY_RUNS:
        doc = json.loads((run / "results.json").read_text())
        load = doc["loadavg_1min"]
        run_rel = run.relative_to(REPO)
        run_evs = _run_evaluations(run, doc)
        if run != FIDELITY_RUN:     # older runs: their figures in the summary only
            runs.append((run_rel.name, load, run_evs))
            continue
        out += [
            f"### Harness run `{run_rel}` (3 cost cases, {doc['iterations']} profiled "
            f"iterations after {doc['warmup']} warm-up)",
            "",
            f"torch {doc['torch']}, {doc['backend']} on {doc['device']}, {doc['cpus']} CPUs, "
            f"load average {load[0]:.1f} before and {load[1]:.1f} after the run. The traces "
            "(~220 MB) are not kept: the harness wrote `calibrations/<case>/<class>.yaml` "
            "(`pipesim calibrate` of each class's traces) beside `results.json`; "
            f"`python -m benchmarks.fidelity.predict --results {run_rel}` prints these tables.",
            "",
        ] + _run_body(doc, run_evs)
        runs.append((run_rel.name, load, run_evs))
    others = []
    for run in OTHER_LAYER_RUNS:
        doc = json.loads((run / "results.json").read_text())
        load = doc["loadavg_1min"]
        run_rel = run.relative_to(REPO)
        layer_ms = doc["layer_ns"] / 1e6
        run_evs = _run_evaluations(run, doc)
        out += [
            f"### Harness run `{run_rel}`: {layer_ms:g} ms per layer and pass (3 cost cases, "
            f"{doc['iterations']} profiled iterations after {doc['warmup']} warm-up)",
            "",
            f"The same model with every known cost divided by "
            f"{doc['layer_ns'] and 4_000_000 / doc['layer_ns']:g}, so the runtime's own costs "
            f"(launch overheads, transfers) weigh that much more. torch {doc['torch']}, "
            f"{doc['backend']} on {doc['device']}, {doc['cpus']} CPUs, load average "
            f"{load[0]:.1f} before and {load[1]:.1f} after; `python -m "
            f"benchmarks.fidelity.predict --results {run_rel}` prints these tables.",
            "",
        ] + _run_body(doc, run_evs, f" ({layer_ms:g} ms per layer)")
        others.append((run_rel.name, layer_ms, run_evs))
    if runs:
        evs += runs[0][2]          # the summary: the recorded traces and the newest run
    out += fidelity_summary(evs, runs, others)
    return out


def _run_evaluations(run: Path, doc: dict) -> list[dict]:
    """Per cost case of a harness run: its classes calibrated on the source and predicted."""
    from benchmarks.fidelity import predict

    return [predict.evaluate(case, run / "workloads" / f"{case}.txt",
                             *predict.from_results(run, case))
            for case in dict.fromkeys(r["case"] for r in doc["results"].values())]


def _run_body(doc: dict, evs: list[dict], suffix: str = "") -> list[str]:
    """A run's warnings, then a table per cost case."""
    from benchmarks.fidelity import predict

    out = [f"**warning:** {w}" for w in doc.get("warnings", [])]
    out += [""] if out else []
    for ev in evs:
        out += [f"#### {ev['case']}{suffix}", ""] + predict.markdown(ev) + [""]
    return out


def _other_layer_lines(others: list[tuple]) -> list[str]:
    """One line per run at another layer time: the same figures as the headline's."""
    from statistics import mean, median

    out = []
    for name, layer_ms, run_evs in others:
        errs, loo = _calibrated_errors(run_evs)
        ranks = ", ".join(f"{ev['case']} {ev['ranking']['same']}/{ev['ranking']['pairs']}"
                          for ev in run_evs)
        worst = sorted(((abs(r["calibrated_err_pct"]), r["calibrated_err_pct"], r["class"],
                         ev["case"]) for ev in run_evs for r in ev["rows"]
                        if r["class"] != ev["source"]), reverse=True)[:3]
        out.append(
            f"- At {layer_ms:g} ms per layer (run `{name}`), calibrated on Interleaved1F1B: "
            f"{sum(e <= 3.0 for e in errs)} of {len(errs)} within ±3 %, |error| median "
            f"{median(errs):.1f} %, largest "
            + ", ".join(f"{c.removeprefix('Schedule')} {k} {e:+.1f} %" for _, e, c, k in worst)
            + f"; ranking {ranks}; leave-one-out mean {mean(loo):.1f} %, "
            f"{sum(e <= 3.0 for e in loo)} of {len(loo)} within ±3 %.")
        out += _per_runtime_line(run_evs)
    if out:
        out.append(
            "- Why the 1 ms uniform case failed with one calibration for both runtimes: "
            "Interleaved1F1B's traces fit an exchange cost of 2.2 ms (the multi-stage runtime "
            "posts every send and receive apart), 1F1B's own traces 0.7 ms (the single-stage "
            "runtime posts a step's sends and receives in one batch, so its steady state "
            "exchanges with both neighbours every step), and one figure for both put 1F1B at "
            "+17 %. `pipesim calibrate` given a multi-stage and a single-stage class's traces "
            "fits each runtime's launch overheads, exchange cost, latency and prologue apart "
            "(`runtime.runtimes`, docs/model.md). What is left at 1 ms is inside the "
            "multi-stage runtime: Interleaved1F1B's replayed iteration is the same to the ns "
            "with any exchange cost (its critical path crosses no two transfers), so its "
            "traces could not pin the 2.2 ms down, while ZB-V and DualPipeV, whose paths do "
            "cross, paid it. `pipesim calibrate` now measures the multi-stage runtime's "
            "latency and exchange cost on the traces' own transfers (gloo's `gloo:recv` from "
            "the post to the return of the wait; docs/model.md): torch posts each of that "
            "runtime's sends and receives alone and waits for a send only at the end of the "
            "step, and receives that waited with a transfer in flight the other way took no "
            "longer than one-way ones, so the exchange cost is 0 there. Run "
            "`2026-11-26-cpu-gloo-g-1ms` was recorded and fitted that way (15 profiled "
            "iterations): calibrated on Interleaved1F1B + 1F1B, the uniform case has every "
            "class within ±5 % (1F1B +3.9 %, ZB-V -4.3 %, where one calibration for both "
            "runtimes gave 1F1B +17 %); the uneven cases do not (heavy-last InterleavedZeroBubble "
            "-11.2 %, heavy-first ZB-V -9.8 %). At 1 ms a layer this machine (2 CPUs for 4 "
            "ranks) is the limit: one recording's steps spread 8-41 % from fastest to slowest, "
            "the known compute ran 1.05-1.30x its set time depending on the class and the "
            "rank (`busy / known`), and a 7-iteration recording the same day put uniform's "
            "1F1B at +8.8 % with the same calibration. The 2026-11-23 run's calibrations were "
            "fitted before the transfers were measured (its traces were not kept).")
    return out


def _per_runtime_line(evs: list[dict]) -> list[str]:
    """Per case: both runtimes calibrated apart on Interleaved1F1B + 1F1B, and the pair of
    sources with the smallest largest error."""
    parts = []
    for ev in evs:
        pr = ev.get("per_runtime")
        if not pr or not pr["pairs"]:
            continue
        key = f"{pr['source']}+{pr['single']}"
        worst = {p: max(abs(e) for e in errs.values()) for p, errs in pr["pairs"].items()}
        best = min(worst, key=lambda p: (worst[p], p))
        errs = pr["pairs"].get(key, {})
        parts.append(f"{ev['case']} {sum(abs(e) <= 5.0 for e in errs.values())} of {len(errs)} "
                     f"within ±5 % (largest {worst.get(key, 0):.1f} %; best pair "
                     f"{' + '.join(c.removeprefix('Schedule') for c in best.split('+'))}: "
                     f"largest {worst[best]:.1f} %)")
    return [f"  Per runtime (calibrated on Interleaved1F1B + 1F1B): {'; '.join(parts)}."] \
        if parts else []


def _calibrated_errors(evs: list[dict]) -> tuple[list[float], list[float]]:
    """|error| % of every class but the source, calibrated on the source; and leave-one-out's
    |error| % of every (source, other class)."""
    errs, loo = [], []
    for ev in evs:
        errs += [abs(r["calibrated_err_pct"]) for r in ev["rows"]
                 if r["class"] != ev["source"] and "calibrated_err_pct" in r]
        for s, e in ev["loo"].items():
            loo += [abs(v) for t, v in e.items() if t != s]
    return errs, loo


def fidelity_summary(evs: list[dict], runs: list[tuple] = (), others: list[tuple] = ()
                     ) -> list[str]:
    """How far from the targets, over the recorded traces and the newest harness run; each
    harness run's figures beside the others' (same model, another day's load)."""
    from statistics import mean, median

    errs, rel, cases_rank, loo = [], [], [], []
    for ev in evs:
        src = ev["source"]
        for r in ev["rows"]:
            if r["class"] == src or "calibrated_err_pct" not in r:
                continue
            errs.append(abs(r["calibrated_err_pct"]))
            if r["spread_pct"] > 0:
                rel.append(abs(r["calibrated_err_pct"]) / r["spread_pct"])
        rk = ev["ranking"]
        if "pairs" in rk:
            cases_rank.append(f"{rk['same']}/{rk['pairs']}")
        for s, e in ev["loo"].items():
            loo += [abs(v) for t, v in e.items() if t != s]
    if not errs:
        return []
    signed = [r["per_layer_err_pct"] for ev in evs for r in ev["rows"]]
    per_layer = [abs(e) for e in signed]
    side = ("always optimistic" if max(signed) < 0 else
            f"optimistic on {sum(e < 0 for e in signed)} of {len(signed)}")
    scope = (f" (4 ms per layer and pass: the recorded traces and run `{runs[0][0]}`)"
             if runs else "")
    return [
        "### Where this stands",
        "",
        f"- Calibrated on Interleaved1F1B{scope}: {sum(e <= 3.0 for e in errs)} of {len(errs)} "
        f"predicted (class, case) iteration times within ±3 % of the measured median; "
        f"|error| median {median(errs):.1f} %, largest {max(errs):.2f} %; |error| / spread "
        f"median {median(rel):.2f}, {sum(x <= 1.0 for x in rel)} of {len(rel)} inside the "
        "spread.",
        f"- Ranking (pairs whose measured medians differ by > 3 % ordered as measured), per "
        f"table: {', '.join(cases_rank)}.",
        f"- Leave-one-out over every source: mean |error| {mean(loo):.1f} %, "
        f"{sum(e <= 3.0 for e in loo)} of {len(loo)} within ±3 %.",
        f"- From per-layer costs alone: mean |error| {mean(per_layer):.1f} %, {side} (the "
        "built-in system is the ideal machine: no launch overheads, no rendezvous, no "
        "exchange cost).",
    ] + _other_layer_lines(others) + _order_line() + _preset_line() + _run_to_run(runs) \
        + _load_effect() + [
        "- What moved the numbers since run d: (1) the fit. `pipesim calibrate` fitted four "
        "per-rank end times from the preset's figures, which left the exchange cost wherever "
        "the start put it; it now fits every compute action's end (medians over iterations) "
        "plus a quarter of the iteration time's error, from a coarse grid of launch overheads "
        "and exchange costs. On run e's traces, calibrated on Interleaved1F1B: other classes "
        "within ±3 % 15 → 18 of 18, leave-one-out 98 → 121 of 126 (measured at the commits "
        "that changed it). (2) A quiet machine: at load 0.6 the runtime's send / receive posts "
        "take the same time in every class (run f, uniform: median 75–99 µs, p90 144–167 µs), "
        "where run d's loaded machine gave the loop-placed classes a p90 of 0.6–3.6 ms and "
        "the V-shaped ones 0.1–0.25 ms: a calibration then carried one class's load into "
        "another's prediction.",
        "- What a constant cannot carry: gloo's transfers on this machine have a heavy tail. "
        "`python -m benchmarks.fidelity.exchange` (128 B, 300 samples, load 1.0): one-way "
        "median 89 µs (p90 149 µs); a two-way exchange (2 processes post isend + irecv to each "
        "other in one batch) median 201 µs, mean 1174 µs, p90 4.0 ms, 30 % of them 1.5–5 ms; "
        "the batch post alone median 100 µs, p90 3.9 ms; a relay (the middle of 3 processes "
        "receives from one neighbour and sends to the other in one batch, as a stage does) "
        "median 232 µs, mean 619 µs, p90 2.2 ms. The fitted exchange cost is that tail's share "
        "on the source's critical path, so it differs by source (run f, uniform: 0–4 ms). "
        "Rarer and longer stalls do not average out either: LoopedBFS, the one class outside "
        "±3 % in run f (uniform, -3.4 %), measured 493–527 ms, and its slow iterations hold "
        "single stalls of 10–30 ms inside one action's span, beyond its work and any wait "
        "for data (iteration 3: rank 1's 5F1 14.8 ms, then rank 2's 6F1 28.8 ms; iteration "
        "0: rank 0's 0F5, a first-stage forward that waits for nothing, 12.6 ms), which its "
        "schedule, every rank waiting on the chain of one chunk's forwards, passes on whole. "
        "Without the profiler (`--classes ScheduleLoopedBFS --cases uniform --iterations 14 "
        "--no-profile`) the median was 505 ms, so the profiler is not why.",
        "- Tried and reverted (commit c55777d, reverted in 6151294): the runtime's send / "
        "receive posting paid per transfer (`runtime.post_ns`, the median `PP:SEND_*` / "
        "`PP:RECV_*` span) instead of folded into the launch overhead of the kind that moves "
        "the data: on run d's traces calibrated mean |error| 4.83 → 4.74 %, leave-one-out "
        "6.00 → 5.94 %.",
        "- Tried and not kept: an exchange between any two transfers in flight the other way "
        "at one of their ranks (the relay above), not only between the same two ranks. Runs e "
        "and f improved (other classes within ±3 % 18 and 18 of 18, leave-one-out 122 and 123 "
        "of 126), the recorded traces did not (4 of 6, InterleavedZeroBubble -4.2 %; "
        "leave-one-out 36 → 32 of 42): the fitted launch overhead fell to the grid's lowest "
        "value (100 µs) and the exchange cost took its place.",
        "",
    ]


PRESET = REPO / "configs" / "system" / "torch-gloo-cpu.yaml"


def _order_line() -> list[str]:
    """The executed orders of the newest run against pipesim's, read back from its traces."""
    import json

    if not FIDELITY_RUNS:
        return []
    res = json.loads((FIDELITY_RUN / "results.json").read_text())["results"].values()
    order = [r["order_equals_pipesim"] and r.get("order_same_every_iteration", False)
             for r in res if "order_equals_pipesim" in r]
    low = [r["lowered_order_equals_pipesim"] for r in res
           if "lowered_order_equals_pipesim" in r]
    if not order:
        return []
    return [f"- Order (run `{FIDELITY_RUN.name}`): every rank's compute order equals pipesim's "
            f"in {sum(order)} of {len(order)} (class, case) runs, in every profiled iteration; "
            f"with the sends and receives the multi-stage runtime labels, its lowered list "
            f"equals pipesim's early-receive lowering in {sum(low)} of {len(low)}."]


def _preset_line() -> list[str]:
    """The shipped torch-on-gloo preset with no calibration, on the newest run's cases."""
    import json

    from benchmarks.fidelity.cases import CLASSES
    from simulator.system.config import load_system

    if not FIDELITY_RUNS or not PRESET.is_file():
        return []
    doc = json.loads((FIDELITY_RUN / "results.json").read_text())
    system = load_system(PRESET)
    errs = []
    for key, row in doc["results"].items():
        cls, case = key.split("/")
        spec = CLASSES[cls]
        got = simulate(FIDELITY_RUN / "workloads" / f"{case}.txt", spec.pipesim, system,
                       vpp=spec.vpp).makespan_ns / 1e6
        errs.append(100.0 * (got - row["median_ms"]) / row["median_ms"])
    absolute = [abs(e) for e in errs]
    side = ("always optimistic" if max(errs) < 0 else
            f"optimistic on {sum(e < 0 for e in errs)} of {len(errs)}")
    return [f"- From per-layer costs with the shipped preset `configs/system/torch-gloo-cpu.yaml` "
            f"and no calibration (run `{FIDELITY_RUN.name}`): {sum(e <= 3.0 for e in absolute)} "
            f"of {len(errs)} within ±3 %, mean |error| {mean(absolute):.1f} %, largest "
            f"{max(absolute):.1f} %, {side}. The preset carries the runtime's launch overhead, "
            "step prologue / epilogue, rendezvous, two-way exchange cost and stage 0's split "
            "backward as measured on this machine, not the model's own action costs."]


EARLIER_FIT = ("2026-11-23-cpu-gloo-c", "2026-11-23-cpu-gloo-d")


def _load_effect() -> list[str]:
    """One line: the uniform case's medians in the most loaded run against the newest."""
    import json

    if len(FIDELITY_RUNS) < 2:
        return []
    docs = {r: json.loads((r / "results.json").read_text()) for r in FIDELITY_RUNS}
    loaded = max(FIDELITY_RUNS, key=lambda r: docs[r]["loadavg_1min"][0])
    new = FIDELITY_RUN
    if loaded == new:
        return []
    parts = []
    for key, row in docs[new]["results"].items():
        cls, case = key.split("/")
        other = docs[loaded]["results"].get(key)
        if case != "uniform" or other is None:
            continue
        parts.append(f"{cls.removeprefix('Schedule')} {other['median_ms']:.0f} / "
                     f"{row['median_ms']:.0f} ({100 * (other['median_ms'] / row['median_ms'] - 1):+.0f} %)")
    la, ln = docs[loaded]["loadavg_1min"][0], docs[new]["loadavg_1min"][0]
    return [f"- Load: the uniform case's medians at load {la:.1f} (`{loaded.name}`) and "
            f"{ln:.1f} (`{new.name}`), ms: " + ", ".join(parts) + ". Other work on the "
            "machine slows the loop-placed classes most and the V-shaped ones least, so a "
            "loaded run's medians are not comparable with a quiet one's (the harness flags a "
            "run that starts above `--max-load`)."]


def _run_to_run(runs: list[tuple]) -> list[str]:
    """One line: each harness run's calibrated errors and ZB-V's, same model and machine."""
    from statistics import mean, median

    if len(runs) < 2:
        return []
    parts = []
    for name, load, run_evs in runs:
        errs, loo = _calibrated_errors(run_evs)
        zbv = [r["calibrated_err_pct"] for ev in run_evs for r in ev["rows"]
               if r["class"] == "ScheduleZBVZeroBubble" and "calibrated_err_pct" in r]
        fitted = " (calibrations by the earlier fit)" if name in EARLIER_FIT else ""
        parts.append(f"`{name}`{fitted} (load {load[0]:.1f}–{load[1]:.1f}): "
                     f"{sum(e <= 3.0 for e in errs)}"
                     f" of {len(errs)} within ±3 %, |error| median {median(errs):.1f} %, "
                     f"leave-one-out mean {mean(loo):.1f} %, ZB-V "
                     + " / ".join(f"{e:+.1f}" for e in zbv) + " %")
    return ["- Run to run (same model, same machine, calibrated on Interleaved1F1B): "
            + "; ".join(parts) + "."]


def memory_section() -> list[str]:
    """Per-rank peak memory against torch's allocator: the newest cross-validation of the memory
    calibration (benchmarks/memory/crossval.py), from committed data only."""
    import json

    runs = sorted((REPO / "benchmarks" / "results").glob("memory-*-crossval/crossval.json"))
    if not runs:
        return []
    doc = json.loads(runs[-1].read_text())
    before_path = runs[-1].parent / "crossval-before.json"
    before = json.loads(before_path.read_text()) if before_path.is_file() else {}
    rel = runs[-1].parent.relative_to(REPO)
    out = ["## Memory: per-rank peak against torch's allocator", "",
           "torch 2.13 (CPU, gloo, P = 4), the 7 torch classes, M = 8 and 12, each rank's peak "
           "from the profiler's memory events (`benchmarks/memory/`); the model shapes: 16 "
           "pre-LN MLP blocks (`uniform`, `h128`, `heavy-last`, `heavy-first`) and 16 "
           "pre-LN GPT layers with grouped-query attention (`transformer-gqa`: h = 256, 4 "
           "query heads, 2 K/V heads, s = 128, MLP 4h, 1-byte dropout masks). Calibrated on "
           "one class's traces (M = 8) of a shape as `pipesim calibrate --memory` fits them "
           "(the memory section; the runtime's retention the traces show; where the class "
           "has no split backward, what an I keeps until its W from the forward's recorded "
           "operators), every class of that shape is predicted at both M; the training data "
           "handed to the first stage is left out on both sides. `return_outputs` is the "
           "training loop's choice: calibrated and predicted with the same value, a table "
           f"for each (`{rel}`, `python -m benchmarks.memory.crossval`).", ""]
    for key in ("true", "false"):
        s = doc.get(key)
        if not s:
            continue
        w = s["worst_cell"]
        line = (f"- **return_outputs={key.capitalize()}**: {s['pairs_within']} of "
                f"{s['pairs']} (calibrated on, predicted) pairs within ±{s['tolerance_pct']:g} % "
                f"on every rank, shape and M; worst cell {w['abs_error_pct']:.1f} % "
                f"(calibrated on {w['calibrated_on']}, predicted {w['predicted']})")
        b = before.get(key)
        if b:
            bw = b["worst_cell"]
            line += (f"; before the retention and operator rules {b['pairs_within']} of "
                     f"{b['pairs']}, worst {bw['abs_error_pct']:.1f} % (calibrated on "
                     f"{bw['calibrated_on']}, predicted {bw['predicted']})")
        ranked = sum(g for g, _ in s["ranking"].values())
        pairs = sum(t for _, t in s["ranking"].values())
        own = [r for r in s["rows"] if r["schedule"] == r["calibrated_on"]
               and r["microbatches"] == 8]
        own_worst = max(own, key=lambda r: max(map(abs, r["error_pct"])))
        out.append(line + f"; class pairs ranked by their largest rank as measured: "
                   f"{ranked} of {pairs}; each class against its own traces (M = 8): "
                   f"largest |error| {max(map(abs, own_worst['error_pct'])):.2f} % "
                   f"({own_worst['calibrated_on']}, {own_worst['shape']}).")
    out.append("")
    short = {"ScheduleGPipe": "GPipe", "Schedule1F1B": "1F1B",
             "ScheduleInterleaved1F1B": "I1F1B", "ScheduleLoopedBFS": "LBFS",
             "ScheduleInterleavedZeroBubble": "IZB", "ScheduleZBVZeroBubble": "ZBV",
             "ScheduleDualPipeV": "DPV"}
    classes = list(short)
    for key in ("true", "false"):
        s = doc.get(key)
        if not s:
            continue
        out += [f"Worst |error| % per pair, return_outputs={key.capitalize()} (row: calibrated "
                "on; column: predicted; ranked: class pairs ranked as measured, pairs measured "
                "within 1 % left out):", "",
                "| calibrated on | " + " | ".join(short[c] for c in classes) + " | ranked |",
                "|---|" + "---:|" * len(classes) + "---:|"]
        for on in classes:
            vals = [s["cells"].get(f"{on}|{c}") for c in classes]
            g, t = s["ranking"].get(on, (0, 0))
            out.append(f"| {short[on]} | " + " | ".join(
                "–" if v is None else f"{v:.1f}" for v in vals) + f" | {g}/{t} |")
        out.append("")
    return out + shape_only_section()


def shape_only_section() -> list[str]:
    """The transformer case predicted from its shape alone (benchmarks/memory/shape_only.py),
    from committed data only."""
    import json

    runs = sorted((REPO / "benchmarks" / "results").glob("memory-*-transformer/shape-only.json"))
    if not runs:
        return []
    doc = json.loads(runs[-1].read_text())
    rel = runs[-1].parent.relative_to(REPO)
    out = ["### From the model's shape alone (no traces): the transformer case", "",
           "16 Megatron-style pre-LN GPT layers (h = 256, 4 heads, s = 128, b = 1, MLP 4h, "
           "dropout 0.1, attention written out: no flash attention), fp32, SGD, P = 4, the 7 "
           f"torch classes, M = 8 and 12 (`{rel}`). pipesim is given what `pipesim generate "
           "--model gpt --no-flash-attention --precision fp32` writes for that shape (its "
           "transformer rows: the harness's model has no embedding or LM head), fp32 weights "
           "and SGD, and torch's runtime rules (`--p2p torch`); nothing is fitted. Assumed, as "
           "the run's `activation_from_shape` warning says: Korthikanti et al.'s stash per "
           "layer in the precision given, dropout masks 1 B an element; a split backward's I "
           "keeps its weights' output gradients (`split_backward_bytes`); the working memory "
           "inside an action (`f/b/i/w_transient_bytes`) as eager PyTorch autograd needs it "
           "for such a layer, each new weight gradient added to `.grad`."]
    layer = runs[-1].parent / "layer-transients.json"
    if layer.is_file():
        rows = json.loads(layer.read_text())["rows"]
        exact = {k: sum(r["measured"][k] == r["counted"][k] for r in rows) for k in "FBIW"}
        ratio = {k: [r["measured"][k] / r["counted"][k] for r in rows] for k in "IW"}
        flash = sum(r["flash"] for r in rows)
        out += ["", f"One layer alone (`benchmarks/memory/layer_transients.py`, {len(rows)} "
                f"shapes: the case's, then s, a, the MLP's width, h and b changed one at a "
                f"time, {flash} of them with flash attention (`scaled_dot_product_attention`)): "
                f"the counted F equals the allocator's to the byte on {exact['F']} (not at "
                f"b = 2, where the written-out attention copies Q, K and V), B on "
                f"{exact['B']}; I and W are upper-bound rules, measured "
                f"{min(ratio['I']):.2f}x-{max(ratio['I']):.2f}x and "
                f"{min(ratio['W']):.2f}x-{max(ratio['W']):.2f}x of the count."]
    out.append("")
    # the grouped-query case, run with the cross-validation (its harness run: return_outputs
    # True)
    gqa = sorted((REPO / "benchmarks" / "results").glob("memory-*-crossval/shape-only.json"))
    extra = json.loads(gqa[-1].read_text()) if gqa else {"summary": {}, "rows": []}
    for shape, s in {**doc["summary"], **extra["summary"]}.items():
        rank = ", ".join(f"M = {k[1:]}: {g}/{t}" for k, (g, t) in s["ranking"].items())
        above = 100.0 * (s["stash_measured_bytes"] / s["stash_counted_bytes"] - 1)
        what = ("dropout as `F.dropout` runs it on the CPU: a 4-byte scaled noise tensor "
                "where Megatron's count has a 1-byte mask" if shape == "transformer" else
                "grouped-query attention, 4 query heads and 2 K/V heads, each K/V head "
                "repeated for its group before the scores (copies the count does not hold), "
                f"1-byte masks; `pipesim generate --kv-heads 2`; "
                f"`{gqa[-1].parent.relative_to(REPO)}`" if shape == "transformer-gqa" else
                "dropout through `torch.native_dropout`: a 1-byte mask, as on CUDA")
        what += (f"; a layer's stash measured alone {s['stash_measured_bytes']:,} B, counted "
                 f"{s['stash_counted_bytes']:,} B ({above:+.1f} %)")
        out.append(f"- **Shape only, {shape}** ({what}): {s['within']} of {s['ranks']} ranks "
                   f"within ±{s['tolerance_pct']:g} % (median {s['median_error_pct']:+.1f} %, "
                   f"worst {s['worst_error_pct']:+.1f} %); class pairs ranked as measured: "
                   f"{rank}.")
    out += ["", "| shape | M | schedule | measured (KiB) | predicted (KiB) | error % |",
            "|---|---:|---|---|---|---|"]
    for r in doc["rows"] + extra["rows"]:
        kib = " / ".join(f"{b / 1024:.0f}" for b in r["measured"])
        pkib = " / ".join(f"{b / 1024:.0f}" for b in r["predicted"])
        err = " / ".join(f"{e:+.1f}" for e in r["error_pct"])
        out.append(f"| {r['shape']} | {r['microbatches']} | {r['schedule']} | {kib} | {pkib} "
                   f"| {err} |")
    return out + [""]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true",
                        help="exit 1 if docs/validation.md differs from what would be written")
    args = parser.parse_args()
    text = build()
    if args.check:
        current = OUT.read_text() if OUT.is_file() else ""
        if current != text:
            print(f"{OUT} is out of date; run python3 docs/make_validation.py", file=sys.stderr)
            return 1
        return 0
    OUT.write_text(text)
    print(f"wrote {OUT}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
