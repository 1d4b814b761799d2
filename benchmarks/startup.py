"""Whole-process cost: ``pipesim run`` as a user runs it (interpreter start-up, imports, parse,
simulate, report), ``import simulator`` alone, and ``python -X importtime``'s biggest imports."""

from __future__ import annotations

import os
import resource
import shutil
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def _env() -> dict[str, str]:
    return dict(os.environ, PYTHONPATH=os.pathsep.join(
        p for p in (str(REPO), os.environ.get("PYTHONPATH", "")) if p))


def pipesim_command() -> tuple[list[str], str]:
    """The installed ``pipesim`` script if there is one, else ``python -m simulator``."""
    exe = shutil.which("pipesim")
    if exe:
        return [exe], "pipesim"
    return [sys.executable, "-m", "simulator"], "python -m simulator"


def _children_cpu() -> float:
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


def wall_seconds(cmd: list[str], repeats: int) -> tuple[float, float]:
    """Median wall time and median CPU time (user + sys, robust to a loaded machine) of running
    ``cmd`` to completion; it must exit 0."""
    times, cpu = [], []
    for _ in range(repeats):
        c0, t0 = _children_cpu(), time.perf_counter()
        proc = subprocess.run(cmd, cwd=REPO, env=_env(), capture_output=True, text=True)
        times.append(time.perf_counter() - t0)
        cpu.append(_children_cpu() - c0)
        if proc.returncode != 0:
            last = (proc.stderr.strip().splitlines() or ["no output"])[-1]
            raise RuntimeError(f"{' '.join(cmd)} exited {proc.returncode}: {last}")
    return statistics.median(times), statistics.median(cpu)


@dataclass(frozen=True)
class ImportEntry:
    name: str
    self_us: int
    cumulative_us: int
    level: int
    parent: str | None      # the module whose import triggered this one (None: top level)


def parse_importtime(text: str) -> list[ImportEntry]:
    """Entries of ``-X importtime`` output, with their parents.

    Lines read ``import time: SELF | CUMULATIVE | <2 spaces per level>NAME``; a module is
    printed after everything it imported, so a line's parent is the next line one level up.
    """
    rows = []
    for line in text.splitlines():
        if not line.startswith("import time:"):
            continue
        parts = line[len("import time:"):].split("|")
        if len(parts) != 3 or not parts[0].strip().isdigit():
            continue                                     # the header line
        raw = parts[2][1:]                               # one space follows the bar
        name = raw.lstrip(" ")
        rows.append((name, int(parts[0]), int(parts[1]), (len(raw) - len(name)) // 2))
    out: list[ImportEntry] = []
    above: dict[int, str] = {}                           # level -> latest name seen, bottom up
    for name, self_us, cum, level in reversed(rows):
        out.append(ImportEntry(name, self_us, cum, level, above.get(level - 1)))
        above[level] = name
        for deeper in [k for k in above if k > level]:
            del above[deeper]
    out.reverse()
    return out


def importtime(cmd_args: list[str]) -> list[ImportEntry]:
    """Run ``python -X importtime <cmd_args>`` and parse what it prints."""
    proc = subprocess.run([sys.executable, "-X", "importtime", *cmd_args], cwd=REPO, env=_env(),
                          capture_output=True, text=True)
    if proc.returncode != 0:
        last = [ln for ln in proc.stderr.splitlines() if not ln.startswith("import time:")]
        raise RuntimeError(f"python -X importtime {' '.join(cmd_args)} exited "
                           f"{proc.returncode}: {(last or ['no output'])[-1]}")
    return parse_importtime(proc.stderr)


def external_imports(entries: list[ImportEntry], package: str = "simulator") -> list[ImportEntry]:
    """Modules outside ``package`` imported directly by one of its modules, costliest first."""
    inside = (package, package + ".")
    picked = [e for e in entries if e.parent is not None and e.parent.startswith(inside)
              and not e.name.startswith(inside)]
    return sorted(picked, key=lambda e: -e.cumulative_us)


# -- whole-process comparisons from an installed wheel (bench_startup_simai) -------------------

@dataclass(frozen=True)
class ProcessRun:
    wall_s: float
    cpu_s: float          # user + sys of the child, from wait4
    peak_mb: float        # the child's own peak RSS
    returncode: int


def run_once(cmd: list[str], cwd: Path | str, env: dict[str, str] | None = None,
             pipe: bool = True) -> ProcessRun:
    """One run of ``cmd`` to completion; times from the kernel's accounting of that child alone
    (``wait4``), wall from a monotonic clock. Its output is read through a pipe and thrown away
    (``pipe``; as a terminal or ``| less`` would take it), else written to /dev/null."""
    out = subprocess.PIPE if pipe else subprocess.DEVNULL
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdin=subprocess.DEVNULL, stdout=out,
                            stderr=subprocess.STDOUT)
    if pipe:
        while proc.stdout.read(1 << 16):
            pass
        proc.stdout.close()
    _, status, ru = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    proc.returncode = os.waitstatus_to_exitcode(status)
    return ProcessRun(wall, ru.ru_utime + ru.ru_stime, ru.ru_maxrss / 1024.0, proc.returncode)


def interleaved(a: tuple[list[str], Path | str], b: tuple[list[str], Path | str] | None,
                pairs: int, warmup: int = 1,
                pipe: bool = True) -> tuple[list[ProcessRun], list[ProcessRun]]:
    """``pairs`` runs of A and of B in turn (A B A B ...), after ``warmup`` uncounted pairs, so
    a ratio taken pair by pair holds while the shared machine's speed drifts. ``b`` None: A only.
    Every run must exit 0."""
    runs_a: list[ProcessRun] = []
    runs_b: list[ProcessRun] = []
    for i in range(warmup + pairs):
        for spec, out in ((a, runs_a), (b, runs_b)):
            if spec is None:
                continue
            r = run_once(spec[0], spec[1], pipe=pipe)
            if r.returncode != 0:
                raise RuntimeError(f"{' '.join(spec[0])} (in {spec[1]}) exited {r.returncode}")
            if i >= warmup:
                out.append(r)
    return runs_a, runs_b


def pair_ratios(a: list[ProcessRun], b: list[ProcessRun], attr: str) -> list[float]:
    """A/B of ``attr`` (``wall_s`` or ``cpu_s``), pair by pair."""
    return [getattr(x, attr) / getattr(y, attr) for x, y in zip(a, b)]


def median_of(runs: list[ProcessRun], attr: str) -> float:
    return statistics.median(getattr(r, attr) for r in runs)
