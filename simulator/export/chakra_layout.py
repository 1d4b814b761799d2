"""Where each node of a Chakra export goes: transfers numbered (tags), matched to the actions
that produce and consume them, and every node's id in its rank's file, all with numpy (a
million-action run's 2.9M nodes without a Python step per node)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..errors import ConfigError
from .chakra_tables import NO_PAIR, Actions, Sends


def tag_order(sends: Sends) -> np.ndarray:
    """The run's transfers (numbered rank after rank, each rank's in its order) in tag order:
    by iteration, issue time, source, destination, microbatch and data; ties in the run's
    order (which keeps each source rank's own order)."""
    seq = np.arange(len(sends.issued))
    return np.lexsort((seq, sends.data, sends.microbatch, sends.dst_rank, sends.src_rank,
                       sends.issued, sends.iteration))


class Tags:
    """The run's transfers in tag order (tag = index): each one's fields."""

    def __init__(self, sends: Sends, order: np.ndarray) -> None:
        self.n = len(order)
        self.src = sends.src_rank[order]
        self.dst = sends.dst_rank[order]
        self.src_stage = sends.src_stage[order]
        self.dst_stage = sends.dst_stage[order]
        self.data = sends.data[order]
        self.datas = sends.datas
        self.microbatch = sends.microbatch[order]
        self.iteration = sends.iteration[order]
        self.nbytes = sends.nbytes[order]


@dataclass
class Links:
    """Which actions send and receive each tag: (action, tag) pairs sorted by action, then tag
    (actions are global indices, rank after rank)."""

    send_action: np.ndarray
    send_tag: np.ndarray
    recv_action: np.ndarray
    recv_tag: np.ndarray


def match_transfers(acts: Actions, tags: Tags) -> Links:
    """Each transfer's producing action (on its source rank: the F of its stage and microbatch
    for an activation, the B, else the I, for a gradient) and consuming one (the same kinds on
    its destination rank), in one sorted search: a key met by several actions names them all."""
    P = len(acts.bounds) - 1
    n_it = int(max(acts.iteration.max(initial=0), tags.iteration.max(initial=0))) + 1
    n_st = int(max(acts.stage.max(initial=0), tags.src_stage.max(initial=0),
                   tags.dst_stage.max(initial=0))) + 1
    n_kd = len(acts.kinds) + 1
    n_mb = int(max(acts.microbatch.max(initial=0), tags.microbatch.max(initial=0))) + 1

    def key(rank, it, stage, kind, mb):
        return (((rank * n_it + it) * n_st + stage) * n_kd + kind) * n_mb + mb

    rank_of = np.repeat(np.arange(P), np.diff(acts.bounds))
    akey = key(rank_of, acts.iteration, acts.stage, acts.kind, acts.microbatch)
    perm = np.argsort(akey, kind="stable")
    skey = akey[perm]
    code = {k: i for i, k in enumerate(acts.kinds)}
    none = len(acts.kinds)          # a kind no action has
    activation = tags.data == (tags.datas.index("F") if "F" in tags.datas else -1)
    first = np.where(activation, code.get("F", none), code.get("B", none))
    second = np.where(activation, none, code.get("I", none))

    unique = not bool((skey[1:] == skey[:-1]).any())

    def search(q):
        lo = np.searchsorted(skey, q, "left")
        if unique:   # one action per key: found or not
            return lo, lo + (skey[np.minimum(lo, len(skey) - 1)] == q) if len(skey) else lo
        return lo, np.searchsorted(skey, q, "right")

    def find(rank, stage):
        lo, hi = search(key(rank, tags.iteration, stage, first, tags.microbatch))
        miss = np.flatnonzero(hi == lo)
        if len(miss):      # a gradient's producer: the B, else the I
            a, b = search(key(rank[miss], tags.iteration[miss], stage[miss], second[miss],
                              tags.microbatch[miss]))
            lo[miss], hi[miss] = a, b
        return lo, hi

    slo, shi = find(tags.src, tags.src_stage)
    rlo, rhi = find(tags.dst, tags.dst_stage)
    bad = (shi == slo) | (rhi == rlo)
    if bad.any():
        t = int(np.flatnonzero(bad)[0])
        side, rank = (("producing", tags.src[t]) if shi[t] == slo[t] else
                      ("consuming", tags.dst[t]))
        raise ConfigError(f"--chakra: transfer {tags.src_stage[t]}->{tags.dst_stage[t]} of "
                          f"microbatch {tags.microbatch[t]} has no {side} action on rank "
                          f"{rank}")

    def pairs(lo, hi):
        counts = hi - lo
        tag = np.repeat(np.arange(tags.n), counts)
        within = np.arange(len(tag)) - np.repeat(np.cumsum(counts) - counts, counts)
        action = perm[np.repeat(lo, counts) + within]
        o = np.lexsort((tag, action))
        return action[o], tag[o]

    return Links(*pairs(slo, shi), *pairs(rlo, rhi))


@dataclass
class Layout:
    """Where each node goes: a rank's nodes are, step after step, the step's receives, its
    compute nodes, its sends (a step: one action, or an overlapped pair's two halves); ids are
    positions in the rank's file."""

    node_bounds: np.ndarray    # P + 1: first node of each rank, over all ranks
    comp_id: np.ndarray        # per action: its node id (in its rank)
    recv_id: np.ndarray        # per (action, tag) receive pair
    send_id: np.ndarray
    step: np.ndarray           # per action: its step (global)
    step_first: np.ndarray     # per step: its first action
    step_last: np.ndarray      # per step: its last action
    recv_step: np.ndarray      # per receive pair: its step
    recv_step_first: np.ndarray   # per step: its first receive pair


def overlapped_steps(acts: Actions) -> np.ndarray:
    """Per action, whether the next action is the second half of its overlapped pair: both
    halves of one pair number and iteration on one rank, pairs taken left to right (pipesim's
    OVERLAP_F_B: it starts when both halves' inputs are in, sends both outputs when it ends)."""
    n = len(acts.pair)
    joined = np.zeros(n, dtype=bool)
    if n < 2:
        return joined
    rank_end = np.zeros(n, dtype=bool)
    rank_end[acts.bounds[1:][acts.bounds[1:] > 0] - 1] = True
    cand = ((acts.pair[:-1] != NO_PAIR) & (acts.pair[1:] == acts.pair[:-1])
            & (acts.iteration[1:] == acts.iteration[:-1]) & ~rank_end[:-1])
    last = -2
    for x in np.flatnonzero(cand).tolist():
        if x != last + 1:        # not the second half of the pair just taken
            joined[x] = True
            last = x
    return joined


def layout_nodes(acts: Actions, links: Links) -> Layout:
    n = len(acts.stage)
    joined = overlapped_steps(acts)
    starts = np.ones(n, dtype=bool)
    starts[1:] = ~joined[:-1]
    step = np.cumsum(starts) - 1
    n_steps = int(step[-1]) + 1 if n else 0
    step_first = np.flatnonzero(starts)
    step_last = np.append(step_first[1:], n) - 1
    size_c = step_last - step_first + 1
    recv_step, send_step = step[links.recv_action], step[links.send_action]
    size_r = np.bincount(recv_step, minlength=n_steps)
    size_s = np.bincount(send_step, minlength=n_steps)
    size = size_r + size_c + size_s
    at = np.cumsum(size) - size                   # first node of each step, over all ranks
    rank_first_step = np.searchsorted(step_first, acts.bounds)   # P + 1
    node_bounds = np.append(at, at[-1] + size[-1] if n_steps else 0)[rank_first_step]
    recv_first = np.cumsum(size_r) - size_r       # first receive pair of each step
    send_first = np.cumsum(size_s) - size_s
    rank_of_step = np.repeat(np.arange(len(acts.bounds) - 1), np.diff(rank_first_step))
    base = at - node_bounds[rank_of_step]         # first node id of each step in its rank
    comp_id = base[step] + size_r[step] + (np.arange(n) - step_first[step])
    recv_id = base[recv_step] + (np.arange(len(recv_step)) - recv_first[recv_step])
    send_id = (base[send_step] + size_r[send_step] + size_c[send_step]
               + (np.arange(len(send_step)) - send_first[send_step]))
    return Layout(node_bounds, comp_id, recv_id, send_id, step, step_first, step_last,
                   recv_step, recv_first)
