"""A notebook's own cells, read by id: what the drift tests run beside a check's reference.

A check keeps its reference in its own module (the learner may have changed the notebook since), so the code a
notebook shows exists twice; each check test module runs the notebook's cell beside the reference, on fresh
inputs, so that the two cannot drift apart unnoticed.
"""

from __future__ import annotations

import functools
import json
from pathlib import Path

NOTEBOOKS = Path(__file__).resolve().parents[2] / "notebooks"


@functools.cache
def _cells(notebook: str) -> list:
    return json.loads((NOTEBOOKS / f"{notebook}.ipynb").read_text(encoding="utf-8"))["cells"]


def _cell(notebook: str, cell_id: str) -> dict:
    found = [c for c in _cells(notebook) if c.get("id") == cell_id]
    assert len(found) == 1, f"{notebook} has {len(found)} cells with the id {cell_id!r}"
    return found[0]


def cell_source(notebook: str, cell_id: str) -> str:
    """The source of the cell ``cell_id`` of ``notebooks/<notebook>.ipynb``."""
    return "".join(_cell(notebook, cell_id)["source"])


def cell_code(notebook: str, cell_id: str) -> str:
    """A code cell's source (of a ``%%writefile`` cell, the file's lines), or a markdown cell's first ```python
    block (code a prompt shows, never run there)."""
    cell = _cell(notebook, cell_id)
    text = "".join(cell["source"])
    if cell["cell_type"] == "code":
        return text.partition("\n")[2] if text.startswith("%%writefile") else text
    assert "```python\n" in text, f"{notebook}'s markdown cell {cell_id!r} shows no python block"
    return text.split("```python\n", 1)[1].split("```", 1)[0]


def run_cells(notebook: str, *cell_ids: str, **names) -> dict:
    """Run the code of the cells ``cell_ids`` (see :func:`cell_code`) in order, in one namespace that holds ``names``
    first; return the namespace."""
    namespace = dict(names)
    for cell_id in cell_ids:
        # the course's own notebook, as the learner reads it
        exec(compile(cell_code(notebook, cell_id), f"{notebook}.ipynb, cell {cell_id}", "exec"), namespace)
    return namespace
