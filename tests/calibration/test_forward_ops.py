"""What a split backward's I keeps until its W, from a forward's recorded operators
(simulator/calibration/forward_ops.py), by hand-worked bytes, and the same rule from a
transformer layer's shape (workload/activations.py)."""

from __future__ import annotations

from simulator.calibration.forward_ops import weight_gradient_bytes, weight_gradient_transient, \
    weight_output_elements
from simulator.workload.activations import transformer_split_backward_bytes


def _op(name: str, ts: float, dur: float, dims: list, dtype: str = "float") -> dict:
    return {"name": name, "cat": "cpu_op", "ts": ts, "dur": dur,
            "args": {"Input Dims": dims, "Input type": [dtype] * len(dims)}}


def _mlp_block(t: float, rows: int, h: int, dtype: str = "float") -> list[dict]:
    """The operators a pre-LN MLP block's forward records: LayerNorm, fc1 (with the addmm
    nested in it), GELU, fc2, the residual add."""
    return [_op("aten::layer_norm", t, 5, [[rows, h], [], [h], [h], [], []], dtype),
            _op("aten::native_layer_norm", t + 1, 3, [[rows, h], [], [h], [h], []], dtype),
            _op("aten::linear", t + 10, 10, [[rows, h], [4 * h, h], [4 * h]], dtype),
            _op("aten::addmm", t + 12, 5, [[4 * h], [rows, h], [h, 4 * h], [], []], dtype),
            _op("aten::gelu", t + 25, 2, [[rows, 4 * h], []], dtype),
            _op("aten::linear", t + 30, 10, [[rows, 4 * h], [h, 4 * h], [h]], dtype),
            _op("aten::addmm", t + 31, 5, [[h], [rows, 4 * h], [4 * h, h], [], []], dtype),
            _op("aten::add", t + 45, 2, [[rows, h], [rows, h], []], dtype)]


def test_an_mlp_block_keeps_the_gradients_at_its_three_weighted_outputs():
    # 32 rows, h = 64, fp32: LayerNorm's output 32 x 64, fc1's 32 x 256, fc2's 32 x 64 =
    # 32 x 384 elements x 4 B = 49,152 B (the 6·h per row the ZBV trace's I keeps)
    assert weight_gradient_bytes(_mlp_block(0.0, 32, 64)) == 49152
    # two blocks, as a stage of 16 blocks over 8 stages holds
    assert weight_gradient_bytes(_mlp_block(0.0, 32, 64) + _mlp_block(100.0, 32, 64)) == 98304
    # bf16: 2 B an element
    assert weight_gradient_bytes(_mlp_block(0.0, 32, 64, "c10::BFloat16")) == 24576


def test_operators_without_weights_count_nothing():
    assert weight_output_elements("aten::layer_norm", [[32, 64], [], [], [], [], []]) is None
    assert weight_output_elements("aten::matmul", [[4, 128, 64], [4, 64, 128]]) is None
    assert weight_output_elements("aten::gelu", [[32, 256], []]) is None
    # an embedding's output: indices (b, s) x the table's width
    assert weight_output_elements("aten::embedding", [[1000, 64], [2, 16], [], [], []]) \
        == 2 * 16 * 64
    assert weight_gradient_bytes([]) == 0


def test_a_grouped_query_layer_by_its_operators_equals_the_shape_rule():
    # h = 256, 4 query heads, 2 K/V heads (QKV out 256 + 2 x 2 x 64 = 512), s = 128, b = 1,
    # MLP 4h, fp32: LN1 256 + QKV 512 + proj 256 + LN2 256 + fc1 1024 + fc2 256 = 2560 per
    # token x 128 tokens x 4 B = 1,310,720 B
    x = [1, 128, 256]
    ops = [_op("aten::layer_norm", 0, 5, [x, [], [256], [256], [], []]),
           _op("aten::linear", 10, 5, [x, [512, 256], [512]]),
           _op("aten::matmul", 20, 5, [[1, 4, 128, 64], [1, 4, 64, 128]]),
           _op("aten::linear", 30, 5, [x, [256, 256], [256]]),
           _op("aten::layer_norm", 40, 5, [x, [], [256], [256], [], []]),
           _op("aten::linear", 50, 5, [x, [1024, 256], [1024]]),
           _op("aten::linear", 60, 5, [[1, 128, 1024], [256, 1024], [256]])]
    assert weight_gradient_bytes(ops) == 1310720
    assert transformer_split_backward_bytes(128, 1, 256, qkv=512, up=1024, tp=1,
                                            sequence_parallel=False, dtype_bytes=4) == 1310720


def test_a_w_needs_its_widest_weight_gradient_for_a_moment():
    # fc1's weight 256 x 64 and bias 256, fc2's 64 x 256 and 64: the wider, 16,640 x 4 B
    assert weight_gradient_transient(_mlp_block(0.0, 32, 64)) == 66560
    assert weight_gradient_transient(_mlp_block(0.0, 32, 64, "c10::BFloat16")) == 33280
