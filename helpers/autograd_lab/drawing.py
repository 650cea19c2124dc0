"""Small vector drawings (SVG): the timelines' drawing and ``line_chart``; cheap to build, sharp at any zoom.

A widget that redraws a matplotlib figure on every change spends most of its time laying out text and
encoding a PNG, beyond a widget's budget. Boxes, lines, dots and labels are written here as SVG directly:
Jupyter shows ``image/svg+xml`` in notebooks, in widget outputs and in slides, and a projector scales it
without blur. The drawing is deterministic, so nbval compares it like text.

``Drawing`` keeps its shapes as plain records (``shapes``) as well, so tests can ask what was drawn.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from numbers import Real
from xml.sax.saxutils import escape, quoteattr

__all__ = ["Drawing", "Shape", "PALETTE", "line_chart", "nice_step"]

# matplotlib's "tab10", the palette the course's other figures use
PALETTE = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22",
           "#17becf")
FONT = "DejaVu Sans, Helvetica, Arial, sans-serif"


def _num(value: float) -> str:
    """A coordinate with at most two decimals and no trailing zeros (short, and the same on every machine)."""
    text = f"{value:.2f}".rstrip("0").rstrip(".")
    return "0" if text == "-0" else text


@dataclass
class Shape:
    """One thing drawn: its kind ("rect", "polygon", "polyline", "circle", "text", "line"), its role, its details."""

    kind: str
    role: str
    attrs: dict = field(default_factory=dict)
    text: str = ""


class Drawing:
    """An SVG picture of ``width`` x ``height`` pixels, built shape by shape.

    Shown by Jupyter as a vector image (``_repr_svg_``); printed as ``<Drawing 700x190: title>``.
    ``role`` names what a shape stands for ("box", "step", "left", "tick", ...) and is written into the SVG as
    its class, so a test, or a learner reading the source, can find every shape of one kind.
    """

    def __init__(self, width: int, height: int, title: str = ""):
        self.width, self.height, self.title = int(width), int(height), str(title)
        self.shapes: list[Shape] = []
        self._hatch = False

    # ---- shapes
    def rect(self, x, y, w, h, *, fill, role, stroke=None, opacity=None, hatch=False):
        attrs = {"x": _num(x), "y": _num(y), "width": _num(max(w, 0.0)), "height": _num(max(h, 0.0)),
                 "fill": "url(#hatch)" if hatch else fill}
        if stroke:
            attrs["stroke"] = stroke
        if opacity is not None:
            attrs["fill-opacity"] = _num(opacity)
        self._hatch = self._hatch or hatch
        self.shapes.append(Shape("rect", role, attrs))

    def polygon(self, points, *, fill, role):
        self.shapes.append(Shape("polygon", role, {"points": " ".join(f"{_num(x)},{_num(y)}" for x, y in points),
                                                   "fill": fill}))

    def line(self, x1, y1, x2, y2, *, stroke="#444", role):
        self.shapes.append(Shape("line", role, {"x1": _num(x1), "y1": _num(y1), "x2": _num(x2), "y2": _num(y2),
                                                "stroke": stroke}))

    def polyline(self, points, *, stroke, role):
        self.shapes.append(Shape("polyline", role, {"points": " ".join(f"{_num(x)},{_num(y)}" for x, y in points),
                                                    "fill": "none", "stroke": stroke, "stroke-width": "1.5"}))

    def circle(self, x, y, r, *, fill, role):
        self.shapes.append(Shape("circle", role, {"cx": _num(x), "cy": _num(y), "r": _num(r), "fill": fill}))

    def text(self, x, y, text, *, role, size=11, anchor="start", bold=False, fill="#222", rotate=False):
        attrs = {"x": _num(x), "y": _num(y), "font-size": _num(size), "text-anchor": anchor, "fill": fill}
        if bold:
            attrs["font-weight"] = "bold"
        if rotate:
            attrs["transform"] = f"rotate(-90 {_num(x)} {_num(y)})"
        self.shapes.append(Shape("text", role, attrs, str(text)))

    # ---- questions a test asks
    def of(self, role: str) -> list[Shape]:
        """The shapes drawn in ``role``, in drawing order."""
        return [s for s in self.shapes if s.role == role]

    def texts(self, role: str | None = None) -> list[str]:
        return [s.text for s in self.shapes if s.kind == "text" and (role is None or s.role == role)]

    # ---- display
    def to_svg(self) -> str:
        parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{self.width}" height="{self.height}" '
                 f'viewBox="0 0 {self.width} {self.height}" font-family={quoteattr(FONT)}>',
                 f"<title>{escape(self.title)}</title>",
                 f'<rect x="0" y="0" width="{self.width}" height="{self.height}" fill="white"/>']
        if self._hatch:
            parts.append('<defs><pattern id="hatch" width="6" height="6" patternUnits="userSpaceOnUse" '
                         'patternTransform="rotate(45)"><rect width="6" height="6" fill="white"/>'
                         '<line x1="0" y1="0" x2="0" y2="6" stroke="#b02a37" stroke-width="2"/></pattern></defs>')
        for s in self.shapes:
            attrs = " ".join(f"{k}={quoteattr(v)}" for k, v in s.attrs.items())
            if s.kind == "text":
                parts.append(f'<text class="{s.role}" {attrs}>{escape(s.text)}</text>')
            else:
                parts.append(f'<{s.kind} class="{s.role}" {attrs}/>')
        parts.append("</svg>")
        return "\n".join(parts)

    def _repr_svg_(self) -> str:
        return self.to_svg()

    def save(self, path) -> None:
        """Write the drawing to an ``.svg`` file (open it in a browser, or put it in slides)."""
        with open(path, "w", encoding="utf-8") as f:
            f.write(self.to_svg())

    def __repr__(self):
        return f"<Drawing {self.width}x{self.height}: {self.title}>" if self.title else \
            f"<Drawing {self.width}x{self.height}>"


def nice_step(span: float, ticks: int = 5) -> float:
    """A round tick spacing (1, 2 or 5 times a power of ten) giving at most about ``ticks`` ticks over ``span``."""
    if not span > 0:
        return 1.0
    raw = span / ticks
    power = 10 ** math.floor(math.log10(raw))
    return next(m * power for m in (1, 2, 5, 10) if m * power >= raw * (1 - 1e-9))


def _tick_label(value: float, step: float) -> str:
    decimals = max(0, -math.floor(math.log10(step) + 1e-9)) if step < 1 else 0
    return f"{value:.{decimals}f}"


def line_chart(series, *, title: str = "", xlabel: str = "", ylabel: str = "", width: int = 720,
               height: int = 230) -> Drawing:
    """Lines with a dot at every point: ``series`` maps a label to its y values, at x = 0, 1, 2, ...

    The y axis starts at 0 (or below, for negative values); x ticks are whole numbers. Returns a ``Drawing``.
    """
    if not isinstance(series, dict) or not series:
        raise TypeError("line_chart expects a dict {label: list of numbers}, with at least one entry.")
    for label, ys in series.items():
        if not isinstance(ys, (list, tuple)) or not all(isinstance(y, Real) and math.isfinite(y) for y in ys):
            raise ValueError(f"series {label!r} must be a list of finite numbers, got {ys!r}.")
    left, right, top = 64, width - 230, 34 if title else 12
    bottom = height - 44
    longest = max(len(ys) for ys in series.values())
    values = [y for ys in series.values() for y in ys] or [0.0]
    y_low, y_high = min(0.0, min(values)), max(values)
    y_step = nice_step((y_high - y_low) or 1.0, 4)
    y_low = math.floor(y_low / y_step + 1e-9) * y_step
    y_high = max(y_low + y_step, math.ceil(y_high / y_step - 1e-9) * y_step)
    x_high = max(longest - 1, 1)
    x_step = max(1, int(nice_step(x_high, 8)))

    def px(x):
        return left + (x + 0.3) / (x_high + 0.6) * (right - left)

    def py(y):
        return bottom - (y - y_low) / (y_high - y_low) * (bottom - top)

    d = Drawing(width, height, title=title)
    if title:
        d.text(left, 18, title, role="title", size=12)
    d.line(left, bottom, right, bottom, role="axis")
    d.line(left, top, left, bottom, role="axis")
    for i in range(int(round((y_high - y_low) / y_step)) + 1):
        y = y_low + i * y_step
        d.line(left - 4, py(y), left, py(y), role="tick")
        d.line(left, py(y), right, py(y), stroke="#e5e5e5", role="grid")
        d.text(left - 7, py(y) + 4, _tick_label(y, y_step), role="tick-label", size=10, anchor="end")
    for x in range(0, x_high + 1, x_step):
        d.line(px(x), bottom, px(x), bottom + 4, role="tick")
        d.text(px(x), bottom + 16, x, role="tick-label", size=10, anchor="middle")
    if xlabel:
        d.text((left + right) / 2, height - 8, xlabel, role="axis-label", size=11, anchor="middle")
    if ylabel:
        d.text(14, (top + bottom) / 2, ylabel, role="axis-label", size=11, anchor="middle", rotate=True)
    for n, (label, ys) in enumerate(series.items()):
        colour = PALETTE[n % len(PALETTE)]
        points = [(px(x), py(y)) for x, y in enumerate(ys)]
        if len(points) > 1:
            d.polyline(points, stroke=colour, role="series")
        for x, y in points:
            d.circle(x, y, 3.5, fill=colour, role="point")
        d.line(right + 16, top + 8 + 20 * n, right + 40, top + 8 + 20 * n, stroke=colour, role="legend")
        d.circle(right + 28, top + 8 + 20 * n, 3.5, fill=colour, role="legend")
        d.text(right + 48, top + 12 + 20 * n, label, role="legend", size=10)
    return d
