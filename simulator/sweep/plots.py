"""Plots of a sweep's table (PNG, matplotlib Agg, imported only here).

- ``bubble_vs_microbatches.png``: simulated bubble ratio per schedule against M, one panel per
  pp, with the schedule's closed form as a dashed curve;
- ``makespan_vs_pp.png``: iteration time per schedule against pp;
- ``makespan_vs_<system key>.png``: iteration time against each swept bandwidth
  (``system.links.bandwidth_gbps`` -> ``makespan_vs_links_bandwidth_gbps.png``).

A plot is drawn only when the table varies its x parameter. A 2-D plot is a slice of the grid:
other parameters that vary are held at their most common value, and the title says which; a
parameter that moves with x (a ``zip:`` group) is left as it is.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..schedules import registry

# the resolved value of a run option (the spec may leave it to the workload header)
RESOLVED = {"schedule": "run_schedule", "pp": "run_pp", "vpp": "run_vpp",
            "microbatches": "run_microbatches"}
MAX_PANELS = 6
MARKERS = "osD^vP*Xh<>"


def _param_columns(frame: Any) -> list[str]:
    """The swept parameters: the columns between ``point_id`` and ``status``."""
    cols = list(frame.columns)
    try:
        return cols[cols.index("point_id") + 1: cols.index("status")]
    except ValueError:
        return []


def _dims(frame: Any) -> dict[str, str]:
    """Parameter name -> the column holding its value for a run."""
    dims = {name: col for name, col in RESOLVED.items() if col in frame.columns}
    for col in _param_columns(frame):
        if col not in dims:
            dims[col] = col
    return dims


def _varies(rows: Any, col: str) -> bool:
    return rows[col].nunique(dropna=True) > 1


def _moves_with(rows: Any, x: str, col: str) -> bool:
    """True when ``col`` takes one value per x value (it varies along with x, e.g. zipped)."""
    return bool((rows.groupby(x)[col].nunique(dropna=False) <= 1).all())


def _mode(rows: Any, col: str) -> Any:
    counts = rows[col].value_counts(sort=False)
    return counts.index[int(counts.to_numpy().argmax())]


def _fmt(value: Any) -> str:
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def _slice(rows: Any, dims: dict[str, str], keep: set[str],
           anchors: list[str]) -> tuple[Any, list[str]]:
    """Hold every varying parameter not in ``keep`` at its mode, except those moving with an
    anchor (the x axis, the panel parameter): those are named as moving with it."""
    notes = []
    names = {col: name for name, col in dims.items()}
    for name, col in dims.items():
        if col in keep or not _varies(rows, col):
            continue
        anchor = next((a for a in anchors if _moves_with(rows, a, col)), None)
        if anchor is not None:
            notes.append(f"{name} moves with {names.get(anchor, anchor)}")
            continue
        value = _mode(rows, col)
        rows = rows[rows[col] == value]
        notes.append(f"{name} = {_fmt(value)}")
    return rows, notes


def _series(rows: Any, dims: dict[str, str]) -> tuple[list[str], Any]:
    """One line per schedule, per (schedule, vpp) when vpp varies within a schedule."""
    sched = dims["schedule"]
    vpp = dims.get("vpp")
    label = rows[sched].astype(str)
    if vpp and (rows.groupby(sched)[vpp].nunique() > 1).any():
        label = label + " v=" + rows[vpp].astype(str)
    return sorted(label.unique()), label


def _closed_form(schedule: str, pp: int, vpp: int, ms: list[int]) -> list[float] | None:
    try:
        spec = registry.get(schedule)
    except Exception:  # noqa: BLE001 -- an unregistered schedule just gets no curve
        return None
    if spec.closed_form is None:
        return None
    try:
        return [spec.closed_form(pp, m, vpp) for m in ms]
    except (ZeroDivisionError, ValueError, TypeError):
        return None


def _figure(n_panels: int, sharey: bool):
    # deferred: matplotlib loads in ~0.3 s, only drawing needs it
    import matplotlib

    matplotlib.use("Agg")
    # deferred: matplotlib loads in ~0.3 s, only drawing needs it
    import matplotlib.pyplot as plt

    cols = 2 if n_panels == 4 else min(n_panels, 3)
    rows = (n_panels + cols - 1) // cols
    fig, axes = plt.subplots(rows, cols, figsize=(5.2 * cols + 1.8, 3.9 * rows + 0.9),
                             squeeze=False, sharey=sharey)
    return plt, fig, [ax for row in axes for ax in row]


def _plot(frame: Any, *, x: str, y: str, facet: str | None, name: str, title: str,
          xlabel: str, ylabel: str, out_dir: Path, colors: dict[str, Any], scale: float = 1.0,
          closed_form: bool = False, percent: bool = False,
          sharey: bool = False) -> Path | None:
    dims = _dims(frame)
    rows = frame[frame["status"] == "ok"]
    if x not in rows.columns or not _varies(rows, x):
        return None
    keep = {x, dims.get("schedule", ""), dims.get("vpp", "")}
    use_facet = facet is not None and facet in rows.columns and _varies(rows, facet) \
        and not _moves_with(rows, x, facet)
    if use_facet:
        keep.add(facet)
    rows, held = _slice(rows, dims, keep, [x, facet] if use_facet else [x])
    panels = sorted(rows[facet].dropna().unique())[:MAX_PANELS] if use_facet else [None]
    names, labels = _series(rows, dims)
    plt, fig, axes = _figure(len(panels), sharey)
    facet_name = next((n for n, c in dims.items() if c == facet), facet)
    for ax, panel in zip(axes, panels):
        sub = rows if panel is None else rows[rows[facet] == panel]
        for i, series in enumerate(names):
            pts = sub[labels.loc[sub.index] == series].sort_values(x)
            if pts.empty:
                continue
            color = colors.get(series.split(" v=")[0], None)
            # every other series hollow and larger: equal results stay visible, not hidden
            hollow = i % 2 == 1
            ax.plot(pts[x].astype(float), pts[y].astype(float) * scale, marker=MARKERS[i % 10],
                    color=color, label=series, linewidth=1.6, markersize=8 if hollow else 5,
                    markerfacecolor="none" if hollow else color, alpha=0.9)
            if closed_form:
                _draw_closed_form(ax, pts, dims, x, color)
        if panel is not None:
            ax.set_title(f"{facet_name} = {_fmt(panel)}", fontsize=10)
        ax.set_xlabel(xlabel)
        xs = sorted(sub[x].dropna().astype(float).unique())
        if xs and xs[0] > 0 and xs[-1] / xs[0] >= 4:  # doublings (2, 4, 8 ...) evenly spaced
            ax.set_xscale("log", base=2)
        if len(xs) <= 12:
            ax.set_xticks(xs, [_fmt(v) for v in xs])
            ax.minorticks_off()
        if percent:
            # deferred: matplotlib loads in ~0.3 s, only drawing needs it
            from matplotlib.ticker import PercentFormatter

            ax.yaxis.set_major_formatter(PercentFormatter(1.0))
        ax.grid(True, alpha=0.3)
    for ax in axes[len(panels):]:
        ax.set_visible(False)
    n_cols = 2 if len(panels) == 4 else min(len(panels), 3)
    for i, ax in enumerate(axes[:len(panels)]):
        if not sharey or i % n_cols == 0:
            ax.set_ylabel(ylabel)
    found: dict[str, Any] = {}
    for ax in axes[:len(panels)]:  # a series may be missing from some panels
        for handle, text in zip(*ax.get_legend_handles_labels()):
            found.setdefault(text, handle)
    texts = [n for n in names if n in found]
    handles = [found[n] for n in texts]
    if closed_form:
        # deferred: matplotlib loads in ~0.3 s, only drawing needs it
        from matplotlib.lines import Line2D

        handles.append(Line2D([], [], color="grey", linestyle="--"))
        texts.append("closed form")
    fig.legend(handles, texts, loc="center left", bbox_to_anchor=(1.0, 0.5), frameon=False,
               fontsize=9)
    sub_title = f"\n{', '.join(held)}" if held else ""
    fig.suptitle(title + sub_title, fontsize=12)
    fig.tight_layout()
    path = out_dir / name
    fig.savefig(path, dpi=130, bbox_inches="tight")
    plt.close(fig)
    return path


def _draw_closed_form(ax: Any, pts: Any, dims: dict[str, str], x: str, color: Any) -> None:
    """The schedule's closed form over every integer M in the plotted range (dashed); at the
    points only when pp or vpp changes along the line (zipped with M)."""
    first = pts.iloc[0]
    schedule = str(first[dims["schedule"]])
    pp, vpp = int(first[dims["pp"]]), int(first[dims["vpp"]])
    lo, hi = int(pts[x].min()), int(pts[x].max())
    ms = list(range(lo, hi + 1)) if hi - lo <= 512 else [int(v) for v in pts[x]]
    fixed = pts[dims["pp"]].nunique() == 1 and pts[dims["vpp"]].nunique() == 1
    curve = _closed_form(schedule, pp, vpp, ms) if fixed else None
    if curve is None:
        ok = pts["theoretical_bubble_ratio"].notna()
        ms, curve = list(pts[x][ok].astype(int)), list(pts["theoretical_bubble_ratio"][ok])
    if curve:
        ax.plot(ms, curve, linestyle="--", color=color, linewidth=1.1, alpha=0.8)


def write_plots(frame: Any, out_dir: str | Path) -> list[Path]:
    """Draw every plot the table has the columns and the variation for; the paths written."""
    out = Path(out_dir)
    if "status" not in frame.columns or "run_schedule" not in frame.columns:
        return []
    # deferred: matplotlib loads in ~0.3 s, only drawing needs it
    import matplotlib

    cmap = matplotlib.colormaps["tab10"]
    dims = _dims(frame)
    sched_col = dims.get("schedule")
    schedules = sorted(frame[sched_col].dropna().astype(str).unique()) if sched_col else []
    colors = {s: cmap(i % 10) for i, s in enumerate(schedules)}
    common = {"out_dir": out, "colors": colors}
    written = [
        _plot(frame, x=dims.get("microbatches", ""), y="bubble_ratio", facet=dims.get("pp"),
              name="bubble_vs_microbatches.png", title="Bubble ratio vs microbatches "
              "(solid: simulated, dashed: closed form)", xlabel="microbatches per iteration (M)",
              ylabel="bubble ratio (idle / iteration)", closed_form=True, percent=True,
              sharey=True, **common),
        _plot(frame, x=dims.get("pp", ""), y="makespan_ns", facet=dims.get("microbatches"),
              name="makespan_vs_pp.png", title="Iteration time vs pipeline stages",
              xlabel="pipeline stages (pp)", ylabel="iteration time (ms)", scale=1e-6,
              **common),
    ]
    for col in frame.columns:
        if col.startswith("system.") and col.endswith("bandwidth_gbps"):
            key = col[len("system."):]
            what = ("point-to-point link bandwidth" if key == "links.bandwidth_gbps" else
                    f"{key.rsplit('.', 1)[0]} bandwidth")
            written.append(_plot(
                frame, x=col, y="makespan_ns", facet=dims.get("pp"),
                name=f"makespan_vs_{key.replace('.', '_')}.png",
                title=f"Iteration time vs {what} ({col})", xlabel=f"{what} (Gb/s)",
                ylabel="iteration time (ms)", scale=1e-6, **common))
    return [p for p in written if p is not None]
