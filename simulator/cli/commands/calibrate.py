"""``pipesim calibrate TRACE... --workload W.txt -o calib.yaml``: fit a runtime calibration to
PyTorch profiler traces (one per rank; folders are read for ``*.json`` / ``*.json.gz``).

Prints the fit (per rank: measured vs replayed busy, idle and end time) and writes the YAML
fragment ``pipesim run W.txt -s SCHEDULE --vpp V --calibration calib.yaml`` applies; without
``-o`` the YAML goes to stdout and the fit to stderr. Bad traces or a workload they do not fit:
one line, exit 2.
"""

from __future__ import annotations

import click

from ...calibration.fit import calibrate
from ...errors import ConfigError
from ..outputs import check_writable


@click.command("calibrate")
@click.argument("traces", nargs=-1, type=click.Path())
@click.option("--workload", "-w", required=True, type=click.Path(dir_okay=False),
              help="The workload file the traced run computes (its P and M must be the traces').")
@click.option("--output", "-o", type=click.Path(dir_okay=False), default=None,
              help="Write the calibration YAML here (default: stdout, the fit to stderr).")
@click.option("--label-pattern", default=None, metavar="REGEX",
              help="Your own compute labels: a regex with named groups kind (F/B/I/W) and mb, "
                   "and stage unless the stage is the rank (e.g. Schedule1F1B, which labels "
                   "nothing).")
@click.option("--memory/--no-memory", default=None,
              help="Fit the memory model to the allocator's [memory] events too (default: "
                   "where every trace has them; --memory requires them).")
def command(traces, workload, output, label_pattern, memory):
    """Fit per-action costs, overheads and transfer parameters (and memory) to profiler
    traces. Two folders, a multi-stage schedule's traces and gpipe's or 1f1b's, fit each
    torch runtime's transfer figures on its own (the first gives the compute)."""
    if not traces:
        raise ConfigError("calibrate: expected one profiler trace per pipeline rank (files or "
                          "a folder), got none")

    check_writable(output, "--output")
    cal = calibrate(traces, workload, label_pattern=label_pattern, memory=memory)
    text = cal.to_yaml()
    if output is None:
        click.echo(cal.report(), err=True)
        click.echo(text, nl=False)
        return
    try:
        with open(output, "w") as fh:
            fh.write(text)
    except OSError as e:
        raise ConfigError(f"--output: cannot write {output} ({e.strerror})") from None
    click.echo(cal.report())
    click.echo(f"wrote {output}: pipesim run {workload} -s {_name(cal)} --vpp {cal.vpp} "
               f"--calibration {output}")


def _name(cal) -> str:
    return cal.schedule if cal.schedule != "trace" else "SCHEDULE"
