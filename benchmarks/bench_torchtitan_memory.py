"""Peak memory of torchtitan's own published Llama 3.1 8B runs, predicted from their jobs.

    python benchmarks/bench_torchtitan_memory.py [--record results/DATE-torchtitan-memory.json]

The runs: torchtitan's `benchmarks/llama3_h100_202412_torchtitan.md` (pytorch/torchtitan,
measured by the torchtitan team at torchtitan 9dec370, torch 1963fc8, December 2024), Table 1
and Table 3, the rows without torch.compile and Float8: Llama 3.1 8B, FSDP over 8 and over 128
GPUs, local batch 2, sequence 8192 (the 8B job's), selective activation checkpointing by op
(the job's `selective_ac_option = 'op'`). Each job is written as the torchtitan TOML it ran
and predicted with `pipesim run --torchtitan JOB --gpus N` on the H100 system file.

What is compared, and what is not:

- **Memory** only. The source reads torch's `max_memory_reserved` (its logger prints
  `max_reserved_gib`): the caching allocator's reserved peak, at or above the allocated peak
  pipesim models (blocks kept for reuse, fragmentation), so pipesim is expected somewhat below.
  The peak depends on the model, the sharding, the checkpointing and the loss, not on the GPU's
  speed.
- **Not throughput**: those GPUs are H100 96GB HBM2e at a 500 W limit ("the actual peak TFLOPs
  number is between SXM and NVL, and we don't know its exact value"), which no preset
  describes. Their tokens per GPU per second are printed beside, not compared.
- The card's capacity is left unset (no out-of-memory check): 96 GB is not a preset's either.

None of these numbers set a constant. The loss's memory rule (the header's `loss_*_bytes:`,
docs/model.md) was written after these rows were seen 45 % low: they are not unseen data for
that rule.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import io
import json
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

SOURCE = ("pytorch/torchtitan benchmarks/llama3_h100_202412_torchtitan.md (torchtitan 9dec370, "
          "2024-12-26), Table {table}: 1D parallelism (FSDP), Llama 3.1 8B, {gpus} GPUs, local "
          "batch size 2, selective activation checkpointing; the row 'FSDP'")
RUNS = (
    {"id": "titan-llama31-8b-fsdp8", "gpus": 8, "table": 1,
     "measured": {"max_reserved_gib": 82.4, "tokens_per_gpu_s": 5762}},
    {"id": "titan-llama31-8b-fsdp128", "gpus": 128, "table": 3,
     "measured": {"max_reserved_gib": 67.0, "tokens_per_gpu_s": 5605}},
)
# the job: torchtitan's llama3_8b.toml of that commit as the table ran it (local batch 2)
JOB = """\
[model]
name = "llama3"
flavor = "8B"
[training]
local_batch_size = 2
seq_len = 8192
[parallelism]
data_parallel_shard_degree = -1
tensor_parallel_degree = 1
pipeline_parallel_degree = 1
[activation_checkpoint]
mode = "selective"
selective_ac_option = "op"
"""
SYSTEM = REPO / "configs" / "system" / "h100.yaml"


def predict(run: dict, job: Path) -> dict:
    from simulator.cli.main import main

    args = ["run", "--torchtitan", str(job), "--gpus", str(run["gpus"]), "--system",
            str(SYSTEM), "--set", "memory.capacity_gib=0", "--engine", "evaluator", "--json",
            "-"]
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(args)
    if code != 0:
        raise SystemExit(f"bench_torchtitan_memory: {run['id']}: pipesim exited {code}: "
                         f"{err.getvalue().strip().splitlines()[-1:]}")
    d = json.loads(out.getvalue())
    peak = max(d["ranks"], key=lambda r: r["peak_memory_bytes"])
    gib = peak["peak_memory_bytes"] / 2**30
    measured = run["measured"]["max_reserved_gib"]
    tokens = 2 * 8192 / (d["makespan_ns"] / 1e9)
    return {"id": run["id"], "gpus": run["gpus"], "source": SOURCE.format(**run),
            "measured": run["measured"], "predicted_peak_gib": gib,
            "memory_error": gib / measured - 1,
            "breakdown_gib": {k: v / 2**30 for k, v in peak["peak_memory_breakdown"].items()},
            "peak_action": peak["peak_memory_action"],
            "predicted_tokens_per_gpu_s_h100_sxm": tokens, "args": args}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--record", type=Path, default=None, help="write the rows as JSON here")
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        job = Path(tmp) / "llama3_8b.toml"
        job.write_text(JOB)
        rows = [predict(run, job) for run in RUNS]
    print("| run | GPUs | measured max reserved | predicted peak | error | made of |")
    print("|---|---:|---:|---:|---:|---|")
    for r in rows:
        parts = ", ".join(f"{k} {v:.2f}" for k, v in r["breakdown_gib"].items() if v)
        print(f"| {r['id']} | {r['gpus']} | {r['measured']['max_reserved_gib']:.1f} GiB | "
              f"{r['predicted_peak_gib']:.2f} GiB | {100 * r['memory_error']:+.1f} % | "
              f"{parts} (GiB, in {r['peak_action']}) |")
    print("\nthroughput not compared (an H100 96GB HBM2e at 500 W, no preset): measured "
          + ", ".join(f"{r['measured']['tokens_per_gpu_s']} tokens/GPU/s" for r in rows))
    if args.record:
        commit = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"],
                                capture_output=True, text=True).stdout.strip()
        args.record.write_text(json.dumps({"date": datetime.date.today().isoformat(),
                                           "commit": commit, "rows": rows}, indent=1) + "\n")
        print(f"\nwrote {args.record}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
