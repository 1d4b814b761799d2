"""``pipesim plot DIR``: draw a finished sweep's plots (PNG) into DIR."""

from __future__ import annotations

import click

from ...sweep.plots import write_plots
from ...sweep.table import read_table
from .sweep import _echo_plots


@click.command("plot")
@click.argument("out_dir", metavar="DIR", type=click.Path(file_okay=False))
def command(out_dir):
    """Plot the sweep results in DIR (results.parquet or results.csv): bubble ratio vs
    microbatches beside the closed form, makespan vs pp, makespan vs link bandwidth -- each
    only when the table varies that parameter."""
    _echo_plots(write_plots(read_table(out_dir), out_dir))
