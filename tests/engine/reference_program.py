"""The reference compiler the compact op lists (:class:`~simulator.engine.program.RankOps`, what
the engine walks) are checked against, op for op: a rank's op list built as a plain list from
the comm pass's op tuples, with the compiler's own step costs."""

from __future__ import annotations

from simulator.engine.program import (BATCH, COMPUTE, IRECV, RECV, SEND, TSEND, WAIT,
                                      ProgramBuilder, StepCost, _is_gpipe, _single_stage)
from simulator.schedules.comm_pass import Compute, Op
from simulator.schedules.registry import megatron_of


def reference_ops(builder: ProgramBuilder, rank: int, program: tuple[Op, ...]) -> list[tuple]:
    """Rank ``rank``'s op list, from the comm pass's op tuples ``program``."""
    weight_bwd, last = builder._roles(rank)
    labels = list(builder.labels[rank])     # read once per action below
    cache: dict[tuple, StepCost] = {}
    ops: list[tuple] = []
    pos = 0   # compute steps appear in the order of the rank's actions
    for op in program:
        if type(op) is Compute:
            key = builder._step_key(rank, pos, op.actions, weight_bwd, last, labels)
            cost = cache.get(key)
            if cost is None:
                cost = cache[key] = builder.step_cost(key)
            ops.append((COMPUTE, cost, op.actions))
            pos += len(op.actions)
        elif op.op == "recv":
            ops.append((RECV, op.key, op.src_rank, None, op))
        elif op.op == "send":
            ops.append((SEND, op.key, op.dst_rank, builder.pp_comm, op))
        elif op.op == "irecv":
            ops.append((IRECV, op.key, op.src_rank, None, op))
        else:   # "wait"
            ops.append((WAIT, op.key, op.src_rank, None, op))
    mode = builder.p2p
    if mode == "async":
        return ops
    if mode == "torch-multi":   # receives posted early by the comm pass
        return [(TSEND,) + op[1:] if op[0] == SEND else op for op in ops]
    if mode == "torch-single":
        return list(_single_stage(ops, _is_gpipe(builder.schedule)))
    if (mode == "batched" and builder.schedule.vpp > 1 and not builder.schedule.lowered
            and megatron_of(builder.schedule.name) == "interleaved"):
        ops = _megatron_interleaved_groups(ops, builder.schedule.meta["warmup"][rank])
    # blocking: every transfer is a rendezvous of its own; batched: adjacent transfers
    # (Megatron's send_forward_recv_backward and friends) are posted and complete together
    out: list[tuple] = []
    for op in ops:
        if op[0] == COMPUTE:
            out.append(op)
        elif mode == "batched" and out and out[-1][0] == BATCH:
            out[-1] = (BATCH, out[-1][1] + (op,))
        else:
            out.append((BATCH, (op,)))
    return out


def _megatron_interleaved_groups(ops: list[tuple], warmup: int) -> list[tuple]:
    """Megatron's interleaved loop without overlap, written as groups: a compute group is a
    steady forward (past ``warmup`` forwards) with the backward after it, or one compute step;
    between two groups every send of the first and every receive of the second, in that
    order (send_forward_backward_recv_forward_backward and friends)."""
    groups: list[dict] = []      # each: computes, its receives (before), its sends (after)
    lead: list[tuple] = []       # transfers before the first compute step
    forwards = 0
    pending_recvs: list[tuple] = []
    for op in ops:
        if op[0] == COMPUTE:
            kind = op[2][0].kind if len(op[2]) == 1 else None
            last = groups[-1] if groups else None
            if (kind == "B" and last is not None and last["steady_f"]
                    and len(last["computes"]) == 1):
                last["computes"].append(op)
                last["recvs"] += pending_recvs
            else:
                groups.append({"computes": [op], "recvs": pending_recvs, "sends": [],
                               "steady_f": kind == "F" and forwards >= warmup})
            forwards += kind == "F"
            pending_recvs = []
        elif op[0] == SEND:
            if groups and not pending_recvs:
                groups[-1]["sends"].append(op)
            else:
                lead.append(op)
        else:
            pending_recvs.append(op)
    out = list(lead)
    for g in groups:
        out += g["recvs"] + g["computes"] + g["sends"]
    return out + pending_recvs
