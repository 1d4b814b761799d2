"""Regenerate the PyTorch golden schedules in this folder (needs torch; the tests do not).

Run from the repository root:  ``python3 tests/schedules/golden/make_goldens.py``

For every schedule class of ``torch.distributed.pipelining`` we reproduce, and every (P, M, v) of
the grid below, this records each rank's compute actions in the order torch's runtime executes
them. No process group is needed: the schedules are built on stand-in stages that record the
calls ``_step_microbatches`` makes (``forward_one_chunk``, ``backward_one_chunk``,
``backward_weight_one_chunk``); communication returns no ops. The recorded order is the truth:
for the multi-stage classes it is cross-checked against the compute actions of
``pipeline_order_with_comms`` (which carries the overlapped pairs), and for every class we note
whether the public ``pipeline_order`` attribute agrees with it (Schedule1F1B's does not).

Output: one JSON file per class, ``<ClassName>.json``; see README.md for the format.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch
from torch.distributed.pipelining import schedules as S

HERE = Path(__file__).resolve().parent
COMMAND = "python3 tests/schedules/golden/make_goldens.py"

PPS = (1, 2, 3, 4, 8)
MICROBATCHES = (1, 2, 3, 4, 5, 6, 8, 12, 16)
VPPS = (1, 2, 3)

# class name -> local stages per rank it can take, stage placement style
CLASSES = {
    "ScheduleGPipe": ((1,), "loop"),
    "Schedule1F1B": ((1,), "loop"),
    "ScheduleInterleaved1F1B": (VPPS, "loop"),
    "ScheduleLoopedBFS": (VPPS, "loop"),
    "ScheduleInterleavedZeroBubble": (VPPS, "loop"),
    "ScheduleZBVZeroBubble": ((2,), "v"),
    "ScheduleDualPipeV": ((2,), "v"),
}

_KIND = {S.FORWARD: "F", S.FULL_BACKWARD: "B", S.BACKWARD_INPUT: "I", S.BACKWARD_WEIGHT: "W"}


class RecordingStage:
    """Stands in for a PipelineStage: no tensors, no communication; logs the compute calls."""

    def __init__(self, stage_index: int, num_stages: int, group_size: int, group_rank: int,
                 log: list[str]) -> None:
        self.stage_index = stage_index
        self.num_stages = num_stages
        self.group_size = group_size
        self.group_rank = group_rank
        self.stage_index_to_group_rank: dict[int, int] = {}
        self.submod = torch.nn.Identity()
        self.has_backward = True
        self.device = torch.device("cpu")
        self.output_chunks: list = []
        self._log = log

    @property
    def is_first(self) -> bool:
        return self.stage_index == 0

    @property
    def is_last(self) -> bool:
        return self.stage_index == self.num_stages - 1

    # compute: record
    def forward_one_chunk(self, mb, args=None, kwargs=None, save_forward_output=True):
        self._log.append(f"{self.stage_index}F{mb}")
        return None

    def backward_one_chunk(self, mb, loss=None, full_backward=True, last_backward=False):
        self._log.append(f"{self.stage_index}{'B' if full_backward else 'I'}{mb}")

    def backward_weight_one_chunk(self, mb, last_backward=False):
        self._log.append(f"{self.stage_index}W{mb}")

    # communication and bookkeeping: nothing to do
    def get_fwd_recv_ops(self, mb):
        return []

    get_fwd_send_ops = get_bwd_recv_ops = get_bwd_send_ops = get_fwd_recv_ops

    def set_local_fwd_input(self, output, mb):
        pass

    def set_local_bwd_input(self, grads, mb):
        pass

    def get_local_bwd_output(self, mb):
        return None

    def perform_reduce_grad(self, factor):
        pass

    def scale_grads(self, factor):
        pass

    def clear_runtime_states(self):
        pass


def _stage_ids(style: str, pp: int, vpp: int, rank: int) -> list[int]:
    mapping = S.generate_rank_to_stage_mapping(pp, pp * vpp, style=style)
    return mapping[rank]


def _flatten(actions) -> tuple[list[str], bool]:
    """Compute actions of a torch action list as strings; OVERLAP_F_B -> 'xF@k', 'yB@k'."""
    out: list[str] = []
    pairs = 0
    for a in actions:
        if a is None:
            continue
        if a.computation_type == S.OVERLAP_F_B:
            for sub in a.sub_actions:
                out.append(f"{sub.stage_index}{_KIND[sub.computation_type]}{sub.microbatch_index}"
                           f"@{pairs}")
            pairs += 1
        elif a.computation_type in _KIND:
            out.append(f"{a.stage_index}{_KIND[a.computation_type]}{a.microbatch_index}")
    return out, pairs > 0


def _strip_pairs(actions: list[str]) -> list[str]:
    return [a.split("@")[0] for a in actions]


_BOOKKEEPING = (S.UNSHARD, S.RESHARD, S.REDUCE_GRAD)


def _lowered(actions) -> list[str]:
    """A rank's ``pipeline_order_with_comms`` in torch's notation (``0SEND_F1``,
    ``(0F7;7B3)OVERLAP_F_B``), the FSDP / REDUCE_GRAD bookkeeping dropped."""
    return [str(a) for a in actions if a is not None and a.computation_type not in _BOOKKEEPING]


def build(cls_name: str, pp: int, m: int, vpp: int, style: str, lowered_out: list | None = None):
    """The per-rank runtime orders of one torch schedule, or raise what torch raises; for the
    multi-stage classes each rank's lowered list (with communication) goes to
    ``lowered_out``."""
    cls = getattr(S, cls_name)
    ranks: list[list[str]] = []
    order_matches = True
    for rank in range(pp):
        log: list[str] = []
        stages = [RecordingStage(s, pp * vpp, pp, rank, log) for s in _stage_ids(style, pp, vpp, rank)]
        if issubclass(cls, S.PipelineScheduleSingle):
            sched = cls(stages[0], m, loss_fn=None)
            sched._stage_forward_initialized = True
        else:
            sched = cls(stages, m, loss_fn=None)
            sched._stages_forward_initialized = True
        sched._step_microbatches()
        declared, _ = _flatten(sched.pipeline_order[rank])
        if issubclass(cls, S._PipelineScheduleRuntime):
            lowered, _ = _flatten(sched.pipeline_order_with_comms[rank])
            if _strip_pairs(lowered) != log:
                raise AssertionError(f"{cls_name} P={pp} M={m} v={vpp} rank {rank}: runtime "
                                     f"executed {log} but pipeline_order_with_comms says {lowered}")
            ranks.append(lowered)
            if lowered_out is not None:
                lowered_out.append(_lowered(sched.pipeline_order_with_comms[rank]))
        else:
            ranks.append(log)
        order_matches &= _strip_pairs(declared) == log
    return ranks, order_matches


def main() -> int:
    for cls_name, (vpps, style) in CLASSES.items():
        cases, refused, lowered_cases = [], [], []
        for pp in PPS:
            for m in MICROBATCHES:
                for vpp in vpps:
                    entry = {"pp": pp, "microbatches": m, "vpp": vpp}
                    lowered: list = []
                    try:
                        ranks, matches = build(cls_name, pp, m, vpp, style, lowered)
                    except (ValueError, RuntimeError, AssertionError, KeyError, IndexError) as err:
                        refused.append({**entry, "error": f"{type(err).__name__}: "
                                        f"{str(err).splitlines()[0] if str(err) else ''}"})
                        continue
                    cases.append({**entry, "pipeline_order_matches_runtime": matches,
                                  "ranks": ranks})
                    if lowered:
                        lowered_cases.append({**entry, "ranks": lowered})
        if lowered_cases:
            doc = {
                "torch_class": f"torch.distributed.pipelining.schedules.{cls_name}",
                "torch_version": torch.__version__,
                "command": COMMAND,
                "placement": style,
                "order": "pipeline_order_with_comms: the lowered list torch's multi-stage "
                         "runtime executes (_add_unshard_reshard, _add_reduce_grad, then "
                         "_add_send_recv), its UNSHARD / RESHARD / REDUCE_GRAD actions dropped",
                "grid": {"pp": list(PPS), "microbatches": list(MICROBATCHES),
                         "vpp": list(vpps)},
                "cases": lowered_cases,
                "refused": [],
            }
            path = HERE / "lowered" / f"{cls_name}.json"
            path.parent.mkdir(exist_ok=True)
            path.write_text(_dump(doc))
            print(f"lowered/{path.name}: {len(lowered_cases)} cases", file=sys.stderr)
        doc = {
            "torch_class": f"torch.distributed.pipelining.schedules.{cls_name}",
            "torch_version": torch.__version__,
            "command": COMMAND,
            "placement": style,
            "order": "runtime: compute actions in the order _step_microbatches executes them; "
                     "overlapped pairs (OVERLAP_F_B) as two consecutive actions suffixed @k, "
                     "k = 0, 1, ... counting the pairs on that rank",
            "grid": {"pp": list(PPS), "microbatches": list(MICROBATCHES), "vpp": list(vpps)},
            "cases": cases,
            "refused": refused,
        }
        path = HERE / f"{cls_name}.json"
        with open(path, "w") as fh:
            fh.write(_dump(doc))
        print(f"{path.name}: {len(cases)} cases, {len(refused)} refused", file=sys.stderr)
    return 0


def _dump(doc: dict) -> str:
    """JSON with one rank per line: small diffs, readable by eye."""
    head = {k: v for k, v in doc.items() if k not in ("cases", "refused")}
    lines = ["{"]
    for k, v in head.items():
        lines.append(f"  {json.dumps(k)}: {json.dumps(v)},")
    lines.append('  "refused": [')
    lines.append(",\n".join(f"    {json.dumps(r)}" for r in doc["refused"]))
    lines.append("  ],")
    lines.append('  "cases": [')
    blocks = []
    for case in doc["cases"]:
        meta = {k: v for k, v in case.items() if k != "ranks"}
        ranks = ",\n".join(f"      {json.dumps(r)}" for r in case["ranks"])
        blocks.append(f"    {json.dumps(meta)[:-1]}, \"ranks\": [\n{ranks}\n    ]}}")
    lines.append(",\n".join(blocks))
    lines.append("  ]")
    lines.append("}")
    text = "\n".join(lines) + "\n"
    json.loads(text)  # never write a file we cannot read back
    return text


if __name__ == "__main__":
    sys.exit(main())
