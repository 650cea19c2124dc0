"""Answer checks for notebook 02, grad_fn chains.

Each check builds the exercise's expression with PyTorch and compares the
learner's answer with what autograd really does, so the expected answers are
never typed in by hand.

No check raises on a learner's answer: each is wrapped in ``never_raises``, with the
policy that module ``leaf_tensors`` describes (every ``Exception`` becomes feedback).
"""

from __future__ import annotations

import math
import re
from collections import Counter

import torch

from ..graphmodel import walk
from .answers import as_names, as_number, is_unanswered, read_number
from .feedback import Feedback, correct, malformed, never_raises, unanswered, wrong

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
    """The node names met walking from ``out.grad_fn`` to the leaf, following the input that needs a gradient.

    Read off the course's one graph walk (:func:`autograd_lab.graphmodel.walk`), which also names the nodes.
    """
    out, _ = chain_expression()
    graph = walk(out, what="reference_chain")
    names, i = [], graph.output_nodes[0]
    while i is not None:
        node = graph.nodes[i]
        names.append(node.name)
        i = next((j for j in node.inputs if j is not None), None)
    return names


def _base(name: str) -> str:
    """``MulBackward0`` -> ``mulbackward``: the number at the end only tells overloads of one operation apart,
    and the case of a letter does not tell nodes apart."""
    return re.sub(r"\d+$", "", name.strip()).lower()


def _order_hint(given: list, want: list) -> str | None:
    """A hint when the answer has the right nodes in a wrong order, or the names lack 'Backward'."""
    if given == want[::-1]:
        return (
            "you listed the nodes in the order the forward pass ran them. The chain starts at `out.grad_fn` "
            "(the last operation) and walks back to the leaf: reverse your list."
        )
    if Counter(given) == Counter(want):
        moved = [i + 1 for i, (g, e) in enumerate(zip(given, want)) if g != e]
        return (
            f"the right nodes, in a wrong order (items {', '.join(map(str, moved))}). Backward meets the operations "
            "in the reverse of the order they ran: the last one applied to w's value comes first."
        )
    short = [w.replace("backward", "") for w in want]
    if [g.replace("backward", "") for g in given] == short and given != want:
        return "the right operations, but a node's name is the operation plus `Backward` (e.g. `MulBackward0`)."
    return None


def _count_hint(given: list, want: list, items: list) -> str:
    """A hint for a chain of the wrong length or with a wrong node."""
    if given == want[1:]:
        return (
            "one node is missing at the start: `* 3` is an operation too, and it ran last, "
            "so it is the first node backward meets."
        )
    if len(given) < len(want):
        return (
            f"your chain has {len(given)} nodes; count the operations on the way from `w` to `out`. "
            "Every operation (including `torch.sigmoid` and `.sum()`) adds one node, plus one for the leaf."
        )
    if len(given) > len(want):
        return (
            f"your chain has {len(given)} nodes, more than were recorded: each operation adds exactly one node, "
            "and operations on `x` alone (which needs no grad) add none."
        )
    k = next(i for i, (g, e) in enumerate(zip(given, want)) if g != e)
    return (
        f"item {k + 1} ({items[k]!r}) is not the node that comes there. A node is named after the operation "
        "that made it, plus `Backward`: `torch.sigmoid` gives a `SigmoidBackward` node, `.sum()` a `SumBackward`."
    )


@never_raises
def check_chain(answer) -> Feedback:
    """Exercise 1: the chain of ``out = torch.sigmoid(w * x).sum() * 3``, from ``out`` back to ``w``.

    Any ordered collection of strings counts (list, tuple, generator); digits and letter case do not matter.
    """
    form = 'a list of node names from out back to the leaf, e.g. ["SumBackward0", ..., "AccumulateGrad"]'
    if is_unanswered(answer):
        return unanswered(form)
    items = as_names(answer) if not isinstance(answer, (set, frozenset)) else None
    if items is None or not all(isinstance(a, str) for a in items):
        return malformed(f"give {form}: a list of strings, one per node.")
    expected = reference_chain()
    given = [_base(a) for a in items]
    want = [_base(e) for e in expected]
    if given == want:
        return correct(
            "that is the chain: " + " -> ".join(expected) + ". Backward meets the last operation first, "
            "so `* 3` gives the first node, and `x` (no grad) adds no branch."
        )
    if not given:
        return wrong("your list is empty: write one name per node, from out.grad_fn back to the leaf's node.")
    hint = _order_hint(given, want)
    if hint is not None:
        return wrong(hint)
    leaf = _base("AccumulateGrad")
    if given.count(leaf) > 1 or "none" in given:
        return wrong(
            "only `w` asked for a gradient. `x` was made without `requires_grad=True`, so it gets no node "
            "(in `next_functions` it shows up as `None`, which is not part of the chain)."
        )
    if leaf not in given:
        return wrong(
            "the walk does not stop at the last operation: it ends at the node that stands for the leaf `w` "
            "and puts its gradient into `w.grad`. Which node is that?"
        )
    return wrong(_count_hint(given, want, items))


# --- Exercise 2: one gradient by the chain rule -----------------------------------------------

def reference_gradient(w: float = 0.5) -> float:
    """d loss / d w for the seed's example, loss = mean((2x - w x)^2), x = [4, 2], at this w (by autograd)."""
    wt = torch.tensor(float(w), requires_grad=True, dtype=torch.float64)
    x = torch.tensor([4.0, 2.0], dtype=torch.float64)
    loss = ((2 * x - wt * x) ** 2).mean()
    loss.backward()
    return float(wt.grad)


def _gradient_slips(w: float = 0.5) -> list:
    """(value, hint) for the usual slips at this w, each value computed with autograd from the seed's example."""
    x = torch.tensor([4.0, 2.0], dtype=torch.float64)
    y = 2 * x
    wt = torch.tensor(w, dtype=torch.float64, requires_grad=True)
    prediction = wt * x
    loss = ((y - prediction) ** 2).mean()
    d_w, d_prediction = torch.autograd.grad(loss, [wt, prediction])
    per_sample = []  # each sample's own loss, (y_i - w x_i)^2, and its gradient
    for i in range(len(x)):
        (g,) = torch.autograd.grad((y[i] - wt * x[i]) ** 2, wt)
        per_sample += [float(g), float(g) / len(x)]
    slips = [
        (-float(d_w), "right size, wrong sign. The residual is r = y - w x, so d r / d w = -x: "
                      "the subtraction contributes a factor -1."),
        (2 * float(d_w), "twice the answer: the mean divides by the number of samples (2), so each sample's share is "
                         "1/2."),
        (float(d_w) / 2, "half the answer: the square contributes d(r^2)/dr = 2 r, not r."),
        (reference_gradient(1.0), "that is the gradient at w = 1 (the seed's weight). Redo it with w = 0.5: "
                                  "the residual changes."),
        (float(loss.detach()), "that is the value of the loss at w = 0.5, not its derivative with respect to w."),
        (float(d_prediction.sum()), "the factor from the multiplication is missing: d(w x)/dw = x, so each "
                                    "sample's term is multiplied by its x."),
    ]
    slips += [(g, "that is one sample's share only: the mean runs over both samples, so add their terms.")
              for g in per_sample]
    return slips


@never_raises
def check_chain_rule_gradient(answer) -> Feedback:
    """Exercise 2: d loss / d w at w = 0.5 for the seed's example, by the chain rule."""
    value, problem = read_number(answer, "a number: d loss / d w at w = 0.5", "-12.5")
    if problem is not None:
        return problem
    if not math.isfinite(value):
        return wrong(f"{value} is not a finite number: d loss / d w is an ordinary number here. Check for a "
                     "division by zero or an overflow in your working.")
    expected = reference_gradient(0.5)

    def near(target):
        return math.isclose(value, target, rel_tol=1e-4, abs_tol=1e-4)

    if near(expected):
        return correct(
            "multiply the local derivatives along the chain: mean (1/2 each), square (2 r), "
            "subtraction (-1), multiplication by w (x); then add over the two samples."
        )
    hint = next((hint for target, hint in _gradient_slips(0.5) if near(target)), None)
    if hint is not None:
        return wrong(hint)
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
    "C": "the gradient of a * 2 with respect to a is 2: MulBackward0 keeps that 2 as a saved tensor, "
    "freed by backward.",
    "D": "SubBackward0 needs no tensor (its derivatives are 1 and -1) and MeanBackward0 keeps only a shape "
    "and a count.",
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


def _as_verdict(value) -> bool | None:
    """True/False from a bool, a numpy bool, a one-element bool tensor, or the integers 1 and 0; else None."""
    if isinstance(value, bool):
        return value
    if isinstance(value, torch.Tensor):
        if value.dtype == torch.bool and value.numel() == 1 and value.layout == torch.strided and not value.is_meta:
            return bool(value.reshape(()))
        return None
    if getattr(getattr(value, "dtype", None), "kind", "") == "b" and getattr(value, "size", 0) == 1:
        return bool(value.item())  # numpy's True_ / False_
    number = as_number(value)
    return {0.0: False, 1.0: True}.get(number) if number is not None else None


def _verdicts(answer, keys: list, form: str) -> tuple[dict | None, Feedback | None]:
    """The learner's {key: raises?} with keys in upper case, or the feedback on the answer's form.

    A dict is read as given; a set, list or tuple of keys (e.g. {"B", "C"}) as the expressions that raise.
    """
    if isinstance(answer, dict):
        pairs = list(answer.items())
    else:
        items = as_names(answer, limit=len(keys) * 4)
        if items is None or not all(isinstance(k, str) for k in items):
            return None, malformed(f"give {form}.")
        raising = {k.strip().upper() for k in items}
        pairs = [(k, k in raising) for k in keys] + [(k, True) for k in sorted(raising - set(keys))]
    named = {}
    for key, value in pairs:
        name = key.strip().upper() if isinstance(key, str) else key
        if name in named:
            return None, malformed(f"the key {name!r} appears twice; give each of {', '.join(keys)} once.")
        named[name] = value
    missing = [k for k in keys if k not in named]
    extra = [k for k in named if k not in keys]
    if missing or extra:
        what = (f"missing {', '.join(map(str, missing))}" if missing else "") + (
            ("; " if missing and extra else "") + (f"unknown keys {', '.join(map(repr, extra[:5]))}" if extra else "")
        )
        return None, malformed(f"give exactly the keys {', '.join(keys)} ({what}).")
    verdicts = {k: _as_verdict(named[k]) for k in keys}
    if any(v is None for v in verdicts.values()):
        return None, malformed(f"each value must be True or False; give {form}.")
    return verdicts, None


@never_raises
def check_second_backward(answer) -> Feedback:
    """Exercise 3: {"A": True/False, ...}, True where a second ``.backward()`` raises.

    Also accepted: numpy or tensor booleans, 1 and 0, lower-case keys, and the set of keys that raise.
    """
    keys = list(SECOND_BACKWARD)
    form = "a dict {" + ", ".join(f'"{k}": True or False' for k in keys) + "}, True where the second backward raises"
    if is_unanswered(answer):
        return unanswered(form)
    verdicts, problem = _verdicts(answer, keys, form)
    if problem is not None:
        return problem
    truth = reference_second_backward()
    off = [k for k in keys if verdicts[k] != truth[k]]
    if not off:
        return correct(
            "a second backward fails exactly where a node needs a tensor it saved: "
            + " ".join(f"{k}: {_WHY[k]}" for k in keys)
        )
    belief = ""
    if all(verdicts.values()):
        belief = "You said every one raises: backward frees what nodes saved, but a node that saved nothing loses " \
                 "nothing. "
    elif not any(verdicts.values()):
        belief = "You said none raises: but some nodes must keep a tensor for backward, and backward frees it. "
    lines = [f"{k} = {SECOND_BACKWARD[k]}: {_NUDGE[k]}" for k in off]
    return wrong(
        f"{len(off)} of {len(keys)} not yet. {belief}Ask of each node: does its backward need a tensor saved in the "
        "forward pass? (List them with [a for a in dir(node) if a.startswith('_saved_')].)\n" + "\n".join(lines)
    )
