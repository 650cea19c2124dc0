"""Notebook 02's exercise checks (grad_fn chains) cannot be fooled, refuse no right answer and never raise.

For each check: wrong answers a learner could plausibly write, each of which must not pass and must get a
hint naming its own mistake; right answers written differently from the worked solution, which must pass;
odd answers, which must get feedback instead of an exception. The references are computed here by running
PyTorch, never typed in.
"""

import re
from fractions import Fraction

import numpy as np
import pytest
import torch
from learner_code import odd_answers

from autograd_lab import graphmodel
from autograd_lab.exercises import grad_fn_chains as ch
from autograd_lab.exercises.feedback import Feedback
from autograd_lab.graphmodel import node_name

CHAIN = ["MulBackward0", "SumBackward0", "SigmoidBackward0", "MulBackward0", "AccumulateGrad"]
RAISES = {"A": False, "B": True, "C": True, "D": False}


def base(names):
    return [re.sub(r"\d+$", "", n) for n in names]


def walk(tensor):
    """The node names from ``tensor.grad_fn`` to the leaf, following the first input that needs a gradient."""
    names, node = [], tensor.grad_fn
    while node is not None:
        names.append(node_name(node))
        node = next((c for c, _ in node.next_functions if c is not None), None)
    return names


def chain_rule_gradient(w0=0.5):
    w = torch.tensor(w0, requires_grad=True, dtype=torch.float64)
    x = torch.tensor([4.0, 2.0], dtype=torch.float64)
    ((2 * x - w * x) ** 2).mean().backward()
    return w.grad.item()


def test_truths_used_here_are_what_the_checks_compute():
    assert ch.reference_gradient(0.5) == pytest.approx(chain_rule_gradient())
    assert ch.reference_chain() == CHAIN and ch.reference_second_backward() == RAISES


CHECKS = {"chain": ch.check_chain, "chain_rule": ch.check_chain_rule_gradient,
          "second_backward": ch.check_second_backward}


@pytest.mark.parametrize("odd", list(odd_answers()), ids=str)
@pytest.mark.parametrize("check", list(CHECKS), ids=str)
def test_no_check_raises_on_an_odd_answer(check, odd):
    fb = CHECKS[check](odd_answers()[odd])
    assert isinstance(fb, Feedback) and not fb.passed and fb.message


# ---------------------------------------------------------------- exercise 1: predict the chain


def swapped(chain, i, j):
    chain = list(chain)
    chain[i], chain[j] = chain[j], chain[i]
    return chain


@pytest.mark.parametrize(
    "answer, phrase",
    [
        (CHAIN[::-1], "reverse your list"),
        (swapped(CHAIN, 1, 2), "in a wrong order (items 2, 3)"),
        ([name.replace("Backward0", "") for name in CHAIN], "plus `Backward`"),
        (CHAIN[:-1], "ends at the node that stands for the leaf"),
        (CHAIN[:-1] + ["w"], "ends at the node that stands for the leaf"),
        (CHAIN + ["AccumulateGrad"], "`x` was made without"),
        (CHAIN[:3] + ["None"] + CHAIN[3:], "`x` was made without"),
        (CHAIN[1:], "one node is missing at the start"),
        ([], "your list is empty"),
        (CHAIN[:2] + ["ExpBackward0"] + CHAIN[2:], "more than were recorded"),
        (CHAIN[:2] + ["ExpBackward0"] + CHAIN[3:], "item 3 ('ExpBackward0')"),
        (["AddBackward0"] + CHAIN[1:], "item 1 ('AddBackward0')"),
    ],
)
def test_chain_wrong(answer, phrase):
    fb = ch.check_chain(answer)
    assert fb.status == "wrong" and phrase in fb.message, fb


@pytest.mark.parametrize(
    "answer",
    [
        tuple(CHAIN),
        [name.rstrip("0123456789") for name in CHAIN],
        [name.lower() for name in CHAIN],
        [f" {name} " for name in CHAIN],
        (name for name in CHAIN),
        ["MulBackward1", "SumBackward1", "SigmoidBackward1", "MulBackward1", "AccumulateGrad"],
    ],
    ids=["tuple", "no-digits", "lower-case", "spaces", "generator", "other-digits"],
)
def test_chain_right_written_differently(answer):
    assert ch.check_chain(answer).passed


@pytest.mark.parametrize(
    "answer", [set(CHAIN), " -> ".join(CHAIN), [1, 2], {"chain": CHAIN}], ids=["set", "arrow-string", "numbers", "dict"]
)
def test_chain_malformed(answer):
    assert ch.check_chain(answer).status == "malformed"


def test_reference_chain_is_what_autograd_records():
    w = torch.tensor(0.5, requires_grad=True)
    x = torch.tensor([1.0, -2.0, 3.0])
    out = torch.sigmoid(w * x).sum() * 3
    assert ch.reference_chain() == walk(out)
    assert base(walk(out)) == ["MulBackward", "SumBackward", "SigmoidBackward", "MulBackward", "AccumulateGrad"]


def test_reference_chain_reads_the_one_graph_walk(monkeypatch):
    # naming has one home (graphmodel.node_name): renaming there renames the reference, so no second walk remains
    monkeypatch.setattr(graphmodel, "node_name", lambda fn: "None" if fn is None else "<" + type(fn).__name__ + ">")
    assert ch.reference_chain() == ["<" + name + ">" for name in walk(ch.chain_expression()[0])]


def test_check_chain():
    right = ch.reference_chain()
    assert ch.check_chain(right).passed
    assert ch.check_chain(base(right)).passed  # digits may be left out
    assert ch.check_chain(tuple(right)).passed
    assert ch.check_chain(...).status == "unanswered"
    assert ch.check_chain(None).status == "unanswered"
    assert ch.check_chain("MulBackward0 -> SumBackward0").status == "malformed"
    assert ch.check_chain([1, 2]).status == "malformed"
    cases = {
        "reverse your list": right[::-1],
        "ends at the node that stands for the leaf": right[:-1],
        "`x` was made without": right + ["AccumulateGrad"],
        "one node is missing at the start": right[1:],
        "count the operations": [right[0], right[2], right[3], right[4]],
        "more than were recorded": right[:2] + ["ExpBackward0"] + right[2:],
        "item 3 ('ExpBackward0')": right[:2] + ["ExpBackward0"] + right[3:],
    }
    for hint, answer in cases.items():
        fb = ch.check_chain(answer)
        assert fb.status == "wrong" and hint in fb.message, (answer, fb)
    fb = ch.check_chain(right[:3] + ["None"] + right[3:4])
    assert fb.status == "wrong" and "`None`" in fb.message


# ---------------------------------------------------------------- exercise 2: a gradient by the chain rule


def loss_value(w0=0.5):
    x = torch.tensor([4.0, 2.0])
    return ((2 * x - w0 * x) ** 2).mean().item()


def without_x_factor(w0=0.5):
    x = torch.tensor([4.0, 2.0])
    return (-2 * (2 * x - w0 * x)).mean().item()


@pytest.mark.parametrize(
    "make, phrase",
    [
        (lambda: -chain_rule_gradient(), "wrong sign"),
        (lambda: 2 * chain_rule_gradient(), "the mean divides"),
        (lambda: chain_rule_gradient() / 2, "2 r, not r"),
        (lambda: chain_rule_gradient(1.0), "gradient at w = 1"),
        (loss_value, "value of the loss"),
        (without_x_factor, "factor from the multiplication is missing"),
        (lambda: -2 * (8 - 0.5 * 4) * 4 / 2, "one sample's share"),
        (lambda: -2 * (4 - 0.5 * 2) * 2, "one sample's share"),
        (lambda: float("nan"), "not a finite number"),
        (lambda: float("inf"), "not a finite number"),
        (lambda: chain_rule_gradient() + 7, "differentiate with respect to w"),
    ],
)
def test_chain_rule_wrong(make, phrase):
    fb = ch.check_chain_rule_gradient(make())
    assert fb.status == "wrong" and phrase in fb.message, fb


@pytest.mark.parametrize(
    "convert",
    [int, np.int32, np.float64, torch.tensor, lambda v: torch.tensor([v]), lambda v: Fraction(int(v) * 3, 3),
     lambda v: np.array([[v]])],
    ids=["int", "np.int32", "np.float64", "tensor", "tensor-1", "fraction", "np-1x1"],
)
def test_chain_rule_right_written_differently(convert):
    g = chain_rule_gradient()
    assert g == int(g)  # the conversions above rely on a whole number here
    assert ch.check_chain_rule_gradient(convert(g)).passed


def test_reference_gradient_is_the_chain_rule():
    for w in (0.5, 1.0, 2.0):
        x = torch.tensor([4.0, 2.0], dtype=torch.float64)
        r = 2 * x - w * x
        assert ch.reference_gradient(w) == pytest.approx(float(-(2 / len(x)) * (r * x).sum()))
    assert ch.reference_gradient(1.0) == pytest.approx(-20.0)  # the seed's number, as the notebook shows


def test_check_chain_rule_gradient():
    g = ch.reference_gradient(0.5)
    assert ch.check_chain_rule_gradient(g).passed
    assert ch.check_chain_rule_gradient(torch.tensor(g)).passed
    assert ch.check_chain_rule_gradient(int(g)).passed  # an exact integer here
    assert ch.check_chain_rule_gradient(...).status == "unanswered"
    for bad in ("-30", [g], torch.ones(2), True):
        assert ch.check_chain_rule_gradient(bad).status == "malformed", bad
    fb = ch.check_chain_rule_gradient(float("nan"))
    assert fb.status == "wrong" and "not a finite number" in fb.message
    cases = {
        "wrong sign": -g,
        "the mean divides": 2 * g,
        "2 r, not r": g / 2,
        "gradient at w = 1": ch.reference_gradient(1.0),
        "differentiate with respect to w": g + 7,
    }
    for hint, answer in cases.items():
        fb = ch.check_chain_rule_gradient(answer)
        assert fb.status == "wrong" and hint in fb.message, (answer, fb)


# ---------------------------------------------------------------- exercise 3: will a second backward raise?


@pytest.mark.parametrize(
    "answer, phrase",
    [
        (dict.fromkeys(RAISES, True), "You said every one raises"),
        (dict.fromkeys(RAISES, False), "You said none raises"),
        ({k: not v for k, v in RAISES.items()}, "4 of 4 not yet"),
        ({**RAISES, "C": False}, "C = (a * 2).sum(): the gradient for a is 2 * grad_output"),
        ({"A", "B", "C"}, "1 of 4 not yet"),
    ],
)
def test_second_backward_wrong(answer, phrase):
    fb = ch.check_second_backward(answer)
    assert fb.status == "wrong" and phrase in fb.message, fb


@pytest.mark.parametrize(
    "answer",
    [
        {k.lower(): v for k, v in RAISES.items()},
        {k: np.bool_(v) for k, v in RAISES.items()},
        {k: torch.tensor(v) for k, v in RAISES.items()},
        {k: int(v) for k, v in RAISES.items()},
        {k for k, v in RAISES.items() if v},
        [k for k, v in RAISES.items() if v],
        tuple(k.lower() for k, v in RAISES.items() if v),
    ],
    ids=["lower-keys", "numpy-bools", "tensor-bools", "ints", "set-of-raising", "list-of-raising", "tuple-lower"],
)
def test_second_backward_right_written_differently(answer):
    assert ch.check_second_backward(answer).passed


@pytest.mark.parametrize(
    "answer, phrase",
    [
        ([True, False, True, False], "give a dict"),
        ({**RAISES, "a": True}, "appears twice"),
        ({**RAISES, "E": True}, "unknown keys"),
        ({"B", "E"}, "unknown keys"),
        ({**RAISES, "A": 2}, "True or False"),
        ({**RAISES, "A": "no"}, "True or False"),
        ({**RAISES, "A": torch.tensor([True, False])}, "True or False"),
    ],
)
def test_second_backward_malformed(answer, phrase):
    fb = ch.check_second_backward(answer)
    assert fb.status == "malformed" and phrase in fb.message, fb


def raises_twice(make):
    a = torch.tensor([1.0, 2.0], requires_grad=True)
    b = torch.tensor([3.0, 4.0], requires_grad=True)
    out = make(a, b)
    out.backward()
    try:
        out.backward()
    except RuntimeError:
        return True
    return False


def test_reference_second_backward_matches_running_it():
    mine = {
        "A": lambda a, b: (a + b).sum(),
        "B": lambda a, b: (a * b).sum(),
        "C": lambda a, b: (a * 2).sum(),
        "D": lambda a, b: (a - b).mean(),
    }
    truth = {k: raises_twice(f) for k, f in mine.items()}
    assert ch.reference_second_backward() == truth
    assert truth == {"A": False, "B": True, "C": True, "D": False}  # the notebook's worked solution


def test_check_second_backward():
    truth = ch.reference_second_backward()
    assert ch.check_second_backward(dict(truth)).passed
    assert ch.check_second_backward(...).status == "unanswered"
    assert ch.check_second_backward([True, False, True, False]).status == "malformed"
    assert ch.check_second_backward({"A": True}).status == "malformed"
    assert ch.check_second_backward({**truth, "E": True}).status == "malformed"
    assert ch.check_second_backward({**truth, "A": "no"}).status == "malformed"
    for key in truth:
        fb = ch.check_second_backward({**truth, key: not truth[key]})
        assert fb.status == "wrong" and "1 of 4" in fb.message
        assert f"{key} = {ch.SECOND_BACKWARD[key]}:" in fb.message
        assert "raises" not in fb.message.split("\n", 1)[1]  # a question to ask, not the verdict
    fb = ch.check_second_backward({k: not v for k, v in truth.items()})
    assert fb.status == "wrong" and "4 of 4" in fb.message
