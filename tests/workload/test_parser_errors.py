"""Every malformed input gives one exact, one-line WorkloadError naming path:line:column."""

from __future__ import annotations

import pytest

from simulator.errors import PipesimError, WorkloadError
from simulator.workload import POLICIES, load_workload, parse_workload_text
from simulator.workload.parser import parse_workload_bytes

HEADER = ("HYBRID_TRANSFORMER_FWD_IN_BCKWD model_parallel_NPU_group: 2 ep: 1 pp: 2 vpp: 1 ga: 4 "
          "all_gpus: 8 checkpoints: 0 checkpoint_initiates: 0 pp_comm: 1024")
GOOD = "l0\t-1\t10\tALLREDUCE\t100\t20\tNONE\t0\t30\tREDUCESCATTER\t400\t5"
COLUMNS = ("name reserved fwd_compute fwd_comm_type fwd_comm_bytes ig_compute ig_comm_type "
           "ig_comm_bytes wg_compute wg_comm_type wg_comm_bytes update_time")
ALL_POLICIES = ", ".join(POLICIES)
U63 = "an integer >= 0 and < 2^63"


def one_row(row: str) -> str:
    return f"{HEADER}\n1\n{row}\n"


def cell(k: int, value: str) -> str:
    """GOOD with column k replaced."""
    parts = GOOD.split("\t")
    parts[k] = value
    return one_row("\t".join(parts))


CASES = [
    # --- whole file
    ("empty file", "", f"t:1:1: policy: expected one of {ALL_POLICIES}, found ''"),
    ("blank first line", "  \t\n1\n", f"t:1:1: policy: expected one of {ALL_POLICIES}, found ''"),
    ("only a header", HEADER + "\n",
     "t:2:1: layer count: expected the number of layer rows (an integer >= 1) on line 2, "
     "found ''"),
    ("only a header, no newline", HEADER,
     "t:2:1: layer count: expected the number of layer rows (an integer >= 1) on line 2, "
     "found ''"),
    # --- header
    ("unknown policy", "TRANSFORMER pp: 1\n1\n" + GOOD,
     f"t:1:1: policy: expected one of {ALL_POLICIES}, found 'TRANSFORMER'"),
    ("policy in lower case", "  hybrid_transformer\n1\n" + GOOD,
     f"t:1:3: policy: expected one of {ALL_POLICIES}, found 'hybrid_transformer'"),
    ("missing value at end", "HYBRID_TRANSFORMER pp:\n1\n" + GOOD,
     "t:1:23: pp: expected an integer >= 1 and < 2^63 after 'pp:', found ''"),
    ("key where a value belongs", "HYBRID_TRANSFORMER pp: ga: 2\n1\n" + GOOD,
     "t:1:24: pp: expected an integer >= 1 and < 2^63 after 'pp:', found 'ga:'"),
    ("word value", "HYBRID_TRANSFORMER ga: four\n1\n" + GOOD,
     "t:1:24: ga: expected an integer >= 1 and < 2^63 after 'ga:', found 'four'"),
    ("non-integral float", "HYBRID_TRANSFORMER model_parallel_NPU_group: 2.5\n1\n" + GOOD,
     "t:1:46: model_parallel_NPU_group: expected an integer >= 1 and < 2^63 after "
     "'model_parallel_NPU_group:', found '2.5'"),
    ("exponent", "HYBRID_TRANSFORMER pp_comm 1e6\n1\n" + GOOD,
     "t:1:28: pp_comm: expected an integer >= 0 and < 2^63 after 'pp_comm', found '1e6'"),
    ("pp zero", "HYBRID_TRANSFORMER pp: 0\n1\n" + GOOD,
     "t:1:24: pp: expected an integer >= 1 and < 2^63 after 'pp:', found '0'"),
    ("ga negative", "HYBRID_TRANSFORMER ga: -4\n1\n" + GOOD,
     "t:1:24: ga: expected an integer >= 1 and < 2^63 after 'ga:', found '-4'"),
    ("vpp zero", "HYBRID_TRANSFORMER vpp: 0\n1\n" + GOOD,
     "t:1:25: vpp: expected an integer >= 1 and < 2^63 after 'vpp:', found '0'"),
    ("ep nan", "HYBRID_TRANSFORMER ep: nan\n1\n" + GOOD,
     "t:1:24: ep: expected an integer >= 1 and < 2^63 after 'ep:', found 'nan'"),
    ("all_gpus inf", "HYBRID_TRANSFORMER all_gpus: inf\n1\n" + GOOD,
     "t:1:30: all_gpus: expected an integer >= 1 and < 2^63 after 'all_gpus:', found 'inf'"),
    ("pp_comm negative", "HYBRID_TRANSFORMER pp_comm: -1\n1\n" + GOOD,
     "t:1:29: pp_comm: expected an integer >= 0 and < 2^63 after 'pp_comm:', found '-1'"),
    ("grad bytes zero", "HYBRID_TRANSFORMER grad_bytes_per_param: 0\n1\n" + GOOD,
     "t:1:42: grad_bytes_per_param: expected an integer >= 1 and < 2^63 after "
     "'grad_bytes_per_param:', found '0'"),
    ("grad bytes dtype", "HYBRID_TRANSFORMER grad_bytes_per_param: fp32\n1\n" + GOOD,
     "t:1:42: grad_bytes_per_param: expected an integer >= 1 and < 2^63 after "
     "'grad_bytes_per_param:', found 'fp32'"),
    ("huge value", "HYBRID_TRANSFORMER all_gpus: 9223372036854775808\n1\n" + GOOD,
     "t:1:30: all_gpus: expected an integer >= 1 and < 2^63 after 'all_gpus:', "
     "found '9223372036854775808'"),
    ("underscore digits", "HYBRID_TRANSFORMER all_gpus: 1_024\n1\n" + GOOD,
     "t:1:30: all_gpus: expected an integer >= 1 and < 2^63 after 'all_gpus:', found '1_024'"),
    ("stray token", "HYBRID_TRANSFORMER pp: 2 4\n1\n" + GOOD,
     "t:1:26: header: expected a 'key:' token (model_parallel_NPU_group:, ep:, pp:, vpp:, ga:, "
     "all_gpus:, pp_comm:, checkpoints:, checkpoint_initiates:, pp_schedule:, stage_layers:, mode:, layout:, generated_defaults:, activation_bytes:, split_backward_bytes:, deferred_wgrad_bytes:, f_transient_bytes:, b_transient_bytes:, i_transient_bytes:, w_transient_bytes:, loss_keeps_bytes:, loss_f_transient_bytes:, loss_b_transient_bytes:, grad_bytes_per_param:, embedding_sync_params:, cp:, cp_kv_bytes:, cp_fwd_step_ns:, cp_bwd_step_ns:, etp:), found '4'"),
    ("key without colon", "HYBRID_TRANSFORMER ga 4\n1\n" + GOOD,
     "t:1:20: header: expected a 'key:' token (model_parallel_NPU_group:, ep:, pp:, vpp:, ga:, "
     "all_gpus:, pp_comm:, checkpoints:, checkpoint_initiates:, pp_schedule:, stage_layers:, mode:, layout:, generated_defaults:, activation_bytes:, split_backward_bytes:, deferred_wgrad_bytes:, f_transient_bytes:, b_transient_bytes:, i_transient_bytes:, w_transient_bytes:, loss_keeps_bytes:, loss_f_transient_bytes:, loss_b_transient_bytes:, grad_bytes_per_param:, embedding_sync_params:, cp:, cp_kv_bytes:, cp_fwd_step_ns:, cp_bwd_step_ns:, etp:), found 'ga'"),
    ("duplicate key", "HYBRID_TRANSFORMER pp: 2 pp: 4\n1\n" + GOOD,
     "t:1:26: pp: expected each key once (already given at column 20), found 'pp:'"),
    ("pp_comm twice, both spellings", "HYBRID_TRANSFORMER pp_comm 2 pp_comm: 4\n1\n" + GOOD,
     "t:1:30: pp_comm: expected each key once (already given at column 20), found 'pp_comm:'"),
    ("checkpoint list short",
     "HYBRID_TRANSFORMER_FWD_IN_BCKWD checkpoints: 2 0 checkpoint_initiates: 0\n1\n" + GOOD,
     "t:1:50: checkpoints: expected 2 layer numbers after 'checkpoints: 2', "
     "found 'checkpoint_initiates:'"),
    ("checkpoint list cut at end of line",
     "HYBRID_TRANSFORMER_FWD_IN_BCKWD checkpoint_initiates: 3 0\n1\n" + GOOD,
     "t:1:58: checkpoint_initiates: expected 3 layer numbers after 'checkpoint_initiates: 3', "
     "found ''"),
    ("checkpoint count missing", "HYBRID_TRANSFORMER_FWD_IN_BCKWD checkpoints:\n1\n" + GOOD,
     "t:1:45: checkpoints: expected the number of layer numbers after 'checkpoints:', found ''"),
    ("checkpoint count negative", "HYBRID_TRANSFORMER_FWD_IN_BCKWD checkpoints: -1\n1\n" + GOOD,
     "t:1:46: checkpoints: expected the number of layer numbers after 'checkpoints:', "
     "found '-1'"),
    ("checkpoint layer out of range",
     "HYBRID_TRANSFORMER_FWD_IN_BCKWD checkpoints: 1 1 checkpoint_initiates: 0\n1\n" + GOOD,
     "t:1:48: checkpoints: expected a layer number in 0..0 (0-based row index), found '1'"),
    ("initiate layer out of range",
     "HYBRID_TRANSFORMER_FWD_IN_BCKWD checkpoints: 0 checkpoint_initiates: 2 0 7\n1\n" + GOOD,
     "t:1:74: checkpoint_initiates: expected a layer number in 0..0 (0-based row index), "
     "found '7'"),
    ("DLRM without its layer", "HYBRID_DLRM\n1\n" + GOOD,
     "t:1:12: HYBRID_DLRM: expected the last bottom-MLP layer number after HYBRID_DLRM "
     "(a bare integer or 'DLRM_LAST_BOTTOM_LAYER: N'), found ''"),
    ("DLRM with a key instead", "HYBRID_DLRM_ENHANCED pp: 1\n1\n" + GOOD,
     "t:1:22: HYBRID_DLRM_ENHANCED: expected the last bottom-MLP layer number after "
     "HYBRID_DLRM_ENHANCED (a bare integer or 'DLRM_LAST_BOTTOM_LAYER: N'), found 'pp:'"),
    ("DLRM layer out of range", "HYBRID_DLRM 3\n1\n" + GOOD,
     "t:1:13: HYBRID_DLRM: expected a layer number in 0..0 (0-based row index), found '3'"),
    ("DLRM layer negative", "HYBRID_DLRM -1\n1\n" + GOOD,
     "t:1:13: HYBRID_DLRM: expected a layer number >= 0, found '-1'"),
    ("DLRM layer twice", "HYBRID_DLRM 0 DLRM_LAST_BOTTOM_LAYER: 0\n1\n" + GOOD,
     "t:1:15: DLRM_LAST_BOTTOM_LAYER: expected each key once (already given at column 13), "
     "found 'DLRM_LAST_BOTTOM_LAYER:'"),
    ("bare integer on a non-DLRM policy", "DATA 3\n1\n" + GOOD,
     "t:1:6: header: expected a 'key:' token (model_parallel_NPU_group:, ep:, pp:, vpp:, ga:, "
     "all_gpus:, pp_comm:, checkpoints:, checkpoint_initiates:, pp_schedule:, stage_layers:, mode:, layout:, generated_defaults:, activation_bytes:, split_backward_bytes:, deferred_wgrad_bytes:, f_transient_bytes:, b_transient_bytes:, i_transient_bytes:, w_transient_bytes:, loss_keeps_bytes:, loss_f_transient_bytes:, loss_b_transient_bytes:, grad_bytes_per_param:, embedding_sync_params:, cp:, cp_kv_bytes:, cp_fwd_step_ns:, cp_bwd_step_ns:, etp:), found '3'"),
    # --- line 2
    ("count is a word", HEADER + "\nsix\n" + GOOD,
     "t:2:1: layer count: expected the number of layer rows (an integer >= 1) on line 2, "
     "found 'six'"),
    ("count zero", HEADER + "\n0\n",
     "t:2:1: layer count: expected the number of layer rows (an integer >= 1) on line 2, "
     "found '0'"),
    ("count negative", HEADER + "\n\t-2\n" + GOOD,
     "t:2:2: layer count: expected the number of layer rows (an integer >= 1) on line 2, "
     "found '-2'"),
    ("count line missing, row instead", HEADER + "\n" + GOOD + "\n",
     "t:2:4: layer count: expected only the number of layer rows on line 2, found '-1'"),
    ("blank line 2", HEADER + "\n\n1\n" + GOOD,
     "t:2:1: layer count: expected the number of layer rows (an integer >= 1) on line 2, "
     "found ''"),
    # --- row count
    ("fewer rows than declared", HEADER + "\n3\n" + GOOD + "\n" + GOOD + "\n\n",
     "t:2:1: layer count: expected as many layer rows as declared (line 2 declares 3 layer "
     "rows, found 2)"),
    ("more rows than declared", HEADER + "\n1\n" + GOOD + "\n\n  " + GOOD + "\n",
     "t:5:3: layer count: expected no rows after the last declared one (line 2 declares 1 "
     "layer rows, found 2)"),
    # --- rows
    ("missing column", one_row(GOOD.rsplit("\t", 1)[0]),
     f"t:3:54: update_time: expected 12 columns ({COLUMNS}), found '11 columns'"),
    ("only a name", one_row("lonely"),
     f"t:3:7: reserved: expected 12 columns ({COLUMNS}), found '1 column'"),
    ("extra column", one_row(GOOD + "\t0"),
     f"t:3:57: row: expected 12 columns ({COLUMNS}), nothing after update_time, found '0'"),
    ("bad number", cell(2, "12ms"), f"t:3:7: fwd_compute: expected {U63}, found '12ms'"),
    ("negative compute", cell(5, "-20"), f"t:3:24: ig_compute: expected {U63}, found '-20'"),
    ("negative bytes", cell(10, "-400"),
     f"t:3:51: wg_comm_bytes: expected {U63}, found '-400'"),
    ("huge number", cell(11, "99999999999999999999"),
     f"t:3:55: update_time: expected {U63}, found '99999999999999999999'"),
    ("NaN", cell(8, "NaN"), f"t:3:34: wg_compute: expected {U63}, found 'NaN'"),
    ("inf", cell(4, "inf"), f"t:3:20: fwd_comm_bytes: expected {U63}, found 'inf'"),
    ("non-integral float", cell(7, "0.5"), f"t:3:32: ig_comm_bytes: expected {U63}, found '0.5'"),
    ("unicode digits", cell(2, "\u0661\u0662"),
     f"t:3:7: fwd_compute: expected {U63}, found '\u0661\u0662'"),
    ("reserved not a number", cell(1, "dep"), "t:3:4: reserved: expected an integer, found 'dep'"),
    ("unknown group suffix", cell(3, "ALLREDUCE_TP"),
     "t:3:10: fwd_comm_type: expected ALLREDUCE, ALLREDUCE_EP, ALLREDUCE_DP_EP or ALLREDUCE_ETP, "
     "found 'ALLREDUCE_TP'"),
    ("ALLREDUCEALLTOALL", cell(9, "ALLREDUCEALLTOALL"),
     "t:3:37: wg_comm_type: expected ALLREDUCE, ALLREDUCE_EP, ALLREDUCE_DP_EP or ALLREDUCE_ETP (ASTRA-sim "
     "1.0's ALLREDUCEALLTOALL is not supported), found 'ALLREDUCEALLTOALL'"),
    ("CUSTOMIZED row without policy", "HYBRID_CUSTOMIZED\n1\n" + GOOD,
     f"t:3:56: policy: expected 13 columns ({COLUMNS} policy), found '12 columns'"),
    ("CUSTOMIZED unknown layer policy", "HYBRID_CUSTOMIZED\n1\n" + GOOD + " TENSOR",
     f"t:3:57: policy: expected the layer's policy, one of {ALL_POLICIES}, found 'TENSOR'"),
    # --- binary junk in text
    ("NUL byte", HEADER + "\n1\nl0\x00\t-1\n",
     "t:3:3: text: expected a text workload file, found '\\x00'"),
    ("escape byte in header", "HYBRID\x1b[0m\n", "t:1:7: text: expected a text workload file, "
     "found '\\x1b'"),
]


@pytest.mark.parametrize("text, message", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_malformed_text(text, message):
    with pytest.raises(WorkloadError) as err:
        parse_workload_text(text, "t")
    assert str(err.value) == message
    assert "\n" not in str(err.value)
    assert isinstance(err.value, PipesimError) and err.value.exit_code == 2


def test_swapped_comm_type_and_bytes():
    parts = GOOD.split("\t")
    parts[6], parts[7] = parts[7], parts[6]
    with pytest.raises(WorkloadError) as err:
        parse_workload_text(one_row("\t".join(parts)), "t")
    assert str(err.value) == f"t:3:29: ig_comm_bytes: expected {U63}, found 'NONE'"


def test_error_fields_are_structured():
    with pytest.raises(WorkloadError) as err:
        parse_workload_text(cell(5, "-20"), "t")
    e = err.value
    assert (e.path, e.line, e.column, e.field, e.found) == ("t", 3, 24, "ig_compute", "-20")


@pytest.mark.parametrize("data, message", [
    (b"\xff\xfeH\x00Y\x00", "b:1:1: encoding: expected UTF-8 text, found 'byte 0xff'"),
    (HEADER.encode() + b"\n1\nl\xc3\xa90\t\xe9\n",
     "b:3:5: encoding: expected UTF-8 text, found 'byte 0xe9'"),
    (HEADER.encode() + b"\n1\n\x00\x01\x02", "b:3:1: text: expected a text workload file, "
     "found '\\x00'"),
    (b"\x89PNG\r\n\x1a\n", "b:1:1: encoding: expected UTF-8 text, found 'byte 0x89'"),
])
def test_binary_input(data, message):
    with pytest.raises(WorkloadError) as err:
        parse_workload_bytes(data, "b")
    assert str(err.value) == message


def test_missing_file(tmp_path):
    path = tmp_path / "nope.txt"
    with pytest.raises(WorkloadError) as err:
        load_workload(path)
    assert str(err.value) == (f"{path}: file: expected a readable workload file, "
                              f"found 'No such file or directory'")


def test_directory(tmp_path):
    with pytest.raises(WorkloadError) as err:
        load_workload(tmp_path)
    assert str(err.value) == (f"{tmp_path}: file: expected a regular workload file, "
                              f"found 'a directory'")


def test_binary_file_on_disk(tmp_path):
    path = tmp_path / "junk.bin"
    path.write_bytes(HEADER.encode() + b"\n2\n\xde\xad\xbe\xef")  # \xde\xad is U+07AD
    with pytest.raises(WorkloadError) as err:
        load_workload(path, "model")
    assert str(err.value) == f"{path}:3:2: encoding: expected UTF-8 text, found 'byte 0xbe'"
