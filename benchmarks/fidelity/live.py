"""The torch side of the fidelity harness: one process per pipeline rank (imports torch).

Each layer is ``y = FwdIG(x) * WG(w)``: ``FwdIG`` waits the layer's forward time in its forward
and its input-gradient time in its backward; ``WG`` is the identity on the weight and waits the
weight-gradient time in its backward. The product in between is the node torch's split backward
(``stage_backward_input`` / ``stage_backward_weight``) saves as the intermediate, so the
input-gradient pass (I) runs only the ``FwdIG`` backwards and the weight pass (W) only the ``WG``
ones; a full backward (B) runs both. The waits sleep until shortly before the deadline and spin
the rest (a bare ``time.sleep`` overshoots ~85 us on this kind of machine, too much against
1 ms costs).
"""

from __future__ import annotations

import json
import os
import time
from datetime import timedelta
from pathlib import Path

import torch
import torch.distributed as dist
from torch import nn
from torch.profiler import ProfilerActivity, profile, record_function

from .cases import CLASSES, HIDDEN, LAYERS, M, ROWS_PER_MB, USER_LABEL, Case, ScheduleClass, \
    make_cases, stages_of_rank

SPIN_NS = int(os.environ.get("FIDELITY_SPIN_NS", "150000"))   # sleep until this close, then spin


def wait_ns(ns: int) -> None:
    """Take ``ns`` of wall time, mostly asleep."""
    if ns <= 0:
        return
    deadline = time.perf_counter_ns() + ns
    rest = deadline - time.perf_counter_ns() - SPIN_NS
    if rest > 0:
        time.sleep(rest / 1e9)
    while time.perf_counter_ns() < deadline:
        pass


class _FwdIG(torch.autograd.Function):
    """Identity on the activations: forward costs ``fwd_ns``, backward ``ig_ns``."""

    @staticmethod
    def forward(ctx, x, fwd_ns, ig_ns):
        ctx.ig_ns = ig_ns
        wait_ns(fwd_ns)
        return x.clone()

    @staticmethod
    def backward(ctx, grad):
        wait_ns(ctx.ig_ns)
        return grad.clone(), None, None


class _WG(torch.autograd.Function):
    """Identity on the weight: backward costs ``wg_ns`` (only the W / full-B pass reaches it)."""

    @staticmethod
    def forward(ctx, w, wg_ns):
        ctx.wg_ns = wg_ns
        return w.clone()

    @staticmethod
    def backward(ctx, grad):
        wait_ns(ctx.wg_ns)
        return grad.clone(), None


class TimedLayer(nn.Module):
    def __init__(self, fwd_ns: int, ig_ns: int, wg_ns: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(HIDDEN))
        self.costs = (fwd_ns, ig_ns, wg_ns)

    def forward(self, x):
        fwd_ns, ig_ns, wg_ns = self.costs
        return _FwdIG.apply(x, fwd_ns, ig_ns) * _WG.apply(self.weight, wg_ns)


def build_chunk(case: Case, stage: int, n_stages: int) -> nn.Module:
    per = LAYERS // n_stages
    return nn.Sequential(*(TimedLayer(c.fwd_ns, c.ig_ns, c.wg_ns)
                           for c in case.layers[stage * per:(stage + 1) * per]))


def _loss(out, target):
    return ((out - target) ** 2).mean()


def label_compute(stage, label: str = USER_LABEL) -> None:
    """Wrap a single-stage schedule's compute calls in ``label`` spans (default
    ``fidelity:<stage><kind><mb>``; the memory harness passes its own).

    Schedule1F1B records no label at all; these spans hold the compute only (not the receive
    wait, which torch's ``PP:`` spans include).
    """
    fwd, bwd = stage.forward_one_chunk, stage.backward_one_chunk
    idx = stage.stage_index

    def forward_one_chunk(chunk_id, *args, **kwargs):
        with record_function(label.format(stage=idx, kind="F", mb=chunk_id)):
            return fwd(chunk_id, *args, **kwargs)

    def backward_one_chunk(chunk_id, *args, **kwargs):
        with record_function(label.format(stage=idx, kind="B", mb=chunk_id)):
            return bwd(chunk_id, *args, **kwargs)

    stage.forward_one_chunk = forward_one_chunk
    stage.backward_one_chunk = backward_one_chunk


def run_config(rank: int, world: int, cls: ScheduleClass, case: Case, *, warmup: int,
               iterations: int, trace_path: Path | None,
               device: torch.device = torch.device("cpu")) -> list[list[int]]:
    """Run one (class, case): ``warmup`` untimed steps, then ``iterations`` timed, profiled ones.

    Returns [start_ns, end_ns] of every timed step on this rank (``perf_counter_ns``, one
    monotonic clock for every process of the machine); a barrier precedes every step.
    """
    from torch.distributed import pipelining as pl

    n_stages = world * cls.vpp
    own = stages_of_rank(cls, rank, world)
    stages = [pl.PipelineStage(build_chunk(case, s, n_stages).to(device), s, n_stages, device)
              for s in own]
    klass = getattr(pl, cls.torch_name)
    if cls.vpp == 1:
        if cls.torch_name == "Schedule1F1B":
            label_compute(stages[0])
        schedule = klass(stages[0], n_microbatches=M, loss_fn=_loss)
    else:
        schedule = klass(stages, n_microbatches=M, loss_fn=_loss)
    has_first = 0 in own
    has_last = n_stages - 1 in own
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(M * ROWS_PER_MB, HIDDEN, generator=gen).to(device)
    target = torch.zeros(M * ROWS_PER_MB, HIDDEN, device=device)
    params = [p for st in stages for p in st.submod.parameters()]

    def one_step() -> None:
        args = (x,) if has_first else ()
        schedule.step(*args, target=target if has_last else None)
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        for p in params:
            p.grad = None

    for _ in range(warmup):
        dist.barrier()
        one_step()
    times: list[list[int]] = []
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda"
                                           else [])
    prof = profile(activities=activities) if trace_path is not None else None
    if prof is not None:
        prof.__enter__()
    try:
        for k in range(iterations):
            dist.barrier()
            t0 = time.perf_counter_ns()
            with record_function(f"ITER{k}"):
                one_step()
            times.append([t0, time.perf_counter_ns()])
    finally:
        if prof is not None:
            prof.__exit__(None, None, None)
    if prof is not None:
        trace_path.parent.mkdir(parents=True, exist_ok=True)
        prof.export_chrome_trace(str(trace_path))
    dist.barrier()
    return times


def worker(rank: int, world: int, port: int, plan: dict) -> None:
    """One rank: every (case, class) of ``plan`` in the same order as the other ranks."""
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    torch.set_num_threads(1)
    device = torch.device("cpu")
    if plan.get("device", "cpu") == "cuda":
        torch.cuda.set_device(rank)
        device = torch.device("cuda", rank)
    dist.init_process_group(plan.get("backend", "gloo"), rank=rank, world_size=world,
                            timeout=timedelta(seconds=plan["timeout_s"]))
    out = Path(plan["out"])
    cases = make_cases(plan["base_ns"])
    results: dict[str, dict] = {}
    try:
        for case_name in plan["cases"]:
            for cls_name in plan["classes"]:
                key = f"{cls_name}/{case_name}"
                trace = (out / "traces" / case_name / cls_name / f"rank{rank}.json"
                         if plan["profile"] else None)
                t = time.perf_counter()
                times = run_config(rank, world, CLASSES[cls_name], cases[case_name],
                                   warmup=plan["warmup"], iterations=plan["iterations"],
                                   trace_path=trace, device=device)
                results[key] = {"iter_ns": times,
                                "trace": None if trace is None else str(trace.relative_to(out)),
                                "wall_s": time.perf_counter() - t}
                if rank == 0 and plan.get("verbose"):
                    print(f"  ran {key} in {time.perf_counter() - t:.1f} s", flush=True)
    finally:
        (out / f"rank{rank}.times.json").write_text(json.dumps(results))
        dist.destroy_process_group()
