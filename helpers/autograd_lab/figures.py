"""Figures that a widget can redraw quickly: built without pyplot, shown once as PNG in one pass.

IPython shows a matplotlib figure by rendering it with ``bbox_inches="tight"``, which draws it twice
(once to measure, once to save). The course's timelines have fixed margins, so one draw is enough:
``Picture`` renders its figure once, at the figure's own size and dpi, and prints as matplotlib does
(``<Figure size 700x190 with 1 Axes>``), so a stored notebook output reads the same.
"""

from __future__ import annotations

import io

__all__ = ["Picture", "new_figure"]


def new_figure(figsize, dpi):
    """A figure and its one Axes, outside pyplot (no figure manager, nothing for the inline backend to show)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=figsize, dpi=dpi)
    FigureCanvasAgg(fig)
    return fig, fig.add_subplot()


class Picture:
    """A finished figure for display. Attribute access reaches the figure (``.axes``, ``.savefig`` ...)."""

    def __init__(self, figure):
        self.figure = figure

    def __getattr__(self, name):
        return getattr(self.figure, name)

    def _repr_png_(self) -> bytes:
        buffer = io.BytesIO()
        self.figure.savefig(buffer, format="png", dpi=self.figure.dpi)
        return buffer.getvalue()

    def __repr__(self):
        return repr(self.figure)
