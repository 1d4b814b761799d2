"""End-to-end fuzz: a mutated real file under random options either simulates or is refused
with one line (a PipesimError), never a traceback, and an impossible size is refused before
any schedule is built. The long run (100,000 cases, timeouts and RSS) is
benchmarks/bench_fuzz.py."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from simulator import simulate
from simulator.errors import PipesimError
from simulator.workload.parser import parse_workload_bytes

from .test_fuzz import SEEDS, _mutate

SCHEDULES = (None, "1f1b", "gpipe", "interleaved-1f1b", "zb-h1", "zb-v", "dualpipe-v",
             "v-half", "hanayo", "2bw", "dualpipe")


@settings(max_examples=80, derandomize=True, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(st.sampled_from(SEEDS), st.data(), st.sampled_from((None, 1, 2, 4, 1000)),
       st.sampled_from((None, 1, 2, 1000)), st.sampled_from((None, 1, 8, 24, 8388608)),
       st.sampled_from(SCHEDULES))
def test_mutated_files_under_random_options_never_crash(seed, data, pp, vpp, m, schedule):
    blob = _mutate(seed, data.draw) if data.draw(st.booleans()) else seed.encode()
    try:
        wl = parse_workload_bytes(blob, "fuzz.txt")
        simulate(wl, schedule, pp=pp, vpp=vpp, microbatches=m)
    except PipesimError as err:
        assert "\n" not in str(err)
