"""``pipesim`` entry point. Each sub-command is a module in ``commands/`` exposing ``command``
(a click command); modules are found by name, so adding a command is adding a file.

User errors (:class:`~simulator.errors.PipesimError`) print one line and exit with their code.
"""

from __future__ import annotations

import importlib
import os
import pkgutil
import sys

import click

from ..errors import PipesimError
from . import commands


class _LazyGroup(click.Group):
    """Imports a sub-command's module only when it runs (keeps ``pipesim run`` start-up small)."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(m.name.replace("_", "-") for m in pkgutil.iter_modules(commands.__path__)
                      if not m.name.startswith("_"))

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        if name not in self.list_commands(ctx):
            return None
        module = importlib.import_module(f"{commands.__name__}.{name.replace('-', '_')}")
        return module.command


@click.group(cls=_LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="pipesim")
def cli() -> None:
    """Simulate pipeline-parallel training schedules on ASTRA-SIM / SimAI workload files."""


def main(argv: list[str] | None = None) -> int:
    try:
        rc = cli.main(args=argv, prog_name="pipesim", standalone_mode=False)
    except PipesimError as err:
        click.echo(f"pipesim: error: {err}", err=True)
        return err.exit_code
    except click.exceptions.Abort:
        click.echo("pipesim: aborted", err=True)
        return 130
    except click.ClickException as err:   # a bad option or argument: one line, like ours
        click.echo(f"pipesim: error: {err.format_message()}", err=True)
        return err.exit_code
    except click.exceptions.Exit as err:
        return err.exit_code
    except BrokenPipeError:
        return 0
    except Exception as err:  # a bug in pipesim, not in the input: say so in one line
        if os.environ.get("PIPESIM_DEBUG"):
            raise
        click.echo(f"pipesim: internal error: {type(err).__name__}: {err} "
                   "(set PIPESIM_DEBUG=1 for the traceback, and please report it)", err=True)
        return 70
    return rc if isinstance(rc, int) else 0  # ctx.exit(n) comes back as the return value


if __name__ == "__main__":
    sys.exit(main())
