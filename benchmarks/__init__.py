"""Benchmarks for pipesim (issue 8): ``python benchmarks/run_all.py`` measures the SimPy floor,
``simulate()`` on real and uniform workloads, start-up cost and profiles, and appends the
numbers to ``docs/performance.md``. Nothing here is imported by the simulator."""
