"""Shared test fixtures. Puts the repo root on sys.path so tests run without installing."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

DATA_DIR = REPO / "tests" / "data"
REAL_DIR = DATA_DIR / "real"


@pytest.fixture
def data_dir() -> Path:
    """tests/data: small workload files kept in the repo (tests/data/real/ are real ones)."""
    return DATA_DIR


@pytest.fixture
def real_dir() -> Path:
    """tests/data/real: the real SimAI / AICB / ASTRA-sim files, vendored (provenance in its
    SOURCES.md) so that a fresh clone runs every test; nothing outside the repo is read."""
    return REAL_DIR
