"""The timeline of an accumulation loop: which micro-batches fed each optimizer step, and which were left in
``.grad``, as text (``timeline_text``) or as an SVG drawing (``draw_timeline``).

The loops themselves are written out in the notebooks; these only draw what a loop did.

The drawing is SVG written directly (``Drawing``): a widget redraws it on every change in well under its
budget, where a matplotlib figure spends most of its time laying out text and encoding a PNG; Jupyter shows
``image/svg+xml`` in notebooks, widget outputs and slides, a projector scales it without blur, and being
deterministic, nbval compares it like text. ``Drawing`` keeps its shapes as plain records (``shapes``) as
well, so tests can ask what was drawn.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from xml.sax.saxutils import escape, quoteattr

from .arguments import check_int

__all__ = ["Drawing", "draw_timeline", "timeline_text"]

# --------------------------------------------------------------------------- the SVG drawing

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
    """One thing drawn: its kind ("rect", "polygon", "text", "line"), its role, its details."""

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


# --------------------------------------------------------------------------- an accumulation loop's updates

# The drawing, in pixels. Micro-batches sit side by side in the plot area; the right part holds the legend.
_WIDTH, _HEIGHT = 700, 168
_PLOT_LEFT, _PLOT_RIGHT = 12, 540
_BOX_TOP, _BOX_BOTTOM = 46, 112
_BOX_WIDTH = 0.9  # of one micro-batch's slot: a gap of a tenth between neighbouring boxes
_MAX_NUMBERED_UPDATES = 12  # beyond this, the numbers inside the groups would crowd
_LEFT_COLOUR = "#b02a37"  # the course's "wrong" red, for micro-batches left in .grad


def _check_groups(groups, n):
    n = check_int("n", n, "the number of micro-batches (an int >= 1)", low=1)
    try:
        groups = [[int(i) for i in g] for g in groups]
    except TypeError:
        raise TypeError("groups must be a list of lists of micro-batch indices, one list per optimizer step.") from None
    seen = set()
    for g in groups:
        for i in g:
            if not 0 <= i < n:
                raise ValueError(f"micro-batch index {i} is outside 0..{n - 1}.")
            if i in seen:
                raise ValueError(f"micro-batch {i} appears in two updates; each belongs to one update.")
            seen.add(i)
    return groups, [i for i in range(n) if i not in seen]


_LETTERS = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"


def timeline_text(groups, n: int) -> str:
    """One character per micro-batch: the letter of the update it fed (A, B, ...), '.' when left in ``.grad``.

    ``groups`` lists, for each optimizer step in order, the micro-batch indices whose
    gradient it used. A second line marks with '^' the micro-batch after which each step ran.
    """
    groups, _ = _check_groups(groups, n)
    row = ["."] * n
    marks = [" "] * n
    for u, g in enumerate(groups):
        for i in g:
            row[i] = _LETTERS[u % len(_LETTERS)]
        if g:
            marks[max(g)] = "^"
    return "".join(row) + "\n" + "".join(marks).rstrip()


def _tick_step(n):
    """Label every micro-batch up to 15 of them, every 5th up to 60, else every 10th."""
    return 1 if n <= 15 else 5 if n <= 60 else 10


def draw_timeline(groups, n: int, *, title: str | None = None) -> Drawing:
    """Draw which micro-batches fed each optimizer step, and which were left in ``.grad``.

    One box per micro-batch, coloured by the update it fed (numbered 1, 2, ... inside the
    group); a triangle marks each ``optimizer.step()``; hatched red boxes were never
    stepped. Returns a ``Drawing`` (SVG), cheap enough for a widget to redraw on every change.
    """
    groups, left = _check_groups(groups, n)
    if title is None:
        title = f"{len(groups)} optimizer step{'s' * (len(groups) != 1)}; {len(left)} micro-batch" \
                f"{'es' * (len(left) != 1)} left in .grad"
    d = Drawing(_WIDTH, _HEIGHT, title=str(title))
    slot = (_PLOT_RIGHT - _PLOT_LEFT) / max(n, 1)

    def x_of(i):
        return _PLOT_LEFT + i * slot

    d.text(_PLOT_LEFT, 18, title, role="title", size=12)
    d.line(_PLOT_LEFT, _BOX_BOTTOM, _PLOT_RIGHT, _BOX_BOTTOM, role="axis")
    for u, g in enumerate(groups):
        colour = PALETTE[u % len(PALETTE)]
        for i in g:
            d.rect(x_of(i), _BOX_TOP, slot * _BOX_WIDTH, _BOX_BOTTOM - _BOX_TOP, fill=colour, opacity=0.85,
                   role="box")
        if g:
            end = x_of(max(g)) + slot * _BOX_WIDTH / 2
            d.polygon([(end - 6, 28), (end + 6, 28), (end, 39)], fill="black", role="step")
            if len(groups) <= _MAX_NUMBERED_UPDATES:
                middle = (x_of(min(g)) + x_of(max(g)) + slot * _BOX_WIDTH) / 2
                d.text(middle, (_BOX_TOP + _BOX_BOTTOM) / 2 + 5, u + 1, role="update", size=13, anchor="middle",
                       bold=True)
    for i in left:
        d.rect(x_of(i), _BOX_TOP, slot * _BOX_WIDTH, _BOX_BOTTOM - _BOX_TOP, fill="white", stroke=_LEFT_COLOUR,
               hatch=True, role="left")
    step = _tick_step(n)
    for i in range(0, n, step):
        centre = x_of(i) + slot * _BOX_WIDTH / 2
        d.line(centre, _BOX_BOTTOM, centre, _BOX_BOTTOM + 4, role="tick")
        d.text(centre, _BOX_BOTTOM + 17, i, role="tick-label", size=10, anchor="middle")
    d.text((_PLOT_LEFT + _PLOT_RIGHT) / 2, _BOX_BOTTOM + 42,
           "micro-batch index i (colour and number: the update it fed)",
           role="axis-label", size=11, anchor="middle")
    legend_x = _PLOT_RIGHT + 16
    d.polygon([(legend_x, 46), (legend_x + 12, 46), (legend_x + 6, 57)], fill="black", role="legend")
    d.text(legend_x + 20, 56, "optimizer.step()", role="legend", size=10)
    if left:
        d.rect(legend_x, 68, 12, 12, fill="white", stroke=_LEFT_COLOUR, hatch=True, role="legend")
        d.text(legend_x + 20, 79, "left in .grad", role="legend", size=10)
    return d
