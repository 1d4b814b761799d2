"""The ``pipesim`` click group: sub-commands are modules in ``commands/`` exposing ``command``
(a click command), found by name, so adding a command is adding a file. Imported only when click
parses the command line (:mod:`.main` runs a plain ``pipesim run`` without it)."""

from __future__ import annotations

import importlib

import click

from . import commands


class _LazyGroup(click.Group):
    """Imports a sub-command's module only when it runs (keeps ``pipesim run`` start-up small)."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        import pkgutil  # only for --help and completion

        return sorted(m.name.replace("_", "-") for m in pkgutil.iter_modules(commands.__path__)
                      if not m.name.startswith("_"))

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        # the names list_commands gives: a module `a_b` is the command `a-b`, `_x` is private
        module_name = name.replace("-", "_")
        if "_" in name or not module_name.isidentifier() or module_name.startswith("_"):
            return None
        full = f"{commands.__name__}.{module_name}"
        try:
            module = importlib.import_module(full)
        except ModuleNotFoundError as err:
            if err.name != full:
                raise
            return None
        return module.command


@click.group(cls=_LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="pipesim")
def cli() -> None:
    """Simulate pipeline-parallel training schedules on ASTRA-SIM / SimAI workload files."""
