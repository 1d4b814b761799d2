"""A system as one of torch's runtimes sees it: ``runtime.runtimes.<p2p>`` laid over the
``runtime:`` figures and the links' latency (runtime_profile.py, ``runtimes``).

torch's single-stage runtime (gpipe, 1f1b) and its multi-stage one post, batch and wait for
their transfers differently, so a calibration may carry figures per runtime; a run takes its
own runtime's. Without them, or in a mode that is not one of torch's, the system is returned
unchanged (the same object), so nothing else moves.

Layering: system layer; the engine calls it once per compiled program.
"""

from __future__ import annotations

from .config import SystemConfig


def for_runtime(system: SystemConfig, p2p: str) -> SystemConfig:
    """``system`` with the figures of runtime ``p2p`` (``torch-single`` / ``torch-multi``)."""
    figs = system.runtime.runtimes.get(p2p)
    if not figs:
        return system
    rt = system.runtime
    changes: dict = {k: figs[k] for k in ("action_overhead_ns", "step_prologue_ns",
                                         "step_epilogue_ns", "exchange_ns", "sends_held")
               if k in figs}
    if "calibrated_on" in figs:
        changes["calibrated_on"] = {"schedule": figs["calibrated_on"], "p2p": p2p}
    links = system.links
    if "latency_ns" in figs:
        links = links._replace(latency_ns=figs["latency_ns"])
    return system._replace(runtime=rt._replace(**changes), links=links)
