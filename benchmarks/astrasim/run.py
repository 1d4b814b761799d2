"""pipesim against ASTRA-sim 2.0: every schedule's Chakra export replayed by ASTRA-sim's
analytical backend, its largest finish time beside pipesim's makespan.

    python benchmarks/astrasim/run.py --astra-sim PATH/TO/AstraSim_Analytical_Congestion_Unaware

The binary is the user's own build (this project does not build ASTRA-sim). Grid: every
registered schedule, P = 4 and 8, M = 8 and 16, uniform costs (F = I = W = 1 ms per stage) and
non-uniform ones (forwards of 1, 2 and 3 ms by layer), 1 MiB transfers over a 512 Gb/s link
(64 B/ns, exactly 59.604644775390625 GB/s of 2^30 B: 16384 ns a transfer) with 500 ns latency.
Durations are whole microseconds, so both simulators are exact and any difference is the
models': ASTRA-sim runs one send at a time per NPU (held until the data lands), pipesim queues
per link and latency does not hold it. Needs pipesim[chakra].
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from simulator import simulate  # noqa: E402
from simulator.errors import PipesimError  # noqa: E402
from simulator.export.chakra import write_chakra  # noqa: E402
from simulator.schedules import registry  # noqa: E402
from simulator.system.config import load_system  # noqa: E402
from simulator.workload.builder import uniform_workload  # noqa: E402

FINISHED = re.compile(r"sys\[(\d+)\] finished, (\d+) cycles")
MS = 1_000_000


def workload(P: int, M: int, layers: int, uneven: bool):
    wl = uniform_workload(layers, MS, MS, MS, pp=P, ga=M, pp_comm=1 << 20)
    if uneven:
        wl = wl._replace(layers=tuple(
            layer._replace(fwd_compute=MS * (1 + i % 3))
            for i, layer in enumerate(wl.layers)))
    return wl


def astra_finish(binary: str, d: Path) -> int:
    cmd = [binary, f"--workload-configuration={d}/et", f"--system-configuration={d}/system.json",
           f"--remote-memory-configuration={d}/remote_memory.json",
           f"--network-configuration={d}/network.yml"]
    # run in the export's folder: ASTRA-sim writes its log/ folder into the working directory
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=600, cwd=d)
    times = [int(t) for _, t in FINISHED.findall(out.stdout + out.stderr)]
    if not times:
        raise RuntimeError(f"no 'sys[..] finished' line from {binary} (exit {out.returncode}): "
                           + (out.stderr or out.stdout)[-300:])
    return max(times)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--astra-sim", required=True, metavar="BINARY",
                    help="ASTRA-sim 2.0's analytical binary (your own build)")
    ap.add_argument("--csv", default=None, help="also write the table as CSV here")
    ap.add_argument("--p2p", default="async", help="pipesim's --p2p mode (default async)")
    args = ap.parse_args()
    system = load_system(None).with_overrides({"links.bandwidth_gbps": 512.0,
                                               "links.latency_ns": 500.0}, "benchmark")
    rows = [("schedule", "P", "M", "costs", "pipesim_ns", "astrasim_ns", "diff_pct")]
    print(f"{'schedule':<18} {'P':>2} {'M':>3} {'costs':<8} {'pipesim ns':>14} "
          f"{'ASTRA-sim ns':>14} {'diff':>8}")
    for name in sorted(registry.names()):
        spec = registry.get(name)
        if spec.needs_costs:
            continue
        for P in (4, 8):
            for M in (8, 16):
                for uneven in (False, True):
                    v = 2 if spec.variable_vpp else None
                    try:
                        wl = workload(P, M, 2 * P * 2, uneven)
                        result = simulate(wl, name, system, pp=P, microbatches=M, vpp=v,
                                          p2p=args.p2p)
                    except PipesimError as err:
                        print(f"{name:<18} {P:>2} {M:>3} skipped: {err}")
                        continue
                    with tempfile.TemporaryDirectory() as tmp:
                        write_chakra(result, tmp)
                        astra = astra_finish(args.astra_sim, Path(tmp))
                    ours = result.makespan_ns
                    diff = 100.0 * (astra - ours) / ours
                    costs = "uneven" if uneven else "uniform"
                    rows.append((name, P, M, costs, f"{ours:.0f}", astra, f"{diff:.4f}"))
                    print(f"{name:<18} {P:>2} {M:>3} {costs:<8} {ours:>14.0f} {astra:>14} "
                          f"{diff:>+7.3f}%")
    if args.csv:
        Path(args.csv).write_text("\n".join(",".join(map(str, r)) for r in rows) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
