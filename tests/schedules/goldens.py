"""Reading the PyTorch golden schedules in ``golden/`` (see golden/README.md)."""

from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path

GOLDEN = Path(__file__).resolve().parent / "golden"

# pipesim schedule -> the torch class whose runtime order it reproduces
TORCH_CLASS = {
    "gpipe": "ScheduleGPipe",
    "1f1b": "Schedule1F1B",
    "interleaved-1f1b": "ScheduleInterleaved1F1B",
    "looped-bfs": "ScheduleLoopedBFS",
    "zb-h1": "ScheduleInterleavedZeroBubble",
    "zb-v": "ScheduleZBVZeroBubble",
    "dualpipe-v": "ScheduleDualPipeV",
}


@lru_cache(maxsize=None)
def load(cls_name: str) -> dict:
    with open(GOLDEN / f"{cls_name}.json") as fh:
        return json.load(fh)


def cases(cls_name: str) -> list[dict]:
    return load(cls_name)["cases"]


def case_id(case: dict) -> str:
    return f"P{case['pp']}-M{case['microbatches']}-v{case['vpp']}"


MULTI_STAGE = ("interleaved-1f1b", "looped-bfs", "zb-h1", "zb-v", "dualpipe-v")


@lru_cache(maxsize=None)
def load_lowered(cls_name: str) -> dict:
    """``golden/lowered/<class>.json``: torch's ``pipeline_order_with_comms`` per case."""
    with open(GOLDEN / "lowered" / f"{cls_name}.json") as fh:
        return json.load(fh)
