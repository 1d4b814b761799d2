"""``pipesim`` entry point. Each sub-command is a module in ``commands/`` exposing ``command``
(a click command; the group is :mod:`.group`); modules are found by name, so adding a command is
adding a file.

User errors (:class:`~simulator.errors.PipesimError`) print one line and exit with their code.

Start-up is most of a small run's cost, so sub-commands are imported only when they run, a plain
``pipesim run`` is read without importing click at all (:mod:`.run_impl`), and SimPy is imported
without ``importlib.metadata`` (see :class:`_SimpyWithoutMetadata`).
"""

from __future__ import annotations

import errno
import gc
import importlib
import os
import sys
import types

from .echo import echo

# Commands that make one simulation and exit: their objects are acyclic (records, summaries), so
# the cyclic collector only costs time (about 5 % of a small `pipesim run`); the simulation itself
# already runs with it off. Commands that loop over many runs (sweep, ...) keep it.
_GC_OFF = frozenset({"run"})


class _SimpyWithoutMetadata:
    """A one-shot import hook: SimPy's ``__init__`` imports ``importlib.metadata`` only to read its
    own version, and that import (email, zipfile, socket, ...) costs more CPU than SimPy itself.
    When ``simpy`` is imported, this hook lets it see a stand-in ``importlib.metadata`` whose
    ``version("simpy")`` reads the ``Version:`` line of the installed ``simpy-*.dist-info`` that
    ``importlib.metadata`` would find; the real module is back in place as soon as SimPy's
    ``__init__`` has run. Anything unusual (an egg, two dist-infos, metadata already imported)
    leaves the import as it is."""

    @classmethod
    def find_spec(cls, name: str, path=None, target=None):
        if name != "simpy":
            return None
        sys.meta_path.remove(cls)   # one shot; the real finders locate SimPy
        spec = None
        for finder in sys.meta_path:
            find = getattr(finder, "find_spec", None)
            spec = find(name, path, target) if find is not None else None
            if spec is not None:
                break
        version = None if ("importlib.metadata" in sys.modules
                           or "metadata" in vars(importlib)) else _dist_version("simpy")
        if spec is None or version is None or not hasattr(spec.loader, "exec_module"):
            return spec
        spec.loader = _StubMetadataLoader(spec.loader, version)
        return spec


class _StubMetadataLoader:
    """Runs the real loader with the stand-in ``importlib.metadata`` installed, then removes it
    (and puts the real loader back on the module and its spec)."""

    def __init__(self, loader, version: str) -> None:
        self.loader = loader
        self.version = version

    def create_module(self, spec):
        return self.loader.create_module(spec)

    def exec_module(self, module) -> None:
        module.__loader__ = module.__spec__.loader = self.loader
        stub = types.ModuleType("importlib.metadata")
        stub.PackageNotFoundError = type("PackageNotFoundError", (ModuleNotFoundError,), {})
        version = self.version

        def stub_version(name: str) -> str:
            if name == "simpy":
                return version
            _restore(stub)   # anything else: the real lookup
            return importlib.import_module("importlib.metadata").version(name)

        stub.version = stub_version
        sys.modules["importlib.metadata"] = stub
        importlib.metadata = stub   # type: ignore[attr-defined]  # `import importlib.metadata`
        try:
            self.loader.exec_module(module)
        finally:
            _restore(stub)


def _restore(stub: types.ModuleType) -> None:
    """Take the stand-in away (the real module, if anything imports it, is found as usual)."""
    if sys.modules.get("importlib.metadata") is stub:
        del sys.modules["importlib.metadata"]
    if vars(importlib).get("metadata") is stub:
        del importlib.metadata   # type: ignore[attr-defined]


def _dist_version(dist: str) -> str | None:
    """``Version:`` of the first ``<dist>-*.dist-info`` on ``sys.path`` (the one
    ``importlib.metadata.version`` reads), or None when the answer is not that simple."""
    prefix = dist.lower() + "-"
    for entry in sys.path:
        try:
            names = os.listdir(entry or ".")
        except OSError:
            continue
        found = [n for n in names if n.lower().startswith(prefix)
                 and n.lower().endswith((".dist-info", ".egg-info", ".egg"))]
        if not found:
            continue
        if len(found) > 1 or not found[0].endswith(".dist-info") \
                or not found[0][len(prefix):len(prefix) + 1].isdigit():
            return None
        try:
            with open(os.path.join(entry or ".", found[0], "METADATA"), encoding="utf-8") as fh:
                for line in fh:
                    if line.startswith("Version:"):
                        return line[len("Version:"):].strip() or None
                    if line in ("\n", "\r\n"):
                        break
        except OSError:
            pass
        return None
    return None


def main(argv: list[str] | None = None) -> int:
    if "simpy" not in sys.modules and _SimpyWithoutMetadata not in sys.meta_path:
        sys.meta_path.insert(0, _SimpyWithoutMetadata)
    gc_was_enabled = gc.isenabled()
    args = sys.argv[1:] if argv is None else argv
    one_shot = next((a for a in args if not a.startswith("-")), None) in _GC_OFF  # command name
    if one_shot:
        gc.disable()
    try:
        return _main(argv)
    finally:
        if gc_was_enabled:
            gc.enable()
        if one_shot and argv is None:
            # The process ends next (the `pipesim` script: sys.exit(main())). Python's shutdown
            # runs one full collection over every object left (the workload, the records, all
            # modules): about a tenth of a small run. Frozen objects are skipped; nothing the run
            # made is in a cycle that needs collecting, and its files are closed already.
            gc.freeze()


def _main(argv: list[str] | None) -> int:
    # imported here, not at the top: main() has switched the cyclic collector off for a `run`
    # by now, and these imports (dataclasses, inspect, ...) make many objects
    from ..errors import PipesimError

    try:
        return _dispatch(argv)
    except PipesimError as err:
        echo(f"pipesim: error: {err}", err=True)
        return err.exit_code
    except BrokenPipeError:
        return 0
    except OSError as err:
        if err.errno not in _OUTPUT_ERRNOS:
            return _internal(err)
        # stdout (or a file being written) went full or away mid-write: the user's
        # environment, not a bug; stdout may be the broken stream, so say it on stderr
        where = f" {err.filename}" if err.filename else " the output"
        echo(f"pipesim: error: cannot write{where}: {err.strerror}", err=True)
        _quiet_stdout()
        return 2
    except Exception as err:
        click = sys.modules.get("click")   # a click exception only when click ran
        if click is not None:
            if isinstance(err, click.exceptions.Abort):
                click.echo("pipesim: aborted", err=True)
                return 130
            if isinstance(err, click.ClickException):   # a bad option or argument: one line
                click.echo(f"pipesim: error: {err.format_message()}", err=True)
                return err.exit_code
            if isinstance(err, click.exceptions.Exit):
                return err.exit_code
        return _internal(err)


def _internal(err: Exception) -> int:
    if os.environ.get("PIPESIM_DEBUG"):
        raise err
    # a bug in pipesim, not in the input: say so in one line
    echo(f"pipesim: internal error: {type(err).__name__}: {err} "
         "(set PIPESIM_DEBUG=1 for the traceback, and please report it)", err=True)
    return 70


# errno values of a write the environment refused (disk full, quota, I/O error, read-only)
_OUTPUT_ERRNOS = frozenset({28, 122, 5, 30})   # ENOSPC, EDQUOT, EIO, EROFS


def _quiet_stdout() -> None:
    """Drop what is still buffered for stdout: flushing it at exit would fail again, and
    Python would print that on stderr after our one line."""
    try:
        sys.stdout = open(os.devnull, "w")  # noqa: SIM115 (the process ends next)
    except OSError:
        pass


def _dispatch(argv: list[str] | None) -> int:
    """A plain ``pipesim run`` runs without click (its import is about a tenth of a small run);
    everything else, and any ``run`` line click must judge, goes through click."""
    args = sys.argv[1:] if argv is None else list(argv)
    if args[:1] == ["run"] and "_PIPESIM_COMPLETE" not in os.environ:   # not shell completion
        from .run_impl import parse_run_args, run   # the run's modules, once the collector is off

        kwargs = parse_run_args(args[1:])
        if kwargs is not None:
            _as_click_runs_a_command(run, kwargs)
            return 0
    from .group import cli   # click: only when it reads the line (start-up)

    rc = cli.main(args=argv, prog_name="pipesim", standalone_mode=False)
    return rc if isinstance(rc, int) else 0  # ctx.exit(n) comes back as the return value


def _as_click_runs_a_command(callback, kwargs: dict) -> None:
    """Call ``callback(**kwargs)`` with what click's ``main`` does around a command: Ctrl-C (or
    EOF) is an Abort after a blank line on stderr, and a broken pipe exits 1 quietly."""
    try:
        callback(**kwargs)
    except (EOFError, KeyboardInterrupt) as err:
        echo("", err=True)
        from click.exceptions import Abort   # click's own exception, as click would raise

        raise Abort() from err
    except OSError as err:
        if err.errno != errno.EPIPE:
            raise
        from click.utils import PacifyFlushWrapper   # as click does on a broken pipe

        sys.stdout = PacifyFlushWrapper(sys.stdout)
        sys.stderr = PacifyFlushWrapper(sys.stderr)
        sys.exit(1)


def __getattr__(name: str):
    """``cli`` and ``_LazyGroup`` (click objects) load on first use."""
    if name in ("cli", "_LazyGroup"):
        from . import group   # click: on first use only (start-up)

        return getattr(group, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


if __name__ == "__main__":
    sys.exit(main())
