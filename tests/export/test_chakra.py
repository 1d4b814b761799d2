"""Chakra execution traces (ASTRA-sim 2.0): what `--chakra` writes, read back with chakra's own
decoder, and `--chakra-in` running it again to the same makespan. Skipped without mlc-chakra."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from simulator import simulate
from simulator.cli.main import main
from simulator.export.chakra import write_chakra
from simulator.schedules.chakra_in import read_chakra
from simulator.workload.builder import uniform_workload

pytestmark = pytest.mark.chakra   # deselected by default (pyproject.toml): -m chakra runs them
try:
    from chakra.schema.protobuf import et_def_pb2 as chakra
    from chakra.src.third_party.utils import protolib
except Exception:   # not installed (or a protobuf runtime its schema does not load on)
    chakra = protolib = None


@pytest.fixture(autouse=True)
def _needs_mlc_chakra():
    """Asked for with -m chakra but not installed: skipped, saying what to install."""
    if chakra is None:
        pytest.skip("needs mlc-chakra: pip install --no-deps mlc-chakra")

pb = chakra
MIB = 1 << 20


def _read(path):
    """GlobalMetadata and the nodes of one ET, with chakra's protolib (as chakra_jsonizer)."""
    fh = protolib.openFileRd(str(path))
    meta = pb.GlobalMetadata()
    assert protolib.decodeMessage(fh, meta)
    nodes = []
    while True:
        node = pb.Node()
        if not protolib.decodeMessage(fh, node):
            break
        nodes.append(node)
    fh.close()
    return meta, nodes


def _attrs(node):
    return {a.name: getattr(a, a.WhichOneof("value")) for a in node.attr}


def _workload(P, M, layers_per_stage=1, uneven=False):
    wl = uniform_workload(P * layers_per_stage * 2, 1_000_000, 1_000_000, 1_000_000, pp=P, ga=M,
                          pp_comm=MIB)
    if uneven:   # forwards of 1, 2 and 3 ms
        wl = wl._replace(layers=tuple(
            layer._replace(fwd_compute=1_000_000 * (1 + i % 3))
            for i, layer in enumerate(wl.layers)))
    return wl


def test_1f1b_export_read_back_with_chakras_decoder(tmp_path):
    P, M = 4, 4
    wl = uniform_workload(P, 1_000_000, 1_000_000, 0, pp=P, ga=M, pp_comm=MIB)
    result = simulate(wl, "1f1b", pp=P, microbatches=M)
    written = write_chakra(result, tmp_path)
    assert (written.compute_nodes, written.send_nodes, written.recv_nodes) == (32, 24, 24)
    sends, recvs = set(), set()
    for r in range(P):
        meta, nodes = _read(tmp_path / f"et.{r}.et")
        assert meta.version == "1.0.0"
        assert {a.name: a.int64_val for a in meta.attr if a.name == "pipesim.rank"} == \
            {"pipesim.rank": r}
        compute = [n for n in nodes if n.type == pb.COMP_NODE]
        # the rank's compute nodes in the schedule's order, each after the previous one
        assert [n.name for n in compute] == result.schedule.as_strings()[r]
        for prev, node in zip(compute, compute[1:]):
            assert list(node.ctrl_deps) == [prev.id]
        # durations: F 1 ms, B 1 ms (ig only), in whole microseconds and exact ns
        for node in compute:
            a = _attrs(node)
            assert node.duration_micros == 1000 and a["pipesim.duration_ns"] == 1e6
            assert a["is_cpu_op"] is False and a["pipesim.kind"] == node.name[1]
        assert [n.id for n in nodes] == list(range(len(nodes)))
        by_id = {n.id: n for n in nodes}
        for n in nodes:
            a = _attrs(n)
            key = (a.get("comm_tag"), a.get("comm_src"), a.get("comm_dst"), a.get("comm_size"))
            if n.type == pb.COMM_SEND_NODE:
                assert key[1] == r and key[3] == MIB
                (producer,) = n.data_deps      # the action that made the data
                assert by_id[producer].type == pb.COMP_NODE
                sends.add(key)
            elif n.type == pb.COMM_RECV_NODE:
                assert key[2] == r
                consumers = [m for m in nodes if n.id in m.data_deps]
                assert len(consumers) == 1 and consumers[0].type == pb.COMP_NODE
                recvs.add(key)
    assert len(sends) == 24 and sends == recvs      # every tag matched across ranks
    assert len({k[0] for k in sends}) == 24          # tags unique


def test_configs_and_readme(tmp_path):
    result = simulate(_workload(4, 4), "1f1b", pp=4, microbatches=4)
    write_chakra(result, tmp_path)
    net = (tmp_path / "network.yml").read_text()
    assert "FullyConnected" in net and "npus_count: [ 4 ]" in net
    # 400 Gb/s (the built-in link) is 50e9 B/s = 46.566... GB/s of 2^30 B; latency 2000 ns
    assert "46.566128730773926" in net and "2000.0" in net
    assert '"roofline-enabled": 0' in (tmp_path / "system.json").read_text()
    assert "NO_MEMORY_EXPANSION" in (tmp_path / "remote_memory.json").read_text()
    readme = (tmp_path / "README.md").read_text()
    assert f"--workload-configuration={tmp_path.resolve()}/et " in readme
    assert f"--network-configuration={tmp_path.resolve()}/network.yml" in readme


@pytest.mark.parametrize("schedule", ["1f1b", "gpipe", "interleaved-1f1b", "zb-h1", "zb-v",
                                      "dualpipe-v", "dualpipe"])
def test_round_trip_same_makespan_to_the_ns(tmp_path, schedule):
    P, M = 4, 8
    result = simulate(_workload(P, M, layers_per_stage=2, uneven=True), schedule, pp=P,
                      microbatches=M)
    write_chakra(result, tmp_path)
    imported = read_chakra(str(tmp_path / "et"))
    again = simulate(imported.workload, imported.schedule,
                     result.system.with_overrides(imported.links))
    assert again.makespan_ns == pytest.approx(result.makespan_ns, abs=1e-6)
    assert imported.schedule.as_strings() == result.schedule.as_strings()


def test_cli_round_trip_and_report(tmp_path, capsys):
    out = tmp_path / "ets"
    assert main(["run", "workloads/doc000-1f1b-test.txt", "--chakra", str(out),
                 "--json", str(tmp_path / "a.json")]) == 0
    assert capsys.readouterr().out.startswith(f"chakra: 4 ETs in {out} (")
    assert main(["run", "--chakra-in", str(out / "et"), "--json", str(tmp_path / "b.json")]) == 0
    import json

    a = json.loads((tmp_path / "a.json").read_text())
    b = json.loads((tmp_path / "b.json").read_text())
    assert a["makespan_ns"] == b["makespan_ns"]


def test_schedule_export_unit_costs_is_21_ms(tmp_path, capsys):
    """The issue's check: 1F1B, P = 4, M = 4, F = 1 ms, B = 2 ms: (M+P-1)(F+B) = 21 ms."""
    assert main(["schedule", "1f1b", "--pp", "4", "-m", "4", "--chakra", str(tmp_path)]) == 0
    assert capsys.readouterr().out.splitlines()[-1].endswith("pipesim's makespan 21000000 ns")
    _, nodes = _read(tmp_path / "et.3.et")
    assert [n.duration_micros for n in nodes if n.type == pb.COMP_NODE] == [1000, 2000] * 4


def _export(tmp_path):
    result = simulate(_workload(2, 2), "1f1b", pp=2, microbatches=2)
    write_chakra(result, tmp_path)
    return tmp_path / "et"


def _rewrite(path, change):
    meta, nodes = _read(path)
    nodes = change(nodes)
    with open(path, "wb") as fh:
        protolib.encodeMessage(fh, meta)
        for n in nodes:
            protolib.encodeMessage(fh, n)


def test_missing_rank_file(tmp_path, capsys):
    prefix = _export(tmp_path)
    (tmp_path / "et.0.et").unlink()
    assert main(["run", "--chakra-in", str(prefix)]) == 2
    assert capsys.readouterr().err == (
        f"pipesim: error: --chakra-in: {prefix}.0.et: missing (found ranks 1; expected every "
        "rank 0..1)\n")


def test_missing_middle_rank(tmp_path, capsys):
    result = simulate(_workload(3, 2), "1f1b", pp=3, microbatches=2)
    write_chakra(result, tmp_path)
    (tmp_path / "et.1.et").unlink()
    assert main(["run", "--chakra-in", str(tmp_path / "et")]) == 2
    assert capsys.readouterr().err == (
        f"pipesim: error: --chakra-in: {tmp_path}/et.1.et: missing (found ranks 0, 2; "
        "expected every rank 0..2)\n")


def test_unmatched_tag(tmp_path, capsys):
    prefix = _export(tmp_path)

    def retag(nodes):
        for n in nodes:
            if n.type == pb.COMM_RECV_NODE:
                for a in n.attr:
                    if a.name == "comm_tag":
                        a.int32_val = 99
                break
        return nodes

    _rewrite(tmp_path / "et.1.et", retag)
    assert main(["run", "--chakra-in", str(prefix)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert err.startswith(f"pipesim: error: --chakra-in: {tmp_path}/et.0.et: node ")
    assert "'0SEND_F0': no receive on rank 1 with tag 0, source 0 and size 1048576" in err


def test_unsupported_node_type(tmp_path, capsys):
    prefix = _export(tmp_path)

    def add_mem(nodes):
        nodes.append(pb.Node(id=len(nodes), name="load", type=pb.MEM_LOAD_NODE))
        return nodes

    _rewrite(tmp_path / "et.0.et", add_mem)
    assert main(["run", "--chakra-in", str(prefix)]) == 2
    n = len(_read(tmp_path / "et.0.et")[1]) - 1
    assert capsys.readouterr().err == (
        f"pipesim: error: --chakra-in: {tmp_path}/et.0.et: node {n} 'load': node type "
        "MEM_LOAD_NODE; pipesim runs COMP_NODE, COMM_SEND_NODE and COMM_RECV_NODE\n")


def test_hand_made_names_in_torch_notation(tmp_path):
    """An ET without pipesim's attributes: names like 0F0 and duration_micros are enough."""
    P = 2
    for r in range(P):
        with open(tmp_path / f"hand.{r}.et", "wb") as fh:
            protolib.encodeMessage(fh, pb.GlobalMetadata(version="1.0.0"))
            ids = iter(range(100))
            prev = None
            for step in (["0F0", "SEND", "0B0"] if r == 0 else ["RECV", "1F0", "1B0"]):
                if step in ("SEND", "RECV"):
                    n = pb.Node(id=next(ids), name=step, type=pb.COMM_SEND_NODE if step == "SEND"
                                else pb.COMM_RECV_NODE)
                    n.attr.extend([pb.AttributeProto(name="comm_src", int32_val=0),
                                   pb.AttributeProto(name="comm_dst", int32_val=1),
                                   pb.AttributeProto(name="comm_size", int64_val=MIB),
                                   pb.AttributeProto(name="comm_tag", int32_val=7)])
                else:
                    n = pb.Node(id=next(ids), name=step, type=pb.COMP_NODE,
                                duration_micros=1000 if "F" in step else 2000)
                    if prev is not None:
                        n.ctrl_deps.append(prev)
                    prev = n.id
                protolib.encodeMessage(fh, n)
    imported = read_chakra(str(tmp_path / "hand"))
    assert imported.schedule.as_strings() == [["0F0", "0B0"], ["1F0", "1B0"]]
    assert imported.workload.header.pp_comm == MIB
    assert [(x.fwd_compute, x.ig_compute) for x in imported.workload.layers] == \
        [(1_000_000, 2_000_000)] * 2


def test_without_mlc_chakra_one_line(tmp_path, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "chakra", None)
    monkeypatch.setitem(sys.modules, "chakra.schema.protobuf", None)
    assert main(["run", "workloads/doc000-1f1b-test.txt", "--chakra", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("pipesim: error: --chakra: needs the "
                                                   "mlc-chakra package")
    assert 'pip install "pipesim[chakra]"' in err
    assert not list(tmp_path.iterdir())     # refused before the run, nothing written


# -- the bytes written: a golden per run, taken before the export was made fast (columns read
# in place, nodes encoded from cached pieces); any change to what is written shows here
def _golden_workload(P, M, dp_bytes=0, gpus=None, pp_comm=MIB, uneven=True):
    from simulator.workload.model import Comm, CommGroup, CommType

    kw = {"wg_comm": Comm(CommType.ALLREDUCE, CommGroup.DP, dp_bytes, f"ALLREDUCE {dp_bytes}")} \
        if dp_bytes else {}
    # F, I, W of 1, 2 and 1 ms give or take a few ns: durations that are not whole microseconds
    wl = uniform_workload(P * (2 if uneven else 1), 1_000_000, 1_999_999, 1_000_007, pp=P,
                          ga=M, pp_comm=pp_comm, all_gpus=gpus, **kw)
    if uneven:
        wl = wl._replace(layers=tuple(
            layer._replace(fwd_compute=1_000_000 * (1 + i % 3) + 333)
            for i, layer in enumerate(wl.layers)))
    return wl


GOLDEN = {   # run: (digest of every file written, (compute, send, recv, collective, rounded))
    "1f1b": ("07de089f1228848057367c504117545e", (64, 48, 48, 0, 64)),
    "gpipe-free": ("799b8fedae24f076c08ce8997b5187d8", (30, 20, 20, 0, 15)),
    "interleaved-2it": ("06c756c1060fea5e56b589b66b366a79", (256, 224, 224, 0, 256)),
    "zb-v": ("cb94c0ec4cf65d9f1b01e9d6026c0ce6", (192, 96, 96, 0, 192)),
    "dualpipe": ("b888060f9a72ec2425f5220fee6fd618", (74, 48, 48, 0, 74)),
    "1f1b-batched": ("9414b0bcf1582a3909c3a51cebce37e2", (64, 48, 48, 0, 64)),
    "1f1b-dp": ("0ee02580dc0b690ffd5b513f56a2cb94", (64, 48, 48, 16, 64)),
}
GOLDEN_RUNS = {
    "1f1b": lambda: simulate(_golden_workload(4, 8), "1f1b", pp=4, microbatches=8),
    "gpipe-free": lambda: simulate(_golden_workload(3, 5, pp_comm=0, uneven=False), "gpipe",
                                   pp=3, microbatches=5),
    "interleaved-2it": lambda: simulate(_golden_workload(4, 8), "interleaved-1f1b", pp=4,
                                        microbatches=8, vpp=2, iterations=2),
    "zb-v": lambda: simulate(_golden_workload(4, 8), "zb-v", pp=4, microbatches=8),
    "dualpipe": lambda: simulate(_golden_workload(4, 8), "dualpipe", pp=4, microbatches=8),
    # batched point-to-point keeps transfers as tuples, not columns: the other reading path
    "1f1b-batched": lambda: simulate(_golden_workload(4, 8), "1f1b", pp=4, microbatches=8,
                                     p2p="batched"),
    "1f1b-dp": lambda: simulate(_golden_workload(4, 4, dp_bytes=64 * MIB, gpus=8), "1f1b", pp=4,
                                microbatches=4, iterations=2),
}


@pytest.mark.parametrize("run", sorted(GOLDEN))
def test_same_bytes_as_the_golden(tmp_path, run):
    import hashlib

    written = write_chakra(GOLDEN_RUNS[run](), tmp_path)
    files = {}
    for f in sorted(tmp_path.iterdir()):
        data = f.read_bytes()
        if f.name == "README.md":
            data = data.replace(str(tmp_path.resolve()).encode(), b"DIR")
        files[f.name] = hashlib.sha256(data).hexdigest()
    digest = hashlib.sha256("".join(f"{n}:{files[n]}\n" for n in sorted(files)).encode())
    counts = (written.compute_nodes, written.send_nodes, written.recv_nodes,
              written.collective_nodes, written.rounded)
    assert (digest.hexdigest()[:32], counts) == GOLDEN[run]


# -- --chakra-collectives nodes: every NPU of the configuration, DP collectives as COMM_COLL_NODEs
def test_collectives_as_comm_coll_nodes_on_every_npu(tmp_path):
    import json

    result = GOLDEN_RUNS["1f1b-dp"]()            # P = 4, 8 GPUs: 2 replicas, 2 iterations
    nodes_dir, durations_dir = tmp_path / "nodes", tmp_path / "durations"
    written = write_chakra(result, nodes_dir, collectives="nodes")
    write_chakra(result, durations_dir)
    assert (written.ranks, written.compute_nodes, written.send_nodes, written.recv_nodes,
            written.collective_nodes) == (8, 128, 96, 96, 32)
    assert sorted(p.name for p in nodes_dir.glob("et.*.et")) == [f"et.{i}.et" for i in range(8)]
    assert json.loads((nodes_dir / "comm_group.json").read_text()) == {
        "1": [0, 4], "2": [1, 5], "3": [2, 6], "4": [3, 7]}
    sends, recvs, colls = set(), set(), []
    for npu in range(8):
        rank, replica = npu % 4, npu // 4
        meta, nodes = _read(nodes_dir / f"et.{npu}.et")
        assert {a.name: a.int64_val for a in meta.attr
                if a.name in ("pipesim.rank", "pipesim.replica")} == \
            {"pipesim.rank": rank, "pipesim.replica": replica}
        _, base = _read(durations_dir / f"et.{rank}.et")
        assert len(nodes) == len(base)
        for n, b in zip(nodes, base):    # the pipeline rank's nodes, on the replica's NPUs
            a, ab = _attrs(n), _attrs(b)
            assert (n.id, n.name, list(n.ctrl_deps), list(n.data_deps)) == \
                (b.id, b.name, list(b.ctrl_deps), list(b.data_deps))
            if ab.get("pipesim.collective") == "dp":
                assert n.type == pb.COMM_COLL_NODE and n.duration_micros == 0
                assert (a["comm_type"], a["comm_size"], a["pg_name"], a["is_cpu_op"]) == \
                    (pb.ALL_REDUCE, 64 * MIB, str(rank + 1), False)   # ASTRA-sim: not on CPU
                assert a["pipesim.duration_ns"] == ab["pipesim.duration_ns"]
                colls.append((npu, a["pipesim.iteration"] if "pipesim.iteration" in a
                              else None, a["pipesim.layer"]))
                continue
            assert n.type == b.type and n.duration_micros == b.duration_micros
            if n.type in (pb.COMM_SEND_NODE, pb.COMM_RECV_NODE):
                assert (a["comm_src"], a["comm_dst"]) == \
                    (ab["comm_src"] + 4 * replica, ab["comm_dst"] + 4 * replica)
                key = (a["comm_tag"], a["comm_src"], a["comm_dst"], a["comm_size"])
                (sends if n.type == pb.COMM_SEND_NODE else recvs).add(key)
                assert {a["comm_src"], a["comm_dst"]} <= set(range(4 * replica, 4 * replica + 4))
    assert len(sends) == 96 and sends == recvs           # every send matched on its replica
    assert len(colls) == 32
    net = (nodes_dir / "network.yml").read_text()
    assert "npus_count: [ 8 ]" in net
    readme = (nodes_dir / "README.md").read_text()
    assert f"--comm-group-configuration={nodes_dir.resolve()}/comm_group.json" in readme
    assert "NPU d x 4 + r runs pipeline rank r of replica d (2 replicas" in readme
    assert "`COMM_COLL_NODE`" in readme
    # the default writes the pipeline's ranks and says how it wrote the collectives
    assert not (durations_dir / "comm_group.json").exists()
    assert "comm-group-configuration" not in (durations_dir / "README.md").read_text()
    assert "written as nodes of the duration pipesim priced" in \
        (durations_dir / "README.md").read_text()


def test_collectives_nodes_without_dp_writes_the_pipeline(tmp_path):
    """One replica and no DP collective: the pipeline's ranks, the same nodes as the default."""
    result = GOLDEN_RUNS["1f1b"]()
    written = write_chakra(result, tmp_path / "n", collectives="nodes")
    write_chakra(result, tmp_path / "d")
    assert (written.ranks, written.collective_nodes) == (4, 0)
    for r in range(4):
        assert _read(tmp_path / "n" / f"et.{r}.et")[1] == _read(tmp_path / "d" / f"et.{r}.et")[1]


def test_collectives_mode_refused_in_one_line(tmp_path):
    from simulator.errors import ConfigError

    with pytest.raises(ConfigError) as err:
        write_chakra(GOLDEN_RUNS["1f1b"](), tmp_path, collectives="coll")
    assert str(err.value) == ("--chakra-collectives: 'coll'; expected one of durations, "
                              "nodes")


def test_cli_writes_collective_nodes_on_every_npu(tmp_path, capsys):
    out = tmp_path / "et"
    gpt = str(Path(__file__).resolve().parents[2] / "workloads" / "gpt-24l.txt")
    assert main(["run", gpt, "--gpus", "16", "-m", "4", "--chakra", str(out),
                 "--chakra-collectives", "nodes", "--json", str(tmp_path / "r.json")]) == 0
    assert capsys.readouterr().out.splitlines()[0] == (
        f"chakra: 8 ETs in {out} (64 compute, 48 send, 48 receive, 100 collective nodes)")
    assert json.loads((out / "comm_group.json").read_text()) == {
        "1": [0, 4], "2": [1, 5], "3": [2, 6], "4": [3, 7]}
    assert "--comm-group-configuration=" in (out / "README.md").read_text()


def test_import_refuses_comm_coll_nodes_in_one_line(tmp_path, capsys):
    result = simulate(_golden_workload(4, 4, dp_bytes=64 * MIB, gpus=8), "1f1b", pp=4,
                      microbatches=4)
    write_chakra(result, tmp_path, collectives="nodes")
    assert main(["run", "--chakra-in", str(tmp_path / "et")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("pipesim: error: --chakra-in: ")
    assert "COMM_COLL_NODE" in err


def test_every_replica_s_nodes_are_counted_before_any_is_written(tmp_path, capsys):
    """Found by the fuzz: --gpus 2^40 with --chakra-collectives nodes wrote one file per NPU
    of 2^37 replicas without end; refused before the folder is made."""
    out = tmp_path / "et"
    gpt = str(Path(__file__).resolve().parents[2] / "workloads" / "gpt-24l.txt")
    assert main(["run", gpt, "--gpus", str(2**40), "--chakra", str(out),
                 "--chakra-collectives", "nodes"]) == 2
    assert capsys.readouterr().err.splitlines() == [
        "pipesim: error: --chakra-collectives nodes: writes the run's 128 actions on each of "
        "its 137,438,953,472 data-parallel replicas (17,592,186,044,416 nodes), above the "
        "limit of 1,000,000 (about 10 s to write); use --chakra-collectives durations (one "
        "replica, collectives as durations) or fewer GPUs"]
    assert not out.exists()
