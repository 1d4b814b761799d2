"""Every fast twin gives what its plain reference gives, on the same cases (the harness:
tests/engine/equivalence.py), and every twin the harness runs is the one docs/performance.md
states a measured gain for."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from .equivalence import TWINS

DOCS = Path(__file__).resolve().parents[2] / "docs" / "performance.md"

CASES = [(twin, case) for twin in TWINS for case in twin.cases()]


@pytest.mark.parametrize("twin, case", CASES, ids=[f"{t.name}:{c.id}" for t, c in CASES])
def test_the_fast_twin_gives_what_its_reference_gives(twin, case):
    fast, reference = twin.run(case.data)
    twin.same(fast, reference)


def test_every_twin_has_cases():
    counts = {twin.name: sum(1 for t, _ in CASES if t is twin) for twin in TWINS}
    assert all(n >= 5 for n in counts.values()), counts


def test_the_twins_are_the_ones_docs_performance_states_a_gain_for():
    """docs/performance.md's "Fast paths" table names each twin with its measured gain; a
    twin without a row, or a row without a twin in the harness, fails here."""
    section = DOCS.read_text().split("## Fast paths", 1)[1].split("\n## ", 1)[0]
    rows = re.findall(r"^\| `([a-z_]+)` \|(.*)\|$", section, re.M)
    assert sorted(name for name, _ in rows) == sorted(t.name for t in TWINS)
    for name, row in rows:
        assert re.search(r"\d+(\.\d+)? ?%", row), f"{name}: no measured gain in its row"


def test_the_reference_path_refuses_variation():
    """--layer-by-layer (the per-action steps' reference) runs without jitter and slow ranks:
    its timeline has no per-rank draws to compare."""
    from simulator import simulate
    from simulator.errors import ConfigError

    from .cases import SYSTEM, workload

    with pytest.raises(ConfigError, match="--layer-by-layer"):
        simulate(workload(2), "1f1b", SYSTEM, pp=2, microbatches=2, layer_by_layer=True,
                 jitter=0.1)


def test_each_fast_path_states_its_gain_in_its_module_docstring():
    """The module a twin's fast path lives in says, in one line of its docstring, what the
    twin saves (the figure docs/performance.md's row gives)."""
    import ast

    root = DOCS.parents[1]
    section = DOCS.read_text().split("## Fast paths", 1)[1].split("\n## ", 1)[0]
    for twin in TWINS:
        path = root / twin.fast.split()[0].rstrip(",")
        doc = ast.get_docstring(ast.parse(path.read_text())) or ""
        lines = [line for line in " ".join(doc.split()).split(". ")
                 if f"Fast path `{twin.name}`" in line and "%" in line]
        assert lines, f"{path}: no 'Fast path `{twin.name}` ... N %' line in the docstring"
        row = next(r for r in section.splitlines() if r.startswith(f"| `{twin.name}` |"))
        gains = re.findall(r"(\d+(?:\.\d+)?) ?%", " ".join(lines))
        assert any(g in row for g in gains), (twin.name, lines, row)


def test_the_harness_notices_a_twin_that_differs(monkeypatch):
    """Each kind of "the same" fails on a difference a broken fast path would make: a fast
    pass that accepts everything, a reader that reads one option wrong, records of another
    run, another op list."""
    from simulator.cli import run_impl
    from simulator.schedules import validate as V

    from . import equivalence as E

    twins = {t.name: t for t in TWINS}

    def failures(twin, limit: int) -> int:
        n = 0
        for k, case in enumerate(twin.cases()):
            if k == limit:
                break
            try:
                twin.same(*twin.run(case.data))
            except AssertionError:
                n += 1
        return n

    with monkeypatch.context() as m:
        m.setattr(V, "_rules_hold", lambda s: True)
        assert failures(twins["validate_fast_pass"], 40) > 0
    read = run_impl.parse_run_args
    with monkeypatch.context() as m:
        m.setattr(run_impl, "parse_run_args",
                  lambda args: None if read(args) is None else {**read(args), "pp": 99})
        assert failures(twins["cli_plain_reader"], 10) == 10
    runs = [c.data for c in twins["evaluator"].cases()][:2]
    fast, _ = twins["evaluator"].run(runs[0])
    _, other = twins["evaluator"].run(runs[1])
    with pytest.raises(AssertionError):
        E.same_outcome(fast, other)
    ops, ref = twins["rank_ops"].run(next(twins["rank_ops"].cases()).data)
    with pytest.raises(AssertionError):
        E.same_value(ops[::-1], ref)
