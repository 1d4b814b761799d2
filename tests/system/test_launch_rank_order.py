"""A Megatron-LM launch's rank order: --use-tp-pp-dp-mapping places the pipeline's stages side
by side (megatron/training/initialize.py: tp-cp-ep-pp-dp, not tp-cp-ep-dp-pp), so its
transfers and its data-parallel collectives take other links than Megatron's default order."""

from __future__ import annotations

import json
from pathlib import Path

from simulator.cli.main import main
from simulator.cli.model_inputs import launch_system
from simulator.system import SystemConfig
from simulator.system.config import LinkConfig, TopologyConfig, load_system
from simulator.system.topology import LinkModel
from simulator.workload import Header
from simulator.workload.inputs.megatron_args import megatron_input
REPO = Path(__file__).resolve().parents[2]
A100 = str(REPO / "configs" / "system" / "a100.yaml")
# TP 2 x PP 4 on 16 GPUs (DP 2), nodes of 8: stages 1 and 2 meet across nodes in the default
# order (GPUs 4-7 and 8-11), on one node with the stages side by side (GPUs 2, 4)
LAUNCH = ("--num-layers 8 --hidden-size 1024 --num-attention-heads 8 --seq-length 1024 "
          "--micro-batch-size 1 --global-batch-size 16 --tensor-model-parallel-size 2 "
          "--pipeline-model-parallel-size 4 --bf16 --sequence-parallel --use-flash-attn "
          "--untie-embeddings-and-output-weights ")


def _system(order: str) -> SystemConfig:
    return SystemConfig(topology=TopologyConfig(
        gpus_per_node=8, order=order,
        intra_node=LinkConfig(bandwidth_gbps=16.0, latency_ns=10.0),
        inter_node=LinkConfig(bandwidth_gbps=8.0, latency_ns=1000.0)))


def _run(tmp_path, capsys, args: str, *more: str):
    path = tmp_path / "args.txt"
    path.write_text(LAUNCH + args)
    out = tmp_path / "r.json"
    code = main(["run", "--megatron-args", str(path), "--gpus", "16", "--system", A100,
                 "--engine", "evaluator", "--json", str(out), *more])
    err = capsys.readouterr().err
    return code, (json.loads(out.read_text()) if code == 0 else None), err, path


def test_the_flag_reads_as_the_tp_pp_dp_order_and_megatrons_default_otherwise():
    assert megatron_input(LAUNCH, "a.txt", 16).launch.rank_order == "tp-dp-pp"
    assert megatron_input(LAUNCH + "--use-tp-pp-dp-mapping", "a.txt",
                          16).launch.rank_order == "tp-pp-dp"


def test_the_launch_order_replaces_the_systems_and_moves_the_stages_links():
    mi = megatron_input(LAUNCH + "--use-tp-pp-dp-mapping", "a.txt", 16)
    header = Header("HYBRID_TRANSFORMER", tp=2, pp=4, all_gpus=16)
    before = LinkModel(header, _system("tp-dp-pp"))
    assert before.p2p(1, 2).bandwidth_gbps == 8.0          # GPU 4 -> GPU 8: across nodes
    system, mi2 = launch_system(_system("tp-dp-pp"), mi)
    assert system.topology.order == "tp-pp-dp"
    after = LinkModel(header, system)
    assert after.p2p(1, 2).bandwidth_gbps == 16.0          # GPU 2 -> GPU 4: one node
    assert after.placement.gpu(0, dp_rank=1) == 8          # DP's second replica: next node
    assert mi2.notes[-1] == ("--megatron-args a.txt: the ranks in Megatron-LM's tp-cp-ep-pp-dp order "
                             "(--use-tp-pp-dp-mapping): topology.order tp-pp-dp, not the "
                             "system's tp-dp-pp")
    # a launch without the flag runs Megatron's default order on a tp-pp-dp system
    plain = megatron_input(LAUNCH, "a.txt", 16)
    system, mi3 = launch_system(_system("tp-pp-dp"), plain)
    assert system.topology.order == "tp-dp-pp"
    assert "default tp-cp-ep-dp-pp order (no --use-tp-pp-dp-mapping)" in mi3.notes[-1]
    # the same order, or a system without nodes: unchanged and no note
    assert launch_system(_system("tp-dp-pp"), plain) == (_system("tp-dp-pp"), plain)
    flat = SystemConfig()
    assert launch_system(flat, mi) == (flat, mi)


def test_a_run_of_the_flag_is_the_run_on_a_tp_pp_dp_system(tmp_path, capsys):
    code, mapped, err, _ = _run(tmp_path, capsys, "--use-tp-pp-dp-mapping")
    assert code == 0, err
    code, plain, err, _ = _run(tmp_path, capsys, "")
    assert code == 0, err
    code, set_order, err, _ = _run(tmp_path, capsys, "", "--set", "topology.order=tp-pp-dp")
    assert code == 0, err
    assert mapped["makespan_ns"] == set_order["makespan_ns"] != plain["makespan_ns"]
    assert any("--use-tp-pp-dp-mapping): topology.order tp-pp-dp" in n
               for n in mapped["notes"])
    # the user's --set wins over the launch's order, and no note claims otherwise
    code, back, err, _ = _run(tmp_path, capsys, "--use-tp-pp-dp-mapping", "--set",
                              "topology.order=tp-dp-pp")
    assert code == 0, err
    assert back["makespan_ns"] == plain["makespan_ns"]
    assert not any("--use-tp-pp-dp-mapping)" in n for n in back["notes"])
    assert not any("--use-tp-pp-dp-mapping" in w["message"] for w in mapped["warnings"])


def test_a_moe_launch_megatron_refuses_in_this_order_is_refused_in_one_line(tmp_path, capsys):
    code, _, err, path = _run(tmp_path, capsys, "--use-tp-pp-dp-mapping --num-experts 4 "
                              "--expert-model-parallel-size 2")
    assert code == 2
    assert err.strip() == (
        f"pipesim: error: --megatron-args {path}: --use-tp-pp-dp-mapping: expected "
        "--expert-tensor-parallel-size x --expert-model-parallel-size equal to "
        "--tensor-model-parallel-size 2 with a pipeline (Megatron-LM's rule: the experts' "
        "data-parallel size the dense layers' when the pipeline is not the outermost "
        "dimension), found 2 x 2")


def test_the_launch_writer_keeps_the_order_and_it_reads_back(tmp_path, capsys):
    code, mapped, err, _ = _run(tmp_path, capsys, "--use-tp-pp-dp-mapping", "--launch",
                                str(tmp_path / "L"))
    assert code == 0, err
    written = tmp_path / "L" / "megatron_args.txt"
    assert "--use-tp-pp-dp-mapping" in written.read_text().split("\n")
    out = tmp_path / "back.json"
    assert main(["run", "--megatron-args", str(written), "--gpus", "16", "--system", A100,
                 "--engine", "evaluator", "--json", str(out)]) == 0
    capsys.readouterr()
    assert json.loads(out.read_text())["makespan_ns"] == mapped["makespan_ns"]
    # the default order writes no flag
    code, _, err, _ = _run(tmp_path, capsys, "", "--launch", str(tmp_path / "M"))
    assert code == 0, err
    assert "--use-tp-pp-dp-mapping" not in (tmp_path / "M" / "megatron_args.txt").read_text()
    assert load_system(A100).topology.order == "tp-dp-pp"


def test_plan_places_its_candidates_in_the_launch_order_and_its_command_reproduces_it(
        tmp_path, capsys):
    """plan --megatron-args with --use-tp-pp-dp-mapping: every candidate runs in that order,
    the plan says so, the winner's command carries it (and reproduces the winner's time), and
    the winner's launch writes the flag."""
    args = tmp_path / "args.txt"
    args.write_text(LAUNCH + "--use-tp-pp-dp-mapping")
    out = tmp_path / "plan.json"
    assert main(["plan", "--megatron-args", str(args), "--gpus", "16", "--system", A100,
                 "--tp", "2", "--runtime", "megatron", "--json", str(out), "--launch",
                 str(tmp_path / "L")]) == 0
    capsys.readouterr()
    plan = json.loads(out.read_text())
    assert plan["notes"][0] == (f"--megatron-args {args}: the ranks in Megatron-LM's "
                                "tp-cp-ep-pp-dp order (--use-tp-pp-dp-mapping): topology.order "
                                "tp-pp-dp, not the system's tp-dp-pp")
    command = plan["best"]["command"].split()
    assert command[-2:] == ["--set", "topology.order=tp-pp-dp"]
    again = tmp_path / "again.json"
    assert main(command[1:] + ["--json", str(again)]) == 0   # run ... (after "pipesim")
    capsys.readouterr()
    assert json.loads(again.read_text())["makespan_ns"] == plan["best"]["makespan_ns"]
    assert "--use-tp-pp-dp-mapping" in (tmp_path / "L" / "megatron_args.txt").read_text().split(
        "\n")
    # a launch in the system's own order adds nothing
    args.write_text(LAUNCH)
    assert main(["plan", "--megatron-args", str(args), "--gpus", "16", "--system", A100,
                 "--tp", "2", "--json", str(out)]) == 0
    capsys.readouterr()
    plan = json.loads(out.read_text())
    assert "topology.order" not in plan["best"]["command"]
    assert not any("--use-tp-pp-dp-mapping" in n for n in plan["notes"])


def test_generate_says_the_order_is_not_in_the_file(tmp_path, capsys):
    args = tmp_path / "args.txt"
    args.write_text(LAUNCH + "--use-tp-pp-dp-mapping")
    assert main(["generate", "--megatron-args", str(args), "--dp", "2", "-o",
                 str(tmp_path / "w.txt")]) == 0
    err = capsys.readouterr().err
    assert (f"pipesim: warning: --megatron-args {args}: --use-tp-pp-dp-mapping: the workload "
            "file does not hold the ranks' order (the system's topology.order does): run it "
            "with --set topology.order=tp-pp-dp\n") in err
    args.write_text(LAUNCH)
    assert main(["generate", "--megatron-args", str(args), "--dp", "2", "-o",
                 str(tmp_path / "v.txt")]) == 0
    assert "--use-tp-pp-dp-mapping" not in capsys.readouterr().err
