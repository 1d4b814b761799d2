"""The launch folder's settings, fed to the runtimes' own code: megatron-core's layer layout and
TransformerConfig checks (and its microbatch calculator), torchtitan's ConfigManager and stage
placement, and torch's ``_PipelineScheduleRuntime._load_csv``. For every schedule and for uneven
splits the runtimes must read back the plan's layers per stage, virtual stages and
microbatches. Marked ``launch`` (the ``launch`` extra); each runtime's tests are skipped only
when that runtime is not installed."""

from __future__ import annotations

import json
import tomllib

import pytest

from simulator.api import simulate
from simulator.export.launch import torchtitan_overrides, launch_plan, write_launch

pytestmark = pytest.mark.launch

GPT = "workloads/gpt-24l.txt"
DP = 2   # every case runs on TP 2 (the file's) x PP x DP 2 GPUs

# (schedule, pp, vpp, M, stage_layers or None): every registered schedule a runtime can run,
# even and uneven splits
CASES = [
    ("1f1b", 2, 1, 8, None),
    ("1f1b", 4, 1, 8, "6 6 6 6"),
    ("1f1b", 4, 1, 8, "5 6 6 7"),        # uneven first and last
    ("1f1b", 4, 1, 8, "7 5 6 6"),        # uneven middle: Megatron's layout
    ("interleaved-1f1b", 2, 2, 8, "6 6 6 6"),
    ("interleaved-1f1b", 2, 2, 8, "5 7 6 6"),
    ("interleaved-1f1b", 4, 2, 8, "3 3 3 3 3 3 3 3"),
    ("gpipe", 2, 1, 8, None),
    ("looped-bfs", 2, 2, 8, "6 6 6 6"),
    ("zb-h1", 2, 1, 8, None),
    ("zb-h2", 2, 1, 8, None),
    ("zb-v", 2, 2, 8, "5 7 6 6"),
    ("dualpipe-v", 2, 2, 8, "6 6 6 6"),
    ("v-half", 2, 2, 8, "6 6 6 6"),
    ("v-min", 2, 2, 8, "6 6 6 6"),
    ("v-zb", 2, 2, 8, "6 6 6 6"),
    ("hanayo", 2, 2, 8, "6 6 6 6"),
    ("auto", 2, 1, 8, None),
    ("zb-greedy", 2, 1, 8, None),        # Megatron-LM's on the zero-bubble fork
    ("zb-greedy", 5, 1, 10, "5 5 5 5 4"),   # the fork's --allow-padding-num-layers
    ("zb-greedy", 4, 1, 8, "5 6 6 7"),   # refused: the fork has no uneven split
    # refused: torchtitan cannot place two waves; torch's CSV cannot hold these two
    ("hanayo", 2, 4, 8, "3 3 3 3 3 3 3 3"),
    ("dualpipe", 2, 2, 8, None),
    ("2bw", 2, 1, 8, None),
]
IDS = [f"{c[0]}-pp{c[1]}-v{c[2]}-{(c[4] or 'even').replace(' ', '.')}" for c in CASES]


@pytest.fixture(scope="module")
def launches(tmp_path_factory):
    out = {}
    for case, name in zip(CASES, IDS):
        schedule, pp, vpp, m, layers = case
        path = GPT
        if layers is not None:
            text = open(GPT).read().split("\n", 1)
            path = tmp_path_factory.mktemp("wl") / "w.txt"
            path.write_text(f"{text[0]} stage_layers: {layers}\n{text[1]}")
        result = simulate(str(path), schedule, pp=pp, vpp=vpp, microbatches=m, gpus=2 * pp * DP,
                          engine="evaluator", memory_limit_gb=float("inf"))
        folder = tmp_path_factory.mktemp(name)
        write_launch(folder, result)
        out[name] = (case, result, folder, launch_plan(result))
    return out


def expected_layers(case, result):
    layers = case[4]
    if layers is not None:
        return tuple(int(x) for x in layers.split())
    return launch_plan(result).shape.layers


# -- Megatron-LM ------------------------------------------------------------------------------

def megatron_config(args: dict, vpp: int):
    """TransformerConfig from the arguments as Megatron-LM's arguments.py and
    core_transformer_config_from_args map them (--num-virtual-stages-per-pipeline-rank ->
    virtual_pipeline_model_parallel_size, --decoder-first/last-pipeline-num-layers ->
    num_layers_in_first/last_pipeline_stage)."""
    torch = pytest.importorskip("torch")
    from megatron.core.transformer.transformer_config import TransformerConfig

    kw = dict(num_layers=int(args["--num-layers"]), hidden_size=64, num_attention_heads=4,
              tensor_model_parallel_size=int(args["--tensor-model-parallel-size"]),
              pipeline_model_parallel_size=int(args["--pipeline-model-parallel-size"]),
              pipeline_dtype=torch.float32)
    if "--num-virtual-stages-per-pipeline-rank" in args:
        kw["virtual_pipeline_model_parallel_size"] = int(
            args["--num-virtual-stages-per-pipeline-rank"])
    if "--decoder-first-pipeline-num-layers" in args:
        kw["num_layers_in_first_pipeline_stage"] = int(args["--decoder-first-pipeline-num-layers"])
    if "--decoder-last-pipeline-num-layers" in args:
        kw["num_layers_in_last_pipeline_stage"] = int(args["--decoder-last-pipeline-num-layers"])
    if "--pipeline-model-parallel-layout" in args:
        kw["pipeline_model_parallel_layout"] = args["--pipeline-model-parallel-layout"]
    if "--microbatch-group-size-per-virtual-pipeline-stage" in args:
        kw["microbatch_group_size_per_vp_stage"] = int(
            args["--microbatch-group-size-per-virtual-pipeline-stage"])
    for flag in ("--recompute-granularity", "--recompute-method"):
        if flag in args:
            kw[flag[2:].replace("-", "_")] = args[flag]
    if "--recompute-num-layers" in args:
        kw["recompute_num_layers"] = int(args["--recompute-num-layers"])
    return TransformerConfig(**kw)


def read_args(folder) -> dict:
    out = {}
    for line in (folder / "megatron_args.txt").read_text().splitlines():
        if line and not line.startswith("#"):
            flag, _, value = line.partition(" ")
            out[flag] = value
    return out


def fork_layers(args: dict) -> tuple[int, ...]:
    """Layers per chunk (model order) as the zero-bubble fork places them from its arguments
    (tag zero-bubble-v0.1.0; its flags are its own, so megatron-core's parser does not read
    them): megatron/arguments.py pads --num-layers up to a multiple of the stages under
    --allow-padding-num-layers, otherwise requires one; ParallelTransformer gives every stage
    num_layers / P, less one padding layer on the last stage and then on the first ones
    (get_offset); --zero-bubble-v-schedule needs an even count per stage and gives each of the
    rank's two chunks half, chunk 0 of rank r stage r and chunk 1 stage 2P-1-r."""
    for flag in ("--decoder-first-pipeline-num-layers", "--decoder-last-pipeline-num-layers",
                 "--pipeline-model-parallel-layout", "--num-virtual-stages-per-pipeline-rank",
                 "--num-layers-per-virtual-pipeline-stage"):
        assert flag not in args      # megatron-core's, or refused with the V schedule
    n, pp = int(args["--num-layers"]), int(args["--pipeline-model-parallel-size"])
    padding = -n % pp if "--allow-padding-num-layers" in args else 0
    assert (n + padding) % pp == 0
    per_stage = [(n + padding) // pp] * pp
    for i in range(-1, padding - 1):
        per_stage[i] -= 1
    if "--zero-bubble-v-schedule" in args:
        assert padding == 0 and per_stage[0] % 2 == 0
        assert args["--zero-bubble-v-schedule-mem-setup"] in ("zb", "half", "min")
        return tuple([per_stage[0] // 2] * 2 * pp)
    assert "--enable-zero-bubble" in args
    return tuple(per_stage)


@pytest.mark.parametrize("name", IDS)
def test_megatron_reads_the_plans_layers(launches, name):
    pytest.importorskip("megatron.core")
    from megatron.core import parallel_state
    from megatron.core.transformer.enums import LayerType
    from megatron.core.transformer.transformer_block import get_num_layers_to_build

    case, result, folder, lp = launches[name]
    schedule, pp, vpp, m, _ = case
    text = (folder / "megatron_args.txt").read_text()
    if not lp.verdicts["megatron"].accepts:
        assert text.startswith("# Megatron-LM cannot run this configuration: "
                               + lp.verdicts["megatron"].rule)
        assert not read_args(folder)
        assert schedule not in ("1f1b",) and not (schedule == "interleaved-1f1b" and vpp > 1)
        return
    args = read_args(folder)
    if lp.verdicts["megatron"].how.startswith("the zero-bubble fork"):
        assert fork_layers(args) == expected_layers(case, result)
        return
    config = megatron_config(args, vpp)   # megatron-core's own validation runs here
    got = []
    if config.pipeline_model_parallel_layout is not None:
        layout = config.pipeline_model_parallel_layout
        assert layout.virtual_pipeline_model_parallel_size == vpp
        for v in range(vpp):
            for r in range(pp):
                got.append(layout.layout[r][v].count(LayerType.decoder))
    else:
        parallel_state.set_virtual_pipeline_model_parallel_world_size(vpp if vpp > 1 else None)
        try:
            for v in range(vpp):
                for r in range(pp):
                    got.append(get_num_layers_to_build(config, v if vpp > 1 else None, r))
        finally:
            parallel_state.set_virtual_pipeline_model_parallel_world_size(None)
    assert tuple(got) == expected_layers(case, result)
    assert (config.virtual_pipeline_model_parallel_size or 1) == vpp
    # the batch: megatron-core's microbatch calculator gives back the plan's M
    from megatron.core import num_microbatches_calculator as calc

    calc.init_num_microbatches_calculator(0, None, int(args["--global-batch-size"]),
                                          int(args["--micro-batch-size"]), DP)
    try:
        assert calc.get_num_microbatches() == m
    finally:
        calc.destroy_num_microbatches_calculator()


def test_megatron_refuses_the_naive_even_split():
    """Why uneven splits go through the layout: megatron-core refuses 25 layers on 4 stages
    written as the even split (and Megatron-LM's arguments.py asserts 'Number of layers should
    be divisible by the pipeline-model-parallel size')."""
    torch = pytest.importorskip("torch")
    pytest.importorskip("megatron.core")
    from megatron.core.transformer.transformer_config import TransformerConfig

    with pytest.raises(ValueError, match="divisible"):
        TransformerConfig(num_layers=24, hidden_size=64, num_attention_heads=4,
                          pipeline_model_parallel_size=4, pipeline_dtype=torch.float32,
                          num_layers_in_first_pipeline_stage=7)   # 17 left for 3 stages


# -- torchtitan -------------------------------------------------------------------------------

@pytest.mark.parametrize("name", IDS)
def test_torchtitan_reads_the_plans_layers(launches, name, monkeypatch):
    pytest.importorskip("torchtitan")
    from torchtitan.config.configs import ParallelismConfig, TrainingConfig
    from torchtitan.config.manager import ConfigManager
    from torchtitan.distributed import pipeline_parallel as tpp

    case, result, folder, lp = launches[name]
    schedule, pp, vpp, m, _ = case
    text = (folder / "torchtitan.toml").read_text()
    if not lp.verdicts["torchtitan"].accepts:
        assert text.startswith("# torchtitan cannot run this configuration: "
                               + lp.verdicts["torchtitan"].rule)
        assert "[parallelism]" not in text
        return
    doc = tomllib.loads(text)
    par = ParallelismConfig(**doc["parallelism"])    # unknown keys raise TypeError
    training = TrainingConfig(**doc["training"])
    # the same settings through torchtitan's ConfigManager (its command-line form)
    monkeypatch.chdir(folder)   # pipeline_parallel_schedule_csv is relative to the launch
    cfg = ConfigManager().parse_args(["--module", "tests.export.titan_config", "--config",
                                      "launch_config", *torchtitan_overrides(lp, "schedule.csv"
                                      if (folder / "schedule.csv").exists() else None)])
    assert cfg.parallelism == par and cfg.training == training
    parts = par.module_fqns_per_model_part
    assert len(parts) == pp * vpp
    counts = tuple(sum(x.startswith("layers.") for x in part) for part in parts)
    assert counts == expected_layers(case, result)
    flat = [x for part in parts for x in part if x.startswith("layers.")]
    assert flat == [f"layers.{k}" for k in range(sum(counts))]
    # each rank builds the stages torchtitan places on it, and they are the CSV's
    ranks = json.loads((folder / "stage_ranks.json").read_text())
    for r in range(pp):
        got = tpp._get_pp_rank_to_stage_indices_mapping(r, pp, par.pipeline_parallel_schedule,
                                                        len(parts))
        assert list(got) == ranks[str(r)]
    # microbatches: local batch / microbatch size
    assert training.local_batch_size // par.pipeline_parallel_microbatch_size == m
    assert training.global_batch_size == training.local_batch_size * DP
    assert par.data_parallel_replicate_degree == DP and par.tensor_parallel_degree == 2
    if par.pipeline_parallel_schedule_csv:
        assert (folder / par.pipeline_parallel_schedule_csv).is_file()


# -- torch ------------------------------------------------------------------------------------

@pytest.mark.parametrize("name", IDS)
def test_torch_loads_the_csv(launches, name):
    schedules = pytest.importorskip("torch.distributed.pipelining.schedules")
    case, result, folder, lp = launches[name]
    schedule, pp, vpp, m, _ = case
    csv = folder / "schedule.csv"
    if lp.shape.csv_reason is not None:
        assert not csv.exists()
        return
    # _PipelineScheduleRuntime._load_csv as torch runs it, on a runtime object without stages
    # (building real stages needs a process group per rank): it parses every cell, validates
    # the schedule, infers the stage -> rank mapping and lowers the communication
    runtime = object.__new__(schedules._PipelineScheduleRuntime)
    runtime.pipeline_order = {}
    runtime.pp_group_size, runtime._num_stages, runtime._n_microbatches = pp, pp * vpp, m
    runtime._stages, runtime._defer_pp_recv = [], False
    runtime._load_csv(str(csv), "compute_only")
    ranks = json.loads((folder / "stage_ranks.json").read_text())
    placed = {}
    for stage, rank in runtime.stage_index_to_group_rank.items():
        placed.setdefault(str(rank), []).append(stage)
    assert {r: sorted(s) for r, s in placed.items()} == ranks
    assert len(runtime.pipeline_order_with_comms) == pp
