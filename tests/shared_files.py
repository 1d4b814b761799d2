"""The one place that knows where other projects' files live: ``../shared`` beside the checkout.

Real SimAI / AICB / ASTRA-sim workload files, a real CUDA profiler trace and the fuzz
reproducers are never copied into this repository (their provenance is in
``../shared/workloads-real/SOURCES.md`` and the READMEs there). Every checkout and CI has
``../shared``; a test that needs one of its files is skipped, with a reason naming the missing
folder, only where it is absent.
"""

from __future__ import annotations

from pathlib import Path

import pytest

SHARED_DIR = Path(__file__).resolve().parents[1].parent / "shared"
REAL_DIR = SHARED_DIR / "workloads-real"          # SimAI, AICB (aicb/), ASTRA-sim 1.0, more/
GPU_TRACES_DIR = SHARED_DIR / "traces-gpu"        # a real CUDA profiler trace
FUZZ_MIN_DIR = SHARED_DIR / "fuzz-min"            # inputs that once hung or blew up
HF_CONFIGS_DIR = SHARED_DIR / "hf-configs"        # Hugging Face config.json, one per family
PUBLISHED_RUNS_DIR = SHARED_DIR / "published-runs"   # measured GPU runs, as Megatron-LM args


def needs(folder: Path):
    """Skip marker for tests that read ``folder`` (one line naming it when it is absent)."""
    return pytest.mark.skipif(not folder.is_dir(),
                              reason=f"{folder} not found: ../shared is not beside the checkout")


needs_real = needs(REAL_DIR)
needs_gpu_traces = needs(GPU_TRACES_DIR)
needs_fuzz_min = needs(FUZZ_MIN_DIR)


def real_files(pattern: str = "**/*.txt") -> list[Path]:
    """The real workload files matching ``pattern`` (none where ../shared is absent), sorted."""
    return sorted(REAL_DIR.glob(pattern)) if REAL_DIR.is_dir() else []
