"""A notebook's own code cells, read by id and run: the check tests run them beside a check's reference on fresh
inputs, so that the reference and the code the notebook teaches cannot drift apart unnoticed."""

import json
from pathlib import Path

NOTEBOOKS = Path(__file__).resolve().parents[2] / "notebooks"


def cell_code(notebook: str, cell_id: str) -> str:
    """The code of cell ``cell_id`` of ``notebooks/<notebook>.ipynb``; of a ``%%writefile`` cell, the file's lines."""
    cells = json.loads((NOTEBOOKS / f"{notebook}.ipynb").read_text(encoding="utf-8"))["cells"]
    found = [c for c in cells if c.get("id") == cell_id and c["cell_type"] == "code"]
    assert found, f"{notebook}.ipynb has no code cell {cell_id!r}"
    source = "".join(found[0]["source"])
    return source.partition("\n")[2] if source.startswith("%%writefile") else source


def run_cells(notebook: str, *cell_ids: str, **namespace) -> dict:
    """The namespace ``namespace`` after the cells ``cell_ids`` ran in it, in that order."""
    for cell_id in cell_ids:
        exec(compile(cell_code(notebook, cell_id), f"{notebook}.ipynb, cell {cell_id}", "exec"), namespace)
    return namespace
