"""The AICB layout's search for ``ga`` back-to-back repeats of one block of rows, against a
plain reference that tries every block size and every start one by one."""

from __future__ import annotations

import random

import pytest

from simulator.workload import aicb


def _reference(ids: list[int], ga: int):
    n = len(ids)
    for size in range(n // ga, 0, -1):
        span = (ga - 1) * size
        ok = [s for s in range(n - ga * size + 1)
              if all(ids[s + k] == ids[s + k + size] for k in range(span))
              and ids[s - size:s] != ids[s:s + size]
              and ids[s + ga * size:s + (ga + 1) * size] != ids[s:s + size]]
        if ok:
            block = ids[ok[0]:ok[0] + size]
            period = next(p for p in range(1, size + 1)
                          if size % p == 0 and block[p:] == block[:-p] or p == size)
            if period < size:
                return "refused", f"each repeat is {size // period} x the same {period} rows"
            return ok[0], size, ok[1:]
    return "refused", f"no block of rows repeated {ga} times"


def _found(ids: list[int], ga: int, monkeypatch):
    monkeypatch.setattr(aicb, "_ids", list)   # rows given as their ids
    try:
        return aicb._find_repeats(tuple(ids), ga)
    except aicb.NotAicb as err:
        return "refused", str(err)


def test_the_search_finds_what_trying_every_start_finds(monkeypatch):
    rng = random.Random(23)
    for _ in range(3000):
        ga = rng.randint(1, 4)
        block = [rng.randint(0, rng.randint(0, 4)) for _ in range(rng.randint(1, 5))]
        ids = ([rng.randint(0, 6) for _ in range(rng.randint(0, 3))] + block * ga
               + [rng.randint(0, 6) for _ in range(rng.randint(0, 3))])
        if rng.random() < 0.3:
            ids = [rng.randint(0, 3) for _ in range(rng.randint(1, 20))]
        if rng.random() < 0.2:
            ids[rng.randrange(len(ids))] = 9    # a row written once
        assert _found(ids, ga, monkeypatch) == _reference(ids, ga), (ids, ga)


@pytest.mark.parametrize("ids, ga, want", [
    ([7, 1, 2, 3, 1, 2, 3, 8], 2, (1, 3, [])),
    ([1, 2, 1, 2, 1, 2], 3, (0, 2, [])),
    ([5, 1, 1, 1, 1, 6], 2, ("refused", "each repeat is 2 x the same 1 rows")),
    (list(range(10_000)), 2, ("refused", "no block of rows repeated 2 times")),
])
def test_known_layouts(ids, ga, want, monkeypatch):
    assert _found(ids, ga, monkeypatch) == want


def _block(names: list[str]):
    from simulator.workload.model import NO_COMM_TP, Layer
    return tuple(Layer(i, n, 1, NO_COMM_TP, 1, NO_COMM_TP, 1, NO_COMM_TP, 0)
                 for i, n in enumerate(names))


def test_a_block_splits_into_its_repeated_layers_or_by_names_when_nothing_repeats():
    rows = _block(["embedding", "attention", "mlp", "attention", "mlp", "attention", "mlp",
                   "final_norm"])
    assert aicb._split_block(rows) == (1, [(1, 3), (3, 5), (5, 7)], 7)
    # every row distinct (numbered names): no period is tried, the names split it
    distinct = _block(["embedding"] + [f"{k}_{i}" for i in range(2_000)
                                       for k in ("attention", "mlp")] + ["final_norm"])
    assert aicb._split_block(distinct) == aicb._split_by_names(distinct)
    assert aicb._split_block(distinct)[1][:2] == [(1, 3), (3, 5)]
