"""The modelled machine: GPU speed, links, and collective costs."""

from .collectives import collective_time_ns, group_size, ring_time_ns
from .config import CollectiveConfig, GPUConfig, LinkConfig, SystemConfig, load_system

__all__ = ["CollectiveConfig", "GPUConfig", "LinkConfig", "SystemConfig", "load_system",
           "collective_time_ns", "group_size", "ring_time_ns"]
