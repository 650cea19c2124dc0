"""Answer checks for notebook 08, beyond backward().

Exercises 1 and 2 show a snippet; its text lives here (the notebook's prompt shows the same
lines, and a test keeps the two equal), and every reference answer comes from running it.
Exercise 3 takes the learner's own ``torch.autograd.Function``, makes sure that the output of its
``apply`` was made by the Function's own node (so that the gradient comes from the learner's
backward, not from an ``apply`` replaced by ``F.silu``), and compares that backward with the
derivative written out below, in float64, at points chosen so that each usual slip gives a
different gradient. No check raises on a learner's answer (each is wrapped in ``never_raises``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import torch

from . import trust
from .answers import as_names, close, is_unanswered, plain, read_number
from .diagnoses import Diagnosis, hint_for
from .feedback import Feedback, correct, describe_error, malformed, never_raises, unanswered, wrong

__all__ = ["FREEZE_SNIPPET", "HOOK_SNIPPET", "check_frozen_grads", "check_hook_grad", "check_silu_backward"]

HOOK_SNIPPET = """\
x = torch.tensor(3.0, requires_grad=True)
y = x ** 2
y.register_hook(lambda grad: grad * 2)
z = 5 * y + x
z.backward()"""

FREEZE_SNIPPET = """\
model = nn.Sequential(nn.Linear(2, 3), nn.Tanh(), nn.Linear(3, 3), nn.Tanh(), nn.Linear(3, 1))
model[2].requires_grad_(False)
model[4].bias.requires_grad_(False)
loss = model(torch.ones(4, 2)).sum()
loss.backward()"""


def _run(snippet: str) -> dict:
    """Run one of this module's snippets; the learner's random number stream is left as it was."""
    namespace: dict = {"torch": torch, "nn": torch.nn}
    with torch.random.fork_rng(devices=[]):
        exec(snippet, namespace)  # the snippets are this module's own constants
    return namespace


# ---------------------------------------------------------------- exercise 1: a hook that doubles the gradient


def _hook_run(*, hook: bool = True, direct_path: bool = True, hook_twice: bool = False) -> dict:
    """Run ``HOOK_SNIPPET`` (optionally without its hook line or its direct ``+ x`` path, or with the hook
    registered twice); its names.

    ``y`` keeps its gradient (``retain_grad``), which PyTorch stores after the tensor's hooks ran.
    """
    lines = HOOK_SNIPPET.splitlines()
    if not hook:
        lines = [line for line in lines if "register_hook" not in line]
    if not direct_path:
        lines = [line.replace(" + x", "") for line in lines]
    if hook_twice:
        lines = [twice for line in lines for twice in ([line] * (2 if "register_hook" in line else 1))]
    lines.insert(2, "y.retain_grad()")
    return _run("\n".join(lines))


def _grad_of(name: str, **switches) -> float:
    """The gradient of ``name`` (``"x"`` or ``"y"``) after ``_hook_run(**switches)``."""
    return float(_hook_run(**switches)[name].grad)


# The usual slips, each the number that a variant of the snippet gives (without its hook, ...); the hint quotes
# the learner's number as ``value``.
_HOOK_DIAGNOSES = (
    Diagnosis("no hook", lambda: _grad_of("x", hook=False),
              lambda value: f"{value:g} is x.grad without the hook. The hook's return value replaces the gradient "
                            "flowing into y, and that doubled gradient is what travels on from y to x."),
    Diagnosis("the hook doubles all of x.grad", lambda: 2 * _grad_of("x", hook=False),
              lambda value: f"{value:g} doubles all of x.grad. The hook sits on y: it doubles only what flows through "
                            "y; the direct path `+ x` brings its 1 to x.grad undoubled."),
    Diagnosis("no direct path", lambda: _grad_of("x", direct_path=False),
              "the hook part is right, but x also reaches z directly through `+ x`, which adds its own 1 to x.grad."),
    Diagnosis("neither hook nor direct path", lambda: _grad_of("x", hook=False, direct_path=False),
              "that leaves out both the hook (it doubles the gradient through y) and the direct path `+ x`."),
    Diagnosis("stops at y, after the hook", lambda: _grad_of("y"),
              lambda value: f"{value:g} is the gradient at y after the hook. Backward goes on to x: multiply by "
                            "dy/dx = 2x and add the direct path."),
    Diagnosis("stops at y, before the hook", lambda: _grad_of("y", hook=False),
              "that is dz/dy, the gradient reaching y before the hook. The hook doubles it, then backward goes on to "
              "x (times dy/dx = 2x, plus the direct path)."),
    Diagnosis("the value of z", lambda: float(_hook_run()["z"].detach()),
              "that is the value of z; x.grad holds dz/dx, with the hook's change applied."),
    Diagnosis("the hook runs twice", lambda: _grad_of("x", hook_twice=True),
              "that doubles the gradient through y twice. The hook runs once, on the gradient arriving at y; the 2 in "
              "dy/dx = 2x is the chain rule's, not a second doubling."),
    Diagnosis("twice the answer", lambda: 2 * _grad_of("x"),
              lambda value: f"{value:g} is twice the answer: the hook doubles only what flows through y, once, and the "
                            "direct path `+ x` brings its 1 to x.grad undoubled."),
)


@never_raises
def check_hook_grad(answer) -> Feedback:
    """Exercise 1: the number in ``x.grad`` after ``HOOK_SNIPPET`` runs."""
    value, problem = read_number(answer, "a number: the value of x.grad after the snippet", "7.5")
    if problem is not None:
        return problem
    if not math.isfinite(value):
        return malformed(f"give a finite number, not {value}.")
    run = _hook_run()
    right = float(run["x"].grad)
    if close(value, right):
        through_y = float(_hook_run(direct_path=False)["x"].grad)
        return correct(f"x.grad = {right:g}. The hook hands on {float(run['y'].grad):g} (twice dz/dy) from y, the "
                       f"chain rule turns it into {through_y:g} at x, and the direct path `+ x` adds "
                       f"{right - through_y:g}.")
    hint = hint_for(_HOOK_DIAGNOSES, lambda variant: close(value, variant()), value=value)
    return wrong(hint or "follow the gradient backward from z: dz/dy reaches y, the hook replaces it with what it "
                 "returns, then the chain rule carries that to x; x also gets dz/dx from the direct path `+ x`.")


# ---------------------------------------------------------------- exercise 2: which parameters get .grad?


def _frozen_run() -> dict:
    """Run ``FREEZE_SNIPPET``: {parameter name: (requires_grad, whether .grad is a tensor)}."""
    model = _run(FREEZE_SNIPPET)["model"]
    return {name: (p.requires_grad, p.grad is not None) for name, p in model.named_parameters()}


def _frozen_reason(name: str, requires_grad: bool, has_grad: bool) -> str:
    if not has_grad:
        return "None: requires_grad_(False) froze it, so backward skips it"
    if name.startswith("0."):
        return ("a tensor: it requires grad, and backward reaches it through the frozen middle layer (whose "
                "operations were recorded, as their input required grad)")
    return "a tensor: it requires grad, and its layer ran while recording"


def _with_grad(run: dict) -> set:
    return {n for n, (_, has) in run.items() if has}


def _after_the_frozen_layer(run: dict) -> set:
    return {n for n in _with_grad(run) if not n.startswith("0.")}


_FROZEN_BLOCKS = ("A frozen layer does not stop backward: its weights are constants to it, but the layer's operations "
                  "were recorded (their input required grad), so the gradient flows through them to the first layer.")

# The beliefs behind a whole wrong answer, each the set of names that a learner who holds it gives, made from the
# snippet's run.
_FROZEN_DIAGNOSES = (
    Diagnosis("a frozen layer stops backward", _after_the_frozen_layer, _FROZEN_BLOCKS),
    Diagnosis("a frozen layer stops backward, and 4.bias gets a gradient", lambda run: _after_the_frozen_layer(run)
              | {"4.bias"}, _FROZEN_BLOCKS + " And 4.bias was frozen on its own."),
    Diagnosis("4.bias gets a gradient", lambda run: _with_grad(run) | {"4.bias"},
              "4.bias was frozen on its own with requires_grad_(False): backward skips it."),
    Diagnosis("a frozen parameter gets a gradient", lambda run: set(run),
              "A parameter frozen with requires_grad_(False) gets no gradient, even when its layer runs while "
              "recording."),
    Diagnosis("no parameter gets a gradient", lambda run: set(),
              "Backward runs here: every parameter that requires grad and lies on a path from the loss gets one."),
)


@never_raises
def check_frozen_grads(answer) -> Feedback:
    """Exercise 2: the set of parameter names (``model.named_parameters()``) whose ``.grad`` is not None."""
    if is_unanswered(answer):
        return unanswered('the set of parameter names whose .grad is not None, e.g. {"0.weight"}')
    form = 'a set of parameter names (strings) such as {"0.weight"}'
    items = None if isinstance(answer, Mapping) else as_names(answer)
    if items is None or not all(isinstance(a, str) for a in items):
        return malformed(f"expected {form}; got {type(answer).__name__}.")
    run = _frozen_run()
    names = list(run)
    chosen = {a.strip() for a in items}
    unknown = sorted(chosen - set(names))
    if unknown:
        return malformed(f"the model has no parameter named {', '.join(map(repr, unknown[:4]))}; "
                         f"its parameters are {', '.join(names)} (the names model.named_parameters() gives).")
    with_grad = _with_grad(run)
    if chosen == with_grad:
        frozen = [n for n, (rg, _) in run.items() if not rg]
        return correct(f"only {', '.join(n for n in names if n in with_grad)}. {', '.join(frozen)}: frozen, so "
                       "backward skips them; but the frozen middle layer still passes the gradient on to the first "
                       "layer, since its operations were recorded (their input required grad).")
    pattern = hint_for(_FROZEN_DIAGNOSES, lambda variant: chosen == variant(run))
    lines = [f"- {n}: .grad is {_frozen_reason(n, *run[n])}" for n in names if (n in chosen) != (n in with_grad)]
    count = f"{len(lines)} parameter{'s' if len(lines) > 1 else ''} misplaced."
    advice = "Run the snippet and print `p.grad is None` for each parameter:\n"
    return wrong(f"{count} {pattern + ' ' if pattern else ''}{advice}" + "\n".join(lines))


# ---------------------------------------------------------------- exercise 3: the backward of x * sigmoid(x)


def _silu_derivative(x: torch.Tensor) -> torch.Tensor:
    """d/dx [x * sigmoid(x)] = sigmoid(x) + x * sigmoid(x) * (1 - sigmoid(x)), written out."""
    s = torch.sigmoid(x)
    return s + x * s * (1 - s)


def _s(x):
    return torch.sigmoid(x)


# The usual slips in a backward, each a backward(x, grad_output) that makes it.
_SILU_DIAGNOSES = (
    Diagnosis("grad_output ignored", lambda x, g: _silu_derivative(x),
              "your gradient ignores grad_output. backward receives dL/dy and must return dL/dx: multiply the local "
              "derivative by grad_output (the chain rule)."),
    Diagnosis("sigmoid alone", lambda x, g: g * _s(x),
              "that is sigmoid(x) alone: x * sigmoid(x) is a product, so the product rule adds x * sigmoid'(x), with "
              "sigmoid'(x) = sigmoid(x) * (1 - sigmoid(x))."),
    Diagnosis("x * sigmoid'(x) alone", lambda x, g: g * x * _s(x) * (1 - _s(x)),
              "that is x * sigmoid'(x) alone: the product rule also gives sigmoid(x) * 1, the derivative of the x "
              "factor."),
    Diagnosis("the derivative of sigmoid", lambda x, g: g * _s(x) * (1 - _s(x)),
              "that is the derivative of sigmoid(x) alone; the function here is x * sigmoid(x)."),
    Diagnosis("sigmoid'(x) as 1 - sigmoid(x)", lambda x, g: g * (_s(x) + x * (1 - _s(x))),
              "sigmoid'(x) is sigmoid(x) * (1 - sigmoid(x)): a factor sigmoid(x) is missing."),
    Diagnosis("the sign", lambda x, g: -g * _silu_derivative(x),
              "right size, wrong sign: x * sigmoid(x) grows where the derivative is positive."),
    Diagnosis("grad_output passed on", lambda x, g: g,
              "backward must multiply grad_output by the derivative of the function; returning grad_output unchanged "
              "treats the function as y = x."),
)


def _silu_points():
    """x in [-3, -0.3] or [0.3, 3] (near 0 some slips coincide) and a grad_output in [0.5, 2], drawn afresh for
    every call of the check: no backward can be fitted to them."""
    gen = trust.fresh_generator()
    size = torch.rand(6, generator=gen, dtype=torch.float64) * 2.7 + 0.3
    sign = torch.tensor([-1.0, 1.0, -1.0, 1.0, -1.0, 1.0], dtype=torch.float64)
    g = torch.rand(6, generator=gen, dtype=torch.float64) * 1.5 + 0.5
    return size * sign, g


def _silu_form(answer) -> Feedback | None:
    if isinstance(answer, torch.autograd.Function):
        return malformed("give the class itself (answer = SiLU), not an instance of it.")
    if not (isinstance(answer, type) and issubclass(answer, torch.autograd.Function)):
        return malformed(f"give your class, a subclass of torch.autograd.Function (answer = SiLU); "
                         f"got {type(answer).__name__}.")
    return None


def _silu_gradient(answer, x, g):
    """(gradient, None) from the learner's Function, or (None, feedback) saying what went wrong."""
    x = x.clone().requires_grad_()
    try:
        y = answer.apply(x)
    except Exception as err:  # noqa: BLE001 -- the learner's forward
        return None, wrong(f"calling SiLU.apply(x) raised {describe_error(err)}. Keep the forward as given.")
    if not isinstance(y, torch.Tensor) or y.shape != x.shape or not close(y.detach(), x.detach() * torch.sigmoid(x)):
        return None, wrong("the forward no longer computes x * sigmoid(x); keep it as given and write only backward.")
    node = y.grad_fn
    if getattr(type(node), "_forward_cls", None) is not answer:
        made_by = "no node at all" if node is None else f"the node {type(node).__name__}"
        return None, wrong(f"SiLU.apply(x) returned a tensor made by {made_by}, not by your Function (its node is "
                           f"{answer.__name__}Backward), so your backward never ran. Leave apply as "
                           "torch.autograd.Function defines it, and write the derivative in backward.")
    try:  # backward gets a copy of grad_output: changing it in place cannot move what the check compares with
        (gx,) = torch.autograd.grad(y, x, g.clone(), allow_unused=True)
    except Exception as err:  # noqa: BLE001 -- the learner's backward
        return None, wrong(f"backward raised {describe_error(err)}. It receives grad_output (shaped like the output) "
                           "and returns one gradient shaped like x.")
    if gx is None:
        return None, wrong("your backward returns None: return the gradient with respect to x, "
                           "grad_output times the derivative of x * sigmoid(x).")
    return plain(gx), None


@never_raises
def check_silu_backward(answer) -> Feedback:
    """Exercise 3: a ``torch.autograd.Function`` computing x * sigmoid(x) whose backward is right."""
    if is_unanswered(answer):
        return unanswered("your Function class (its name, without parentheses): answer = SiLU")
    problem = _silu_form(answer)
    if problem is not None:
        return problem
    x, g = _silu_points()
    gx, problem = _silu_gradient(answer, x, g)
    if problem is not None:
        return problem
    right = g * _silu_derivative(x)
    if close(gx, right):
        return correct("your backward returns grad_output * (sigmoid(x) + x * sigmoid(x) * (1 - sigmoid(x))): "
                       "the chain rule times the product rule. torch.autograd.gradcheck would agree.")
    hint = hint_for(_SILU_DIAGNOSES, lambda variant: close(gx, variant(x, g)))
    if hint is not None:
        return wrong(hint)
    i = 3
    return wrong(f"at x = {x[i].item():g} with grad_output = {g[i].item():g} your backward returns "
                 f"{gx.reshape(-1)[i].item():.4g}; grad_output * d/dx[x * sigmoid(x)] is {right[i].item():.4g}. "
                 "Check each factor, then compare with finite differences.")


trust.record(__name__)  # last: every name above is defined (see .trust)
