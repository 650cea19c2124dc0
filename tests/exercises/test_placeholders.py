"""Every exercise cell of every notebook, as stored: its check, called on the placeholder ``...``, gives the
"Your turn" feedback that the notebook shows under it (the learner's copy starts from exactly that)."""

import importlib
import json
import re
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from torch import nn

NOTEBOOKS = Path(__file__).resolve().parents[2] / "notebooks"
CHECKS_MODULE = re.compile(r"^from (autograd_lab\.exercises\.\w+|autograd_lab\.exercises) import (\w+) as ex$", re.M)


def _source(cell) -> str:
    return "".join(cell["source"])


def exercise_cells():
    """(notebook, cell id) of every answer cell: a code cell whose last line calls ``ex.check_...``."""
    found = []
    for path in sorted(NOTEBOOKS.glob("[0-9][0-9]_*.ipynb")):
        for cell in json.loads(path.read_text(encoding="utf-8"))["cells"]:
            lines = _source(cell).strip().splitlines()
            if cell["cell_type"] == "code" and lines and re.match(r"ex\.check_\w+\(answer", lines[-1]):
                found.append((path.stem, cell["id"]))
    return found


def checks_of(cells) -> object:
    """The module the notebook imports as ``ex``."""
    for cell in cells:
        match = CHECKS_MODULE.search(_source(cell))
        if match:
            package, name = match.groups()
            return importlib.import_module(f"{package}.{name}" if package == "autograd_lab.exercises" else package)
    raise AssertionError("the notebook imports no exercise checks as ex")


def test_every_notebook_with_exercises_has_its_cells_found():
    notebooks = {notebook for notebook, _ in exercise_cells()}
    assert notebooks == {p.stem for p in NOTEBOOKS.glob("0[1-8]_*.ipynb")}


@pytest.mark.parametrize("notebook, cell_id", exercise_cells())
def test_the_placeholder_gets_the_feedback_the_notebook_shows(notebook, cell_id):
    cells = json.loads((NOTEBOOKS / f"{notebook}.ipynb").read_text(encoding="utf-8"))["cells"]
    cell = next(c for c in cells if c.get("id") == cell_id)
    *body, last = _source(cell).strip().splitlines()
    namespace = {"torch": torch, "nn": nn, "F": F, "mse_loss": F.mse_loss, "ex": checks_of(cells)}
    exec("\n".join(body), namespace)
    feedback = eval(last, namespace)
    stored = ["".join(o["data"]["text/plain"]) for o in cell["outputs"] if "text/plain" in o.get("data", {})]
    assert feedback.status == "unanswered" and stored == [repr(feedback)]
