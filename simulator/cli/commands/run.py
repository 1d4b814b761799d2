"""``pipesim run WORKLOAD``: simulate one workload under one schedule and report.

The options are declared once, in :data:`~simulator.cli.run_impl.RUN_ARGS` (which the plain
reader reads too); this module makes them click options."""

from __future__ import annotations

from typing import Callable

import click

from ...metrics.types import run_schema
from ...run_options import OPTION_FIELDS, click_option_of
from ..jsonout import json_option, schema_option, write_json
from ..run_impl import Arg, LOG_LEVELS, RUN_ARGS, configure_logging, parse_assignments, run

__all__ = ["LOG_LEVELS", "command", "configure_logging", "parse_assignments", "write_json"]


def _run_schema() -> dict:
    schema = run_schema()
    verdict = {"type": "object", "required": ["accepts", "how", "rule"],
               "properties": {"accepts": {"type": "boolean"}, "how": {"type": "string"},
                              "rule": {"type": ["string", "null"]}}}
    schema["properties"]["runtimes"] = {
        "type": "object", "description": "per runtime (torch, megatron, torchtitan): does it "
        "run this configuration, how, or the rule it breaks",
        "properties": {k: verdict for k in ("torch", "megatron", "torchtitan")}}
    return schema


def _click_options(arg: Arg) -> list[Callable]:
    """The click option(s) of one declared argument, in --help order."""
    if arg.kind == "option":
        return [click_option_of(next(f for f in OPTION_FIELDS if f.name == arg.dest))]
    if arg.kind == "options":
        declared = {a.dest for a in RUN_ARGS if a.kind == "option"}
        return [click_option_of(f) for f in OPTION_FIELDS if f.name not in declared]
    if arg.kind == "json":
        return [json_option(arg.help), schema_option(_run_schema)]
    if arg.kind == "log_level":
        return [click.option(*arg.flags, arg.dest, type=click.Choice(list(LOG_LEVELS),
                             case_sensitive=False), default="warning", show_default=True,
                             help=arg.help)]
    kw: dict = {"help": arg.help, "metavar": arg.metavar}
    if arg.kind == "path":
        kw.update(type=click.Path(dir_okay=False), default=None)
    elif arg.kind == "int":
        kw.update(type=int, default=None)
    elif arg.kind == "multi":
        kw.update(multiple=True)
    else:
        kw.update(default=None)
    return [click.option(*arg.flags, arg.dest, **kw)]


def _declared(fn: Callable) -> Callable:
    for deco in reversed([d for arg in RUN_ARGS for d in _click_options(arg)]):
        fn = deco(fn)
    return fn


@click.command("run")
@click.argument("workload", type=click.Path(dir_okay=False), required=False, metavar="WORKLOAD")
@_declared
def command(workload, **kwargs):
    """Simulate WORKLOAD (an ASTRA-sim / SimAI workload file) and report iteration time,
    bubbles, in-flight microbatches and traffic."""
    run(workload=workload, **kwargs)
