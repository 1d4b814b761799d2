"""``pipesim verify NAME``: run a schedule on a small numpy MLP and compare with one device.

Exit 0 when the loss, every parameter gradient and the weights after the SGD step are within
``--tolerance`` (default 1e-10) of single-device training and the executor's activation peaks
equal the simulator's; exit 1 when not (the report still goes to stdout, the reason to stderr);
exit 2/3 when the schedule is refused or deadlocks.
"""

from __future__ import annotations

import click

from ...errors import ConfigError
from ...metrics.types import SCHEMA_VERSION
from ...preflight import check_actions
from ...schedules import registry
from ...schedules.csv_io import load_schedule_csv
from ...schedules.registry import ScheduleSpec
from ...schema import schema_of
from ..jsonout import json_option, schema_option, write_json
from ..outputs import check_writable

ITERATIONS_NO_FLUSH = 4  # minibatches for a schedule without flush: enough to see 1-stale updates
# The most actions x MLP layers per chunk a verify runs unless --max-actions says otherwise: the
# numpy executor costs about 100x the engine per action (about 10 s on a 2-core machine)
VERIFY_MAX_WORK = 50_000


def _schema() -> dict:
    from ...verify.compare import VerifyReport   # numpy: only for --json-schema

    return schema_of(VerifyReport, "pipesim verify --json", extra={
        "schema_version": {"type": "string"},
        "activations_agree": {"type": "boolean", "description": "the executor's activation "
                              "peaks equal the simulator's on every rank"}})


@click.command("verify")
@click.argument("name", required=False)
@click.option("--pp", type=int, default=None, help="Pipeline ranks.")
@click.option("--microbatches", "-m", type=int, default=None,
              help="Microbatches per iteration (per minibatch for 2bw).")
@click.option("--vpp", type=int, default=None, help="Chunks per rank (default: the schedule's).")
@click.option("--schedule-file", type=click.Path(dir_okay=False), default=None,
              help="A PyTorch-style CSV schedule (one row per rank) instead of NAME.")
@click.option("--iterations", type=int, default=None,
              help=f"Minibatches, for schedules without a flush (2bw; default "
                   f"{ITERATIONS_NO_FLUSH}).")
@click.option("--layers", type=int, default=None,
              help="MLP layers (default 2 per model chunk + 1).")
@click.option("--seed", type=int, default=0, show_default=True,
              help="Seed of the widths, weights and data.")
@click.option("--lr", type=float, default=0.1, show_default=True, help="SGD learning rate.")
@click.option("--tolerance", type=float, default=1e-10, show_default=True,
              help="Largest error accepted (absolute and relative).")
@click.option("--no-validate", is_flag=True,
              help="Skip the schedule validator: let the executor find what is wrong.")
@click.option("--max-actions", type=click.IntRange(min=0), default=None, metavar="N",
              help=f"Refuse a run of more actions x MLP layers per chunk (default "
                   f"{VERIFY_MAX_WORK}, about 10 s; 0 = no limit).")
@json_option("the report")
@schema_option(_schema)
def command(name, pp, microbatches, vpp, schedule_file, iterations, layers, seed, lr, tolerance,
            no_validate, max_actions, json_dest):
    """Check that schedule NAME computes the loss and gradients of single-device training."""
    # numpy: when the command runs, not when `pipesim --help` lists it
    from ...verify import VerificationFailed, verify_schedule

    if layers is not None and layers < 1:
        raise ConfigError(f"--layers: expected a positive number of layers, got {layers}")
    if seed < 0:
        raise ConfigError(f"--seed: expected a non-negative integer, got {seed}")
    if tolerance < 0:
        raise ConfigError(f"--tolerance: expected a non-negative number, got {tolerance}")
    check_writable(json_dest, "--json")
    sched = _schedule(name, schedule_file, pp, microbatches, vpp, iterations, not no_validate,
                      layers, max_actions)
    report = verify_schedule(sched, layers=layers, seed=seed, lr=lr, tolerance=tolerance,
                             validate=not no_validate and schedule_file is None)
    if json_dest is not None:
        write_json({**report.to_dict(), "schema_version": SCHEMA_VERSION}, json_dest)
    if json_dest != "-":
        click.echo(render(report))
    if not report.ok:
        raise VerificationFailed(report.failure())


def _check_work(spec, pp, microbatches, vpp, actions, chunks, layers, max_actions) -> None:
    """Refuse a verify whose actions x MLP layers per chunk pass the limit, before any of it
    (the schedule included) is built."""
    from ...verify.model import check_layers   # numpy: when the command runs (as above)

    if layers is not None:
        check_layers(layers, chunks)
    per_chunk = -(-(2 * chunks + 1 if layers is None else layers) // max(1, chunks))
    check_actions(spec, pp, microbatches, vpp, actions * per_chunk, max_actions,
                  limit=VERIFY_MAX_WORK,
                  work=f"and {per_chunk} MLP layer(s) per chunk runs up to {{actions:,}} "
                       "actions x layers", cost="about 10 s")


def _schedule(name, schedule_file, pp, microbatches, vpp, iterations, check, layers=None,
              max_actions=None):
    if schedule_file is not None:
        if name is not None:
            raise ConfigError("NAME and --schedule-file: give one, not both")
        if iterations is not None:
            raise ConfigError("--iterations: a CSV schedule flushes; verify runs it once")

        sched = load_schedule_csv(schedule_file, vpp=vpp, check=check)

        _check_work(ScheduleSpec(str(schedule_file), None, ""), sched.pp, sched.microbatches,
                    sched.vpp, sum(len(r) for r in sched.ranks), sched.n_chunks, layers,
                    max_actions)
        for option, given, found in (("--pp", pp, sched.pp),
                                     ("--microbatches", microbatches, sched.microbatches)):
            if given is not None and given != found:
                raise ConfigError(f"{option}: {given} given, but {schedule_file} has {found}")
        return sched
    if name is None:
        raise ConfigError("expected a schedule NAME (see `pipesim schedule --list`) or "
                          "--schedule-file")
    for option, value in (("--pp", pp), ("--microbatches", microbatches)):
        if value is None:
            raise ConfigError(f"{option}: required with a schedule name")

    spec = registry.get(name)
    options = {}
    if not spec.flushes:   # not auto's iterations: those are its search's moves
        options["iterations"] = ITERATIONS_NO_FLUSH if iterations is None else iterations
    elif iterations is not None:
        raise ConfigError(f"--iterations: {spec.name} flushes every iteration; verify runs "
                          f"one iteration")
    v = spec.default_vpp if vpp is None else vpp
    if min(pp, microbatches, v) >= 1:
        chunks, actions = spec.size_of(pp, microbatches, v, options)
        if spec.work_of(pp, microbatches, v, actions) > actions:   # building it, then the MLP

            check_actions(spec, pp, microbatches, v, actions, max_actions,
                          built=spec.work_of(pp, microbatches, v, actions))
        _check_work(spec, pp, microbatches, v, actions, chunks, layers, max_actions)
    return registry.generate(spec.name, pp, microbatches, vpp, **options)


def render(report) -> str:
    """The human-readable report."""
    r = report
    widths = "-".join(str(w) for w in r.widths)
    lines = [f"verify {r.schedule}: pp {r.pp}, vpp {r.vpp}, {r.microbatches} microbatches"
             + (f" x {r.iterations} minibatches" if r.iterations > 1 else "")
             + f"; {r.layers}-layer tanh MLP (widths {widths}), MSE loss, seed {r.seed}"]
    if r.semantics == "pipedream-2bw":
        lines.append(f"semantics     PipeDream-2BW: minibatch i's gradient at W(max(i-1, 0)); "
                     f"at most {r.peak_weight_versions} weight versions held at once")
    losses = ", ".join(f"{x:.9f}" for x in r.losses)
    lines += [
        f"loss          {losses}; error vs single device {r.loss_error:.1e}",
        f"gradients     max abs error {r.max_abs_grad_error:.1e}, "
        f"max rel error {r.max_rel_grad_error:.1e}",
        f"weights       after SGD: max error {r.max_weight_error:.1e}",
        "activations   rank  executor mb/act  simulator mb/act  stash bytes",
    ]
    for a in r.activations:
        mark = "" if a.agree else "  DIFFERENT"
        lines.append(f"              {a.rank:<4}  {a.executor[0]:>5}/{a.executor[1]:<7}  "
                     f"{a.simulator[0]:>6}/{a.simulator[1]:<8}  {a.peak_bytes:>11}{mark}")
    if r.ok:
        lines.append(f"OK: within {r.tolerance:.0e} of single-device training; activation "
                     f"peaks equal the simulator's")
    return "\n".join(lines)
