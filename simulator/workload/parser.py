"""Placeholder until the parser lands (being written now)."""

from __future__ import annotations

from .model import Workload


def parse_workload_text(text: str, path: str = "<string>") -> Workload:
    raise NotImplementedError


def load_workload(path, layout: str = "auto") -> Workload:
    raise NotImplementedError
