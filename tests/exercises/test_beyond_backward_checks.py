"""Notebook 08's exercise checks (beyond backward()) cannot be fooled, refuse no right answer and never raise.

For each exercise: plausible wrong answers, each of which must fail with a hint naming its mistake;
right answers written differently from the worked solution, which must pass; odd answers and
misbehaving learner code, which must give feedback instead of an exception. Expected values are
computed here by running PyTorch, never typed in.
"""

import json
import re
import warnings
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest
import torch
from learner_code import Hostile
from torch import nn

from autograd_lab.exercises import beyond_backward as ex

REPO = Path(__file__).resolve().parents[2]
NOTEBOOK = REPO / "notebooks" / "08_beyond_backward.ipynb"


def _hook_grad(*, hook=True, direct=True, x0=3.0):
    """x.grad of the exercise's snippet, computed here from its structure (not by running the check's code)."""
    x = torch.tensor(x0, requires_grad=True)
    y = x ** 2
    if hook:
        y.register_hook(lambda grad: grad * 2)
    z = 5 * y + x if direct else 5 * y
    z.backward()
    return x.grad.item(), z.item()


RIGHT = _hook_grad()[0]


def _wrong_with(fb, phrase):
    return fb.status == "wrong" and phrase in fb.message


def test_the_freezing_snippet_matches_the_check_reference():
    run = ex._frozen_run()
    assert run == {"0.weight": (True, True), "0.bias": (True, True), "2.weight": (False, False),
                   "2.bias": (False, False), "4.weight": (True, True), "4.bias": (False, False)}


def test_the_silu_derivative_of_the_check_agrees_with_autograd():
    x = torch.linspace(-4, 4, 17, dtype=torch.float64, requires_grad=True)
    (auto,) = torch.autograd.grad(torch.nn.functional.silu(x).sum(), x)
    torch.testing.assert_close(ex._silu_derivative(x.detach()), auto)


def test_the_prompts_show_the_snippets_the_checks_run():
    cells = {c.get("id"): "".join(c["source"]) for c in json.loads(NOTEBOOK.read_text())["cells"]}
    assert ex.HOOK_SNIPPET in cells["ex-hook-md"] and ex.FREEZE_SNIPPET in cells["ex-frozen-md"]
    assert cells["ex-silu"].rstrip().endswith("ex.check_silu_backward(answer)")


# =========================================================================== exercise 1: a hook that doubles


@pytest.mark.parametrize("value, phrase", [
    (_hook_grad(hook=False)[0], "without the hook"),
    (2 * _hook_grad(hook=False)[0], "doubles all of x.grad"),
    (_hook_grad(direct=False)[0], "directly through `+ x`"),
    (_hook_grad(hook=False, direct=False)[0], "leaves out both"),
    (2 * 5.0, "after the hook"),
    (5.0, "before the hook"),
    (_hook_grad()[1], "the value of z"),
    (4 * 5 * 6 + 1, "doubles the gradient through y twice"),
    (2 * RIGHT, "twice the answer"),
    (RIGHT + 2, "follow the gradient backward"),
    (-RIGHT, "follow the gradient backward"),
    (0, "follow the gradient backward"),
], ids=["no-hook", "doubled-all", "no-direct-path", "neither", "grad-at-y", "dz-dy", "z", "hook-twice", "twice-right",
        "near", "negated", "zero"])
def test_hook_wrong_answers_get_the_hint_for_their_mistake(value, phrase):
    fb = ex.check_hook_grad(value)
    assert _wrong_with(fb, phrase), fb


@pytest.mark.parametrize("answer", [
    RIGHT, int(RIGHT), Fraction(int(RIGHT)), np.float32(RIGHT), np.int64(RIGHT), np.array([RIGHT]),
    torch.tensor(RIGHT), torch.tensor([[RIGHT]], dtype=torch.float64), torch.tensor(int(RIGHT)),
    RIGHT * (1 + 1e-7),
], ids=["float", "int", "fraction", "np.float32", "np.int64", "np-array", "tensor", "tensor-2d-f64", "int-tensor",
        "rounding"])
def test_hook_right_answers_in_any_numeric_form_pass(answer):
    fb = ex.check_hook_grad(answer)
    assert fb.passed, fb


@pytest.mark.parametrize("answer", [
    "61", [RIGHT], (RIGHT, 1), True, float("nan"), float("inf"), torch.tensor([RIGHT, RIGHT]),
    torch.tensor(True), object(), {RIGHT}, 1j * RIGHT,
], ids=["str", "list", "tuple", "bool", "nan", "inf", "tensor-2", "bool-tensor", "object", "set", "complex"])
def test_hook_odd_answers_are_malformed_not_errors(answer):
    fb = ex.check_hook_grad(answer)
    assert fb.status == "malformed", fb


def test_hook_correct_feedback_explains_with_the_snippets_own_numbers():
    fb = ex.check_hook_grad(RIGHT)
    through_y = _hook_grad(direct=False)[0]
    assert f"{through_y:g} at x" in fb.message and f"adds {RIGHT - through_y:g}" in fb.message


@pytest.mark.parametrize("row", ex._HOOK_DIAGNOSES, ids=lambda row: row.name)
def test_hook_every_diagnosis_is_the_hint_its_own_variant_gets(row):
    """No row is hidden behind an earlier one: the number its variant of the snippet gives is told its hint."""
    value = row.variant()
    fb = ex.check_hook_grad(value)
    assert fb.status == "wrong" and fb.message == row.says(value=value), fb


# =========================================================================== exercise 2: which parameters get .grad


def _frozen_truth():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(2, 3), nn.Tanh(), nn.Linear(3, 3), nn.Tanh(), nn.Linear(3, 1))
    model[2].requires_grad_(False)
    model[4].bias.requires_grad_(False)
    model(torch.ones(4, 2)).sum().backward()
    return {n for n, p in model.named_parameters() if p.grad is not None}, [n for n, _ in model.named_parameters()]


WITH_GRAD, NAMES = _frozen_truth()


@pytest.mark.parametrize("answer, phrases", [
    ({"4.weight"}, ["2 parameters misplaced. A frozen layer does not stop backward", "flows through them"]),
    ({"4.weight", "4.bias"}, ["3 parameters misplaced. A frozen layer does not stop backward",
                              "And 4.bias was frozen on its own"]),
    (WITH_GRAD | {"4.bias"}, ["1 parameter misplaced. 4.bias was frozen on its own"]),
    (set(NAMES), ["3 parameters misplaced. A parameter frozen with requires_grad_(False) gets no gradient"]),
    (set(), ["3 parameters misplaced. Backward runs here"]),
    ({"0.weight"}, ["2 parameters misplaced. Run the snippet",
                    "- 0.bias: .grad is a tensor: it requires grad, and backward reaches it through the frozen middle",
                    "- 4.weight: .grad is a tensor: it requires grad, and its layer ran while recording"]),
    ({"2.weight"} | WITH_GRAD, ["- 2.weight: .grad is None: requires_grad_(False) froze it"]),
], ids=["frozen-blocks", "frozen-blocks-and-bias", "forgot-bias", "all", "none", "first-weight", "frozen-weight"])
def test_frozen_wrong_answers_name_their_mistake(answer, phrases):
    fb = ex.check_frozen_grads(answer)
    assert fb.status == "wrong", fb
    assert not re.search(r"\. [a-z]", fb.message.split("\n")[0]), fb   # every sentence starts upper-case
    for phrase in phrases:
        assert phrase in fb.message, (phrase, fb)


@pytest.mark.parametrize("row", ex._FROZEN_DIAGNOSES, ids=lambda row: row.name)
def test_frozen_every_diagnosis_is_the_belief_its_own_answer_is_told(row):
    fb = ex.check_frozen_grads(row.variant(ex._frozen_run()))
    assert fb.status == "wrong" and row.says() in fb.message, fb


@pytest.mark.parametrize("make", [
    set, frozenset, list, tuple, lambda s: (n for n in s), lambda s: {n: None for n in s}.keys(),
    lambda s: [f"  {n} " for n in s], lambda s: list(s) * 2, lambda s: np.array(sorted(s)).tolist(),
], ids=["set", "frozenset", "list", "tuple", "generator", "dict-keys", "padded", "repeated", "from-numpy"])
def test_frozen_right_answers_in_any_collection_pass(make):
    fb = ex.check_frozen_grads(make(WITH_GRAD))
    assert fb.passed, fb


def _endless():
    while True:
        yield "2.weight"


@pytest.mark.parametrize("answer, phrase", [
    ("2.weight", "set of parameter names"),
    ({"2.weight": True}, "set of parameter names"),
    ({0, 1}, "set of parameter names"),
    ({"weight"}, "no parameter named 'weight'"),
    ({"model[2].weight"}, "its parameters are 0.weight, 0.bias, 2.weight, 2.bias, 4.weight, 4.bias"),
    (_endless(), "set of parameter names"),
    (torch.tensor([2.0]), "set of parameter names"),
    (42, "set of parameter names"),
], ids=["str", "dict", "ints", "short-name", "indexing", "endless", "tensor", "int"])
def test_frozen_odd_answers_are_malformed(answer, phrase):
    fb = ex.check_frozen_grads(answer)
    assert fb.status == "malformed" and phrase in fb.message, fb


# =========================================================================== exercise 3: the backward of SiLU


def silu_function(backward, forward=None):
    """A learner's Function: the given forward (default x * sigmoid(x), saving x) and backward(x, grad_output)."""

    class SiLU(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            ctx.save_for_backward(x)
            return forward(x) if forward else x * torch.sigmoid(x)

        @staticmethod
        def backward(ctx, grad_output):
            (x,) = ctx.saved_tensors
            return backward(x, grad_output)

    return SiLU


def _instance():
    with warnings.catch_warnings():  # PyTorch warns that a Function should not be instantiated, as the check says
        warnings.simplefilter("ignore", DeprecationWarning)
        return silu_function(lambda x, g: g)()


def s(x):
    return torch.sigmoid(x)


def _raise(err):
    raise err


@pytest.mark.parametrize("backward, phrase", [
    (lambda x, g: s(x) + x * s(x) * (1 - s(x)), "ignores grad_output"),
    (lambda x, g: g * s(x), "product rule adds"),
    (lambda x, g: g * x * s(x) * (1 - s(x)), "derivative of the x factor"),
    (lambda x, g: g * s(x) * (1 - s(x)), "derivative of sigmoid(x) alone"),
    (lambda x, g: g * (s(x) + x * (1 - s(x))), "a factor sigmoid(x) is missing"),
    (lambda x, g: -g * (s(x) + x * s(x) * (1 - s(x))), "wrong sign"),
    (lambda x, g: g, "treats the function as y = x"),
    (lambda x, g: None, "returns None"),
    (lambda x, g: (g, g), "incorrect number of gradients"),
    (lambda x, g: g[:2], "shaped like x"),
    (lambda x, g: g.sum(), "shaped like x"),
    (lambda x, g: g * 2, "grad_output * d/dx[x * sigmoid(x)] is"),
    (lambda x, g: g * (s(x) + x * s(x) * (1 - s(x))) + 1e-3, "grad_output * d/dx[x * sigmoid(x)] is"),
    (lambda x, g: _raise(ZeroDivisionError("oops")), "backward raised ZeroDivisionError: oops"),
    (lambda x, g: _raise(RecursionError()), "backward raised RecursionError"),
    (lambda x, g: "gradient", "backward raised"),
], ids=["no-grad-output", "only-sigmoid", "only-x-term", "sigmoid-derivative", "missing-s", "sign", "identity",
        "none", "two", "short", "scalar", "doubled", "offset", "raises", "recursion", "string"])
def test_silu_wrong_backwards_get_the_hint_for_their_mistake(backward, phrase):
    fb = ex.check_silu_backward(silu_function(backward))
    assert fb.status == "wrong" and phrase in fb.message, fb


@pytest.mark.parametrize("row", ex._SILU_DIAGNOSES, ids=lambda row: row.name)
def test_silu_every_diagnosis_is_the_hint_its_own_backward_gets(row):
    fb = ex.check_silu_backward(silu_function(row.variant))
    assert fb.status == "wrong" and fb.message == row.says(), fb


def test_silu_a_backward_right_only_for_grad_output_one_fails():
    # with grad_output = 1 everywhere this backward would look right: the check must use another grad_output
    fb = ex.check_silu_backward(silu_function(lambda x, g: s(x) + x * s(x) * (1 - s(x))))
    assert not fb.passed


class SavesSigmoid(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        sig = torch.special.expit(x)
        ctx.save_for_backward(x, sig)
        return x * sig

    @staticmethod
    def backward(ctx, grad_output):
        x, sig = ctx.saved_tensors
        return grad_output * sig * (1 + x * (1 - sig))


class SavesOutput(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        y = x * torch.sigmoid(x)
        ctx.save_for_backward(x, y)
        return y

    @staticmethod
    def backward(ctx, grad_output):
        x, y = ctx.saved_tensors
        sig = torch.sigmoid(x)
        return grad_output * (sig + y * (1 - sig))


class AutogradInside(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return nn.functional.silu(x)

    @staticmethod
    def backward(ctx, grad_output):
        (x,) = ctx.saved_tensors
        with torch.enable_grad():
            x = x.detach().requires_grad_()
            return torch.autograd.grad(nn.functional.silu(x), x, grad_output)[0]


class KeepsOnCtx(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.sig = torch.sigmoid(x)
        ctx.x = x
        return x * ctx.sig

    @staticmethod
    def backward(ctx, grad_output):
        return grad_output * (ctx.sig + ctx.x * ctx.sig * (1 - ctx.sig))


class ApplyIsSilu(torch.autograd.Function):
    """No backward at all: apply is replaced by the built-in function, whose own node computes the gradient."""

    apply = staticmethod(nn.functional.silu)


class ApplyBypassesForward(SavesSigmoid):
    """A right backward that never runs: apply computes the output with ordinary operations."""

    @classmethod
    def apply(cls, x):
        return x * torch.sigmoid(x)


class ApplyDetaches(SavesSigmoid):
    @classmethod
    def apply(cls, x):
        return (x * torch.sigmoid(x)).detach()


@pytest.mark.parametrize("answer, node", [
    (ApplyIsSilu, "the node SiluBackward0"), (ApplyBypassesForward, "the node MulBackward0"),
    (ApplyDetaches, "no node at all"),
], ids=["apply-is-F.silu", "apply-bypasses-forward", "apply-detaches"])
def test_silu_a_gradient_not_computed_by_the_learners_backward_does_not_score(answer, node):
    fb = ex.check_silu_backward(answer)
    assert fb.status == "wrong" and "your backward never ran" in fb.message and node in fb.message, fb


@pytest.mark.parametrize("answer", [
    SavesSigmoid, SavesOutput, AutogradInside, KeepsOnCtx,
    silu_function(lambda x, g: (g * (s(x) + x * s(x) * (1 - s(x)))).float()),
    silu_function(lambda x, g: g * s(x) * (1 + x * torch.exp(-x) * s(x))),
    silu_function(lambda x, g: torch.autograd.functional.jacobian(nn.functional.silu, x).diagonal() * g),
], ids=["saves-sigmoid", "saves-output", "autograd-inside", "on-ctx", "float32", "exp-form", "jacobian"])
def test_silu_right_backwards_written_differently_pass(answer):
    fb = ex.check_silu_backward(answer)
    assert fb.passed, fb


@pytest.mark.parametrize("answer, status, phrase", [
    (_instance(), "malformed", "not an instance"),
    (lambda x: x * torch.sigmoid(x), "malformed", "subclass of torch.autograd.Function"),
    (nn.SiLU, "malformed", "subclass of torch.autograd.Function"),
    (nn.functional.silu, "malformed", "subclass of torch.autograd.Function"),
    (torch.autograd.Function, "wrong", "raised"),
    ("SiLU", "malformed", "got str"),
    (silu_function(lambda x, g: g, forward=lambda x: x), "wrong", "no longer computes x * sigmoid(x)"),
    (silu_function(lambda x, g: g, forward=lambda x: (x * torch.sigmoid(x)).sum()), "wrong", "no longer computes"),
    (silu_function(lambda x, g: g, forward=lambda x: _raise(ValueError("fw"))), "wrong",
     "SiLU.apply(x) raised ValueError: fw"),
], ids=["instance", "function", "module", "functional", "bare-Function", "name", "identity-forward", "sum-forward",
        "forward-raises"])
def test_silu_odd_answers_give_feedback(answer, status, phrase):
    fb = ex.check_silu_backward(answer)
    assert fb.status == status and phrase in fb.message, fb


# =========================================================================== nothing makes a check raise


@pytest.mark.parametrize("check", [ex.check_hook_grad, ex.check_frozen_grads, ex.check_silu_backward])
@pytest.mark.parametrize(
    "odd", [Hostile(), None, ..., [], {}, b"bytes", float("nan"), type],
    ids=["hostile", "None", "Ellipsis", "empty-list", "empty-dict", "bytes", "nan", "type"],
)
def test_no_check_raises_on_an_odd_answer(check, odd):
    fb = check(odd)
    assert fb.status in ("wrong", "malformed", "unanswered"), fb


def test_an_interrupt_from_learner_code_passes_through():
    with pytest.raises(KeyboardInterrupt):
        ex.check_silu_backward(silu_function(lambda x, g: _raise(KeyboardInterrupt())))


def test_sys_exit_in_learner_code_is_feedback():
    fb = ex.check_silu_backward(silu_function(lambda x, g: _raise(SystemExit(3))))
    assert fb.status == "malformed" and "SystemExit" in fb.message, fb


@pytest.mark.parametrize("check, answer", [(ex.check_hook_grad, RIGHT), (ex.check_frozen_grads, WITH_GRAD),
                                           (ex.check_silu_backward, SavesSigmoid)], ids=["hook", "frozen", "silu"])
def test_a_check_leaves_the_learners_random_stream_alone(check, answer):
    torch.manual_seed(123)
    expected = torch.rand(3)
    torch.manual_seed(123)
    assert check(answer).passed
    assert torch.equal(torch.rand(3), expected)


# =========================================================================== the worked solutions


@pytest.mark.parametrize("name", ["08_hook_grad", "08_frozen_grads", "08_silu_backward"])
def test_the_worked_solutions_pass_their_checks(name):
    code = (REPO / "notebooks" / "solutions" / f"{name}.py").read_text()
    *body, last = code.strip().splitlines()
    namespace = {"torch": torch, "nn": nn, "ex": ex}
    exec("\n".join(body), namespace)
    assert eval(last, namespace).passed
