"""Answer checks for notebook 02, grad_fn chains.

Each check builds the exercise's expression with PyTorch and compares the
learner's answer with what autograd really does, so the expected answers are
never typed in by hand.
"""

from __future__ import annotations

import math
import re
from numbers import Real

import torch

from . import Feedback, correct, is_unanswered, malformed, unanswered, wrong

__all__ = [
    "chain_expression",
    "reference_chain",
    "check_chain",
    "reference_gradient",
    "check_chain_rule_gradient",
    "SECOND_BACKWARD",
    "reference_second_backward",
    "check_second_backward",
]


# --- Exercise 1: predict the chain ------------------------------------------------------------

def chain_expression():
    """The expression of exercise 1 (the notebook shows the same three lines): returns (out, w)."""
    w = torch.tensor(0.5, requires_grad=True)
    x = torch.tensor([1.0, -2.0, 3.0])
    out = torch.sigmoid(w * x).sum() * 3
    return out, w


def reference_chain() -> list[str]:
    """The node names met walking from ``out.grad_fn`` to the leaf, following the input that needs a gradient."""
    out, _ = chain_expression()
    names, node = [], out.grad_fn
    while node is not None:
        names.append(type(node).__name__)
        node = next((child for child, _ in node.next_functions if child is not None), None)
    return names


def _base(name: str) -> str:
    """``MulBackward0`` -> ``MulBackward``: the number at the end only tells overloads of one operation apart."""
    return re.sub(r"\d+$", "", name.strip())


def check_chain(answer) -> Feedback:
    """Exercise 1: the chain of ``out = torch.sigmoid(w * x).sum() * 3``, from ``out`` back to ``w``."""
    form = 'a list of node names from out back to the leaf, e.g. ["SumBackward0", ..., "AccumulateGrad"]'
    if is_unanswered(answer):
        return unanswered(form)
    if isinstance(answer, str) or not isinstance(answer, (list, tuple)) or not all(isinstance(a, str) for a in answer):
        return malformed(f"give {form}: a list of strings, one per node.")
    expected = reference_chain()
    given = [_base(a) for a in answer]
    want = [_base(e) for e in expected]
    if given == want:
        return correct(
            "that is the chain: " + " -> ".join(expected) + ". Backward meets the last operation first, "
            "so `* 3` gives the first node, and `x` (no grad) adds no branch."
        )
    if given == want[::-1]:
        return wrong(
            "you listed the nodes in the order the forward pass ran them. The chain starts at `out.grad_fn` "
            "(the last operation) and walks back to the leaf: reverse your list."
        )
    if given.count("AccumulateGrad") > 1 or "None" in given:
        return wrong(
            "only `w` asked for a gradient. `x` was made without `requires_grad=True`, so it gets no node "
            "(in `next_functions` it shows up as `None`, which is not part of the chain)."
        )
    if "AccumulateGrad" not in given:
        return wrong(
            "the walk does not stop at the last operation: it ends at the node that stands for the leaf `w` "
            "and puts its gradient into `w.grad`. Which node is that?"
        )
    if given == want[1:]:
        return wrong(
            "one node is missing at the start: `* 3` is an operation too, and it ran last, "
            "so it is the first node backward meets."
        )
    if len(given) < len(want):
        return wrong(
            f"your chain has {len(given)} nodes; count the operations on the way from `w` to `out`. "
            "Every operation (including `torch.sigmoid` and `.sum()`) adds one node, plus one for the leaf."
        )
    if len(given) > len(want):
        return wrong(
            f"your chain has {len(given)} nodes, more than were recorded: each operation adds exactly one node, "
            "and operations on `x` alone (which needs no grad) add none."
        )
    k = next(i for i, (g, e) in enumerate(zip(given, want)) if g != e)
    return wrong(
        f"item {k + 1} ({answer[k]!r}) is not the node that comes there. A node is named after the operation "
        "that made it, plus `Backward`: `torch.sigmoid` gives a `SigmoidBackward` node, `.sum()` a `SumBackward`."
    )


# --- Exercise 2: one gradient by the chain rule -----------------------------------------------

def reference_gradient(w: float = 0.5) -> float:
    """d loss / d w for the seed's example, loss = mean((2x - w x)^2), x = [4, 2], at this w (by autograd)."""
    wt = torch.tensor(float(w), requires_grad=True, dtype=torch.float64)
    x = torch.tensor([4.0, 2.0], dtype=torch.float64)
    loss = ((2 * x - wt * x) ** 2).mean()
    loss.backward()
    return float(wt.grad)


def _as_number(answer):
    if isinstance(answer, torch.Tensor):
        if answer.numel() != 1:
            return None
        return float(answer.detach().reshape(()))
    if isinstance(answer, Real) and not isinstance(answer, bool):
        return float(answer)
    return None


def check_chain_rule_gradient(answer) -> Feedback:
    """Exercise 2: d loss / d w at w = 0.5 for the seed's example, by the chain rule."""
    if is_unanswered(answer):
        return unanswered("a number: d loss / d w at w = 0.5")
    value = _as_number(answer)
    if value is None or math.isnan(value):
        return malformed("give one number (a Python float, or a one-element tensor), e.g. answer = -12.5.")
    expected = reference_gradient(0.5)

    def near(target):
        return math.isclose(value, target, rel_tol=1e-4, abs_tol=1e-4)

    if near(expected):
        return correct(
            "multiply the local derivatives along the chain: mean (1/2 each), square (2 r), "
            "subtraction (-1), multiplication by w (x); then add over the two samples."
        )
    if near(-expected):
        return wrong(
            "right size, wrong sign. The residual is r = y - w x, so d r / d w = -x: "
            "the subtraction contributes a factor -1."
        )
    if near(2 * expected):
        return wrong("twice the answer: the mean divides by the number of samples (2), so each sample's share is 1/2.")
    if near(expected / 2):
        return wrong("half the answer: the square contributes d(r^2)/dr = 2 r, not r.")
    if near(reference_gradient(1.0)):
        return wrong("that is the gradient at w = 1 (the seed's weight). Redo it with w = 0.5: the residual changes.")
    return wrong(
        "not yet. Write loss = (1/2) * sum_i (y_i - w x_i)^2 and differentiate with respect to w: "
        "d loss / d w = (1/2) * sum_i 2 (y_i - w x_i) * (-x_i). Put in x = [4, 2], y = [8, 4], w = 0.5."
    )


# --- Exercise 3: does a second backward raise? ------------------------------------------------

SECOND_BACKWARD = {
    "A": "(a + b).sum()",
    "B": "(a * b).sum()",
    "C": "(a * 2).sum()",
    "D": "(a - b).mean()",
}

_WHY = {
    "A": "AddBackward0 passes the gradient on unchanged and SumBackward0 only keeps a shape: neither saves a tensor.",
    "B": "MulBackward0 saves both factors (d(ab)/da = b), and backward frees them.",
    "C": "the gradient of a * 2 with respect to a is 2: MulBackward0 keeps that 2 as a saved tensor, freed by backward.",
    "D": "SubBackward0 needs no tensor (its derivatives are 1 and -1) and MeanBackward0 keeps only a shape and a count.",
}

# Hints for a wrong item: the question to ask, not the verdict.
_NUDGE = {
    "A": "to pass a gradient back, does an addition need the values of a or b? Does .sum() need more than a shape?",
    "B": "to send a gradient to a, MulBackward0 must multiply by b's value. Where does it get b from at backward time?",
    "C": "the gradient for a is 2 * grad_output. Where does MulBackward0 find that 2 when backward runs?",
    "D": "the derivatives of a - b are 1 and -1 whatever a and b are, and a mean only divides by a count.",
}


def _second_backward_raises(source: str) -> bool:
    a = torch.tensor([1.0, 2.0], requires_grad=True)
    b = torch.tensor([3.0, 4.0], requires_grad=True)
    out = eval(source, {"torch": torch}, {"a": a, "b": b})  # our own fixed strings, above
    out.backward()
    try:
        out.backward()
    except RuntimeError:
        return True
    return False


def reference_second_backward() -> dict[str, bool]:
    """For each expression of exercise 3: does a second ``.backward()`` raise? (run, not typed in)"""
    return {key: _second_backward_raises(src) for key, src in SECOND_BACKWARD.items()}


def check_second_backward(answer) -> Feedback:
    """Exercise 3: {"A": True/False, ...}, True where a second ``.backward()`` raises."""
    keys = list(SECOND_BACKWARD)
    form = "a dict {" + ", ".join(f'"{k}": True or False' for k in keys) + "}, True where the second backward raises"
    if is_unanswered(answer):
        return unanswered(form)
    if not isinstance(answer, dict):
        return malformed(f"give {form}.")
    missing = [k for k in keys if k not in answer]
    extra = [k for k in answer if k not in keys]
    if missing or extra:
        what = (f"missing {', '.join(map(str, missing))}" if missing else "") + (
            ("; " if missing and extra else "") + (f"unknown keys {', '.join(map(repr, extra))}" if extra else "")
        )
        return malformed(f"give exactly the keys {', '.join(keys)} ({what}).")
    if not all(isinstance(answer[k], bool) for k in keys):
        return malformed(f"each value must be True or False; give {form}.")
    truth = reference_second_backward()
    off = [k for k in keys if answer[k] != truth[k]]
    if not off:
        return correct(
            "a second backward fails exactly where a node needs a tensor it saved: "
            + " ".join(f"{k}: {_WHY[k]}" for k in keys)
        )
    lines = [f"{k} = {SECOND_BACKWARD[k]}: {_NUDGE[k]}" for k in off]
    return wrong(
        f"{len(off)} of {len(keys)} not yet. Ask of each node: does its backward need a tensor saved in the "
        "forward pass? (List them with [a for a in dir(node) if a.startswith('_saved_')].)\n" + "\n".join(lines)
    )
