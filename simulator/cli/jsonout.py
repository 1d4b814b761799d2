"""The JSON side of every command: ``--json [PATH|-]`` (a bare ``--json`` means stdout, and then
nothing else is printed) and ``--json-schema`` (print the command's JSON Schema and exit)."""

from __future__ import annotations

import json   # this module is imported only when JSON is asked for, or by click's commands
from typing import Any, Callable

from ..errors import ConfigError
from .echo import echo

SCHEMA_VERSION = "2"


def json_option(what: str) -> Callable:
    import click  # declaring an option only: a plain `pipesim run` runs without click

    return click.option(
        "--json", "json_dest", is_flag=False, flag_value="-", default=None, metavar="[PATH|-]",
        help=f"Write {what} as JSON to PATH; a bare --json (or '-') prints it to stdout and "
             "nothing else.")


def schema_option(schema: Callable[[], dict]) -> Callable:
    import click  # declaring an option only: a plain `pipesim run` runs without click

    def show(ctx: click.Context, _param: Any, value: bool) -> None:
        if value and not ctx.resilient_parsing:
            click.echo(json.dumps(schema(), indent=2))
            ctx.exit(0)

    return click.option("--json-schema", is_flag=True, expose_value=False, is_eager=True,
                        callback=show, help="Print the JSON Schema of --json's output and exit.")


def write_json(data: Any, dest: str, indent: int | None = 2) -> None:
    text = json.dumps(data, indent=indent, default=str)
    if dest == "-":
        echo(text)
        return
    try:
        with open(dest, "w") as fh:
            fh.write(text + "\n")
    except OSError as err:
        raise ConfigError(f"--json: cannot write {dest}: {err.strerror or err}") from None
