"""Run a pipesim CSV on PyTorch's pipeline runtime (gloo, CPU) and compare the gradients with
one process: the check behind docs/planning.md's "Running the CSV on PyTorch".

    pipesim schedule auto --pp 4 -m 8 --csv a.csv
    python benchmarks/torch_auto_csv.py a.csv 4 1 8        # CSV, P, v (1, or 2 = V), M

Each rank builds the stages the CSV places on it (loop placement for v = 1, V for v = 2): a
mismatch makes torch's runtime hang until the gloo timeout. The model is one Linear+Tanh per
stage; the reference sums the per-microbatch mean-squared losses and divides by M, as torch's
stage scales gradients. Needs torch (not a pipesim dependency).
"""

import os
import sys

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn as nn
from torch.distributed.pipelining import PipelineStage
from torch.distributed.pipelining.schedules import _PipelineScheduleRuntime

WIDTH, ROWS_PER_MB = 16, 4


def placement(pp: int, vpp: int) -> list[int]:
    return list(range(pp)) if vpp == 1 else list(range(pp)) + list(range(pp - 1, -1, -1))


def model(n_stages: int) -> list[nn.Module]:
    torch.manual_seed(0)
    return [nn.Sequential(nn.Linear(WIDTH, WIDTH), nn.Tanh()) for _ in range(n_stages)]


def loss_fn(out, target):
    return ((out - target) ** 2).mean()


def worker(rank: int, csv: str, pp: int, vpp: int, m: int, port: int) -> None:
    dist.init_process_group("gloo", rank=rank, world_size=pp,
                            init_method=f"tcp://127.0.0.1:{port}")
    n_stages = pp * vpp
    chunks = model(n_stages)
    mine = [s for s, r in enumerate(placement(pp, vpp)) if r == rank]
    stages = [PipelineStage(chunks[s], s, n_stages, torch.device("cpu")) for s in mine]
    sched = _PipelineScheduleRuntime(stages, n_microbatches=m, loss_fn=loss_fn)
    sched._load_csv(csv, "compute_only")
    torch.manual_seed(1)
    x, y = torch.randn(ROWS_PER_MB * m, WIDTH), torch.randn(ROWS_PER_MB * m, WIDTH)
    sched.step(x, target=y, losses=[])
    ref = model(n_stages)
    out = x
    for chunk in ref:
        out = chunk(out)
    (sum(loss_fn(o, t) for o, t in zip(out.chunk(m), y.chunk(m))) / m).backward()
    err = max((chunks[s][0].weight.grad - ref[s][0].weight.grad).abs().max().item()
              for s in mine)
    print(f"rank {rank} stages {mine}: max |grad - reference| = {err:.2e}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    if len(sys.argv) != 5:
        sys.exit(__doc__)
    csv, pp, vpp, m = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
    mp.spawn(worker, args=(csv, pp, vpp, m, int(os.environ.get("PORT", "29533"))), nprocs=pp)
