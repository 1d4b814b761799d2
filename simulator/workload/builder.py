"""Build workloads in code: uniform-cost models for tests, benchmarks and closed-form checks."""

from __future__ import annotations

from .model import NO_COMM_DP, NO_COMM_TP, Comm, Header, Layer, Workload


def make_layer(index: int, fwd: int, ig: int, wg: int, *, name: str | None = None,
               fwd_comm: Comm = NO_COMM_TP, ig_comm: Comm = NO_COMM_TP,
               wg_comm: Comm = NO_COMM_DP, update_time: int = 0) -> Layer:
    return Layer(index=index, name=name or f"layer{index}", fwd_compute=fwd, fwd_comm=fwd_comm,
                 ig_compute=ig, ig_comm=ig_comm, wg_compute=wg, wg_comm=wg_comm,
                 update_time=update_time, line=index + 3)


def uniform_workload(n_layers: int, fwd: int = 1000, ig: int = 1000, wg: int = 1000, *,
                     pp: int = 1, vpp: int = 1, ga: int = 1, pp_comm: int = 0, tp: int = 1,
                     all_gpus: int | None = None, fwd_comm: Comm = NO_COMM_TP,
                     ig_comm: Comm = NO_COMM_TP, wg_comm: Comm = NO_COMM_DP,
                     checkpoints: tuple[int, ...] = (), checkpoint_initiates: tuple[int, ...] = (),
                     update_time: int = 0, path: str = "<uniform>") -> Workload:
    """``n_layers`` identical layers; F = fwd, I = ig, W = wg (ns) per layer."""
    header = Header(policy="HYBRID_TRANSFORMER_FWD_IN_BCKWD", tp=tp, pp=pp, vpp=vpp, ga=ga,
                    all_gpus=all_gpus if all_gpus is not None else tp * pp, pp_comm=pp_comm,
                    checkpoints=checkpoints, checkpoint_initiates=checkpoint_initiates)
    layers = tuple(make_layer(i, fwd, ig, wg, fwd_comm=fwd_comm, ig_comm=ig_comm,
                              wg_comm=wg_comm, update_time=update_time) for i in range(n_layers))
    return Workload(path=path, header=header, layers=layers)
