"""The numpy model: layer maths against finite differences, the chunk split, the 2BW reference."""

from __future__ import annotations


import numpy as np
import pytest

from simulator.errors import ConfigError
from simulator.schedules import generate
from simulator.verify.model import build_model, forward, input_grad, make_batch, mse, mse_grad
from simulator.verify.model import weight_grad
from simulator.verify.reference import loss_and_grads, sgd_step, train
from simulator.verify.semantics import training_of
from simulator.workload.partition import chunk_bounds


def test_chunks_are_the_simulators_split_remainder_to_the_first_chunks():
    model = build_model(9, 4, seed=3)
    assert model.bounds == ((0, 3), (3, 5), (5, 7), (7, 9))
    assert list(model.bounds) == chunk_bounds(9, 4)
    assert model.n_layers == 9 and len(model.widths) == 10
    assert model.chunk_params(1) == list(model.params[3:5])


def test_widths_vary_within_range_and_follow_the_seed():
    a, b, c = build_model(12, 3, seed=0), build_model(12, 3, seed=0), build_model(12, 3, seed=1)
    assert a.widths == b.widths and a.widths != c.widths
    assert all(4 <= w <= 8 for w in a.widths) and len(set(a.widths)) > 1
    for (w, bias), d_in, d_out in zip(a.params, a.widths[:-1], a.widths[1:]):
        assert w.shape == (d_in, d_out) and bias.shape == (d_out,)
    for (w0, b0), (w1, b1) in zip(a.params, b.params):
        assert np.array_equal(w0, w1) and np.array_equal(b0, b1)


def test_too_few_layers_for_the_chunks_is_refused():
    with pytest.raises(ConfigError) as err:
        build_model(3, 4)
    assert str(err.value) == ("--layers: the schedule has 4 model chunks and every chunk needs "
                              "a layer; expected at least 4, got 3")


def test_batch_shapes_and_determinism():
    model = build_model(3, 1, seed=2)
    xs, ts = make_batch(model, 5, 2, seed=2)
    assert len(xs) == len(ts) == 5
    assert xs[0].shape == (2, model.widths[0]) and ts[0].shape == (2, model.widths[-1])
    xs2, _ = make_batch(model, 5, 2, seed=2)
    assert all(np.array_equal(a, b) for a, b in zip(xs, xs2))


def test_gradients_match_central_finite_differences():
    model = build_model(4, 2, seed=5)
    params = [(w.copy(), b.copy()) for w, b in model.params]
    xs, ts = make_batch(model, 1, 3, seed=5)
    _, grads = loss_and_grads(params, xs[0], ts[0])
    eps = 1e-6
    worst = 0.0
    for layer, (w, b) in enumerate(params):
        for arr, grad in ((w, grads[layer][0]), (b, grads[layer][1])):
            for idx in np.ndindex(arr.shape):
                old = arr[idx]
                arr[idx] = old + eps
                up = loss_and_grads(params, xs[0], ts[0])[0]
                arr[idx] = old - eps
                down = loss_and_grads(params, xs[0], ts[0])[0]
                arr[idx] = old
                worst = max(worst, abs((up - down) / (2 * eps) - grad[idx]))
    assert worst < 1e-8


def test_input_gradient_matches_finite_differences():
    model = build_model(3, 1, seed=7)
    params = list(model.params)
    xs, ts = make_batch(model, 1, 2, seed=7)
    x = xs[0].copy()
    y, acts = forward(params, x)
    dx, keep = input_grad(params, acts, mse_grad(y, ts[0]))
    assert len(weight_grad(keep)) == 3
    eps = 1e-6
    for idx in np.ndindex(x.shape):
        old = x[idx]
        x[idx] = old + eps
        up = mse(forward(params, x)[0], ts[0])
        x[idx] = old - eps
        down = mse(forward(params, x)[0], ts[0])
        x[idx] = old
        assert abs((up - down) / (2 * eps) - dx[idx]) < 1e-8


def test_two_bw_reference_takes_minibatch_i_at_the_weights_of_update_i_minus_1():
    model = build_model(3, 1, seed=4)
    xs, ts = make_batch(model, 8, 2, seed=4)
    run = train(model, xs, ts, 2, lr=0.5, staleness=1)
    w = [list(model.params)]
    grads = []
    for i in range(4):
        x, t = np.concatenate(xs[2 * i:2 * i + 2]), np.concatenate(ts[2 * i:2 * i + 2])
        loss, g = loss_and_grads(w[max(i - 1, 0)], x, t)
        assert run.losses[i] == loss
        grads.append(g)
        w.append(sgd_step(w[-1], g, 0.5))
    for got, want in zip(run.grads, grads):
        assert all(np.array_equal(a, b) for pa, pb in zip(got, want) for a, b in zip(pa, pb))
    assert all(np.array_equal(a, b) for pa, pb in zip(run.final_params, w[-1])
               for a, b in zip(pa, pb))
    # and it is not synchronous SGD: only minibatch 0 sees the same weights in both
    sync = train(model, xs, ts, 2, lr=0.5, staleness=0)
    assert sync.losses[0] == run.losses[0]
    assert all(abs(a - b) > 1e-6 for a, b in zip(sync.losses[1:], run.losses[1:]))


def test_training_semantics_of_flush_and_no_flush_schedules():
    sync = training_of(generate("1f1b", 2, 3))
    assert (sync.semantics, sync.iterations, sync.microbatches_per_iteration,
            sync.weight_version, sync.staleness) == ("synchronous", 1, 3, (0, 0, 0), 0)
    two = training_of(generate("2bw", 2, 2, iterations=3))
    assert (two.semantics, two.iterations, two.microbatches_per_iteration,
            two.weight_version, two.staleness) == ("pipedream-2bw", 3, 2, (0, 0, 0, 0, 1, 1), 1)
    assert [two.minibatch(m) for m in range(6)] == [0, 0, 1, 1, 2, 2]


def test_no_flush_without_declared_versions_is_refused():
    sched = generate("2bw", 2, 2)
    with pytest.raises(ConfigError) as err:
        training_of(sched._replace(meta={}))
    assert str(err.value) == ("schedule '2bw' has no flush but its meta does not declare "
                              "'weight_version' and 'microbatches_per_iteration'; verify cannot "
                              "tell which weights each microbatch uses")
    with pytest.raises(ConfigError) as err:
        training_of(sched._replace(meta={**sched.meta, "staleness": 2}))
    assert str(err.value) == ("schedule '2bw': staleness 2 is not PipeDream-2BW's 1; verify "
                              "knows no reference for it")
