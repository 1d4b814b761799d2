"""--recompute none|full|file: what is recomputed, what it costs and what it saves, by hand."""

from __future__ import annotations

import pytest

from simulator import simulate
from simulator.errors import ConfigError
from simulator.workload import uniform_workload


def run(mode, **kw):
    wl = uniform_workload(2, fwd=1000, ig=1000, wg=1000, pp_comm=1000)
    return simulate(wl, "1f1b", pp=1, microbatches=1, recompute=mode, **kw)


def test_full_recompute_replays_every_forward_and_keeps_only_inputs():
    file, full = run("file"), run("full")
    # F: 2 layers x 1000; B: per layer W + I (2000) ... and with full recompute its forward again
    assert file.makespan_ns == 2000 + 4000
    assert full.makespan_ns == 2000 + 4000 + 2000
    # activations of one microbatch: 17 x pp_comm per layer, or only each layer's input; the
    # backward holds one layer's stash again while it recomputes it (transient)
    static = file.records.static_memory[0]
    assert file.summary.peak_memory_bytes - static == 2 * 17 * 1000
    assert full.summary.peak_memory_bytes - static == 2 * 1000 + 17 * 1000
    assert full.summary.layer_ops == file.summary.layer_ops + 2


def test_none_ignores_the_files_checkpoint_lists():
    wl = uniform_workload(4, pp_comm=1000, checkpoints=(0,), checkpoint_initiates=(3,))
    with_lists = simulate(wl, "1f1b", pp=1, microbatches=1)
    without = simulate(wl, "1f1b", pp=1, microbatches=1, recompute="none")
    assert with_lists.makespan_ns == without.makespan_ns + 3000     # layers 0-2 replayed
    assert without.summary.layer_ops == with_lists.summary.layer_ops - 3


def test_a_bad_mode_is_one_line():
    with pytest.raises(ConfigError, match="--recompute: expected one of file, none, full, got "
                                          "'some'"):
        run("some")
