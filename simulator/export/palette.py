"""Colours shared by the Gantt charts (and anything else that draws a timeline).

The convention of PyTorch's pipeline visualizer and the zero-bubble tools: forward blue,
input-gradient backward (I) teal, weight-gradient backward (W) green, full backward (B) orange,
point-to-point communication yellow, optimizer / DP collectives grey. Chunks of interleaved and
V-shaped schedules are told apart by shade: a rank's first chunk lighter, its last darker.

Plain hex strings and arithmetic, so importing this never pulls in matplotlib.
"""

from __future__ import annotations
from ..schedules.action import Kind

KIND_COLORS: dict[str, str] = {
    Kind.F: "#3B78C4",   # forward: blue
    Kind.I: "#1FA39A",   # backward for inputs: teal
    Kind.W: "#5AAE46",   # backward for weights: green
    Kind.B: "#F28A2E",   # full backward: orange
}
P2P_COLOR = "#F2C200"          # point-to-point transfers: yellow
COLLECTIVE_COLOR = "#8C8C8C"   # DP weight-gradient collectives: grey
ITERATION_COLOR = "#B4B4B4"    # once-per-iteration rows (optimizer, grad norm): light grey

KIND_NAMES: dict[str, str] = {
    Kind.F: "forward",
    Kind.B: "full backward",
    Kind.I: "backward for inputs",
    Kind.W: "backward for weights",
}

# how far a chunk's shade moves from the base colour: towards white for the first chunk,
# towards black for the last (linear in between)
_LIGHTEN = 0.38
_DARKEN = 0.30


def _rgb(hex_color: str) -> tuple[float, float, float]:
    h = hex_color.lstrip("#")
    return (int(h[0:2], 16) / 255, int(h[2:4], 16) / 255, int(h[4:6], 16) / 255)


def _hex(rgb: tuple[float, float, float]) -> str:
    return "#" + "".join(f"{round(min(1.0, max(0.0, c)) * 255):02X}" for c in rgb)


def mix(hex_color: str, amount: float) -> str:
    """``amount`` > 0 moves towards white, < 0 towards black (|amount| <= 1)."""
    r, g, b = _rgb(hex_color)
    if amount >= 0:
        return _hex(tuple(c + (1.0 - c) * amount for c in (r, g, b)))
    return _hex(tuple(c * (1.0 + amount) for c in (r, g, b)))


def chunk_shade(hex_color: str, chunk: int, n_chunks: int) -> str:
    """The colour of a rank's ``chunk``-th virtual stage out of ``n_chunks`` (base when 1)."""
    if n_chunks <= 1:
        return hex_color.upper()
    t = chunk / (n_chunks - 1)           # 0 .. 1
    return mix(hex_color, _LIGHTEN - t * (_LIGHTEN + _DARKEN))


def action_color(kind: str, chunk: int = 0, n_chunks: int = 1) -> str:
    return chunk_shade(KIND_COLORS[kind], chunk, n_chunks)


def luminance(hex_color: str) -> float:
    """Relative luminance (WCAG), 0 black .. 1 white."""
    def lin(c: float) -> float:
        return c / 12.92 if c <= 0.03928 else ((c + 0.055) / 1.055) ** 2.4

    r, g, b = (lin(c) for c in _rgb(hex_color))
    return 0.2126 * r + 0.7152 * g + 0.0722 * b


def text_color(background: str) -> str:
    """Black or white, whichever contrasts more with ``background``."""
    lum = luminance(background)
    return "#000000" if (lum + 0.05) / 0.05 > 1.05 / (lum + 0.05) else "#FFFFFF"
