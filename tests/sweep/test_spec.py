"""Sweep specs: validation at the edge (exact one-line errors) and point expansion."""

from __future__ import annotations

import pytest

from simulator.errors import ConfigError
from simulator.sweep import expand, load_spec, spec_from_dict

from .helpers import workload_text, write


@pytest.fixture
def base(tmp_path):
    write(tmp_path / "w.txt", workload_text())
    write(tmp_path / "other.txt", workload_text(4))
    return tmp_path


def error(data, base) -> str:
    with pytest.raises(ConfigError) as info:
        expand(spec_from_dict(data, "sweep.yaml", base))
    return str(info.value)


@pytest.mark.parametrize("data, message", [
    ({"grid": {"pp": [2, "x"]}}, "grid.pp: expected a list of positive integers, found 'x'"),
    ({"grid": {"pp": [2, 0]}}, "grid.pp: expected a list of positive integers, found 0"),
    ({"grid": {"pp": [2, True]}}, "grid.pp: expected a list of positive integers, found True"),
    ({"grid": {"pp": 4}}, "grid.pp: expected a non-empty list of positive integers, found 4"),
    ({"grid": {"pp": []}}, "grid.pp: expected a non-empty list of positive integers, found []"),
    ({"grid": {"pp": [2, 2]}}, "grid.pp: 2 is listed twice"),
    ({"grid": {"pq": [1]}}, "grid.pq: unknown option; expected one of: workload, system, "
     "schedule, pp, microbatches, vpp, decoder_first_pipeline_num_layers, "
     "decoder_last_pipeline_num_layers, account_for_embedding_in_pipeline_split, "
     "account_for_loss_in_pipeline_split, pipeline_parallel_layers_per_stage, "
     "pipeline_parallel_first_stage_less_layers, pipeline_parallel_last_stage_less_layers, "
     "iterations, layout, p2p, memory_limit, jitter, seed, "
     "slow_rank, recompute, recompute_method, recompute_num_layers, pp_comm, gpus, dp, "
     "max_actions, engine, param_dtype, megatron_ddp, fsdp, fsdp_reshard_after_forward, "
     "use_distributed_optimizer, overlap_grad_reduce, overlap_param_gather, "
     "optimizer_post_validation, ddp_bucket_size, "
     "grad_reduce_dtype, fp16_loss_scale, log_num_zeros_in_grad, log_params_norm, calculate_per_token_loss, tp_comm_overlap, p2p_scatter_gather, strict, layer_by_layer, "
     "system.<dotted key> (e.g. "
     "system.links.bandwidth_gbps), schedule_options.<name>"),
    ({"grid": {"system.links.bandwith_gbps": [1]}},
     "grid.system.links.bandwith_gbps: unknown system key 'links.bandwith_gbps'"),
    ({"grid": {"system.links": [1]}}, "grid.system.links: 'links' is a section, not a value; "
     "name one of its keys: bandwidth_gbps, latency_ns"),
    ({"grid": {"system.links.bandwidth_gbps": [100, 0]}},
     "grid.system.links.bandwidth_gbps: expected a list of positive numbers, found 0"),
    ({"grid": {"system.collectives.tp.latency_ns": [-1]}},
     "grid.system.collectives.tp.latency_ns: expected a list of numbers >= 0, found -1"),
    ({"grid": {"layout": ["model", "flat"]}},
     "grid.layout: expected a list of layouts (auto, model, aicb), found 'flat'"),
    ({"zip": [{"pp": [2, 4], "microbatches": [8]}]},
     "zip[0]: expected lists of equal length, found pp: 2, microbatches: 1"),
    ({"zip": [{"pp": [2, 4]}, {"pp": [1], "vpp": [1]}]},
     "zip[1].pp: also set at zip[0].pp; set it in one place"),
    ({"zip": [{"pp": [2, 4, 2], "microbatches": [8, 8, 8]}]},
     "zip[0]: step 2 repeats step 0 (pp=2, microbatches=8)"),
    ({"zip": [{}]}, "zip[0]: expected at least one option, found an empty group"),
    ({"zip": 3}, "zip: expected a list of groups (each a mapping of option -> list), found 3"),
    ({"pp": [2, 4]}, "pp: expected a positive integer, found [2, 4] (lists go under grid: or "
     "zip:)"),
    ({"pp": 2, "grid": {"pp": [2, 4]}}, "grid.pp: also set at the top level; set it in one "
     "place"),
    ({"layout": "flat"}, "layout: expected one of auto, model, aicb, found 'flat'"),
    ({"grid": [1]}, "grid: expected a mapping of option -> list, found [1]"),
    ({"name": 3}, "name: expected a string, found 3"),
    ({"schedule_options": {"group_size": [4]}}, "schedule_options.group_size: expected a "
     "string, number or boolean, found [4] (lists go under grid: or zip:)"),
    ({"grid": {"pp": [2]}, "exclude": [{"microbatches": 4}]},
     "exclude[0].microbatches: not an option this sweep sets (it sets: workload, pp)"),
    ({"grid": {"pp": [2]}, "exclude": [{"pp": "x"}]},
     "exclude[0].pp: expected a positive integer, found 'x'"),
    ({"grid": {"pp": [2]}, "exclude": [{"pp": [2, "x"]}]},
     "exclude[0].pp: expected a list of positive integers, found 'x'"),
    ({"grid": {"pp": [2]}, "exclude": {"pp": 2}}, "exclude: expected a list of rules (mappings "
     "of option -> value or list of values), found {'pp': 2}"),
    ({"grid": {"pp": [2]}, "exclude": [{}]}, "exclude[0]: expected at least one option, found "
     "an empty rule"),
    ({"grid": {"pp": [2, 4]}, "exclude": [{"pp": [2, 4]}]},
     "exclude: every point is excluded; nothing to run"),
])
def test_bad_spec_names_the_key(base, data, message):
    data = {"workload": "w.txt", **data}
    assert error(data, base) == f"sweep.yaml: {message}"


def test_unknown_schedule_lists_the_registered_ones(base):
    from simulator.schedules import registry

    msg = error({"workload": "w.txt", "grid": {"schedule": ["1f1b", "nope"]}}, base)
    assert msg == ("sweep.yaml: grid.schedule: expected a registered schedule (one of: "
                   + ", ".join(sorted(registry.names())) + "), found 'nope'")


def test_missing_files_and_workload(base):
    assert error({"grid": {"pp": [2]}}, base) == (
        "sweep.yaml: workload: required (a file path at the top level, or a list under grid: "
        "or zip:)")
    assert error({"workload": "nope.txt"}, base) == (
        f"sweep.yaml: workload: expected a readable file (relative to {base}), found 'nope.txt'")
    assert error({"workload": "w.txt", "grid": {"system": ["nosys.yaml"]}}, base) == (
        f"sweep.yaml: grid.system: expected a readable file (relative to {base}), "
        "found 'nosys.yaml'")
    assert error([1, 2], base) == ("sweep.yaml: expected a mapping of options (workload:, grid:, "
                                   "...), found [1, 2]")


def test_a_bad_system_file_is_reported_with_its_own_location(base):
    write(base / "sys.yaml", "links:\n  bandwidth_gbps: fast\n")
    assert error({"workload": "w.txt", "system": "sys.yaml"}, base) == (
        f"{base / 'sys.yaml'}: links.bandwidth_gbps: expected a number, found 'fast'")


def test_load_spec_reads_yaml_and_reports_syntax_errors_with_line_and_column(base):
    spec = write(base / "sub" / "s.yaml", "workload: ../w.txt\ngrid:\n  pp: [2, 4]\n")
    loaded = load_spec(spec)
    assert loaded.base_dir == base / "sub" and loaded.name == "s"
    assert [p.params for p in expand(loaded)[0]] == [{"workload": "../w.txt", "pp": 2},
                                                     {"workload": "../w.txt", "pp": 4}]
    bad = write(base / "bad.yaml", "workload: w.txt\ngrid:\n  pp: [2, 4\n")
    with pytest.raises(ConfigError) as info:
        load_spec(bad)
    assert str(info.value).startswith(f"{bad}:4:1: invalid YAML: ")
    with pytest.raises(ConfigError) as info:
        load_spec(base / "none.yaml")
    assert str(info.value) == (f"{base / 'none.yaml'}: cannot read the sweep spec: No such file "
                               "or directory")


def test_expansion_order_grid_then_zip_last_axis_fastest(base):
    spec = spec_from_dict({
        "workload": "w.txt", "iterations": 2, "system.links.latency_ns": 500,
        "grid": {"schedule": ["gpipe", "1f1b"], "system.links.bandwidth_gbps": [100, 400]},
        "zip": {"pp": [2, 4], "microbatches": [4, 8]},
    }, "s.yaml", base)
    assert spec.keys == ["workload", "schedule", "pp", "microbatches", "iterations",
                         "system.links.latency_ns", "system.links.bandwidth_gbps"]
    points, notes = expand(spec)
    got = [(p.index, p.params["schedule"], p.params["system.links.bandwidth_gbps"],
            p.params["pp"], p.params["microbatches"]) for p in points]
    assert got == [
        (0, "gpipe", 100.0, 2, 4), (1, "gpipe", 100.0, 4, 8),
        (2, "gpipe", 400.0, 2, 4), (3, "gpipe", 400.0, 4, 8),
        (4, "1f1b", 100.0, 2, 4), (5, "1f1b", 100.0, 4, 8),
        (6, "1f1b", 400.0, 2, 4), (7, "1f1b", 400.0, 4, 8),
    ]
    assert all(p.params["iterations"] == 2 and p.params["system.links.latency_ns"] == 500.0
               for p in points)
    assert notes == []


def test_exclude_rules_scalar_and_list_values(base):
    spec = spec_from_dict({
        "workload": "w.txt",
        "grid": {"schedule": ["gpipe", "1f1b", "zb-h1"], "pp": [2, 4, 8]},
        "exclude": [{"schedule": "gpipe", "pp": [4, 8]},   # gpipe at pp 4 or 8
                    {"schedule": "zb-h1", "pp": 2},
                    {"schedule": "1f1b", "pp": 8, "workload": "other.txt"}],
    }, "s.yaml", base)
    points, notes = expand(spec)
    assert [(p.params["schedule"], p.params["pp"]) for p in points] == [
        ("gpipe", 2), ("1f1b", 2), ("1f1b", 4), ("1f1b", 8), ("zb-h1", 4), ("zb-h1", 8)]
    assert [p.index for p in points] == list(range(6))
    assert notes == ["s.yaml: exclude[2] matches no point"]


def test_schedule_aliases_are_normalised(base):
    spec = spec_from_dict({"workload": "w.txt", "grid": {"schedule": ["PipeDream-Flush"]}},
                          "s.yaml", base)
    assert expand(spec)[0][0].params["schedule"] == "1f1b"


def test_point_ids_are_stable_and_follow_file_content(base, tmp_path_factory):
    data = {"workload": "w.txt", "grid": {"pp": [2, 4]}}
    ids = [p.point_id for p in expand(spec_from_dict(data, "a.yaml", base))[0]]
    assert len(set(ids)) == 2 and all(len(i) == 16 for i in ids)
    # same parameters and same file content in another folder: same ids
    other = tmp_path_factory.mktemp("copy")
    write(other / "w.txt", workload_text())
    assert [p.point_id for p in expand(spec_from_dict(data, "b.yaml", other))[0]] == ids
    # an edited workload file makes new points
    write(other / "w.txt", workload_text(cost=2000))
    assert set(p.point_id for p in expand(spec_from_dict(data, "b.yaml", other))[0]).isdisjoint(ids)


def test_the_example_specs_load_and_expand():
    from pathlib import Path

    folder = Path(__file__).resolve().parents[2] / "configs" / "sweeps"
    counts = {p.name: len(expand(load_spec(p))[0]) for p in sorted(folder.glob("*.yaml"))}
    assert counts == {"example.yaml": 4 * 3 * 4 * 3 - 3 * 3, "weak-scaling.yaml": 4 * 2 * 3 - 2 * 2}


def test_a_file_name_too_long_for_the_file_system_is_one_line(tmp_path, capsys):
    """Found by the fuzz (seed 2, case 5123): the path's stat() raised ENAMETOOLONG."""
    from simulator.cli.main import main

    name = "a" * 300
    spec = tmp_path / "s.yaml"
    spec.write_text(f"workload: {name}\ngrid:\n  pp: [2]\n")
    assert main(["sweep", str(spec), "--out", str(tmp_path / "o"), "-q"]) == 2
    assert capsys.readouterr().err == (
        f"pipesim: error: {spec}: workload: expected a readable file (relative to {tmp_path}), "
        f"found '{'a' * 60}'... (File name too long)\n")
