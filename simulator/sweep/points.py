"""From a spec to its points: the cartesian product of the axes, minus excluded points.

Point order is the product order (grid keys in file order, then zip groups; the last axis varies
fastest). A point's ``point_id`` is a stable hash of its parameters and of the content of the
files it names, so a resumed sweep recognises the points it already ran, and an edited workload
file counts as new points.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import ConfigError
from ..input_file import not_regular
from .spec import SweepSpec

FILE_KEYS = ("workload", "system")


@dataclass(frozen=True)
class Point:
    index: int                  # position in point order
    point_id: str               # 16 hex digits
    params: dict[str, Any]      # option -> value, paths as written in the spec


def file_sha256(path: Path) -> str:
    what = not_regular(os.stat(path).st_mode)   # a FIFO or /dev/zero would be read forever
    if what is not None:
        raise ConfigError(f"{path}: is {what}, not a regular file")
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


class FileHashes:
    """Content hashes of the spec's files, each file read once."""

    def __init__(self, base: Path) -> None:
        self.base = base
        self._seen: dict[str, str] = {}

    def __call__(self, rel: str) -> str:
        if rel not in self._seen:
            path = self.base / rel
            try:
                self._seen[rel] = file_sha256(path)
            except OSError as err:
                raise ConfigError(f"{path}: cannot read: {err.strerror or err}") from None
        return self._seen[rel]


def point_id(params: dict[str, Any], hashes: FileHashes) -> str:
    ident = dict(params)
    for key in FILE_KEYS:
        if ident.get(key) is not None:
            ident[f"{key}_sha256"] = hashes(ident[key])
    text = json.dumps(ident, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def expand(spec: SweepSpec, hashes: FileHashes | None = None) -> tuple[list[Point], list[str]]:
    """The points to run, in point order, and notes (exclude rules that match nothing)."""
    hashes = hashes or FileHashes(spec.base_dir)
    order = spec.keys
    points: list[Point] = []
    used = [0] * len(spec.exclude)
    seen: dict[str, int] = {}
    for combo in itertools.product(*(axis.steps for axis in spec.axes)):
        values = dict(spec.fixed)
        for axis, step in zip(spec.axes, combo):
            values.update(zip(axis.keys, step))
        params = {k: values[k] for k in order}
        hits = [i for i, rule in enumerate(spec.exclude) if rule.matches(params)]
        for i in hits:
            used[i] += 1
        if hits:
            continue
        pid = point_id(params, hashes)
        if pid in seen:  # the spec loader rejects repeated values; this guards the hash
            raise ConfigError(f"{spec.label}: points {seen[pid]} and {len(points)} have the same "
                              f"parameters {params}")
        seen[pid] = len(points)
        points.append(Point(len(points), pid, params))
    notes = [f"{spec.label}: {rule.where} matches no point" for rule, n in
             zip(spec.exclude, used) if n == 0]
    if not points:
        raise ConfigError(f"{spec.label}: exclude: every point is excluded; nothing to run")
    return points, notes
