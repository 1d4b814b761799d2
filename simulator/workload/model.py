"""The parsed workload: header, layer rows, and how the rows map onto pipeline stages.

Times are integer nanoseconds as in the file (1 tick = 1 ns). Everything here is immutable so a
parsed workload can be shared between runs of a sweep.
"""

from __future__ import annotations

from typing import NamedTuple
from enum import Enum

POLICIES = (
    "DATA",
    "MODEL",
    "HYBRID_DATA_MODEL",
    "HYBRID_MODEL_DATA",
    "HYBRID_DLRM",
    "HYBRID_DLRM_ENHANCED",
    "HYBRID_TRANSFORMER",
    "HYBRID_TRANSFORMER_FWD_IN_BCKWD",
    "HYBRID_CUSTOMIZED",
    "MICRO",
    "DISTRIBUTED_INFERENCE",
)


class CommType(str, Enum):
    NONE = "NONE"
    ALLREDUCE = "ALLREDUCE"
    ALLTOALL = "ALLTOALL"
    ALLGATHER = "ALLGATHER"
    REDUCESCATTER = "REDUCESCATTER"


class CommGroup(str, Enum):
    """Which process group a collective runs on (SimAI's suffixes)."""

    TP = "tp"        # no suffix on forward / input-gradient collectives
    DP = "dp"        # no suffix on weight-gradient collectives
    EP = "ep"        # `_EP`
    DP_EP = "dp_ep"  # `_DP_EP`
    # pipesim's: an expert's tensor-parallel group (Megatron-LM's --expert-tensor-parallel-size),
    # the all-gather of the dispatched tokens and the reduce-scatter of the experts' outputs
    ETP = "etp"      # `_ETP`


# a NamedTuple, not a dataclass: start-up (simulator/__init__.py)
class Comm(NamedTuple):
    """One collective of a layer; ``type`` NONE means no communication (SimAI's meaning)."""

    type: CommType
    group: CommGroup
    bytes: int
    raw: str = ""  # the token as written, for reports

    @property
    def active(self) -> bool:
        # _NONE, not CommType.NONE: reading a member off an Enum class runs Python code, and the
        # engine asks this of every row's collectives
        return self.type is not _NONE and self.bytes > 0


_NONE = CommType.NONE
NO_COMM_TP = Comm(CommType.NONE, CommGroup.TP, 0, "NONE")
NO_COMM_DP = Comm(CommType.NONE, CommGroup.DP, 0, "NONE")


# a NamedTuple, not a dataclass: start-up (simulator/__init__.py)
class Layer(NamedTuple):
    """One layer row. ``line`` is the 1-based line in the file it came from."""

    index: int
    name: str
    fwd_compute: int
    fwd_comm: Comm
    ig_compute: int
    ig_comm: Comm
    wg_compute: int
    wg_comm: Comm
    update_time: int
    line: int = 0
    policy: str | None = None   # HYBRID_CUSTOMIZED: the layer's own policy column
    reserved: str = "-1"


# Layer(...) for the parser and the AICB recovery (thousands of rows a file): the same tuple,
# made by tuple.__new__ without the Python-level __new__ Layer(...) runs first (about two thirds
# of its cost). It fills the fields by position and does not count them: its parameters must be
# Layer's fields in order (checked below at import), and tests/workload/test_fast_paths.py checks
# that it makes what Layer(...) makes.
_tuple_new = tuple.__new__


def new_layer(index: int, name: str, fwd_compute: int, fwd_comm: Comm, ig_compute: int,
              ig_comm: Comm, wg_compute: int, wg_comm: Comm, update_time: int, line: int,
              policy: str | None, reserved: str) -> Layer:
    """``Layer(...)`` with every argument positional, faster (see above)."""
    return _tuple_new(Layer, (index, name, fwd_compute, fwd_comm, ig_compute, ig_comm,
                              wg_compute, wg_comm, update_time, line, policy, reserved))


if new_layer.__code__.co_varnames[:new_layer.__code__.co_argcount] != Layer._fields:
    raise TypeError(f"new_layer's parameters are not Layer's fields {Layer._fields}")


# a NamedTuple, not a dataclass: start-up (simulator/__init__.py)
class Header(NamedTuple):
    """Line 1 of the file: the parallel sizes and checkpoint lists (absent keys defaulted)."""

    policy: str
    tp: int = 1
    ep: int = 1
    pp: int = 1
    vpp: int = 1
    ga: int = 1
    all_gpus: int = 1
    pp_comm: int = 0                      # bytes between adjacent stages per microbatch
    activation_bytes: int = 0             # a layer's stash per microbatch (0: not given)
    split_backward_bytes: int = 0         # what a layer's I keeps until its W (0: not given)
    deferred_wgrad_bytes: int = 0         # what a graph-freeing I keeps: linears' inputs, grads
    f_transient_bytes: int = 0            # a layer's working memory inside its F, B, I, W
    b_transient_bytes: int = 0
    i_transient_bytes: int = 0
    w_transient_bytes: int = 0
    loss_keeps_bytes: int = 0             # the last stage's loss: kept until its backward,
    loss_f_transient_bytes: int = 0       # and held above that in its forward and backward
    loss_b_transient_bytes: int = 0
    grad_bytes_per_param: int = 0         # bytes a gradient collective moves per parameter
    embedding_sync_params: int = 0        # tied word embedding on a TP rank (0: none)
    # context parallelism's ring (pipesim generate writes it; engine/costs.py prices it): the
    # ring's ranks, the K and V bytes a rank sends a step, and one step's attention forward and
    # backward ns on its rows named ATTENTION_CORE_ROW (0: no ring)
    cp: int = 1
    cp_kv_bytes: int = 0
    cp_fwd_step_ns: int = 0
    cp_bwd_step_ns: int = 0
    # the experts' tensor parallelism (Megatron-LM's --expert-tensor-parallel-size; 0: not
    # given, the experts split as the dense layers, over tp): the expert grid is etp x ep x
    # expert-dp per stage, folded over the stage's tp x cp x dp GPUs (:attr:`expert_tp`)
    etp: int = 0
    checkpoints: tuple[int, ...] = ()
    checkpoint_initiates: tuple[int, ...] = ()
    dlrm_last_bottom_layer: int | None = None  # HYBRID_DLRM's bare integer
    pp_schedule: str | None = None        # the schedule the file names (SimAI#283 proposal)
    stage_layers: tuple[int, ...] = ()    # transformer layers per (virtual) stage, in order
    mode: str | None = None               # AICB 2.0's mode: as written (0 training, 1 inference)
    layout: str | None = None             # layout: as written (model or aicb; pipesim's key)
    generated_defaults: tuple[str, ...] = ()   # "option=value" pipesim generate filled in
    stage_layers_column: int = 0          # for messages; not compared (see __eq__)
    defaults_used: tuple[str, ...] = ()   # keys absent from the file, defaulted
    unknown_keys: tuple[tuple[str, str], ...] = ()

    @property
    def dp(self) -> int:
        """Data-parallel size implied by the header (world / (tp * pp)), at least 1."""
        return max(1, self.all_gpus // max(1, self.tp * self.pp))

    @property
    def expert_tp(self) -> int:
        """The experts' tensor-parallel size: ``etp``, else ``tp`` (Megatron-LM's default)."""
        return self.etp or max(1, self.tp)

    # Two headers are equal when every field but ``stage_layers_column`` is (where a key was
    # written is not what the header says); a Header equals no other tuple, as a dataclass did
    def __eq__(self, other: object) -> bool:
        if type(other) is Header:
            return _compared(self) == _compared(other)
        return False if isinstance(other, tuple) else NotImplemented

    def __ne__(self, other: object) -> bool:
        if type(other) is Header:
            return _compared(self) != _compared(other)
        return True if isinstance(other, tuple) else NotImplemented

    def __hash__(self) -> int:
        return hash(_compared(self))


_COLUMN = Header._fields.index("stage_layers_column")


def _compared(h: Header) -> tuple:
    """The fields two headers are compared by: all but ``stage_layers_column``."""
    return h[:_COLUMN] + h[_COLUMN + 1:]


# a NamedTuple, not a dataclass: start-up (simulator/__init__.py)
class AicbStage(NamedTuple):
    """What was recovered from an AICB stage trace.

    File-order rows keep their ``index``/``line``. ``model`` is the recovered model (header ``pp``
    stages of the block: head, ``pp x L`` transformer layers, tail) re-indexed 0.. in model order,
    each row's ``line`` the line it was taken from in the first repeat; ``iteration`` are the
    iteration rows (before, then after the block) re-indexed after the model.
    """

    found_by: str                              # "repetition" or "names"
    repeats: int                               # ga
    block_start: int                           # file row index of the first repeat's first row
    block_rows: int                            # rows per repeat
    repeat_lines: tuple[tuple[int, int], ...]  # (first line, last line) of each repeat
    pre: tuple[Layer, ...]                     # iteration rows before the repeats (file rows)
    post: tuple[Layer, ...]                    # iteration rows after them (file rows)
    head: tuple[Layer, ...]                    # block rows before the first layer (file rows)
    layers: tuple[tuple[Layer, ...], ...]      # one stage's transformer layers (file rows)
    tail: tuple[Layer, ...]                    # block rows after the last layer (file rows)
    stages: int                                # header pp: stages of this block in the model
    model: tuple[Layer, ...]
    layer_spans: tuple[tuple[int, int], ...]   # [start, stop) in ``model`` of each layer
    offsets: tuple[int, ...]                   # block offset of each ``model`` row
    iteration: tuple[Layer, ...]
    notes: tuple[str, ...] = ()

    @property
    def layers_per_stage(self) -> int:
        return len(self.layers)

    @property
    def model_layers(self) -> int:
        return len(self.layer_spans)

    def to_dict(self) -> dict:
        """What ``pipesim inspect --json`` prints about the recovery."""
        def rows(layers: tuple[Layer, ...]) -> list[dict]:
            return [{"line": r.line, "name": r.name} for r in layers]

        return {
            "found_by": self.found_by,
            "repeats": self.repeats,
            "block_rows": self.block_rows,
            "repeat_lines": [list(x) for x in self.repeat_lines],
            "iteration_rows_before": rows(self.pre),
            "iteration_rows_after": rows(self.post),
            "head": rows(self.head),
            "layers_per_stage": self.layers_per_stage,
            "layer_lines": [[layer[0].line, layer[-1].line] for layer in self.layers],
            "layer_rows": [len(layer) for layer in self.layers],
            "tail": rows(self.tail),
            "stages_in_model": self.stages,
            "model_layers": self.model_layers,
            "notes": list(self.notes),
        }


# a NamedTuple, not a dataclass: start-up (simulator/__init__.py)
class Workload(NamedTuple):
    """A parsed workload file.

    ``layout`` is ``"model"`` (rows are the whole model once; ASTRA-sim) or ``"aicb"`` (rows are
    one stage's trace unrolled over ``ga`` microbatches; SimAI/AICB). ``aicb`` carries what was
    recovered from an AICB-layout file (see :mod:`simulator.workload.aicb`), else None.
    """

    path: str
    header: Header
    layers: tuple[Layer, ...]
    warnings: tuple[str, ...] = ()
    layout: str = "model"
    aicb: AicbStage | None = None
    # why the layout is what it is when the rows decided it (the header states no layout:,
    # no --layout was given): the run states it as a warning
    layout_detected: str = ""


# a NamedTuple, not a dataclass: start-up (simulator/__init__.py)
class Partition(NamedTuple):
    """What each model chunk runs, in model order.

    ``chunks[c]`` are the layers of chunk c (forward order). ``iteration_layers`` run once per
    iteration on every rank after its last microbatch (AICB's DP/optimizer rows), each rank its
    share: ``iteration_share[c]`` per chunk it runs (empty: every rank runs them in full; see
    :mod:`.iteration_rows`).
    ``recompute[c]`` maps a layer position in chunk c whose input-gradient triggers a recompute to
    the positions recomputed first (Forward_In_BackPass). ``rows_per_layer`` lets per-layer
    figures (activation memory) be spread over the rows of a layer.
    """

    chunks: tuple[tuple[Layer, ...], ...]
    iteration_layers: tuple[Layer, ...] = ()
    recompute: tuple[dict[int, tuple[int, ...]], ...] = ()
    rows_per_layer: float = 1.0   # rows that make one transformer layer (AICB: sub-layer rows)
    iteration_share: tuple[float, ...] = ()
    iteration_stages: int = 1     # pipeline stages the iteration rows describe

    @property
    def n_chunks(self) -> int:
        return len(self.chunks)

    def layer_range(self, chunk: int) -> tuple[int, int]:
        """(first, last) file-order layer index of a chunk; (-1, -2) when empty."""
        layers = self.chunks[chunk]
        if not layers:
            return (-1, -2)
        return (layers[0].index, layers[-1].index)
