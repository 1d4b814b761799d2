"""The torch side of the memory harness: one process per pipeline rank (imports torch).

Each (schedule, shape, M) runs under its own profiler with ``profile_memory=True``, started
before the model, the data and the schedule exist, so the allocator's ``Total Allocated`` in
the trace is this configuration's own absolute count (the CPU allocator's counter only counts
what was allocated while a profiler ran; everything of the previous configuration is freed and
collected before the next starts). A training step is ``schedule.step`` (default
``return_outputs=True``, or what ``--return-outputs`` says), ``optimizer.step()`` (SGD, no state) and ``zero_grad()`` (grads set to
None), inside ``record_function("ITER<k>")`` after a barrier; ``--warmup`` steps before them are
profiled but unlabelled (the first step also infers shapes and allocates torch's receive
buffers).
"""

from __future__ import annotations

import gc
import math
import json
import os
import time
from datetime import timedelta
from pathlib import Path

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn
from torch.profiler import ProfilerActivity, profile, record_function

from ..fidelity.live import label_compute
from .cases import ALL_SHAPES, BYTES_PER_ELEMENT, DROPOUT, SCHEDULES, USER_LABEL, Sched, Shape, \
    stages_of_rank


class Block(nn.Module):
    """Pre-LN MLP block: ``x + fc2(gelu(fc1(layer_norm(x))))``."""

    def __init__(self, hidden: int, inner: int) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(hidden)
        self.fc1 = nn.Linear(hidden, inner)
        self.fc2 = nn.Linear(inner, hidden)

    def forward(self, x):
        return x + self.fc2(F.gelu(self.fc1(self.norm(x))))


class TransformerLayer(nn.Module):
    """Megatron-style pre-LN GPT layer on (b, s, h): LayerNorm, fused QKV, causal scores,
    softmax, dropout, attention over V, output projection, dropout, residual; LayerNorm, MLP
    h -> f, GeLU, f -> h, dropout, residual. Written out (no fused attention), so autograd
    keeps what Korthikanti et al. count: the scores' softmax output, its dropout's mask and
    output, Q, K, V, each linear's input, the GeLU's input."""

    def __init__(self, hidden: int, inner: int, heads: int, causal: torch.Tensor,
                 bool_masks: bool = False, flash: bool = False, kv_heads: int = 0) -> None:
        super().__init__()
        self.heads = heads
        self.kv_heads = kv_heads or heads
        self.bool_masks = bool_masks
        self.flash = flash    # attention by F.scaled_dot_product_attention: no scores kept
        self.ln1 = nn.LayerNorm(hidden)
        self.qkv = nn.Linear(hidden, hidden + 2 * self.kv_heads * (hidden // heads))
        self.proj = nn.Linear(hidden, hidden)
        self.ln2 = nn.LayerNorm(hidden)
        self.fc1 = nn.Linear(hidden, inner)
        self.fc2 = nn.Linear(inner, hidden)
        self.causal = causal          # (s, s) bool, True above the diagonal; one per chunk

    def forward(self, x):
        b, s, h = x.shape
        a, d, kv = self.heads, h // self.heads, self.kv_heads
        if kv == a:
            q, k, v = self.qkv(self.ln1(x)).view(b, s, 3, a, d).permute(2, 0, 3, 1, 4)
        else:   # grouped-query: each K/V head repeated for its group's query heads
            q, k, v = self.qkv(self.ln1(x)).split([h, kv * d, kv * d], dim=-1)
            q = q.reshape(b, s, a, d).transpose(1, 2)
            k = k.reshape(b, s, kv, d).transpose(1, 2).repeat_interleave(a // kv, dim=1)
            v = v.reshape(b, s, kv, d).transpose(1, 2).repeat_interleave(a // kv, dim=1)
        if self.flash:    # a fused kernel, no attention dropout (as with flash attention)
            ctx = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            scores = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(d))
            probs = torch.softmax(scores.masked_fill(self.causal, float("-inf")), dim=-1)
            ctx = self.dropout(probs) @ v
        ctx = ctx.transpose(1, 2).reshape(b, s, h)
        x = x + self.dropout(self.proj(ctx))
        return x + self.dropout(self.fc2(F.gelu(self.fc1(self.ln2(x)))))

    def dropout(self, x):
        """F.dropout keeps, on the CPU, its scaled noise in x's dtype; torch.native_dropout
        (what F.dropout runs on CUDA) a bool mask."""
        if self.bool_masks:
            return torch.native_dropout(x, DROPOUT, True)[0]
        return F.dropout(x, DROPOUT, True)


def make_layer(shape: Shape, block: int, causal: torch.Tensor | None = None) -> nn.Module:
    inner = shape.hidden * shape.ffn[block]
    if not shape.heads:
        return Block(shape.hidden, inner)
    if causal is None:
        causal = torch.ones(shape.seq, shape.seq, dtype=torch.bool).triu(1)
    return TransformerLayer(shape.hidden, inner, shape.heads, causal, shape.bool_masks,
                            kv_heads=shape.kv_heads)


def build_chunk(shape: Shape, stage: int, n_stages: int, seed: int = 0) -> nn.Module:
    torch.manual_seed(seed + stage)
    causal = torch.ones(shape.seq, shape.seq, dtype=torch.bool).triu(1) if shape.heads else None
    return nn.Sequential(*(make_layer(shape, b, causal)
                           for b in shape.blocks_of_stage(stage, n_stages)))


def sample(shape: Shape, microbatches: int, gen: torch.Generator) -> torch.Tensor:
    """One step's input or target: M microbatches of rows x hidden (b x s x h)."""
    if shape.heads:
        return torch.randn(microbatches * shape.batch, shape.seq, shape.hidden, generator=gen)
    return torch.randn(microbatches * shape.rows, shape.hidden, generator=gen)


def _loss(out, target):
    return ((out - target) ** 2).mean()


def run_config(rank: int, world: int, sched: Sched, shape: Shape, microbatches: int, *,
               csv_path: str | None, warmup: int, iterations: int, trace_path: Path,
               return_outputs: bool = True) -> dict:
    """One configuration under its own memory profiler; returns what this rank holds."""
    from torch.distributed import pipelining as pl
    from torch.distributed.pipelining.schedules import _PipelineScheduleRuntime

    gc.collect()
    # record_shapes: the forward's operators with their input shapes, which the calibration
    # reads for what a split backward keeps (simulator.calibration.forward_ops)
    prof = profile(activities=[ProfilerActivity.CPU], profile_memory=True, record_shapes=True)
    prof.__enter__()
    try:
        n_stages = world * sched.vpp
        own = stages_of_rank(sched, rank, world)
        chunks = [build_chunk(shape, s, n_stages) for s in own]
        stages = [pl.PipelineStage(c, s, n_stages, torch.device("cpu"))
                  for c, s in zip(chunks, own)]
        if sched.csv:
            schedule = _PipelineScheduleRuntime(stages, n_microbatches=microbatches,
                                                loss_fn=_loss)
            schedule._load_csv(csv_path, "compute_only")
        elif sched.vpp == 1:
            if sched.name == "Schedule1F1B":
                label_compute(stages[0], USER_LABEL)
            schedule = getattr(pl, sched.name)(stages[0], n_microbatches=microbatches,
                                               loss_fn=_loss)
        else:
            schedule = getattr(pl, sched.name)(stages, n_microbatches=microbatches,
                                               loss_fn=_loss)
        has_first, has_last = 0 in own, n_stages - 1 in own
        gen = torch.Generator().manual_seed(1)
        x = sample(shape, microbatches, gen) if has_first else None
        target = sample(shape, microbatches, gen) if has_last else None
        params = [p for c in chunks for p in c.parameters()]
        opt = torch.optim.SGD(params, lr=1e-4, foreach=False)

        def one_step() -> None:
            args = (x,) if has_first else ()
            schedule.step(*args, target=target, return_outputs=return_outputs)
            opt.step()
            opt.zero_grad(set_to_none=True)

        for _ in range(warmup):
            dist.barrier()
            one_step()
        for k in range(iterations):
            dist.barrier()
            with record_function(f"ITER{k}"):
                one_step()
        info = {"stages": own,
                "weight_bytes": sum(p.numel() * p.element_size() for p in params),
                "data_bytes": sum(t.numel() * t.element_size() for t in (x, target)
                                  if t is not None)}
    finally:
        prof.__exit__(None, None, None)
    trace_path.parent.mkdir(parents=True, exist_ok=True)
    prof.export_chrome_trace(str(trace_path))
    del prof
    gc.collect()
    dist.barrier()
    return info


def worker(rank: int, world: int, port: int, plan: dict) -> None:
    """One rank: every configuration of ``plan`` in the same order as the other ranks."""
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world,
                            timeout=timedelta(seconds=plan["timeout_s"]))
    out = Path(plan["out"])
    results: dict[str, dict] = {}
    try:
        for cfg in plan["configs"]:
            key = cfg["key"]
            trace = out / "traces" / key / f"rank{rank}.json"
            t = time.perf_counter()
            info = run_config(rank, world, SCHEDULES[cfg["schedule"]], ALL_SHAPES[cfg["shape"]],
                              cfg["microbatches"], csv_path=cfg.get("csv"),
                              warmup=plan["warmup"], iterations=plan["iterations"],
                              trace_path=trace,
                              return_outputs=plan.get("return_outputs", True))
            results[key] = {**info, "trace": str(trace.relative_to(out)),
                            "wall_s": time.perf_counter() - t}
            if rank == 0 and plan.get("verbose"):
                print(f"  ran {key} in {time.perf_counter() - t:.1f} s", flush=True)
    finally:
        (out / f"rank{rank}.info.json").write_text(json.dumps(results))
        dist.destroy_process_group()


def measure_block(shape: Shape, block: int) -> dict:
    """One block alone, in this process: the bytes its forward keeps for the backward (its
    output included: the next block's input), and its parameter bytes. The input exists before
    the profiler starts, so only the forward's own allocations count."""
    torch.set_num_threads(1)
    torch.manual_seed(0)
    m = make_layer(shape, block)
    x = sample(shape, 1, torch.Generator().manual_seed(1)).requires_grad_()
    import tempfile
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "block.json"
        with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
            y = m(x)
        prof.export_chrome_trace(str(path))
        events = json.loads(path.read_text())["traceEvents"]
    kept = sum(e["args"]["Bytes"] for e in events if e.get("name") == "[memory]")
    del y
    return {"stash_bytes": int(kept),
            "param_bytes": sum(p.numel() for p in m.parameters()) * BYTES_PER_ELEMENT}
