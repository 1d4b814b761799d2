"""Small workload files and spec files for the sweep tests."""

from __future__ import annotations

from pathlib import Path

HEADER = ("HYBRID_TRANSFORMER_FWD_IN_BCKWD model_parallel_NPU_group: 1 ep: 1 pp: 2 vpp: 1 ga: 4 "
          "all_gpus: 2 checkpoints: 0 checkpoint_initiates: 0 pp_comm: {pp_comm} layout: model")


def workload_text(n_layers: int = 8, pp_comm: int = 0, cost: int = 1000) -> str:
    """``n_layers`` identical layers, F = I = W = ``cost`` ns, no collectives (model layout)."""
    rows = [f"layer{i}\t-1\t{cost}\tNONE\t0\t{cost}\tNONE\t0\t{cost}\tNONE\t0\t0"
            for i in range(n_layers)]
    return "\n".join([HEADER.format(pp_comm=pp_comm), str(n_layers), *rows]) + "\n"


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path
