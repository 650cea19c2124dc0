"""The timeline of an accumulation loop: which micro-batches fed each optimizer step, and which were left in
``.grad``, as text (``timeline_text``) or as an SVG drawing (``draw_timeline``).

The loops themselves are written out in the notebooks; these only draw what a loop did.

The drawing is SVG written directly (:mod:`autograd_lab.drawing`), cheap enough for a widget to redraw on
every change.
"""

from __future__ import annotations

from .arguments import check_int
from .drawing import PALETTE, Drawing

__all__ = ["draw_timeline", "timeline_text"]

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
