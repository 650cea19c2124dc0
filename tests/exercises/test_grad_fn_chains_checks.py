"""Notebook 02's exercise checks (grad_fn chains) cannot be fooled, refuse no right answer and never raise.

For each check: wrong answers a learner could plausibly write, each of which must not pass and must get a
hint naming its own mistake; right answers written differently from the worked solution, which must pass;
odd answers, which must get feedback instead of an exception. The references are computed here by running
PyTorch, never typed in.
"""

import contextlib
import io
import re

import numpy as np
import pytest
import torch
from learner_code import odd_answers
from notebook_cells import run_cells

from autograd_lab import graphmodel
from autograd_lab.exercises import grad_fn_chains as ch
from autograd_lab.exercises.answers import close
from autograd_lab.exercises.feedback import Feedback
from autograd_lab.graphmodel import node_name

NB = "02_grad_fn_chains"
CHAIN = ["MulBackward0", "SumBackward0", "SigmoidBackward0", "MulBackward0", "AccumulateGrad"]
RAISES = {"A": False, "B": True, "C": True, "D": False}
SECOND = {
    "A": lambda a, b: torch.cat([a, b]).sum(),
    "B": lambda a, b: (a * b.detach()).sum(),
    "C": lambda a, b: a.exp().sum(),
    "D": lambda a, b: a.expand(3, 2).sum(),
}


def base(names):
    return [re.sub(r"\d+$", "", n) for n in names]


def _quietly(run, *args, **kwargs):
    with contextlib.redirect_stdout(io.StringIO()):
        return run(*args, **kwargs)


def walk(tensor):
    """The notebook's own walk (its cell "walk", which runs it on the seed's loss first), its printing silenced: the
    node names from ``tensor.grad_fn`` to the leaf, following the first input that needs a gradient."""
    notebook = _quietly(run_cells, NB, "seed", "walk", torch=torch)
    return _quietly(notebook["walk"], tensor)


def test_the_chain_reference_is_the_notebooks_expression_walked_by_its_own_walk():
    """Exercise 1's expression as its prompt shows it, walked by the notebook's own cell: the chain the check's
    reference reads, and chain_expression's value and leaf."""
    notebook = run_cells(NB, "ex1-md", torch=torch)
    assert ch._reference_chain() == walk(notebook["out"]) == walk(ch.chain_expression()[0])
    assert base(walk(notebook["out"])) == ["MulBackward", "SumBackward", "SigmoidBackward", "MulBackward",
                                           "AccumulateGrad"]
    out, w = ch.chain_expression()
    assert torch.equal(out, notebook["out"]) and torch.equal(w, notebook["w"]) and w.requires_grad


def div_reference(a, b, g):
    a, b = a.clone().requires_grad_(), b.clone().requires_grad_()
    return torch.autograd.grad(a / b, (a, b), g)


def test_truths_used_here_are_what_the_checks_compute():
    assert ch._reference_chain() == CHAIN and ch._reference_second_backward() == RAISES
    a, b, g = ch._div_points()
    assert (tuple(a.shape), tuple(b.shape)) == ch.DIV_SHAPES and a.shape != b.shape  # b is broadcast
    assert not torch.equal(g, torch.ones_like(g)) and (b > 0.4).all()
    for mine, theirs in zip(div_reference(a, b, g), ch._reference_div_backward(a, b, g)):
        assert torch.equal(mine, theirs)


CHECKS = {"chain": ch.check_chain, "div_backward": ch.check_div_backward,
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
        (CHAIN[:-1] + ["AccumulateGrad(x)"], "you wrote AccumulateGrad(x)"),
        (" -> ".join(CHAIN[1:]), "one node is missing at the start"),
        # a digit written names a variant: SumBackward1 is a sum over given dimensions, not the sum of every entry
        (CHAIN[:1] + ["SumBackward1"] + CHAIN[2:], "item 2 (SumBackward1) names another node"),
        (CHAIN[:1] + ["sumbackward1"] + CHAIN[2:], "a sum over given dimensions"),
        (" -> ".join(CHAIN[:1] + ["SumBackward1"] + CHAIN[2:-1] + ["AccumulateGrad(w)"]),
         "a sum over given dimensions"),
        (["MulBackward1", "SumBackward1", "SigmoidBackward1", "MulBackward1", "AccumulateGrad"],
         "items 1, 4 (MulBackward1) name another node"),
        (["MulBackward1", "SumBackward1", "SigmoidBackward1", "MulBackward1", "AccumulateGrad"],
         "item 3 (SigmoidBackward1): the operation is right"),
        (CHAIN[:-1] + ["AccumulateGrad0"], "tells variants of one operation apart"),
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
        ["MulBackward0", "SumBackward", "sigmoidbackward0", "MulBackward", "AccumulateGrad"],
        CHAIN[:-1] + ["AccumulateGrad(w)"],
        " -> ".join(CHAIN[:-1] + ["AccumulateGrad(w)"]),
        " -> ".join(CHAIN),
        CHAIN[:-1] + ["AccumulateGrad ( w )"],
    ],
    ids=["tuple", "no-digits", "lower-case", "spaces", "generator", "some-digits", "as-chain-names-the-leaf",
         "chain-printout", "arrow-string", "spaced-leaf"],
)
def test_chain_right_written_differently(answer):
    assert ch.check_chain(answer).passed


@pytest.mark.parametrize(
    "answer", [set(CHAIN), "MulBackward0 SumBackward0", [1, 2], {"chain": CHAIN}],
    ids=["set", "no-arrows", "numbers", "dict"],
)
def test_chain_malformed(answer):
    assert ch.check_chain(answer).status == "malformed"


@pytest.mark.parametrize("row", ch._CHAIN_DIAGNOSES, ids=lambda row: row.name)
def test_every_chain_row_names_its_own_misreading(row):
    fb = ch.check_chain(row.variant([name.rstrip("0123456789").lower() for name in CHAIN]))
    assert fb.status == "wrong" and fb.message == row.says(), fb


def test_a_wrong_digit_is_named_and_its_node_described_by_running_it():
    t = torch.ones(3, requires_grad=True)
    whole, by_dim = node_name(t.sum().grad_fn), node_name(t.sum(0).grad_fn)
    assert base([whole]) == base([by_dim]) and whole != by_dim  # one operation, two variants
    assert whole in CHAIN and by_dim not in CHAIN
    fb = ch.check_chain([by_dim if n == whole else n for n in CHAIN])
    assert fb.status == "wrong" and f"({by_dim}) names another node" in fb.message
    assert "`t.sum(dim)`" in fb.message and "`t.sum()`" in fb.message
    # the hint's table is computed by running each call, and says what each records
    variants = ch._variants()
    assert variants[by_dim].startswith("`t.sum(dim)`") and variants[whole].startswith("`t.sum()`")
    assert node_name(torch.ops.aten.mul.Scalar(t, 3).grad_fn) in variants
    assert node_name((t * 3).grad_fn) == CHAIN[0] and variants[CHAIN[0]].startswith("`t * u`")


def test_the_count_hints_say_what_is_true_of_this_expression_and_no_more():
    # "each operation adds exactly one node" is false in general: a composite function records several
    t = torch.tensor([3.0, 4.0, 12.0], requires_grad=True)
    inner = [n for n in graphmodel.visit([torch.nn.functional.normalize(t, dim=0).grad_fn])[0]
             if not hasattr(n, "variable")]
    assert len(inner) > 1
    too_many = ch.check_chain(CHAIN[:2] + ["ExpBackward0"] + CHAIN[2:]).message
    too_few = ch.check_chain([CHAIN[0], CHAIN[2], CHAIN[3], CHAIN[4]]).message
    assert "exactly one" not in too_many + too_few
    assert "in this expression" in too_many and "`F.normalize`, records several" in too_many
    assert "in this expression" in too_few
    # ... and in this expression each of the four operations (* 3, .sum(), sigmoid, w * x) does record one node
    out, _ = ch.chain_expression()
    assert len(walk(out)) == 4 + 1 and len(graphmodel.visit([out.grad_fn])[0]) == 5


def test_reference_chain_reads_the_one_graph_walk(monkeypatch):
    # naming has one home (graphmodel.node_name): renaming there renames the reference, so no second walk remains
    monkeypatch.setattr(graphmodel, "node_name", lambda fn: "None" if fn is None else "<" + type(fn).__name__ + ">")
    assert ch._reference_chain() == ["<" + name + ">" for name in walk(ch.chain_expression()[0])]


def test_check_chain():
    right = ch._reference_chain()
    assert ch.check_chain(right).passed
    assert ch.check_chain(base(right)).passed  # digits may be left out
    assert ch.check_chain(tuple(right)).passed
    assert ch.check_chain(...).status == "unanswered"
    assert ch.check_chain(None).status == "unanswered"
    assert ch.check_chain("MulBackward0, SumBackward0").status == "malformed"
    assert ch.check_chain(" -> ".join(right[:-1] + ["AccumulateGrad(w)"])).passed  # the way chain() prints it
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


# ---------------------------------------------------------------- exercise 2: write one node's backward


def right_div(a, b, g):
    return g / b, (-g * a / b**2).sum(0)


@pytest.mark.parametrize(
    "fn, phrase",
    [
        (lambda a, b, g: (g / b, (g * a / b**2).sum(0)), "grad_b has the wrong sign"),  # sign slip
        (lambda a, b, g: (-g / b, (-g * a / b**2).sum(0)), "grad_a has the wrong sign"),
        (lambda a, b, g: (1 / b, (-g * a / b**2).sum(0)), "grad_a leaves out grad_out"),  # missing chain factor
        (lambda a, b, g: (g / b, (-a / b**2).sum(0)), "grad_b leaves out grad_out"),
        (lambda a, b, g: (g / b, -a / b**2), "grad_b leaves out grad_out"),
        (lambda a, b, g: (1 / b, -a / b**2), "both leave out grad_out"),
        (lambda a, b, g: (-g * a / b**2, (g / b).sum(0)), "you swapped them"),  # derivative of the wrong input
        (lambda a, b, g: (-g * a / b**2, (-g * a / b**2).sum(0)), "grad_a is the derivative with respect to b"),
        (lambda a, b, g: (g / b, (g / b).sum(0)), "grad_b is the derivative with respect to a"),
        (lambda a, b, g: (g / b, -g * a / b**2), "Sum them back to (3,)"),  # wrong shape: the edge's sum left out
        (lambda a, b, g: (g / b, (-g * a / b**2).sum(1)), "should have the shape of its input, (3,)"),
        (lambda a, b, g: (g / b, (-g * a / b**2).mean(0)), "averages over the rows"),
        (lambda a, b, g: (g / b, (-g / b**2).sum(0)), "grad_b leaves out a"),
        (lambda a, b, g: (g / b, (-g * a / b).sum(0)), "check the derivative of 1 / b"),
        (lambda a, b, g: (g * b, (g * a).sum(0)), "here b divides"),
        (lambda a, b, g: (g / b, (g * a).sum(0) + 1), "grad_b does not match autograd"),
        (lambda a, b, g: (g / b, (-g * a / b**2).sum(0) * float("nan")), "not all finite"),
        (lambda a, b, g: 1 / 0, "raised ZeroDivisionError"),
    ],
)
def test_div_backward_wrong(fn, phrase):
    fb = ch.check_div_backward(fn)
    assert fb.status == "wrong" and phrase in fb.message, fb


@pytest.mark.parametrize("row", ch._DIV_DIAGNOSES, ids=lambda row: row.name)
def test_every_division_row_names_its_own_slip(row):
    """Each row's div_backward gets its own hint: no row hides behind an earlier one."""
    fb = ch.check_div_backward(row.variant)
    assert fb.status == "wrong" and fb.message == row.says(), fb


@pytest.mark.parametrize(
    "fn",
    [
        right_div,
        lambda a, b, g: (g * b.reciprocal(), (-(g * a) / (b * b)).sum_to_size(b.shape)),
        lambda a, b, g: [torch.div(g, b), torch.sum(-g * a * b.pow(-2), dim=0)],
        lambda a, b, g: (g / b, -((g * (a / b)) / b).sum(dim=0, keepdim=True).squeeze(0)),
        lambda a, b, g: ((g / b).float(), (-g * a / b**2).sum(0).float()),  # float32 is close enough
    ],
    ids=["solution", "reciprocal-sum_to_size", "list-and-pow", "via-out", "float32"],
)
def test_div_backward_right_written_differently(fn):
    assert ch.check_div_backward(fn).passed


@pytest.mark.parametrize(
    "answer, status, phrase",
    [
        (..., "unanswered", "your function div_backward"),
        (right_div(*ch._div_points()), "malformed", "give the function itself"),
        (lambda a, b: (a, b), "malformed", "must take 3 arguments"),
        (lambda a, b, g: (g / b,), "malformed", "must return two tensors"),
        (lambda a, b, g: None, "malformed", "must return two tensors"),
        (lambda a, b, g: (1.0, 2.0), "malformed", "must return two tensors"),
        (lambda a, b, g: ((g / b).to(torch.complex128), (-g * a / b**2).sum(0)), "malformed", "ordinary real"),
    ],
)
def test_div_backward_form(answer, status, phrase):
    fb = ch.check_div_backward(answer)
    assert fb.status == status and phrase in fb.message, fb


def test_div_backward_holds_a_float32_answer_to_its_terms_where_grad_b_cancels():
    """grad_b adds one product per row; where the two rows nearly cancel, an answer computed in float32 from the
    start is off by a share of the products, not of the sum, and passes; a slip in the formula still does not."""
    a = torch.tensor([[100.0, 2.0, -0.5], [-100.0 + 3e-3, 0.7, 0.9]], dtype=torch.float64)
    b = torch.tensor([0.9, 1.3, 0.6], dtype=torch.float64)
    g = torch.tensor([[10.0, -0.4, 0.8], [10.0, 0.6, -1.5]], dtype=torch.float64)
    grad_b = ch._reference_div_backward(a, b, g)[1]
    assert abs(float(grad_b[0])) < 1e-4 * float((g * a).abs().sum(0)[0] / b[0] ** 2)  # the terms cancel
    in_float32 = [t.double() for t in right_div(a.float(), b.float(), g.float())]
    assert not close(in_float32[1], grad_b)  # held to its own size, the rounding of its terms would fail it
    assert ch._div_mistake(in_float32, a, b, g) is None
    assert ch._div_mistake([t.double() for t in (g / b, (-g * a / b).sum(0))], a, b, g) is not None


def test_div_backward_leaves_grad_mode_and_dtype_as_found():
    def rude(a, b, g):
        torch.set_grad_enabled(False)
        torch.set_default_dtype(torch.float64)
        return right_div(a, b, g)

    assert ch.check_div_backward(rude).passed
    assert torch.is_grad_enabled() and torch.get_default_dtype() == torch.float32


def test_div_backward_is_checked_on_a_second_draw():
    first = ch._div_points()

    def only_the_first(a, b, g):  # right on the first draw only, as an answer copied from printed numbers would be
        return right_div(*first)

    assert not ch.check_div_backward(only_the_first).passed


# ---------------------------------------------------------------- exercise 3: will a second backward raise?


@pytest.mark.parametrize(
    "answer, phrase",
    [
        (dict.fromkeys(RAISES, True), "You said every one raises"),
        (dict.fromkeys(RAISES, False), "You said none raises"),
        ({k: not v for k, v in RAISES.items()}, "4 of 4 not yet"),
        ({**RAISES, "C": False}, "C = a.exp().sum(): what is the derivative of exp(a)"),
        ({**RAISES, "B": False}, "B = (a * b.detach()).sum(): detach() keeps b out of the graph"),
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


@pytest.mark.parametrize("row", ch._SECOND_DIAGNOSES, ids=lambda row: row.name)
def test_every_second_backward_belief_is_named(row):
    fb = ch.check_second_backward(row.variant(list(RAISES)))
    assert fb.status == "wrong" and row.says() in fb.message, fb


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
    truth = {k: raises_twice(f) for k, f in SECOND.items()}
    assert ch._reference_second_backward() == truth
    assert truth == RAISES  # the notebook's worked solution


def test_check_second_backward():
    truth = ch._reference_second_backward()
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


def test_second_backward_hint_points_to_saved_tensors_not_to_every_saved_name():
    # dir(node) lists _saved_alpha on additions that never raise, and _saved_self where it is None: the hint
    # sends the learner to the attributes that hold tensors, the only ones backward frees
    fb = ch.check_second_backward({**RAISES, "A": True})
    assert "dir(node)" not in fb.message and "hold tensors" in fb.message
    assert "`_saved_alpha`" in fb.message and "None" in fb.message
