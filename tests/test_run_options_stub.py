"""simulator/run_options.pyi is RunOptions as a type checker reads it: generated from FIELDS (the
one declaration), it must say what FIELDS says, declare every public name of the module, and
make mypy type ``RunOptions(pp=4).pp`` as ``int | None`` and refuse a wrong field name."""

from __future__ import annotations

import ast
import importlib.util
import subprocess
import sys
from pathlib import Path
from typing import Any, Mapping

import pytest

import simulator.run_options as run_options

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "tests" / "make_run_options_stub.py"
STUB = REPO / "simulator" / "run_options.pyi"


def _generator():
    spec = importlib.util.spec_from_file_location("make_run_options_stub", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_the_stub_is_what_fields_give():
    assert STUB.read_text() == _generator().render(), (
        "simulator/run_options.pyi is out of date with FIELDS: run "
        "python tests/make_run_options_stub.py")


def test_the_check_mode_fails_on_a_stale_stub(tmp_path, monkeypatch):
    gen = _generator()
    assert gen.main(["--check"]) == 0
    stale = tmp_path / "run_options.pyi"
    stale.write_text(gen.render().replace("    pp: int | None = ...\n", ""))
    monkeypatch.setattr(gen, "STUB", stale)
    assert gen.main(["--check"]) == 1


def test_the_stub_declares_the_fields_in_order_with_their_types():
    tree = ast.parse(STUB.read_text())
    cls = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "RunOptions")
    declared = [(n.target.id, ast.unparse(n.annotation)) for n in cls.body
                if isinstance(n, ast.AnnAssign)]
    assert [name for name, _ in declared] == list(run_options.RunOptions._fields)
    types = dict(declared)
    assert types["pp"] == "int | None" and types["iterations"] == "int"
    assert types["slow_rank"] == "tuple[str, ...]"
    assert types["schedule_options"] == "Mapping[str, Any] | None"


def test_every_public_name_of_the_module_is_in_the_stub():
    """A type checker reads only the stub: a name the module defines and the stub lacks would
    be an error in every caller's code."""
    tree = ast.parse(STUB.read_text())
    stubbed = set()
    for n in tree.body:
        if isinstance(n, (ast.ClassDef, ast.FunctionDef)):
            stubbed.add(n.name)
        elif isinstance(n, ast.AnnAssign):
            stubbed.add(n.target.id)
    source = ast.parse(Path(run_options.__file__).read_text())
    defined = set()
    for n in source.body:
        if isinstance(n, (ast.ClassDef, ast.FunctionDef)):
            defined.add(n.name)
        elif isinstance(n, ast.AnnAssign):
            defined.add(n.target.id)
        elif isinstance(n, ast.Assign):
            defined.update(t.id for t in n.targets if isinstance(t, ast.Name))
    public = {name for name in defined if not name.startswith("_")}
    assert public - stubbed == set()


def test_type_text_writes_what_a_field_may_hold():
    text = _generator().type_text
    assert text(int) == "int" and text(int | None) == "int | None"
    assert text(tuple[str, ...]) == "tuple[str, ...]"
    assert text(Mapping[str, Any] | None) == "Mapping[str, Any] | None"
    with pytest.raises(ValueError, match="not one the stub can write"):
        text(Path)


CALLER = """\
from simulator.run_options import RunOptions

o = RunOptions(pp=4)
reveal_type(o.pp)
reveal_type(o._replace(jitter=0.5).jitter)
RunOptions(ppp=4)
"""


def test_mypy_reads_the_fields_and_refuses_a_wrong_name(tmp_path):
    from mypy import api   # a test extra

    caller = tmp_path / "caller.py"
    caller.write_text(CALLER)
    out, err, rc = api.run([str(caller), "--follow-imports=silent", "--no-incremental",
                            "--cache-dir", str(tmp_path / "cache")])
    lines = [line.split(": ", 1)[1] for line in out.splitlines() if line.startswith(str(caller))]
    assert lines == [
        'note: Revealed type is "int | None"',
        'note: Revealed type is "float"',
        'error: Unexpected keyword argument "ppp" for "RunOptions"; did you mean "pp"?  '
        '[call-arg]',
    ], out + err
    assert rc == 1


def test_the_stub_costs_nothing_at_run_time():
    """Python never imports a .pyi: importing the options loads the module's own code."""
    out = subprocess.run([sys.executable, "-c", "import simulator.run_options as m; "
                          "print(m.__file__)"], capture_output=True, text=True, cwd=REPO,
                         check=True)
    assert out.stdout.strip().endswith("run_options.py")
