"""Answer checks for notebook 03, vectorized against looped losses.

The references below repeat code the notebook shows (its ``looped_loss`` with the
scalar model of section 1, and the loop of exercise 2): a check must not depend
on what a learner has since changed in the notebook. tests/test_vectorized_vs_looped.py
keeps each reference equal to the notebook's version.
"""

from __future__ import annotations

import numbers

import torch

from ..measure import count_nodes
from . import Feedback, correct, is_unanswered, malformed, unanswered, wrong

__all__ = [
    "check_looped_nodes",
    "check_vectorized_loss",
    "reference_looped_loss",
    "reference_weighted_loss_loop",
    "scalar_model",
]


# ---------------------------------------------------------------- exercise 1: the size of a looped graph


def scalar_model() -> torch.nn.Linear:
    """The model of section 1: ``y_hat = w * x`` with ``w = 1``."""
    model = torch.nn.Linear(1, 1, bias=False)
    with torch.no_grad():
        model.weight.fill_(1.0)
    return model


def reference_looped_loss(model, x, y):
    """The notebook's ``looped_loss``."""
    losses = []
    for k in range(len(y)):
        y_hat = model(x[k])
        losses.append((y[k] - y_hat) ** 2)
    return torch.stack(losses).mean()


def _looped_nodes(n: int) -> int:
    x = torch.arange(1.0, n + 1).unsqueeze(1)
    return count_nodes(reference_looped_loss(scalar_model(), x, 2 * x.squeeze(1)))


def check_looped_nodes(answer, n: int = 50) -> Feedback:
    """Exercise 1: the number of backward nodes in ``looped_loss``'s graph for ``n`` samples."""
    if is_unanswered(answer):
        return unanswered(f"a whole number: the node count of the looped graph for N = {n}")
    if isinstance(answer, bool) or not isinstance(answer, numbers.Integral):
        if isinstance(answer, float) and answer.is_integer():
            answer = int(answer)
        else:
            return malformed(f"give a whole number (an int such as 42), not {type(answer).__name__} {answer!r}.")
    answer = int(answer)
    one, two, truth = _looped_nodes(1), _looped_nodes(2), _looped_nodes(n)
    per_sample = two - one
    shared = one - per_sample
    x = torch.arange(1.0, n + 1).unsqueeze(1)
    vectorized = count_nodes(((2 * x.squeeze(1) - scalar_model()(x).squeeze(1)) ** 2).mean())
    if answer == truth:
        return correct(
            f"{truth} nodes: {per_sample} on each sample's path times {n} samples, plus {shared} shared by all "
            f"(the mean, the stack, and w's AccumulateGrad). The vectorized graph has {vectorized} for any N."
        )
    if answer == vectorized:
        return wrong(
            f"{answer} is the size of the vectorized graph, which does not depend on N. The loop repeats "
            "a whole path of nodes for every sample: count one path in the N = 2 drawing."
        )
    if answer == per_sample * n:
        return wrong(
            "you counted the per-sample paths, but not the nodes all samples share: the paths meet in one "
            "node that stacks the losses, one node takes their mean, and the weight has one AccumulateGrad."
        )
    if answer == (per_sample + 1) * n + shared - 1:
        return wrong(
            "close: but the weight w is one leaf, so its AccumulateGrad node is one node shared by every "
            "path, not one per sample."
        )
    if answer in (per_sample * 2 + shared, two):
        return wrong(f"that is the count for N = 2. Scale it up: the count is (nodes per sample) x {n} + (shared nodes).")
    if answer == per_sample * n + shared - 1 or answer == per_sample * n + shared + 1:
        return wrong(
            "off by one. Recount the N = 2 drawing: every grey or blue box is a node, the green output box is not."
        )
    return wrong(
        f"the looped graph holds (nodes per sample) x N + (nodes shared by all samples). Count both in the N = 2 "
        f"drawing (or with lab.graph_nodes for N = 1 and N = 2), then take N = {n}."
    )


# ---------------------------------------------------------------- exercise 2: vectorize a loop


def reference_weighted_loss_loop(w, x, y, weights):
    """The loop of exercise 2, as the notebook shows it."""
    total = 0
    for k in range(len(y)):
        error = x[k] @ w - y[k]
        total = total + weights[k] * error ** 2
    return total / weights.sum()


_SIZES = (33, 4, 1)  # the largest first: there the usual slips give values that tell them apart
_DIM = 3


def _data(n: int, seed: int):
    gen = torch.Generator().manual_seed(seed)
    w = torch.randn(_DIM, generator=gen, dtype=torch.float64)
    x = torch.randn(n, _DIM, generator=gen, dtype=torch.float64)
    y = torch.randn(n, generator=gen, dtype=torch.float64)
    weights = torch.rand(n, generator=gen, dtype=torch.float64) + 0.5
    return w, x, y, weights


def _value_and_grad(fn, w, x, y, weights):
    """Run ``fn`` on a fresh leaf copy of ``w``: (its result, dL/dw or None, graph nodes)."""
    w = w.clone().requires_grad_(True)
    out = fn(w, x.clone(), y.clone(), weights.clone())
    if not isinstance(out, torch.Tensor) or out.grad_fn is None or out.numel() != 1:
        return out, None, 0
    nodes = count_nodes(out)
    (g,) = torch.autograd.grad(out.sum(), w, allow_unused=True)
    return out, g, nodes


def _close(a, b) -> bool:
    return torch.allclose(torch.as_tensor(a, dtype=torch.float64).reshape(-1),
                          torch.as_tensor(b, dtype=torch.float64).reshape(-1), rtol=1e-6, atol=1e-9)


def _shape(t) -> str:
    return "(" + ", ".join(str(s) for s in t.shape) + ")"


def _value_hint(value, w, x, y, weights) -> str:
    """A hint for a wrong value, naming the usual slip when it is one."""
    errors2 = (x @ w - y) ** 2
    n = len(y)
    slips = [
        ((weights * errors2).mean(), "you divided by N (a mean); the loop divides by the sum of the weights."),
        ((weights * errors2).sum(), "you forgot the final division by the sum of the weights."),
        (errors2.mean(), "your loss ignores the weights: each squared error is multiplied by its weight."),
        (errors2.sum() / weights.sum(), "each squared error must be multiplied by its own weight before summing."),
        ((weights * (x @ w - y)).sum() / weights.sum(), "the error must be squared before it is weighted."),
        ((weights * errors2).sum() / n, "you divided by N; the loop divides by the sum of the weights."),
    ]
    for expected, hint in slips:
        if _close(value, expected):
            return hint
    return "write out the loop's sum for two samples and match it term by term: weight x (prediction - target)^2."


def check_vectorized_loss(answer) -> Feedback:
    """Exercise 2: a function ``f(w, x, y, weights)`` equal to the loop, without the loop."""
    if is_unanswered(answer):
        return unanswered("your function itself, e.g. answer = weighted_loss_vectorized")
    if not callable(answer):
        return malformed(
            f"answer should be the function (answer = weighted_loss_vectorized, no brackets), not a {type(answer).__name__}."
        )
    node_counts = {}
    for seed, n in enumerate(_SIZES):
        w, x, y, weights = _data(n, seed)
        shapes = f"w {_shape(w)}, x {_shape(x)}, y {_shape(y)}, weights {_shape(weights)}"
        try:
            out, g, nodes = _value_and_grad(answer, w, x, y, weights)
        except Exception as err:  # a learner's function may raise anything; report it, never raise
            return wrong(f"called with {shapes} your function raised {type(err).__name__}: {err}")
        if out is None or out is Ellipsis:
            return wrong("your function returns nothing yet: replace the ... with a return statement.")
        if not isinstance(out, torch.Tensor):
            return malformed(f"your function should return a tensor (the loss), not a {type(out).__name__}.")
        if out.numel() != 1:
            return wrong(
                f"with N = {n} samples your function returned shape {_shape(out)}; the loss of a batch is one number "
                "(shape ()): sum the weighted terms, then divide."
            )
        if out.grad_fn is None:
            return wrong(
                "the result has no grad_fn, so no gradient can reach w. Stay with tensor operations "
                "(no .item(), .numpy(), float() or torch.no_grad())."
            )
        ref, ref_g, ref_nodes = _value_and_grad(reference_weighted_loss_loop, w, x, y, weights)
        if not _close(out.detach(), ref.detach()):
            return wrong(
                f"with N = {n} samples the loop gives {ref.item():.6g}, yours {out.item():.6g}: "
                + _value_hint(out.detach(), w, x, y, weights)
            )
        if g is None or not _close(g, ref_g):
            return wrong(
                "same value, but a different gradient with respect to w: part of your computation is cut off "
                "from the graph (a .detach(), .data or a tensor rebuilt from numbers)."
            )
        node_counts[n] = (nodes, ref_nodes)
    small_n, large_n = min(_SIZES[:2]), max(_SIZES)
    small, large = node_counts[small_n], node_counts[large_n]
    if large[0] != small[0]:
        return wrong(
            f"right values and gradients, but your graph grows with N ({small[0]} nodes for N = {small_n}, "
            f"{large[0]} for N = {large_n}): something still runs once per sample. Use x @ w for all "
            "predictions at once, then operations on whole tensors."
        )
    return correct(
        f"same value and gradient as the loop for N = {', '.join(str(s) for s in sorted(_SIZES))}, with {large[0]} "
        f"graph nodes for any N (the loop needs {large[1]} for N = {large_n})."
    )
