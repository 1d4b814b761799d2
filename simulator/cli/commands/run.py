"""``pipesim run WORKLOAD``: simulate one workload under one schedule and report."""

from __future__ import annotations

import logging
import sys

import click

from ...errors import ConfigError
from ...run_options import RunOptions, click_options
from ..jsonout import json_option, schema_option, write_json

LOG_LEVELS = ["debug", "info", "warning", "error"]


def _run_schema() -> dict:
    from ...metrics.types import run_schema

    return run_schema()


class _StderrHandler(logging.Handler):
    """Writes to whatever ``sys.stderr`` is at the time (safe under test capture)."""

    def emit(self, record: logging.LogRecord) -> None:
        sys.stderr.write(self.format(record) + "\n")


def configure_logging(level: str) -> None:
    handler = _StderrHandler()
    handler.setFormatter(logging.Formatter("%(message)s"))
    logger = logging.getLogger("pipesim")
    logger.handlers[:] = [handler]
    logger.setLevel(getattr(logging, level.upper()))


def parse_assignments(items: tuple[str, ...], option: str) -> dict[str, object]:
    """``("group_size=4", "name=x")`` -> ``{"group_size": 4, "name": "x"}`` (numbers parsed)."""
    out: dict[str, object] = {}
    for item in items:
        key, sep, text = item.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"{option}: expected KEY=VALUE, got {item!r}")
        value: object = text
        for cast in (int, float):
            try:
                value = cast(text)
                break
            except ValueError:
                continue
        out[key.strip()] = value
    return out


@click.command("run")
@click.argument("workload", type=click.Path(dir_okay=False))
@click.option("--schedule", "-s", default=None, help="Registered schedule (see `pipesim schedule --list`); "
              "default 1f1b, or interleaved-1f1b when vpp > 1.")
@click.option("--schedule-file", type=click.Path(dir_okay=False), default=None,
              help="A PyTorch-style CSV schedule (one row per rank) to simulate instead.")
@click.option("--system", type=click.Path(dir_okay=False), default=None,
              help="System YAML (default: the built-in, configs/system/default.yaml).")
@click.option("--option", "-O", "schedule_options", multiple=True, metavar="KEY=VALUE",
              help="A schedule option, e.g. group_size=4 (interleaved), waves=2 (hanayo), "
              "iterations=3 (2bw); repeatable.")
@click.option("--calibration", type=click.Path(dir_okay=False), default=None, metavar="FILE",
              help="YAML laid over the system (e.g. fitted runtime: keys and action costs); "
              "--set and flags still win.")
@click.option("--set", "system_sets", multiple=True, metavar="KEY=VALUE",
              help="Override a system value by dotted path, e.g. links.bandwidth_gbps=100; "
              "repeatable.")
@json_option("the summary")
@schema_option(_run_schema)
@click.option("--gantt", type=click.Path(dir_okay=False), default=None,
              help="Draw a Gantt chart (.png, .svg or .pdf).")
@click.option("--trace", type=click.Path(dir_okay=False), default=None,
              help="Write a Chrome/Perfetto trace (JSON).")
@click_options(skip=("schedule",))
@click.option("--log-level", type=click.Choice(LOG_LEVELS, case_sensitive=False), default="warning",
              show_default=True, help="debug prints every pipeline event.")
def command(workload, schedule, schedule_file, system, calibration, schedule_options,
            system_sets, json_dest, gantt, trace, log_level, **run_options):
    """Simulate WORKLOAD (an ASTRA-sim / SimAI workload file) and report iteration time,
    bubbles, in-flight microbatches and traffic."""
    from ...api import simulate

    opts = RunOptions.from_values(run_options)
    configure_logging(log_level)
    if gantt:
        from ...export.gantt import gantt_format

        gantt_format(gantt)  # a bad extension is refused before the run, not after it
    sched = schedule
    if schedule_file is not None:
        if schedule is not None:
            raise ConfigError("--schedule and --schedule-file: give one, not both")
        from ...schedules.csv_io import load_schedule_csv

        sched = load_schedule_csv(schedule_file)
    options = parse_assignments(schedule_options, "--option")
    if calibration is not None or system_sets:
        from ...system.config import load_system

        system = load_system(system)
        if calibration is not None:
            from ...system.overlay import apply_calibration

            system = apply_calibration(system, calibration)
        if system_sets:
            system = system.with_overrides(parse_assignments(system_sets, "--set"), "--set")
    from ..ticker import ticker

    with ticker(f"simulating {workload}"):
        result = simulate(workload, sched, system, trace_layers=trace is not None,
                          schedule_options=options, **opts.simulate_kwargs())
    if gantt:
        from ...export.gantt import write_gantt

        write_gantt(result, gantt)
    if trace:
        from ...export.perfetto import write_trace

        write_trace(result, trace)
    if json_dest:
        write_json(result.to_dict(), json_dest)
    if json_dest == "-":     # stdout holds the JSON and nothing else
        return
    from ..report import render_run

    click.echo(render_run(result.summary))
