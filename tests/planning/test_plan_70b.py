"""The real job of docs/planning.md: Llama-3-70B's shape from a config.json on 256 H100s at
TP 8, within the default budget; a winner Megatron-LM or torchtitan runs, fitting in 80 GiB,
whose launch files read back give the plan's own makespan."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from simulator.cli.main import main

ROOT = Path(__file__).resolve().parents[2]
SYSTEM = str(ROOT / "configs" / "system" / "h100-cluster.yaml")


@pytest.fixture
def config_70b(hf_configs_dir, tmp_path) -> str:
    """Llama-3.1-8B's published config.json with Llama-3.1-70B's published sizes."""
    cfg = json.loads((hf_configs_dir / "llama-3.1-8b.json").read_text())
    cfg.update(hidden_size=8192, intermediate_size=28672, num_attention_heads=64,
               num_hidden_layers=80)
    path = tmp_path / "llama-3.1-70b.json"
    path.write_text(json.dumps(cfg))
    return str(path)


def _plan(capsys, tmp_path, cfg, *extra):
    launch = tmp_path / "launch"
    code = main(["plan", "--hf-config", cfg, "--seq-length", "8192", "--global-batch-size",
                 "512", "--tp", "8", "--gpus", "256", "--gpu", "h100", "--system", SYSTEM,
                 "--out", str(tmp_path / "out"), "--launch", str(launch), "--json", "-",
                 *extra])
    out, err = capsys.readouterr()
    assert (code, err) == (0, ""), err
    return json.loads(out), launch


def _read_back(capsys, *argv):
    assert main(["run", *argv, "--gpus", "256", "--gpu", "h100", "--system", SYSTEM,
                 "--json", "-"]) == 0
    return json.loads(capsys.readouterr().out)


def test_the_70b_plan_fits_the_default_budget_and_its_torchtitan_launch_reads_back(
        capsys, tmp_path, config_70b):
    data, launch = _plan(capsys, tmp_path, config_70b)
    best = data["best"]
    assert {c["tp"] for c in data["candidates"]} == {8}
    assert best["runtimes"]["torchtitan"]["accepts"]
    assert best["peak_memory_bytes"] <= 80 * 2**30
    assert data["counts"]["pruned"] > data["counts"]["screened"]
    # priced as Megatron-LM's kernels, which the plan says of its torchtitan launch
    assert any("--runtime torchtitan prices them" in n for n in data["notes"])


def test_the_70b_plan_for_torchtitan_reads_back_from_its_job(capsys, tmp_path, config_70b):
    data, launch = _plan(capsys, tmp_path, config_70b, "--runtime", "torchtitan")
    best = data["best"]
    assert best["peak_memory_bytes"] <= 80 * 2**30
    assert not any("--runtime torchtitan prices them" in n for n in data["notes"])
    again = _read_back(capsys, "--torchtitan", str(launch / "torchtitan.toml"))
    assert again["makespan_ns"] == pytest.approx(best["makespan_ns"], rel=0.005)


def test_the_70b_plan_for_megatron_reads_back_from_its_arguments(capsys, tmp_path, config_70b):
    data, launch = _plan(capsys, tmp_path, config_70b, "--runtime", "megatron")
    best = data["best"]
    assert best["schedule"] in ("1f1b", "interleaved-1f1b", "v-zb")
    assert best["peak_memory_bytes"] <= 80 * 2**30
    again = _read_back(capsys, "--megatron-args", str(launch / "megatron_args.txt"))
    assert again["makespan_ns"] == pytest.approx(best["makespan_ns"], rel=0.005)
    # the file states what the llama rows priced where Megatron-LM's default differs (its
    # dropouts of 0.1): read back, no warning says the launch runs other than priced
    assert not [w["message"] for w in again["warnings"] if "dropout" in w["message"]]
