"""The facts notebook 08 (beyond backward()) relies on, re-derived here on other inputs and other functions,
so that each general statement the notebook makes holds beyond the example it shows."""

import json
import math
import warnings
from pathlib import Path

import pytest
import torch
from torch import nn

from autograd_lab import graph_nodes

NOTEBOOK = Path(__file__).resolve().parents[2] / "notebooks" / "08_beyond_backward.ipynb"


def _cells() -> dict:
    return {c["id"]: c for c in json.loads(NOTEBOOK.read_text(encoding="utf-8"))["cells"]}


def _source(cell_id: str) -> str:
    return "".join(_cells()[cell_id]["source"])

# ------------------------------------------------------------------------------------ 1. in-place changes

OPS = {
    "add": lambda x: x + 1, "mul": lambda x: x * 3, "pow": lambda x: x ** 2, "sin": torch.sin,
    "exp": torch.exp, "sigmoid": torch.sigmoid, "relu": torch.relu, "tanh": torch.tanh, "sqrt": torch.sqrt,
    "sub_tensor": lambda x: x - x.detach(), "log": torch.log,
}


@pytest.mark.parametrize("name", sorted(OPS))
def test_an_in_place_change_breaks_backward_exactly_when_the_node_saved_the_output(name):
    x = torch.tensor([0.5, 1.0, 2.0], requires_grad=True)
    y = OPS[name](x)
    saved_output = hasattr(y.grad_fn, "_saved_result")
    y.mul_(2)
    try:
        y.sum().backward()
        broke = False
    except RuntimeError as err:
        broke = "modified by an inplace operation" in str(err)
    assert broke == saved_output


def _saved(node):
    """{name: value} of what a node really saved: its _saved_ attributes that are not None."""
    found = {n.removeprefix("_saved_"): getattr(node, n) for n in dir(node) if n.startswith("_saved_")}
    return {name: value for name, value in found.items() if value is not None}


def test_the_notebooks_in_place_table_breaks_exactly_the_operations_that_saved_their_output():
    """Going deeper's table (cell "saved"), its own function on its own five operations and on three more."""
    namespace = {"torch": torch}
    exec(compile(_source("saved").split("\nfor ")[0], "saved", "exec"), namespace)
    change = namespace["change_output_in_place"]
    rows = {"x * 3": lambda x: x * 3, "x ** 2": lambda x: x ** 2, "exp": torch.exp, "sigmoid": torch.sigmoid,
            "relu": torch.relu, "tanh": torch.tanh, "sin": torch.sin, "x + 1": lambda x: x + 1}
    for name, op in rows.items():
        saved, outcome = change(op)
        assert outcome == ("RuntimeError" if "result" in saved else "backward ran"), name
    assert [change(rows[n])[1] for n in ("x * 3", "x ** 2", "exp", "sigmoid", "relu")] == \
        ["backward ran"] * 2 + ["RuntimeError"] * 3


def test_x_times_a_constant_saves_only_the_constant_and_x_squared_saves_x():
    x = torch.tensor([0.5, 1.0, 2.0], requires_grad=True)
    times_3, squared = (x * 3).grad_fn, (x ** 2).grad_fn
    assert (x * 3).grad_fn._saved_self is None                   # listed by dir(), but empty
    assert set(_saved(times_3)) == {"other"} and _saved(times_3)["other"].item() == 3
    assert set(_saved(squared)) == {"exponent", "self"} and torch.equal(_saved(squared)["self"], x.detach())
    assert set(_saved(torch.exp(x).grad_fn)) == {"result"}


@pytest.mark.parametrize("op, saves_input", [(lambda h: h * 3, False), (lambda h: h ** 2, True),
                                             (torch.sin, True), (lambda h: h + 1, False)])
def test_changing_the_input_in_place_breaks_backward_exactly_when_the_node_saved_it(op, saves_input):
    """The rule's second case: the tensor changed is the input, not the output."""
    x = torch.tensor([0.5, 1.0, 2.0], requires_grad=True)
    h = x * 1.0                                                  # a non-leaf, so that it may change in place
    y = op(h)
    h.add_(1)
    try:
        y.sum().backward()
        broke = False
    except RuntimeError as err:
        broke = "modified by an inplace operation" in str(err)
    assert broke == saves_input


def test_every_in_place_operation_moves_the_version_counter_and_a_view_shares_it():
    t = torch.zeros(4)
    view = t[:2]
    versions = [t._version]
    for change in (lambda: t.add_(1), lambda: t.mul_(3), lambda: view.fill_(7), lambda: t.clamp_(max=5)):
        change()
        versions.append(t._version)
    assert versions == list(range(5)) and view._version == t._version
    t + 1  # an out-of-place operation leaves it alone
    assert t._version == 4


@pytest.mark.parametrize("changes", [1, 3])
def test_the_error_names_the_version_found_and_the_version_saved(changes):
    x = torch.tensor([1.0, 2.0], requires_grad=True)
    y = x.sigmoid()
    for _ in range(changes):
        y.add_(1)
    with pytest.raises(RuntimeError, match=f"is at version {changes}; expected version 0 instead"):
        y.sum().backward()


def test_the_error_is_shown_without_stopping_run_all():
    """The in-place error is shown inside ``lab.shows_error()``: no cell of 08 raises, none is tagged to."""
    cells = _cells()
    assert "with lab.shows_error():" in _source("inplace-error")
    for cell_id, cell in cells.items():
        assert "raises-exception" not in cell["metadata"].get("tags", []), cell_id
        assert not any(out["output_type"] == "error" for out in cell.get("outputs", [])), cell_id
    shown = "".join("".join(out.get("text", "")) for out in cells["inplace-error"]["outputs"])
    assert "modified by an inplace operation" in shown and "is at version 1; expected version 0" in shown


def test_the_out_of_place_fix_gives_the_true_gradient():
    x = torch.tensor([-1.0, 0.5, 3.0], requires_grad=True)
    y = x.exp()
    y = y + 1
    y.sum().backward()
    torch.testing.assert_close(x.grad, x.detach().exp())


# ------------------------------------------------------------------------------------ 2. autograd.grad

def test_autograd_grad_returns_gradients_and_leaves_grad_alone():
    a = torch.tensor(1.5, requires_grad=True)
    b = torch.tensor(-2.0, requires_grad=True)
    loss = a * b + b ** 3
    ga, gb = torch.autograd.grad(loss, (a, b))
    assert ga.item() == b.item() and gb.item() == a.item() + 3 * b.item() ** 2
    assert a.grad is None and b.grad is None


def test_backward_with_inputs_fills_only_the_tensors_named():
    a = torch.tensor(1.5, requires_grad=True)
    b = torch.tensor(-2.0, requires_grad=True)
    (a * b + b ** 3).backward(inputs=[b])
    assert a.grad is None and b.grad.item() == a.item() + 3 * b.item() ** 2


# ------------------------------------------------------------------------------------ 3. create_graph

def test_a_gradient_has_a_graph_only_with_create_graph():
    x = torch.tensor([0.3, -1.0], requires_grad=True)
    (plain,) = torch.autograd.grad(x.sin().sum(), x)
    (recorded,) = torch.autograd.grad(x.sin().sum(), x, create_graph=True)
    assert plain.grad_fn is None and recorded.grad_fn is not None and torch.equal(plain, recorded.detach())


@pytest.mark.parametrize("n", [3, 5])
def test_the_gradients_graph_is_the_power_rule_times_the_incoming_gradient(n):
    """The drawn graph of g = d/dx sum(x^n): PowBackward0 (x ** (n-1)), MulBackward1 (times n), MulBackward0 (times
    the ones that sum sends back, which need no node), then x."""
    x = torch.tensor([1.0, -2.0, 0.5], requires_grad=True)
    (g,) = torch.autograd.grad((x ** n).sum(), x, create_graph=True)
    nodes = graph_nodes(g)
    assert [type(node).__name__ for node in nodes] == ["MulBackward0", "MulBackward1", "PowBackward0", "AccumulateGrad"]
    times_incoming, times_n, power = nodes[:3]
    assert torch.equal(times_incoming._saved_self, torch.ones(3)) and not times_incoming._saved_self.requires_grad
    assert times_n._saved_other == n and power._saved_exponent == n - 1
    torch.testing.assert_close(g, n * x.detach() ** (n - 1))


@pytest.mark.parametrize("fn, hessian_diagonal", [
    (lambda x: (x ** 3).sum(), lambda x: 6 * x),
    (lambda x: x.sin().sum(), lambda x: -x.sin()),
    (lambda x: x.exp().sum(), lambda x: x.exp()),
])
def test_the_double_backward_hessian_vector_product_matches_the_closed_form(fn, hessian_diagonal):
    x = torch.tensor([1.0, -2.0, 0.5], dtype=torch.float64, requires_grad=True)
    v = torch.tensor([1.0, 1.0, 2.0], dtype=torch.float64)
    (g,) = torch.autograd.grad(fn(x), x, create_graph=True)
    (hvp,) = torch.autograd.grad(g @ v, x)
    torch.testing.assert_close(hvp, hessian_diagonal(x.detach()) * v)
    torch.testing.assert_close(hvp, torch.autograd.functional.hvp(fn, x.detach(), v)[1])


# ------------------------------------------------------------------------------------ 4. hooks

@pytest.mark.parametrize("x0", [3.0, -1.5, 0.25])
def test_a_tensor_hook_changes_only_the_gradient_through_its_tensor(x0):
    x = torch.tensor(x0, requires_grad=True)
    y = x ** 2
    y.register_hook(lambda grad: grad * 2)
    (5 * y + x).backward()
    assert x.grad.item() == pytest.approx(2 * 5 * 2 * x0 + 1)


def test_a_hook_that_returns_none_only_looks():
    x = torch.tensor(3.0, requires_grad=True)
    seen = []
    h = x * 4
    h.register_hook(lambda grad: seen.append(grad.item()))
    (h ** 2).backward()
    assert seen == [2 * 12.0] and x.grad.item() == 2 * 12.0 * 4


def test_the_post_accumulate_hook_runs_after_the_tensor_hook_and_sees_the_accumulated_grad():
    p = nn.Parameter(torch.tensor([1.0, -1.0]))
    events = []
    p.register_hook(lambda grad: events.append(("hook", None if p.grad is None else p.grad.clone())))
    p.register_post_accumulate_grad_hook(lambda param: events.append(("post", param.grad.clone())))
    for _ in range(3):
        (p * torch.tensor([2.0, 5.0])).sum().backward()
    kinds = [kind for kind, _ in events]
    assert kinds == ["hook", "post"] * 3
    posts = [g for kind, g in events if kind == "post"]
    for calls, g in enumerate(posts, start=1):
        assert torch.equal(g, calls * torch.tensor([2.0, 5.0]))
    assert events[0][1] is None  # before the first accumulation .grad is still None


def test_the_post_accumulate_hook_is_for_leaves_only():
    x = torch.tensor(1.0, requires_grad=True)
    with pytest.raises(RuntimeError):
        (x * 2).register_post_accumulate_grad_hook(lambda t: None)


# ------------------------------------------------------------------------------------ 5. freezing

def test_eval_records_no_grad_does_not_and_frozen_parameters_get_no_grad(device):
    torch.manual_seed(1)
    model = nn.Sequential(nn.Linear(3, 4), nn.BatchNorm1d(4), nn.Dropout(0.3), nn.Linear(4, 2)).to(device)
    model[3].requires_grad_(False)
    model.eval()
    out = model(torch.randn(5, 3, device=device))
    assert out.requires_grad and out.grad_fn is not None
    out.sum().backward()
    for name, p in model.named_parameters():
        assert (p.grad is None) == name.startswith("3."), name
    with torch.no_grad():
        assert not model(torch.randn(5, 3, device=device)).requires_grad


OPTIMIZERS = {
    "SGD": lambda ps: torch.optim.SGD(ps, lr=0.05),
    "SGD momentum": lambda ps: torch.optim.SGD(ps, lr=0.05, momentum=0.8),
    "SGD nesterov": lambda ps: torch.optim.SGD(ps, lr=0.05, momentum=0.9, nesterov=True),
    "SGD weight decay": lambda ps: torch.optim.SGD(ps, lr=0.05, weight_decay=0.01),
    "RMSprop": lambda ps: torch.optim.RMSprop(ps, lr=0.005),
    "RMSprop centered": lambda ps: torch.optim.RMSprop(ps, lr=0.005, centered=True),
    "RMSprop momentum": lambda ps: torch.optim.RMSprop(ps, lr=0.005, momentum=0.9),
    "Adagrad": lambda ps: torch.optim.Adagrad(ps, lr=0.05),
    "Adam": lambda ps: torch.optim.Adam(ps, lr=0.005, betas=(0.8, 0.99)),
    "Adam weight decay": lambda ps: torch.optim.Adam(ps, lr=0.005, weight_decay=0.01),
    "AdamW": lambda ps: torch.optim.AdamW(ps, lr=0.005),
    "AdamW no decay": lambda ps: torch.optim.AdamW(ps, lr=0.005, weight_decay=0.0),
}
# a zeroed .grad moves a frozen parameter exactly when the step uses more than the current gradient:
# a momentum buffer or a moving average of earlier gradients, or weight decay
MOVES_WHEN_ZEROED = {"SGD momentum", "SGD nesterov", "SGD weight decay", "RMSprop momentum", "Adam",
                     "Adam weight decay", "AdamW", "AdamW no decay"}


def _frozen_mid_training(make, set_to_none, freeze_at=3, steps_after=10, seed=1):
    """Another model than the notebook's (5-16-16-2, ReLU, batch 20): train, freeze the middle layer before step
    ``freeze_at``, train on; how far that layer (weight and bias) has moved since the freeze, after each step."""
    torch.manual_seed(seed)
    model = nn.Sequential(nn.Linear(5, 16), nn.ReLU(), nn.Linear(16, 16), nn.ReLU(), nn.Linear(16, 2))
    opt = make(model.parameters())
    x, y = torch.randn(20, 5), torch.randn(20, 2)
    moved = []
    for step in range(freeze_at + steps_after):
        if step == freeze_at:
            model[2].requires_grad_(False)
            at_freeze = [p.detach().clone() for p in model[2].parameters()]
        opt.zero_grad(set_to_none=set_to_none)
        nn.functional.mse_loss(model(x), y).backward()
        opt.step()
        if step >= freeze_at:
            moved.append(max((p.detach() - q).abs().max().item() for p, q in zip(model[2].parameters(), at_freeze)))
    return moved


@pytest.mark.parametrize("name", sorted(OPTIMIZERS))
def test_optimizers_skip_a_parameter_whose_grad_is_none(name):
    frozen = nn.Parameter(torch.ones(2))
    trained = nn.Parameter(torch.ones(2))
    frozen.requires_grad_(False)
    opt = OPTIMIZERS[name]([frozen, trained])
    for _ in range(3):
        opt.zero_grad()
        (trained * frozen).sum().backward()
        opt.step()
    assert frozen.grad is None
    assert torch.equal(frozen.detach(), torch.ones(2)) and not torch.equal(trained.detach(), torch.ones(2))


def test_zero_grad_sets_grad_to_none_by_default_and_to_zeros_only_when_asked():
    layer = nn.Linear(2, 2)
    opt = torch.optim.Adam(layer.parameters())
    for set_to_none in (None, False):
        layer(torch.ones(1, 2)).sum().backward()
        if set_to_none is None:
            opt.zero_grad()
            assert layer.weight.grad is None
        else:
            opt.zero_grad(set_to_none=False)
            assert torch.equal(layer.weight.grad, torch.zeros(2, 2))


@pytest.mark.parametrize("name", sorted(OPTIMIZERS))
def test_a_layer_frozen_mid_training_moves_on_a_zeroed_grad_exactly_under_momentum_moving_averages_and_decay(name):
    """Section 4: with .grad None the frozen layer stays put under every optimizer; with .grad zeroed, SGD and
    RMSprop leave it, momentum (SGD's, RMSprop's when set), Adam's averages and weight decay move it."""
    assert max(_frozen_mid_training(OPTIMIZERS[name], set_to_none=True)) == 0.0
    moved = _frozen_mid_training(OPTIMIZERS[name], set_to_none=False)
    if name in MOVES_WHEN_ZEROED:
        assert moved[-1] > 1e-4, moved
    else:
        assert max(moved) == 0.0, moved


def test_the_notebooks_table_rows_follow_the_rule():
    """The five rows section 4 prints (its own OPTIMIZERS and train_then_freeze): zeroed moves exactly momentum,
    Adam and AdamW; None moves nothing."""
    namespace = _notebook_freezing()
    table = {name: (namespace["train_then_freeze"](make, False)[-1], namespace["train_then_freeze"](make, True)[-1])
             for name, make in namespace["OPTIMIZERS"].items()}
    assert list(table) == ["SGD", "SGD, momentum 0.9", "RMSprop", "Adam", "AdamW"]
    assert {name for name, (zeroed, _) in table.items() if zeroed > 0} == {"SGD, momentum 0.9", "Adam", "AdamW"}
    assert all(none == 0.0 for _, none in table.values())


def _notebook_freezing() -> dict:
    """The notebook's train_then_freeze and OPTIMIZERS, exactly as the learner reads them."""
    namespace = {"torch": torch, "nn": nn}
    exec(compile(_source("freeze-later"), "freeze-later", "exec"), namespace)
    exec(compile(_source("freeze-table").split("\nfor ")[0], "freeze-table", "exec"), namespace)
    return namespace


@pytest.mark.parametrize("freeze_at", [1, 4, 8, 16])
@pytest.mark.parametrize("name", ["SGD, momentum 0.9", "Adam", "AdamW"])
def test_the_drift_after_the_freeze_shrinks_step_by_step_and_adds_up_to_several_times_the_first(name, freeze_at):
    """Going deeper's widget, over its slider: each step after the freeze moves the layer less than the one before,
    and the 16 steps add up to several (more than 5) times the first."""
    namespace = _notebook_freezing()
    moved = namespace["train_then_freeze"](namespace["OPTIMIZERS"][name], False, freeze_at)
    steps = [moved[0]] + [b - a for a, b in zip(moved, moved[1:])]
    assert all(later < earlier for earlier, later in zip(steps, steps[1:])), steps
    assert moved[-1] > 5 * moved[0]


@pytest.mark.parametrize("name", ["SGD momentum", "RMSprop momentum", "Adam", "AdamW"])
def test_the_drift_shrinks_step_by_step_on_another_model_too(name):
    moved = _frozen_mid_training(OPTIMIZERS[name], set_to_none=False, freeze_at=6, steps_after=12)
    steps = [moved[0]] + [b - a for a, b in zip(moved, moved[1:])]
    assert all(later < earlier for earlier, later in zip(steps, steps[1:])) and moved[-1] > 3 * moved[0]


@pytest.mark.parametrize("name", sorted(OPTIMIZERS))
def test_a_layer_frozen_before_its_first_gradient_keeps_grad_none_and_never_moves(name):
    """The twin's question: zero_grad(set_to_none=False) zeroes a .grad that exists and leaves None alone."""
    assert max(_frozen_mid_training(OPTIMIZERS[name], set_to_none=False, freeze_at=0)) == 0.0
    layer = nn.Linear(3, 3)
    layer.requires_grad_(False)
    before = layer.weight.detach().clone()
    opt = OPTIMIZERS[name](layer.parameters())
    opt.zero_grad(set_to_none=False)
    opt.step()
    assert layer.weight.grad is None and torch.equal(layer.weight.detach(), before)


# ------------------------------------------------------------------------------------ 6. Functions, gradcheck

class XExp(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * torch.exp(x)

    @staticmethod
    def backward(ctx, grad_output):
        (x,) = ctx.saved_tensors
        return grad_output * (1 + x) * torch.exp(x)


class XExpWrong(XExp):
    @staticmethod
    def backward(ctx, grad_output):
        (x,) = ctx.saved_tensors
        return grad_output * torch.exp(x)


def test_save_for_backward_checks_versions_like_a_builtin_node():
    x = torch.tensor([0.5, 2.0], requires_grad=True)
    h = x * 1.0  # a non-leaf, so that it may be changed in place
    y = XExp.apply(h)
    h.add_(1)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        y.sum().backward()


@pytest.mark.parametrize("seed", range(5))
def test_gradcheck_accepts_the_right_backward_and_rejects_the_wrong_one_in_float64(seed):
    torch.manual_seed(seed)
    x = torch.randn(6, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(XExp.apply, (x,))
    with pytest.raises(RuntimeError, match="^Jacobian mismatch"):
        torch.autograd.gradcheck(XExpWrong.apply, (x,))


@pytest.mark.parametrize("fn", [XExp.apply, torch.sin, torch.tanh], ids=["XExp", "sin", "tanh"])
def test_gradcheck_flags_even_a_right_backward_in_float32_and_warns(fn):
    torch.manual_seed(0)
    x = torch.randn(5, requires_grad=True)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert not torch.autograd.gradcheck(fn, (x,), raise_exception=False)
    assert any("double precision" in str(w.message) for w in caught)


def _gradcheck32(fn, x) -> bool:
    x = x.float().requires_grad_()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the double-precision warning, checked above
        return torch.autograd.gradcheck(fn, (x,), raise_exception=False)


def _size(fn, x) -> float:
    """The largest |f(x)| + |x f'(x)| over the input, in float32: what decides a float32 verdict."""
    x = x.float().requires_grad_()
    (slope,) = torch.autograd.grad(fn(x).sum(), x)
    return (fn(x).abs() + (x * slope).abs()).max().item()


NEAR_ZERO = {"XExp": XExp.apply, "sin": torch.sin, "tanh": torch.tanh, "x e^x": lambda t: t * t.exp()}


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("name", sorted(NEAR_ZERO))
def test_float32_gradcheck_accepts_a_right_backward_near_zero(name, seed):
    """Why section 5 says only that gradcheck's tolerances are meant for float64, never that float32 fails a right
    backward: near zero (inputs about 1e-3, or zeros), where f(x) and x f'(x) are small, XExp passes, and so do other
    functions whose slope there is about 1."""
    torch.manual_seed(seed)
    for x in (1e-3 * torch.randn(5), torch.zeros(5), 1e-4 * torch.randn(8)):
        assert _size(NEAR_ZERO[name], x) < 5e-3 and _gradcheck32(NEAR_ZERO[name], x), x


UNIT_SIZE = {  # name -> (function, input): f(x) of unit size with x near zero, or x of unit size with f(x) near zero
    "exp at 0": (torch.exp, torch.zeros(5)), "x + 1 at 0": (lambda t: t + 1, torch.zeros(5)),
    "XExp at unit size": (XExp.apply, torch.tensor([-1.2, -0.8, 0.7, 1.1, 1.4])),
    "sin near pi": (torch.sin, math.pi + torch.tensor([-2e-3, -1e-3, 0.0, 1e-3, 2e-3])),
    "x - 3 at 3": (lambda t: t - 3, torch.full((5,), 3.0)),
}


@pytest.mark.parametrize("name", sorted(UNIT_SIZE))
def test_float32_gradcheck_rejects_a_right_backward_where_f_or_x_times_its_slope_is_of_unit_size(name):
    torch.manual_seed(0)
    fn, x = UNIT_SIZE[name]
    assert _size(fn, x) > 0.5 and not _gradcheck32(fn, x)


def test_no_size_threshold_decides_a_float32_verdict():
    """Why the notebook states no rule for float32 at all: gradcheck's tolerance is atol + rtol |f'(x)|,
    so a function with a tiny slope fails near zero (1e-3 e^x), and roundings can cancel (cos at 0: cos(+-eps)
    both round to 1, and the estimate is exactly the true 0)."""
    torch.manual_seed(0)
    x = 1e-3 * torch.randn(5)
    assert _size(lambda t: 1e-3 * t.exp(), x) < 2e-3 and not _gradcheck32(lambda t: 1e-3 * t.exp(), x)
    assert _size(torch.cos, torch.zeros(5)) == 1.0 and _gradcheck32(torch.cos, torch.zeros(5))


def test_a_large_input_with_a_small_value_and_slope_passes_in_float32():
    """It is |x f'(x)|, not |x|, that counts: exp at x = -10 is tiny, and so is x times its slope."""
    x = torch.full((5,), -10.0) + 0.1 * torch.randn(5)
    assert _size(torch.exp, x) < 1e-3 and _gradcheck32(torch.exp, x)


def test_anomaly_mode_names_the_forward_line_in_a_warning_not_in_the_error():
    """Section 1: set_detect_anomaly(True) prints the forward's traceback as a warning ("Error detected in
    ExpBackward0"), which names the forward line; the RuntimeError's own text does not hold that line."""
    assert 'as a warning just above the error ("Error detected in ExpBackward0")' in " ".join(
        _source("inplace-fix-md").split())
    x = torch.tensor([0.0, 1.0, 2.0], requires_grad=True)
    with torch.autograd.set_detect_anomaly(True), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        y = x.exp()  # the forward line the warning should name
        y.add_(1)
        with pytest.raises(RuntimeError, match="modified by an inplace operation") as error:
            y.sum().backward()
    shown = [str(w.message) for w in caught if "Error detected in ExpBackward0" in str(w.message)]
    assert shown and "y = x.exp()" not in str(error.value)
    assert any("test_beyond_backward.py" in text for text in shown)
