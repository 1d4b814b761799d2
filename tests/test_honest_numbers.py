"""Issue 14: no silent wrong numbers. Each test runs the command the issue quotes on a vendored
real file (../shared/workloads-real, provenance in its SOURCES.md) and checks the new behaviour: the
number is right, or the same run says exactly which assumption it rests on."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from simulator import simulate
from simulator.cli.main import main
from simulator.errors import ConfigError, OutOfMemoryError

from shared_files import REAL_DIR, needs_real

DATA = REAL_DIR
L7B = DATA / "aicb" / "L7B-M1-C04_Llama7B_megatron_tp2_pp1_mbs1_A100.txt"
G13B_SP = DATA / "aicb" / "G13B-M1-C02_GPT13B_megatron_tp8_pp1_mbs1_sp_A100.txt"
G13B = DATA / "G13B-M1-C01_GPT13B_megatron_tp8_pp1_mbs1_A100.txt"
ALL_REDUCE = DATA / "aicb" / "all_reduce.txt"
RESNET = DATA / "astra-sim-1.0" / "Resnet50_DataParallel.txt"
DLRM = DATA / "astra-sim-1.0" / "DLRM_HybridParallel.txt"
CUSTOM = DATA / "astra-sim-1.0" / "sample_per_layer_parallel_HybridCustomized.txt"
ANALYTICAL = DATA / "workload_analytical.txt"


def run_json(capsys, *args) -> dict:
    assert main(["run", *map(str, args), "--json", "-"]) == 0
    return json.loads(capsys.readouterr().out)


def codes(d: dict) -> list[str]:
    return [w["code"] for w in d["warnings"]]


def warning(d: dict, code: str) -> dict:
    """The run's one warning of ``code``."""
    found = [w for w in d["warnings"] if w["code"] == code]
    assert len(found) == 1, codes(d)
    return found[0]


# -- 1. transfers when the file has no pp_comm ------------------------------------------------

@needs_real
def test_missing_pp_comm_is_derived_from_the_tp_allreduce(capsys):
    d = run_json(capsys, L7B, "--pp", "4")
    # 3 boundaries, one microbatch, activation forward + gradient back: 6 x s·b·h·2 bytes
    assert d["p2p_bytes"] == 6 * 16777216
    w = warning(d, "pp_comm_derived")
    assert w == {"code": "pp_comm_derived", "option": "--pp-comm", "message": (
        f"{L7B} has no pp_comm; using 16777216 bytes per microbatch between stages (and for "
        "activation memory), derived from line 7 (attention_layer: forward ALLREDUCE of "
        "16777216 bytes = the s·b·h activation)")}


@needs_real
def test_sequence_parallel_sends_the_one_over_tp_shard(capsys):
    d = run_json(capsys, G13B_SP, "--pp", "4")
    assert d["p2p_bytes"] == 6 * 20971520 // 8
    assert "forward ALLGATHER of 20971520 bytes, sequence parallel: each GPU sends its 1/8 " \
           "shard" in warning(d, "pp_comm_derived")["message"]


@needs_real
def test_nothing_to_derive_is_a_loud_warning_and_pp_comm_sets_it(capsys):
    d = run_json(capsys, RESNET, "--pp", "4")
    assert d["p2p_bytes"] == 0
    assert warning(d, "p2p_free") == {"code": "p2p_free", "option": "--pp-comm", "message": (
        f"{RESNET} has no pp_comm and no activation size can be derived from its rows (no "
        "tensor-parallel forward collective); the 3 stage boundaries move 0 bytes, so "
        "transfers cost nothing and activations take no memory")}
    d = run_json(capsys, RESNET, "--pp", "4", "--pp-comm", "1048576")
    assert d["p2p_bytes"] == 6 * 1048576
    assert "p2p_free" not in codes(d) and "pp_comm_derived" not in codes(d)


@needs_real
def test_pp_comm_overrides_the_files_value(capsys):
    a = run_json(capsys, L7B, "--pp", "2", "--pp-comm", "1000")
    assert a["p2p_bytes"] == 2 * 1000 and "pp_comm_derived" not in codes(a)


# -- 2. iteration-level rows on the right stages ----------------------------------------------

@needs_real
def test_aicb_iteration_rows_are_shared_by_every_stage(capsys):
    d = run_json(capsys, G13B, "--pp", "4")
    mem = [s["peak_memory_bytes"] for s in d["stages"]]
    assert min(mem) > 0                          # was 48.41 GiB on stage 0 and 0 B elsewhere
    assert max(mem) / min(mem) < 1.1
    # the whole model's gradients are reduce-scattered once per iteration, split over stages
    assert d["dp_collective_bytes"] == 6497239040
    one = run_json(capsys, G13B, "--pp", "1")
    assert one["dp_collective_bytes"] == 6497239040


@needs_real
def test_each_ranks_share_follows_its_chunks_parameters():
    r = simulate(G13B, pp=4)
    rows = [len(c) for c in r.partition.chunks]
    # 82 model rows (the 10 AICB rows run apart): the embedding row and 5 layers of 4 rows,
    # 5 layers, 5 layers, 5 layers and the 1 row after them
    assert rows == [21, 20, 20, 21]
    # no row reduces its own gradients (grad_norm does it for all), so the weight-gradient
    # compute time stands for each chunk's parameters
    wg = [sum(layer.wg_compute for layer in c) for c in r.partition.chunks]
    assert r.partition.iteration_share == pytest.approx([w / sum(wg) for w in wg])
    assert sum(r.partition.iteration_share) == pytest.approx(1.0)


# -- 3. collectives on a defaulted group of one -----------------------------------------------

PARAMS_ASSUMED = {
    "code": "params_assumed",
    "message": "parameters per layer: the rows' weight-gradient bytes / 2 B a parameter, bf16 "
               "gradients assumed (the header has no grad_bytes_per_param:, which pipesim "
               "generate writes, and --system no memory.grad_bytes_per_param)",
    "option": "memory.params_per_layer or memory.grad_bytes_per_param in --system, or "
              "grad_bytes_per_param: in the header"}


def test_parameters_counted_from_gradient_bytes_name_the_bytes_a_parameter(capsys, tmp_path):
    """A file without grad_bytes_per_param: counts its parameters at 2 B a gradient and says so;
    the header's key or the system's setting is used without a warning, and at 4 B halves the
    parameters, so the static memory (weights, gradients, optimizer) halves too."""
    gpt = Path(__file__).parents[1] / "workloads" / "gpt-24l.txt"
    assumed = run_json(capsys, gpt)
    assert PARAMS_ASSUMED in assumed["warnings"]
    lines = gpt.read_text().splitlines()
    fp32 = tmp_path / "fp32.txt"
    fp32.write_text("\n".join([lines[0] + " grad_bytes_per_param: 4", *lines[1:]]) + "\n")
    for doc in (run_json(capsys, fp32),
                run_json(capsys, gpt, "--set", "memory.grad_bytes_per_param=4")):
        assert "params_assumed" not in codes(doc)
        assert [2 * r["static_memory_bytes"] for r in doc["ranks"]] == \
            [r["static_memory_bytes"] for r in assumed["ranks"]]


@needs_real
def test_defaulted_gpu_count_is_warned_and_gpus_prices_the_collectives(capsys):
    d = run_json(capsys, ALL_REDUCE)
    assert d["makespan_ns"] == 57                # 19 all-reduces on a group of one: free
    assert warning(d, "gpus_defaulted") == {"code": "gpus_defaulted", "option": "--gpus or --dp", "message": (
        f"{ALL_REDUCE} has no all_gpus; assuming 1 GPU(s) (tp x the header's pp), so at pp 1 "
        "DP = 1 and its data-parallel collectives (2147479552 bytes named in the rows) run on "
        "a group of one and cost nothing")}
    assert PARAMS_ASSUMED in d["warnings"]
    priced = run_json(capsys, ALL_REDUCE, "--gpus", "8")
    assert PARAMS_ASSUMED in priced["warnings"] and priced["makespan_ns"] > 1e7
    assert "gpus_defaulted" not in codes(priced)
    assert run_json(capsys, ALL_REDUCE, "--dp", "8")["makespan_ns"] == priced["makespan_ns"]


@needs_real
def test_gpus_must_divide_into_replicas(capsys):
    assert main(["run", str(L7B), "--pp", "4", "--gpus", "12"]) == 2
    assert capsys.readouterr().err == (
        "pipesim: error: --gpus: 12 GPUs do not divide into TP 2 x PP 4 = 8 per data-parallel "
        "replica; expected a multiple of 8\n")
    assert main(["run", str(L7B), "--gpus", "8", "--dp", "2"]) == 2
    assert capsys.readouterr().err == (
        "pipesim: error: --gpus and --dp: give one, not both (DP = GPUs / (TP x PP))\n")


# -- 4. memory no GPU holds -------------------------------------------------------------------

@needs_real
def test_a_peak_above_a_typical_gpu_is_warned_with_its_drivers(capsys):
    d = run_json(capsys, ANALYTICAL)
    w = [x for x in d["warnings"] if x["code"] == "memory_over_capacity"]
    assert len(w) == 1
    assert "above the 80 GiB of a typical A100/H100 (no memory capacity set)" in w[0]["message"]
    assert "activation_factor 17 x pp_comm 50331648 bytes per layer" in w[0]["message"]
    assert w[0]["option"] == "--memory-limit or memory.capacity_gib in --system"


@needs_real
def test_a_system_with_a_real_capacity_turns_it_into_out_of_memory():
    repo = Path(__file__).resolve().parents[1]
    with pytest.raises(OutOfMemoryError):
        simulate(ANALYTICAL, system=repo / "configs" / "system" / "h100.yaml")


def test_presets_give_the_memory_the_cards_expose_in_gib():
    """NVML's totals (nvidia-smi memory.total, MiB): the H100 80GB exposes 79.65 GiB, not 80
    GiB, and not the 80 GB (74.51 GiB) h100-cluster.yaml said; every GPU preset says the same
    card's number in the same unit."""
    from simulator.system.config import load_system

    repo = Path(__file__).resolve().parents[1] / "configs" / "system"
    caps = {n: load_system(repo / f"{n}.yaml").memory.capacity_bytes
            for n in ("a100", "h100", "h100-cluster", "h200")}
    assert caps == {"a100": 81920 * 2**20, "h100": 81559 * 2**20,
                    "h100-cluster": 81559 * 2**20, "h200": 143771 * 2**20}
    for n in caps:
        text = (repo / f"{n}.yaml").read_text()
        assert "capacity_gb:" not in text and "capacity_gib:" in text


@needs_real
def test_ranks_holding_nothing_are_warned(capsys):
    all_to_all = DATA / "aicb" / "all_to_all.txt"
    d = run_json(capsys, all_to_all, "--pp", "2")
    assert [r["peak_memory_bytes"] for r in d["ranks"]] == [0, 0]
    assert [w for w in d["warnings"] if w["code"] == "memory_unknown"] == [{
        "code": "memory_unknown",
        "option": "--set memory.params_per_layer=N, memory.activation_bytes_per_layer=B or "
                  "--pp-comm",
        "message": f"rank(s) 0, 1 hold 0 B: {all_to_all} names no parameter sizes for their "
                   "layers (no weight-gradient ALLREDUCE/REDUCESCATTER bytes) and no activation "
                   "size (pp_comm 0)"}]
    # a file that names its parameters holds memory on every rank and says nothing of it
    d = run_json(capsys, RESNET, "--pp", "2")
    assert min(r["peak_memory_bytes"] for r in d["ranks"]) > 0
    assert "memory_unknown" not in codes(d)


# -- 5. impossible sizes refused from the parameters alone -------------------------------------

@pytest.fixture
def no_generation(monkeypatch):
    """Fail the test if a schedule is built: the refusal must come before any work."""
    from simulator.schedules import registry

    def boom(*a, **k):
        raise AssertionError("a schedule was generated before the size check")

    monkeypatch.setattr(registry, "generate", boom)


@needs_real
@pytest.mark.parametrize("args, message", [
    (["--pp", "4", "--vpp", "1000", "-m", "1000"],
     f"{DLRM}: cannot split 8 layer rows into 4000 pipeline chunks (pp x vpp); every chunk "
     "needs at least one layer"),
    (["--pp", "1000", "--vpp", "8"],
     f"{DLRM}: cannot split 8 layer rows into 8000 pipeline chunks (pp x vpp); every chunk "
     "needs at least one layer"),
    (["--pp", "1000", "-s", "hanayo"],
     f"{DLRM}: cannot split 8 layer rows into 2000 pipeline chunks (pp x vpp); every chunk "
     "needs at least one layer"),
    (["--pp", "1", "-m", "8388608", "-s", "v-half"],
     "--max-actions: v-half with pp 1, vpp 2, 8388608 microbatches runs up to 50,331,648 "
     "actions, and building it costs as much as 402,653,184 (its generator grows faster than "
     "its actions), above the limit of 700,000 (about 10 s of simulation); pass --max-actions "
     "402653184 (or 0 for no limit) to run it anyway"),
])
def test_impossible_sizes_are_refused_before_any_work(capsys, no_generation, args, message):
    assert main(["run", str(DLRM), *args]) == 2
    assert capsys.readouterr().err == f"pipesim: error: {message}\n"


def test_a_huge_ga_in_the_header_is_refused_the_same_way(tmp_path, capsys, no_generation):
    f = tmp_path / "huge.txt"
    f.write_text("MICRO ga: 8388608.0\n2\n" + "l -1 1 NONE 0 1 NONE 0 1 NONE 0 1\n" * 2)
    assert main(["run", str(f), "-s", "v-half"]) == 2
    assert "runs up to 50,331,648 actions" in capsys.readouterr().err


@needs_real
def test_max_actions_lets_a_large_run_through():
    r = simulate(DLRM, "1f1b", pp=2, microbatches=10, max_actions=40)
    assert len(r.records.actions) == 40
    with pytest.raises(ConfigError, match="runs up to 40 actions, above the limit of 39"):
        simulate(DLRM, "1f1b", pp=2, microbatches=10, max_actions=39)


# -- warnings channel, --strict, JSON and parser nits -------------------------------------------

@needs_real
def test_strict_refuses_a_run_with_warnings(capsys, tmp_path):
    assert main(["run", str(ALL_REDUCE), "--strict"]) == 2
    assert capsys.readouterr().err == (
        f"pipesim: error: --strict: {ALL_REDUCE}:1: header has no model_parallel_NPU_group:; "
        "using TP 1 (the world size and a derived pp_comm assume it) (set "
        "model_parallel_NPU_group: in the header) [tp_defaulted]\n")
    # the same rows under a header that states every key: --gpus settles the world size
    stated = tmp_path / "all_reduce.txt"
    lines = ALL_REDUCE.read_text().split("\n")
    stated.write_text("\n".join(["MICRO model_parallel_NPU_group: 1 ep: 1 pp: 1 vpp: 1 ga: 1 "
                                 "all_gpus: 1 pp_comm: 0 layout: model", *lines[1:]]))
    assert main(["run", str(stated), "--strict"]) == 2
    assert capsys.readouterr().err.endswith("(set --gpus or --dp) [dp_group_of_one]\n")
    assert main(["run", str(stated), "--strict", "--gpus", "8", "--param-dtype", "bf16",
                 "--set", "memory.grad_bytes_per_param=2", "--json", "-"]) == 0


@needs_real
def test_text_report_shows_the_warnings_block(capsys):
    assert main(["run", str(RESNET), "--pp", "2"]) == 0
    out = capsys.readouterr().out
    assert "\nwarnings (" in out
    assert "[set --pp-comm]" in out and "[set --gpus or --dp]" in out


@needs_real
def test_byte_counts_are_json_integers(capsys):
    d = run_json(capsys, ANALYTICAL)
    assert isinstance(d["peak_memory_bytes"], int)
    assert all(isinstance(s["peak_memory_bytes"], int) and isinstance(s["static_memory_bytes"],
               int) for s in d["stages"])


def test_cr_only_file_says_it_has_no_line_breaks(tmp_path, capsys):
    f = tmp_path / "mac.txt"
    f.write_bytes(b"DATA\r1\rconv1 -1 1 NONE 0 1 NONE 0 1 ALLREDUCE 100 1\r")
    assert main(["run", str(f)]) == 2
    assert capsys.readouterr().err == (
        f"pipesim: error: {f}:1:5: line breaks: expected lines ending in LF or CRLF (convert "
        "with: tr '\\r' '\\n'), found 'no line breaks (3 bare CRs)'\n")


@needs_real
def test_hybrid_customized_layer_policy_is_warned(capsys):
    d = run_json(capsys, CUSTOM, "--gpus", "4")
    w = [x for x in d["warnings"] if x["code"] == "layer_policy_ignored"]
    assert len(w) == 1 and "HYBRID_DATA_MODEL" in w[0]["message"]


# -- the target: over every vendored real file at pp 1, 2, 4, 8, no suspicious number without a
# -- warning about exactly that -------------------------------------------------------------

def _real_files() -> list[Path]:
    # left out: the malformed L65B (both copies) and AICB's Example.txt (a computation-time
    # profile, not a workload): refused at parsing (tests/test_shared_real_files.py)
    return sorted(p for p in DATA.rglob("*.txt")
                  if "L65B-M1-C05" not in p.name and p.name != "aicb__Example.txt")


@needs_real
@pytest.mark.parametrize("path", _real_files(), ids=lambda p: str(p.relative_to(DATA)))
def test_every_suspicious_number_on_real_files_is_warned(path):
    from simulator.system.topology import Placement
    from simulator.workload.model import CommGroup

    checked = 0
    for P in (1, 2, 4, 8):
        try:
            r = simulate(path, pp=P)
        except ConfigError as err:         # refused from the sizes (too few rows for P chunks)
            assert "cannot split" in str(err)
            continue
        checked += 1
        d = r.to_dict()
        got = set(codes(d))
        if P > 1 and d["p2p_bytes"] == 0:
            assert "p2p_free" in got, (P, got)
        if any(s["peak_memory_bytes"] == 0 for s in d["stages"]):
            assert "memory_unknown" in got, (P, got)
        if d["peak_memory_bytes"] > 80 * 2**30:
            assert "memory_over_capacity" in got, (P, got)
        h = r.workload.header
        dp = Placement.of(h, r.system, P).dp
        if d["dp_collective_bytes"] > 0 and dp == 1:
            assert got & {"gpus_defaulted", "dp_group_of_one", "gpus_indivisible"}, (P, got)
        groups = {c.group for layer in r.workload.layers
                  for c in (layer.fwd_comm, layer.ig_comm, layer.wg_comm) if c.active}
        if CommGroup.TP in groups and h.tp == 1:
            assert "tp_group_of_one" in got, (P, got)
        if CommGroup.EP in groups and h.ep == 1:
            assert "ep_group_of_one" in got, (P, got)
    assert checked >= 1


@needs_real
def test_each_missing_header_key_the_run_uses_is_a_warning(capsys):
    """The parser fills in the header's missing keys; a run warns for each one it still uses,
    and not for those its options decide (--pp, a derived pp_comm, --gpus), so the warnings
    never contradict each other ("using pp_comm=0" beside "using 20971520 bytes")."""
    d = run_json(capsys, G13B, "--pp", "4", "--gpus", "64")
    assert [n for n in d["notes"] if "header has no" in n] == []
    said = f"{G13B}:1: header has no"
    # no ep: either, but no row has an expert-parallel collective: EP changes no number
    assert d["warnings"][:2] == [
        {"code": "vpp_defaulted", "message": f"{said} vpp:; using vpp 1 (1f1b at 1 chunk(s) "
         "per rank)", "option": "--vpp or vpp: in the header"},
        {"code": "ga_defaulted", "message": f"{said} ga:; using 1 microbatch per iteration",
         "option": "-m or ga: in the header"}]
    assert codes(d)[2] == "pp_comm_derived"
    # --pp 1 states the default: not warned; the world size still is
    d = run_json(capsys, G13B, "--pp-comm", "0", "--pp", "1")
    assert codes(d) == ["vpp_defaulted", "ga_defaulted", "gpus_defaulted",
                        "params_assumed", "memory_per_param_default"]
    d = run_json(capsys, G13B, "--pp-comm", "0", "--pp", "1", "-m", "4", "--vpp", "1",
                 "--gpus", "64")
    assert codes(d) == ["params_assumed", "memory_per_param_default"]