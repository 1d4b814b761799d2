"""End-to-end fuzz of every pipesim command: mutated files under random options.

Each case picks a command (run, inspect, compare, schedule, verify, plan, generate, sweep,
calibrate, or run / compare / plan / generate on a model input: a Megatron-LM argument list, a
torchtitan job or a Hugging Face config), builds its files by mutating real ones (workload rows: tokens dropped, swapped,
replaced by junk or huge numbers, lines dropped or duplicated, bytes inserted; YAML system,
calibration, stage-cost and sweep files: values replaced by junk, huge numbers, numbers YAML
reads as text, binary bytes; torch traces: bytes flipped, truncated) or by giving a special file
instead (a FIFO, /dev/zero, a directory), picks random options (sizes from 1 to 2^40), and runs
the CLI's ``main`` in a forked child with a 10 s limit, the way a user's command meets it. It
counts what issue 26 targets: internal errors (exit 70, or a crash), runs over 10 s, and
children whose peak RSS passes 2 GiB; and how long refusals (exit 2) take.

    python benchmarks/bench_fuzz.py --cases 50000 --workers 2 [--json benchmarks/results/x.json]
        [--clock cpu] [--log cases.jsonl] [--start K] [--from-log cases.jsonl]

``--clock cpu`` counts a case's 10 s in the child's CPU time (user + system, enforced by
RLIMIT_CPU) instead of wall time, so the figure holds on a machine shared with other work; a
case still alive after 300 s of wall time is counted as a hang. ``--log`` appends every case as
one JSON line as it finishes (a long run's partial figures survive); ``--start`` skips the
first K cases (resume from a log).

Seed files: the real workloads in ../shared/workloads-real (or tests/data/real when present),
the bundled workloads/, configs/system/, configs/sweeps/ and tests/data/traces/.
Deterministic: case k uses random.Random(seed * 1_000_003 + k).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import signal
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

LIMIT_S = 10.0
RSS_LIMIT = 2 << 30          # a child above this is counted (the target: none)
AS_CAP = 4 << 30             # address-space cap of a child, so one case cannot take the machine
HEAD_ROWS = 60
SCHEDULES = ("1f1b", "gpipe", "interleaved-1f1b", "zb-h1", "zb-v", "dualpipe-v", "v-half",
             "hanayo", "looped-bfs", "2bw", "dualpipe", "zb-h2", "v-min", "v-zb", "auto")
HUGE = ("8388608", "8388608.0", "1000000", "99999999999", "4000", "1e9", "-1", "0", "nan")
SIZES = (None, 1, 2, 4, 8, 24, 1000, 100_000, 8_388_608, 2**40)
YAML_JUNK = ("1e308", "1.0e308", "1" + "0" * 400, "1.0e+400", "-1", "0", "nan", ".inf", "x",
             "[]", "{}", "null", "'8'", "99999999999999999999", "[1, 2]", "\x00", "\xff")
COMMANDS = {"run": 30, "inspect": 6, "compare": 6, "schedule": 16, "verify": 8, "plan": 6,
            "generate": 10, "sweep": 8, "calibrate": 4, "model": 12}   # weights
# a model input instead of a workload file (--megatron-args, --torchtitan, --hf-config), run by
# one of these commands
MODEL_COMMANDS = ("run", "run", "run", "compare", "plan", "generate")
MODEL_FLAGS = ("--megatron-args", "--torchtitan", "--hf-config")
MEGATRON_JUNK = ("0", "-1", "x", "1.5", "99999999999", "8388608", "", "--", "nan", "auto",
                 "selective", "full", "block", "RMSNorm", "transformer_engine", "local",
                 "hybrid", "e4m3", "tensorwise", "mxfp8")
TOML_JUNK = ("0", "-1", "x", '"x"', "1e9", "99999999999", "true", '"op"', '"3"', '"full"',
             '"selective"', '"ZBVZeroBubble"', '"Interleaved1F1B"', "[]", '"float16"', "nan")
JSON_JUNK = (0, -1, 1.5, 2**40, "x", None, True, [], {}, 1e308)
TRACES = REPO / "tests" / "data" / "traces" / "ScheduleInterleaved1F1B"
TRACE_WORKLOAD = (REPO / "benchmarks" / "fidelity" / "results" / "2026-11-23-cpu-gloo-f" /
                  "workloads" / "uniform.txt")


# -- seed files -------------------------------------------------------------------------------

def workload_seeds() -> list[str]:
    real = REPO / "tests" / "data" / "real"
    if not real.is_dir():
        real = REPO.parent / "shared" / "workloads-real"
    out = []
    for p in sorted(real.rglob("*.txt")) + sorted((REPO / "workloads").glob("*.txt")):
        lines = p.read_text(errors="replace").split("\n")
        if len(lines) > HEAD_ROWS + 2:          # keep the big files' first rows, count fixed
            lines = [lines[0], str(HEAD_ROWS), *lines[2:2 + HEAD_ROWS]]
        out.append("\n".join(lines))
    return out


# modern Megatron-LM launches beside the published runs' (written here: flags and numbers)
MEGATRON_SEEDS = (
    # a MoE launch with shared experts, its stages side by side and the logging passes
    "--num-layers 8 --hidden-size 1024 --ffn-hidden-size 512 --num-attention-heads 16 "
    "--seq-length 2048 --swiglu --normalization RMSNorm --disable-bias-linear "
    "--position-embedding-type rope --untie-embeddings-and-output-weights --vocab-size 32000 "
    "--num-experts 8 --moe-router-topk 2 --moe-token-dispatcher-type alltoall "
    "--moe-grouped-gemm --moe-shared-expert-intermediate-size 1024 "
    "--expert-model-parallel-size 2 --micro-batch-size 1 --global-batch-size 32 --bf16 "
    "--use-flash-attn --tensor-model-parallel-size 2 --sequence-parallel "
    "--expert-tensor-parallel-size 1 --pipeline-model-parallel-size 2 "
    "--use-tp-pp-dp-mapping --log-num-zeros-in-grad --log-params-norm "
    "--calculate-per-token-loss",
    "--num-layers 32 --hidden-size 4096 --ffn-hidden-size 14336 --num-attention-heads 32 "
    "--group-query-attention --num-query-groups 8 --seq-length 8192 --swiglu --normalization "
    "RMSNorm --untie-embeddings-and-output-weights --vocab-size 128256 --micro-batch-size 1 "
    "--global-batch-size 128 --bf16 --attention-backend auto --tensor-model-parallel-size 2 "
    "--pipeline-model-parallel-size 2 --sequence-parallel --use-distributed-optimizer "
    "--overlap-grad-reduce --overlap-param-gather --recompute-activations --lr 1e-4 "
    "--cross-entropy-loss-fusion --cross-entropy-fusion-impl native --manual-gc "
    "--manual-gc-interval 0",
    "--num-layers 30 --hidden-size 2048 --num-attention-heads 16 --seq-length 2048 "
    "--micro-batch-size 2 --global-batch-size 64 --tensor-model-parallel-size 2 "
    "--pipeline-model-parallel-size 4 --decoder-first-pipeline-num-layers 6 "
    "--decoder-last-pipeline-num-layers 4 --num-virtual-stages-per-pipeline-rank 2 --bf16 "
    "--use-mcore-models --no-overlap-p2p-communication --grad-reduce-in-bf16",
    "--num-layers 16 --hidden-size 4096 --num-attention-heads 32 --seq-length 4096 --swiglu "
    "--num-experts 8 --moe-router-topk 2 --expert-model-parallel-size 4 "
    "--micro-batch-size 1 --global-batch-size 64 --pipeline-model-parallel-size 2 --bf16 "
    "--transformer-impl transformer_engine --recompute-granularity full --recompute-method "
    "block --recompute-num-layers 2 --attention-dropout 0.0 --hidden-dropout 0.0",
    # context parallelism: a long sequence split over cp 2 (TE's fused attention)
    "--num-layers 8 --hidden-size 4096 --ffn-hidden-size 14336 --num-attention-heads 32 "
    "--group-query-attention --num-query-groups 8 --swiglu --normalization RMSNorm "
    "--untie-embeddings-and-output-weights --vocab-size 128256 --seq-length 16384 "
    "--max-position-embeddings 16384 --micro-batch-size 1 --global-batch-size 16 "
    "--tensor-model-parallel-size 2 --pipeline-model-parallel-size 2 "
    "--context-parallel-size 2 --sequence-parallel --bf16 --use-mcore-models "
    "--transformer-impl transformer_engine --use-distributed-optimizer",
    # the zero-bubble fork's schedules: ZB-2p with post-validation, a V schedule
    "--num-layers 22 --hidden-size 2304 --num-attention-heads 24 --ffn-hidden-size 9216 "
    "--seq-length 1024 --micro-batch-size 6 --global-batch-size 144 "
    "--pipeline-model-parallel-size 8 --fp16 --vocab-size 32000 --allow-padding-num-layers "
    "--enable-zero-bubble --zero-bubble-max-pending-backward 16 "
    "--enable-optimizer-post-validation",
    "--num-layers 16 --hidden-size 2048 --num-attention-heads 16 --seq-length 2048 "
    "--micro-batch-size 1 --global-batch-size 32 --pipeline-model-parallel-size 4 --fp16 "
    "--zero-bubble-v-schedule --zero-bubble-v-schedule-mem-setup half "
    "--enable-optimizer-post-validation",
    # the fork's V-ZB (the default memory setup), laid out for the run's costs
    "--num-layers 24 --hidden-size 1024 --num-attention-heads 16 --seq-length 1024 "
    "--micro-batch-size 2 --global-batch-size 48 --pipeline-model-parallel-size 6 --bf16 "
    "--zero-bubble-v-schedule",
)
TORCHTITAN_SEEDS = (
    '[model]\nname = "llama3"\nflavor = "8B"\n[training]\nlocal_batch_size = 2\n'
    'seq_len = 8192\n[parallelism]\ndata_parallel_shard_degree = -1\n'
    'tensor_parallel_degree = 1\n[activation_checkpoint]\nmode = "selective"\n'
    'selective_ac_option = "op"\n',
    '[model]\nname = "llama3"\nflavor = "debugmodel"\n[training]\nlocal_batch_size = 8\n'
    'seq_len = 2048\n[parallelism]\npipeline_parallel_degree = 2\n'
    'pipeline_parallel_schedule = "Interleaved1F1B"\npipeline_parallel_microbatch_size = 1\n'
    'data_parallel_shard_degree = 2\n[activation_checkpoint]\nmode = "selective"\n'
    'selective_ac_option = "2"\n',
    '[model]\nname = "llama3"\nflavor = "70B"\n[training]\nlocal_batch_size = 8\n'
    'seq_len = 8192\nglobal_batch_size = 512\n[parallelism]\ntensor_parallel_degree = 8\n'
    'pipeline_parallel_degree = 4\npipeline_parallel_schedule = "1F1B"\n'
    '[activation_checkpoint]\nmode = "full"\n',
    '[model]\nname = "llama3"\nflavor = "8B"\n[training]\nlocal_batch_size = 1\n'
    'seq_len = 32768\n[parallelism]\ncontext_parallel_degree = 4\n'
    'data_parallel_shard_degree = 2\ntensor_parallel_degree = 2\n',
)


def model_seeds() -> dict[str, list[str]]:
    """Launch files and model configs: the published runs' Megatron-LM arguments and the
    Hugging Face configs (read from ../shared, never copied), and the launches above."""
    shared = REPO.parent / "shared"
    megatron = list(MEGATRON_SEEDS)
    runs = shared / "published-runs" / "runs.json"
    if runs.is_file():
        megatron += [r["megatron_args"] for r in json.loads(runs.read_text())["runs"]
                     if r.get("megatron_args")]
    hf = [p.read_text() for p in sorted((shared / "hf-configs").glob("*.json"))] \
        if (shared / "hf-configs").is_dir() else []
    return {"megatron": megatron, "torchtitan": list(TORCHTITAN_SEEDS), "hf": hf}


def yaml_seeds() -> dict[str, list[str]]:
    return {
        "system": [p.read_text() for p in sorted((REPO / "configs" / "system").glob("*.yaml"))],
        "calibration": ["runtime:\n  launch_ns: 5000\n  exchange_ns: 200000\n",
                        "gpu:\n  compute_scale: 1.5\nlinks:\n  bandwidth_gbps: 100.0\n"],
        "costs": ["f: [1, 1, 1, 1]\ni: [1, 1, 1, 1]\nw: [1, 1, 1, 1]\ncomm: 0\n",
                  "f: [2, 1]\ni: [2, 1]\nw: [1, 1]\ncomm: 0.5\n"],
        "sweep": [f"workload: {REPO / 'workloads' / 'gpt-24l.txt'}\ngrid:\n  schedule: [1f1b, "
                  "zb-h1]\n  microbatches: [4, 8]\n",
                  f"workload: {REPO / 'workloads' / 'gpt-24l.txt'}\nzip:\n  - pp: [2, 4]\n    "
                  "microbatches: [4, 8]\n"],
    }


# -- mutations --------------------------------------------------------------------------------

def mutate_workload(text: str, rng: random.Random) -> bytes:
    lines = text.split("\n")
    for _ in range(rng.choice((0, 0, 1, 1, 2, 3))):   # a third of the cases: options only
        kind = rng.choice(("drop_token", "swap_tokens", "junk", "huge", "drop_line", "dup_line",
                           "bytes"))
        i = rng.randrange(len(lines))
        toks = lines[i].split()
        if kind == "drop_line" and len(lines) > 1:
            del lines[i]
        elif kind == "dup_line":
            lines.insert(i, lines[i])
        elif kind == "bytes":
            s = lines[i]
            at = rng.randint(0, len(s))
            lines[i] = s[:at] + rng.choice(("\x00", "\r", "\t", ":", "-", "9" * 12, "é")) + s[at:]
        elif toks:
            j = rng.randrange(len(toks))
            if kind == "drop_token":
                del toks[j]
            elif kind == "swap_tokens":
                k = rng.randrange(len(toks))
                toks[j], toks[k] = toks[k], toks[j]
            elif kind == "junk":
                toks[j] = rng.choice(("NaN", "ALLREDUCE_EP", "ga:", "pp:", "x", "1.5", ""))
            else:
                toks[j] = rng.choice(HUGE)
            lines[i] = "\t".join(toks)
    return "\n".join(lines).encode()


def mutate_yaml(text: str, rng: random.Random) -> bytes:
    lines = text.split("\n")
    for _ in range(rng.choice((0, 1, 1, 2))):
        i = rng.randrange(len(lines))
        line = lines[i]
        kind = rng.choice(("value", "value", "drop", "dup", "indent", "bytes"))
        if kind == "value" and ":" in line:
            key = line.split(":", 1)[0]
            lines[i] = f"{key}: {rng.choice(YAML_JUNK)}"
        elif kind == "drop" and len(lines) > 1:
            del lines[i]
        elif kind == "dup":
            lines.insert(i, line)
        elif kind == "indent":
            lines[i] = "  " + line
        else:
            at = rng.randint(0, len(line))
            lines[i] = line[:at] + rng.choice(("\x00", "\t", "\xff", "[", "{", "&a", "*a")) + \
                line[at:]
    data = "\n".join(lines).encode("utf-8", errors="surrogateescape")
    if rng.random() < 0.05:
        data = data.replace(b"\xc3\xbf", b"\xff")     # an invalid UTF-8 byte
    return data


def mutate_bytes(data: bytes, rng: random.Random) -> bytes:
    b = bytearray(data)
    for _ in range(rng.choice((0, 1, 3))):
        if not b:
            break
        kind = rng.choice(("flip", "truncate", "insert"))
        at = rng.randrange(len(b))
        if kind == "flip":
            b[at] ^= 1 << rng.randrange(8)
        elif kind == "truncate":
            del b[at:]
        else:
            b[at:at] = rng.choice((b"\x00", b"}", b"9" * 20, b'"'))
    return bytes(b)


def mutate_megatron(text: str, rng: random.Random) -> bytes:
    toks = text.split()
    for _ in range(rng.choice((0, 1, 1, 2, 3))):
        if not toks:
            break
        i = rng.randrange(len(toks))
        kind = rng.choice(("drop", "value", "value", "dup", "flag"))
        if kind == "drop":
            del toks[i]
        elif kind == "value":
            toks[i] = rng.choice(MEGATRON_JUNK) if not toks[i].startswith("--") else toks[i]
            if toks[i].startswith("--") and i + 1 < len(toks):
                toks[i + 1] = rng.choice(MEGATRON_JUNK)
        elif kind == "dup":
            toks[i:i] = toks[i:i + 2]
        else:
            toks[i:i] = [rng.choice(("--fp16", "--bf16", "--sequence-parallel",
                                     "--checkpoint-activations", "--use-legacy-models",
                                     "--tp-comm-overlap", "--kv-channels",
                                     "--clip-grad", "--num-layers-per-virtual-pipeline-stage",
                                     "--pipeline-model-parallel-layout", "--num-experts",
                                     "--fp8-format", "--fp8-recipe", "--attention-backend",
                                     "--context-parallel-size")),
                         rng.choice(MEGATRON_JUNK)]
    return " ".join(toks).encode("utf-8", errors="surrogateescape")


def mutate_toml(text: str, rng: random.Random) -> bytes:
    lines = text.split("\n")
    for _ in range(rng.choice((0, 1, 1, 2))):
        i = rng.randrange(len(lines))
        line = lines[i]
        kind = rng.choice(("value", "value", "drop", "dup", "bytes"))
        if kind == "value" and "=" in line:
            lines[i] = f"{line.split('=', 1)[0]}= {rng.choice(TOML_JUNK)}"
        elif kind == "drop" and len(lines) > 1:
            del lines[i]
        elif kind == "dup":
            lines.insert(i, line)
        else:
            at = rng.randint(0, len(line))
            lines[i] = line[:at] + rng.choice(("\x00", "[", "=", '"', "\xff")) + line[at:]
    return "\n".join(lines).encode("utf-8", errors="surrogateescape")


def mutate_json(text: str, rng: random.Random) -> bytes:
    try:
        doc = json.loads(text)
    except ValueError:
        return text.encode()
    if isinstance(doc, dict) and doc:
        for _ in range(rng.choice((0, 1, 1, 2))):
            key = rng.choice(sorted(doc))
            if rng.random() < 0.3:
                del doc[key]
                if not doc:
                    break
            else:
                doc[key] = rng.choice(JSON_JUNK)
    data = json.dumps(doc).encode()
    return mutate_bytes(data, rng) if rng.random() < 0.1 else data


class Files:
    """A case's input files, in its own temporary folder; any file argument may instead be a
    special file (a FIFO, /dev/zero, a directory)."""

    def __init__(self, rng: random.Random, where: Path) -> None:
        self.rng = rng
        self.where = where
        self.n = 0

    def special(self) -> str | None:
        r = self.rng.random()
        if r < 0.02:
            path = self.where / f"fifo{self.n}"
            self.n += 1
            os.mkfifo(path)
            return str(path)
        if r < 0.03:
            return "/dev/zero"
        if r < 0.04:
            return str(self.where)
        return None

    def write(self, data: bytes, suffix: str) -> str:
        special = self.special()
        if special is not None:
            return special
        path = self.where / f"f{self.n}{suffix}"
        self.n += 1
        path.write_bytes(data)
        return str(path)


# -- one case ---------------------------------------------------------------------------------

def _size(rng: random.Random) -> str:
    return str(rng.choice(SIZES[1:]))


def build_args(k: int, seed: int, seeds: dict, where: Path) -> list[str]:
    rng = random.Random(seed * 1_000_003 + k)
    files = Files(rng, where)
    command = rng.choices(list(COMMANDS), weights=list(COMMANDS.values()))[0]
    wl = lambda: files.write(mutate_workload(rng.choice(seeds["workloads"]), rng), ".txt")  # noqa
    yml = lambda kind: files.write(mutate_yaml(rng.choice(seeds["yaml"][kind]), rng), ".yaml")  # noqa
    out = lambda suffix: rng.choice((str(where / f"out{suffix}"), str(where / "no" / f"o{suffix}"),  # noqa
                                     str(where)))
    args = [command]
    if command == "run":
        args.append(wl())
        for flag, values in (("--pp", SIZES), ("--vpp", (None, None, 1, 2, 3, 1000)),
                             ("-m", SIZES), ("-s", (None,) + SCHEDULES),
                             ("--p2p", (None, None, "blocking", "torch", "batched")),
                             ("--engine", (None, None, "evaluator")),
                             ("--iterations", (None, None, None, 2, 1000)),
                             ("--gpus", (None, None, None, 8, 7, 2**40))):
            value = rng.choice(values)
            if value is not None:
                args += [flag, str(value)]
        if rng.random() < 0.15:
            args += ["--system", yml("system")]
        if rng.random() < 0.1:
            args += ["--calibration", yml("calibration")]
        if rng.random() < 0.05:
            args += ["-O", rng.choice(("max_evaluations=0", "iterations=x", "max_in_flight=1",
                                       "group_size=3"))]
        if rng.random() < 0.1:
            args += [rng.choice(("--json", "--gantt", "--trace")), out(rng.choice((".json",
                                                                                   ".png")))]
        if rng.random() < 0.1:   # the zero-bubble fork's step without a barrier
            args += ["--optimizer-post-validation"]
    elif command == "inspect":
        args.append(wl())
        if rng.random() < 0.5:
            args += ["--pp", _size(rng)]
    elif command == "compare":
        args += [wl(), "-s", ",".join(rng.sample(SCHEDULES[:-1], 3)), "--pp", _size(rng),
                 "-m", _size(rng)]
    elif command in ("schedule", "verify"):
        args.append(rng.choice(SCHEDULES))
        args += ["--pp", _size(rng), "-m", _size(rng)]
        if rng.random() < 0.3:
            args += ["--vpp", rng.choice(("1", "2", "3", "1000"))]
        if command == "schedule":
            if rng.random() < 0.2:
                args += ["--stage-costs", yml("costs")]
            if rng.random() < 0.1:
                args += ["--csv", out(".csv")]
        elif rng.random() < 0.2:
            args += ["--layers", rng.choice(("1", "3", "1000", "1000000000"))]
    elif command == "plan":
        args += [rng.choice((str(REPO / "tests" / "data" / "tiny_model.txt"), wl())),
                 "--gpus", rng.choice(("1", "2", "4", "8", "7", str(2**20), str(2**40))),
                 "-j", "1"]
        if rng.random() < 0.3:
            args += ["--global-batch", _size(rng)]
        if rng.random() < 0.15:
            args += ["--jitter", "0.1", "--iterations", _size(rng)]
        if rng.random() < 0.15:
            args += ["--memory-limit", rng.choice(("0", "1", "4", "80"))]
        if rng.random() < 0.2:
            args += ["--out", out("")]
        if rng.random() < 0.1:
            args += ["--strict"]
    elif command == "generate":
        args += ["--model", rng.choice(("gpt", "llama", "moe")),
                 "--layers", rng.choice(("1", "24", "96", "100000", "1000000000")),
                 "--hidden", rng.choice(("64", "1024", "4096", "1000000007")),
                 "--heads", rng.choice(("1", "8", "16", "3")),
                 "--seq", rng.choice(("1", "2048", "99999999999")),
                 "--micro-batch", rng.choice(("1", "4")),
                 "--layout", rng.choice(("model", "aicb")),
                 "--pp", rng.choice(("1", "2", "4")), "--ga", _size(rng),
                 "-o", out(".txt")]
        if args[2] == "moe":
            args += ["--experts", rng.choice(("2", "8")), "--ep", "1"]
        if rng.random() < 0.2:
            args += ["--cp", rng.choice(("1", "2", "3", "8", "0", str(2**40)))]
    elif command == "sweep":
        args += [yml("sweep"), "--out", out(""), "-j", "1", "-q"]
    elif command == "model":
        kind = rng.choice(("megatron", "megatron", "torchtitan", "hf"))
        pool = seeds["model"][kind] or seeds["model"]["megatron"]
        if not seeds["model"][kind]:
            kind = "megatron"
        text = rng.choice(pool)
        mutate, suffix, flag = {"megatron": (mutate_megatron, ".txt", "--megatron-args"),
                                "torchtitan": (mutate_toml, ".toml", "--torchtitan"),
                                "hf": (mutate_json, ".json", "--hf-config")}[kind]
        sub = rng.choice(MODEL_COMMANDS)
        args = [sub, flag, files.write(mutate(text, rng), suffix)]
        gpus = rng.choice((None, None, "8", "16", "64", "128", "7", "1", str(2**20)))
        if sub == "generate":
            args += ["--dp", rng.choice(("1", "2", "8")), "-o", out(".txt")]
        elif gpus is not None or sub == "plan":
            args += ["--gpus", gpus or "64"]
        if kind == "hf":
            args += ["--seq", rng.choice(("1024", "4096", "1", "99999999999"))]
            if sub != "plan":
                args += ["--pp", rng.choice(("1", "2", "4")), "-m", _size(rng)]
        if sub in ("run", "compare") and rng.random() < 0.7:
            args += ["--engine", "evaluator"]
        if sub == "compare":
            args += ["-s", ",".join(rng.sample(SCHEDULES[:-1], 2))]
        if sub == "plan":
            args += ["-j", "1", "--tp-max", rng.choice(("1", "2", "8"))]
            if rng.random() < 0.3:
                args += [rng.choice(("--fsdp", "--use-distributed-optimizer"))]
            if rng.random() < 0.15:
                args += ["--cp-max", rng.choice(("1", "2", "8", "0", str(2**40)))]
            if rng.random() < 0.15:
                args += ["--ep-max", rng.choice(("1", "2", "8", "0", str(2**40)))]
        if sub != "generate" and rng.random() < 0.4:
            args += ["--system", rng.choice([str(p) for p in sorted(
                (REPO / "configs" / "system").glob("*.yaml"))])]
        if rng.random() < 0.2:
            args += ["--gpu", rng.choice(("a100", "h100", "h200", "v100"))]
        if sub in ("run", "compare", "plan") and rng.random() < 0.1:
            args += ["--strict"]
        if sub == "run" and rng.random() < 0.1:
            args += ["--fsdp", rng.choice(("1", "2", "8", "0"))]
        if sub != "generate" and rng.random() < 0.1:
            args += ["--optimizer-post-validation"]
            if sub == "run" and rng.random() < 0.5:
                args += ["--iterations", rng.choice(("1", "2", "3"))]
        if sub != "generate" and rng.random() < 0.1:
            args += ["--cp", rng.choice(("1", "2", "3", "4", "0", str(2**40)))]
        if sub != "generate" and rng.random() < 0.1:
            args += ["--ep", rng.choice(("1", "2", "3", "8", "0", str(2**40)))]
    elif command == "calibrate":
        folder = where / "traces"
        folder.mkdir()
        for f in sorted(TRACES.glob("rank*.json*")):
            (folder / f.name).write_bytes(mutate_bytes(f.read_bytes(), rng)
                                          if rng.random() < 0.5 else f.read_bytes())
        args += [str(folder), "--workload", rng.choice((str(TRACE_WORKLOAD), wl()))]
        if rng.random() < 0.3:
            args += ["-o", out(".yaml")]
    return args


HANG_S = 300.0               # with --clock cpu: a case alive this long in wall time is a hang


def _child(args: list[str], err_fd: int, cpu_clock: bool) -> None:
    resource.setrlimit(resource.RLIMIT_AS, (AS_CAP, AS_CAP))
    if cpu_clock:   # SIGXCPU at the soft limit ends the child
        resource.setrlimit(resource.RLIMIT_CPU, (int(LIMIT_S), int(LIMIT_S) + 1))
    os.dup2(err_fd, 2)
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)
    from simulator.cli.main import main

    try:
        code = main(args)
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else 1
    except BaseException:   # noqa: BLE001 -- anything main lets out is a bug
        code = 71
    os._exit(code if isinstance(code, int) else 1)


def run_case(k: int, seed: int, seeds: dict, cpu_clock: bool = False) -> dict:
    with tempfile.TemporaryDirectory(prefix="pipesim-fuzz-") as tmp:
        where = Path(tmp)
        args = build_args(k, seed, seeds, where)
        err_path = where / "stderr"
        err_fd = os.open(err_path, os.O_WRONLY | os.O_CREAT, 0o600)
        t0 = time.perf_counter()
        pid = os.fork()
        if pid == 0:
            try:
                os.chdir(tmp)
                _child(args, err_fd, cpu_clock)
            finally:
                os._exit(72)
        os.close(err_fd)
        deadline = t0 + (HANG_S if cpu_clock else LIMIT_S)
        status, usage, timeout = None, None, False
        while True:
            done, status, usage = os.wait4(pid, os.WNOHANG)
            if done:
                break
            if time.perf_counter() > deadline:
                timeout = True
                os.kill(pid, signal.SIGKILL)
                _, status, usage = os.wait4(pid, 0)
                break
            time.sleep(0.005)
        seconds = time.perf_counter() - t0
        err = err_path.read_text(errors="replace")
    code = os.waitstatus_to_exitcode(status)
    cpu = usage.ru_utime + usage.ru_stime
    if timeout:
        outcome = "hang" if cpu_clock else "timeout"
    elif cpu_clock and (code == -signal.SIGXCPU or cpu > LIMIT_S):
        outcome = "timeout"
    elif code < 0:
        outcome = "crash"
    elif code in (70, 71, 72):
        outcome = "internal"
    elif code == 0:
        outcome = "ok"
    elif code in (2, 3, 4):
        outcome = "refused"
    else:
        outcome = f"exit {code}"
    lines = [x for x in err.splitlines() if x.startswith("pipesim: error")]
    if outcome == "refused" and len(lines) != 1:
        outcome = "refused-not-one-line"
    # a model input's case is counted apart: "run --megatron-args", ...
    command = f"{args[0]} {args[1]}" if len(args) > 1 and args[1] in MODEL_FLAGS else args[0]
    return {"case": k, "command": command, "outcome": outcome, "seconds": round(seconds, 3),
            "cpu_s": round(cpu, 3), "rss": usage.ru_maxrss * 1024, "args": args,
            "message": (lines[0] if lines else err.strip()[-300:])[:300]}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--cases", type=int, default=2000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--json", type=Path, default=None,
                    help="write the figures (and every bad case) here as JSON")
    ap.add_argument("--clock", choices=("wall", "cpu"), default="wall",
                    help="what a case's 10 s limit counts (cpu: the child's CPU time)")
    ap.add_argument("--log", type=Path, default=None, help="append every case here (JSON lines)")
    ap.add_argument("--start", type=int, default=0, help="skip the first K cases")
    ap.add_argument("--from-log", type=Path, default=None,
                    help="run nothing: report the cases of this --log (a long run stopped early)")
    args = ap.parse_args(argv)
    if args.from_log:
        rows = [json.loads(line) for line in args.from_log.open() if line.strip()]
        return report(rows, args, None)
    cpu_clock = args.clock == "cpu"
    log = args.log.open("a") if args.log else None
    seeds = {"workloads": workload_seeds(), "yaml": yaml_seeds(), "model": model_seeds()}
    # imported once here, inherited by every forked case
    import simulator.api  # noqa: F401
    import simulator.cli.group  # noqa: F401
    from simulator.schedules import registry

    registry.names()
    registry.cost_aware_names()
    t0 = time.perf_counter()
    from concurrent.futures import ThreadPoolExecutor

    rows = []
    with ThreadPoolExecutor(args.workers) as pool:
        for r in pool.map(lambda k: run_case(k, args.seed, seeds, cpu_clock),
                          range(args.start, args.cases)):
            if log:
                log.write(json.dumps(r) + "\n")
                log.flush()
            rows.append(r)
    return report(rows, args, time.perf_counter() - t0)


def report(rows: list[dict], args, wall: float | None) -> int:
    """The figures issue 26 targets, from the cases' rows (a run's, or a --log's)."""
    cpu_clock = args.clock == "cpu"
    per: dict[str, dict[str, int]] = {}
    slowest: dict[str, float] = {}
    refusal_max: dict[str, float] = {}
    peak = 0
    bad = []
    for r in rows:
        c = r["command"]
        counts = per.setdefault(c, {})
        counts[r["outcome"]] = counts.get(r["outcome"], 0) + 1
        took = r["cpu_s"] if cpu_clock else r["seconds"]
        slowest[c] = max(slowest.get(c, 0.0), took)
        if r["outcome"] == "refused":
            refusal_max[c] = max(refusal_max.get(c, 0.0), took)
        peak = max(peak, r["rss"])
        if r["outcome"] not in ("ok", "refused") or r["rss"] > RSS_LIMIT:
            bad.append(r)
    total = lambda o: sum(v.get(o, 0) for v in per.values())  # noqa: E731
    cases = sorted(r["case"] for r in rows)
    summary = {
        "date": time.strftime("%Y-%m-%d"), "cases": len(rows),
        "case_range": [cases[0], cases[-1]] if cases else None, "seed": args.seed,
        "clock": args.clock, "workers": args.workers,
        "wall_s": None if wall is None else round(wall, 1), "hangs": total("hang"),
        "internal_errors": total("internal") + total("crash") + total("refused-not-one-line"),
        "over_10_s": total("timeout"), "over_2_gib": sum(r["rss"] > RSS_LIMIT for r in bad),
        "peak_rss_bytes": peak, "per_command": per,
        "slowest_s": {c: round(s, 2) for c, s in sorted(slowest.items())},
        "slowest_refusal_s": {c: round(s, 2) for c, s in sorted(refusal_max.items())},
        "bad": bad[:50],
    }
    print(json.dumps({k: v for k, v in summary.items() if k != "bad"}, indent=1))
    for r in bad[:20]:
        print(f"case {r['case']}: {r['outcome']} {r['seconds']} s {r['rss'] >> 20} MiB: "
              f"{' '.join(r['args'])}: {r['message']}")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(summary, indent=1) + "\n")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
