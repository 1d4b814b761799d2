"""From a schedule (after the comm pass) to each rank's op list, with the timing of every
compute step worked out before the run.

Ops are plain tuples, cheap to walk in the hot loop:

- ``(COMPUTE, cost, actions)``: one action, or the two halves of an overlapped pair;
- ``(RECV, key, src_rank, None, transfer)`` and ``(SEND, key, dst_rank, bytes, transfer)``;
- ``(BATCH, ops)``: sends and receives posted together (blocking / batched point-to-point).

A :class:`StepCost` is shared by every step with the same stages, kinds, roles and phases: only
the microbatch differs between them.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..schedules.comm_pass import Compute, Op
from ..schedules.schedule import Schedule
from ..system.config import SystemConfig
from ..system.topology import LinkModel
from ..workload.model import Header, Layer
from .costs import ChunkCosts, DPCollective, chunk_costs
from .memory import MemoryModel

RECV, COMPUTE, SEND, BATCH = 0, 1, 2, 3


@dataclass(frozen=True)
class StepCost:
    """Timing of a compute step (see the module docstring)."""

    duration: float          # without variation
    compute: float           # the part variation scales
    comm: float              # blocking collectives inside the step
    paired: bool
    shares: tuple  # per action: (start fraction, end fraction, chunk, ActionCost, DP kind|None)
    dp: tuple[tuple[int, float, DPCollective], ...]  # (chunk, offset in step, collective)
    alloc: float             # activation bytes allocated when the step starts
    free: float              # activation bytes freed when it ends
    phases: tuple[str, ...]  # Warmup / Steady / Cooldown of each action


@dataclass(frozen=True)
class IterationRows:
    """What the once-per-iteration rows (AICB's DP/optimizer rows) cost every rank."""

    compute_ns: float
    dp: tuple[DPCollective, ...]
    layer_ops: int


def iteration_rows(layers: tuple[Layer, ...], header: Header, system: SystemConfig,
                   links: LinkModel) -> IterationRows:
    if not layers:
        return IterationRows(0.0, (), 0)
    c = chunk_costs(layers, {}, header, system, links)
    dps = tuple(DPCollective(d.layer, c.F.duration + d.ready_offset, d.duration, d.update_ns,
                             d.nbytes) for d in c.dp_after_B)
    return IterationRows(c.F.duration + c.B.duration, dps, c.F.layer_ops + c.B.layer_ops)


@dataclass
class ProgramBuilder:
    schedule: Schedule
    costs: list[ChunkCosts]
    memory: MemoryModel
    labels: list[list[str]]          # phase of every action, per rank
    p2p: str                         # async | blocking | batched
    pp_comm: int

    def compile(self, rank: int, program: tuple[Op, ...]) -> list[tuple]:
        actions = self.schedule.ranks[rank]
        labels = self.labels[rank]
        # the last weight-carrying backward of each stage issues its DP collectives (with no
        # flush, e.g. 2BW, each minibatch of the continuous schedule reduces its own)
        split = {(a.stage, a.microbatch) for a in actions if a.kind == "W"}
        weight_bwd = [a.kind == "W" or (a.kind == "B" and (a.stage, a.microbatch) not in split)
                      for a in actions]
        per_minibatch = self.schedule.meta.get("microbatches_per_iteration") or 0
        last_wb: dict[tuple[int, int], int] = {}
        for i, a in enumerate(actions):
            if weight_bwd[i]:
                minibatch = a.microbatch // per_minibatch if per_minibatch else 0
                last_wb[(a.stage, minibatch)] = i
        last = set(last_wb.values())
        cache: dict[tuple, StepCost] = {}
        ops: list[tuple] = []
        pos = 0   # compute steps appear in the order of the rank's actions
        for op in program:
            if type(op) is Compute:
                n = len(op.actions)
                key = tuple((a.stage, a.kind, weight_bwd[pos + k], pos + k in last,
                             labels[pos + k]) for k, a in enumerate(op.actions))
                cost = cache.get(key)
                if cost is None:
                    cost = cache[key] = self.step_cost(key)
                ops.append((COMPUTE, cost, op.actions))
                pos += n
            elif op.op == "recv":
                ops.append((RECV, op.key, op.src_rank, None, op))
            else:
                ops.append((SEND, op.key, op.dst_rank, self.pp_comm, op))
        if self.p2p == "async":
            return ops
        # blocking: every transfer is a rendezvous of its own; batched: adjacent transfers
        # (Megatron's send_forward_recv_backward and friends) are posted and complete together
        out: list[tuple] = []
        for op in ops:
            if op[0] == COMPUTE:
                out.append(op)
            elif self.p2p == "batched" and out and out[-1][0] == BATCH:
                out[-1] = (BATCH, out[-1][1] + (op,))
            else:
                out.append((BATCH, (op,)))
        return out

    def step_cost(self, key: tuple) -> StepCost:
        """``key``: per action (stage, kind, carries weights, issues the DP collectives, phase)."""
        chunk_of = self.schedule.stage_chunk
        costs = [self.costs[chunk_of[stage]].of(kind) for stage, kind, *_ in key]
        total = sum(c.duration for c in costs)
        comm = sum(c.comm for c in costs)
        paired = len(costs) > 1
        # an overlapped pair: communication hides under the other half's compute
        duration = max(total - comm, comm) if paired else total
        shares = []
        dp = []
        acc = 0.0
        alloc = free = 0.0
        for (stage, kind, weights, issues_dp, _), c in zip(key, costs):
            lo = acc / total if total else 0.0
            acc += c.duration
            hi = acc / total if total else 0.0
            chunk = chunk_of[stage]
            shares.append((lo, hi, chunk, c, kind if issues_dp else None))
            if kind == "F":
                alloc += self.memory.activation_bytes[chunk]
            if weights:
                free += self.memory.activation_bytes[chunk]
            if issues_dp:
                offset = lo * duration
                scale = (duration / total) if total else 0.0
                for d in self.costs[chunk].dp_after(kind):
                    dp.append((chunk, offset + d.ready_offset * scale, d))
        return StepCost(duration, total - comm, comm, paired, tuple(shares), tuple(dp),
                        alloc, free, tuple(k[4] for k in key))
