"""Shared test fixtures. Puts the repo root on sys.path so tests run without installing."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

DATA_DIR = REPO / "tests" / "data"
from shared_files import REAL_DIR  # noqa: E402  (tests/ is on sys.path: pytest puts it there)


@pytest.fixture
def data_dir() -> Path:
    """tests/data: small workload files the project made itself."""
    return DATA_DIR


@pytest.fixture
def real_dir() -> Path:
    """../shared/workloads-real: the real SimAI / AICB / ASTRA-sim files (provenance in its
    SOURCES.md); the test is skipped, naming the folder, where ../shared is absent."""
    if not REAL_DIR.is_dir():
        pytest.skip(f"{REAL_DIR} not found: ../shared is not beside the checkout")
    return REAL_DIR


from shared_files import FUZZ_MIN_DIR  # noqa: E402


@pytest.fixture
def fuzz_min_dir() -> Path:
    """../shared/fuzz-min: the fuzzer's minimized reproducers (synthetic files; its README.md
    says what each one did)."""
    if not FUZZ_MIN_DIR.is_dir():
        pytest.skip(f"{FUZZ_MIN_DIR} not found: ../shared is not beside the checkout")
    return FUZZ_MIN_DIR


from shared_files import HF_CONFIGS_DIR, PUBLISHED_RUNS_DIR  # noqa: E402


@pytest.fixture
def hf_configs_dir() -> Path:
    """../shared/hf-configs: Hugging Face config.json files as the models publish them (its
    README.md says which family each one exercises)."""
    if not HF_CONFIGS_DIR.is_dir():
        pytest.skip(f"{HF_CONFIGS_DIR} not found: ../shared is not beside the checkout")
    return HF_CONFIGS_DIR


@pytest.fixture
def published_runs() -> list[dict]:
    """The runs of ../shared/published-runs/runs.json (each with its ``megatron_args`` and
    ``gpus``)."""
    import json

    path = PUBLISHED_RUNS_DIR / "runs.json"
    if not path.is_file():
        pytest.skip(f"{path} not found: ../shared is not beside the checkout")
    return json.loads(path.read_text())["runs"]
