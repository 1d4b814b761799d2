"""Line 1 of a workload file: the parallelism policy, then ``key: value`` pairs in any order.

SimAI scans the header's tokens for each key it knows; we read the same keys, but a missing key is
defaulted *and reported*, an unknown key is kept and reported, and a malformed value is an error
instead of whatever ``std::stoi`` makes of it. Checkpoint lists are read in full (SimAI registers
only the first layer of each). Layer numbers in the header are 0-based row indices (ASTRA-sim 1.0
compares them with the row counter); they are checked once the row count is known.
"""

from __future__ import annotations

import re

from ..errors import WorkloadError
from .model import POLICIES, Header
from .stage_layers import empty_chunk
from .rows import MAX_INT, end_column, int_range_text, to_int

FWD_IN_BCKWD = "HYBRID_TRANSFORMER_FWD_IN_BCKWD"
DLRM_POLICIES = ("HYBRID_DLRM", "HYBRID_DLRM_ENHANCED")  # ASTRA-sim 1.0: bare integer follows
DLRM_KEY = "DLRM_LAST_BOTTOM_LAYER:"                    # SimAI's spelling of the same value
_NAME_RE = re.compile(r"^[A-Za-z][A-Za-z0-9_.-]*$")

# key as written -> (Header field, smallest legal value)
_INT_KEYS = {
    "model_parallel_NPU_group:": ("tp", 1),
    "ep:": ("ep", 1),
    "expert_parallel_npu_group:": ("ep", 1),   # AICB's older spelling of ep:
    "pp:": ("pp", 1),
    "vpp:": ("vpp", 1),
    "ga:": ("ga", 1),
    "all_gpus:": ("all_gpus", 1),
    "pp_comm:": ("pp_comm", 0),
    "pp_comm": ("pp_comm", 0),  # SimAI's own example writes it without the colon
    # pipesim's: bytes a transformer layer keeps per microbatch (pipesim generate writes it
    # from the model's shape); SimAI ignores a key it does not know
    "activation_bytes:": ("activation_bytes", 0),
    # and what a split backward's I keeps per layer and microbatch until its W
    "split_backward_bytes:": ("split_backward_bytes", 0),
    # and what it keeps where the I frees the autograd graph (Megatron-LM's zero-bubble runtime)
    "deferred_wgrad_bytes:": ("deferred_wgrad_bytes", 0),
    # and a layer's working memory per microbatch inside its F, B, I and W (transient)
    "f_transient_bytes:": ("f_transient_bytes", 0),
    "b_transient_bytes:": ("b_transient_bytes", 0),
    "i_transient_bytes:": ("i_transient_bytes", 0),
    "w_transient_bytes:": ("w_transient_bytes", 0),
    # and what the last stage's loss keeps per microbatch until its backward, and holds above
    # that in its forward and backward (the logits' fp32 copies; pipesim generate writes them)
    "loss_keeps_bytes:": ("loss_keeps_bytes", 0),
    "loss_f_transient_bytes:": ("loss_f_transient_bytes", 0),
    "loss_b_transient_bytes:": ("loss_b_transient_bytes", 0),
    # and the bytes per parameter its weight-gradient collectives move (parameters are counted
    # from them; pipesim generate writes fp32 gradients, 4)
    "grad_bytes_per_param:": ("grad_bytes_per_param", 1),
    # and the tied word embedding's parameters on one TP rank, whose gradient Megatron-LM
    # all-reduces between the first and the last pipeline stage once an iteration
    "embedding_sync_params:": ("embedding_sync_params", 0),
    # and context parallelism's ring: its ranks, the K and V bytes a rank sends each step, and
    # the attention's forward and backward ns a step (the K/V exchange hides behind them)
    "cp:": ("cp", 1),
    "cp_kv_bytes:": ("cp_kv_bytes", 0),
    "cp_fwd_step_ns:": ("cp_fwd_step_ns", 0),
    "cp_bwd_step_ns:": ("cp_bwd_step_ns", 0),
    # and the experts' tensor parallelism (Megatron-LM's --expert-tensor-parallel-size; absent:
    # tp, as Megatron-LM defaults it)
    "etp:": ("etp", 1),
}
# SimAI#283's pipeline keys: the schedule's name, and one layer count per (virtual) stage
SCHEDULE_KEY = "pp_schedule:"
# pipesim's: how the rows are laid out (pipesim generate writes it; the reader honours it)
LAYOUT_KEY = "layout:"
LAYOUT_VALUES = ("model", "aicb")
# pipesim's: the options pipesim generate filled in, as name=value[,name=value...]
GENERATED_DEFAULTS_KEY = "generated_defaults:"
_DEFAULT_RE = re.compile(r"^[a-z][a-z0-9_-]*=[^,=\s]+(,[a-z][a-z0-9_-]*=[^,=\s]+)*$")
MODE_KEY = "mode:"             # AICB 2.0: 0 training, 1 inference (one token, kept as written)
INFERENCE_MODES = ("1", "inference")
STAGE_LAYERS_KEY = "stage_layers:"
_LIST_KEYS = {"checkpoints:": "checkpoints", "checkpoint_initiates:": "checkpoint_initiates"}
FILE_KEY = {"tp": "model_parallel_NPU_group:", "ep": "ep:", "pp": "pp:", "vpp": "vpp:",
             "ga": "ga:", "all_gpus": "all_gpus:", "pp_comm": "pp_comm:",
             "checkpoints": "checkpoints:", "checkpoint_initiates": "checkpoint_initiates:"}
_DEFAULTED = ("tp", "ep", "pp", "vpp", "ga", "all_gpus", "pp_comm")
_KNOWN = ("model_parallel_NPU_group:, ep:, pp:, vpp:, ga:, all_gpus:, pp_comm:, checkpoints:, "
          "checkpoint_initiates:, pp_schedule:, stage_layers:, mode:, layout:, generated_defaults:, "
          "activation_bytes:, split_backward_bytes:, deferred_wgrad_bytes:, f_transient_bytes:, "
          "b_transient_bytes:, i_transient_bytes:, w_transient_bytes:, loss_keeps_bytes:, "
          "loss_f_transient_bytes:, loss_b_transient_bytes:, grad_bytes_per_param:, "
          "embedding_sync_params:, cp:, cp_kv_bytes:, cp_fwd_step_ns:, cp_bwd_step_ns:, etp:")


class ParsedHeader:
    """The header, its warnings, and the layer numbers it names (checked against the rows later).

    ``layer_refs`` holds ``(field, layer number, column)``. A plain class: the parser's own
    record, and a dataclass costs start-up time to create.
    """

    __slots__ = ("header", "layer_refs", "warnings")

    def __init__(self, header: Header, warnings: tuple[str, ...],
                 layer_refs: tuple[tuple[str, int, int], ...]) -> None:
        self.header = header
        self.warnings = warnings
        self.layer_refs = layer_refs


def _tokens(line: str) -> list[tuple[str, int]]:
    """``(token, 1-based column)`` of each whitespace-separated token (str.split's whitespace)."""
    out = []
    at = 0
    for tok in line.split():
        at = line.index(tok, at)   # only whitespace lies between ``at`` and the token
        out.append((tok, at + 1))
        at += len(tok)
    return out


def parse_header(line: str, path: str) -> ParsedHeader:
    toks = _tokens(line)
    if not toks:
        raise WorkloadError(path, 1, 1, "policy", f"one of {', '.join(POLICIES)}", "")
    policy, col = toks[0]
    if policy not in POLICIES:
        raise WorkloadError(path, 1, col, "policy", f"one of {', '.join(POLICIES)}", policy)

    def value_at(i: int, field: str, minimum: int, expected: str) -> int:
        if i >= len(toks):
            raise WorkloadError(path, 1, end_column(line), field, expected, "")
        tok, tcol = toks[i]
        value = to_int(tok)
        if value is None or not minimum <= value <= MAX_INT:
            raise WorkloadError(path, 1, tcol, field, expected, tok)
        return value

    values: dict[str, object] = {}
    seen: dict[str, int] = {}
    refs: list[tuple[str, int, int]] = []
    unknown: list[tuple[str, str]] = []
    i = 1
    if policy in DLRM_POLICIES and len(toks) > 1 and to_int(toks[1][0]) is not None:
        values["dlrm_last_bottom_layer"] = value_at(1, policy, 0, "a layer number >= 0")
        refs.append((policy, values["dlrm_last_bottom_layer"], toks[1][1]))
        seen["dlrm_last_bottom_layer"] = toks[1][1]
        i = 2
    while i < len(toks):
        key, kcol = toks[i]
        field = key.rstrip(":")
        name = _field_of(key, policy)
        if name is None:
            if not (len(key) > 1 and key.endswith(":")):
                raise WorkloadError(path, 1, kcol, "header", f"a 'key:' token ({_KNOWN})", key)
            j = i + 1
            while j < len(toks) and not _is_key(toks[j][0]):
                j += 1
            unknown.append((field, " ".join(t for t, _ in toks[i + 1:j])))
            i = j
            continue
        if name in seen:
            raise WorkloadError(path, 1, kcol, field,
                                f"each key once (already given at column {seen[name]})", key)
        seen[name] = kcol
        if key == MODE_KEY:
            found = toks[i + 1][0] if i + 1 < len(toks) else ""
            if not found or _is_key(found):
                raise WorkloadError(path, 1, toks[i + 1][1] if found else end_column(line),
                                    field, "a value after 'mode:' (AICB: 0 training, 1 "
                                    "inference)", found)
            values[name] = found
            i += 2
            continue
        if key == LAYOUT_KEY:
            found = toks[i + 1][0] if i + 1 < len(toks) else ""
            if found not in LAYOUT_VALUES:
                raise WorkloadError(path, 1, toks[i + 1][1] if found else end_column(line),
                                    field, "model or aicb after 'layout:'", found)
            values[name] = found
            i += 2
            continue
        if key == GENERATED_DEFAULTS_KEY:
            found = toks[i + 1][0] if i + 1 < len(toks) else ""
            if not _DEFAULT_RE.match(found):
                raise WorkloadError(path, 1, toks[i + 1][1] if found else end_column(line),
                                    field, "option=value[,option=value...] after "
                                    "'generated_defaults:'", found)
            values[name] = tuple(found.split(","))
            i += 2
            continue
        if key == SCHEDULE_KEY:
            found = toks[i + 1][0] if i + 1 < len(toks) else ""
            if not found or _is_key(found) or not _NAME_RE.match(found):
                raise WorkloadError(path, 1, toks[i + 1][1] if found else end_column(line),
                                    field, "a schedule name after 'pp_schedule:' (e.g. 1f1b, "
                                    "interleaved)", found)
            values[name] = found
            i += 2
            continue
        if key == STAGE_LAYERS_KEY:
            j = i + 1
            counts_expected = ("a layer count >= 1 per stage after 'stage_layers:' (0 only for "
                               "the first or the last stage)")
            while j < len(toks) and not _is_key(toks[j][0]):
                values.setdefault(name, [])
                values[name].append(value_at(j, field, 0, counts_expected))
                j += 1
            if j == i + 1:
                value_at(j, field, 1, counts_expected)
            values[name] = tuple(values[name])
            # a first or last stage of no layers holds the rows around them (the file's rows
            # decide: check_stage_layers); a middle one would hold nothing
            middle = empty_chunk(values[name], True, True)
            if middle is not None:
                raise WorkloadError(path, 1, toks[i + 1 + middle][1], field, counts_expected,
                                    "0")
            values["stage_layers_column"] = kcol
            i = j
            continue
        if key in _LIST_KEYS:
            count = value_at(i + 1, field, 0, f"the number of layer numbers after '{key}'")
            listed = []
            for j in range(i + 2, i + 2 + count):
                listed.append(value_at(j, field, 0, f"{count} layer numbers after '{key} {count}'"))
                refs.append((field, listed[-1], toks[j][1]))
            values[name] = tuple(listed)
            i += 2 + count
            continue
        minimum = _INT_KEYS[key][1] if key in _INT_KEYS else 0
        values[name] = value_at(i + 1, field, minimum, f"{int_range_text(minimum)} after '{key}'")
        if name == "dlrm_last_bottom_layer":
            refs.append((field, values[name], toks[i + 1][1]))
        i += 2
    if policy in DLRM_POLICIES and "dlrm_last_bottom_layer" not in values:
        found = toks[1] if len(toks) > 1 else ("", end_column(line))
        raise WorkloadError(path, 1, found[1], policy,
                            f"the last bottom-MLP layer number after {policy} (a bare integer "
                            f"or '{DLRM_KEY} N')", found[0])
    return _assemble(policy, values, tuple(unknown), tuple(refs), path)


def _field_of(key: str, policy: str) -> str | None:
    """The Header field a header token names, or None if it is not a key we read."""
    if key in _INT_KEYS:
        return _INT_KEYS[key][0]
    if key in _LIST_KEYS:
        return _LIST_KEYS[key]
    if key == SCHEDULE_KEY:
        return "pp_schedule"
    if key == MODE_KEY:
        return "mode"
    if key == LAYOUT_KEY:
        return "layout"
    if key == GENERATED_DEFAULTS_KEY:
        return "generated_defaults"
    if key == STAGE_LAYERS_KEY:
        return "stage_layers"
    if key == DLRM_KEY and policy in DLRM_POLICIES:
        return "dlrm_last_bottom_layer"
    return None


def _is_key(tok: str) -> bool:
    return tok in _INT_KEYS or (len(tok) > 1 and tok.endswith(":"))


def _assemble(policy: str, values: dict, unknown: tuple[tuple[str, str], ...],
              refs: tuple[tuple[str, int, int], ...], path: str) -> ParsedHeader:
    tp = values.get("tp", 1)
    pp = values.get("pp", 1)
    defaults = {"tp": 1, "ep": 1, "pp": 1, "vpp": 1, "ga": 1, "all_gpus": tp * pp, "pp_comm": 0,
                "checkpoints": (), "checkpoint_initiates": ()}
    missing = [k for k in _DEFAULTED if k not in values]
    if policy == FWD_IN_BCKWD:
        missing += [k for k in ("checkpoints", "checkpoint_initiates") if k not in values]
    header = Header(policy=policy, **{k: values.get(k, v) for k, v in defaults.items()},
                    dlrm_last_bottom_layer=values.get("dlrm_last_bottom_layer"),
                    pp_schedule=values.get("pp_schedule"),
                    stage_layers=values.get("stage_layers", ()),
                    mode=values.get("mode"),
                    layout=values.get("layout"),
                    generated_defaults=values.get("generated_defaults", ()),
                    activation_bytes=values.get("activation_bytes", 0),
                    split_backward_bytes=values.get("split_backward_bytes", 0),
                    deferred_wgrad_bytes=values.get("deferred_wgrad_bytes", 0),
                    f_transient_bytes=values.get("f_transient_bytes", 0),
                    b_transient_bytes=values.get("b_transient_bytes", 0),
                    i_transient_bytes=values.get("i_transient_bytes", 0),
                    w_transient_bytes=values.get("w_transient_bytes", 0),
                    loss_keeps_bytes=values.get("loss_keeps_bytes", 0),
                    loss_f_transient_bytes=values.get("loss_f_transient_bytes", 0),
                    loss_b_transient_bytes=values.get("loss_b_transient_bytes", 0),
                    grad_bytes_per_param=values.get("grad_bytes_per_param", 0),
                    embedding_sync_params=values.get("embedding_sync_params", 0),
                    cp=values.get("cp", 1), cp_kv_bytes=values.get("cp_kv_bytes", 0),
                    cp_fwd_step_ns=values.get("cp_fwd_step_ns", 0),
                    cp_bwd_step_ns=values.get("cp_bwd_step_ns", 0),
                    etp=values.get("etp", 0),
                    stage_layers_column=values.get("stage_layers_column", 0),
                    defaults_used=tuple(missing), unknown_keys=unknown)
    warnings = []
    if missing:
        warnings.append(defaults_note(path, header, missing))
    if unknown:
        listed = ", ".join(f"{k}: {v}".rstrip() for k, v in unknown)
        warnings.append(f"{path}:1: unknown header keys kept but not used: {listed}")
    if header.all_gpus % (header.tp * header.pp):
        warnings.append(f"{path}:1: all_gpus {header.all_gpus} is not a multiple of tp x pp = "
                        f"{header.tp} x {header.pp}")
    if header.mode in INFERENCE_MODES:
        warnings.append(f"{path}:1: mode: {header.mode} (AICB: an inference trace); pipesim "
                        f"simulates training iterations from the rows as written")
    if header.pp > 1 and "pp_comm" in values and header.pp_comm == 0:
        warnings.append(f"{path}:1: pp is {header.pp} but pp_comm is 0, so activations between "
                        f"stages cost nothing to send")
    return ParsedHeader(header, tuple(warnings), refs)


def defaults_note(path: str, header: Header, keys) -> str:
    """The note naming the header keys ``keys`` the file lacks and the defaults ``header``
    holds for them (the parser's; a run restates it for the keys it still uses)."""
    listed = ", ".join(FILE_KEY[k] for k in keys)
    used = ", ".join(_default_text(k, getattr(header, k)) for k in keys)
    return f"{path}:1: header has no {listed}; using {used}"


def _default_text(key: str, value: object) -> str:
    if key == "all_gpus":
        return f"all_gpus={value} (tp x pp)"
    if isinstance(value, tuple):
        return f"{key}=[]"
    return f"{key}={value}"


def check_layer_refs(parsed: ParsedHeader, n_layers: int, path: str) -> None:
    """Every layer number the header names must be a row of the file."""
    for field, layer, col in parsed.layer_refs:
        if not 0 <= layer < n_layers:
            raise WorkloadError(path, 1, col, field,
                                f"a layer number in 0..{n_layers - 1} (0-based row index)",
                                str(layer))
