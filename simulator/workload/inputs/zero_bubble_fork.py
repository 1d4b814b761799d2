"""What the zero-bubble fork of Megatron-LM (sail-sg/zero-bubble-pipeline-parallelism, tag
zero-bubble-v0.1.0) runs: its V schedules by ``--zero-bubble-v-schedule-mem-setup``, and the
layer layouts its arguments allow. A launch file is read by these facts
(:mod:`.megatron_args`) and a launch written by them (:mod:`simulator.export.launch`); alone in
a module so that the runtime rules (:mod:`simulator.schedules.runtimes`) read them without
loading the argument reader."""

from __future__ import annotations

# the zero-bubble fork's V schedules by --zero-bubble-v-schedule-mem-setup (its README: ZBV,
# V-Half, V-Min). Its runtime (zb_schedules.py, tag zero-bubble-v0.1.0) builds half and min
# with v_schedule_greedy at unit costs: pipesim's v-half and v-min, order for order
# (tests/schedules/golden/v_greedy.json); zb with v_schedule.py over the profiled costs:
# pipesim's v-zb over the run's own costs, order for order (golden/v_zb.json).
ZB_V_SCHEDULES = {"zb": "v-zb", "half": "v-half", "min": "v-min"}


def zb_v_setup(schedule: str) -> str | None:
    """The fork's ``--zero-bubble-v-schedule-mem-setup`` that runs ``schedule`` (None: none
    does)."""
    return next((k for k, v in ZB_V_SCHEDULES.items() if v == schedule), None)


def padded_counts(layers: int, pp: int, vpp: int) -> list[int]:
    """Transformer layers per chunk, in pipeline order, under the zero-bubble fork's
    ``--allow-padding-num-layers`` (megatron/arguments.py and ParallelTransformer.get_offset at
    tag zero-bubble-v0.1.0): the layers padded up to a multiple of the stages, every chunk
    holding an equal share, and the ``n`` padding layers taken one each off the last chunk and
    the first ``n - 1``."""
    padding = -layers % pp
    per_chunk = (layers + padding) // (pp * vpp)
    counts = [per_chunk] * (pp * vpp)
    for i in range(-1, padding - 1):
        counts[i] -= 1
    return counts


def fork_layer_flags(counts: tuple[int, ...], pp: int, vpp: int, v_schedule: bool
                     ) -> list[str] | None:
    """The fork's flags that place ``counts`` (transformer layers per chunk, pipeline order),
    or None when it cannot. Its megatron/arguments.py and ``ParallelTransformer`` give every
    stage ``--num-layers`` / P layers, split evenly over the chunks (nothing to write), or, with
    ``--allow-padding-num-layers``, :func:`padded_counts`; its V schedule wants the even split
    (an even count per stage, half on each of the rank's two chunks). It has none of
    megatron-core's uneven-split options (``--decoder-first-pipeline-num-layers``,
    ``--pipeline-model-parallel-layout``, ``--num-virtual-stages-per-pipeline-rank``)."""
    counts = tuple(counts)
    if len(set(counts)) == 1:
        return []
    if not v_schedule and counts == tuple(padded_counts(sum(counts), pp, vpp)):
        return ["--allow-padding-num-layers"]
    return None
