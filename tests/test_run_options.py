"""One options object: simulate() takes a RunOptions whole (keywords are a shim laid over it),
RunOptions checks every value once in one wording, and a run's shape (a RunPlan) is decided
once: one partition and one link model per run."""

from __future__ import annotations

import inspect
from pathlib import Path

import pytest

from simulator import api
from simulator.errors import ConfigError
from simulator.result import SimulationResult
from simulator.run_options import FIELDS, SWEEPABLE, RunOptions
from simulator.system import topology
from simulator.workload import parser
from simulator.workload.partition import partition as real_partition

REPO = Path(__file__).resolve().parents[1]
DOC000 = str(REPO / "workloads" / "doc000-1f1b-test.txt")


def test_simulate_takes_the_options_whole_in_at_most_six_parameters():
    assert len(inspect.signature(api.simulate).parameters) <= 6
    whole = api.simulate(DOC000, "zb-h1", None, RunOptions(microbatches=6, jitter=0.1, seed=3,
                                                           slow_rank=("1:1.5",)))
    shim = api.simulate(DOC000, "zb-h1", microbatches=6, jitter=0.1, seed=3,
                        slow_ranks={1: 1.5})
    assert whole.makespan_ns == shim.makespan_ns
    assert whole.options.slow_ranks == ((1, 1.5),) and whole.options.jitter_sigma == 0.1
    # keywords are laid over the options given
    over = api.simulate(DOC000, "zb-h1", None, RunOptions(microbatches=6), jitter=0.1, seed=3,
                        slow_ranks={1: 1.5})
    assert over.makespan_ns == whole.makespan_ns
    assert api.simulate(DOC000, "zb-h1", microbatches=6).makespan_ns != whole.makespan_ns


@pytest.mark.parametrize("keywords, line", [
    ({"jitter": -1}, "--jitter: expected a number >= 0, got -1"),
    ({"memory_limit_gb": 0}, "--memory-limit: expected a positive number, got 0"),
    ({"engine": "x"}, "--engine: expected one of simpy, evaluator, got 'x'"),
    ({"pp": 0}, "--pp: expected a positive integer, got 0"),
    ({"pp_comm": -5}, "--pp-comm: expected a whole number >= 0, got -5"),
    ({"gpus": True}, "--gpus: expected a positive integer, got True"),
    ({"slow_ranks": {1: 0}}, "--slow-rank: expected RANK >= 0 and FACTOR > 0, got '1:0.0'"),
    ({"layer_by_layer": True, "jitter": 0.1},
     "--layer-by-layer: the reference path runs without --jitter and --slow-rank"),
])
def test_one_check_one_wording_for_every_caller(keywords, line):
    with pytest.raises(ConfigError) as err:
        api.simulate(DOC000, "1f1b", **keywords)
    assert str(err.value) == line


def test_a_bad_value_made_directly_or_from_a_sweep_names_its_source():
    with pytest.raises(ConfigError) as err:
        RunOptions(seed=-1)
    assert str(err.value) == "--seed: expected a whole number >= 0, got -1"
    with pytest.raises(ConfigError) as err:
        RunOptions.from_values({"seed": -1, "not_an_option": 1}, "sweep")
    assert str(err.value) == "sweep: seed: expected a whole number >= 0, got -1"


def test_a_replaced_value_is_checked_and_normalised_too():
    opts = RunOptions(jitter=1)
    assert opts.jitter == 1.0 and isinstance(opts.jitter, float)
    assert opts._replace(memory_limit=80).memory_limit == 80.0
    with pytest.raises(ConfigError) as err:
        opts._replace(seed=-1)
    assert str(err.value) == "--seed: expected a whole number >= 0, got -1"


def test_an_unknown_keyword_is_a_type_error():
    with pytest.raises(TypeError, match="unexpected keyword argument 'jiter'"):
        api.simulate(DOC000, "1f1b", jiter=0.1)


def test_api_only_fields_are_neither_flags_nor_sweep_keys():
    assert {"schedule_options", "trace_layers", "validate"}.isdisjoint(SWEEPABLE)
    assert {"pp", "jitter", "slow_rank", "layout"} <= set(SWEEPABLE)
    layout = next(f for f in FIELDS if f.name == "layout")
    assert layout.metadata["choices"] is parser.LAYOUTS


def test_a_run_partitions_once_and_builds_one_link_model(monkeypatch):
    built = []
    init = topology.LinkModel.__init__
    monkeypatch.setattr(topology.LinkModel, "__init__",
                        lambda self, *a, **k: (built.append(1), init(self, *a, **k))[1])
    parts = []
    monkeypatch.setattr(api, "partition", lambda wl, n: parts.append(n) or real_partition(wl, n))
    # auto: its stage costs and the engine's compile share the plan's partition and links
    result = api.simulate(DOC000, "auto", microbatches=8)
    assert (len(built), parts) == (1, [4])
    assert result.schedule.name == "auto" and result.partition.chunks[0][0].name == "layer_0"


def test_the_engine_that_ran_is_a_declared_field():
    assert "engine_used" in SimulationResult.__slots__
    assert api.simulate(DOC000, "1f1b", engine="evaluator").engine_used == "evaluator"
    assert api.simulate(DOC000, "1f1b").to_dict()["engine_used"] == "simpy"
