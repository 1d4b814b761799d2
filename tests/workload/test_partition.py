"""Model-layout partition: contiguous chunks (remainder to the first ones) and recompute plans."""

from __future__ import annotations

import pytest

from simulator.errors import ConfigError
from simulator.workload import (Partition, chunk_bounds, load_workload, partition_model,
                                uniform_workload)
from simulator.workload.partition import recompute_plan
from simulator.workload.partition import partition


@pytest.mark.parametrize("n_layers, n_chunks, bounds", [
    (10, 4, [(0, 3), (3, 6), (6, 8), (8, 10)]),
    (8, 4, [(0, 2), (2, 4), (4, 6), (6, 8)]),
    (7, 3, [(0, 3), (3, 5), (5, 7)]),
    (3, 3, [(0, 1), (1, 2), (2, 3)]),
    (5, 1, [(0, 5)]),
    (2, 3, [(0, 1), (1, 2), (2, 2)]),
    (0, 1, [(0, 0)]),
])
def test_chunk_bounds(n_layers, n_chunks, bounds):
    assert chunk_bounds(n_layers, n_chunks) == bounds


@pytest.mark.parametrize("n_chunks", [0, -2])
def test_chunk_bounds_needs_a_chunk(n_chunks):
    with pytest.raises(ConfigError) as err:
        chunk_bounds(4, n_chunks)
    assert str(err.value) == f"number of pipeline stages must be >= 1, got {n_chunks}"


def test_partition_model_layers_in_order():
    w = uniform_workload(7)
    p = partition_model(w, 3)
    assert [[layer.index for layer in chunk] for chunk in p.chunks] == [[0, 1, 2], [3, 4], [5, 6]]
    assert p.n_chunks == 3
    assert [p.layer_range(c) for c in range(3)] == [(0, 2), (3, 4), (5, 6)]
    assert p.iteration_layers == ()
    assert p.recompute == ({}, {}, {})


def test_more_chunks_than_layers_is_refused():
    w = uniform_workload(6, path="six.txt")
    with pytest.raises(ConfigError) as err:
        partition_model(w, 7)
    assert str(err.value) == ("six.txt: cannot split 6 layer rows into 7 pipeline chunks "
                              "(pp x vpp); every chunk needs at least one layer")


def test_empty_chunk_layer_range():
    assert Partition(chunks=((),)).layer_range(0) == (-1, -2)


# Transformer_HybridParallel_Fwd_In_Bckwd: 21 layers, checkpoints (2, 11), initiates (19, 10).
@pytest.mark.parametrize("n_chunks, sizes, recompute", [
    (1, [21], ({19: tuple(range(11, 19)), 10: tuple(range(2, 10))},)),
    (2, [11, 10], ({10: tuple(range(2, 10))}, {8: tuple(range(0, 8))})),
    # chunks 0-6, 7-13, 14-20: both checkpoints lie on an earlier chunk than their initiator
    (3, [7, 7, 7], ({}, {3: (0, 1, 2)}, {5: (0, 1, 2, 3, 4)})),
])
def test_recompute_on_the_astra_sim_example(real_dir, n_chunks, sizes, recompute):
    w = load_workload(real_dir / "Transformer_HybridParallel_Fwd_In_Bckwd.txt", "model")
    p = partition(w, n_chunks)
    assert p == partition_model(w, n_chunks)
    assert [len(chunk) for chunk in p.chunks] == sizes
    assert p.recompute == recompute


def test_recompute_plan_cases():
    layers = uniform_workload(10).layers
    chunk = layers[4:9]   # file indices 4..8 at positions 0..4
    assert recompute_plan(chunk, (1, 6), ()) == {}
    assert recompute_plan(chunk, (1, 6), (8,)) == {4: (2, 3)}          # from checkpoint 6
    assert recompute_plan(chunk, (1, 6), (6,)) == {2: (0, 1)}          # strictly below, so 1
    assert recompute_plan(chunk, (), (7,)) == {3: (0, 1, 2)}           # no checkpoint: chunk start
    assert recompute_plan(chunk, (1,), (4,)) == {}                     # first layer: nothing before
    assert recompute_plan(chunk, (7,), (7, 2, 9)) == {3: (0, 1, 2)}    # 2 and 9 are elsewhere
    assert recompute_plan(chunk, (5, 5, 5), (8, 8)) == {4: (1, 2, 3)}  # duplicates are harmless


def test_tiny_model_two_stages(data_dir):
    w = load_workload(data_dir / "tiny_model.txt", "model")
    p = partition(w, w.header.pp * w.header.vpp)
    assert [[layer.name for layer in chunk] for chunk in p.chunks] == [
        ["embedding", "attention_0", "mlp_moe_0"], ["attention_1", "mlp_moe_1", "head"]]
    # initiate 3 is chunk 1's first layer: its checkpoint 0 is on chunk 0, nothing to recompute
    assert p.recompute == ({}, {})
