"""Helpers of the tests that run a model from its flags: a plan's JSON, and a generated file
run beside the same model run from the flags (tests/ is on sys.path: pytest puts it there)."""

from __future__ import annotations

import json

from simulator.cli.main import main

H100 = "configs/system/h100.yaml"
# the defaults of a model run or planned without --system (simulator/cli/model_inputs.py
# builtin_system_warning), and of a plan with no memory limit (planning/plan.py)
BUILTIN_A100 = ("no --system: the a100 model's transfers and collectives are priced on "
                "pipesim's built-in system (400 Gb/s between stages, 400 Gb/s over DP, 2400 Gb/s "
                "over TP, no nodes) and no memory capacity is checked; --system "
                "configs/system/a100.yaml describes the a100 cluster (its nodes, NICs and the "
                "card's memory)")
NO_MEMORY_LIMIT = ("no memory limit: the system states no memory capacity (memory.capacity_gib) "
                   "and --memory-limit is not given, so no candidate is refused for its peak (the "
                   "ranked candidates' peaks reach {}); give --memory-limit GIB, or a --system "
                   "with the GPU's memory")


def plan_json(tmp_path, *args) -> tuple[int, dict | None]:
    """``pipesim plan ARGS`` on the h100 system, 1F1B's family only, one worker: its exit code
    and its JSON (None when it refused)."""
    out = tmp_path / "p.json"
    rc = main(["plan", *args, "--system", H100, "--json", str(out), "--schedules", "1f1b",
               "-j", "1"])
    return rc, (json.loads(out.read_text()) if rc == 0 else None)


def generated_and_flags(tmp_path, shape: list[str], sizes: list[str], dp: int,
                        gpus: int) -> tuple[dict, dict]:
    """The run of ``pipesim generate SHAPE SIZES --dp DP``'s file and the run of the same
    model from its flags (``SHAPE SIZES``), both on ``gpus`` H100s: their JSON summaries."""
    wl = tmp_path / "g.txt"
    assert main(["generate", *shape, *sizes, "--dp", str(dp), "--gpu", "h100", "-o",
                 str(wl)]) == 0
    common = ["--gpus", str(gpus), "--system", H100, "--engine", "evaluator"]
    assert main(["run", str(wl), *common, "--json", str(tmp_path / "1.json")]) == 0
    assert main(["run", *shape, *sizes, "--gpu", "h100", *common, "--json",
                 str(tmp_path / "2.json")]) == 0
    return tuple(json.loads((tmp_path / f"{n}.json").read_text()) for n in (1, 2))


def launch_runs(tmp_path, capsys, base: str, extras: dict[str, str],
                gpus: int) -> dict[str, float]:
    """``pipesim run --megatron-args`` of ``base`` plus each of ``extras`` (name: the added
    arguments), on the built-in system with the evaluator, each writing its launch to
    ``tmp_path / name``: their makespans by name."""
    times = {}
    for name, extra in extras.items():
        args = tmp_path / f"{name}.txt"
        args.write_text(f"{base} {extra}")
        out = tmp_path / f"{name}.json"
        assert main(["run", "--megatron-args", str(args), "--gpus", str(gpus), "--engine",
                     "evaluator", "--json", str(out), "--launch", str(tmp_path / name)]) == 0
        capsys.readouterr()
        times[name] = json.loads(out.read_text())["makespan_ns"]
    return times
