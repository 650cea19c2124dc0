"""Notebook 01 (leaf tensors): the facts its prose relies on, computed here independently of the notebook,
and the plain cells that stand beside its widgets."""

import ast
import inspect
import json
import re
import warnings
from pathlib import Path

import pytest
import torch

from autograd_lab.exercises import leaf_tensors as lt
from autograd_lab.graphmodel import node_name

NOTEBOOK = Path(__file__).resolve().parents[2] / "notebooks" / "01_leaf_tensors.ipynb"


def fn_name(t):
    return None if t.grad_fn is None else node_name(t.grad_fn)


# ---------------------------------------------------------------- facts: leaves and grad_fn


def test_seed_example_leaves_and_grad_fn():
    a = torch.tensor(2.0, requires_grad=True)
    b = torch.tensor(4.0)
    c = a + b
    assert (a.requires_grad, a.is_leaf, a.grad_fn) == (True, True, None)
    assert (b.requires_grad, b.is_leaf) == (False, True)
    assert c.requires_grad and not c.is_leaf
    assert fn_name(c).startswith("AddBackward")
    assert c.item() == 6.0


@pytest.mark.parametrize("x_rg", [False, True])
@pytest.mark.parametrize("y_rg", [False, True])
def test_result_requires_grad_iff_any_input_does(x_rg, y_rg):
    x = torch.tensor(3.0, requires_grad=x_rg)
    y = torch.tensor(5.0, requires_grad=y_rg)
    z = x * y
    assert z.requires_grad == (x_rg or y_rg)
    assert z.is_leaf == (not (x_rg or y_rg))
    assert (z.grad_fn is None) == z.is_leaf


def _copied(x):
    """x.new_tensor(x): every value of x read, into a new tensor (PyTorch warns that it is a detached copy)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        return x.new_tensor(x)


def _tensor_of(x):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        return torch.tensor(x)


def _written_into(x):
    """A new tensor (a leaf that needs no gradient), then one entry of x written into it in place."""
    m = torch.zeros(3, dtype=x.dtype)
    m[1] = x[1]
    return m


# The decision table of section 2, each row tried on more cases than the notebook shows. Not recorded: no tensor
# that requires grad is a differentiable input (none requires grad; x only lends its shape, dtype and device to a
# *_like or new_* factory; new_tensor copies its values into a tensor without history; x only decides a boolean
# mask or condition), an integer or boolean result, or a result PyTorch declares not differentiable (histc).
UNRECORDED = {
    "no input requires grad": lambda x: x.detach() * 2,
    "comparison": lambda x: x > 0,
    "equality": lambda x: x == x,
    "argmax": lambda x: x.argmax(),
    "argsort": lambda x: x.argsort(),
    "sort indices": lambda x: x.sort().indices,
    "cast to int64": lambda x: x.long(),
    "cast to bool": lambda x: x.bool(),
    "a float made from a comparison": lambda x: (x > 0).float(),
    "zeros_like": torch.zeros_like,
    "ones_like": torch.ones_like,
    "full_like": lambda x: torch.full_like(x, 2.0),
    "new_zeros": lambda x: x.new_zeros(3),
    "new_ones": lambda x: x.new_ones(3),
    "new_full": lambda x: x.new_full((3,), 2.0),
    "new_tensor": lambda x: x.new_tensor([1.0, 2.0]),
    "new_tensor of x itself (every value read)": _copied,
    "torch.tensor of x itself (every value read)": _tensor_of,
    "new_empty": lambda x: x.new_empty(3),
    "fill_ with a Python number taken from x": lambda x: x.new_zeros(3).fill_(x.sum().item()),
    "masked_fill with x only in the mask": lambda x: torch.zeros_like(x).masked_fill(x > 0, 1.0),
    "where with x only in the condition": lambda x: torch.where(x > 0, 1.0, -1.0),
    "empty_like": torch.empty_like,
    "rand_like": torch.rand_like,
    "randn_like": torch.randn_like,
    "histc (floats, declared non-differentiable)": lambda x: torch.histc(x, bins=3),
}
# Floating-point or complex results with a derivative formula: recorded, whether or not the value depends on x.
RECORDED = {
    "round": lambda x: x.round(),
    "sign": lambda x: x.sign(),
    "floor": lambda x: x.floor(),
    "x * 0 (value independent of x)": lambda x: x * 0,
    "x - x (value independent of x)": lambda x: x - x,
    "x - x.detach() (always 0, gradient 1)": lambda x: x - x.detach(),
    "where": lambda x: torch.where(x > 0, x, 0.0),
    "cast to float64": lambda x: x.double(),
    "cast to float16": lambda x: x.half(),
    "cast to complex": lambda x: x.to(torch.complex64),
    "max": lambda x: x.max(),
    "clone": lambda x: x.clone(),
    "zero_ on a copy (an operand, overwritten)": lambda x: x.clone().zero_(),
    "fill_ on a copy (an operand, overwritten)": lambda x: x.clone().fill_(2.0),
    "copy_ of a detached source into a recorded tensor": lambda x: (x * 2).copy_(x.detach()),
    "mul_(0) on a copy": lambda x: x.clone().mul_(0),
    "masked_fill_ on a copy": lambda x: x.clone().masked_fill_(x.detach() > 0, 0.0),
    "copy_ of x into a new tensor": lambda x: x.new_zeros(3).copy_(x),
    "fill_ of a new tensor with a value that requires grad": lambda x: x.new_zeros(3).fill_(x.sum()),
    "x written into one entry of a new tensor": _written_into,
}
# Recorded with a node that has no derivative formula: the third outcome, which fails only at backward.
RECORDED_THEN_RAISES = {
    "floor_divide": lambda x: torch.floor_divide(x, 2),
    "// (floor_divide)": lambda x: x // 2,
    "unique": torch.unique,
    "unique_consecutive": torch.unique_consecutive,
    "histogram counts": lambda x: torch.histogram(x, bins=3).hist,
    "bincount weights": lambda x: torch.bincount(torch.tensor([0, 1, 1]), weights=x),
}


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("name", sorted(UNRECORDED))
def test_results_that_cannot_have_a_gradient_are_not_recorded(name, dtype):
    x = torch.tensor([1.5, -0.5, 2.0], dtype=dtype, requires_grad=True)
    result = UNRECORDED[name](x)
    assert result.grad_fn is None and not result.requires_grad and result.is_leaf


@pytest.mark.parametrize("name", sorted(RECORDED))
def test_floating_results_are_recorded_unless_grad_mode_is_off(name):
    x = torch.tensor([1.5, -0.5, 2.0], requires_grad=True)
    result = RECORDED[name](x)
    assert result.requires_grad and result.grad_fn is not None
    assert result.is_floating_point() or result.is_complex()
    (result.sum().real if result.is_complex() else result.sum()).backward()  # a derivative formula: backward works
    assert x.grad is not None
    with torch.no_grad():
        assert RECORDED[name](x).grad_fn is None
    assert RECORDED[name](x.detach()).grad_fn is None   # no input requires grad: nothing recorded


@pytest.mark.parametrize("name", sorted(RECORDED_THEN_RAISES))
def test_some_results_are_recorded_with_a_node_that_raises_only_at_backward(name):
    x = torch.tensor([1.5, -0.5, 2.0], requires_grad=True)
    result = RECORDED_THEN_RAISES[name](x)
    assert result.requires_grad and result.grad_fn is not None and result.is_floating_point()
    with pytest.raises(RuntimeError, match="not implemented"):
        result.sum().backward()


@pytest.mark.parametrize("make", [lambda x: x * 0, lambda x: x - x, lambda x: x.round()], ids=["x*0", "x-x", "round"])
def test_recorded_results_whose_value_ignores_x_send_it_a_zero_gradient(make):
    x = torch.tensor([1.5, -0.4, 2.2], requires_grad=True)
    make(x).sum().backward()
    assert torch.equal(x.grad, torch.zeros(3))


@pytest.mark.parametrize("values", [[1.5, -0.5, 2.0], [0.1, 0.2, 0.2, 0.9, -3.0], [-1.0, 4.0]])
@pytest.mark.parametrize("bins", [3, 5])
def test_histc_and_histogram_give_the_same_counts_yet_only_histogram_is_recorded(values, bins):
    """Going deeper: whether an operation without a gradient is recorded is PyTorch's entry for it, not its maths."""
    x = torch.tensor(values, requires_grad=True)
    counted, histogram = torch.histc(x, bins=bins), torch.histogram(x, bins=bins).hist
    assert torch.equal(counted, histogram.detach()) and counted.is_floating_point()
    assert counted.grad_fn is None and not counted.requires_grad
    assert histogram.grad_fn is not None
    with pytest.raises(RuntimeError, match="not implemented"):
        histogram.sum().backward()


def test_the_notebook_prints_histc_and_histogram_with_the_same_counts(capsys):
    """The cell stands in Going deeper, after section 5 has reused the name x: it makes section 2's x itself."""
    _notebook_namespace("histc-histogram")
    histc, histogram = (line.split(":", 1)[1].strip() for line in capsys.readouterr().out.splitlines())
    assert histogram == histc[:-1] + ", grad_fn=<NotImplemented>)"  # the same counts; only one carries a node


def test_the_cells_a_prediction_is_asked_about_hold_no_comment_that_answers_it():
    """Section 2's results and section 5's trap are predicted before they run: their code says nothing about
    what comes out (no comment, no warning caught), and section 5's heading does not say the gradient is lost."""
    cells = {c["id"]: c for c in json.loads(NOTEBOOK.read_text(encoding="utf-8"))["cells"]}
    source = {k: "".join(c["source"]) for k, c in cells.items()}
    assert "#" not in source["exceptions"] and "#" not in source["copies"]
    assert "warn" not in source["trap"] and "#" not in source["trap"]
    assert "Predict" in source["trap-md"]
    heading = source["trap-md"].splitlines()[0].lower()
    assert "gradient go" not in heading and "trap" not in heading


def _outcome(t):
    """Where the outcomes cell's rule puts ``t``, in the decision table's words: the rule is kept in one place, the
    check of exercise 2 (whose tests run it beside the notebook's own cell)."""
    verdict = lt._outcome(t)
    return "recorded, then backward raises" if verdict == "raises" else verdict


def test_the_notebooks_table_puts_every_row_in_its_outcome():
    """The notebook's own cells, run here: each of its rows lands where the decision table says (the two rows the
    second question turns on included: zero_ on a recorded copy, and new_tensor reading every value of x)."""
    cells = {c["id"]: "".join(c["source"]) for c in json.loads(NOTEBOOK.read_text(encoding="utf-8"))["cells"]}
    namespace = {"torch": torch, "warnings": warnings}
    exec(cells["exceptions"], namespace)
    exec(cells["copies"], namespace)
    assert {"x.clone().zero_()", "x.new_tensor(x)"} <= set(namespace["results"])
    outcomes = {name: _outcome(t) for name, t in namespace["results"].items()}
    rows = [[col.strip() for col in line.strip("|").split("|")] for line in cells["exceptions-after"].splitlines()
            if line.startswith("|") and not line.startswith("|---")][1:]
    for name, verdict in outcomes.items():
        placed = [row[2] for row in rows if any(token in name for token in re.findall(r"`([^`]+)`", row[3]))]
        assert placed == [verdict], f"{name}: the table puts it in {placed}, running it gives {verdict!r}"
    assert set(outcomes.values()) == {"not recorded", "recorded", "recorded, then backward raises"}


def test_the_second_question_is_about_differentiable_inputs_not_about_reading_x():
    """What the table's second question and the takeaway say: reading x (all of it, or only its shape) does not
    decide; being a differentiable input does. new_tensor reads every value and records nothing; zero_ on a
    recorded copy keeps only the shape and is recorded; a factory's tensor written into from x is recorded."""
    cells = {c["id"]: "".join(c["source"]) for c in json.loads(NOTEBOOK.read_text(encoding="utf-8"))["cells"]}
    for text in (cells["exceptions-after"], cells["takeaways"]):
        assert "differentiable input" in text and "in-place" in text and "new_tensor" in text
        assert "more than its shape" not in text
    x = torch.tensor([1.5, -0.5, 2.0], requires_grad=True)
    copied = _copied(x)
    assert torch.equal(copied, x.detach()) and copied.grad_fn is None and not copied.requires_grad
    assert copied.dtype == x.dtype and copied.device == x.device and copied.data_ptr() != x.data_ptr()
    zeroed = x.clone().zero_()
    assert fn_name(zeroed).startswith("ZeroBackward") and torch.equal(zeroed.detach(), torch.zeros(3))
    zeroed.sum().backward()
    assert torch.equal(x.grad, torch.zeros(3))  # recorded, and x gets a zero gradient through the overwrite


def test_pytorchs_advice_names_the_detached_copy_the_prose_quotes(capsys):
    """The outcomes cell prints PyTorch's warning up to its first ' or ': it must name x.detach().clone()."""
    namespace = {"torch": torch, "warnings": warnings}
    cells = {c["id"]: "".join(c["source"]) for c in json.loads(NOTEBOOK.read_text(encoding="utf-8"))["cells"]}
    for cell_id in ("exceptions", "copies", "outcomes"):
        exec(cells[cell_id], namespace)
    advice = capsys.readouterr().out.splitlines()[-1]
    assert advice.endswith("it is recommended to use sourceTensor.detach().clone()"), advice
    assert "requires_grad_" not in advice  # nothing that hands exercise 3 its repair


@pytest.mark.parametrize("write", [
    lambda t: t.zero_(),
    lambda t: t.fill_(2.0),
    lambda t: t.copy_(torch.ones(3)),
    lambda t: t.mul_(0),
    lambda t: t.clamp_(max=-10.0),
    lambda t: t.masked_fill_(torch.tensor([True, True, True]), 1.0),
    lambda t: t.index_fill_(0, torch.arange(3), 0.0),
], ids=["zero_", "fill_", "copy_", "mul_", "clamp_", "masked_fill_", "index_fill_"])
def test_an_in_place_write_into_a_recorded_tensor_is_always_recorded(write):
    """Even when it overwrites every value with constants: the tensor written into is a differentiable input."""
    x = torch.tensor([1.5, -0.5, 2.0], requires_grad=True)
    t = x * 1
    write(t)
    assert t.grad_fn is not None and t.requires_grad
    t.sum().backward()
    assert x.grad is not None
    free = x.detach() * 1
    write(free)
    assert free.grad_fn is None  # the same write into a tensor that requires no grad: nothing recorded


def test_a_graph_of_c_leaves_b_out(capsys):
    """Section 1: b needs no gradient, so a graph of c = a + b has no box for it (as 00's graph had none for x)."""
    from autograd_lab import draw_graph

    a, b = torch.tensor(2.0, requires_grad=True), torch.tensor(4.0)
    text = repr(draw_graph(a + b, params={"a": a, "b": b}))
    assert "leaf a" in text and "leaf b" not in text and text.count("AccumulateGrad") == 1


def test_the_takeaway_names_the_one_way_a_non_leaf_keeps_its_gradient():
    """'backward() stores gradients only in leaves that require grad' holds unless retain_grad() was called."""
    cells = {c["id"]: "".join(c["source"]) for c in json.loads(NOTEBOOK.read_text(encoding="utf-8"))["cells"]}
    takeaway = " ".join(cells["takeaways"].split())
    assert "only in leaves that require grad (unless you call `retain_grad()` on a non-leaf)" in takeaway
    a = torch.tensor(2.0, requires_grad=True)
    c = a * 3
    c.retain_grad()
    (c * c).backward()
    assert not c.is_leaf and c.grad.item() == 12.0


def test_grad_is_none_until_backward_and_lands_on_leaves_only():
    a = torch.tensor(2.0, requires_grad=True)
    b = torch.tensor(4.0)
    c = a + b
    d = c * a
    assert a.grad is None
    d.backward()
    assert a.grad.item() == 2 * 2.0 + 4.0  # d(a + b)a / da = 2a + b
    assert b.grad is None
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert c.grad is None
    assert len(caught) == 1 and issubclass(caught[0].category, UserWarning)
    assert "retain_grad" in str(caught[0].message)
    assert str(caught[0].message).startswith("The .grad attribute of a Tensor that is not a leaf Tensor")


def test_retain_grad_keeps_a_non_leaf_gradient():
    a = torch.tensor(2.0, requires_grad=True)
    c = a + torch.tensor(4.0)
    c.retain_grad()
    d = c * a
    d.backward()
    assert c.retains_grad and c.grad.item() == 2.0  # dd/dc = a
    assert not d.retains_grad


def test_grad_accumulates_over_backward_calls():
    w = torch.tensor(3.0, requires_grad=True)
    for _ in range(3):
        (w**2).backward()
    assert w.grad.item() == 3 * 6.0


def test_zero_grad_sets_to_none_by_default():
    for method in (torch.optim.Optimizer.zero_grad, torch.nn.Module.zero_grad):
        assert inspect.signature(method).parameters["set_to_none"].default is True
    model = torch.nn.Linear(1, 1, bias=False)
    model(torch.ones(1, 1)).sum().backward()
    model.zero_grad()
    assert model.weight.grad is None
    w = torch.tensor(3.0, requires_grad=True)
    opt = torch.optim.SGD([w], lr=0.1)
    (w**2).backward()
    opt.zero_grad()
    assert w.grad is None
    (w**2).backward()
    opt.zero_grad(set_to_none=False)
    assert torch.equal(w.grad, torch.tensor(0.0))


def test_skipping_zero_grad_before_a_single_backward_changes_nothing():
    grads = []
    for call_zero_grad in (True, False):
        torch.manual_seed(0)
        model = torch.nn.Linear(3, 2)
        opt = torch.optim.SGD(model.parameters(), lr=0.01)
        if call_zero_grad:
            opt.zero_grad()
        assert all(p.grad is None for p in model.parameters())  # a fresh parameter has no .grad to clear
        model(torch.ones(4, 3)).pow(2).mean().backward()
        grads.append([p.grad.clone() for p in model.parameters()])
    assert all(torch.equal(a, b) for a, b in zip(*grads))


def test_but_skipping_it_before_a_second_backward_adds_the_stale_gradient():
    model = torch.nn.Linear(1, 1, bias=False)
    model(torch.ones(1, 1)).sum().backward()
    first = model.weight.grad.clone()
    model(torch.ones(1, 1)).sum().backward()
    assert torch.equal(model.weight.grad, 2 * first)


def test_leaving_the_graph():
    w = torch.tensor([1.0, 2.0, 3.0], requires_grad=True)
    p = w.detach() * 2
    with torch.no_grad():
        q = w * 2
    with torch.inference_mode():
        r = w * 2
    for t in (p, q, r):
        assert not t.requires_grad and t.is_leaf and t.grad_fn is None
    assert r.is_inference() and not q.is_inference()
    assert w.detach().data_ptr() == w.data_ptr()
    assert (q * w).requires_grad  # a no_grad result may enter a recorded computation
    with pytest.raises(RuntimeError, match="^Inference tensors cannot be saved for backward"):
        r * w  # MulBackward0 would have to save r
    assert (r + w).requires_grad  # AddBackward0 saves nothing, so an inference tensor may take part


def test_an_in_place_change_that_is_recorded_gives_the_tensor_a_grad_fn():
    # why PyTorch refuses it on a leaf: a recorded in-place change would make the tensor a non-leaf
    w = torch.tensor([1.0, 2.0, 3.0], requires_grad=True)
    h = w * 1
    mul_node = h.grad_fn
    h.add_(1.0)
    assert fn_name(h).startswith("AddBackward") and h.grad_fn is not mul_node


def test_in_place_on_a_leaf_that_requires_grad_raises_and_no_grad_allows_it():
    w = torch.tensor([1.0, 2.0, 3.0], requires_grad=True)
    with pytest.raises(RuntimeError, match="leaf Variable that requires grad.*in-place"):
        w.add_(1.0)
    (w**2).sum().backward()
    w_sgd = w.detach().clone().requires_grad_()
    w_sgd.grad = w.grad.clone()
    with torch.no_grad():
        w -= 0.1 * w.grad
    torch.optim.SGD([w_sgd], lr=0.1).step()
    assert w.is_leaf and w.requires_grad
    torch.testing.assert_close(w.detach(), w_sgd.detach())


def test_scaled_weight_trap_and_its_fixes():
    x = torch.tensor([1.0, 2.0, 3.0])
    w = torch.rand(3, requires_grad=True) * 0.01
    (w * x).sum().backward()
    assert not w.is_leaf
    hidden = w.grad_fn.next_functions[0][0].variable
    assert hidden.is_leaf
    torch.testing.assert_close(hidden.grad, 0.01 * x)

    w64 = torch.rand(3, requires_grad=True).to(torch.float64)
    assert not w64.is_leaf and fn_name(w64).startswith("ToCopyBackward")
    same = torch.rand(3, requires_grad=True)
    assert same.to("cpu") is same and same.to("cpu").is_leaf

    for fixed in (
        torch.rand(3, requires_grad=True),
        (torch.rand(3) * 0.01).requires_grad_(),
        torch.nn.Parameter(torch.rand(3) * 0.01),
    ):
        (fixed * x).sum().backward()
        assert fixed.is_leaf and torch.equal(fixed.grad, x)


def test_reading_the_trapped_weights_grad_gives_none_and_a_warning_that_names_retain_grad():
    """Section 5 prints the first three sentences of the warning: they say why and name the way out."""
    w = torch.rand(3, requires_grad=True) * 0.01
    (w * torch.tensor([1.0, 2.0, 3.0])).sum().backward()
    for _ in range(2):  # the cell catches it on every run, not only the first
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            assert w.grad is None
        assert len(caught) == 1 and issubclass(caught[0].category, UserWarning)
    first_three = str(caught[0].message).split(". ")[:3]
    assert "not a leaf Tensor" in first_three[0] and "retain_grad()" in first_three[2]
    kept = torch.rand(3, requires_grad=True) * 0.01
    kept.retain_grad()  # the way out it names, called before backward
    (kept * torch.tensor([1.0, 2.0, 3.0])).sum().backward()
    assert torch.equal(kept.grad, torch.tensor([1.0, 2.0, 3.0]))


@pytest.mark.parametrize("target", ["meta", torch.float64], ids=["meta", "float64"])
def test_to_another_device_or_dtype_copies_and_is_not_a_leaf(target):
    w = torch.rand(3, requires_grad=True)
    moved = w.to(target)
    assert moved is not w and not moved.is_leaf and moved.grad_fn is not None


def test_to_the_notebooks_device_is_the_tensor_itself_on_the_cpu_and_a_copy_on_a_gpu(device):
    """The to-device cell's device-specific line: on the CPU, w itself (a leaf); on a GPU, a copy (not a leaf)."""
    w = torch.rand(3, requires_grad=True)
    moved = w.to(device)
    on_cpu = device.type == "cpu"
    assert (moved is w) == on_cpu and moved.is_leaf == on_cpu and (moved.grad_fn is None) == on_cpu
    cell = next(c for c in json.loads(NOTEBOOK.read_text(encoding="utf-8"))["cells"] if c.get("id") == "to-device")
    assert "".join(cell["outputs"][0]["text"]) == "on cpu: w.to(device) is w -> True, is_leaf -> True\n"


# ---------------------------------------------------------------- section 3: where a gradient stops


def _notebook_namespace(*ids):
    cells = {c["id"]: "".join(c["source"]) for c in json.loads(NOTEBOOK.read_text(encoding="utf-8"))["cells"]}
    from autograd_lab import draw_graph

    namespace = {"torch": torch, "draw_graph": draw_graph}
    for cell_id in ids:
        exec(cells[cell_id], namespace)
    return namespace


def _three_layers_grads(cut, how, capsys):
    three_layers = _notebook_namespace("abc", "describe", "cut-fn")["three_layers"]
    capsys.readouterr()  # the describe cell's own table
    three_layers(cut=cut, how=how)
    table = capsys.readouterr().out.splitlines()[1:]
    rows = {line.split()[0]: line.split() for line in table}
    return {name: rows[name][-1] != "None" for name in ("w1", "w2", "w3")}, {
        name: rows[name][2] == "True" for name in ("h1", "h2", "loss")}


@pytest.mark.parametrize("cut", [1, 2, 3])
@pytest.mark.parametrize("how", ["as usual", "under torch.no_grad()", "on h.detach()", "with its weight frozen"])
def test_the_three_layer_chain_stops_the_gradient_as_section_3_says(cut, how, capsys):
    """no_grad stops the gradient at the layer and everything below it, and its output is a leaf; detach stops
    only what lies below the layer; a frozen weight gets no .grad, and every other weight still does."""
    grads, leaves = _three_layers_grads(cut, how, capsys)
    for layer in (1, 2, 3):
        name = f"w{layer}"
        if how == "under torch.no_grad()":
            assert grads[name] == (layer > cut), (name, grads)
        elif how == "on h.detach()":
            assert grads[name] == (layer >= cut or cut == 1), (name, grads)  # x.detach() changes nothing
        elif how == "with its weight frozen":
            assert grads[name] == (layer != cut), (name, grads)
        else:
            assert grads[name]
    # a leaf among h1, h2, loss: the output of a layer under no_grad, or of a first layer whose only
    # input that could require grad, its weight, is frozen (x never requires grad)
    output = {1: "h1", 2: "h2", 3: "loss"}[cut]
    no_history = how == "under torch.no_grad()" or (how == "with its weight frozen" and cut == 1)
    assert {n for n, leaf in leaves.items() if leaf} == ({output} if no_history else set())


def _linear_chain(how):
    torch.manual_seed(0)
    layers = torch.nn.Sequential(torch.nn.Linear(4, 5), torch.nn.Linear(5, 5), torch.nn.Linear(5, 1))
    h = layers[0](torch.randn(8, 4))
    if how == "no_grad":
        with torch.no_grad():
            h = layers[1](h)
    elif how == "detach":
        h = layers[1](h.detach())
    else:
        layers[1].requires_grad_(how != "frozen")
        h = layers[1](h)
    layers[2](h).sum().backward()
    return [all(p.grad is not None for p in layer.parameters()) for layer in layers]


@pytest.mark.parametrize("how, got_grads", [
    ("no_grad", [False, False, True]),
    ("detach", [False, True, True]),
    ("frozen", [True, False, True]),
    ("as usual", [True, True, True]),
])
def test_the_same_cuts_in_a_model_of_linear_layers(how, got_grads):
    """Section 3's rule on a second, different case: three nn.Linear layers, the middle one cut."""
    assert _linear_chain(how) == got_grads


def test_a_frozen_weight_passes_the_gradient_on_unchanged():
    """The gradient below a frozen layer is the one it would get with the layer trainable."""
    for frozen in (False, True):
        w1, w2 = torch.tensor(2.0, requires_grad=True), torch.tensor(-1.0, requires_grad=not frozen)
        (w2 * (w1 * 1.5)).backward()
        assert w1.grad.item() == -1.5 and (w2.grad is None) == frozen


# ---------------------------------------------------------------- section "changing a leaf in place"


def test_the_in_place_cell_shows_its_error_and_lets_run_all_go_on(capsys):
    """Run All must pass the cell that shows the refusal: shows_error, not a raises-exception tag."""
    cell = next(c for c in json.loads(NOTEBOOK.read_text(encoding="utf-8"))["cells"] if c["id"] == "inplace-error")
    assert "raises-exception" not in cell["metadata"].get("tags", [])
    import autograd_lab

    namespace = {"torch": torch, "lab": autograd_lab}
    exec("".join(cell["source"]), namespace)  # raises nothing
    err = capsys.readouterr().err
    assert "RuntimeError: a leaf Variable that requires grad is being used in an in-place operation." in err
    assert namespace["w"].is_leaf and torch.equal(namespace["w"].detach(), torch.tensor([1.0, 2.0, 3.0]))


# ---------------------------------------------------------------- the widgets' checked twins


def _cells():
    return json.loads(NOTEBOOK.read_text(encoding="utf-8"))["cells"]


def _source(cell):
    return "".join(cell["source"]) if isinstance(cell["source"], list) else cell["source"]


def test_notebook_twins_call_their_widget_function_with_the_set_values():
    cells = {c.get("id"): c for c in _cells()}
    widgets = [c for c in cells.values() if "autograd_lab" in c.get("metadata", {})]
    assert len(widgets) == 1
    for cell in widgets:
        meta = cell["metadata"]["autograd_lab"]
        live_call = ast.parse(_source(cell)).body[0].value
        twin_call = ast.parse(_source(cells[meta["twin"]])).body[0].value
        assert twin_call.func.id == live_call.args[0].id
        given = {k.arg: ast.literal_eval(k.value) for k in twin_call.keywords}
        assert given == meta["set"]


def test_the_widget_comes_after_the_question_it_helps_answer():
    """A Predict stands before the widget's function and widget; none between the widget and its twin."""
    cells = _cells()
    at = {c.get("id"): i for i, c in enumerate(cells)}
    widget = next(c for c in cells if "autograd_lab" in c.get("metadata", {}))
    start, twin = at[widget["id"]], at[widget["metadata"]["autograd_lab"]["twin"]]
    before = [c for c in cells[:start] if c["cell_type"] == "markdown"]
    assert "Predict" in _source(before[-1])
    assert not any("Predict" in _source(c) for c in cells[start:twin + 1])
