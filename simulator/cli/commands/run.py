"""``pipesim run WORKLOAD``: simulate one workload under one schedule and report."""

from __future__ import annotations

import click

from ...run_options import click_options
from ..jsonout import json_option, schema_option, write_json
from ..run_impl import LOG_LEVELS, configure_logging, parse_assignments, run

__all__ = ["LOG_LEVELS", "command", "configure_logging", "parse_assignments", "write_json"]


def _run_schema() -> dict:
    from ...metrics.types import run_schema

    schema = run_schema()
    verdict = {"type": "object", "required": ["accepts", "how", "rule"],
               "properties": {"accepts": {"type": "boolean"}, "how": {"type": "string"},
                              "rule": {"type": ["string", "null"]}}}
    schema["properties"]["runtimes"] = {
        "type": "object", "description": "per runtime (torch, megatron, torchtitan): does it "
        "run this configuration, how, or the rule it breaks",
        "properties": {k: verdict for k in ("torch", "megatron", "torchtitan")}}
    return schema


@click.command("run")
@click.argument("workload", type=click.Path(dir_okay=False), required=False, metavar="WORKLOAD")
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
@click.option("--chakra", default=None, metavar="DIR",
              help="Also write the run as Chakra execution traces for ASTRA-sim 2.0 "
                   "(DIR/et.<rank>.et, its network/system configs, a README); needs "
                   "pipesim[chakra].")
@click.option("--chakra-in", default=None, metavar="PREFIX",
              help="Simulate Chakra execution traces PREFIX.<rank>.et (compute, send and "
                   "receive nodes) instead of a WORKLOAD; needs pipesim[chakra].")
@click.option("--launch", default=None, metavar="DIR",
              help="Write the launch settings for Megatron-LM, torchtitan and torch into DIR "
                   "(megatron_args.txt, torchtitan.toml, schedule.csv, stage_ranks.json, "
                   "README.md).")
@click_options(skip=("schedule",))
@click.option("--log-level", type=click.Choice(list(LOG_LEVELS), case_sensitive=False),
              default="warning", show_default=True, help="debug prints every pipeline event.")
def command(workload, schedule, schedule_file, system, calibration, schedule_options,
            system_sets, json_dest, gantt, trace, launch, log_level, chakra, chakra_in,
            **run_options):
    """Simulate WORKLOAD (an ASTRA-sim / SimAI workload file) and report iteration time,
    bubbles, in-flight microbatches and traffic."""
    run(workload, schedule, schedule_file, system, calibration, schedule_options, system_sets,
        json_dest, gantt, trace, log_level, launch=launch, chakra=chakra, chakra_in=chakra_in,
        **run_options)
