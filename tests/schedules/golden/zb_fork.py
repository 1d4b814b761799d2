"""What the golden makers of the zero-bubble fork's V schedules share: the fork's argument, its
tagged modules loaded from a checkout the maker points to (never copied here), and the V
layout's action names."""

from __future__ import annotations

import argparse
import subprocess
import sys
import types
from pathlib import Path

TAG = "zero-bubble-v0.1.0"
KINDS = {"F": "F", "B": "I", "W": "W"}   # the fork's node types, pipesim's kinds


def repo_argument(doc: str) -> Path:
    """The ``--zb-repo`` of a maker whose docstring is ``doc``."""
    ap = argparse.ArgumentParser(description=doc.split("\n")[0])
    ap.add_argument("--zb-repo", type=Path, required=True,
                    help="checkout or bare git dir of sail-sg/zero-bubble-pipeline-parallelism")
    return ap.parse_args().zb_repo


def load(repo: Path, module: str, name: str) -> types.ModuleType:
    """The fork's ``module`` at :data:`TAG`, run as a module called ``name``."""
    text = subprocess.run(["git", "-C", str(repo), "show", f"{TAG}:{module}"], check=True,
                          capture_output=True, text=True).stdout
    mod = types.ModuleType(name)
    sys.modules[mod.__name__] = mod   # its dataclasses look their module up
    exec(compile(text, f"{TAG}:{module}", "exec"), mod.__dict__)
    return mod


def tag_commit(repo: Path) -> str:
    return subprocess.run(["git", "-C", str(repo), "rev-parse", f"{TAG}^{{commit}}"],
                          capture_output=True, text=True, check=True).stdout.strip()


def v_orders(pp: int, nodes) -> list[list[str]]:
    """Each rank's compute nodes in the fork's order, as pipesim names them: chunk 0 of rank r
    is stage r, chunk 1 stage 2P-1-r (the fork's V layout)."""
    return [[f"{r if n.chunk == 0 else 2 * pp - 1 - r}{KINDS[n.type]}{n.minibatch}"
             for n in rank_nodes if n.type in KINDS] for r, rank_nodes in enumerate(nodes)]
