"""Gantt charts of simulated runs (matplotlib, Agg canvas; imported only when a chart is asked for).

One row per rank, rank 0 on top. A rank's row is its compute stream: a bar per action from its
simulated start to its end, coloured by kind (:mod:`.palette`), shaded by the rank's virtual
chunk, with the microbatch number on the bar when the number fits inside it. Under the compute
band a thin band shows the rank's communication: the point-to-point transfers it sends (from the
moment the link takes the data to its arrival) and its DP weight-gradient collectives. Idle time
is left blank. Thousands of bars go into one ``PolyCollection`` per band, so P=64, M=512 draws in
seconds.

The drawing uses ``matplotlib.figure.Figure`` with an Agg canvas and never ``pyplot``: no global
backend switch, nothing left open.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..engine.memory_use import memory_timeline
from ..errors import ConfigError
from ..result import SimulationResult
from ..schedules.action import Kind
from ..units import fmt_bytes, fmt_pct, fmt_time
from . import palette

FORMATS = ("png", "svg", "pdf")
DPI = 110

# layout, in inches
_ROW_IN = 0.42          # height of one rank row, shrunk for large P within the limits below
_AXES_MIN_IN = 1.6
_AXES_MAX_IN = 15.0
_LEFT_IN, _RIGHT_IN = 0.85, 0.3
_TITLE_LINE_IN = 0.19
_XLABEL_IN = 0.5
_MEMORY_IN = 1.3        # the memory panel under a single chart
_LEGEND_ROW_IN = 0.27
_LEGEND_COLUMNS = 5
_SUBTITLE_IN = 0.34     # one-line title of each stacked chart in a comparison
_GAP_IN = 0.12

_THIN_COMM_PX = 1.5    # communication narrower than this gets an outline of its own colour
_THIN_LW = 0.6          # points
_MAX_FONT = 9.0         # microbatch labels: points, at most
_MIN_FONT = 4.0         # below this no label is drawn


@dataclass(frozen=True)
class Bar:
    """One drawn rectangle: ``lane`` is compute, p2p, dp or iteration."""

    rank: int
    start: float
    end: float
    color: str
    lane: str
    label: str | None = None


def gantt_format(path: str | Path, option: str = "--gantt") -> str:
    """The image format ``path`` asks for (png, svg or pdf), from its extension."""
    suffix = Path(path).suffix.lower()
    if suffix[1:] not in FORMATS:
        found = repr(suffix) if suffix else "no extension"
        raise ConfigError(f"{option}: cannot tell the image format of {str(path)!r}: expected a "
                          f"name ending in .png, .svg or .pdf, found {found}")
    return suffix[1:]


def time_unit(span_ns: float) -> tuple[str, float]:
    """(name, ns per unit) that keeps the axis numbers between 1 and 1000."""
    for name, scale in (("s", 1e9), ("ms", 1e6), ("µs", 1e3)):
        if span_ns >= scale:
            return name, scale
    return "ns", 1.0


# -- what to draw (no matplotlib) -------------------------------------------------------------
def local_chunks(schedule: Any) -> tuple[dict[int, int], int]:
    """Stage -> index of that stage among its rank's stages; and the most stages any rank has."""
    local: dict[int, int] = {}
    most = 1
    for r in range(schedule.pp):
        stages = schedule.stages_of(r)
        most = max(most, len(stages))
        for i, s in enumerate(stages):
            local[s] = i
    return local, most


def compute_bars(result: SimulationResult) -> list[Bar]:
    """A bar per action record, in (rank, start) order."""
    local, n_local = local_chunks(result.schedule)
    acts = sorted(result.records.actions, key=lambda a: (a.rank, a.start, a.end))
    return [Bar(a.rank, a.start, a.end,
                palette.action_color(a.kind, local.get(a.stage, 0), n_local), "compute",
                str(a.microbatch)) for a in acts]


def p2p_bars(result: SimulationResult) -> list[Bar]:
    """A bar per transfer that takes time, under its sending rank."""
    return [Bar(t.src_rank, t.start, t.end, palette.P2P_COLOR, "p2p")
            for t in sorted(result.records.transfers, key=lambda t: (t.src_rank, t.start, t.end))
            if t.end > t.start]


def collective_bars(result: SimulationResult) -> list[Bar]:
    """A bar per DP collective that takes time, under its rank."""
    return [Bar(c.rank, c.start, c.end, palette.COLLECTIVE_COLOR, "dp")
            for c in sorted(result.records.collectives, key=lambda c: (c.rank, c.start, c.end))
            if c.end > c.start]


def iteration_bars(result: SimulationResult) -> list[Bar]:
    """The once-per-iteration rows (AICB's optimizer / grad-norm rows) of each rank: the compute
    stream from the rank's last action to the time the runtime records it finished."""
    finish = getattr(result.records, "rank_finish", None) or []
    last: dict[tuple[int, int], float] = {}
    for a in result.records.actions:
        key = (a.iteration, a.rank)
        if a.end > last.get(key, float("-inf")):
            last[key] = a.end
    bars = []
    for it, per_rank in enumerate(finish):
        for rank, end in enumerate(per_rank):
            start = last.get((it, rank))
            if start is not None and end > start:
                bars.append(Bar(rank, start, end, palette.ITERATION_COLOR, "iteration"))
    return sorted(bars, key=lambda b: (b.rank, b.start))


def timeline_end(result: SimulationResult) -> float:
    """Where the time axis ends: the last iteration's end (or the last record)."""
    rec = result.records
    ends = [e for _, e in rec.iteration_bounds]
    ends += [a.end for a in rec.actions] + [t.end for t in rec.transfers]
    ends += [c.end for c in rec.collectives]
    return max(ends, default=0.0)


_KIND_ORDER = {Kind.F: 0, Kind.B: 1, Kind.I: 2, Kind.W: 3}


def _legend_entries(result: SimulationResult) -> list[tuple[tuple, str, str]]:
    """(order key, label, colour) of everything the chart of ``result`` shows."""
    local, n_local = local_chunks(result.schedule)
    seen = {(a.kind, local.get(a.stage, 0)) for a in result.records.actions}
    entries = []
    for kind, c in seen:
        label = f"{kind} {palette.KIND_NAMES[kind]}"
        if n_local > 1:
            label += f", chunk {c}"
        entries.append(((_KIND_ORDER[kind], n_local, c), label,
                        palette.action_color(kind, c, n_local)))
    if p2p_bars(result):
        entries.append(((4, 0, 0), "p2p transfer (under the sender)", palette.P2P_COLOR))
    if collective_bars(result):
        entries.append(((5, 0, 0), "DP collective", palette.COLLECTIVE_COLOR))
    if iteration_bars(result):
        entries.append(((6, 0, 0), "optimizer / iteration rows", palette.ITERATION_COLOR))
    return sorted(entries)


def legend_items(results: Any) -> list[tuple[str, str]]:
    """(label, colour) of everything the charts of ``results`` (one or several) show, kinds in
    the order F, B, I, W (each by chunk), then communication."""
    if not isinstance(results, (list, tuple)):
        results = [results]
    entries = sorted({e for r in results for e in _legend_entries(r)})
    return [(label, color) for _, label, color in entries]


def default_title(result: SimulationResult) -> str:
    """Schedule, P, M, v and workload; iteration time and bubble ratio simulated vs the closed
    form; the closed form's formula on its own line (they can be long)."""
    s = result.summary
    sched = result.schedule
    name = Path(str(result.workload.path)).name
    theory = s.theoretical_bubble_ratio
    formula = s.theoretical_formula or ""
    closed = "n/a" if theory is None else fmt_pct(theory)
    lines = [f"{sched.name}  ·  P={sched.pp}, M={sched.microbatches}, v={sched.vpp}  ·  {name}",
             f"iteration {fmt_time(s.makespan_ns)}  ·  bubble {fmt_pct(s.bubble_ratio)} "
             f"simulated vs {closed} closed form"]
    if formula and theory is not None:
        lines.append(f"closed form: {formula}")
    return "\n".join(lines)


# -- drawing ----------------------------------------------------------------------------------
def _lanes(has_p2p: bool, has_dp: bool) -> dict[str, tuple[float, float]]:
    """Vertical extent of each band within a rank's row (row r spans y in [r, r+1])."""
    if not (has_p2p or has_dp):
        return {"compute": (0.10, 0.90)}
    lanes = {"compute": (0.06, 0.66)}
    if has_p2p and has_dp:
        lanes["p2p"] = (0.70, 0.81)
        lanes["dp"] = (0.83, 0.94)
    else:
        lanes["p2p" if has_p2p else "dp"] = (0.70, 0.92)
    return lanes


def _axes_height(pp: int, lo: float = _AXES_MIN_IN, hi: float = _AXES_MAX_IN) -> float:
    return min(hi, max(lo, pp * _ROW_IN))


def _figure_width(results: Sequence[Any]) -> float:
    per_rank = max((len(r.records.actions) / max(1, r.schedule.pp) for r in results), default=0)
    return min(20.0, max(10.0, 4.0 + 0.016 * per_rank))


def _new_figure(width: float, height: float):
    # deferred: matplotlib loads in ~0.3 s, only drawing needs it
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height), dpi=DPI)
    FigureCanvasAgg(fig)
    return fig


def _polys(bars: Sequence[Bar], lane: tuple[float, float]):
    # deferred (start-up)
    import numpy as np

    n = len(bars)
    verts = np.empty((n, 4, 2))
    if n:
        x0 = np.fromiter((b.start for b in bars), float, n)
        x1 = np.fromiter((b.end for b in bars), float, n)
        y = np.fromiter((b.rank for b in bars), float, n)
        verts[:, 0, 0] = verts[:, 1, 0] = x0
        verts[:, 2, 0] = verts[:, 3, 0] = x1
        verts[:, 0, 1] = verts[:, 3, 1] = y + lane[0]
        verts[:, 1, 1] = verts[:, 2, 1] = y + lane[1]
    return verts


def _rgba(colors: Sequence[str]):
    """Colours as one RGBA array, each distinct name converted once: matplotlib converts a
    list name by name (1.4M conversions, 3 of 22 s, at 128,000 bars)."""
    # deferred (start-up)
    import numpy as np
    from matplotlib.colors import to_rgba

    known: dict[str, tuple] = {}
    return np.array([known.get(c) or known.setdefault(c, to_rgba(c)) for c in colors],
                    dtype=float).reshape(-1, 4)


def _collection(ax, bars: Sequence[Bar], lane: tuple[float, float], gid: str, edge: str | None,
                px_per_ns: float, thin_px: float = 0.5):
    """The bars of one band as one PolyCollection (``gid`` names it). ``edge`` "white"
    separates touching bars, None draws faces only. Bars narrower than ``thin_px`` pixels are
    drawn again on top, outlined in their own colour, so they still show (collection
    ``gid-thin``); the data extents stay exact."""
    # deferred: matplotlib loads in ~0.3 s, only drawing needs it
    from matplotlib.collections import PolyCollection

    color, width = {"white": ("white", 0.5), None: ("none", 0.0)}[edge]
    coll = PolyCollection(_polys(bars, lane), facecolors=_rgba([b.color for b in bars]),
                          edgecolors=color, linewidths=width, antialiaseds=True, zorder=2)
    coll.set_gid(gid)
    ax.add_collection(coll)
    thin = [b for b in bars if (b.end - b.start) * px_per_ns < thin_px]
    if thin:
        faces = _rgba([b.color for b in thin])
        over = PolyCollection(_polys(thin, lane), facecolors=faces, edgecolors=faces,
                              linewidths=_THIN_LW, antialiaseds=True, zorder=2.5)
        over.set_gid(f"{gid}-thin")
        ax.add_collection(over)
    return coll


def _label_font(ax, lane: tuple[float, float], pp: int) -> float:
    """Points for microbatch numbers: what the band's height allows, at most _MAX_FONT."""
    row_pt = ax.get_window_extent().height * 72.0 / ax.figure.dpi / pp
    return min(_MAX_FONT, 0.62 * row_pt * (lane[1] - lane[0]))


def _renderer(fig):
    """The renderer text is measured with: the canvas's own (Agg and its GUI subclasses), else
    the one matplotlib makes for layout (vector-only canvases have none of their own)."""
    get = getattr(fig.canvas, "get_renderer", None)
    return get() if get is not None else fig._get_renderer()


def label_fits(text_width_px: float, bar_width_px: float, fontsize: float, dpi: float) -> bool:
    """A label fits when it and a quarter-em margin on each side lie inside the bar."""
    pad = 0.25 * fontsize * dpi / 72.0
    return text_width_px + 2 * pad <= bar_width_px


def _labels(ax, bars: Sequence[Bar], lane: tuple[float, float], pp: int, t_end: float) -> None:
    """Microbatch numbers, each in the largest of two font sizes that fits its bar (or none)."""
    # deferred: matplotlib loads in ~0.3 s, only drawing needs it
    from matplotlib.font_manager import FontProperties

    big = _label_font(ax, lane, pp)
    sizes = [s for s in (big, round(big * 0.75, 2)) if s >= _MIN_FONT]
    if not sizes:
        return
    fig = ax.figure
    renderer = _renderer(fig)
    props = [FontProperties(size=s) for s in sizes]
    px_per_ns = ax.get_window_extent().width / t_end
    widths: dict[tuple[str, int], float] = {}
    # the narrowest character at the smallest size: a bar narrower than the label's length in
    # it cannot hold the label, so a chart of 100,000 thin bars measures no text at all
    # (measuring was 0.3 ms a label: 4.7 of 14 s at 32,000 bars)
    narrowest = min(renderer.get_text_width_height_descent(c, props[-1], False)[0]
                    for c in "0123456789")
    y_mid = (lane[0] + lane[1]) / 2
    for b in bars:
        if b.label is None:
            continue
        bar_px = (b.end - b.start) * px_per_ns
        if not label_fits(len(b.label) * narrowest, bar_px, sizes[-1], fig.dpi):
            continue
        for i, prop in enumerate(props):
            w = widths.get((b.label, i))
            if w is None:
                w = widths[(b.label, i)] = renderer.get_text_width_height_descent(
                    b.label, prop, False)[0]
            if label_fits(w, bar_px, sizes[i], fig.dpi):
                ax.text((b.start + b.end) / 2, b.rank + y_mid, b.label, fontproperties=prop,
                        ha="center", va="center", color=palette.text_color(b.color), zorder=3,
                        clip_on=True, gid="mb-label")
                break


def _draw(ax, result: SimulationResult, *, unit: tuple[str, float], t_end: float, title: str | None,
          xlabel: bool) -> None:
    # deferred: matplotlib loads in ~0.3 s, only drawing needs it
    from matplotlib.ticker import FixedLocator, FuncFormatter, MaxNLocator

    sched = result.schedule
    pp = sched.pp
    compute = compute_bars(result)
    p2p = p2p_bars(result)
    dp = collective_bars(result)
    its = iteration_bars(result)
    lanes = _lanes(bool(p2p), bool(dp))
    ax.set_xlim(0.0, t_end)
    ax.set_ylim(pp, 0.0)    # rank 0 on top
    px_per_ns = ax.get_window_extent().width / t_end
    widths = sorted((b.end - b.start) * px_per_ns for b in compute)
    edge = "white" if widths and widths[len(widths) // 2] >= 6.0 else None
    _collection(ax, compute, lanes["compute"], "compute", edge, px_per_ns)
    if its:
        _collection(ax, its, lanes["compute"], "iteration", edge, px_per_ns)
    if p2p:
        _collection(ax, p2p, lanes["p2p"], "p2p", None, px_per_ns, _THIN_COMM_PX)
    if dp:
        _collection(ax, dp, lanes["dp"], "dp", None, px_per_ns, _THIN_COMM_PX)
    _labels(ax, compute, lanes["compute"], pp, t_end)

    # rank separators, iteration boundaries, axes
    if pp > 1:
        ax.hlines(range(1, pp), 0.0, t_end, colors="#D0D0D0", linewidths=0.4, zorder=1)
    bounds = result.records.iteration_bounds
    if len(bounds) > 1:
        ax.vlines([e for _, e in bounds[:-1]], 0.0, pp, colors="#404040", linewidths=0.8,
                  linestyles="dashed", zorder=4)
    c0, c1 = lanes["compute"]
    ax.yaxis.set_major_locator(FixedLocator([r + (c0 + c1) / 2 for r in range(pp)]))
    row_pt = ax.get_window_extent().height * 72.0 / ax.figure.dpi / pp
    ax.set_yticklabels([f"rank {r}" for r in range(pp)], fontsize=min(9.0, 0.7 * row_pt))
    ax.tick_params(axis="y", length=0)
    name, scale = unit
    ax.xaxis.set_major_locator(MaxNLocator(nbins=12, steps=[1, 2, 2.5, 5, 10]))
    ax.xaxis.set_major_formatter(FuncFormatter(lambda x, _pos: f"{x / scale:g}"))
    ax.tick_params(axis="x", labelsize=8)
    if xlabel:
        ax.set_xlabel(f"time ({name})", fontsize=9)
    ax.grid(axis="x", color="#E4E4E4", linewidth=0.6, zorder=0)
    ax.set_axisbelow(True)
    for side in ("top", "right"):
        ax.spines[side].set_visible(False)
    if title:
        ax.set_title(title, loc="left", fontsize=9.5, linespacing=1.35)


def _legend(fig, items: Sequence[tuple[str, str]], bottom_in: float) -> None:
    # deferred: matplotlib loads in ~0.3 s, only drawing needs it
    from matplotlib.patches import Patch

    if not items:
        return
    handles = [Patch(facecolor=color, edgecolor="none", label=label) for label, color in items]
    rows = -(-len(handles) // _LEGEND_COLUMNS)
    # matplotlib fills a legend column by column: as many columns as the rows need
    fig.legend(handles=handles, loc="lower center", ncol=-(-len(handles) // rows),
               bbox_to_anchor=(0.5, bottom_in / fig.get_figheight()), fontsize=8, frameon=False,
               handlelength=1.4, columnspacing=1.6)


def _legend_height(n: int) -> float:
    return 0.0 if n == 0 else 0.05 + _LEGEND_ROW_IN * -(-n // _LEGEND_COLUMNS)


def draw_gantt(result: SimulationResult, ax: Any = None, *, unit: tuple[str, float] | None = None,
               t_end: float | None = None, title: str | None = None,
               legend: bool = True):
    """Draw ``result``'s timeline; returns the matplotlib ``Figure``.

    Without ``ax`` a figure sized for P ranks is made (legend underneath). With ``ax`` the
    caller's axes are drawn into; its position must be final, since labels are kept only where
    they fit at that size. ``unit``/``t_end`` let stacked charts share one time axis; ``title``
    None means the default (schedule, P, M, v, bubble simulated vs closed form), "" none.
    """
    t_end = t_end if t_end is not None else timeline_end(result)
    t_end = t_end if t_end > 0 else 1.0
    unit = unit or time_unit(t_end)
    text = default_title(result) if title is None else title
    items = legend_items(result) if legend else []
    panel = None
    if ax is None:
        samples = memory_samples(result)
        width = _figure_width([result])
        axes_h = _axes_height(result.schedule.pp)
        top = 0.12 + _TITLE_LINE_IN * (text.count("\n") + 1) if text else 0.2
        bottom = _XLABEL_IN + _legend_height(len(items))
        mem_h = _MEMORY_IN + _GAP_IN if samples else 0.0
        height = top + axes_h + mem_h + bottom
        fig = _new_figure(width, height)
        box = (_LEFT_IN / width, 1.0 - (_LEFT_IN + _RIGHT_IN) / width)
        ax = fig.add_axes((box[0], (bottom + mem_h) / height, box[1], axes_h / height))
        if samples:
            panel = fig.add_axes((box[0], bottom / height, box[1], _MEMORY_IN / height),
                                 sharex=ax)
        _legend(fig, items, 0.05)
    fig = ax.figure
    _draw(ax, result, unit=unit, t_end=t_end, title=text, xlabel=panel is None)
    if panel is not None:
        _memory_panel(panel, samples, result.schedule.pp, unit)
        ax.tick_params(axis="x", labelbottom=False)
    return fig


def memory_samples(result: SimulationResult) -> list[tuple[int, float, float]]:
    """(rank, time, bytes) after every change of the run's memory (engine/memory_use.py)."""
    return memory_timeline(result.schedule, result.records, result.iterations)


def _memory_panel(ax, samples: list[tuple[int, float, float]], pp: int,
                  unit: tuple[str, float]) -> None:
    """Each rank's memory over time, a step line per rank, the peak marked."""
    # deferred: matplotlib loads in ~0.3 s, only drawing needs it
    from matplotlib import colormaps

    top = max(b for _, _, b in samples) or 1.0
    div, label = next(((d, n) for d, n in ((2**30, "GiB"), (2**20, "MiB"), (2**10, "KiB"))
                       if top >= d), (1, "B"))
    colors = colormaps["viridis"]
    per_rank: list[tuple[list, list]] = [([], []) for _ in range(pp)]
    for rank, t, b in samples:
        xs, ys = per_rank[rank]
        xs.append(t)
        ys.append(b / div)
    for r, (xs, ys) in enumerate(per_rank):
        if xs:
            ax.step(xs, ys, where="post", linewidth=0.9, color=colors(r / max(1, pp - 1)),
                    label=f"rank {r}")
    ax.set_ylabel(f"memory ({label})", fontsize=8)
    ax.set_ylim(bottom=0.0)
    ax.tick_params(axis="both", labelsize=8)
    ax.set_xlabel(f"time ({unit[0]})", fontsize=9)
    ax.grid(axis="both", color="#E4E4E4", linewidth=0.6, zorder=0)
    for side in ("top", "right"):
        ax.spines[side].set_visible(False)
    if pp <= 8:
        ax.legend(fontsize=7, ncol=min(pp, 8), frameon=False, loc="lower center")


def comparison_title(result: SimulationResult, speedup: float | None = None, baseline: str = "") -> str:
    s = result.summary
    theory = s.theoretical_bubble_ratio
    closed = "n/a" if theory is None else fmt_pct(theory)
    text = (f"{result.schedule.name} (v={result.schedule.vpp})  ·  {fmt_time(s.makespan_ns)}  ·  "
            f"bubble {fmt_pct(s.bubble_ratio)} simulated, {closed} closed form  ·  "
            f"peak memory {fmt_bytes(s.peak_memory_bytes)}")
    if speedup is not None:
        text += f"  ·  speed-up {speedup:.2f}× over {baseline}"
    return text


def draw_comparison(results: Sequence[Any], titles: Sequence[str] | None = None):
    """One figure, a Gantt chart per result stacked on a shared time axis; returns the Figure."""
    if not results:
        raise ConfigError("--gantt: no schedule ran, nothing to draw")
    titles = list(titles) if titles is not None else [comparison_title(r) for r in results]
    t_end = max(timeline_end(r) for r in results) or 1.0
    unit = time_unit(t_end)
    items = legend_items(list(results))
    width = _figure_width(results)
    heights = [_axes_height(r.schedule.pp, 1.0, 6.0) for r in results]
    bottom = _XLABEL_IN + _legend_height(len(items))
    height = 0.2 + sum(heights) + len(results) * (_SUBTITLE_IN + _GAP_IN) + bottom
    fig = _new_figure(width, height)
    y = height - 0.2
    axes = []
    for h in heights:
        y -= _SUBTITLE_IN + h
        axes.append(fig.add_axes((_LEFT_IN / width, y / height,
                                  1.0 - (_LEFT_IN + _RIGHT_IN) / width, h / height)))
        y -= _GAP_IN
    for i, (ax, r, t) in enumerate(zip(axes, results, titles)):
        last = i == len(results) - 1
        _draw(ax, r, unit=unit, t_end=t_end, title=t, xlabel=last)
        if not last:
            ax.tick_params(axis="x", labelbottom=False)
    _legend(fig, items, 0.05)
    return fig


def save_figure(fig, path: str | Path, option: str = "--gantt") -> Path:
    """Write ``fig`` in the format the extension names, reproducibly (no dates in the file)."""
    # deferred: matplotlib loads in ~0.3 s, only drawing needs it
    import matplotlib

    fmt = gantt_format(path, option)
    metadata = {"png": {"Software": None}, "svg": {"Date": None},
                "pdf": {"CreationDate": None, "Producer": None}}[fmt]
    out = Path(path)
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        with matplotlib.rc_context({"svg.hashsalt": "pipesim"}):
            fig.savefig(out, format=fmt, dpi=DPI, metadata=metadata, bbox_inches="tight",
                        pad_inches=0.12, facecolor="white")
    except OSError as err:
        raise ConfigError(f"{option}: cannot write {str(path)!r}: {err.strerror or err}") from None
    return out


def write_gantt(result: SimulationResult, path: str | Path) -> Path:
    """``pipesim run --gantt PATH``: the chart of ``result`` as PNG, SVG or PDF."""
    gantt_format(path)
    return save_figure(draw_gantt(result), path)


def write_comparison(results: Sequence[Any], path: str | Path,
                     titles: Sequence[str] | None = None) -> Path:
    """``pipesim compare --gantt PATH``: the stacked charts as PNG, SVG or PDF."""
    gantt_format(path)
    return save_figure(draw_comparison(results, titles), path)
