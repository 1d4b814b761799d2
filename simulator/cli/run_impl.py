"""``pipesim run`` without click: what the command does, and its command line read for the common
case, so that a plain ``pipesim run FILE [options]`` never imports click.

Start-up is most of a small run's cost and click's import alone is about a tenth of it.
:func:`parse_run_args` reads the arguments the way click reads them for
:mod:`.commands.run` when every one is simple (``--name value``, ``--name=value``, ``-s value``,
a flag, one positional WORKLOAD) and every value is one click would accept; for anything else
(``--help``, ``--json-schema``, an unknown or bad option, a value click would refuse, ``--``,
bundled short flags) it returns None and click parses the line, so every message and exit code
stays click's. Both readers come from one declaration, :data:`RUN_ARGS` (and the RunOptions
fields it places): each option is written once. The equivalence harness
(tests/engine/equivalence.py) checks that the two readings agree.

Fast path `cli_plain_reader` (docs/performance.md, "Fast paths"): it removes 11.5 % of `pipesim
run workloads/gpt-24l.txt`'s whole-process CPU against click's reading.
"""

from __future__ import annotations

import os
import stat
import sys
from typing import NamedTuple

from ..api import simulate
from ..errors import ConfigError
from ..run_options import OPTION_FIELDS, RunOptions, flag_of
from ..schedules.runtimes import check_runtimes, shape_of
from ..system.config import SystemConfig, load_system
from .echo import echo
from .model_inputs import FLAGS as MODEL_FLAGS, RUN_FLAGS
from .report import render_run, render_runtimes
from .ticker import ticker

LOG_LEVELS = ("debug", "info", "warning", "error")


# a NamedTuple, not a dataclass: start-up (simulator/__init__.py)
class Arg(NamedTuple):
    """One option of ``pipesim run``, declared once for both readers (:mod:`.commands.run`
    makes the click option from it). ``kind``: ``option`` (the RunOptions field ``dest``; its
    flags, help and check are the field's), ``options`` (every other RunOptions field, here),
    ``path`` (click.Path(dir_okay=False)), ``str``, ``multi`` (repeatable str), ``json``
    (``--json [PATH|-]``, with ``--json-schema``), ``log_level`` (a choice of LOG_LEVELS)."""

    flags: tuple[str, ...]
    dest: str
    kind: str
    help: str = ""
    metavar: str | None = None


# pipesim run's options, in the order --help lists them
RUN_ARGS = (
    Arg(("--schedule", "-s"), "schedule", "option"),
    Arg(("--schedule-file",), "schedule_file", "path",
        "A PyTorch-style CSV schedule (one row per rank) to simulate instead."),
    Arg(("--system",), "system", "path",
        "System YAML (default: the built-in, configs/system/default.yaml)."),
    Arg(("--option", "-O"), "schedule_options", "multi",
        "A schedule option, e.g. group_size=4 (interleaved), waves=2 (hanayo), iterations=3 "
        "(2bw); repeatable.", "KEY=VALUE"),
    Arg(("--calibration",), "calibration", "path",
        "YAML laid over the system (e.g. fitted runtime: keys and action costs); --set and "
        "flags still win.", "FILE"),
    Arg(("--set",), "system_sets", "multi",
        "Override a system value by dotted path, e.g. links.bandwidth_gbps=100; repeatable.",
        "KEY=VALUE"),
    Arg(("--json",), "json_dest", "json", "the summary"),
    Arg(("--gantt",), "gantt", "path", "Draw a Gantt chart (.png, .svg or .pdf)."),
    Arg(("--trace",), "trace", "path", "Write a Chrome/Perfetto trace (JSON)."),
    Arg(("--chakra",), "chakra", "str",
        "Also write the run as Chakra execution traces for ASTRA-sim 2.0 (DIR/et.<rank>.et, "
        "its network/system configs, a README); needs pipesim[chakra].", "DIR"),
    Arg(("--chakra-collectives",), "chakra_collectives", "str",
        "With --chakra: durations (default: the pipeline's ranks, a DP collective as a node of "
        "the time pipesim priced) or nodes (every NPU of the data-parallel configuration, each "
        "DP collective a COMM_COLL_NODE on its group, with comm_group.json).", "MODE"),
    Arg(("--chakra-in",), "chakra_in", "str",
        "Simulate Chakra execution traces PREFIX.<rank>.et (compute, send and receive nodes) "
        "instead of a WORKLOAD; needs pipesim[chakra].", "PREFIX"),
    Arg(("--launch",), "launch", "str",
        "Write the launch settings for Megatron-LM, torchtitan and torch into DIR "
        "(megatron_args.txt, torchtitan.toml, schedule.csv, stage_ranks.json, README.md).",
        "DIR"),
    Arg((), "", "options"),
    Arg(("--log-level",), "log_level", "log_level", "debug prints every pipeline event."),
) + tuple(   # instead of WORKLOAD: a model input (declared in .model_inputs)
    Arg(f.flags, f.dest, f.kind if f.kind in ("int", "path") else "str",
        f.help + (f" One of {', '.join(f.choices)}." if f.choices else ""), f.metavar)
    for f in MODEL_FLAGS if f.dest in RUN_FLAGS)
_DEFAULTS = {"schedule_options": (), "system_sets": (), "log_level": "warning"}
_KIND_OF_RUN_OPTION = {"positive": "int", "non_negative": "int", "positive_number": "float",
                       "non_negative_number": "float", "bool": "flag", "choice": "choice"}


def _option_entry(f) -> tuple[tuple[str, ...], str, tuple]:
    """(flags, reader kind, choices) of RunOptions field ``f``."""
    meta = f.metadata
    kind = "multi" if meta["multiple"] else _KIND_OF_RUN_OPTION.get(meta["kind"], "str")
    return tuple(n for n in (flag_of(f), meta["short"]) if n), kind, meta["choices"]


def _table() -> tuple[dict[str, tuple[str, str, tuple]], dict[str, object]]:
    """flag -> (keyword, kind, choices), and every keyword's default (click's defaults)."""
    flags: dict[str, tuple[str, str, tuple]] = {}
    defaults: dict[str, object] = {}
    by_name = {f.name: f for f in OPTION_FIELDS}
    declared = {a.dest for a in RUN_ARGS if a.kind == "option"}
    for arg in RUN_ARGS:
        if arg.kind in ("option", "options"):
            for f in ([by_name[arg.dest]] if arg.kind == "option" else
                      [f for f in OPTION_FIELDS if f.name not in declared]):
                names, kind, choices = _option_entry(f)
                for name in names:
                    flags[name] = (f.name, kind, choices)
                defaults[f.name] = () if kind == "multi" else False if kind == "flag" \
                    else f.default
            continue
        for name in arg.flags:
            flags[name] = (arg.dest, arg.kind, LOG_LEVELS if arg.kind == "log_level" else ())
        defaults[arg.dest] = _DEFAULTS.get(arg.dest)
    return flags, defaults


def _value(kind: str, text: str, choices: tuple) -> tuple[bool, object]:
    """(True, the value click would give) or (False, None) when click must judge ``text``."""
    if kind in ("str", "multi", "json"):
        return True, text
    if kind == "int" or kind == "float":
        try:
            return True, int(text) if kind == "int" else float(text)
        except ValueError:
            return False, None
    if kind == "choice" or kind == "log_level":
        return text in choices, text          # other spellings (LOG-LEVEL case): click's call
    # path: click.Path(dir_okay=False) refuses a directory or an unreadable file
    try:
        st = os.stat(text)
    except OSError:
        return True, text
    except ValueError:        # a NUL in the name: click's own handling
        return False, None
    return not stat.S_ISDIR(st.st_mode) and os.access(text, os.R_OK), text


def parse_run_args(args: list[str]) -> dict[str, object] | None:
    """The keyword arguments click would pass to ``pipesim run``'s callback for ``args`` (what
    follows ``run``), or None when click must read them (see the module's docstring)."""
    flags, values = _table()
    multi: dict[str, list] = {}
    workload = None
    i, n = 0, len(args)
    while i < n:
        arg = args[i]
        i += 1
        if arg[:1] != "-":
            if workload is not None:
                return None       # an extra argument: click's message
            workload = arg
            continue
        name, eq, text = arg.partition("=") if arg[:2] == "--" else (arg, "", "")
        entry = flags.get(name)
        if entry is None:
            return None           # --help, --json-schema, "-", "--", -sVALUE, a typo ...
        dest, kind, choices = entry
        if kind == "flag":
            if eq:
                return None
            values[dest] = True
            continue
        if eq:
            if kind == "json" and text[:1] == "-" and len(text) > 1:
                return None
        elif kind == "json":      # a bare --json (before another option, or last) means "-"
            if i < n and (args[i][:1] != "-" or args[i] == "-"):
                text = args[i]
                i += 1
            else:
                text = "-"
        else:
            if i >= n or args[i][:1] == "-":
                return None       # a missing value, or one that looks like an option
            text = args[i]
            i += 1
        ok, value = _value(kind, text, choices)
        if not ok:
            return None
        if kind == "multi":
            multi.setdefault(dest, []).append(value)
        else:
            values[dest] = value
    if workload is None:
        return None       # (--chakra-in without a workload goes through click too)
    ok, workload = _value("path", workload, ())
    if not ok:
        return None
    for dest, items in multi.items():
        values[dest] = tuple(items)
    values["workload"] = workload
    return values


def configure_logging(level: str) -> None:
    """The ``pipesim`` logger at ``level``, writing to stderr. The engine's event lines are its
    only messages, all at DEBUG: any other level with ``logging`` not imported yet (so nothing
    set a level before) needs no set-up, and the run does not import it (start-up)."""
    if level.lower() != "debug" and "logging" not in sys.modules:
        return
    import logging   # for --log-level debug only (start-up)

    class _StderrHandler(logging.Handler):
        """Writes to whatever ``sys.stderr`` is at the time (safe under test capture)."""

        def emit(self, record: logging.LogRecord) -> None:
            sys.stderr.write(self.format(record) + "\n")

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


def run(workload, schedule, schedule_file, system, calibration, schedule_options,
        system_sets, json_dest, gantt, trace, log_level, launch=None, chakra=None,
        chakra_collectives=None, chakra_in=None, **run_options) -> None:
    """What ``pipesim run`` does once its arguments are read (by click or by
    :func:`parse_run_args`)."""
    model_values = {k: run_options.pop(k, None) for k in RUN_FLAGS}
    opts = RunOptions.from_values(run_options)
    model = None
    if any(v is not None for v in model_values.values()):
        from .model_inputs import launch_system, model_run

        # the system names the GPU the model is priced on; read once, used for the run too
        builtin = system is None and not system_sets
        system = load_system(system)
        named = (system.with_overrides(parse_assignments(system_sets, "--set"), "--set")
                 if system_sets else system)
        workload, opts, schedule, model = model_run(workload, model_values, opts, schedule,
                                                    named.gpu.preset, builtin)
        if not (system_sets and "topology.order" in parse_assignments(system_sets, "--set")):
            system, model = launch_system(system, model)   # a --set order is the user's
        if model.launch.schedule_csv and schedule is None and schedule_file is None:
            schedule_file = model.launch.schedule_csv   # torchtitan's pipeline_parallel_schedule_csv
    configure_logging(log_level)
    if gantt or trace or json_dest:
        from .outputs import check_writable   # only with an output file: start-up

        check_writable(gantt, "--gantt", make_folder=True)
        for path, option in ((trace, "--trace"), (json_dest, "--json")):
            check_writable(path, option)
    # the exporters, readers and optional packages below load only with their option: a plain
    # run's start-up does without them
    if gantt:
        from ..export.gantt import gantt_format

        gantt_format(gantt)  # a bad extension is refused before the run, not after it
    if chakra_collectives is not None:
        from ..export.chakra import COLLECTIVE_MODES

        if chakra is None:
            raise ConfigError("--chakra-collectives: needs --chakra DIR (where the traces go)")
        if chakra_collectives not in COLLECTIVE_MODES:
            raise ConfigError(f"--chakra-collectives: expected one of "
                              f"{', '.join(COLLECTIVE_MODES)}, got {chakra_collectives!r}")
    if chakra is not None:
        from ..workload.chakra_pb import chakra as load_chakra

        load_chakra("--chakra")   # a missing mlc-chakra is said before the run, not after it
    sched = schedule
    link_sets: dict = {}
    if chakra_in is not None:
        if workload is not None or schedule is not None or schedule_file is not None:
            raise ConfigError("--chakra-in: the traces are the workload and the schedule; give "
                              "no WORKLOAD, --schedule or --schedule-file with it")
        from ..schedules.chakra_in import read_chakra

        imported = read_chakra(chakra_in)
        workload, sched, link_sets = imported.workload, imported.schedule, imported.links
    elif workload is None:
        raise ConfigError("Missing argument 'WORKLOAD'.")   # click's words (or --chakra-in)
    if schedule_file is not None:
        if schedule is not None:
            raise ConfigError("--schedule and --schedule-file: give one, not both")
        from ..schedules.csv_io import load_schedule_csv

        sched = load_schedule_csv(schedule_file)
    options = parse_assignments(schedule_options, "--option")
    if model is not None and sched == "zb-greedy" and model.launch.zero_bubble_max_pending:
        # the zero-bubble fork's --zero-bubble-max-pending-backward, unless -O gives its own
        options = {"max_pending": model.launch.zero_bubble_max_pending, **(options or {})}
    if calibration is not None or system_sets or link_sets:
        if not isinstance(system, SystemConfig):
            system = load_system(system)
        if link_sets:   # the imported traces' own links, under --calibration and --set
            system = system.with_overrides(link_sets, "--chakra-in")
        if calibration is not None:
            from ..system.overlay import apply_calibration

            system = apply_calibration(system, calibration)
        if system_sets:
            system = system.with_overrides(parse_assignments(system_sets, "--set"), "--set")
    # a synthesis (auto) can take most of the run: the line says so
    label = f"simulating {chakra_in or workload}"
    if isinstance(sched, str) and sched == "auto":
        label = f"synthesizing auto and {label}"
    with ticker(label):
        result = simulate(workload, sched, system, opts._replace(
            schedule_options=options, trace_layers=trace is not None, gantt=bool(gantt)))
    if model is not None:
        from .model_inputs import run_warnings

        result.warnings[:0] = run_warnings(model)
        result.notes[:0] = list(model.notes)
    if gantt:
        from ..export.gantt import write_gantt

        write_gantt(result, gantt)
    if trace:
        from ..export.perfetto import write_trace

        write_trace(result, trace)
    if chakra is not None:
        from ..export.chakra import write_chakra

        written = write_chakra(result, chakra, collectives=chakra_collectives or "durations")
        if json_dest != "-":
            echo(written.line())
    verdicts = check_runtimes(shape_of(result.schedule, result.workload, result.partition,
                                       options))
    if launch:
        from ..export.launch import write_launch

        write_launch(launch, result, recompute=opts.recompute, options=options,
                     recompute_grouping=opts.recompute_grouping(),
                     command=None, **({} if model is None else {
                         "micro_batch_size": model.launch.micro_batch, "model": model.shape,
                         "settings": model.launch}))
    if json_dest:
        from .jsonout import write_json   # only with --json: start-up

        data = result.to_dict()
        data["runtimes"] = {k: v.to_dict() for k, v in verdicts.items()}
        write_json(data, json_dest)
    if json_dest == "-":     # stdout holds the JSON and nothing else
        return
    echo(render_run(result.summary))
    echo(render_runtimes(verdicts))
    if launch:
        echo(f"launch settings: {launch}/ (README.md says what each file is)")
