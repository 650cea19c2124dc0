"""The exercise checks of notebooks 01-03 cannot be fooled, refuse no right answer and never raise.

For each check, three tables: (a) wrong answers a learner could plausibly write, each of
which must not pass and must get a hint naming its own mistake; (b) right answers written
differently from the worked solution, which must pass; (c) odd answers and learner code
that misbehaves, which must get feedback instead of escaping as an exception.

Every expected value is computed here by running PyTorch, never typed in; the phrases
asserted are the part of each hint that names the mistake.
"""

import itertools
import json
import random
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest
import torch

import autograd_lab as lab
from autograd_lab.exercises import Feedback
from autograd_lab.exercises import grad_fn_chains as ch
from autograd_lab.exercises import leaf_tensors as lt
from autograd_lab.exercises import vectorized_vs_looped as vl

NOTEBOOKS = Path(__file__).resolve().parents[2] / "notebooks"


# ---------------------------------------------------------------- truths computed here, independently of the checks


def grad_after(calls, w0=3.0):
    w = torch.tensor(w0, requires_grad=True)
    for _ in range(calls):
        (w**2 + 4 * w).backward()
    return w.grad.item()


def chain_rule_gradient(w0=0.5):
    w = torch.tensor(w0, requires_grad=True, dtype=torch.float64)
    x = torch.tensor([4.0, 2.0], dtype=torch.float64)
    ((2 * x - w * x) ** 2).mean().backward()
    return w.grad.item()


def looped_nodes(n):
    model = torch.nn.Linear(1, 1, bias=False)
    x = torch.arange(1.0, n + 1).unsqueeze(1)
    return lab.count_nodes(torch.stack([(2 * x[k] - model(x[k])) ** 2 for k in range(n)]).mean())


CHAIN = ["MulBackward0", "SumBackward0", "SigmoidBackward0", "MulBackward0", "AccumulateGrad"]
RAISES = {"A": False, "B": True, "C": True, "D": False}


def test_truths_used_here_are_what_the_checks_compute():
    assert lt.run_snippet(lt.GRAD_SNIPPET)["w"].grad.item() == grad_after(2)
    assert ch.reference_gradient(0.5) == pytest.approx(chain_rule_gradient())
    assert ch.reference_chain() == CHAIN and ch.reference_second_backward() == RAISES
    assert vl.check_looped_nodes(looped_nodes(50), n=50).passed


class Hostile:
    """A learner's object whose every operation raises."""

    def _boom(self, *args):
        raise ValueError("hostile object")

    __eq__ = __hash__ = __bool__ = __iter__ = __len__ = __float__ = __index__ = __repr__ = _boom

    def __getattr__(self, name):
        raise ValueError(name)


class LearnerError(Exception):
    pass


def odd_answers():
    """Answers that are neither right nor of the asked form; no check may raise on them."""
    return {
        "hostile": Hostile(),
        "list-of-hostile": [Hostile()],
        "sparse": torch.tensor([20.0]).to_sparse(),
        "meta": torch.empty((), device="meta"),
        "complex": torch.tensor(20 + 1j),
        "huge": torch.zeros(10**6),
        "endless-generator": itertools.count(),
        "generator-function": (lambda: (yield 1)),
        "bytes": b"w",
        "type": int,
        "nested": [[["w"]]],
        "nan-tensor": torch.tensor(float("nan")),
    }


CHECKS = {
    "leaves": lt.check_leaves,
    "grad": lt.check_grad_after_two_backwards,
    "make_weight": lt.check_make_weight,
    "chain": ch.check_chain,
    "chain_rule": ch.check_chain_rule_gradient,
    "second_backward": ch.check_second_backward,
    "looped_nodes": vl.check_looped_nodes,
    "vectorized": vl.check_vectorized_loss,
}


@pytest.mark.parametrize("odd", list(odd_answers()), ids=str)
@pytest.mark.parametrize("check", list(CHECKS), ids=str)
def test_no_check_raises_on_an_odd_answer(check, odd):
    fb = CHECKS[check](odd_answers()[odd])
    assert isinstance(fb, Feedback) and not fb.passed and fb.message


# ---------------------------------------------------------------- 01 exercise 1: which tensors are leaves?


@pytest.mark.parametrize(
    "answer, phrase",
    [
        ({"w", "h", "loss"}, "You chose the tensors that require grad"),
        ({"h", "loss"}, "You chose exactly the non-leaves"),
        ({"w"}, "You kept only the leaves that require grad"),
        ({"w", "x"}, "You kept only the tensors created directly"),
        (set(), "You chose none"),
        ({"w", "x", "v"}, "s is a leaf. `s = x * 2`: made by an operation, but none of its inputs requires grad"),
        ({"w", "x", "s"}, "v is a leaf. `v = w.detach()`"),
        ({"w", "x", "v", "s", "h", "loss"}, "h is not a leaf"),
    ],
)
def test_leaves_wrong(answer, phrase):
    fb = lt.check_leaves(answer)
    assert fb.status == "wrong" and phrase in fb.message, fb


@pytest.mark.parametrize(
    "answer",
    [
        ["w", "x", "v", "s"],
        ("s", "v", "x", "w"),
        frozenset("wxvs"),
        {"w": 0, "x": 0, "v": 0, "s": 0}.keys(),
        (name for name in "wxvs"),
        iter(["w", "x", "v", "s", "w"]),
        [" w", "x ", "v", "s"],
        np.array(["w", "x", "v", "s"]).tolist(),
    ],
    ids=["list", "tuple", "frozenset", "dict-keys", "generator", "iterator-with-repeat", "spaces", "numpy-strings"],
)
def test_leaves_right_written_differently(answer):
    assert lt.check_leaves(answer).passed


@pytest.mark.parametrize(
    "answer, phrase",
    [
        ({"w": True, "x": True}, "give only the names of the leaves"),
        ("w, x, v, s", "got str"),
        (itertools.repeat("w"), "expected a set of names"),
        ({"w", "W"}, "no tensor named W"),
        ([torch.ones(1)], "write the names in quotes"),
    ],
)
def test_leaves_malformed(answer, phrase):
    fb = lt.check_leaves(answer)
    assert fb.status == "malformed" and phrase in fb.message, fb


# ---------------------------------------------------------------- 01 exercise 2: .grad after two backward calls


def w_value():
    return 3.0


@pytest.mark.parametrize(
    "make, phrase",
    [
        (lambda: grad_after(1), "what one backward call gives"),
        (lambda: grad_after(3), "counts 3 backward calls"),
        (lambda: -grad_after(2), "wrong sign"),
        (lambda: -grad_after(1), "wrong sign, and only one call"),
        (lambda: w_value() ** 2 + 4 * w_value(), "that is the loss value"),
        (lambda: 2 * (w_value() ** 2 + 4 * w_value()), "sums the loss values"),
        (lambda: 0, "nothing resets .grad"),
        (lambda: 2 * 2 * w_value(), "differentiated only `w ** 2`"),
        (lambda: 2 * 4, "differentiated only `4 * w`"),
        (lambda: float("nan"), "not a finite number"),
        (lambda: float("-inf"), "not a finite number"),
        (lambda: grad_after(2) + 3, "count how many backward calls"),
    ],
)
def test_grad_wrong(make, phrase):
    fb = lt.check_grad_after_two_backwards(make())
    assert fb.status == "wrong" and phrase in fb.message, fb


@pytest.mark.parametrize(
    "convert",
    [
        int,
        np.int64,
        np.float32,
        lambda v: np.array(v),
        lambda v: np.array([v]),
        torch.tensor,
        lambda v: torch.tensor([[v]]),
        lambda v: torch.tensor(v, dtype=torch.float16),
        lambda v: torch.tensor(v, requires_grad=True),
        lambda v: Fraction(int(2 * v), 2),
        lambda v: v + 1e-9,
    ],
    ids=["int", "np.int64", "np.float32", "np-0d", "np-1", "tensor", "tensor-1x1", "half", "requires-grad", "fraction",
         "rounding"],
)
def test_grad_right_written_differently(convert):
    assert lt.check_grad_after_two_backwards(convert(grad_after(2))).passed


# ---------------------------------------------------------------- 01 exercise 3: repair make_weight

SHARED = (torch.rand(3) * 0.01).requires_grad_()


def shared_reset():
    SHARED.grad = None
    return SHARED


def seeded_inside():
    torch.manual_seed(0)
    return (torch.rand(3) * 0.01).requires_grad_()


def retained_non_leaf():
    w = torch.rand(3, requires_grad=True) * 0.01
    w.retain_grad()
    return w


def raise_(err):
    raise err


@pytest.mark.parametrize(
    "fn, phrase",
    [
        (lambda: torch.rand(3, requires_grad=True) * 0.01, "still not a leaf"),
        (retained_non_leaf, "retain_grad() makes backward fill"),
        (lambda: torch.rand(3) * 0.01, "requires no grad"),
        (lambda: (torch.rand(3, requires_grad=True) * 0.01).detach(), "requires no grad"),
        (lambda: torch.zeros(3, requires_grad=True), "all 0"),
        (lambda: torch.full((3,), 0.005, requires_grad=True), "all 0.005"),
        (lambda: torch.full((3,), float("nan"), requires_grad=True), "not all finite"),
        (lambda: torch.tensor([0.001, float("inf"), 0.002], requires_grad=True), "not all finite"),
        (lambda: torch.tensor([0.001, 0.002, 0.003], requires_grad=True), "two calls returned the same weights"),
        (seeded_inside, "a seed set inside the function"),
        (lambda: SHARED, "same tensor object"),
        (shared_reset, "same tensor object"),
        (lambda: SHARED.detach().requires_grad_(), "shares its memory"),
        (lambda: torch.rand(3, requires_grad=True), "should stay small"),
        (lambda: (torch.randn(3) * 0.01).requires_grad_(), "should stay small"),
        (lambda: (torch.rand(3) * 0.001).requires_grad_(), "not spread uniformly"),
        (lambda: (torch.rand(3) * 0.005).requires_grad_(), "not spread uniformly"),
        (lambda: (torch.randn(3).abs() * 0.003).clamp(max=0.0099).requires_grad_(), "not spread uniformly"),
        (lambda: (torch.rand(4) * 0.01).requires_grad_(), "shape (3,)"),
        (lambda: (torch.rand(1, 3) * 0.01).requires_grad_(), "shape (3,)"),
        (lambda: torch.randint(0, 2, (3,)), "real floating-point"),
        (lambda: (torch.rand(3, dtype=torch.cfloat) * 0.01).requires_grad_(), "real floating-point"),
        (lambda: torch.rand(3, device="meta").requires_grad_(), "meta tensor"),
        (lambda: (torch.rand(3) * 0.01).to_sparse().requires_grad_(), "dense tensor"),
        (lambda n=None: raise_(ZeroDivisionError("division by zero")), "raised ZeroDivisionError"),
        (lambda n: torch.rand(n), "needs arguments"),
    ],
)
def test_make_weight_wrong(fn, phrase):
    fb = lt.check_make_weight(fn)
    assert fb.status == "wrong" and phrase in fb.message, fb


def make_weight_no_grad_then_flag():
    with torch.no_grad():
        w = torch.rand(3, requires_grad=True) * 0.01
    return w.requires_grad_()


@pytest.mark.parametrize(
    "fn",
    [
        lambda: torch.nn.Parameter(torch.rand(3) * 0.01),
        lambda: torch.nn.Parameter(torch.rand(3, requires_grad=True) * 0.01),
        lambda: (torch.rand(3, dtype=torch.float64) * 0.01).requires_grad_(),
        lambda: (torch.rand(3) * 0.01).half().requires_grad_(),
        lambda: (torch.rand(3) * 0.01).bfloat16().requires_grad_(),
        lambda: torch.from_numpy(np.random.default_rng().random(3) * 0.01).requires_grad_(),
        lambda: torch.tensor([random.random() * 0.01 for _ in range(3)], requires_grad=True),
        lambda: (torch.rand(3, requires_grad=True) * 0.01).detach().requires_grad_(),
        lambda: torch.empty(3).uniform_(0, 0.01).requires_grad_(),
        lambda: torch.rand(3).mul_(0.01).requires_grad_(True),
        lambda: torch.rand(3, requires_grad=True).mul(0.01).detach().requires_grad_(),
        make_weight_no_grad_then_flag,
    ],
    ids=["Parameter", "Parameter-of-non-leaf", "float64", "float16", "bfloat16", "numpy", "python-random", "detach",
         "uniform_", "mul_", "detach-after", "no_grad"],
)
def test_make_weight_right_written_differently(fn):
    fb = lt.check_make_weight(fn)
    assert fb.passed, fb


def test_make_weight_is_deterministic_and_leaves_the_learners_random_state_alone():
    torch.manual_seed(123)
    expected = torch.rand(5)
    torch.manual_seed(123)
    first = lt.check_make_weight(lambda: (torch.rand(3) * 0.0093).requires_grad_())
    assert torch.equal(torch.rand(5), expected)
    assert repr(first) == repr(lt.check_make_weight(lambda: (torch.rand(3) * 0.0093).requires_grad_()))


def test_make_weight_prints_of_the_learner_show_for_the_checked_calls_only(capsys):
    def chatty():
        w = (torch.rand(3) * 0.01).requires_grad_()
        print("made", w.shape)
        return w

    assert lt.check_make_weight(chatty, trials=5).passed
    assert capsys.readouterr().out.count("made") == 5


# ---------------------------------------------------------------- 02 exercise 1: predict the chain


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


# ---------------------------------------------------------------- 02 exercise 2: a gradient by the chain rule


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


# ---------------------------------------------------------------- 02 exercise 3: will a second backward raise?


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


# ---------------------------------------------------------------- 03 exercise 1: the size of a looped graph


def per_sample_and_shared():
    one, two = looped_nodes(1), looped_nodes(2)
    return two - one, 2 * one - two


@pytest.mark.parametrize(
    "make, phrase",
    [
        (lambda p, s: p * 49 + s, "count for N = 49"),
        (lambda p, s: p * 51 + s, "count for N = 51"),
        (lambda p, s: p * 50, "not the nodes all samples share"),
        (lambda p, s: p * 50 + s + 1, "off by one"),
        (lambda p, s: (p + 1) * 50 + s - 1, "shared by every path"),
        (lambda p, s: 2 * p + s, "the count for N = 2"),
        (lambda p, s: 0, "cannot be"),
        (lambda p, s: -(p * 50 + s), "cannot be"),
        (lambda p, s: float("inf"), "not a finite number"),
        (lambda p, s: 10**12, "(nodes per sample) x N + (nodes shared by all samples)"),
    ],
)
def test_looped_nodes_wrong(make, phrase):
    fb = vl.check_looped_nodes(make(*per_sample_and_shared()), n=50)
    assert fb.status == "wrong" and phrase in fb.message, fb


@pytest.mark.parametrize(
    "convert",
    [np.int64, np.float32, float, torch.tensor, lambda v: torch.tensor([v], dtype=torch.float64),
     lambda v: Fraction(2 * v, 2), lambda v: np.array(v)],
    ids=["np.int64", "np.float32", "float", "tensor", "tensor-1-float64", "fraction", "np-0d"],
)
def test_looped_nodes_right_written_differently(convert):
    assert vl.check_looped_nodes(convert(looped_nodes(50)), n=50).passed


@pytest.mark.parametrize("n", [10**9, 0, -3, 2.5, "50", None])
def test_looped_nodes_refuses_an_impossible_n_without_building_it(n):
    fb = vl.check_looped_nodes(253, n=n)
    assert fb.status == "malformed" and "batch size of the exercise" in fb.message


def test_looped_nodes_takes_n_as_numpy_or_tensor():
    assert vl.check_looped_nodes(looped_nodes(12), n=np.int64(12)).passed
    assert vl.check_looped_nodes(looped_nodes(12), n=torch.tensor(12)).passed


# ---------------------------------------------------------------- 03 exercise 2: vectorize a loop


def solution(w, x, y, weights):
    return (weights * (x @ w - y) ** 2).sum() / weights.sum()


def loop_over_the_weights(w, x, y, weights):
    total_weight = 0.0
    for k in range(len(weights)):
        total_weight += float(weights[k])
    return (weights * (x @ w - y) ** 2).sum() / total_weight


def comprehension_over_the_weights(w, x, y, weights):
    return (weights * (x @ w - y) ** 2).sum() / sum([float(v) for v in weights])


def three_columns_only(w, x, y, weights):
    prediction = x[:, 0] * w[0] + x[:, 1] * w[1] + x[:, 2] * w[2]
    return (weights * (prediction - y) ** 2).sum() / weights.sum()


def calls_backward(w, x, y, weights):
    loss = solution(w, x, y, weights)
    loss.backward(retain_graph=True)
    return loss


def raises(err):
    def fn(w, x, y, weights):
        raise err

    return fn


@pytest.mark.parametrize(
    "fn, phrase",
    [
        (lambda w, x, y, v: (v * (x @ w - y) ** 2).mean(), "divided by N"),
        (lambda w, x, y, v: (v * (x @ w - y) ** 2).sum(), "forgot the final division"),
        (lambda w, x, y, v: ((x @ w - y) ** 2).mean(), "ignores the weights"),
        (lambda w, x, y, v: (v**2 * (x @ w - y) ** 2).sum() / v.sum(), "yours is squared too"),
        (vl.reference_weighted_loss_loop, "graph grows with N"),
        (lambda w, x, y, v: torch.stack([v[k] * (x[k] @ w - y[k]) ** 2 for k in range(len(y))]).sum() / v.sum(),
         "graph grows with N"),
        (loop_over_the_weights, "still works once per sample"),
        (comprehension_over_the_weights, "still works once per sample"),
        (three_columns_only, "does your function assume a width"),
        (calls_backward, "calls backward() itself"),
        (lambda w, x, y, v: solution(w, x, y, v) / 0 * 0, "returned nan"),
        (lambda w, x, y, v: solution(w, x, y, v).reshape(1).to_sparse(), "sparse"),
        (lambda w, x, y, v: solution(w, x, y, v) * (1 + 0j), "complex"),
        (lambda w, x, y, v: solution(w.detach(), x, y, v) + 0 * w.sum(), "different gradient"),
        (lambda w, x, y, v: torch.tensor(solution(w, x, y, v).item()), "no grad_fn"),
        (lambda w, x, y, v: v * (x @ w - y) ** 2 / v.sum(), "one number"),
        (lambda w, x, y, v: None, "returns nothing yet"),
        (raises(LearnerError("mine")), "raised LearnerError: mine"),
        (raises(StopIteration()), "raised StopIteration"),
        (raises(RecursionError("deep")), "raised RecursionError"),
        (raises(MemoryError()), "raised MemoryError"),
        (raises(AssertionError("shape")), "raised AssertionError"),
    ],
)
def test_vectorized_wrong(fn, phrase):
    fb = vl.check_vectorized_loss(fn)
    assert fb.status == "wrong" and phrase in fb.message, fb


@pytest.mark.parametrize(
    "fn",
    [
        lambda w, x, y, v: torch.dot(v, (x @ w - y).pow(2)) / v.sum(),
        lambda w, x, y, v: torch.einsum("n,n->", v, (x @ w - y) ** 2) / v.sum(),
        lambda w, x, y, v: ((x @ w - y) ** 2 @ v) / v.sum(),
        lambda w, x, y, v: torch.nn.functional.mse_loss(x @ w, y, reduction="none").mul(v).sum().div(v.sum()),
        lambda w, x, y, v: (v / v.sum() * (x.matmul(w) - y).square()).sum().reshape(1),
        lambda w, x, y, v: (v.float() * (x.float() @ w.float() - y.float()) ** 2).sum() / v.float().sum(),
        lambda w, x, y, v: (v * torch.vmap(lambda xi, yi: (xi @ w - yi) ** 2)(x, y)).sum() / v.sum(),
        lambda w, x, y, v: sum(x[:, d] * w[d] for d in range(len(w))).sub(y).pow(2).mul(v).sum() / v.sum(),
    ],
    ids=["dot", "einsum", "matmul", "mse_loss", "normalised-first-shape-1", "float32", "vmap", "loop-over-features"],
)
def test_vectorized_right_written_differently(fn):
    fb = vl.check_vectorized_loss(fn)
    assert fb.passed, fb


def test_vectorized_names_a_loop_the_graph_does_not_show():
    # the graph of this answer does not grow with N; only the counted work shows its loop
    x = torch.randn(40, 3)
    sizes = [lab.count_nodes(loop_over_the_weights(torch.ones(3, requires_grad=True), x[:n], x[:n, 0], x[:n, 1].abs()))
             for n in (4, 33)]
    assert sizes[0] == sizes[1]
    assert "once per sample" in vl.check_vectorized_loss(loop_over_the_weights).message


# ---------------------------------------------------------------- exceptions: which ones a check turns into feedback


class NotAnError(BaseException):
    pass


@pytest.mark.parametrize("signal", [KeyboardInterrupt, SystemExit, NotAnError])
def test_signals_that_are_not_errors_pass_through(signal):
    # Documented policy (leaf_tensors' docstring): every Exception becomes feedback; BaseException
    # subclasses outside Exception are requests to stop, which a check must not swallow.
    with pytest.raises(signal):
        vl.check_vectorized_loss(raises(signal()))
    with pytest.raises(signal):
        lt.check_make_weight(lambda: raise_(signal()))


@pytest.mark.parametrize("err", [LearnerError("x"), TypeError("x"), IndexError("x"), ArithmeticError("x")], ids=str)
def test_every_exception_from_a_learners_factory_is_feedback(err):
    fb = lt.check_make_weight(lambda: raise_(err))
    assert fb.status == "wrong" and f"raised {type(err).__name__}" in fb.message


# ---------------------------------------------------------------- the placeholder's message is what the notebooks show


@pytest.mark.parametrize(
    "notebook, cell_id",
    [
        ("01_leaf_tensors", "ex-leaves"),
        ("01_leaf_tensors", "ex-grad"),
        ("01_leaf_tensors", "ex-weight"),
        ("02_grad_fn_chains", "ex1"),
        ("02_grad_fn_chains", "ex2"),
        ("02_grad_fn_chains", "ex3"),
        ("03_vectorized_vs_looped", "ex1"),
        ("03_vectorized_vs_looped", "ex2"),
    ],
)
def test_unanswered_feedback_matches_the_stored_notebook_output(notebook, cell_id):
    cells = json.loads((NOTEBOOKS / f"{notebook}.ipynb").read_text(encoding="utf-8"))["cells"]
    cell = next(c for c in cells if c.get("id") == cell_id)
    source = "".join(cell["source"])
    *body, last = source.strip().splitlines()
    namespace = {"torch": torch, "ex": {"01": lt, "02": ch, "03": vl}[notebook[:2]]}
    exec("\n".join(body), namespace)
    feedback = eval(last, namespace)
    stored = ["".join(o["data"]["text/plain"]) for o in cell["outputs"] if "text/plain" in o.get("data", {})]
    assert feedback.status == "unanswered" and stored == [repr(feedback)]
