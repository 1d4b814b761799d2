"""The parser on the real files in ../shared/workloads-real, on the hand-made
tests/data/tiny_model.txt, and on each grammar feature."""

from __future__ import annotations

import pytest

from simulator.errors import ConfigError, WorkloadError
from simulator.workload import (Comm, CommGroup, CommType, Header, Layer, load_workload,
                                parse_workload_text)
from simulator.workload import parser
from simulator.workload.parser import parse_workload_bytes

AR, A2A, AG, RS, NONE = (CommType.ALLREDUCE, CommType.ALLTOALL, CommType.ALLGATHER,
                         CommType.REDUCESCATTER, CommType.NONE)
TP, DP, EP, DP_EP = CommGroup.TP, CommGroup.DP, CommGroup.EP, CommGroup.DP_EP

MICRO = "microAllReduce.txt"
TRANSFORMER = "Transformer_HybridParallel_Fwd_In_Bckwd.txt"
G13B = "G13B-M1-C01_GPT13B_megatron_tp8_pp1_mbs1_A100.txt"
L65B = "L65B-M1-C05_Llama65B_megatron_tp8_pp1_mbs1_A100.txt"
ANALYTICAL = "workload_analytical.txt"
DEEPSEEK = "DeepSeek-16B-tp2-pp2-dp2-ep4-g32-mpdeptip.txt"
GPT13B = "workload_gpt13b_128g.txt"
GPT7B = "workload_gpt7b_64g.txt"

# Rows of a 12-column file for inline tests: name, fwd, ig, wg, update.
ROW = "{n}\t-1\t{f}\tALLREDUCE\t1024\t{i}\tNONE\t0\t{w}\tALLREDUCE\t2048\t{u}\n"


def rows(count: int) -> str:
    return "".join(ROW.format(n=f"l{k}", f=10 + k, i=20 + k, w=30 + k, u=k) for k in range(count))


@pytest.fixture
def no_aicb(monkeypatch):
    """Keep the rows as parsed: the AICB layout detection (``aicb.detect_layout``) hands the
    workload back unchanged."""
    monkeypatch.setattr(parser, "detect_layout", lambda workload: workload)


# --- real files kept in the repo -------------------------------------------------------------

def test_micro_allreduce_space_separated_no_final_newline(real_dir, no_aicb):
    path = real_dir / MICRO
    assert not path.read_bytes().endswith(b"\n")
    w = load_workload(path)
    assert w.header == Header(policy="HYBRID_TRANSFORMER_FWD_IN_BCKWD", tp=8, ep=1, pp=1, vpp=8,
                              ga=1, all_gpus=8, pp_comm=0, defaults_used=("pp_comm",))
    assert w.warnings == (f"{path}:1: header has no pp_comm:; using pp_comm=0",)
    assert w.layout == "model" and w.path == str(path)
    assert w.layers == (
        Layer(index=0, name="embedding_layer", fwd_compute=556000,
              fwd_comm=Comm(AR, TP, 16777216, "ALLREDUCE"), ig_compute=1,
              ig_comm=Comm(NONE, TP, 0, "NONE"), wg_compute=1, wg_comm=Comm(NONE, DP, 0, "NONE"),
              update_time=1, line=3),
        Layer(index=1, name="embedding_layer", fwd_compute=556000,
              fwd_comm=Comm(AR, TP, 67108864, "ALLREDUCE"), ig_compute=1,
              ig_comm=Comm(NONE, TP, 0, "NONE"), wg_compute=1, wg_comm=Comm(NONE, DP, 0, "NONE"),
              update_time=1, line=4),
    )


def test_transformer_checkpoint_lists_read_in_full(real_dir):
    path = real_dir / TRANSFORMER
    w = load_workload(path, layout="model")
    h = w.header
    assert (h.policy, h.tp, h.pp, h.vpp, h.ga, h.ep, h.all_gpus, h.pp_comm) == \
        ("HYBRID_TRANSFORMER_FWD_IN_BCKWD", 4, 1, 1, 1, 1, 4, 0)
    assert h.checkpoints == (2, 11)
    assert h.checkpoint_initiates == (19, 10)
    assert h.defaults_used == ("ep", "pp", "vpp", "ga", "all_gpus", "pp_comm")
    assert len(w.layers) == 21
    first, last = w.layers[0], w.layers[-1]
    assert first == Layer(index=0, name="TokenEmbedding", fwd_compute=100000,
                          fwd_comm=Comm(AR, TP, 69730304, "ALLREDUCE"), ig_compute=100000,
                          ig_comm=Comm(NONE, TP, 0, "NONE"), wg_compute=100000,
                          wg_comm=Comm(AR, DP, 306432000, "ALLREDUCE"), update_time=10, line=3)
    assert (last.index, last.name, last.line, last.fwd_compute, last.fwd_comm.bytes) == \
        (20, "projection", 23, 41838182, 49152)
    # row 1 ends with a space before the newline; row 2 starts "Q1\t\t\t\t-1"
    assert (w.layers[1].name, w.layers[1].update_time, w.layers[2].name) == \
        ("EmbeddingSparse", 10, "Q1")


def test_g13b_legacy_header_defaults_and_broadcast(real_dir):
    path = real_dir / G13B
    w = load_workload(path, layout="model")
    assert w.header == Header(policy="HYBRID_TRANSFORMER_FWD_IN_BCKWD", tp=8, all_gpus=8,
                              defaults_used=("ep", "pp", "vpp", "ga", "all_gpus", "pp_comm"))
    assert w.warnings == (
        f"{path}:1: header has no ep:, pp:, vpp:, ga:, all_gpus:, pp_comm:; using ep=1, pp=1, "
        f"vpp=1, ga=1, all_gpus=8 (tp x pp), pp_comm=0",)
    assert len(w.layers) == 92
    norm = w.layers[0]
    assert norm.name == "norm" and norm.fwd_comm == Comm(NONE, TP, 16384, "BROADCAST")
    assert not norm.fwd_comm.active
    grad_norm = w.layers[1]
    assert grad_norm.fwd_comm == Comm(AG, TP, 3248619520, "ALLGATHER")
    assert grad_norm.wg_comm == Comm(RS, DP, 6497239040, "REDUCESCATTER")
    assert (grad_norm.fwd_compute, grad_norm.ig_compute) == (14565000, 13391000)


def test_l65b_declares_839_rows_but_has_33(real_dir):
    path = real_dir / L65B
    with pytest.raises(WorkloadError) as err:
        load_workload(path)
    assert str(err.value) == (f"{path}:2:1: layer count: expected as many layer rows as declared "
                              f"(line 2 declares 839 layer rows, found 33)")
    assert (err.value.line, err.value.column, err.value.field) == (2, 1, "layer count")


# --- every real file at the top of ../shared/workloads-real (the subfolders are run by
# tests/test_shared_real_files.py) ------------------------------------------------------------

REAL_EXPECTED = {
    # name: (tp, ep, pp, vpp, ga, all_gpus, pp_comm, rows, defaults_used)
    ANALYTICAL: (2, 16, 12, 8, 24, 9216, 50331648, 1789, ()),
    DEEPSEEK: (2, 4, 2, 1, 8, 32, 8388608, 2581, ()),
    GPT13B: (8, 1, 2, 20, 16, 128, 2621440, 1338, ()),
    GPT7B: (8, 1, 1, 32, 8, 64, 0, 1058, ()),
    MICRO: (8, 1, 1, 8, 1, 8, 0, 2, ("pp_comm",)),
    TRANSFORMER: (4, 1, 1, 1, 1, 4, 0, 21, ("ep", "pp", "vpp", "ga", "all_gpus", "pp_comm")),
    G13B: (8, 1, 1, 1, 1, 8, 0, 92, ("ep", "pp", "vpp", "ga", "all_gpus", "pp_comm")),
}


def test_every_real_file_is_covered(real_dir):
    assert sorted(p.name for p in real_dir.glob("*.txt")) == sorted([*REAL_EXPECTED, L65B])


@pytest.mark.parametrize("name", sorted(REAL_EXPECTED))
def test_real_file_header_and_rows(real_dir, name):
    w = load_workload(real_dir / name, layout="model")
    h = w.header
    tp, ep, pp, vpp, ga, all_gpus, pp_comm, n, defaults = REAL_EXPECTED[name]
    assert (h.tp, h.ep, h.pp, h.vpp, h.ga, h.all_gpus, h.pp_comm) == \
        (tp, ep, pp, vpp, ga, all_gpus, pp_comm)
    assert h.policy == "HYBRID_TRANSFORMER_FWD_IN_BCKWD"
    assert type(h.pp_comm) is int
    assert h.defaults_used == defaults and h.unknown_keys == ()
    assert len(w.layers) == n
    assert [layer.index for layer in w.layers] == list(range(n))
    assert w.layers[0].line == 3


def test_deepseek_float_pp_comm_and_no_final_newline(real_dir):
    path = real_dir / DEEPSEEK
    assert "pp_comm: 8388608.0" in path.read_text().splitlines()[0]
    assert not path.read_bytes().endswith(b"\n")
    w = load_workload(path, layout="model")
    assert w.header.pp_comm == 8388608 and w.warnings == ()
    assert w.layers[-1].name == "optimizer4" and w.layers[-1].line == 2583


def test_analytical_pp_comm_without_colon(real_dir):
    w = load_workload(real_dir / ANALYTICAL, layout="model")
    assert w.header.pp_comm == 50331648 and w.warnings == ()


def test_gpt13b_dp_ep_suffix(real_dir):
    w = load_workload(real_dir / GPT13B, layout="model")
    moe = w.layers[1]
    assert moe.name == "moe_grad_norm1"
    assert moe.wg_comm == Comm(AG, DP_EP, 0, "ALLGATHER_DP_EP") and not moe.wg_comm.active
    emb = w.layers[3]   # "embedding_layer -1 1 NONE 20971520": bytes kept, no collective
    assert emb.fwd_comm == Comm(NONE, TP, 20971520, "NONE") and not emb.fwd_comm.active


# --- the hand-made model-layout example ------------------------------------------------------

def test_tiny_model(data_dir):
    path = data_dir / "tiny_model.txt"
    w = load_workload(path, layout="model")
    assert w.header == Header(policy="HYBRID_TRANSFORMER_FWD_IN_BCKWD", tp=2, ep=2, pp=2, vpp=1,
                              ga=4, all_gpus=8, pp_comm=4096, checkpoints=(0,),
                              checkpoint_initiates=(3,))
    assert w.warnings == ()
    assert [layer.name for layer in w.layers] == ["embedding", "attention_0", "mlp_moe_0",
                                                  "attention_1", "mlp_moe_1", "head"]
    assert [(l.fwd_compute, l.ig_compute, l.wg_compute, l.update_time) for l in w.layers] == [
        (1000, 1000, 1000, 10), (3000, 3000, 2000, 10), (4000, 4000, 3000, 10),
        (3000, 3000, 2000, 10), (4000, 4000, 3000, 10), (2000, 2000, 1000, 10)]
    moe, head = w.layers[2], w.layers[5]
    assert moe.fwd_comm == Comm(A2A, EP, 32768, "ALLTOALL_EP")
    assert moe.ig_comm == Comm(A2A, EP, 32768, "ALLTOALL_EP")
    assert moe.wg_comm == Comm(AR, DP_EP, 65536, "ALLREDUCE_DP_EP")
    assert head.fwd_comm == Comm(AG, TP, 8192, "ALLGATHER")
    assert head.ig_comm == Comm(RS, TP, 8192, "REDUCESCATTER")
    assert head.wg_comm == Comm(NONE, DP, 0, "NONE")
    assert [l.line for l in w.layers] == [3, 4, 5, 6, 7, 8]


# --- grammar features -------------------------------------------------------------------------

HEADER = ("HYBRID_TRANSFORMER_FWD_IN_BCKWD model_parallel_NPU_group: 2 ep: 1 pp: 2 vpp: 1 ga: 4 "
          "all_gpus: 8 checkpoints: 0 checkpoint_initiates: 0 pp_comm: 1024")


def test_header_keys_in_any_order_and_any_whitespace():
    shuffled = ("HYBRID_TRANSFORMER_FWD_IN_BCKWD\t\tpp_comm 1024   ga:\t4 checkpoint_initiates: 0 "
                "all_gpus: 8.0 checkpoints:  0 vpp: 1 pp: 2 ep: 1 model_parallel_NPU_group: +2\t")
    a = parse_workload_text(HEADER + "\n1\n" + rows(1))
    b = parse_workload_text(shuffled + "\n1\n" + rows(1))
    assert a.header == b.header == Header(policy="HYBRID_TRANSFORMER_FWD_IN_BCKWD", tp=2, ep=1,
                                          pp=2, vpp=1, ga=4, all_gpus=8, pp_comm=1024)
    assert a.warnings == b.warnings == ()


def test_integral_floats_accepted_everywhere():
    text = HEADER.replace("ga: 4", "ga: 4.0") + "\n2.0\n" + \
        "x\t-1.0\t10.0\tALLREDUCE\t1024.\t5\tNONE\t0\t7\tNONE\t0\t3.00\n" + rows(1)
    w = parse_workload_text(text)
    assert w.header.ga == 4
    assert (w.layers[0].fwd_compute, w.layers[0].fwd_comm.bytes, w.layers[0].update_time,
            w.layers[0].reserved) == (10, 1024, 3, "-1.0")


def test_crlf_blank_lines_and_trailing_whitespace():
    body = rows(3).splitlines()
    text = HEADER + "\r\n3\t\t\r\n\r\n" + body[0] + "\r\n   \r\n" + body[1] + "\r\n" + body[2] + \
        "\r\n\n\n  \n"
    w = parse_workload_text(text)
    assert [(l.index, l.name, l.line) for l in w.layers] == [(0, "l0", 4), (1, "l1", 6),
                                                             (2, "l2", 7)]


def test_no_final_newline_and_utf8_bom():
    w = parse_workload_bytes(("\ufeff" + HEADER + "\n2\n" + rows(2).rstrip("\n")).encode())
    assert [l.name for l in w.layers] == ["l0", "l1"]
    assert w.layers[1] == Layer(index=1, name="l1", fwd_compute=11,
                                fwd_comm=Comm(AR, TP, 1024, "ALLREDUCE"), ig_compute=21,
                                ig_comm=Comm(NONE, TP, 0, "NONE"), wg_compute=31,
                                wg_comm=Comm(AR, DP, 2048, "ALLREDUCE"), update_time=1, line=4)


@pytest.mark.parametrize("token, fwd, wg", [
    ("ALLREDUCE", (AR, TP), (AR, DP)),
    ("ALLREDUCE_EP", (AR, EP), (AR, EP)),
    ("ALLREDUCE_DP_EP", (AR, DP_EP), (AR, DP_EP)),
    ("ALLTOALL", (A2A, TP), (A2A, DP)),
    ("ALLTOALL_EP", (A2A, EP), (A2A, EP)),
    ("ALLGATHER", (AG, TP), (AG, DP)),
    ("ALLGATHER_DP_EP", (AG, DP_EP), (AG, DP_EP)),
    ("REDUCESCATTER", (RS, TP), (RS, DP)),
    ("REDUCESCATTER_EP", (RS, EP), (RS, EP)),
    ("NONE", (NONE, TP), (NONE, DP)),
    ("BROADCAST", (NONE, TP), (NONE, DP)),
    ("allreduce", (NONE, TP), (NONE, DP)),   # SimAI's match is case-sensitive
    ("AllReduce_EP", (NONE, TP), (NONE, DP)),
    ("P2P", (NONE, TP), (NONE, DP)),
])
def test_comm_type_and_group(token, fwd, wg):
    row = f"x\t-1\t1\t{token}\t64\t1\t{token}\t32\t1\t{token}\t16\t0\n"
    layer = parse_workload_text(HEADER + "\n1\n" + row).layers[0]
    assert layer.fwd_comm == Comm(*fwd, 64, token)
    assert layer.ig_comm == Comm(*fwd, 32, token)
    assert layer.wg_comm == Comm(*wg, 16, token)
    assert layer.fwd_comm.active == (fwd[0] is not NONE)


def test_hybrid_customized_thirteenth_column_is_the_layer_policy():
    text = ("HYBRID_CUSTOMIZED\t\t\n2\t\t\n"
            "mlp0\t-1\t32291\tALLGATHER\t37632\t32291\tREDUCESCATTER\t37632\t32291\t"
            "ALLREDUCE\t37632\t3229 HYBRID_DATA_MODEL\n"
            "mlp1\t-1\t7488\tNONE\t\t0\t\t7488\tNONE\t0\t7488\tALLREDUCE\t65536\t749\t DATA \n")
    w = parse_workload_text(text)
    assert [(l.name, l.policy, l.update_time) for l in w.layers] == \
        [("mlp0", "HYBRID_DATA_MODEL", 3229), ("mlp1", "DATA", 749)]
    assert w.header.defaults_used == ("tp", "ep", "pp", "vpp", "ga", "all_gpus", "pp_comm")
    assert parse_workload_text(HEADER + "\n1\n" + rows(1)).layers[0].policy is None


def test_hybrid_dlrm_bare_integer_and_key_form():
    body = "\n3\n" + rows(3)
    bare = parse_workload_text("HYBRID_DLRM\t2\t\t\t" + body)
    keyed = parse_workload_text("HYBRID_DLRM_ENHANCED DLRM_LAST_BOTTOM_LAYER: 1 pp: 1" + body)
    assert bare.header.dlrm_last_bottom_layer == 2
    assert keyed.header.dlrm_last_bottom_layer == 1
    assert keyed.header.unknown_keys == ()
    assert parse_workload_text(HEADER + body).header.dlrm_last_bottom_layer is None


def test_unknown_keys_kept_with_one_warning():
    text = (HEADER.replace(" ep: 1", "") + " mode: train expert_parallel_npu_group: 4 "
            "DLRM_LAST_BOTTOM_LAYER: 0 empty:\n1\n" + rows(1))
    w = parse_workload_text(text, "u.txt")
    assert w.header.unknown_keys == (("DLRM_LAST_BOTTOM_LAYER", "0"), ("empty", ""))
    # AICB's keys are read: mode: as written, expert_parallel_npu_group: as ep:
    assert (w.header.mode, w.header.ep) == ("train", 4)
    assert w.warnings == ("u.txt:1: unknown header keys kept but not used: "
                          "DLRM_LAST_BOTTOM_LAYER: 0, empty:",)


def test_expert_parallel_npu_group_is_ep_and_given_once():
    with pytest.raises(WorkloadError) as err:
        parse_workload_text(HEADER + " expert_parallel_npu_group: 4\n1\n" + rows(1), "e.txt")
    assert str(err.value) == ("e.txt:1:151: expert_parallel_npu_group: expected each key once "
                              "(already given at column 61), found 'expert_parallel_npu_group:'")


def test_all_defaults_listed_in_one_warning():
    w = parse_workload_text("HYBRID_TRANSFORMER_FWD_IN_BCKWD\n1\n" + rows(1), "d.txt")
    assert w.header == Header(policy="HYBRID_TRANSFORMER_FWD_IN_BCKWD", defaults_used=(
        "tp", "ep", "pp", "vpp", "ga", "all_gpus", "pp_comm", "checkpoints",
        "checkpoint_initiates"))
    assert w.warnings == (
        "d.txt:1: header has no model_parallel_NPU_group:, ep:, pp:, vpp:, ga:, all_gpus:, "
        "pp_comm:, checkpoints:, checkpoint_initiates:; using tp=1, ep=1, pp=1, vpp=1, ga=1, "
        "all_gpus=1 (tp x pp), pp_comm=0, checkpoints=[], checkpoint_initiates=[]",)


def test_default_all_gpus_is_tp_times_pp():
    w = parse_workload_text("HYBRID_TRANSFORMER model_parallel_NPU_group: 4 pp: 3 pp_comm 8\n1\n"
                            + rows(1), "g.txt")
    assert (w.header.all_gpus, w.header.defaults_used) == (12, ("ep", "vpp", "ga", "all_gpus"))
    assert w.warnings == ("g.txt:1: header has no ep:, vpp:, ga:, all_gpus:; using ep=1, vpp=1, "
                          "ga=1, all_gpus=12 (tp x pp)",)


def test_all_gpus_not_multiple_of_tp_pp_warns():
    w = parse_workload_text(HEADER.replace("all_gpus: 8", "all_gpus: 6") + "\n1\n" + rows(1),
                            "m.txt")
    assert w.header.all_gpus == 6
    assert w.warnings == ("m.txt:1: all_gpus 6 is not a multiple of tp x pp = 2 x 2",)


def test_pp_above_one_with_zero_pp_comm_warns():
    w = parse_workload_text(HEADER.replace("pp_comm: 1024", "pp_comm: 0") + "\n1\n" + rows(1),
                            "z.txt")
    assert w.warnings == ("z.txt:1: pp is 2 but pp_comm is 0, so activations between stages "
                          "cost nothing to send",)


def test_checkpoint_layers_may_be_any_row():
    text = HEADER.replace("checkpoints: 0 checkpoint_initiates: 0",
                          "checkpoints: 3 0 4 2 checkpoint_initiates: 2 4 4") + "\n5\n" + rows(5)
    h = parse_workload_text(text).header
    assert (h.checkpoints, h.checkpoint_initiates) == ((0, 4, 2), (4, 4))


def test_reserved_column_kept_as_written():
    text = HEADER + "\n1\nx\t7\t1\tNONE\t0\t1\tNONE\t0\t1\tNONE\t0\t0\n"
    assert parse_workload_text(text).layers[0].reserved == "7"


def test_same_comm_token_with_different_sizes_and_slots():
    text = (HEADER + "\n3\n" + rows(2)
            + "y\t-1\t1\tALLREDUCE\t4096\t1\tALLREDUCE\t1024\t1\tNONE\t0\t0\n")
    w = parse_workload_text(text)
    assert [l.fwd_comm for l in w.layers] == [Comm(AR, TP, 1024, "ALLREDUCE")] * 2 + \
        [Comm(AR, TP, 4096, "ALLREDUCE")]
    assert w.layers[2].ig_comm == Comm(AR, TP, 1024, "ALLREDUCE")
    assert w.layers[0].wg_comm == Comm(AR, DP, 2048, "ALLREDUCE")


# --- load_workload: files and layouts --------------------------------------------------------

def test_layout_model_and_auto_keep_a_whole_model_and_aicb_refuses_it(data_dir):
    path = data_dir / "tiny_model.txt"
    assert load_workload(path).layout == "model"
    assert load_workload(path, "model").layout == "model"
    with pytest.raises(WorkloadError) as err:
        load_workload(str(path), "aicb")
    assert str(err.value) == (
        f"{path}: layout: expected the AICB stage layout: iteration rows, then 4 (ga) repeats "
        "of one microbatch's rows, then iteration rows, found 'no block of rows repeated 4 "
        "times'")


def test_layout_hook_called_for_auto_and_aicb_only(data_dir, monkeypatch):
    seen = []

    def detect_layout(workload):
        seen.append(workload.layout)
        return "result of hook"

    monkeypatch.setattr(parser, "detect_layout", detect_layout)
    path = data_dir / "tiny_model.txt"
    assert load_workload(path) == "result of hook"
    assert load_workload(path, "aicb") == "result of hook"
    assert load_workload(path, "model").layout == "model"
    assert seen == ["model", "aicb"]


def test_a_layout_stated_in_the_header_is_never_decided_from_the_rows(data_dir, tmp_path,
                                                                       monkeypatch):
    seen = []
    monkeypatch.setattr(parser, "detect_layout", lambda w: seen.append(w.layout) or w)
    text = (data_dir / "tiny_model.txt").read_text()
    stated = tmp_path / "stated.txt"
    stated.write_text(text.replace("\n", " layout: model\n", 1))
    w = load_workload(stated)
    assert (w.layout, w.header.layout, w.layout_detected, seen) == ("model", "model", "", [])
    stated.write_text(text.replace("\n", " layout: aicb\n", 1))
    load_workload(stated)
    assert seen == ["aicb"]           # forced, as --layout aicb is
    assert load_workload(stated, "model").layout == "model"   # the option wins
    stated.write_text(text.replace("\n", " layout: stage\n", 1))
    with pytest.raises(WorkloadError) as err:
        load_workload(stated)
    assert str(err.value).endswith("layout: expected model or aicb after 'layout:', found "
                                   "'stage'")


def test_bad_layout_is_a_config_error(data_dir):
    with pytest.raises(ConfigError) as err:
        load_workload(data_dir / "tiny_model.txt", "stage")
    assert str(err.value) == "--layout: expected one of auto, model, aicb, found 'stage'"
