"""Every module of the schedule library is imported by the package (so it registers its
schedule), in name order: a module left out of ``library/__init__.py`` would be a schedule
pipesim silently never offers."""

from __future__ import annotations

import ast
from pathlib import Path

import simulator.schedules.library as library

LIBRARY = Path(library.__file__).parent


def test_the_package_imports_every_module_of_the_library_in_name_order():
    modules = sorted(p.stem for p in LIBRARY.glob("*.py") if p.stem != "__init__")
    tree = ast.parse((LIBRARY / "__init__.py").read_text())
    imported = [a.name for node in tree.body if isinstance(node, ast.ImportFrom)
                for a in node.names]
    assert imported == modules
