"""The facts notebook 08 (beyond backward()) relies on, re-derived here on other inputs and other functions,
so that each general statement the notebook makes holds beyond the example it shows."""

import warnings

import pytest
import torch
from torch import nn

from autograd_lab import graph_nodes

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

def test_eval_records_no_grad_does_not_and_frozen_parameters_get_no_grad():
    torch.manual_seed(1)
    model = nn.Sequential(nn.Linear(3, 4), nn.BatchNorm1d(4), nn.Dropout(0.3), nn.Linear(4, 2))
    model[3].requires_grad_(False)
    model.eval()
    out = model(torch.randn(5, 3))
    assert out.requires_grad and out.grad_fn is not None
    out.sum().backward()
    for name, p in model.named_parameters():
        assert (p.grad is None) == name.startswith("3."), name
    with torch.no_grad():
        assert not model(torch.randn(5, 3)).requires_grad


@pytest.mark.parametrize("make", [
    lambda ps: torch.optim.SGD(ps, lr=0.1, momentum=0.9, weight_decay=0.1),
    lambda ps: torch.optim.Adam(ps, lr=0.1),
    lambda ps: torch.optim.AdamW(ps, lr=0.1),
])
def test_optimizers_skip_a_parameter_whose_grad_is_none(make):
    frozen = nn.Parameter(torch.ones(2))
    trained = nn.Parameter(torch.ones(2))
    frozen.requires_grad_(False)
    opt = make([frozen, trained])
    (trained * frozen).sum().backward()
    opt.step()
    assert torch.equal(frozen.detach(), torch.ones(2)) and not torch.equal(trained.detach(), torch.ones(2))


# ------------------------------------------------------------------------------------ 6. control flow

def _branchy(x):
    y = x
    while 0 < y.abs() < 10:
        y = y * 2
    return y ** 2 if y > 0 else -y


@pytest.mark.parametrize("x0", [3.0, -0.5, 0.25, -7.0, 12.0, 0.0])
def test_the_graph_holds_only_the_path_taken(x0):
    x = torch.tensor(x0, requires_grad=True)
    y = _branchy(x)
    names = [type(n).__name__ for n in graph_nodes(y)]
    k = 0
    while 0 < abs(x0) * 2 ** k < 10:
        k += 1
    assert names.count("MulBackward0") == k
    assert ("PowBackward0" in names) == (x0 > 0) and ("NegBackward0" in names) == (x0 <= 0)
    y.backward()
    assert x.grad.item() == (2 * 4 ** k * x0 if x0 > 0 else -(2 ** k))


def test_every_forward_records_a_new_graph():
    x = torch.tensor(3.0, requires_grad=True)
    first, second = _branchy(x), _branchy(x)
    assert first.grad_fn is not second.grad_fn and type(first.grad_fn) is type(second.grad_fn)


# ------------------------------------------------------------------------------------ 7-8. Functions, gradcheck

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


def _central_errors(dtype, x0):
    x = torch.tensor(x0, dtype=dtype)
    exact = (1 + x.double()) * x.double().exp()
    f = lambda t: t * t.exp()  # noqa: E731
    return {k: abs(((f(x + 10.0 ** -k) - f(x - 10.0 ** -k)) / (2 * 10.0 ** -k)).double() - exact).item()
            for k in range(1, 10, 2)}


def test_save_for_backward_checks_versions_like_a_builtin_node():
    x = torch.tensor([0.5, 2.0], requires_grad=True)
    h = x * 1.0  # a non-leaf, so that it may be changed in place
    y = XExp.apply(h)
    h.add_(1)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        y.sum().backward()


@pytest.mark.parametrize("x0", [0.7, -1.3, 2.2])
def test_central_differences_improve_then_degrade_and_float32_is_far_worse(x0):
    e64, e32 = _central_errors(torch.float64, x0), _central_errors(torch.float32, x0)
    assert 1e-5 < e64[3] / e64[1] < 1e-3  # the truncation error falls like eps^2 while rounding is negligible
    assert e64[3] < e64[1] and e64[9] > min(e64.values()) and min(e64.values()) < 1e-8
    assert e32[9] > e32[3] and min(e32.values()) > 1e3 * min(e64.values())


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


def test_a_straight_through_backward_passes_the_gradient_that_rounding_would_zero():
    class RoundST(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            return x.round()

        @staticmethod
        def backward(ctx, g):
            return g

    w = torch.tensor([0.3, 1.7, -2.6], requires_grad=True)
    (g_round,) = torch.autograd.grad((3 * w.round()).sum(), w)
    (g_st,) = torch.autograd.grad((3 * RoundST.apply(w)).sum(), w)
    assert torch.equal(g_round, torch.zeros(3)) and torch.equal(g_st, torch.full((3,), 3.0))
