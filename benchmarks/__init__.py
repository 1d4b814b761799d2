"""Benchmarks for pipesim (issue 8): ``python benchmarks/run_all.py`` measures the SimPy floor,
``simulate()`` on real and uniform workloads, start-up cost and profiles, and appends the
numbers, dated, under ``benchmarks/results/`` (``docs/performance.md`` says where things stand). Nothing here is imported by the simulator."""
