"""Slide types for the live slides (jupyterlab-slideshow): which cell starts a slide or a sub-slide, which
continues the one before and which is skipped.

One idea per slide. A markdown cell with a level 1-2 heading starts a slide, a deeper heading a sub-slide
(reached by "down", or by space). Within a section, prose that follows code starts a sub-slide (the next
step of the argument), except a short closing remark (at most 3 lines, last in its section), which stays
with the output it interprets; a code cell after code starts one when the slide already holds about
``LINES_PER_SLIDE`` source lines. A widget cell gets a sub-slide of its own, and so does what follows it
(the same function called without the widget). Reveal, check and autograder cells are skipped.
"""

from __future__ import annotations

import re

from .cells import FENCE, is_check_cell, is_reveal_cell, is_test_cell, is_widget_cell, source_of

CONTINUE = "-"  # nbformat's name for "continue the slide before"; annotate writes it as no metadata
LINES_PER_SLIDE = 30  # source lines; outputs come on top, and tall slides scroll
HEADING = re.compile(r"^(#{1,6})\s+\S")


def heading_level(source: str) -> int | None:
    """The highest heading level (1 = '#') of a markdown cell, outside code fences; None without heading."""
    level, fenced = None, False
    for line in source.splitlines():
        if FENCE.match(line):
            fenced = not fenced
            continue
        m = None if fenced else HEADING.match(line)
        if m:
            level = min(level or 6, len(m.group(1)))
    return level


def skipped(cell) -> bool:
    """A cell the slides never show: a reveal cell, a check cell, an autograder test cell."""
    return is_reveal_cell(cell) or is_check_cell(cell) or is_test_cell(cell)


def slide_types(cells) -> list[str]:
    """One slide type per cell: "slide", "subslide", "skip" or CONTINUE."""
    types = []
    new_sub = False  # the previous cell asks the next one to start a sub-slide
    lines = 0  # source lines on the current (sub-)slide so far
    prev = None  # the last cell shown in the slides
    for i, cell in enumerate(cells):
        if i and skipped(cell):
            types.append("skip")
            continue
        level = heading_level(source_of(cell)) if cell.cell_type == "markdown" else None
        height = len(source_of(cell).strip().splitlines()) + 1
        if i == 0 or (level is not None and level <= 2):
            kind = "slide"
        elif level is not None:
            kind = "subslide"
        elif is_widget_cell(cell) or new_sub:
            kind = "subslide"
        elif cell.cell_type == "markdown" and prev.cell_type == "code" and not _closing_remark(cells, i):
            kind = "subslide"  # new prose after code: the next step of the argument
        elif cell.cell_type == "code" and prev.cell_type == "code" and lines + height > LINES_PER_SLIDE:
            kind = "subslide"  # a long run of code: the projector shows about this many lines
        else:
            kind = CONTINUE
        types.append(kind)
        lines = height if kind in ("slide", "subslide") else lines + height
        new_sub = is_widget_cell(cell) or _is_twin(cells, cell)
        prev = cell
    return types


def _closing_remark(cells, i) -> bool:
    """A short markdown cell that ends its section: it stays with the output it interprets."""
    nxt = next((c for c in cells[i + 1 :] if not skipped(c)), None)
    ends = nxt is None or (nxt.cell_type == "markdown" and heading_level(source_of(nxt)) is not None)
    return ends and len(source_of(cells[i]).strip().splitlines()) <= 3


def _is_twin(cells, cell) -> bool:
    return any(is_widget_cell(c) and c.metadata["autograd_lab"].get("twin") == cell.get("id") for c in cells)
