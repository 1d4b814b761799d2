"""``pipesim run WORKLOAD``: simulate one workload under one schedule and report."""

from __future__ import annotations

import logging
import sys

import click

from ...errors import ConfigError
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
@click.option("--pp", type=int, default=None, help="Pipeline stages (overrides the header's pp).")
@click.option("--microbatches", "-m", type=int, default=None,
              help="Microbatches per iteration (overrides the header's ga).")
@click.option("--vpp", type=int, default=None, help="Virtual stages (chunks) per rank.")
@click.option("--iterations", type=int, default=1, show_default=True)
@click.option("--layout", type=click.Choice(["auto", "model", "aicb"]), default="auto",
              show_default=True, help="How to read the rows: the whole model once, or an AICB stage trace.")
@json_option("the summary")
@schema_option(_run_schema)
@click.option("--gantt", type=click.Path(dir_okay=False), default=None,
              help="Draw a Gantt chart (.png, .svg or .pdf).")
@click.option("--trace", type=click.Path(dir_okay=False), default=None,
              help="Write a Chrome/Perfetto trace (JSON).")
@click.option("--p2p", type=click.Choice(["async", "blocking", "batched", "torch", "torch-single",
              "torch-multi"]), default=None, help="Point-to-point semantics: isend/irecv, blocking "
              "send/recv (document 001's naive order), Megatron's batched send/recv pairs, or "
              "torch's runtimes (docs/model.md). Default: the system's runtime.p2p, else async.")
@click.option("--memory-limit", type=float, default=None, metavar="GB",
              help="Per-GPU memory in GB (10^9 bytes); an overflow is reported as out of memory.")
@click.option("--jitter", type=float, default=0.0, metavar="SIGMA",
              help="Scale compute times by seeded lognormal noise with this sigma (mean 1).")
@click.option("--seed", type=int, default=0, show_default=True, help="Seed for --jitter.")
@click.option("--slow-rank", "slow_rank", multiple=True, metavar="R:FACTOR",
              help="Make rank R's compute FACTOR times slower (repeatable).")
@click.option("--layer-by-layer", is_flag=True, default=False,
              help="Reference path: one simulation event per layer state instead of per action "
              "(slower; same timeline).")
@click.option("--engine", type=click.Choice(["simpy", "evaluator"]), default="simpy",
              show_default=True, help="simpy: the event-driven engine; evaluator: the exact "
              "critical-path sweep (same timeline, faster; falls back to simpy with a note "
              "where it does not apply).")
@click.option("--pp-comm", "pp_comm", type=click.IntRange(min=0), default=None, metavar="BYTES",
              help="Bytes one microbatch sends between adjacent stages (overrides the file's "
              "pp_comm; when the file has none it is derived from the rows, with a warning).")
@click.option("--gpus", type=click.IntRange(min=1), default=None, metavar="N",
              help="World size; DP = N / (TP x PP) must be whole (default: the header's "
              "all_gpus).")
@click.option("--dp", type=click.IntRange(min=1), default=None, metavar="D",
              help="Data-parallel size instead of --gpus.")
@click.option("--max-actions", type=click.IntRange(min=0), default=None, metavar="N",
              help="Refuse a run with more actions than N before building it (default "
              "700000, about 10 s; 0 = no limit).")
@click.option("--strict", is_flag=True, default=False,
              help="Treat every warning as an error (exit 2): no number pipesim cannot stand "
              "behind.")
@click.option("--log-level", type=click.Choice(LOG_LEVELS, case_sensitive=False), default="warning",
              show_default=True, help="debug prints every pipeline event.")
def command(workload, schedule, schedule_file, system, calibration, schedule_options,
            system_sets, pp, microbatches, vpp, iterations, layout,
            json_dest, gantt, trace, p2p, memory_limit, jitter, seed, slow_rank, layer_by_layer,
            engine, pp_comm, gpus, dp, max_actions, strict, log_level):
    """Simulate WORKLOAD (an ASTRA-sim / SimAI workload file) and report iteration time,
    bubbles, in-flight microbatches and traffic."""
    from ...api import simulate
    from ...engine.options import parse_slow_rank

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
    slow: dict[int, float] = {}
    for text in slow_rank:
        r, f = parse_slow_rank(text)
        slow[r] = slow.get(r, 1.0) * f
    from ..ticker import ticker

    with ticker(f"simulating {workload}"):
        result = simulate(workload, sched, system, pp=pp, microbatches=microbatches, vpp=vpp,
                          iterations=iterations, layout=layout, trace_layers=trace is not None,
                          schedule_options=options,
                          p2p=p2p, memory_limit_gb=memory_limit, jitter=jitter, seed=seed,
                          slow_ranks=slow, layer_by_layer=layer_by_layer, engine=engine,
                          pp_comm=pp_comm, gpus=gpus, dp=dp, max_actions=max_actions,
                          strict=strict)
    data = result.to_dict()
    if gantt:
        from ...export.gantt import write_gantt

        write_gantt(result, gantt)
    if trace:
        from ...export.perfetto import write_trace

        write_trace(result, trace)
    if json_dest == "-":
        write_json(data, "-")
        return
    if json_dest:
        write_json(data, json_dest)
    from ..report import render_run

    click.echo(render_run(result.summary))
