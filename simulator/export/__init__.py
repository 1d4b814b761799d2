"""Pictures and traces of simulated runs.

- :mod:`.gantt`: Gantt charts (PNG/SVG/PDF; matplotlib is imported only there, and only when a
  chart is drawn);
- :mod:`.perfetto`: Chrome Trace Event JSON for https://ui.perfetto.dev and chrome://tracing;
- :mod:`.compare`: several schedules on one workload, and the comparison table;
- :mod:`.palette`: the colours they share.

Nothing is imported here, so ``import simulator.export`` stays cheap.
"""
