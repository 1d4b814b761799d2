"""Batch parameter sweeps: a YAML grid of ``pipesim run`` options, run in parallel (local
processes, Ray or Dask), streamed into a resumable results table, plotted.

``run_sweep(spec_path, out_dir, jobs=..., resume=..., executor=...)`` is what ``pipesim sweep``
calls; ``load_spec`` / ``expand`` give the points without running them.
"""

from .points import Point, expand
from .runner import SweepOutcome, run_sweep, table_columns
from .spec import SweepSpec, load_spec, spec_from_dict
from .table import read_table

__all__ = ["run_sweep", "SweepOutcome", "load_spec", "spec_from_dict", "SweepSpec", "Point",
           "expand", "read_table", "table_columns"]
