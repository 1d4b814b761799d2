"""Shared test fixtures. Puts the repo root on sys.path so tests run without installing."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

DATA_DIR = REPO / "tests" / "data"
REAL_DIR = Path(__file__).resolve().parents[2] / "shared" / "workloads-real"


@pytest.fixture
def data_dir() -> Path:
    """tests/data: small workload files kept in the repo (tests/data/real/ are real ones)."""
    return DATA_DIR


@pytest.fixture
def real_dir() -> Path:
    """../shared/workloads-real (all real files, some big); skips the test when it is absent."""
    if not REAL_DIR.is_dir():
        pytest.skip(f"{REAL_DIR} not present")
    return REAL_DIR
