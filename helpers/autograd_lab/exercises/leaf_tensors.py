"""Answer checks for notebook 01, leaf tensors.

Each exercise shows a snippet; the snippet's text lives here (the notebook
prints it in its prompt) so that the check and the prompt cannot drift apart.
Every reference answer is computed by running the snippet, never typed in.

No check raises on a learner's answer (each is wrapped in ``never_raises``): an
``Exception`` of any class, from the learner's function or from an odd answer
object, becomes feedback. ``KeyboardInterrupt`` and ``SystemExit`` pass through,
and so do the other ``BaseException`` subclasses (``GeneratorExit``, asyncio's
``CancelledError``): Python keeps that branch for signals that stop the program,
not for errors, and a check must not swallow a request to stop.
"""

from __future__ import annotations

import contextlib
import inspect
import io
import math
from collections.abc import Mapping

import torch

from ..graphmodel import node_name
from .answers import as_names, is_unanswered, read_number
from .feedback import Feedback, correct, describe_error, malformed, never_raises, unanswered, wrong

__all__ = [
    "GRAD_SNIPPET",
    "LEAVES_SNIPPET",
    "check_grad_after_two_backwards",
    "check_leaves",
    "check_make_weight",
    "run_snippet",
]

LEAVES_SNIPPET = """\
w = torch.randn(3, requires_grad=True)
x = torch.randn(3)
h = w * x
loss = h.sum()
v = w.detach()
s = x * 2"""

GRAD_SNIPPET = """\
w = torch.tensor(3.0, requires_grad=True)
for step in range(2):
    loss = w ** 2 + 4 * w
    loss.backward()"""


def run_snippet(snippet: str) -> dict:
    """Run a snippet in a fresh namespace (with ``torch``) and return its tensors by name."""
    namespace: dict = {"torch": torch}
    exec(snippet, namespace)  # the snippets are this module's own constants
    return {name: value for name, value in namespace.items() if isinstance(value, torch.Tensor)}


# ---------------------------------------------------------------- exercise 1: which tensors are leaves?


def _leaf_hint(name: str, t: torch.Tensor, is_leaf: bool, snippet_line: str) -> str:
    line = f"`{snippet_line}`"
    made_by_factory = snippet_line.split("=", 1)[1].strip().startswith("torch.")
    if not is_leaf:
        return (
            f"{line}: an input requires grad, so the operation was recorded; {name} has a grad_fn "
            f"({node_name(t.grad_fn)}) and is not a leaf."
        )
    if made_by_factory and t.requires_grad:
        return f"{line}: you created {name} yourself with requires_grad=True, so no operation made it: a leaf."
    if made_by_factory:
        return f"{line}: created by you, without requires_grad; a tensor that records no history is a leaf."
    if "detach()" in snippet_line:
        return f"{line}: detach() returns a tensor with the same data and no history (grad_fn None): a leaf."
    return (
        f"{line}: made by an operation, but none of its inputs requires grad, so nothing was recorded; "
        f"{name} has no grad_fn, and every tensor without a grad_fn is a leaf."
    )


def _leaf_pattern(chosen: set, tensors: dict, made_by_you: set) -> str:
    """A sentence naming the belief behind a whole wrong answer, when it is a common one ('' otherwise)."""
    leaves = {n for n, t in tensors.items() if t.is_leaf}
    needs_grad = {n for n, t in tensors.items() if t.requires_grad}
    patterns = [
        (set(), "You chose none, yet every tensor without a grad_fn is a leaf. "),
        (needs_grad, "You chose the tensors that require grad: being a leaf is about history (no grad_fn), "
                     "not about requires_grad. "),
        (set(tensors) - leaves, "You chose exactly the non-leaves: the tensors an operation made while recording. "),
        (leaves & needs_grad, "You kept only the leaves that require grad (the parameters); a tensor that needs "
                              "no gradient and has no grad_fn is a leaf too. "),
        (made_by_you, "You kept only the tensors created directly; a tensor an operation made is a leaf too "
                      "when nothing was recorded. "),
    ]
    return next((text for pattern, text in patterns if chosen == pattern), "")


def _leaves_form(answer) -> tuple[set | None, Feedback | None]:
    """The learner's names as a set, or the feedback that says why the answer has the wrong form."""
    form = 'a set of names (strings), e.g. {"w", "h"}'
    if isinstance(answer, Mapping):
        return None, malformed(f"you gave a {type(answer).__name__}; give only the names of the leaves, as {form}.")
    items = as_names(answer)
    if items is None:
        return None, malformed(f"expected {form}; got {type(answer).__name__}.")
    if not all(isinstance(a, str) for a in items):
        return None, malformed(f"expected {form}: write the names in quotes.")
    return {a.strip() for a in items}, None


@never_raises
def check_leaves(answer) -> Feedback:
    """Exercise 1: the set of names in ``LEAVES_SNIPPET`` whose tensor is a leaf (any collection of names)."""
    if is_unanswered(answer):
        return unanswered('the set of names of the leaves, e.g. {"w", "h"}')
    chosen, problem = _leaves_form(answer)
    if problem is not None:
        return problem
    tensors = run_snippet(LEAVES_SNIPPET)
    names = list(tensors)
    unknown = sorted(chosen - set(names))
    if unknown:
        shown = ", ".join(u if u.isidentifier() else repr(u) for u in unknown[:5])
        shown += ", ..." if len(unknown) > 5 else ""
        return malformed(f"the snippet has no tensor named {shown}; its tensors are {', '.join(names)}.")
    leaves = {n for n, t in tensors.items() if t.is_leaf}
    lines = {line.split("=", 1)[0].strip(): line.strip() for line in LEAVES_SNIPPET.splitlines()}
    if chosen == leaves:
        return correct(
            f"the leaves are {', '.join(n for n in names if n in leaves)}. A leaf is any tensor without a grad_fn: "
            "one you created, or one whose inputs record nothing."
        )
    made_by_you = {n for n in names if lines[n].split("=", 1)[1].strip().startswith("torch.")}
    hints = []
    for n in names:
        if (n in chosen) != (n in leaves):
            verdict = "is a leaf" if n in leaves else "is not a leaf"
            hints.append(f"- {n} {verdict}. " + _leaf_hint(n, tensors[n], n in leaves, lines[n]))
    count = len(hints)
    return wrong(
        f"{count} tensor{'s' if count > 1 else ''} misplaced. {_leaf_pattern(chosen, tensors, made_by_you)}"
        "Run the snippet and print `t.is_leaf` to see it for yourself:\n" + "\n".join(hints)
    )


# ---------------------------------------------------------------- exercise 2: .grad after two backward calls


def _grad_slips(w: torch.Tensor, once: float, calls: int, loss_line: str) -> list:
    """(value, hint) for the usual slips, each value computed from the snippet; the first match names the slip."""
    expression = loss_line.split("=", 1)[1].strip()
    terms = [t.strip() for t in expression.split(" + ")]
    w_now = w.detach().clone().requires_grad_()
    with torch.no_grad():
        loss_value = float(eval(expression, {"torch": torch}, {"w": w_now}))  # the snippet's own line
    trend, sign = ("grows with w", "positive") if once > 0 else ("falls as w grows", "negative")
    slips = [
        (once, f"{once:g} is what one backward call gives. The loop runs backward {calls} times, and each later "
               "call adds its gradient to the .grad already there instead of replacing it."),
        ((calls + 1) * once, f"that counts {calls + 1} backward calls; range({calls}) runs the loop body {calls} "
                             "times."),
        (-calls * once, f"right size, wrong sign: at this w the loss {trend}, so d(loss)/dw is {sign}."),
        (-once, f"wrong sign, and only one call's worth: d(loss)/dw is {sign} here, and {calls} calls add up."),
        (loss_value, f"that is the loss value ({loss_value:g} per step); .grad holds the derivative of the loss "
                     "with respect to w, summed over the backward calls."),
        (calls * loss_value, f"that sums the loss values ({loss_value:g} per step); .grad holds the derivative of "
                             "the loss with respect to w, summed over the backward calls."),
        (0.0, "nothing resets .grad here: no zero_grad() runs inside the loop. Each backward adds the derivative "
              "of the loss with respect to w to .grad."),
    ]
    if len(terms) > 1:
        for term in terms:
            (part,) = torch.autograd.grad(eval(term, {"torch": torch}, {"w": w_now}), w_now)
            others = " + ".join(t for t in terms if t != term)
            hint = f"you differentiated only `{term}`; `{others}` depends on w too and adds its own derivative."
            slips += [(calls * float(part), hint), (float(part), hint)]
    return slips


@never_raises
def check_grad_after_two_backwards(answer) -> Feedback:
    """Exercise 2: the value of ``w.grad`` after ``GRAD_SNIPPET`` runs."""
    value, problem = read_number(answer, "a number: the value of w.grad after the loop", "7.0")
    if problem is not None:
        return problem
    w = run_snippet(GRAD_SNIPPET)["w"]
    total = float(w.grad)
    once = float(run_snippet(GRAD_SNIPPET.replace("range(2)", "range(1)"))["w"].grad)
    calls = round(total / once)
    loss_line = next(line.strip() for line in GRAD_SNIPPET.splitlines() if line.strip().startswith("loss ="))

    def near(target):
        return math.isfinite(value) and abs(value - target) <= 1e-6 * max(1.0, abs(target))

    if near(total):
        return correct(
            f"w.grad = {total:g}: each backward adds d(loss)/dw = 2*w + 4 = {once:g} to .grad, "
            f"and nothing cleared it in between ({calls} x {once:g})."
        )
    if not math.isfinite(value):
        return wrong(f"{value} is not a finite number; after two backward calls .grad holds an ordinary number.")
    hint = next((hint for target, hint in _grad_slips(w, once, calls, loss_line) if near(target)), None)
    if hint is not None:
        return wrong(hint)
    return wrong(
        f"{value:g} is not it. Work out d(loss)/dw for `{loss_line}` at w = {float(w.detach()):g}, then count how many "
        "backward calls add it to w.grad."
    )


# ---------------------------------------------------------------- exercise 3: repair a snippet whose .grad is None


_LOW, _HIGH = 0.0, 0.01  # make_weight's range: torch.rand(3) * 0.01 is uniform in [0, 0.01)
_DRAWS = 100  # calls whose values the spread test pools (300 weights)
_KS_LIMIT = 2.69  # Kolmogorov-Smirnov distance x sqrt(n) that a uniform sample exceeds with probability 1e-6


def _needs_arguments(fn) -> bool:
    try:
        inspect.signature(fn).bind()
    except TypeError:
        return True
    except ValueError:  # no signature to read (some builtins): let the call decide
        return False
    return False


def _call_factory(fn) -> tuple[torch.Tensor | None, Feedback | None]:
    try:
        w = fn()
    except Exception as err:  # the learner's code: report, never raise
        return None, wrong(f"calling your function raised {describe_error(err)}")
    if not isinstance(w, torch.Tensor):
        return None, malformed(f"your function should return a tensor; it returned {type(w).__name__}.")
    return w, None


def _form_problem(w: torch.Tensor) -> Feedback | None:
    """What is wrong with the kind of tensor returned, before its values are read."""
    if w.layout != torch.strided:
        return wrong(f"your function returns a {w.layout} tensor; return an ordinary dense tensor, as torch.rand does.")
    if w.is_meta:
        return wrong("your function returns a meta tensor, which has a shape but no values; drop device='meta'.")
    if tuple(w.shape) != (3,):
        return wrong(f"the function should return 3 weights (shape (3,)); got shape {tuple(w.shape)}.")
    if w.is_complex() or not w.is_floating_point():
        return wrong(f"the weights should be real floating-point numbers, as torch.rand gives; got dtype {w.dtype}.")
    if not w.requires_grad:
        return wrong(
            "the tensor it returns requires no grad, so backward will never fill its .grad. "
            "Keep the scaling, and ask for gradients on the tensor you return."
        )
    if not w.is_leaf:
        retained = (
            "retain_grad() makes backward fill its .grad, but it stays an intermediate result: an optimizer refuses "
            "it (can't optimize a non-leaf Tensor), and the real leaf hides behind it. " if w.retains_grad else ""
        )
        return wrong(
            f"the tensor it returns is still not a leaf: it has grad_fn {node_name(w.grad_fn)}, because an operation "
            f"ran after requires_grad=True was set. {retained}Do the scaling first, then make the result require grad "
            "(.requires_grad_(), or torch.nn.Parameter)."
        )
    return None


def _value_problem(w: torch.Tensor, seen: list) -> Feedback | None:
    """What is wrong with the values, or with a tensor met on an earlier call."""
    if any(w is old for old in seen):
        return wrong("your function returns the same tensor object on every call; create a new one inside it.")
    if any(w.untyped_storage().data_ptr() == old.untyped_storage().data_ptr() for old in seen):
        return wrong("each call returns a tensor that shares its memory with the previous one; create new weights "
                     "inside the function (torch.rand draws new ones on every call).")
    values = w.detach().cpu().double()
    if not torch.isfinite(values).all():
        return wrong(f"your weights contain {values.tolist()}: not all finite numbers. "
                     "Draw them with torch.rand(3) * 0.01.")
    if values.min() < _LOW or values.max() >= _HIGH:
        return wrong(
            "the weights should stay small, uniform in [0, 0.01) like the original's; got values from "
            f"{float(values.min()):.4g} to {float(values.max()):.4g}. Keep the * 0.01."
        )
    shown = "[" + ", ".join(f"{v:.4g}" for v in values.tolist()) + "]"
    if bool((values == values[0]).all()):
        return wrong(f"your three weights are all {float(values[0]):.4g}; make_weight draws three different random "
                     "values, uniform in [0, 0.01). Keep the torch.rand(3).")
    if any(torch.equal(values, old.detach().cpu().double()) for old in seen):
        return wrong(
            f"two calls returned the same weights {shown}. make_weight draws new random weights on every "
            "call; fixed values, or a seed set inside the function, repeat them."
        )
    return None


def _backward_problem(w: torch.Tensor, generator: torch.Generator) -> Feedback | None:
    if w.grad is not None:
        return wrong("the tensor arrives with a .grad already filled; return a fresh tensor whose .grad is None.")
    x = torch.randn(3, generator=generator).to(device=w.device, dtype=w.dtype)
    try:
        (w * x).sum().backward()
    except Exception as err:
        return wrong(f"backward through (w * x).sum() raised {describe_error(err)}")
    if w.grad is None:
        return wrong("after backward, .grad of the returned tensor is still None.")
    if not torch.allclose(w.grad.detach().cpu().double(), x.cpu().double()):
        return wrong(
            "after one backward through (w * x).sum(), w.grad should equal x, but it differs. Does your function "
            "return a fresh tensor on each call, with an empty .grad?"
        )
    return None


def _spread_problem(weights: list) -> Feedback | None:
    """Do the pooled weights look uniform on [0, 0.01)? (a Kolmogorov-Smirnov test that a right answer fails 1e-6)"""
    values = torch.cat([w.detach().cpu().double() for w in weights])
    u = ((values - _LOW) / (_HIGH - _LOW)).sort().values
    n = len(u)
    steps = torch.arange(1, n + 1, dtype=torch.float64) / n
    distance = float(torch.maximum(steps - u, u - (steps - 1 / n)).max())
    if distance * math.sqrt(n) <= _KS_LIMIT:
        return None
    return wrong(
        f"over {len(weights)} calls your weights ran from {float(values.min()):.4g} to {float(values.max()):.4g} "
        f"(mean {float(values.mean()):.4g}): not spread uniformly over [0, 0.01), where the mean is about 0.005. "
        "Keep the original's values, torch.rand(3) * 0.01."
    )


def _check_factory(fn, trials: int) -> Feedback:
    generator = torch.Generator().manual_seed(1)
    seen: list = []  # every tensor returned, kept alive so that a reused object or memory shows
    for call in range(max(trials, _DRAWS)):
        if call < trials:
            w, problem = _call_factory(fn)
        else:  # the extra draws only pool values: a print in the function would repeat for each of them
            with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
                w, problem = _call_factory(fn)
        # a Feedback is falsy unless it passed: compare each result with None, never chain them with `or`
        if problem is None:
            problem = _form_problem(w)
        if problem is None:
            problem = _value_problem(w, seen)
        if problem is None and call < trials:
            problem = _backward_problem(w, generator)
        if problem is not None:
            return problem
        seen.append(w)
    spread = _spread_problem(seen)
    return spread if spread is not None else correct(
        f"over {trials} calls your function returned a leaf that requires grad, and backward through (w * x).sum() "
        "filled its .grad with x, as d(w*x)/dw = x says."
    )


@never_raises
def check_make_weight(answer, *, trials: int = 5) -> Feedback:
    """Exercise 3: a function returning 3 weights uniform in [0, 0.01) that are leaves which receive ``.grad``.

    The check calls it ``trials`` times, runs backward through ``(w * x).sum()`` on
    random ``x`` and compares ``w.grad`` with the reference gradient, ``x``. Then it
    pools the weights of further calls (``_DRAWS`` in all) and tests that they are new
    on every call and spread uniformly over [0, 0.01). Torch's random state is seeded
    for the check and restored afterwards, so the verdict is the same on every run and
    the learner's own random numbers are not disturbed.
    """
    if is_unanswered(answer):
        return unanswered("your repaired function (its name, without parentheses)")
    if isinstance(answer, torch.Tensor):
        return malformed(
            "you passed a tensor; pass the function itself, without calling it: answer = make_weight_fixed"
        )
    if not callable(answer):
        return malformed(f"expected a function that takes no arguments; got {type(answer).__name__}.")
    if _needs_arguments(answer):
        return wrong("your function needs arguments, but it is called like make_weight(), with none: "
                     "drop the parameters or give them defaults.")
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        return _check_factory(answer, trials)
