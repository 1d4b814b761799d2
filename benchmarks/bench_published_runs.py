"""pipesim against published, measured GPU training runs (../shared/published-runs/runs.json).

Each run is tried as a user would, from its launch settings alone, nothing tuned: the workload
generated from the run's shape, precision and sequence parallelism, with a whole-layer
``stage_layers:`` split (layers / (pp x vpp) per chunk, the remainder on the first chunks), then
``pipesim run FILE --layout model -s SCHEDULE --pp P --vpp V -m MICROBATCHES --recompute R
--system configs/system/<gpu>.yaml --engine evaluator``. Selective recompute is generated with
``selective_recompute`` (the attention core's forward recomputed in the backward, its scores
not kept) and run with ``--recompute none`` (the rest of the layer keeps its activations).
Where runs.json launches a run differently from how its authors' own scripts ran it, the
scripts' settings win (benchmarks/data/published-runs-corrections.json: Narayanan's micro-batch
sizes, interleaving and DDP from Megatron-LM's examples/sc21/run_table_1.sh); ``--as-given``
runs the file as it is.

    python benchmarks/bench_published_runs.py                  # the kernel-level model
    python benchmarks/bench_published_runs.py --compute flat   # one 0.50 efficiency (before)
    python benchmarks/bench_published_runs.py --record results/DATE-published-runs-after.json
    python benchmarks/bench_published_runs.py --as-given --label as-given \
        --record results/DATE-published-runs-as-given.json

Prints predicted against measured per run, mean / median / worst |error| per table, the size
trend (the pairs of runs more than 3 % apart in measured TFLOP/s per GPU: how many are
ordered as measured), and the share of each predicted time that is tensor- and data-parallel
communication and Megatron DDP's optimizer step (the run again with each made free: the time it
saves; see made_free_shares).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import statistics
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
# --simulator-from: the pipesim to measure (another checkout, for a before/after); this one by
# default
_FROM = next((a.split("=", 1)[1] for a in sys.argv if a.startswith("--simulator-from=")), None)
sys.path.insert(0, _FROM or str(REPO))

DEFAULT_RUNS = REPO.parent / "shared" / "published-runs" / "runs.json"
# where a run's launch differs from how its source's authors ran it: their scripts' settings
CORRECTIONS = REPO / "benchmarks" / "data" / "published-runs-corrections.json"
# PyTorch DistributedDataParallel's bucket (bucket_cap_mb 25 MiB) of fp16 gradients, in
# parameters: Megatron-LM 2021's --DDP-impl torch wraps the fp16 model in it
TORCH_DDP_BUCKET_PARAMS = 25 * 2**20 // 2
SCHEDULES = {"1f1b": "1f1b", "interleaved-1f1b": "interleaved-1f1b", "zb-h1": "zb-h1",
             "zb-h2": "zb-h2", "zb-v": "zb-v", "zb-greedy": "zb-greedy"}
FLAT_EFFICIENCY = 0.50     # gpus.py's A100 constant: the model before kernels


def stage_split(layers: int, chunks: int) -> list[int]:
    base, extra = divmod(layers, chunks)
    return [base + (1 if i < extra else 0) for i in range(chunks)]


def workload_text(run: dict, compute: str) -> str:
    from simulator.workload.generator import ModelSpec, ParallelSpec, render
    from simulator.workload.gpus import gpu_preset

    # Megatron-LM ties the LM head to the embedding unless the launch says otherwise
    tied = "--untie-embeddings-and-output-weights" not in run.get("megatron_args", "")
    # grouped-query attention where the run states its K/V heads (Llama 3's 8 groups)
    model = ModelSpec(run["model"], run["layers"], run["hidden"], run["heads"], run["seq"],
                      run["micro_batch"], ffn=run["ffn"], vocab=run["vocab"],
                      kv_heads=run.get("kv_heads"), tied_embeddings=tied)
    ga = run["global_batch"] // (run["micro_batch"] * run["dp"])
    # an FP8 run: bf16 with Transformer Engine's FP8 linears, in its recipe
    fp8 = run.get("fp8_recipe", "delayed") if run["precision"] == "fp8" else ""
    # context parallelism where the run has it (a pipesim without it: refused below)
    kw = dict(tp=run["tp"], pp=run["pp"], vpp=run["vpp"], ga=ga, dp=run["dp"],
              **({"cp": run["cp"]} if run.get("cp", 1) > 1 else {}),
              sequence_parallel=run["sequence_parallel"], flash_attention=run["flash_attention"],
              precision="bf16" if fp8 else run["precision"], **({"fp8": fp8} if fp8 else {}))
    if 0 in run.get("stage_layers", ()):
        # end chunks of no layers (the embedding alone, the LM head alone): the split is checked
        # against the rows they hold
        kw["stage_layers"] = tuple(run["stage_layers"])
    # the launch's choices among Megatron-LM's kernels (its weight-gradient accumulation and
    # the main gradients' dtype, the vocabulary's padding, RoPE), as --megatron-args reads them
    launch = megatron_launch(run)
    if launch is not None and hasattr(launch, "code_fields"):
        kw.update(launch.code_fields())
    try:
        par = ParallelSpec(**kw, selective_recompute=run["recompute"] == "selective")
    except TypeError:   # a pipesim without selective recompute: run as none
        par = ParallelSpec(**kw)
    eff = FLAT_EFFICIENCY if compute == "flat" else None
    text = render(model, par, gpu_preset(run["gpu"]), "model", eff)
    header, rest = text.split("\n", 1)
    # a run whose source states its split (e.g. one layer fewer on the first and last stage)
    # carries it as stage_layers; otherwise whole layers evenly, the first chunks one more
    layers = run.get("stage_layers") or stage_split(run["layers"], run["pp"] * run["vpp"])
    split = " ".join(map(str, layers))
    return f"{header} stage_layers: {split}\n{rest}"


def without_comm(text: str, columns: tuple[int, ...]) -> str:
    """``text`` with the collectives in ``columns`` (3: forward, 6: input grad, 9: weight grad,
    the type column of each) made free: NONE, 0 bytes."""
    lines = text.split("\n")
    out = lines[:2]
    for line in lines[2:]:
        f = line.split("\t")
        if len(f) >= 12:
            for c in columns:
                f[c], f[c + 1] = "NONE", "0"
        out.append("\t".join(f))
    return "\n".join(out)


def model_flops(run: dict) -> float:
    """The source's FLOPs per iteration (runs.json's flops_formulas)."""
    B, s, l, h, V = run["global_batch"], run["seq"], run["layers"], run["hidden"], run["vocab"]
    return 96 * B * s * l * h * h * (1 + s / (6 * h) + V / (16 * l * h))


# the run options of a Megatron-LM launch's data parallelism, as pipesim's flags
_DDP_FLAG = {"megatron_ddp": "--megatron-ddp", "use_distributed_optimizer":
             "--use-distributed-optimizer", "overlap_grad_reduce": "--overlap-grad-reduce",
             "overlap_param_gather": "--overlap-param-gather",
             "tp_comm_overlap": "--tp-comm-overlap", "ddp_bucket_size": "--ddp-bucket-size",
             "grad_reduce_dtype": "--grad-reduce-dtype", "fp16_loss_scale": "--fp16-loss-scale",
             "optimizer_post_validation": "--optimizer-post-validation"}
# iterations a run whose iterations overlap (post-validation) is simulated for: the first
# holds the pipeline's fill, the steady state shows from the second (iteration_ns)
OVERLAPPED_ITERATIONS = 3


def megatron_launch(run: dict):
    """The run's ``megatron_args`` as pipesim's ``--megatron-args`` reads them (a
    LaunchSettings), or None for a run without them or a pipesim without the reader."""
    if not run.get("megatron_args"):
        return None
    try:
        from simulator.workload.inputs.megatron_args import megatron_input
    except ImportError:
        return None
    from simulator.errors import ConfigError

    gpus = run.get("gpus") or run["tp"] * run["pp"] * run["dp"]
    text = run["megatron_args"]
    try:
        return megatron_input(text, run["id"], gpus).launch
    except ConfigError:
        # the DDP flags do not depend on the pipeline split: a list whose split pipesim
        # refuses for its layer count (the run states its own stage_layers) is read for them
        # without its pipeline flags (one stage)
        for flag in ("--num-layers-per-virtual-pipeline-stage", "--pipeline-model-parallel-size"):
            text = _without_flag(text, flag)
        return megatron_input(text, run["id"], gpus // run["pp"]).launch


def schedule_option_args(run: dict) -> tuple[str, ...]:
    """The schedule's options the run's launch sets: the zero-bubble fork's pending backwards
    (``--zero-bubble-max-pending-backward``) as zb-greedy's ``max_pending``."""
    if run["schedule"] != "zb-greedy":
        return ()
    launch = megatron_launch(run)
    pending = launch.zero_bubble_max_pending if launch is not None else None
    return ("-O", f"max_pending={pending}") if pending else ()


def megatron_ddp_args(run: dict) -> tuple[str, ...]:
    """The DDP flags a launch of the run's ``megatron_args`` runs with, as pipesim's
    ``--megatron-args`` reads them (Megatron-LM's DDP; the overlaps, the distributed optimizer
    and the reduction's dtype as the arguments set them, e.g. ``--fp16`` without
    ``--accumulate-allreduce-grads-in-fp32`` reduces in fp16): the one place the benchmarks
    take a run's DDP from. None for a run without ``megatron_args`` or a pipesim without
    Megatron's DDP."""
    launch = megatron_launch(run)
    if launch is None:
        return ()
    from simulator.cli.model_inputs import ddp_option_values

    values = ddp_option_values(launch)
    # the distributed optimizer shards a state counted by the weights' dtype, which the launch
    # states (--bf16 / --fp16: bf16 weights with fp32 main gradients; else fp32); the other
    # runs keep the system's bytes per parameter, as they were first recorded
    out: list[str] = ["--param-dtype", "bf16" if launch.precision in ("bf16", "fp16")
                      else "fp32"] if values.get("use_distributed_optimizer") else []
    for key, flag in _DDP_FLAG.items():
        value = values.get(key)
        if value is True:
            out.append(flag)
        elif value not in (None, False):
            out += [flag, str(value)]
    return tuple(out)


def _without_flag(text: str, flag: str) -> str:
    """``text`` without ``flag`` and its value."""
    toks = text.split()
    out, skip = [], False
    for tok in toks:
        if skip:
            skip = False
        elif tok == flag:
            skip = True
        else:
            out.append(tok)
    return " ".join(out)


def ddp_assumption(run: dict) -> str | None:
    """The assumptions line of the DDP a run is launched with."""
    flags = megatron_ddp_args(run)
    if not flags:
        return None
    return ("data parallelism as the run's Megatron-LM launch: " + " ".join(flags)
            + " (from its megatron_args; without --overlap-grad-reduce every gradient is "
            "reduced after the rank's last backward, as Megatron's local DDP of 2021 did)")


def megatron_p2p_args(run: dict) -> tuple[str, ...]:
    """How Megatron-LM's code of the run's source exchanges activations between stages.

    Korthikanti's and Narayanan's runs (Megatron-LM of 2021-22, p2p_communication.py at
    6985e58): ``_communicate`` batches every exchange and synchronizes, on both schedules
    (``--p2p batched``), and with ``scatter_gather_tensors_in_pipeline`` (on by default) splits
    each over the stage's TP ranks and all-gathers it on arrival, for activations replicated
    over TP (no sequence parallelism). Later code (the zero-bubble fork at 475e062,
    Megatron-Core r0.8): the non-interleaved 1F1B still batches (``batch_p2p_comm``, its
    default), the interleaved one overlaps (``overlap_p2p_comm``, its default) and the
    zero-bubble runtime posts its own isend / irecv (``--p2p async``); their runs split
    nothing (TP 1, or sequence parallelism)."""
    if run["id"].startswith(("kort-", "nara-")):
        return ("--p2p", "batched") + (() if run["sequence_parallel"]
                                       else ("--p2p-scatter-gather",))
    return ("--p2p", "batched" if run["schedule"] == "1f1b" else "async")


def run_pipesim(path: Path, run: dict, extra: tuple[str, ...] = ()) -> dict:
    ga = run["global_batch"] // (run["micro_batch"] * run["dp"])
    recompute = "full" if run["recompute"] == "full" else "none"
    ddp = megatron_ddp_args(run)
    args = ["run", str(path), "--layout", "model", "-s", SCHEDULES[run["schedule"]],
            "--pp", str(run["pp"]), "--vpp", str(run["vpp"]), "-m", str(ga),
            "--recompute", recompute, "--system", str(REPO / "configs" / "system" /
                                                      f"{run['gpu']}.yaml"),
            "--engine", "evaluator", *megatron_p2p_args(run), "--max-actions", "0",
            "--json", "-", *schedule_option_args(run), *ddp, *extra]
    if "--optimizer-post-validation" in ddp:
        args += ["--iterations", str(OVERLAPPED_ITERATIONS)]
    return invoke(args)


def invoke(args: list[str]) -> dict:
    """``pipesim ARGS`` in this process: its exit code, its ``--json -`` output, its last
    error line and the arguments."""
    from simulator.cli.main import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(args)
        except SystemExit as e:
            code = e.code if isinstance(e.code, int) else 1
    data = json.loads(out.getvalue()) if out.getvalue().strip() else {}
    return {"exit": code, "json": data, "error": err.getvalue().strip().splitlines()[-1:],
            "args": args}


def assumptions(run: dict) -> list[str]:
    """The run's assumptions (runs.json's), the DDP and the point-to-point exchanges it is
    launched with."""
    extra = ddp_assumption(run)
    p2p = ("point-to-point as Megatron-LM's code of the source exchanges it: "
           + " ".join(megatron_p2p_args(run)) + " (bench_published_runs.megatron_p2p_args)")
    return list(run.get("assumptions", ())) + ([extra] if extra else []) + [p2p]


STEP_FREE = ("--set", "memory.bandwidth_gbs=0")   # HBM unpriced: Megatron's optimizer step free


def internal_errors(rows: list[dict]) -> list[dict]:
    """The runs pipesim failed on with an internal error (exit 70: a bug or a broken install,
    never a prediction), each said on stderr: a benchmark with any records nothing."""
    bad = [r for r in rows if r.get("exit") == 70]
    for r in bad:
        print(f"{r['id']}: {r.get('error_text', 'internal error')}", file=sys.stderr)
    if bad:
        print(f"{len(bad)} run(s) ended in an internal error: nothing recorded", file=sys.stderr)
    return bad


def iteration_ns(data: dict) -> float:
    """A run's predicted iteration time (ns) from its JSON: the steady state where the
    iterations overlap (run_pipesim runs them OVERLAPPED_ITERATIONS), else the makespan."""
    return data.get("steady_iteration_ns") or data["makespan_ns"]


def made_free_shares(text: str, path: Path, run: dict, tmp: Path, full: float) -> dict:
    """The share of the predicted time ``full`` (ns) that each cost class takes: the run again
    with it made free. tp: the forward and input-gradient collectives; step: Megatron DDP's
    optimizer step over HBM; dp: the data-parallel reduction (the weight-gradient collectives
    made free, which also drops the step, whose parameters Megatron's DDP counts from those
    rows: the step's own share taken off)."""
    saved = {}
    for what, cols in (("tp", (3, 6)), ("dp", (9,))):
        free = tmp / f"{run['id']}-no-{what}.txt"
        free.write_text(without_comm(text, cols))
        other = run_pipesim(free, run)
        if other["exit"] == 0:
            saved[what] = (full - iteration_ns(other["json"])) / full
    if megatron_ddp_args(run):
        other = run_pipesim(path, run, STEP_FREE)
        if other["exit"] == 0:
            saved["step"] = (full - iteration_ns(other["json"])) / full
            if "dp" in saved:
                saved["dp"] -= saved["step"]
    return saved


def comm_share(data: dict) -> dict:
    """Exposed TP and DP communication as shares of the makespan, where the summary has them."""
    share = {}
    ms = data.get("makespan_ns") or 0
    for key in ("exposed_tp_ns", "exposed_dp_ns"):
        if key in data and ms:
            share[key] = data[key] / ms
    return share


def corrected(run: dict, corrections: dict) -> dict:
    """``run`` launched as its source's authors' scripts launch it (``corrections``, the
    benchmark's published-runs-corrections.json): their micro-batch size, their interleaving
    (Megatron-LM's interleaved 1F1B at ``layers_per_virtual_stage`` layers a chunk) and their
    DDP (PyTorch's, overlapped and bucketed; or Megatron's local one, after the backward), the
    megatron_args and assumptions to match. A run without a correction comes back unchanged."""
    fix = corrections.get("runs", {}).get(run["id"])
    if not fix:
        return run
    out = dict(run)
    args = _without_flag(run["megatron_args"], "--micro-batch-size").split()
    args += ["--micro-batch-size", str(fix["micro_batch"])]
    out["micro_batch"] = fix["micro_batch"]
    said = [f"micro-batch size {fix['micro_batch']}"]
    per = fix.get("layers_per_virtual_stage")
    if per:
        out["vpp"] = run["layers"] // (run["pp"] * per)
        out["schedule"] = "interleaved-1f1b"
        args += ["--num-layers-per-virtual-pipeline-stage", str(per)]
        said.append(f"interleaved 1F1B, {per} layer(s) a virtual stage (vpp {out['vpp']})")
    if fix.get("ddp_impl") == "torch":
        args += ["--overlap-grad-reduce", "--ddp-bucket-size", str(TORCH_DDP_BUCKET_PARAMS)]
        said.append("PyTorch DDP: gradients all-reduced in 25 MiB buckets of fp16 during the "
                    "last microbatch's backward")
    elif fix.get("ddp_impl") == "local":
        said.append("Megatron's local DDP: one all-reduce after the backward")
    if fix.get("grad_accumulation_fusion") is False:
        args.append("--no-gradient-accumulation-fusion")
        said.append("no gradient accumulation fusion (the code predates it): each weight "
                    "gradient written in fp16 and added into the fp16 gradient by autograd")
    out["megatron_args"] = " ".join(args)
    source = next((s for k, s in corrections.get("sources", {}).items()
                   if run["id"].startswith(k)), "the source's launch scripts")
    out["assumptions"] = [a for a in run.get("assumptions", ()) if a not in fix["replaces"]] + [
        "as its authors' script runs it (" + source + "): " + "; ".join(said)
        + " (in place of runs.json's " + "; ".join(f"'{a}'" for a in fix["replaces"]) + ")"]
    return out


def evaluate(runs_path: Path, compute: str, corrections: dict | None = None) -> list[dict]:
    runs = [corrected(run, corrections or {}) for run in
            json.loads(runs_path.read_text())["runs"]]
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for run in runs:
            path = Path(tmp) / f"{run['id']}.txt"
            text = workload_text(run, compute)
            path.write_text(text)
            res = run_pipesim(path, run)
            shares = (made_free_shares(text, path, run, Path(tmp), iteration_ns(res["json"]))
                      if res["exit"] == 0 else {})
            row = {"id": run["id"], "group": run["group"], "exit": res["exit"],
                   "error": res["error"], "measured": run["measured"],
                   "assumptions": assumptions(run)}
            data = res["json"]
            if res["exit"] == 0 and data:
                t = iteration_ns(data) / 1e9
                row["predicted_time_s"] = t
                row["bubble_ratio"] = data.get("bubble_ratio")
                row["tp_share"] = shares.get("tp")
                row["dp_share"] = shares.get("dp")
                row["step_share"] = shares.get("step")
                if "iteration_time_s" in run["measured"]:
                    row["metric"] = "iteration_time_s"
                    row["predicted"] = t
                else:
                    row["metric"] = "tflops_per_gpu"
                    row["predicted"] = model_flops(run) / (t * run["gpus"]) / 1e12
                m = run["measured"][row["metric"]]
                row["error"] = (row["predicted"] - m) / m
            elif res["exit"] == 4:
                row["predicted"] = None
                row["error_text"] = "out of memory"
            rows.append(row)
    return rows


def _pct(x) -> str:
    return "-" if x is None else f"{100 * x:.1f} %"


def _stats(errs: list[float]) -> tuple[float, float, float]:
    a = [abs(e) for e in errs]
    return statistics.mean(a), statistics.median(a), max(a)


def ordered_pairs(series: list[dict], measured, predicted) -> tuple[int, int, list[str]]:
    """Of the pairs of ``series`` whose ``measured(row)`` differ by more than 3 %: how many
    ``predicted(row)`` orders the same way, how many there are, and the others' ids."""
    ok, total, wrong = 0, 0, []
    for i, a in enumerate(series):
        for b in series[i + 1:]:
            ma, mb = measured(a), measured(b)
            if abs(ma - mb) / min(ma, mb) <= 0.03:
                continue
            total += 1
            if (ma < mb) == (predicted(a) < predicted(b)):
                ok += 1
            else:
                wrong.append(f"{a['id']} / {b['id']}")
    return ok, total, wrong


def size_trend(rows: list[dict], runs: list[dict]) -> tuple[int, int, list[str]]:
    """Pairs of Narayanan's runs more than 3 % apart in measured TFLOP/s per GPU: how many the
    prediction orders as measured."""
    nara = [r for r in rows if r["id"].startswith("nara") and r.get("predicted") is not None]
    return ordered_pairs(nara, lambda r: r["measured"]["tflops_per_gpu"],
                         lambda r: r["predicted"])


TABLES = (("kort", "Korthikanti Table 5 (iteration time)"),
          ("nara", "Narayanan Table 1 (TFLOP/s per GPU)"))


def summarize(rows: list[dict]) -> dict:
    """Per table: mean / median / worst |error| and how many runs were not predicted; the
    size trend over Narayanan's table."""
    out = {}
    for prefix, _name in TABLES:
        errs = [r["error"] for r in rows if r["id"].startswith(prefix)
                and r.get("predicted") is not None]
        failed = sum(1 for r in rows if r["id"].startswith(prefix) and r.get("predicted") is None)
        mean, med, worst = _stats(errs) if errs else (None, None, None)
        out[prefix] = {"runs": len(errs), "not_predicted": failed, "mean": mean, "median": med,
                       "worst": worst}
    ok, total, wrong = size_trend(rows, [])
    out["size_trend"] = {"ordered": ok, "pairs": total, "misordered": wrong}
    return out


def report(rows: list[dict], compute: str) -> str:
    lines = [f"compute model: {compute}", "",
             "| run | measured | predicted | error | bubble | TP comm | DP comm | step |",
             "|---|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        metric = "s" if r["id"].startswith("kort") else "TFLOP/s"
        m = next(iter(r["measured"].values()))
        if r.get("predicted") is None:
            why = r.get("error_text") or f"exit {r['exit']}: {' '.join(r['error'])}"
            lines.append(f"| {r['id']} | {m} {metric} | {why} | - | - | - | - | - |")
            continue
        lines.append(f"| {r['id']} | {m} {metric} | {r['predicted']:.2f} {metric} | "
                     f"{100 * r['error']:+.1f} % | {100 * (r['bubble_ratio'] or 0):.1f} % | "
                     f"{_pct(r.get('tp_share'))} | {_pct(r.get('dp_share'))} | "
                     f"{_pct(r.get('step_share'))} |")
    lines.append("")
    lines.append("assumptions:")
    for r in rows:
        for a in r.get("assumptions", ()):
            lines.append(f"  {r['id']}: {a}")
    lines.append("")
    summary = summarize(rows)
    for prefix, name in TABLES:
        t = summary[prefix]
        if t["runs"]:
            lines.append(f"{name}: mean |error| {100 * t['mean']:.1f} %, median "
                         f"{100 * t['median']:.1f} %, worst {100 * t['worst']:.1f} % over "
                         f"{t['runs']} runs"
                         + (f"; {t['not_predicted']} not predicted" if t["not_predicted"]
                            else ""))
    tr = summary["size_trend"]
    lines.append(f"size trend (Narayanan, pairs > 3 % apart): {tr['ordered']} of {tr['pairs']} "
                 "ordered as measured"
                 + (f"; misordered: {', '.join(tr['misordered'])}" if tr["misordered"] else ""))
    return "\n".join(lines)


def _commit() -> str:
    import subprocess

    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO,
                              capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def main(argv: list[str] | None = None) -> int:
    import datetime

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--runs", type=Path, default=DEFAULT_RUNS, help="runs.json")
    ap.add_argument("--compute", choices=("kernel", "flat", "both"), default="kernel",
                    help="kernel: the per-op model; flat: one 0.50 efficiency for every op "
                         "(the model before); both")
    ap.add_argument("--simulator-from", metavar="CHECKOUT", default=None,
                    help="measure the pipesim of another checkout (give it as "
                         "--simulator-from=PATH), e.g. the base commit's for a before figure")
    ap.add_argument("--record", type=Path, default=None,
                    help="write the rows and summaries as JSON here (docs/make_validation.py "
                         "reads the newest benchmarks/results/*-published-runs-{before,after}"
                         ".json)")
    ap.add_argument("--as-given", action="store_true",
                    help="run runs.json's launches as the file gives them, without "
                         "benchmarks/data/published-runs-corrections.json (the settings of the "
                         "sources' own launch scripts where the file assumed others)")
    ap.add_argument("--label", default="after", help="what the record is (before, after)")
    ap.add_argument("--commit", default=None,
                    help="the commit to record (default: this checkout's HEAD; give the other "
                         "checkout's with --simulator-from)")
    args = ap.parse_args(argv)
    if not args.runs.is_file():
        print(f"bench_published_runs: --runs: no file {args.runs}", file=sys.stderr)
        return 2
    models = ("kernel", "flat") if args.compute == "both" else (args.compute,)
    doc = {"date": datetime.date.today().isoformat(), "label": args.label,
           "commit": args.commit or _commit(),
           "runs_file": "../shared/published-runs/runs.json", "models": {}}
    corrections = {} if args.as_given else json.loads(CORRECTIONS.read_text())
    if corrections:
        doc["corrections_file"] = str(CORRECTIONS.relative_to(REPO))
    for compute in models:
        rows = evaluate(args.runs, compute, corrections)
        print(report(rows, compute))
        if internal_errors(rows):
            return 1
        print()
        doc["models"][compute] = {"rows": rows, "summary": summarize(rows)}
    if args.record:
        args.record.write_text(json.dumps(doc, indent=1) + "\n")
        print(f"wrote {args.record}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
