"""``pipesim compare WORKLOAD --schedules a,b,c``: several schedules on one workload and system.

Prints one row per schedule (iteration time, bubble ratio simulated and closed form, peak
in-flight microbatches, peak memory, p2p traffic, speed-up over the first that ran); a schedule
that cannot run with the given P/M/v says why in its row. ``NAME:V`` gives a schedule its own
virtual-stage count; a common ``--vpp`` reaches only the schedules that interleave
(:func:`simulator.api.compare_vpp`), and a line says which. ``--json -`` prints the rows as a
JSON list and nothing else; ``--gantt`` draws the schedules' Gantt charts stacked on one time
axis.
"""

from __future__ import annotations


import click

from ...api import compare, interleaves
from ...errors import ConfigError
from ...export.compare import (baseline, compare_schema, label, parse_schedule_entries,
                               render_table, render_warnings, rows, run_label, speedup,
                               vpp_note)
from ...export.gantt import comparison_title, gantt_format, write_comparison
from ...run_options import RunOptions, click_options
from ...schedules import registry
from ..jsonout import json_option, schema_option, write_json
from ..model_inputs import RUN_FLAGS, click_options as model_options
from ..outputs import check_writable


def _interleaving() -> list[str]:
    """The registered schedules a common --vpp reaches."""
    return [n for n in sorted(registry.names()) if interleaves(registry.get(n))]


def _schema() -> dict:
    return compare_schema()


@click.command("compare")
@click.argument("workload", type=click.Path(dir_okay=False), required=False)
@click.option("--schedules", "-s", "schedules", required=True, metavar="A,B:V,C",
              help="Comma-separated registered schedules (see `pipesim schedule --list`), each "
                   "optionally with its own virtual stages per rank (interleaved-1f1b:2); "
                   "speed-ups are over the first. --vpp reaches only the schedules that "
                   "interleave (interleaved-1f1b, looped-bfs, hanayo): zb-h1:2 asks for the "
                   "interleaved zero-bubble schedule.")
@click.option("--system", type=click.Path(dir_okay=False), default=None,
              help="System YAML (default: the built-in, configs/system/default.yaml).")
@click.option("--gantt", type=click.Path(dir_okay=False), default=None,
              help="Draw the Gantt charts, one per schedule on a shared time axis "
                   "(.png, .svg or .pdf).")
@json_option("the rows (a list)")
@schema_option(_schema)
@click_options(skip=("schedule",))
@model_options(RUN_FLAGS)
def command(workload, schedules, system, gantt, json_dest, **run_options):
    """Run the schedules on WORKLOAD (or the model of --hf-config / --megatron-args /
    --torchtitan / the shape flags) with the same P, M and system, and compare them."""

    entries = parse_schedule_entries(schedules)
    names = [label(n, v) for n, v in entries]
    vpp = run_options.get("vpp")
    if vpp is not None and not any(v is None and interleaves(registry.get(n))
                                   for n, v in entries):
        takes = next((n for n, _ in entries if registry.get(n).variable_vpp), None)
        raise ConfigError(f"--vpp {vpp}: none of {', '.join(names)} interleaves (--vpp reaches "
                          f"{', '.join(_interleaving())})"
                          + (f"; give a schedule its own count instead, e.g. {takes}:{vpp}"
                             if takes else ""))
    model_values = {k: run_options.pop(k) for k in RUN_FLAGS}
    opts = RunOptions.from_values(run_options)
    model = None
    if any(v is not None for v in model_values.values()):
        from ..model_inputs import launch_system, model_run

        from ...system.config import load_system

        builtin = system is None
        system = load_system(system)   # it names the model's GPU; read once, run on it too
        workload, opts, _, model = model_run(workload, model_values, opts, entries[0][0],
                                             system.gpu.preset, builtin)
        system, model = launch_system(system, model)
    elif workload is None:
        raise ConfigError("Missing argument 'WORKLOAD' (or a model input: --hf-config, "
                          "--megatron-args, --torchtitan, --model)")
    if gantt:
        gantt_format(gantt)          # a bad extension fails before anything runs

    check_writable(gantt, "--gantt", make_folder=True)
    check_writable(json_dest, "--json")
    runs = compare(workload, entries, system, opts._replace(gantt=bool(gantt)))
    if model is not None:
        from ..model_inputs import run_warnings

        for r in runs:
            if r.result is not None:
                r.result.warnings[:0] = run_warnings(model)
                r.result.notes[:0] = list(model.notes)
    table = rows(runs)
    done = [r for r in runs if r.result is not None]
    if gantt and done:
        base = baseline(runs)
        titles = [comparison_title(r.result, speedup(r, base) if r is not base else None,
                                   run_label(base)) for r in done]
        write_comparison([r.result for r in done], gantt, titles)
    if json_dest:
        write_json(table, json_dest)
    if json_dest != "-":     # with '-', stdout holds the JSON and nothing else
        first = done[0].result.schedule if done else None
        where = f", P={first.pp}, M={first.microbatches}" if first is not None else ""
        name = workload if isinstance(workload, str) else workload.path
        click.echo(f"pipesim compare: {name}{where}\n")
        click.echo(render_table(table))
        note = vpp_note(runs, vpp)
        if note:
            click.echo("\n" + note)
        warned = render_warnings(table)
        if warned:
            click.echo("\n" + warned)
    if not done:
        raise ConfigError("--schedules: none of " + ", ".join(names) + " could run; each "
                          "row says why")
