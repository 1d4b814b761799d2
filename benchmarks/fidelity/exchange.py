"""Time gloo's point-to-point transfers between two processes, as the pipeline runtimes use them.

    python -m benchmarks.fidelity.exchange [--samples 200] [--bytes 128]

- one-way: the receiver has posted its ``irecv``; after a barrier the sender posts its
  ``isend``; the receiver's wait (what ``links.latency_ns`` stands for);
- two-way exchange: both ranks post ``isend`` + ``irecv`` to each other at once in one
  ``batch_isend_irecv`` (torch's single-stage runtime fuses "send forward, receive backward"
  this way) and wait for both (what ``runtime.exchange_ns`` adds to a pair of transfers);
- post: the ``batch_isend_irecv`` call alone;
- relay (3 processes): the middle rank receives from one neighbour and sends to the other in
  one batch, as a pipeline stage does, and waits for both.

Prints the median, p90, mean and a histogram (250 µs bins) of each. The calibration fits one
constant per run for the exchange; this shows the distribution it stands for. Needs torch.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import sys
import tempfile
import time
from collections import Counter
from datetime import timedelta
from pathlib import Path

BIN_NS = 250_000


def _worker(rank: int, port: int, samples: int, nbytes: int, out: str) -> None:
    import torch
    import torch.distributed as dist

    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=2, timeout=timedelta(seconds=60))
    peer = 1 - rank
    n = max(1, nbytes // 4)
    a, b = torch.zeros(n), torch.zeros(n)
    got: dict[str, list[int]] = {"one_way": [], "two_way": [], "post": []}
    for _ in range(samples):
        if rank == 1:
            work = dist.irecv(b, peer)
        dist.barrier()
        t = time.perf_counter_ns()
        if rank == 0:
            work = dist.isend(a, peer)
        work.wait()
        got["one_way"].append(time.perf_counter_ns() - t)
        dist.barrier()
        t = time.perf_counter_ns()
        works = dist.batch_isend_irecv([dist.P2POp(dist.isend, a, peer),
                                        dist.P2POp(dist.irecv, b, peer)])
        got["post"].append(time.perf_counter_ns() - t)
        for w in works:
            w.wait()
        got["two_way"].append(time.perf_counter_ns() - t)
        dist.barrier()
        time.sleep(0.005)
    if rank == 1:
        Path(out).write_text(json.dumps(got))
    dist.destroy_process_group()


def _relay(rank: int, port: int, samples: int, nbytes: int, out: str) -> None:
    import torch
    import torch.distributed as dist

    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=3, timeout=timedelta(seconds=60))
    n = max(1, nbytes // 4)
    a, b = torch.zeros(n), torch.zeros(n)
    got: list[int] = []
    for _ in range(samples):
        dist.barrier()
        t = time.perf_counter_ns()
        if rank == 0:
            works = [dist.isend(a, 1)]
        elif rank == 1:
            works = dist.batch_isend_irecv([dist.P2POp(dist.irecv, b, 0),
                                            dist.P2POp(dist.isend, a, 2)])
        else:
            works = [dist.irecv(b, 1)]
        for w in works:
            w.wait()
        got.append(time.perf_counter_ns() - t)
        dist.barrier()
        time.sleep(0.005)
    if rank == 1:
        Path(out).write_text(json.dumps({"relay": got}))
    dist.destroy_process_group()


def summary(name: str, xs: list[int]) -> str:
    xs = sorted(xs)
    hist = Counter(min(20, x // BIN_NS) for x in xs)
    bins = ", ".join(f"{k * BIN_NS / 1e6:g}{'+' if k == 20 else ''}: {v}"
                     for k, v in sorted(hist.items()))
    return (f"{name:8s} median {statistics.median(xs) / 1e3:7.0f} us  p90 "
            f"{xs[int(0.9 * len(xs))] / 1e3:7.0f} us  mean {statistics.mean(xs) / 1e3:7.0f} us"
            f"  [ms bin: count] {bins}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.fidelity.exchange",
                                 description=__doc__.split("\n\n")[0])
    ap.add_argument("--samples", type=int, default=200)
    ap.add_argument("--bytes", type=int, default=128, help="bytes per transfer")
    a = ap.parse_args(argv)
    if a.samples < 1:
        print(f"--samples: expected a positive number, got {a.samples}", file=sys.stderr)
        return 2
    import torch.multiprocessing as mp

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with tempfile.TemporaryDirectory() as tmp:
        out = str(Path(tmp) / "times.json")
        mp.spawn(_worker, args=(port, a.samples, a.bytes, out), nprocs=2, join=True)
        got = json.loads(Path(out).read_text())
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        mp.spawn(_relay, args=(port, a.samples, a.bytes, out), nprocs=3, join=True)
        got.update(json.loads(Path(out).read_text()))
    print(f"gloo, 2 processes (relay: 3), {a.bytes} B, {a.samples} samples, load average "
          f"{os.getloadavg()[0]:.2f}")
    for key in ("one_way", "two_way", "post", "relay"):
        print(summary(key, got[key]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
