"""Workload files: parsing (``parser``), the data model (``model``), stage partition."""

from .builder import make_layer, uniform_workload
from .model import (NO_COMM_DP, NO_COMM_TP, POLICIES, Comm, CommGroup, CommType, Header, Layer,
                    Partition, Workload)
from .parser import load_workload, parse_workload_text
from .partition import chunk_bounds, partition, partition_model

__all__ = ["NO_COMM_DP", "NO_COMM_TP", "POLICIES", "Comm", "CommGroup", "CommType", "Header",
           "Layer", "Partition", "Workload", "load_workload", "parse_workload_text",
           "make_layer", "uniform_workload", "chunk_bounds", "partition", "partition_model"]
