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


def _leaf_grads():
    from autograd_lab import draw_graph

    namespace = {"torch": torch, "draw_graph": draw_graph}
    exec(_cells(START)["try-fn"], namespace)
    return namespace["leaf_grads"], namespace["FORMULAS"]


def _grads(formula, x):
    """w.grad and b.grad after backward through the notebook's formula, with w = 3 and b = 1 as its function has."""
    make = _leaf_grads()[1][formula]
    w, b = torch.tensor(3.0, requires_grad=True), torch.tensor(1.0, requires_grad=True)
    make(w, torch.tensor(float(x)), b).backward()
    return w.grad.item(), b.grad.item()


@pytest.mark.parametrize("x", range(-3, 4))
def test_each_leafs_grad_is_the_derivative_the_outro_names(x):
    """w * x + b: w.grad follows x, b.grad stays put; (w + b) * x: both follow x; w * w * x + b: 2 * w * x."""
    assert _grads("w * x + b", x) == (x, 1.0)
    assert _grads("(w + b) * x", x) == (x, x)
    assert _grads("w * w * x + b", x) == (2 * 3.0 * x, 1.0)


def test_the_twin_draws_the_graph_the_widget_shows_at_its_set_values():
    leaf_grads, formulas = _leaf_grads()
    cells = json.loads(START.read_text())["cells"]
    widget = next(c for c in cells if "autograd_lab" in c["metadata"])
    assert widget["metadata"]["autograd_lab"]["set"]["formula"] in formulas
    text = repr(leaf_grads(**widget["metadata"]["autograd_lab"]["set"]))
    assert "leaf w | value 3. | grad -1." in text and "leaf b | value 1. | grad -1." in text


def test_the_widget_comes_after_the_question_it_helps_answer():
    """The Predict stands before the widget's function and the widget; nothing between widget and twin asks."""
    cells = json.loads(START.read_text())["cells"]
    at = {c["id"]: i for i, c in enumerate(cells)}
    widget = next(c for c in cells if "autograd_lab" in c["metadata"])
    start, twin = at[widget["id"]], at[widget["metadata"]["autograd_lab"]["twin"]]
    asked = [i for i, c in enumerate(cells) if c["cell_type"] == "markdown" and "Predict:" in "".join(c["source"])]
    assert asked and max(asked) < start - 1  # the question, then the function, then the widget
    assert not any("Predict" in "".join(c["source"]) for c in cells[start:twin + 1])


def test_the_predict_asks_what_only_the_widget_answers_and_the_twin_shows_one_of_its_settings():
    """The question states no gradient (the cell before it already gives w's in w * x + b, so it asks about b's);
    the twin's setting is one the question names, as the 'How the notebooks work' list promises."""
    cells = _cells(START)
    question = cells["try-md"][cells["try-md"].index("**Predict:**"):]
    flat = " ".join(question.split())
    assert "is `x`" not in flat and "gradient with respect to" not in flat
    assert "`b.grad`" in flat
    widget = next(c for c in json.loads(START.read_text())["cells"] if "autograd_lab" in c["metadata"])
    setting = widget["metadata"]["autograd_lab"]["set"]
    assert f"`{setting['formula']}`" in flat and f"`x = {setting['x']}`" in flat
    assert "fixed at one setting" in " ".join(cells["how"].split())
