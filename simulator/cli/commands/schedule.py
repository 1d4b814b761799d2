"""``pipesim schedule NAME``: print a schedule's per-rank action lists (PyTorch notation).

Shows what the simulator will run before anything is timed, and lets a schedule be exported as
PyTorch's CSV (``--csv``) or as JSON for other tools (``--json``). ``--list`` names every
registered schedule with its bubble formula.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import click

from ...api import simulate
from ...errors import ConfigError
from ...metrics.types import SCHEMA_VERSION
from ...schedules.synthesis.costs import load_stage_costs
from ...preflight import check_actions
from ...schedules import registry
from ...schedules.csv_io import write_schedule_csv
from ...schedules.runtimes import torch_cannot_run_named
from ...schedules.schedule import Schedule
from ...schedules.stage_costs import StageCosts
from ...schedules.validate import validate
from ...schema import schema_of
from ...system.config import load_system
from ...workload.builder import make_layer
from ...workload.chakra_pb import chakra
from ...workload.model import Header, Workload
from ..jsonout import json_option, schema_option, write_json
from ..outputs import check_writable
from ..ticker import ticker
from .run import parse_assignments


@dataclass(frozen=True)
class ScheduleJson:
    """``pipesim schedule NAME --json``: the per-rank action lists."""

    schema_version: str = field(metadata={"help": "version of this JSON's shape"})
    schedule: str = field(metadata={"help": "registered schedule"})
    pp: int = field(metadata={"help": "pipeline ranks"})
    vpp: int = field(metadata={"help": "chunks per rank"})
    microbatches: int = field(metadata={"help": "microbatches per iteration"})
    ranks: tuple[tuple[str, ...], ...] = field(
        metadata={"help": "per rank, its actions in order, e.g. 3F1 (stage, kind, microbatch)"})


def _schema() -> dict:
    return schema_of(ScheduleJson, "pipesim schedule --json")


# What one rank costs this command beyond its actions (its row of the table, its pass of the
# validator), in actions: interleaved-1f1b at pp 100,000, M 1, vpp 3 (600,000 actions) took
# 8-10 s of CPU against 2.7 s for as many actions on 4 ranks, about 70 us a rank, or 16
# actions at 4.5 us each. The larger of this and the schedule's own count is held to the budget.
RANK_WORK = 16

@click.command("schedule")
@click.argument("name", required=False)
@click.option("--pp", type=int, default=None, help="Pipeline ranks P.")
@click.option("--microbatches", "-m", type=int, default=None, help="Microbatches M per iteration.")
@click.option("--vpp", type=int, default=None,
              help="Chunks (virtual stages) per rank v; default: the schedule's own.")
@click.option("--group-size", type=int, default=None,
              help="Microbatch group size N of interleaved schedules (Megatron's rule: "
                   "P <= N <= M, M mod N = 0 or >= P); default: PyTorch's choice.")
@json_option('{"schedule", "pp", "vpp", "microbatches", "ranks"}')
@schema_option(_schema)
@click.option("--option", "-O", "schedule_options", multiple=True, metavar="KEY=VALUE",
              help="A schedule option, as on `pipesim run`: group_size=4 (interleaved), "
              "waves=2 (hanayo), iterations=3 (2bw), max_in_flight=6 (auto); repeatable.")
@click.option("--csv", "csv_path", type=click.Path(dir_okay=False), default=None,
              help="Also write the schedule as PyTorch's CSV (one row per rank).")
@click.option("--stage-costs", type=click.Path(dir_okay=False), default=None,
              help="auto only: costs.yaml {f: [...], i: [...], w: [...], comm: c}, one cost "
                   "per stage (global virtual-stage order); default unit costs.")
@click.option("--max-in-flight", type=int, default=None,
              help="auto only: activations a rank may hold (default P, 1F1B's memory: 2P "
                   "chunk activations with --vpp 2; at least 1, 2 with --vpp 2).")
@click.option("--chakra", "chakra_dir", default=None, metavar="DIR",
              help="Simulate the schedule at unit costs (or --stage-costs), 1 unit = 1 ms, and "
                   "write it as Chakra execution traces for ASTRA-sim 2.0 into DIR (see "
                   "`pipesim run --chakra`); needs pipesim[chakra].")
@click.option("--max-actions", type=click.IntRange(min=0), default=None, metavar="N",
              help="Refuse a schedule of more actions (default 700000, as `pipesim run`; "
                   "0 = no limit).")
@click.option("--list", "list_all", is_flag=True, help="List the registered schedules and exit.")
def command(name, pp, microbatches, vpp, group_size, json_dest, schedule_options, csv_path, stage_costs,
            max_in_flight, list_all, chakra_dir, max_actions) -> None:
    """Print schedule NAME's action list for each rank, e.g. `pipesim schedule 1f1b --pp 4 -m 8`."""
    if list_all:
        _list()
        return
    if name is None:
        raise ConfigError("NAME: expected a schedule name (see `pipesim schedule --list`)")
    for option, value in (("--pp", pp), ("--microbatches", microbatches)):
        if value is None:
            raise ConfigError(f"{option}: required to build schedule {name!r}")
    try:
        spec = registry.get(name)
    except ConfigError:
        raise ConfigError(f"NAME: unknown schedule {name!r}; expected one of: "
                          + ", ".join(sorted(registry.names()))) from None

    options = parse_assignments(schedule_options, "--option")
    if group_size is not None:
        options["group_size"] = group_size
    for option, value, key in (("--stage-costs", stage_costs, "stage_costs"),
                               ("--max-in-flight", max_in_flight, "max_in_flight")):
        if value is not None:
            if key == "stage_costs" and chakra_dir is not None and not spec.needs_costs:
                continue   # the costs of the --chakra run, not of the schedule's making
            if not spec.needs_costs:
                raise ConfigError(f"{option}: only for a synthesized schedule (auto), not "
                                  f"{spec.name}")
            options[key] = value

    if csv_path is not None:   # from the registration: before any size is built
        why = torch_cannot_run_named(spec.name, spec.flushes, spec.shares_weights)
        if why is not None:
            raise ConfigError(f"--csv: {why}, so no CSV is written")
    if pp >= 1 and microbatches >= 1:
        v = spec.default_vpp if vpp is None else vpp
        if v >= 1:
            _, actions = spec.size_of(pp, microbatches, v, options)
            built = spec.work_of(pp, microbatches, v, actions)
            rows = RANK_WORK * pp
            check_actions(spec, pp, microbatches, v, actions, max_actions,
                          work="has up to {actions:,} actions", cost="about 10 s to build",
                          built=max(built, rows),
                          why=(f"each of its {pp:,} ranks costs as much as {RANK_WORK} actions"
                               if rows > built else
                               "its generator grows faster than its actions"))
    check_writable(csv_path, "--csv")
    check_writable(json_dest, "--json")

    # a synthesis (auto) or a big generator can take seconds: a progress line on a terminal
    doing = "synthesizing" if spec.needs_costs else "building"
    with ticker(f"{doing} {spec.name} with pp {pp}, {microbatches} microbatches"):
        sched = registry.generate(name, pp, microbatches, vpp, **options)
    validate(sched)
    if csv_path is not None:
        try:
            write_schedule_csv(sched, csv_path)
        except OSError as err:
            raise ConfigError(f"--csv: cannot write {csv_path}: {err.strerror or err}") from None
    if json_dest is not None:
        write_json({"schema_version": SCHEMA_VERSION, "schedule": sched.name, "pp": sched.pp,
                    "vpp": sched.vpp, "microbatches": sched.microbatches,
                    "ranks": sched.as_strings()}, json_dest, indent=None)
    if json_dest != "-":
        _show(sched)
    if chakra_dir is not None:
        _export_chakra(sched, stage_costs, chakra_dir, json_dest != "-")


UNIT_NS = 1_000_000   # one --stage-costs unit in the --chakra run: 1 ms


def _export_chakra(sched: Schedule, stage_costs: str | None, directory: str, say: bool) -> None:
    """Simulate ``sched`` on one layer per model chunk costing the stage costs (units of 1 ms,
    unit costs without --stage-costs) and write the run as Chakra ETs. A cost ``comm`` > 0 is
    a transfer arriving ``comm`` after it is sent (a 1-byte ``pp_comm`` over a link of that
    latency); 0 moves nothing."""
    from ...export.chakra import write_chakra   # numpy: only with --chakra

    chakra("--chakra")
    n = sched.n_stages
    costs = (load_stage_costs(stage_costs, n) if stage_costs is not None
             else StageCosts.unit(n))
    chunk_stage = {c: s for s, c in reversed(list(enumerate(sched.stage_chunk)))}
    layers = tuple(make_layer(c, round(costs.f[s] * UNIT_NS), round(costs.i[s] * UNIT_NS),
                              round(costs.w[s] * UNIT_NS))
                   for c, s in sorted(chunk_stage.items()))
    comm_ns = round(costs.comm * UNIT_NS)
    header = Header(policy="HYBRID_TRANSFORMER_FWD_IN_BCKWD", tp=1, pp=sched.pp, vpp=sched.vpp,
                    ga=sched.microbatches, all_gpus=sched.pp, pp_comm=1 if comm_ns > 0 else 0)
    system = load_system(None)
    if comm_ns > 0:   # 8e9 Gb/s: the byte itself takes 1e-9 ns
        system = system.with_overrides({"links.bandwidth_gbps": 8e9,
                                        "links.latency_ns": comm_ns}, "--stage-costs")
    wl = Workload(path=stage_costs or "<unit costs>", header=header, layers=layers)
    result = simulate(wl, sched, system)
    written = write_chakra(result, directory)
    if say:
        click.echo(f"{written.line()}; pipesim's makespan {result.makespan_ns:.0f} ns")


def _show(sched: Schedule) -> None:
    click.echo(f"{sched.name}: pp={sched.pp} vpp={sched.vpp} microbatches={sched.microbatches}")
    width = len(str(sched.pp - 1))
    for rank, acts in enumerate(sched.as_strings()):
        click.echo(f"rank {rank:>{width}}: " + " ".join(acts))


def _list() -> None:
    specs = [registry.get(n) for n in sorted(registry.names() + registry.cost_aware_names())]
    width = max(len(s.name) for s in specs)
    for spec in specs:
        aliases = f" (also: {', '.join(spec.aliases)})" if spec.aliases else ""
        click.echo(f"{spec.name:<{width}}  {spec.summary}{aliases}")
        if spec.formula:
            click.echo(f"{'':<{width}}  formula: {spec.formula}")
