"""Notebook 00 (start here): its readiness cells, run from the notebook with a report that is not ready; its
course map, which must list every notebook; and its first look at a saved tensor (the multiplication node keeps
the operand that needs no gradient, whatever the order or shape)."""

import json
import re
from pathlib import Path

import pytest
import torch

NOTEBOOKS = Path(__file__).resolve().parents[2] / "notebooks"
START = NOTEBOOKS / "00_start_here.ipynb"


def _cells(path):
    return {c["id"]: "".join(c["source"]) for c in json.loads(path.read_text())["cells"]}


class _Lab:
    """Stands in for autograd_lab in the readiness cells: a report of a machine that is not ready."""

    def __init__(self, report):
        self.report = report

    def environment_report(self):
        return dict(self.report)


def test_readiness_cells_print_the_repair_text_when_not_ready(capsys):
    repair = "Graphviz's dot was not found. Install it:\n  sudo apt-get install graphviz"
    report = {"python": "3.12.1", "graphviz (dot)": "MISSING", "ready": False, "repair": repair}
    cells, namespace = _cells(START), {"lab": _Lab(report)}
    exec(cells["env"], namespace)
    table = capsys.readouterr().out
    assert "MISSING" in table and "repair" not in table and "apt-get" not in table  # the table skips it
    exec(cells["ready"], namespace)
    assert capsys.readouterr().out == "NOT READY:\n" + repair + "\n"


def test_readiness_cell_says_ready_when_ready(capsys):
    namespace = {"lab": _Lab({"python": "3.12.1", "ready": True})}
    cells = _cells(START)
    exec(cells["env"], namespace)
    exec(cells["ready"], namespace)
    assert capsys.readouterr().out.splitlines()[-1].startswith("READY")


def test_course_map_lists_every_numbered_notebook_in_order():
    listed = re.findall(r"\]\((\d\d_[a-z_]+\.ipynb)\)", _cells(START)["map"])
    present = sorted(p.name for p in NOTEBOOKS.glob("[0-9][0-9]_*.ipynb"))
    assert listed == present


@pytest.mark.parametrize("build", [
    lambda w, x: w * x,
    lambda w, x: x * w,
    lambda w, x: w * x.expand(3, 4),
])
def test_the_product_node_saves_the_operand_that_needs_no_gradient(build):
    w, x = torch.randn(3, 1, requires_grad=True), torch.randn(1, 4)
    node = build(w, x).grad_fn
    saved = [getattr(node, name) for name in ("_saved_self", "_saved_other")]
    kept = [t for t in saved if t is not None]
    assert len(kept) == 1 and not kept[0].requires_grad      # x (or its expansion) is kept, w is not
    assert torch.equal(kept[0], x.expand_as(kept[0]))
