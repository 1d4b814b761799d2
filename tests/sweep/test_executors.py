"""The same sweep on a real local Ray instance and a real Dask LocalCluster: the same table."""

from __future__ import annotations

import importlib.util
import sys

import pytest

from simulator.sweep import run_sweep, spec_from_dict
from simulator.sweep.executors import ExecutorError, make_executor

from .helpers import workload_text, write

SPEC = {"workload": "w.txt",
        "grid": {"schedule": ["1f1b", "dualpipe-v"], "pp": [2, 4], "microbatches": [4, 8]}}


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    base = tmp_path_factory.mktemp("executors")
    write(base / "w.txt", workload_text(8, pp_comm=1 << 20))
    spec = spec_from_dict(SPEC, "s.yaml", base)
    table = run_sweep(spec, base / "local", jobs=2).table
    # dualpipe-v at pp 4 needs M >= 8: the point with M 4 fails
    assert len(table) == 8 and list(table["status"]).count("error") == 1
    return spec, base, table


def _needs(module: str) -> None:
    if importlib.util.find_spec(module) is None:
        pytest.skip(f"{module} is not installed (pip install 'pipesim[{module.split('.')[0]}]')")


def test_dask_local_cluster_gives_the_local_table(reference):
    _needs("dask.distributed")
    spec, base, table = reference
    outcome = run_sweep(spec, base / "dask", jobs=2, executor="dask")
    assert outcome.workers == 2
    assert outcome.table.equals(table)
    local_csv = (base / "local" / "results.csv").read_text()
    assert (base / "dask" / "results.csv").read_text() == local_csv


def test_ray_local_instance_gives_the_local_table(reference):
    _needs("ray")
    spec, base, table = reference
    outcome = run_sweep(spec, base / "ray", jobs=2, executor="ray")
    assert outcome.workers == 2
    assert outcome.table.equals(table)
    local_csv = (base / "local" / "results.csv").read_text()
    assert (base / "ray" / "results.csv").read_text() == local_csv


@pytest.mark.parametrize("name, module, extra", [("ray", "ray", "ray"),
                                                 ("dask", "dask.distributed", "dask")])
def test_missing_extra_is_a_clear_error(monkeypatch, name, module, extra):
    monkeypatch.setitem(sys.modules, module, None)  # makes `import module` raise ImportError
    with pytest.raises(ExecutorError) as info:
        with make_executor(name, 2):
            pass
    what = "ray" if name == "ray" else "dask.distributed"
    assert str(info.value) == (f"--executor {name}: {what} is not installed; install "
                               f"pipesim[{extra}] (pip install 'pipesim[{extra}]')")


def test_address_needs_a_cluster_executor_and_jobs_must_be_positive():
    from simulator.errors import ConfigError

    with pytest.raises(ConfigError) as info:
        make_executor("local", 2, "localhost:8786")
    assert str(info.value) == "--address: only with --executor ray or dask"
    with pytest.raises(ConfigError) as info:
        make_executor("local", 0)
    assert str(info.value) == "--jobs: expected a positive integer, got 0"
