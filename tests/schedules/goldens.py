"""Reading the PyTorch golden schedules in ``golden/`` (see golden/README.md)."""

from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path

from simulator.schedules import get, names

GOLDEN = Path(__file__).resolve().parent / "golden"

# pipesim schedule -> the torch class whose runtime order it reproduces: the class its spec
# names (so a spec that names a class is held to that class's golden orders)
TORCH_CLASS = {name: f"Schedule{get(name).torch_class}" for name in names()
               if get(name).torch_class is not None}


@lru_cache(maxsize=None)
def load(cls_name: str) -> dict:
    with open(GOLDEN / f"{cls_name}.json") as fh:
        return json.load(fh)


def cases(cls_name: str) -> list[dict]:
    return load(cls_name)["cases"]


def case_id(case: dict) -> str:
    return f"P{case['pp']}-M{case['microbatches']}-v{case['vpp']}"


MULTI_STAGE = tuple(name for name in TORCH_CLASS if get(name).torch_runtime == "torch-multi")


@lru_cache(maxsize=None)
def load_lowered(cls_name: str) -> dict:
    """``golden/lowered/<class>.json``: torch's ``pipeline_order_with_comms`` per case."""
    with open(GOLDEN / "lowered" / f"{cls_name}.json") as fh:
        return json.load(fh)
