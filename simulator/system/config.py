"""System description: GPU speed and memory, point-to-point links, collective links, topology.

Validated at the edge (YAML -> NamedTuples); an unknown or mistyped key is a
:class:`ConfigError` naming the file and the dotted key. The built-in default here is what
``configs/system/default.yaml`` spells out (a test keeps the two equal).

Units: bandwidth in Gb/s (10^9 bits per second, as NICs and NVLink are quoted), latency in ns.
"""

from __future__ import annotations

from os import PathLike
from typing import Any, NamedTuple

from ..errors import ConfigError
from ..workload.gpus import GPUS
from ..yaml_file import read_yaml
from .memory_actions import OPTIMIZERS, PRECISIONS, memory_actions_from_dict
from .runtime_profile import RuntimeProfile, fresh_defaults, runtime_from_dict


# a NamedTuple, not a dataclass: start-up (simulator/__init__.py)
class LinkConfig(NamedTuple):
    """A link: ``latency_ns + bytes * 8 / bandwidth_gbps`` ns per transfer."""

    bandwidth_gbps: float = 400.0
    latency_ns: float = 2000.0

    def transfer_ns(self, nbytes: float) -> float:
        if nbytes <= 0:
            return 0.0
        return self.latency_ns + nbytes * 8.0 / self.bandwidth_gbps


# a NamedTuple, not a dataclass: start-up (simulator/__init__.py)
class GPUConfig(NamedTuple):
    """The system's GPU: the preset a generated workload's kernels are priced on, and a scale
    of the workload's compute times (a GPU faster or slower than the one profiled)."""

    compute_scale: float = 1.0  # multiplies every compute time of the workload
    # the kernel preset (simulator/workload/kernel_presets.py) of a model this system runs:
    # `run --megatron-args` / `plan` price the generated rows on it unless --gpu says; "": none
    preset: str = ""


# a NamedTuple, not a dataclass: start-up (simulator/__init__.py)
class CollectiveConfig(NamedTuple):
    """Per process group: the bus bandwidth and per-step latency the ring formulas use."""

    tp: LinkConfig = LinkConfig(2400.0, 1000.0)
    ep: LinkConfig = LinkConfig(400.0, 2000.0)
    dp: LinkConfig = LinkConfig(400.0, 2000.0)
    dp_ep: LinkConfig = LinkConfig(400.0, 2000.0)


COLLECTIVE_NAMES = ("allreduce", "allgather", "reducescatter", "alltoall")
GROUP_NAMES = ("tp", "ep", "dp", "dp_ep")
PLACEMENT_ORDERS = ("tp-dp-pp", "tp-pp-dp")
SHARING = ("fifo", "fair")


# a NamedTuple, not a dataclass: start-up (simulator/__init__.py)
class TopologyConfig(NamedTuple):
    """Nodes of ``gpus_per_node`` GPUs; 0 means a flat network (``links`` / ``collectives`` figures).

    Ranks are placed Megatron-style, TP fastest: ``order`` ``tp-dp-pp`` puts the data-parallel
    replicas of a stage next to each other and pipeline stages furthest apart (Megatron's
    default); ``tp-pp-dp`` puts pipeline stages next to each other. Expert parallelism is carved
    out of data parallelism (EP fastest inside DP).

    ``inter_node`` is one network path (one NIC); a node has ``nics_per_node`` of them, each
    next to its own GPUs (DGX: one a GPU). A ring collective whose group holds g GPUs of each
    node runs its node-crossing traffic over min(g, nics_per_node) of them (NCCL builds a ring
    per NIC), so its bus bandwidth is that many NICs', up to the intra-node figure.
    """

    gpus_per_node: int = 0
    intra_node: LinkConfig = LinkConfig(2400.0, 1000.0)
    inter_node: LinkConfig = LinkConfig(400.0, 5000.0)
    nics_per_node: int = 1
    order: str = "tp-dp-pp"
    sharing: str = "fifo"   # transfers on one link: first come first served, or fair shares

    @property
    def enabled(self) -> bool:
        return self.gpus_per_node > 0


DEFAULT_GRAD_BYTES = 2.0   # bf16 gradients, when neither the system nor the header says
# What a parameter costs when nothing says (memory.bytes_per_param 0 and no memory.precision):
# mixed-precision Adam replicated on every DP rank, bf16 weight + bf16 gradient + fp32 master
# copy, m and v = 2 + 2 + 12 B (Rajbhandari et al., ZeRO, 2020, section 3.1); a run on it warns
DEFAULT_BYTES_PER_PARAM = 16.0
# --param-dtype: the parameters' dtype as Megatron-LM runs it; bf16 keeps fp32 main gradients
# (Megatron Core's distributed-optimizer guide: "bf16 parameters, fp32 gradients: 18 B, 6 + 12/d
# with the distributed optimizer; fp32 parameters, fp32 gradients: 16 B, 8 + 8/d")
PARAM_DTYPES = ("bf16", "fp32")
MAIN_GRAD_DTYPE = {"bf16": "fp32", "fp32": "fp32"}


# a NamedTuple, not a dataclass: start-up (simulator/__init__.py); MemoryConfig below adds its
# methods and a new ``actions`` dict per instance
class _MemoryFields(NamedTuple):
    capacity_gb: float = 0.0          # 10^9 bytes; 0 = no limit; --memory-limit overrides
    capacity_gib: float = 0.0         # 2^30 bytes, as vendors quote HBM ("80 GB" = 80 GiB)
    bytes_per_param: float = 0.0      # 0: DEFAULT_BYTES_PER_PARAM, with a warning
    grad_bytes_per_param: float = 0.0   # 0: the header's, else DEFAULT_GRAD_BYTES
    params_per_layer: float = 0.0
    activation_bytes_per_layer: float = 0.0
    activation_factor: float = 17.0
    # what the last stage's loss keeps per microbatch for its backward, beside the rows' stash
    # (torch: the tensors its loss_fn saves, e.g. a mean-squared loss's out - target), freed
    # with the stash; ``pipesim calibrate --memory`` reads it from the traces
    loss_keeps_bytes: float = 0.0
    # HBM bandwidth in GB/s (10^9 bytes/s, the datasheet's unit); 0: unknown. Prices the
    # optimizer step of Megatron-LM's data parallelism (engine/tail.py)
    bandwidth_gbs: float = 0.0
    # Static memory by dtype and optimizer instead of one bytes_per_param (docs/model.md,
    # Memory): set ``precision`` and weights, gradients (allocated at a stage's first backward)
    # and optimizer state are counted apart.
    precision: str = ""               # "", fp32, bf16 or fp16: the weights' dtype
    grad_dtype: str = ""              # the gradients' dtype ("": the precision's)
    optimizer: str = ""               # adam (default with a precision), sgd-momentum or sgd
    zero: int = 0                     # 1: optimizer state sharded over DP; 2: gradients too;
    #                                   3: the weights too (FSDP, ZeRO-3)
    shard_ranks: int = 0              # ranks the sharded state is split over (0: the DP size;
    #                                   torchtitan's HSDP shards over data_parallel_shard_degree)
    # with zero 3: the dtype each transformer layer's weights are gathered in to compute (FSDP2's
    # MixedPrecisionPolicy.param_dtype; "": the precision's)
    gather_dtype: str = ""
    # Per-action bytes ({"*" | "<stage>": {F: {keeps, transient}, I: {frees, keeps, transient},
    # B: {transient}, W: {transient}}}), as ``pipesim calibrate`` fits them: memory_actions.py
    actions: dict = {}


class MemoryConfig(_MemoryFields):
    """What a rank holds (see docs/model.md, Memory).

    Parameters of a row are its weight-gradient collective bytes / ``grad_bytes_per_param`` (0:
    the workload header's ``grad_bytes_per_param:``, else 2, bf16) (or ``params_per_layer`` when
    given); every parameter costs ``bytes_per_param`` (mixed-precision
    Adam: bf16 weight + grad, fp32 master weight, m, v = 16 B). A row stashes
    ``activation_bytes_per_layer`` per microbatch, or, when that is 0, ``activation_factor`` x
    the header's ``pp_comm`` (Megatron's 34·s·b·h bytes per transformer layer = 17 x 2·s·b·h).
    """

    __slots__ = ()

    def __new__(cls, *args: Any, **kwargs: Any) -> "MemoryConfig":
        return fresh_defaults(super().__new__(cls, *args, **kwargs), {"actions": dict})

    @property
    def per_param_bytes(self) -> float:
        """What a parameter costs without ``precision``: ``bytes_per_param``, else the default."""
        return self.bytes_per_param or DEFAULT_BYTES_PER_PARAM

    @property
    def capacity_bytes(self) -> float:
        """The per-GPU capacity in bytes (0: none set); ``capacity_gib`` wins when both are."""
        if self.capacity_gib > 0:
            return self.capacity_gib * 2**30
        return self.capacity_gb * 1e9

    @property
    def loss_by_shape(self) -> bool:
        """The last stage's loss is the header's (the model's shape: ``loss_keeps_bytes:`` and
        its working figures) where neither ``loss_keeps_bytes`` nor ``actions`` says."""
        return not self.actions and not self.loss_keeps_bytes

    def grad_bytes(self, header_value: float = 0.0) -> float:
        """Bytes per parameter of the gradient collectives: the system's when set (it wins),
        else the workload header's ``grad_bytes_per_param:``, else ``DEFAULT_GRAD_BYTES``."""
        return self.grad_bytes_per_param or header_value or DEFAULT_GRAD_BYTES


# a NamedTuple, not a dataclass: start-up (simulator/__init__.py); SystemConfig below adds its
# methods and new dicts (its own and its memory's and runtime's) per instance
class _SystemFields(NamedTuple):
    name: str = "default"
    gpu: GPUConfig = GPUConfig()
    links: LinkConfig = LinkConfig()
    collectives: CollectiveConfig = CollectiveConfig()
    topology: TopologyConfig = TopologyConfig()
    memory: MemoryConfig = MemoryConfig()
    # SimAI-style bus bandwidths per collective: {"tp.allreduce": 1800.0, ...} (Gb/s)
    busbw_overrides: dict = {}
    runtime: RuntimeProfile = RuntimeProfile()  # runtime_profile.py


_SYSTEM_FRESH = {"memory": MemoryConfig, "busbw_overrides": dict, "runtime": RuntimeProfile}


class SystemConfig(_SystemFields):
    """The machine a workload runs on: links, collectives, placement, memory and runtime."""

    __slots__ = ()

    def __new__(cls, *args: Any, **kwargs: Any) -> "SystemConfig":
        return fresh_defaults(super().__new__(cls, *args, **kwargs), _SYSTEM_FRESH)

    def to_dict(self) -> dict[str, Any]:
        """Every section as a new dict, all the way down (``dataclasses.asdict``'s recursion)."""
        return _plain(self)

    def with_overrides(self, overrides: dict[str, Any], source: str = "override") -> "SystemConfig":
        """A copy with dotted keys replaced, e.g. ``{"links.bandwidth_gbps": 100}``."""
        data = self.to_dict()
        for dotted, value in overrides.items():
            node = data
            parts = dotted.split(".")
            for part in parts[:-1]:
                if not isinstance(node.get(part), dict):
                    raise ConfigError(f"{source}: unknown system key {dotted!r}")
                node = node[part]
            if parts[-1] not in node or (isinstance(node[parts[-1]], dict)
                                         and parts[-1] != "busbw_overrides"):
                raise ConfigError(f"{source}: unknown system key {dotted!r}")
            node[parts[-1]] = value
        return system_from_dict(data, source)


def _plain(value: Any) -> Any:
    """Records (NamedTuples) and dicts as new dicts, lists and tuples as new ones; the leaves
    (numbers, strings, None) as they are."""
    if isinstance(value, tuple) and hasattr(value, "_fields"):
        return {name: _plain(v) for name, v in zip(value._fields, value)}
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(_plain(v) for v in value)
    return value


def _build(cls: type, data: Any, source: str, prefix: str) -> Any:
    if not isinstance(data, dict):
        raise ConfigError(f"{source}: {prefix or 'top level'}: expected a mapping, "
                          f"found {type(data).__name__}")
    known = cls._field_defaults   # every field has a default
    kwargs: dict[str, Any] = {}
    for key, value in data.items():
        dotted = f"{prefix}.{key}" if prefix else str(key)
        if key not in known:
            raise ConfigError(f"{source}: unknown key {dotted!r}; expected one of: "
                              + ", ".join(sorted(known)))
        default = known[key]
        if isinstance(default, RuntimeProfile):
            kwargs[key] = runtime_from_dict(value, source, dotted)
        elif isinstance(default, tuple):   # a section: a NamedTuple of its own
            kwargs[key] = _build(type(default), value, source, dotted)
        elif isinstance(default, dict) and cls is MemoryConfig:
            kwargs[key] = memory_actions_from_dict(value, source, dotted)
        elif isinstance(default, dict):
            kwargs[key] = _busbw(value, source, dotted)
        elif isinstance(default, str):
            choices = _CHOICES.get(key)
            if not isinstance(value, str) or (choices and value not in choices):
                expected = "one of " + ", ".join(c for c in choices if c) if choices else "a string"
                raise ConfigError(f"{source}: {dotted}: expected {expected}, found {value!r}")
            kwargs[key] = value
        elif isinstance(default, int) and not isinstance(default, bool) and not isinstance(default, float):
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ConfigError(f"{source}: {dotted}: expected a non-negative integer, "
                                  f"found {value!r}")
            if key == "zero" and value > 3:
                raise ConfigError(f"{source}: {dotted}: expected 0, 1 (optimizer state sharded "
                                  f"over DP), 2 (gradients too) or 3 (weights too), found "
                                  f"{value!r}")
            kwargs[key] = value
        else:
            kwargs[key] = _number(value, source, dotted, positive=key in _POSITIVE)
    return cls(**kwargs)


_POSITIVE = ("bandwidth_gbps", "compute_scale")   # bytes_per_param 0: the default
_CHOICES = {"order": PLACEMENT_ORDERS, "sharing": SHARING, "precision": PRECISIONS,
            "preset": ("",) + tuple(GPUS),
            "grad_dtype": PRECISIONS, "gather_dtype": PRECISIONS, "optimizer": OPTIMIZERS}


def with_param_dtype(system: SystemConfig, param_dtype: str | None,
                     distributed_optimizer: bool, grad_dtype: str | None = None) -> SystemConfig:
    """The system with ``--param-dtype`` / ``--use-distributed-optimizer`` laid over its memory:
    the dtype sets the weights' (and its main gradients') dtype and replaces
    ``bytes_per_param``; the distributed optimizer shards the fp32 master weights and Adam's
    state over DP (Megatron-LM's ``--use-distributed-optimizer``, ZeRO stage 1).
    ``grad_dtype``: the gradient buffer's dtype where the run says (Megatron-LM's DDP keeps
    its buffer in the reduction's dtype); else the dtype's main gradients."""
    if param_dtype is None and not distributed_optimizer:
        return system
    mem = system.memory
    if param_dtype is not None:
        mem = mem._replace(precision=param_dtype,
                           grad_dtype=grad_dtype or MAIN_GRAD_DTYPE[param_dtype],
                           bytes_per_param=0.0)
    if distributed_optimizer:
        if not mem.precision:
            raise ConfigError("--use-distributed-optimizer: shards the optimizer state, which is "
                              "counted by dtype; give --param-dtype bf16 or fp32 (or "
                              "memory.precision in --system)")
        mem = mem._replace(zero=max(1, mem.zero))
    return system._replace(memory=mem)


def with_fsdp(system: SystemConfig, shard_ranks: int, gather_dtype: str) -> SystemConfig:
    """The system with torchtitan's FSDP2 (``fully_shard``) laid over its memory: the weights
    kept in fp32 and, with their fp32 gradients (FSDP2's reduce dtype) and Adam's state,
    sharded over ``shard_ranks`` ranks; each transformer layer's weights gathered in
    ``gather_dtype`` (MixedPrecisionPolicy.param_dtype) while it computes."""
    mem = system.memory._replace(precision="fp32", grad_dtype="fp32", bytes_per_param=0.0,
                                 zero=3, shard_ranks=shard_ranks, gather_dtype=gather_dtype)
    return system._replace(memory=mem)


def check_memory_keys(mem: MemoryConfig, source: str = "--system or --set") -> None:
    """A memory key that would change nothing is refused: ``zero``, ``optimizer`` and
    ``grad_dtype`` count the static memory by dtype, which only ``precision`` turns on (without
    it every parameter costs ``bytes_per_param``, and ``memory.zero: 1`` gave the same peak to
    the byte)."""
    if mem.precision:
        return
    for key, value in (("zero", mem.zero), ("optimizer", mem.optimizer),
                       ("grad_dtype", mem.grad_dtype), ("shard_ranks", mem.shard_ranks),
                       ("gather_dtype", mem.gather_dtype)):
        if value:
            raise ConfigError(
                f"{source}: memory.{key}: {value} has no effect without memory.precision "
                f"(every parameter then costs memory.bytes_per_param, "
                f"{mem.per_param_bytes:g} B); set memory.precision (fp32, bf16 or fp16) or "
                "--param-dtype bf16|fp32")


def _number(value: Any, source: str, dotted: str, positive: bool = False) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value != value:
        raise ConfigError(f"{source}: {dotted}: expected a number, found {value!r}")
    if value < 0 or (positive and value <= 0):
        raise ConfigError(f"{source}: {dotted}: expected a positive number, found {value!r}")
    return float(value)


def _busbw(value: Any, source: str, dotted: str) -> dict[str, float]:
    if not isinstance(value, dict):
        raise ConfigError(f"{source}: {dotted}: expected a mapping like "
                          f"{{'tp.allreduce': 1800}}, found {value!r}")
    out = {}
    for k, v in value.items():
        group, _, coll = str(k).lower().partition(".")
        if group not in GROUP_NAMES or coll not in COLLECTIVE_NAMES:
            raise ConfigError(f"{source}: {dotted}.{k}: expected a key GROUP.COLLECTIVE with GROUP "
                              f"in {', '.join(GROUP_NAMES)} and COLLECTIVE in "
                              f"{', '.join(COLLECTIVE_NAMES)}")
        out[f"{group}.{coll}"] = _number(v, source, f"{dotted}.{k}", positive=True)
    return out


def system_from_dict(data: dict[str, Any], source: str = "system") -> SystemConfig:
    return _build(SystemConfig, data, source, "")


def load_system(path: "str | PathLike[str] | None") -> SystemConfig:
    """The system at ``path``, or the built-in default when ``path`` is None."""
    if path is None:
        return SystemConfig()
    data = read_yaml(path, f"--system: cannot read {path}")
    if data is None:
        data = {}
    return system_from_dict(data, str(path))
