"""The metadata a committed notebook carries for the class, written in place or checked: slide types, check
cells collapsed, reveal cells worded the one way.

A cell that continues the slide before it carries no ``slideshow`` metadata at all: nbconvert and
jupyterlab-slideshow both read a missing slide type as "continue", while jupyterlab-slideshow 0.3.4 does
not know nbformat's ``"-"`` and hides such a cell.
"""

from __future__ import annotations

from pathlib import Path

import nbformat

from .cells import is_check_cell, is_reveal_cell, source_of
from .layout import LOAD_LINE, reveal_source, structure_problems
from .slides import CONTINUE, slide_types


def annotate(nb, where: str = "notebook") -> None:
    """Add the slide metadata to a committed notebook in place, collapse its check cells and word its
    reveal cells the one way (layout.REVEAL_SOURCE)."""
    for cell in nb.cells:
        cell.metadata.pop("nbgrader", None)
        if is_check_cell(cell):
            cell.metadata.setdefault("jupyter", {})["source_hidden"] = True
        load = LOAD_LINE.search(source_of(cell)) if is_reveal_cell(cell) else None
        if load:
            cell.source = reveal_source(load.group(1))
    for cell, kind in zip(nb.cells, slide_types(nb.cells)):
        if kind == CONTINUE:
            cell.metadata.pop("slideshow", None)
        else:
            cell.metadata["slideshow"] = {"slide_type": kind}


def annotate_file(path: Path, check: bool = False) -> list[str]:
    """Annotate one notebook file; return what is (with check=True: would be) wrong with it, empty when nothing."""
    before = path.read_text()
    nb = nbformat.reads(before, as_version=4)
    annotate(nb, path.name)
    after = nbformat.writes(nb) + "\n"
    problems = structure_problems(nb, path.parent, path.name)
    if after.rstrip("\n") != before.rstrip("\n"):
        if check:
            problems.insert(0, f"{path}: not annotated: run tools/classroom annotate {path}")
        else:
            nbformat.validate(nb)
            nbformat.write(nb, path)
    return problems
