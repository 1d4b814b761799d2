"""Generated docs stay in step with the code that generates them."""

from __future__ import annotations

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _load(name: str):
    spec = importlib.util.spec_from_file_location(name, ROOT / "docs" / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_schedules_page_lists_every_registered_schedule_as_generated():
    mod = _load("make_schedules_doc")
    assert (ROOT / "docs" / "schedules.md").read_text() == mod.render(), (
        "docs/schedules.md is stale: run python docs/make_schedules_doc.py")


def test_validation_page_is_what_the_script_makes(real_dir):
    import subprocess
    import sys

    proc = subprocess.run([sys.executable, str(ROOT / "docs" / "make_validation.py"), "--check"],
                          capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert proc.returncode == 0, (
        "docs/validation.md is stale: run python3 docs/make_validation.py\n" + proc.stdout
        + proc.stderr)
