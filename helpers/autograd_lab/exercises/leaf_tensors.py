"""Answer checks for notebook 01, leaf tensors.

Each exercise shows a snippet; the snippet's text lives here (the notebook
prints it in its prompt) so that the check and the prompt cannot drift apart.
Every reference answer is computed by running the snippet, never typed in.
"""

from __future__ import annotations

import numbers

import torch

from . import Feedback, correct, is_unanswered, malformed, unanswered, wrong

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


def _fn_name(t: torch.Tensor) -> str:
    return "None" if t.grad_fn is None else type(t.grad_fn).__name__


# ---------------------------------------------------------------- exercise 1: which tensors are leaves?


def _leaf_hint(name: str, t: torch.Tensor, is_leaf: bool, snippet_line: str) -> str:
    line = f"`{snippet_line}`"
    made_by_factory = snippet_line.split("=", 1)[1].strip().startswith("torch.")
    if not is_leaf:
        return (
            f"{line}: an input requires grad, so the operation was recorded; {name} has a grad_fn "
            f"({_fn_name(t)}) and is not a leaf."
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


def check_leaves(answer) -> Feedback:
    """Exercise 1: the set of names in ``LEAVES_SNIPPET`` whose tensor is a leaf."""
    if is_unanswered(answer):
        return unanswered('the set of names of the leaves, e.g. {"w", "h"}')
    tensors = run_snippet(LEAVES_SNIPPET)
    names = list(tensors)
    form = 'a set of names (strings), e.g. {"w", "h"}'
    if isinstance(answer, str) or not isinstance(answer, (set, frozenset, list, tuple)):
        return malformed(f"expected {form}; got {type(answer).__name__}.")
    if not all(isinstance(a, str) for a in answer):
        return malformed(f"expected {form}: write the names in quotes.")
    unknown = sorted(set(answer) - set(names))
    if unknown:
        return malformed(f"the snippet has no tensor named {', '.join(unknown)}; its tensors are {', '.join(names)}.")
    chosen = set(answer)
    leaves = {n for n, t in tensors.items() if t.is_leaf}
    lines = {line.split("=", 1)[0].strip(): line.strip() for line in LEAVES_SNIPPET.splitlines()}
    if chosen == leaves:
        return correct(
            f"the leaves are {', '.join(n for n in names if n in leaves)}. A leaf is any tensor without a grad_fn: "
            "one you created, or one whose inputs record nothing."
        )
    hints = []
    for n in names:
        if (n in chosen) != (n in leaves):
            verdict = "is a leaf" if n in leaves else "is not a leaf"
            hints.append(f"- {n} {verdict}. " + _leaf_hint(n, tensors[n], n in leaves, lines[n]))
    count = len(hints)
    return wrong(
        f"{count} tensor{'s' if count > 1 else ''} misplaced. Run the snippet and print `t.is_leaf` "
        "to see it for yourself:\n" + "\n".join(hints)
    )


# ---------------------------------------------------------------- exercise 2: .grad after two backward calls


def _number(answer):
    """The answer as a float, or None when it is not a plain number."""
    if isinstance(answer, bool):
        return None
    if isinstance(answer, torch.Tensor):
        return float(answer.detach().reshape(-1)[0]) if answer.numel() == 1 else None
    if isinstance(answer, numbers.Real):
        return float(answer)
    return None


def check_grad_after_two_backwards(answer) -> Feedback:
    """Exercise 2: the value of ``w.grad`` after ``GRAD_SNIPPET`` runs."""
    if is_unanswered(answer):
        return unanswered("a number: the value of w.grad after the loop")
    value = _number(answer)
    if value is None:
        return malformed(
            f"expected one number, e.g. 7.0 (a float or an int, without quotes); got {type(answer).__name__}."
        )
    w = run_snippet(GRAD_SNIPPET)["w"]
    total = float(w.grad)
    once = float(run_snippet(GRAD_SNIPPET.replace("range(2)", "range(1)"))["w"].grad)
    calls = round(total / once)
    loss_line = next(line.strip() for line in GRAD_SNIPPET.splitlines() if line.strip().startswith("loss ="))
    with torch.no_grad():
        loss_value = float(w**2 + 4 * w)

    def near(target):
        return abs(value - target) <= 1e-6 * max(1.0, abs(target))

    if near(total):
        return correct(
            f"w.grad = {total:g}: each backward adds d(loss)/dw = 2*w + 4 = {once:g} to .grad, "
            f"and nothing cleared it in between ({calls} x {once:g})."
        )
    if near(once):
        return wrong(
            f"{value:g} is what one backward call gives. The loop runs backward twice, and the second call "
            "adds its gradient to the .grad already there instead of replacing it."
        )
    if near(loss_value) or near(calls * loss_value):
        return wrong(
            f"{value:g} comes from the loss value ({loss_value:g} per step); .grad holds the derivative "
            "of the loss with respect to w, summed over the backward calls."
        )
    if near(0.0):
        return wrong(
            "nothing resets .grad here: no zero_grad() runs inside the loop. Each backward adds the derivative "
            "of the loss with respect to w to .grad."
        )
    return wrong(
        f"{value:g} is not it. Work out d(loss)/dw for `{loss_line}` at w = {float(w.detach()):g}, then count how many "
        "backward calls add it to w.grad."
    )


# ---------------------------------------------------------------- exercise 3: repair a snippet whose .grad is None


def _describe_error(err: Exception) -> str:
    return f"{type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}".rstrip(": ")


def check_make_weight(answer, *, trials: int = 5) -> Feedback:
    """Exercise 3: a function returning 3 weights uniform in [0, 0.01) that are leaves which receive ``.grad``.

    The check calls it ``trials`` times, runs backward through ``(w * x).sum()`` on
    random ``x`` and compares ``w.grad`` with the reference gradient, ``x``.
    """
    if is_unanswered(answer):
        return unanswered("your repaired function (its name, without parentheses)")
    if isinstance(answer, torch.Tensor):
        return malformed(
            "you passed a tensor; pass the function itself, without calling it: answer = make_weight_fixed"
        )
    if not callable(answer):
        return malformed(f"expected a function that takes no arguments; got {type(answer).__name__}.")
    generator = torch.Generator().manual_seed(1)
    for _ in range(trials):
        try:
            w = answer()
        except Exception as err:  # the learner's code: report, never raise
            return wrong(f"calling your function raised {_describe_error(err)}")
        if not isinstance(w, torch.Tensor):
            return malformed(f"your function should return a tensor; it returned {type(w).__name__}.")
        if tuple(w.shape) != (3,):
            return wrong(f"the function should return 3 weights (shape (3,)); got shape {tuple(w.shape)}.")
        if not w.requires_grad:
            return wrong(
                "the tensor it returns requires no grad, so backward will never fill its .grad. "
                "Keep the scaling, and ask for gradients on the tensor you return."
            )
        if not w.is_leaf:
            return wrong(
                f"the tensor it returns is still not a leaf: it has grad_fn {_fn_name(w)}, because an operation "
                "ran after requires_grad=True was set. Do the scaling first, then make the result require grad "
                "(.requires_grad_(), or torch.nn.Parameter)."
            )
        values = w.detach().cpu().double()
        if not w.is_floating_point() or values.min() < 0 or values.max() >= 0.01:
            return wrong(
                "the weights should stay small, uniform in [0, 0.01) like the original's; got values from "
                f"{float(values.min()):.4g} to {float(values.max()):.4g}. Keep the * 0.01."
            )
        x = torch.randn(3, generator=generator, dtype=w.dtype).to(w.device)
        try:
            (w * x).sum().backward()
        except Exception as err:
            return wrong(f"backward through (w * x).sum() raised {_describe_error(err)}")
        if w.grad is None:
            return wrong("after backward, .grad of the returned tensor is still None.")
        if not torch.allclose(w.grad.detach().cpu().double(), x.cpu().double()):
            return wrong(
                "after one backward through (w * x).sum(), w.grad should equal x, but it differs. Does your function "
                "return a fresh tensor on each call, with an empty .grad?"
            )
    return correct(
        f"over {trials} calls your function returned a leaf that requires grad, and backward through (w * x).sum() "
        "filled its .grad with x, as d(w*x)/dw = x says."
    )
