"""The house has floors: every module imports only from its own floor or below, and no modules
import each other in a circle. Lazy imports (inside functions) count too, and so do the imports
for type hints only (under ``if TYPE_CHECKING:``) and the modules string annotations name: an
annotation may not name a type of a floor above either. The floors are the ones docs/model.md
lists, top first."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1] / "simulator"

# top first; a module belongs to the first entry that is its name or a package above it
LAYERS: list[tuple[str, ...]] = [
    ("simulator.cli", "simulator.__main__"),
    ("simulator.planning",),      # the planner: runs candidates on the sweep executors
    ("simulator.sweep", "simulator.calibration"),
    ("simulator.api", "simulator.run_options"),
    ("simulator.export",),
    ("simulator.result",),
    ("simulator.metrics",),
    ("simulator.engine", "simulator.verify", "simulator.preflight"),
    ("simulator.system",),
    ("simulator.schedules",),
    ("simulator.workload",),
    ("simulator.errors", "simulator.units", "simulator.diagnostics", "simulator.yaml_file",
     "simulator.schema", "simulator"),
]


def _modules() -> dict[str, Path]:
    out = {}
    for path in ROOT.rglob("*.py"):
        rel = path.relative_to(ROOT.parent).with_suffix("")
        parts = list(rel.parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = path
    return out


MODULES = _modules()


def layer_of(module: str) -> int:
    best = None
    for i, names in enumerate(LAYERS):
        for name in names:
            if module == name or module.startswith(name + "."):
                if best is None or len(name) > best[1]:
                    best = (i, len(name))
    assert best is not None, f"{module} is on no floor: add it to LAYERS and docs/model.md"
    return best[0]


def _annotations(tree: ast.Module):
    """Every annotation in ``tree``: of arguments, returns and annotated assignments."""
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            args = node.args
            for arg in (*args.posonlyargs, *args.args, *args.kwonlyargs, args.vararg,
                        args.kwarg):
                if arg is not None and arg.annotation is not None:
                    yield arg.annotation
            if node.returns is not None:
                yield node.returns
        elif isinstance(node, ast.AnnAssign):
            yield node.annotation


def _string_annotation_names(tree: ast.Module) -> set[str]:
    """The dotted ``simulator.`` names inside string annotations (``"simulator.result.X"``, or
    a string nested in one, ``list["simulator.result.X"]``)."""
    found = set()
    for annotation in _annotations(tree):
        for node in ast.walk(annotation):
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                try:
                    inner = ast.parse(node.value, mode="eval")
                except SyntaxError:
                    continue
                inner_parts = {id(sub.value) for sub in ast.walk(inner)
                               if isinstance(sub, ast.Attribute)}
                for sub in ast.walk(inner):
                    if isinstance(sub, ast.Attribute) and id(sub) not in inner_parts:
                        name = ast.unparse(sub)     # a whole dotted name, not a part of one
                        if name.startswith("simulator."):
                            found.add(name)
    return found


def imports_in(source: str, module: str, is_package: bool) -> set[str]:
    """Every simulator module the source of ``module`` imports, anywhere in the file: lazy
    imports, imports under ``if TYPE_CHECKING:`` and modules named in string annotations."""
    tree = ast.parse(source)
    package = module if is_package else module.rsplit(".", 1)[0]
    names: list[str] = sorted(_string_annotation_names(tree))
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[:len(base) - (node.level - 1)]
                prefix = ".".join(base + ([node.module] if node.module else []))
            else:
                prefix = node.module or ""
            names += [prefix] + [f"{prefix}.{a.name}" for a in node.names]
    found = set()
    for name in names:
        if not name.startswith("simulator"):
            continue
        # the deepest module that exists (``from .x import y``: y may be a module or a name)
        while name not in MODULES and "." in name:
            name = name.rsplit(".", 1)[0]
        if name in MODULES and name != module:
            found.add(name)
    return found


def imports_of(module: str, path: Path) -> set[str]:
    return imports_in(path.read_text(), module, path.name == "__init__.py")


GRAPH = {m: imports_of(m, p) for m, p in MODULES.items()}


def test_imports_for_type_hints_and_string_annotations_count():
    """The reader sees what an annotation needs: a ``TYPE_CHECKING`` import and a module a
    string annotation names are edges like any import."""
    source = (
        "from __future__ import annotations\n"
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n"
        "    from ..result import SimulationResult\n"
        "def f(x: 'simulator.api.RunPlan', y: list['simulator.sweep.spec.SweepSpec']) -> None:\n"
        "    z: 'simulator.engine.program.Program'\n")
    assert imports_in(source, "simulator.metrics.summary", False) == {
        "simulator.result", "simulator.api", "simulator.sweep.spec", "simulator.engine.program"}


@pytest.mark.parametrize("module", sorted(MODULES))
def test_no_import_reaches_a_floor_above(module):
    mine = layer_of(module)
    above = sorted(m for m in GRAPH[module] if layer_of(m) < mine)
    assert not above, f"{module} (floor {mine}) imports from a floor above: {above}"


def test_no_import_circle():
    # the package face simulator/__init__ imports nothing (its names load lazily); a package's
    # __init__ importing its own modules is not a circle of the house
    def edges(m):
        return {n for n in GRAPH[m] if not (m.startswith(n + ".") and MODULES[n].name ==
                                            "__init__.py")}

    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(m: str) -> None:
        state[m] = 1
        stack.append(m)
        for n in sorted(edges(m)):
            if state.get(n) == 1:
                cycle = stack[stack.index(n):] + [n]
                raise AssertionError("import circle: " + " -> ".join(cycle))
            if n not in state:
                visit(n)
        stack.pop()
        state[m] = 2

    for m in sorted(MODULES):
        if m not in state:
            visit(m)


def test_every_floor_is_in_the_docs():
    text = (ROOT.parent / "docs" / "model.md").read_text()
    for names in LAYERS:
        for name in names:
            if name != "simulator":
                assert f"`{name.removeprefix('simulator.')}" in text, name
