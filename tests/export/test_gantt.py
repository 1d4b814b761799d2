"""Gantt charts: the drawn bars against the simulated actions, labels, formats."""

from __future__ import annotations

import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from matplotlib.colors import to_rgba
from matplotlib.font_manager import FontProperties

from simulator import simulate
from simulator.errors import ConfigError
from simulator.export import palette
from simulator.export.gantt import (draw_comparison, draw_gantt, label_fits, legend_items,
                                    save_figure, time_unit, write_comparison, write_gantt)
from simulator.workload import uniform_workload

from .conftest import run

REPO = Path(__file__).resolve().parents[2]


def collection(ax, gid):
    found = [c for c in ax.collections if c.get_gid() == gid]
    assert len(found) <= 1
    return found[0] if found else None


def extents(coll):
    """(x0, x1, y0, y1) of each polygon, in drawing order."""
    out = []
    for path in coll.get_paths():
        v = path.vertices
        out.append((v[:, 0].min(), v[:, 0].max(), v[:, 1].min(), v[:, 1].max()))
    return out


def expected_color(result, a):
    local = {s: i for r in range(result.schedule.pp)
             for i, s in enumerate(result.schedule.stages_of(r))}
    n = max(len(result.schedule.stages_of(r)) for r in range(result.schedule.pp))
    return palette.action_color(a.kind, local[a.stage], n)


def labels(ax):
    return [t for t in ax.texts if t.get_gid() == "mb-label"]


def test_bars_match_the_actions(one_f_one_b):
    r = one_f_one_b
    fig = draw_gantt(r)
    ax = fig.axes[0]
    coll = collection(ax, "compute")
    acts = sorted(r.records.actions, key=lambda a: (a.rank, a.start, a.end))
    assert len(coll.get_paths()) == len(acts) == 4 * 8 * 2
    assert extents(coll) == [(a.start, a.end, a.rank + 0.06, a.rank + 0.66) for a in acts]
    faces = [tuple(c) for c in coll.get_facecolors()]
    assert faces == [to_rgba(palette.KIND_COLORS[a.kind]) for a in acts]
    assert {a.kind for a in acts} == {"F", "B"}
    assert ax.get_xlim() == (0.0, r.makespan_ns)
    assert ax.get_ylim() == (4.0, 0.0)         # rank 0 on top
    assert [t.get_text() for t in ax.get_yticklabels()] == ["rank 0", "rank 1", "rank 2",
                                                            "rank 3"]


def test_conventional_colours():
    assert palette.KIND_COLORS == {"F": "#3B78C4", "I": "#1FA39A", "W": "#5AAE46",
                                   "B": "#F28A2E"}
    assert (palette.P2P_COLOR, palette.COLLECTIVE_COLOR) == ("#F2C200", "#8C8C8C")


def test_split_backward_is_teal_and_green():
    r = run("zb-h1", 4, 8)
    coll = collection(draw_gantt(r).axes[0], "compute")
    acts = sorted(r.records.actions, key=lambda a: (a.rank, a.start, a.end))
    assert {a.kind for a in acts} == {"F", "I", "W"}
    assert [tuple(c) for c in coll.get_facecolors()] == [
        to_rgba(palette.KIND_COLORS[a.kind]) for a in acts]


@pytest.mark.parametrize("schedule,vpp", [("interleaved-1f1b", 2), ("zb-v", None),
                                          ("dualpipe-v", None)])
def test_chunks_are_shaded_apart(schedule, vpp):
    r = run(schedule, 2, 4, vpp)
    coll = collection(draw_gantt(r).axes[0], "compute")
    acts = sorted(r.records.actions, key=lambda a: (a.rank, a.start, a.end))
    assert [tuple(c) for c in coll.get_facecolors()] == [to_rgba(expected_color(r, a))
                                                         for a in acts]
    for kind in {a.kind for a in acts}:
        first, last = (palette.action_color(kind, c, 2) for c in (0, 1))
        assert first != last
        assert palette.luminance(first) > palette.luminance(palette.KIND_COLORS[kind]) > \
            palette.luminance(last)


def test_chunk_shade_of_a_single_chunk_is_the_base_colour():
    assert palette.chunk_shade("#3b78c4", 0, 1) == "#3B78C4"
    assert palette.mix("#808080", 1.0) == "#FFFFFF"
    assert palette.mix("#808080", -1.0) == "#000000"
    assert palette.mix("#000000", 0.5) == "#808080"


def test_label_colour_contrasts():
    assert palette.text_color(palette.P2P_COLOR) == "#000000"
    assert palette.text_color(palette.action_color("F", 1, 2)) == "#FFFFFF"
    assert palette.text_color("#FFFFFF") == "#000000"


def test_communication_band_under_each_rank(one_f_one_b):
    r = one_f_one_b
    ax = draw_gantt(r).axes[0]
    p2p = collection(ax, "p2p")
    transfers = sorted(r.records.transfers, key=lambda t: (t.src_rank, t.start, t.end))
    assert extents(p2p) == [(t.start, t.end, t.src_rank + 0.70, t.src_rank + 0.81)
                            for t in transfers]
    assert {tuple(c) for c in p2p.get_facecolors()} == {to_rgba(palette.P2P_COLOR)}
    dp = collection(ax, "dp")
    colls = sorted(r.records.collectives, key=lambda c: (c.rank, c.start, c.end))
    assert len(colls) == 4 * 4   # four layers per rank, one all-reduce each
    assert extents(dp) == [(c.start, c.end, c.rank + 0.83, c.rank + 0.94) for c in colls]
    assert {tuple(c) for c in dp.get_facecolors()} == {to_rgba(palette.COLLECTIVE_COLOR)}


def test_without_communication_the_compute_band_fills_the_row():
    r = simulate(uniform_workload(4), "1f1b", pp=2, microbatches=4)
    ax = draw_gantt(r).axes[0]
    assert collection(ax, "p2p") is None and collection(ax, "dp") is None
    assert {e[2:] for e in extents(collection(ax, "compute"))} == {(0.1, 0.9), (1.1, 1.9)}


def test_every_bar_labelled_when_wide_p2_m4():
    r = run("1f1b", 2, 4)
    fig = draw_gantt(r)
    ax = fig.axes[0]
    texts = labels(ax)
    acts = sorted(r.records.actions, key=lambda a: (a.rank, a.start, a.end))
    got = sorted((t.get_position(), t.get_text()) for t in texts)
    want = sorted((((a.start + a.end) / 2, a.rank + 0.36), str(a.microbatch)) for a in acts)
    assert got == want
    renderer = fig.canvas.get_renderer()
    for t, path in zip(sorted(texts, key=lambda t: t.get_position()),
                       sorted(collection(ax, "compute").get_paths(),
                              key=lambda p: (p.vertices[:, 0].mean(), p.vertices[:, 1].mean()))):
        box = t.get_window_extent(renderer)
        bar = ax.transData.transform(path.vertices)
        assert bar[:, 0].min() < box.x0 and box.x1 < bar[:, 0].max()
        assert min(bar[:, 1]) < box.y0 and box.y1 < max(bar[:, 1])
        assert t.get_color() in ("#000000", "#FFFFFF")


def test_labels_only_where_they_fit():
    # W costs 3 % of F: the W bars are too narrow for a number, F and I bars are not
    r = run("zb-h1", 2, 4, fwd=1000, ig=1000, wg=30)
    fig = draw_gantt(r)
    ax = fig.axes[0]
    renderer = fig.canvas.get_renderer()
    px_per_ns = ax.get_window_extent().width / ax.get_xlim()[1]
    by_pos = {(round(t.get_position()[0], 6), round(t.get_position()[1], 6)): t
              for t in labels(ax)}
    sizes = {t.get_fontsize() for t in labels(ax)}
    assert 1 <= len(sizes) <= 2
    labelled = {"F": 0, "I": 0, "W": 0}
    for a in r.records.actions:
        t = by_pos.get((round((a.start + a.end) / 2, 6), round(a.rank + 0.36, 6)))
        bar_px = (a.end - a.start) * px_per_ns
        if t is None:
            for size in sizes:
                w = renderer.get_text_width_height_descent(str(a.microbatch),
                                                           FontProperties(size=size), False)[0]
                assert not label_fits(w, bar_px, size, fig.dpi)
        else:
            labelled[a.kind] += 1
            assert t.get_text() == str(a.microbatch)
            assert label_fits(t.get_window_extent(renderer).width, bar_px, t.get_fontsize(),
                              fig.dpi)
    assert labelled == {"F": 8, "I": 8, "W": 0}


def test_label_fits_needs_a_quarter_em_each_side():
    # 8 pt at 72 dpi: 2 px of margin each side
    assert label_fits(10.0, 14.0, 8.0, 72.0)
    assert not label_fits(10.0, 13.9, 8.0, 72.0)


def test_title_names_schedule_shape_and_both_bubbles():
    r = simulate(uniform_workload(2, 1000, 1500, 500), "gpipe", pp=2, microbatches=1)
    ax, panel = draw_gantt(r).axes
    assert ax.get_title(loc="left") == (
        "gpipe  ·  P=2, M=1, v=1  ·  <uniform>\n"
        "iteration 6.000 us  ·  bubble 50.00 % simulated vs 50.00 % closed form\n"
        "closed form: (P-1)/(M+P-1)")
    # the time axis is labelled once, under the memory panel that shares it
    assert (ax.get_xlabel(), panel.get_xlabel()) == ("", "time (µs)")
    fmt = ax.xaxis.get_major_formatter()
    assert [fmt(x, 0) for x in (0.0, 2000.0, 2500.0)] == ["0", "2", "2.5"]


@pytest.mark.parametrize("span,unit", [(999.0, ("ns", 1.0)), (1000.0, ("µs", 1e3)),
                                       (2.5e6, ("ms", 1e6)), (3e9, ("s", 1e9))])
def test_time_unit_from_the_span(span, unit):
    assert time_unit(span) == unit


def test_legend_lists_what_is_drawn():
    r = run("interleaved-1f1b", 2, 4, 2)
    assert [label for label, _ in legend_items(r)] == [
        "F forward, chunk 0", "F forward, chunk 1", "B full backward, chunk 0",
        "B full backward, chunk 1", "p2p transfer (under the sender)", "DP collective"]
    fig = draw_gantt(r)
    assert [t.get_text() for t in fig.legends[0].get_texts()] == [
        label for label, _ in legend_items(r)]


def test_figure_height_grows_with_p_within_limits():
    heights = {}
    for pp in (2, 8, 64):
        r = simulate(uniform_workload(pp), "1f1b", pp=pp, microbatches=2)
        fig = draw_gantt(r)
        heights[pp] = fig.axes[0].get_position().height * fig.get_figheight()
    assert heights[2] == pytest.approx(1.6)
    assert heights[8] == pytest.approx(8 * 0.42)
    assert heights[64] == pytest.approx(15.0)


def test_iteration_boundaries_are_marked():
    r = simulate(uniform_workload(4), "1f1b", pp=2, microbatches=2, iterations=2)
    ax = draw_gantt(r).axes[0]
    dashed = [c for c in ax.collections if c.get_linestyle()[0][1] is not None]
    assert len(dashed) == 1
    segs = dashed[0].get_segments()
    assert [s[0][0] for s in segs] == [r.records.iteration_bounds[0][1]]


def test_iteration_rows_of_an_aicb_file_are_drawn(real_dir):
    r = simulate(real_dir / "workload_gpt13b_128g.txt", "1f1b", layout="aicb",
                 microbatches=4)
    ax = draw_gantt(r).axes[0]
    last = {}
    for a in r.records.actions:
        last[a.rank] = max(last.get(a.rank, 0.0), a.end)
    its = collection(ax, "iteration")
    assert extents(its) == [(last[rank], r.records.rank_finish[0][rank], rank + 0.06,
                             rank + 0.66) for rank in range(r.schedule.pp)]
    assert all(e[1] > e[0] for e in extents(its))


def test_sub_pixel_bars_are_outlined_on_top(real_dir):
    # this AICB file's backwards are 160-odd ns against 5 ms forwards: far below a pixel
    r = simulate(real_dir / "workload_gpt13b_128g.txt", "1f1b", layout="aicb",
                 microbatches=4)
    ax = draw_gantt(r).axes[0]
    thin = collection(ax, "compute-thin")
    narrow = sorted((a.start, a.end) for a in r.records.actions if a.kind == "B")
    assert sorted(e[:2] for e in extents(thin)) == narrow
    assert thin.get_zorder() > collection(ax, "compute").get_zorder()


def test_p64_m512_draws_every_bar_without_labels(tmp_path):
    # how long it takes is benchmarks/bench_gantt.py's figure, not a test's
    r = simulate(uniform_workload(64, 200_000, 200_000, 200_000, pp_comm=1 << 22), "1f1b",
                 pp=64, microbatches=512)
    fig = draw_gantt(r)
    path = save_figure(fig, tmp_path / "big.png")
    assert len(collection(fig.axes[0], "compute").get_paths()) == 64 * 512 * 2
    assert not labels(fig.axes[0])
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_image_formats(tmp_path, one_f_one_b):
    png = write_gantt(one_f_one_b, tmp_path / "g.png")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    svg = write_gantt(one_f_one_b, tmp_path / "g.SVG")
    root = ET.parse(svg).getroot()
    assert root.tag == "{http://www.w3.org/2000/svg}svg"
    pdf = write_gantt(one_f_one_b, tmp_path / "g.pdf")
    assert pdf.read_bytes()[:5] == b"%PDF-"


def test_svg_is_reproducible(tmp_path, one_f_one_b):
    a = write_gantt(one_f_one_b, tmp_path / "a.svg").read_bytes()
    b = write_gantt(one_f_one_b, tmp_path / "b.svg").read_bytes()
    assert a == b


def test_unknown_extension_names_the_option(tmp_path, one_f_one_b):
    with pytest.raises(ConfigError) as err:
        write_gantt(one_f_one_b, tmp_path / "g.jpg")
    assert str(err.value) == (f"--gantt: cannot tell the image format of "
                              f"{str(tmp_path / 'g.jpg')!r}: expected a name ending in .png, "
                              ".svg or .pdf, found '.jpg'")
    with pytest.raises(ConfigError, match="found no extension$"):
        write_gantt(one_f_one_b, tmp_path / "gantt")


def test_unwritable_path_is_one_line_error_and_a_new_folder_is_made(tmp_path, one_f_one_b):
    (tmp_path / "f").write_text("")
    with pytest.raises(ConfigError) as err:
        write_gantt(one_f_one_b, tmp_path / "f" / "g.png")
    assert str(err.value) == (f"--gantt: cannot write {str(tmp_path / 'f' / 'g.png')!r}: "
                              "File exists")
    write_gantt(one_f_one_b, tmp_path / "new" / "g.png")
    assert (tmp_path / "new" / "g.png").read_bytes()[:4] == b"\x89PNG"


def test_comparison_shares_the_time_axis(tmp_path):
    results = [run(name, 2, 4, vpp) for name, vpp in (("1f1b", None), ("gpipe", None),
                                                      ("interleaved-1f1b", 2))]
    fig = draw_comparison(results)
    assert len(fig.axes) == 3
    end = max(r.records.iteration_bounds[-1][1] for r in results)
    assert [ax.get_xlim() for ax in fig.axes] == [(0.0, end)] * 3
    for ax, r in zip(fig.axes, results):
        assert len(collection(ax, "compute").get_paths()) == len(r.records.actions)
        assert ax.get_title(loc="left").startswith(f"{r.schedule.name} (v={r.schedule.vpp})")
    assert [ax.get_xlabel() for ax in fig.axes] == ["", "", "time (µs)"]
    tops = [ax.get_position().y0 for ax in fig.axes]
    assert tops == sorted(tops, reverse=True)   # stacked in the given order
    legend = [t.get_text() for t in fig.legends[0].get_texts()]
    assert legend == [label for label, _ in legend_items(results)]
    assert write_comparison(results, tmp_path / "c.png").read_bytes()[:4] == b"\x89PNG"


def test_draws_into_the_callers_axes(one_f_one_b):
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(8, 4))
    FigureCanvasAgg(fig)
    ax = fig.add_subplot(2, 1, 2)
    assert draw_gantt(one_f_one_b, ax=ax, title="") is fig
    assert len(collection(ax, "compute").get_paths()) == len(one_f_one_b.records.actions)
    assert ax.get_title(loc="left") == "" and not fig.legends


def test_comparison_of_nothing_is_an_error():
    with pytest.raises(ConfigError, match="^--gantt: no schedule ran, nothing to draw$"):
        draw_comparison([])


def _imports_matplotlib(code: str) -> bool:
    out = subprocess.run([sys.executable, "-c", code + "\nimport sys\n"
                          "print('matplotlib' in sys.modules)"],
                         cwd=REPO, capture_output=True, text=True, check=True)
    return out.stdout.strip().splitlines()[-1] == "True"


def test_run_and_compare_import_matplotlib_only_for_a_chart(tmp_path):
    wl = REPO / "workloads" / "gpt-24l.txt"
    base = "from simulator.cli.main import main\n"
    assert not _imports_matplotlib(base + f"main(['run', {str(wl)!r}, '-m', '4'])")
    assert not _imports_matplotlib(
        base + f"main(['compare', {str(wl)!r}, '-s', '1f1b,gpipe', '-m', '4'])")
    assert _imports_matplotlib(
        base + f"main(['run', {str(wl)!r}, '-m', '4', '--gantt', {str(tmp_path / 'g.png')!r}])")


def test_a_memory_panel_under_the_chart_steps_through_each_ranks_memory():
    """One step line per rank, on the chart's time axis; each line's top is the rank's peak
    (17 x 1000 B per stash: 1F1B's rank r holds P - r of them)."""
    r = simulate(uniform_workload(4, pp_comm=1000), "1f1b", pp=4, microbatches=8)
    fig = draw_gantt(r)
    chart, panel = fig.axes
    assert panel.get_shared_x_axes().joined(chart, panel)
    lines = panel.get_lines()
    assert [ln.get_label() for ln in lines] == [f"rank {k}" for k in range(4)]
    assert panel.get_ylabel() == "memory (KiB)"
    tops = [max(ln.get_ydata()) * 1024 for ln in lines]
    assert tops == [s["peak_memory_bytes"] for s in r.to_dict()["ranks"]]
    assert tops == [4 * 17000, 3 * 17000, 2 * 17000, 17000]
    # the memory counted from the start: nothing before the first forward on any rank
    assert [ln.get_ydata()[0] for ln in lines] == [0.0] * 4
