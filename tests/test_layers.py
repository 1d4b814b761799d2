"""The house has floors: every module imports only from its own floor or below, and no modules
import each other in a circle. Lazy imports (inside functions) count too. The floors are the
ones docs/model.md lists, top first."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1] / "simulator"

# top first; a module belongs to the first entry that is its name or a package above it
LAYERS: list[tuple[str, ...]] = [
    ("simulator.cli", "simulator.__main__"),
    ("simulator.sweep", "simulator.planning", "simulator.calibration"),
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


def _type_only(tree: ast.Module) -> set[int]:
    """ids of the import nodes under ``if TYPE_CHECKING:`` (annotations only, never run)."""
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and isinstance(node.test, ast.Name) \
                and node.test.id == "TYPE_CHECKING":
            out |= {id(n) for n in ast.walk(node)}
    return out


def imports_of(module: str, path: Path, type_only: bool = False) -> set[str]:
    """Every simulator module ``module`` imports, anywhere in the file (lazy imports too);
    with ``type_only``, the ones under ``if TYPE_CHECKING:`` instead (kept apart: an annotation
    may name a type of a floor above, see TYPE_ONLY)."""
    tree = ast.parse(path.read_text())
    package = module if path.name == "__init__.py" else module.rsplit(".", 1)[0]
    found = set()
    typed = _type_only(tree)
    for node in ast.walk(tree):
        if (id(node) in typed) is not type_only:
            continue
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[:len(base) - (node.level - 1)]
                prefix = ".".join(base + ([node.module] if node.module else []))
            else:
                prefix = node.module or ""
            names = [prefix] + [f"{prefix}.{a.name}" for a in node.names]
        else:
            continue
        for name in names:
            if not name.startswith("simulator"):
                continue
            # the deepest module that exists (``from .x import y``: y may be a module or a name)
            while name not in MODULES and "." in name:
                name = name.rsplit(".", 1)[0]
            if name in MODULES and name != module:
                found.add(name)
    return found


GRAPH = {m: imports_of(m, p) for m, p in MODULES.items()}
# annotations (under `if TYPE_CHECKING:`) naming a type of a floor above: every one listed here
TYPE_ONLY = {"simulator.metrics.bubble": {"simulator.result"},
             "simulator.metrics.summary": {"simulator.result"}}


def test_type_only_imports_are_the_listed_ones():
    found = {m: {n for n in imports_of(m, p, type_only=True) if layer_of(n) < layer_of(m)}
             for m, p in MODULES.items()}
    assert {m: s for m, s in found.items() if s} == TYPE_ONLY


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
