"""``pipesim sweep SPEC --out DIR``: run a grid of ``pipesim run`` options into a results table."""

from __future__ import annotations

from pathlib import Path

import click

from ...sweep.executors import DEFAULT_CONNECT_TIMEOUT_S, EXECUTORS
from ...sweep.plots import write_plots
from ...sweep.progress import RichReporter
from ...sweep.runner import run_sweep
from ...sweep.summary_table import render_summary
from ...sweep.table import require_parquet
from ..outputs import check_writable_dir, out_dir_lock


@click.command("sweep")
@click.argument("spec", type=click.Path(dir_okay=False))
@click.option("--out", "-o", "out_dir", required=True, metavar="DIR",
              type=click.Path(file_okay=False),
              help="Folder for results.csv (and results.parquet, the plots).")
@click.option("--jobs", "-j", type=int, default=None,
              help="Parallel workers (default: the CPU count, or the cluster's CPUs); "
                   "with the local executor, 1 runs in this process.")
@click.option("--resume", is_flag=True,
              help="Complete the sweep in --out: run only the points not yet in results.csv.")
@click.option("--executor", type=click.Choice(EXECUTORS), default="local", show_default=True,
              help="Where points run: local processes, a Ray or a Dask cluster.")
@click.option("--address", default=None, metavar="ADDR",
              help="Cluster to use: Ray 'auto', HOST:PORT or ray://HOST:PORT; Dask HOST:PORT "
                   "(default: start a local one).")
@click.option("--connect-timeout", type=float, default=DEFAULT_CONNECT_TIMEOUT_S,
              show_default=True, metavar="SECONDS",
              help="With --address: give up on a cluster that cannot be reached after this long.")
@click.option("--plot", is_flag=True, help="Also draw the plots (PNG) into --out.")
@click.option("--parquet", is_flag=True,
              help="Also write DIR/results.parquet (needs pyarrow: pip install "
                   "'pipesim[parquet]').")
@click.option("--quiet", "-q", is_flag=True, help="No progress bar and no summary.")
@click.option("--strict", is_flag=True,
              help="Record a point whose run has warnings as failed, with the warning.")
@click.option("--max-points", type=click.IntRange(min=0), default=None, metavar="N",
              help="Refuse a spec of more points (default 100000; 0 = no limit).")
def command(spec, out_dir, jobs, resume, executor, address, connect_timeout, plot, parquet,
            quiet, strict, max_points):
    """Run every point of the sweep SPEC (YAML: a base, a grid:, zip: groups, exclude: rules),
    write one row per point to DIR/results.csv (streamed; with --parquet also
    DIR/results.parquet) and print the points, fastest first."""

    check_writable_dir(out_dir, "--out")
    if parquet:
        require_parquet()   # before the points run, not after
    reporter = RichReporter(Path(spec).name, enabled=not quiet)
    try:
        with out_dir_lock(out_dir, "--out"):
            outcome = run_sweep(spec, out_dir, jobs=jobs, resume=resume, executor=executor,
                                address=address, reporter=reporter,
                                connect_timeout=connect_timeout, strict=strict,
                                max_points=max_points, parquet=parquet)
    except KeyboardInterrupt:
        click.echo(f"pipesim sweep: interrupted; the finished points are in {out_dir}/results.csv:"
                   " rerun with --resume to complete the sweep", err=True)
        raise click.exceptions.Abort() from None
    for note in outcome.notes:
        click.echo(f"pipesim: note: {note}", err=True)
    if not quiet:
        ok = outcome.ran - outcome.failed
        before = f"; {outcome.skipped} were already done" if outcome.skipped else ""
        click.echo(f"pipesim sweep: {outcome.ran} of {outcome.points} points run ({ok} ok, "
                   f"{outcome.failed} failed{before}) in {outcome.elapsed_s:.2f} s on "
                   f"{outcome.workers} {executor} worker(s)")
        click.echo(f"  {outcome.csv_path}")
        if outcome.parquet_path is not None:
            click.echo(f"  {outcome.parquet_path}")
        if outcome.first_error:
            click.echo(f"  first failure: {outcome.first_error}")
        click.echo("\n" + render_summary(outcome.table, outcome.spec.keys))
    if plot:
        written = write_plots(outcome.table, outcome.out_dir)
        if not quiet:
            _echo_plots(written)


def _echo_plots(written: list) -> None:
    if not written:
        click.echo("  no plots: the table varies none of microbatches, pp, link bandwidth")
    for path in written:
        click.echo(f"  {path}")
