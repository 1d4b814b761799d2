"""--recompute full with Megatron-LM's --recompute-method uniform|block and
--recompute-num-layers N: which rows each chunk recomputes and which inputs it keeps, what that
costs in the backward and holds in memory, worked by hand; the refusals; --megatron-args and
--launch carrying the grouping."""

from __future__ import annotations

import pytest

from simulator import simulate
from simulator.cli.main import main
from simulator.errors import ConfigError
from simulator.system.config import LinkConfig, SystemConfig
from simulator.workload import uniform_workload
from simulator.workload.generator import ModelSpec, ParallelSpec, render
from simulator.workload.gpus import GPUS
from simulator.workload.inputs.megatron_args import megatron_input
from simulator.workload.parser import parse_workload_text
from simulator.workload.partition import partition, with_recompute

# every row one layer: F 100, I 200, W 300 ns; pp_comm 100 B, so a kept input is 100 B and a
# layer's stash 17 x 100 = 1700 B (the default activation_factor)
F, I, W, INPUT, STASH = 100, 200, 300, 100, 1700


def _rows(n, **kw):
    return uniform_workload(n, F, I, W, pp_comm=INPUT, **kw)


def _plan(wl, chunks, method, n):
    return with_recompute(partition(wl, chunks), wl, "full", method, n).recompute


def test_uniform_two_over_five_layers_is_two_pairs_and_a_single():
    # groups (0,1) (2,3) (4): each keyed at its last layer (the backward reaches it first),
    # re-running the whole group; inputs kept at 0, 2 and 4
    assert _plan(_rows(5), 1, "uniform", 2) == ({1: (0, 1), 3: (2, 3), 4: (4,)},)
    # one microbatch on one stage: F 5 x 100; B 5 x (300 + 200) + the 5 forwards again
    r = simulate(_rows(5), "1f1b", pp=1, microbatches=1, recompute="full",
                 recompute_method="uniform", recompute_num_layers=2)
    assert r.makespan_ns == 5 * F + 5 * (W + I) + 5 * F
    # three kept inputs, and a pair's stash again while its backward recomputes it
    static = r.records.static_memory[0]
    assert r.summary.peak_memory_bytes - static == 3 * INPUT + 2 * STASH


def test_block_two_over_four_layers_recomputes_the_first_two_alone():
    # layers 0 and 1 each keep their input and re-run their own forward; 2 and 3 keep all
    assert _plan(_rows(4), 1, "block", 2) == ({0: (0,), 1: (1,)},)
    r = simulate(_rows(4), "1f1b", pp=1, microbatches=1, recompute="full",
                 recompute_method="block", recompute_num_layers=2)
    assert r.makespan_ns == 4 * F + 4 * (W + I) + 2 * F
    static = r.records.static_memory[0]
    assert r.summary.peak_memory_bytes - static == 2 * INPUT + 2 * STASH + STASH


def test_the_defaults_are_todays_every_layer_alone():
    wl = _rows(5)
    assert _plan(wl, 1, "uniform", 1) == ({p: (p,) for p in range(5)},)
    assert with_recompute(partition(wl, 1), wl, "full").recompute == _plan(wl, 1, "uniform", 1)
    plain = simulate(wl, "1f1b", pp=1, microbatches=1, recompute="full")
    given = simulate(wl, "1f1b", pp=1, microbatches=1, recompute="full",
                     recompute_method="uniform", recompute_num_layers=1)
    assert (plain.makespan_ns, plain.summary.peak_memory_bytes) == (
        given.makespan_ns, given.summary.peak_memory_bytes)


def test_the_count_restarts_in_every_virtual_stage():
    # Megatron-LM builds one transformer block per virtual stage and counts N within it: pp 2 x
    # vpp 2 over 8 layers is four chunks of two, and block 1 recomputes the first of each
    wl = _rows(8)
    assert _plan(wl, 4, "block", 1) == ({0: (0,)},) * 4
    assert _plan(wl, 4, "uniform", 2) == ({1: (0, 1)},) * 4
    # more layers than a chunk holds: one group of the chunk / every layer alone
    assert _plan(wl, 4, "uniform", 3) == ({1: (0, 1)},) * 4
    assert _plan(wl, 4, "block", 5) == ({0: (0,), 1: (1,)},) * 4


def test_a_layer_of_several_rows_groups_whole_and_the_embedding_stays_out():
    # 2 generated GPT layers of 4 rows each after the embedding rows, the head and loss after
    model = ModelSpec("gpt", 2, 1024, 16, 512, 1)
    wl = parse_workload_text(render(model, ParallelSpec(), GPUS["a100"]), "g.txt")
    rows = partition(wl, 1).chunks[0]
    layer = [p for p, r in enumerate(rows) if r.name.startswith(("attention", "mlp"))]
    assert len(layer) == 8
    assert _plan(wl, 1, "uniform", 2) == ({layer[-1]: tuple(layer)},)
    assert _plan(wl, 1, "block", 1) == ({layer[3]: tuple(layer[:4])},)


def test_one_1f1b_run_by_hand_makespan_and_peaks():
    # 1F1B, P = 2, M = 2, three layers a stage; a transfer is 100 B at 1 B/ns, no latency:
    # 100 ns. With b the B of a stage: rank 0 F0 0-300, F1 300-600; rank 1 F0 400-700, B0
    # 700-700+b, F1 -1000+b, B1 -1000+2b; rank 0 B0 800+b-800+2b, B1 1100+2b-1100+3b.
    link = SystemConfig(links=LinkConfig(bandwidth_gbps=8.0, latency_ns=0.0))
    wl = _rows(6)

    def run(**kw):
        r = simulate(wl, "1f1b", link, pp=2, microbatches=2, **kw)
        static = r.records.static_memory
        return r.makespan_ns, [m["peak_memory_bytes"] - s
                               for m, s in zip(r.to_dict()["ranks"], static)]

    b = 3 * (W + I)
    # none: rank 0 holds two microbatches' stashes, rank 1 one
    assert run(recompute="none") == (1100 + 3 * b, [2 * 3 * STASH, 3 * STASH])
    # uniform 2 over 3 layers: groups (0,1) (2), every forward again; two inputs per
    # microbatch and the pair's stash again in the backward
    assert run(recompute="full", recompute_num_layers=2) == (
        1100 + 3 * (b + 3 * F), [2 * 2 * INPUT + 2 * STASH, 2 * INPUT + 2 * STASH])
    # block 2: layers 0 and 1 again (alone), layer 2 keeps its stash
    per_mb = 2 * INPUT + STASH
    assert run(recompute="full", recompute_method="block", recompute_num_layers=2) == (
        1100 + 3 * (b + 2 * F), [2 * per_mb + STASH, per_mb + STASH])


@pytest.mark.parametrize("args, line", [
    (["--recompute-method", "block"],
     "pipesim: error: --recompute-method: needs --recompute full, got --recompute file"),
    (["--recompute", "none", "--recompute-num-layers", "2"],
     "pipesim: error: --recompute-num-layers: needs --recompute full, got --recompute none"),
    (["--recompute", "full", "--recompute-num-layers", "0"],
     "pipesim: error: --recompute-num-layers: expected a positive integer, got 0"),
])
def test_the_refusals_are_one_line_exit_2(args, line, tmp_path, capsys):
    path = tmp_path / "w.txt"
    path.write_text("HYBRID_TRANSFORMER_FWD_IN_BCKWD model_parallel_NPU_group: 1 pp: 1 ga: 1 "
                    "all_gpus: 1 pp_comm: 100\n1\n"
                    "l0 -1 100 NONE 0 200 NONE 0 300 NONE 0 0\n")
    for command in ("run", "compare"):
        extra = ["--schedules", "1f1b,gpipe"] if command == "compare" else []
        assert main([command, str(path), *extra, *args]) == 2
        assert capsys.readouterr().err.strip() == line
    with pytest.raises(ConfigError, match="^--recompute-method: needs --recompute full, got "
                                          "--recompute none$"):
        simulate(_rows(2), "1f1b", recompute="none", recompute_method="uniform")


BASE = ("--num-layers 8 --hidden-size 1024 --num-attention-heads 16 --seq-length 1024 "
        "--micro-batch-size 1 --global-batch-size 2 --vocab-size 50304 --bf16 "
        "--untie-embeddings-and-output-weights --use-flash-attn "
        "--pipeline-model-parallel-size 2 --recompute-granularity full ")


def test_megatron_args_carry_the_grouping_without_a_warning():
    got = megatron_input(BASE + "--recompute-method block --recompute-num-layers 2", "a.txt", 2)
    la = got.launch
    assert (la.recompute, la.recompute_method, la.recompute_num_layers) == ("full", "block", 2)
    assert not [w for w in got.warnings if "recompute" in w]
    # Megatron-LM's own refusals stay
    with pytest.raises(ConfigError, match=r"^--megatron-args a.txt: --recompute-num-layers: "
                                          r"expected between 1 and the 4 layers per pipeline "
                                          r"rank, found 5$"):
        megatron_input(BASE + "--recompute-method uniform --recompute-num-layers 5", "a.txt", 2)


def test_megatron_args_run_the_grouping_and_launch_writes_it_back(tmp_path, capsys):
    args = tmp_path / "a.txt"
    args.write_text(BASE + "--recompute-method block --recompute-num-layers 2")
    out = tmp_path / "launch"
    by_file = tmp_path / "f.json"
    assert main(["run", "--megatron-args", str(args), "--gpus", "2", "--engine", "evaluator",
                 "--json", str(by_file), "--launch", str(out)]) == 0
    written = (out / "megatron_args.txt").read_text().splitlines()
    assert "--recompute-method block" in written and "--recompute-num-layers 2" in written
    assert "# no mode: torchtitan has no Megatron-LM --recompute-method block " \
        "--recompute-num-layers 2 (its full mode checkpoints every layer alone)" in \
        (out / "torchtitan.toml").read_text().splitlines()
    # the same run from the command line gives the same numbers; the default grouping others
    by_flags = tmp_path / "g.json"
    default = tmp_path / "d.json"
    common = ["run", "--megatron-args", str(args), "--gpus", "2", "--engine", "evaluator"]
    assert main(common + ["--recompute", "full", "--recompute-method", "block",
                          "--recompute-num-layers", "2", "--json", str(by_flags)]) == 0
    assert main(common + ["--recompute", "full", "--recompute-method", "uniform",
                          "--recompute-num-layers", "1", "--json", str(default)]) == 0
    capsys.readouterr()
    import json

    a, b, c = (json.loads(p.read_text()) for p in (by_file, by_flags, default))
    assert (a["makespan_ns"], a["peak_memory_bytes"]) == (b["makespan_ns"],
                                                          b["peak_memory_bytes"])
    # block 2 of 4 layers a stage re-runs half the forwards of uniform 1 and keeps more
    assert a["makespan_ns"] < c["makespan_ns"]
    assert a["peak_memory_bytes"] > c["peak_memory_bytes"]
