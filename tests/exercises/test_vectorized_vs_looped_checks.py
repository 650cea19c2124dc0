"""Notebook 03's exercise checks (vectorized versus looped) cannot be fooled, refuse no right answer and never
raise.

For each check: wrong answers a learner could plausibly write, each of which must not pass and must get a
hint naming its own mistake; right answers written differently from the worked solution, which must pass;
odd answers and learner code that misbehaves, which must get feedback instead of an exception. Every
expected value is computed here by running PyTorch, never typed in: exercise 1's truth by running the notebook
prompt's own code.
"""

import json
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest
import torch
from learner_code import LearnerError, NotAnError, odd_answers
from notebook_cells import cell_source, run_cells

import autograd_lab as lab
from autograd_lab.exercises import trust
from autograd_lab.exercises import vectorized_vs_looped as vl
from autograd_lab.exercises.diagnoses import diagnose
from autograd_lab.exercises.feedback import Feedback

NOTEBOOK = Path(__file__).resolve().parents[2] / "notebooks" / "03_vectorized_vs_looped.ipynb"
NB = NOTEBOOK.stem


def scaled_loss_nodes(n):
    """Exercise 1's truth: the graph of the notebook prompt's own scaled_loss for n samples, built here."""
    x = torch.randn(n)
    return lab.count_nodes(run_cells(NB, "ex1-md", torch=torch)["scaled_loss"](x, 2 * x))


def test_truths_used_here_are_what_the_checks_compute():
    assert vl.check_looped_nodes(scaled_loss_nodes(50), n=50).passed


def _value_and_grad(loss, leaves):
    return loss.detach(), torch.autograd.grad(loss, leaves), lab.count_nodes(loss)


def test_the_references_are_the_notebooks_own_code_on_fresh_inputs():
    """Each reference beside the notebook's own cell (exercise 1's loss as its prompt shows it, exercise 2's loop
    cell), on inputs drawn afresh: the same values, gradients and graph sizes."""
    seed = trust.fresh_seed()
    gen = torch.Generator().manual_seed(seed)
    notebook = run_cells(NB, "ex1-md", "ex2-loop", torch=torch)
    w, b = notebook["w"], notebook["b"]  # the prompt's globals: scaled_loss reads them
    for n in (1, 2, 7):
        with torch.no_grad():
            w.copy_(torch.randn((), generator=gen))
            b.copy_(torch.randn((), generator=gen))
        x, y = torch.randn(n, generator=gen), torch.randn(n, generator=gen)
        mine = _value_and_grad(vl._reference_scaled_loss(w, b, x, y), (w, b))
        theirs = _value_and_grad(notebook["scaled_loss"](x, y), (w, b))
        torch.testing.assert_close(mine, theirs, msg=f"scaled_loss, n = {n}, seed {seed}")
    for n, dim in ((1, 3), (8, 3), (6, 5)):
        w = torch.randn(dim, generator=gen, dtype=torch.float64, requires_grad=True)
        x, y = torch.randn(n, dim, generator=gen, dtype=torch.float64), torch.randn(n, generator=gen).double()
        weights = torch.rand(n, generator=gen, dtype=torch.float64) + 0.5
        mine = _value_and_grad(vl._reference_weighted_loss_loop(w, x, y, weights), (w,))
        theirs = _value_and_grad(notebook["weighted_loss_loop"](w, x, y, weights), (w,))
        torch.testing.assert_close(mine, theirs, msg=f"weighted_loss_loop, n = {n}, D = {dim}, seed {seed}")


CHECKS = {"looped_nodes": vl.check_looped_nodes, "vectorized": vl.check_vectorized_loss}


@pytest.mark.parametrize("odd", list(odd_answers()), ids=str)
@pytest.mark.parametrize("check", list(CHECKS), ids=str)
def test_no_check_raises_on_an_odd_answer(check, odd):
    fb = CHECKS[check](odd_answers()[odd])
    assert isinstance(fb, Feedback) and not fb.passed and fb.message


# ---------------------------------------------------------------- exercise 1: predict a looped graph's size


def per_sample_and_once():
    one, two = scaled_loss_nodes(1), scaled_loss_nodes(2)
    return two - one, 2 * one - two


def test_ex1_the_count_is_five_a_sample_and_four_in_all():
    """What the worked solution reads from the code, confirmed by building the graph."""
    assert per_sample_and_once() == (5, 4)
    assert scaled_loss_nodes(50) == 254


@pytest.mark.parametrize(
    "make, phrase",
    [
        # section 2's formula copied (5 N + 3), or the first `0 + ...` thought unrecorded, or one shared node missed
        (lambda p, s: p * 50 + s - 1, "the first iteration's"),
        (lambda p, s: (p + 1) * 50 + s - 1, "w.exp(), which runs once, before the loop"),  # exp inside the loop
        (lambda p, s: (p + 1) * 50 + s, "index data that needs no grad"),  # x[k] counted as a node
        (lambda p, s: (p + 2) * 50 + s, "index data that needs no grad"),  # x[k] and y[k] counted
        (lambda p, s: (p + 2) * 50 + s - 2, "one leaf each"),  # an AccumulateGrad per sample for w and for b
        (lambda p, s: (p - 1) * 50 + s, "the running sum's"),  # the accumulation `total + ...` forgotten
        (lambda p, s: p * 50 + s + 1, "stacks nothing"),  # a stack or a mean, as in section 2
        (lambda p, s: p * 50, "not the nodes all samples share"),
        (lambda p, s: p * 49 + s, "count for N = 49"),
        (lambda p, s: p * 51 + s, "count for N = 51"),
        (lambda p, s: 2 * p + s, "the count for N = 2"),
        (lambda p, s: p + s, "the count for N = 1"),
        (lambda p, s: 0, "cannot be"),
        (lambda p, s: -(p * 50 + s), "cannot be"),
        (lambda p, s: float("inf"), "not a finite number"),
        (lambda p, s: 10**12, "(nodes per sample) x N + (nodes shared by all samples)"),
    ],
)
def test_looped_nodes_wrong(make, phrase):
    fb = vl.check_looped_nodes(make(*per_sample_and_once()), n=50)
    assert fb.status == "wrong" and phrase in fb.message, fb


@pytest.mark.parametrize("n", [50, 12])
def test_every_miscount_row_names_its_own_count(n):
    """No row of the table hides behind an earlier one: each row's count is diagnosed as that row, and the check
    says its hint."""
    per_sample, once = per_sample_and_once()
    for row in vl._NODE_DIAGNOSES:
        count = row.variant(n, per_sample, once)
        found = diagnose(vl._NODE_DIAGNOSES, lambda variant, count=count: variant(n, per_sample, once) == count)
        assert found is row, row.name
        fb = vl.check_looped_nodes(count, n=n)
        assert fb.status == "wrong" and row.says(n=n) in fb.message, (row.name, fb)


def test_ex1_hints_do_not_give_the_count_away():
    per_sample, once = per_sample_and_once()
    for answer in (per_sample * 50 + once - 1, (per_sample - 1) * 50 + once, per_sample * 50):
        assert str(per_sample * 50 + once) not in vl.check_looped_nodes(answer, n=50).message


@pytest.mark.parametrize(
    "convert",
    [np.int64, np.float32, float, torch.tensor, lambda v: torch.tensor([v], dtype=torch.float64),
     lambda v: Fraction(2 * v, 2), lambda v: np.array(v), lambda v: 5 * 50 + 4 + 0 * v],
    ids=["np.int64", "np.float32", "float", "tensor", "tensor-1-float64", "fraction", "np-0d", "expression"],
)
def test_looped_nodes_right_written_differently(convert):
    assert vl.check_looped_nodes(convert(scaled_loss_nodes(50)), n=50).passed


@pytest.mark.parametrize("n", [10**9, 0, -3, 2.5, "50", None])
def test_looped_nodes_refuses_an_impossible_n_without_building_it(n):
    fb = vl.check_looped_nodes(254, n=n)
    assert fb.status == "malformed" and "batch size of the exercise" in fb.message


def test_looped_nodes_takes_n_as_numpy_or_tensor():
    assert vl.check_looped_nodes(scaled_loss_nodes(12), n=np.int64(12)).passed
    assert vl.check_looped_nodes(scaled_loss_nodes(12), n=torch.tensor(12)).passed


def test_ex1_right_answer_passes_at_other_sizes_too():
    truth = scaled_loss_nodes(50)
    fb = vl.check_looped_nodes(truth, n=50)
    assert fb.passed and str(truth) in fb.message
    assert vl.check_looped_nodes(float(truth), n=50).passed  # 254.0 is a whole number too
    assert vl.check_looped_nodes(scaled_loss_nodes(12), n=12).passed
    assert vl.check_looped_nodes(scaled_loss_nodes(1), n=1).passed


def test_ex1_asks_for_a_case_the_notebook_never_builds_or_prints():
    """Exercise 1 is not answered by an earlier output: no code cell before it builds scaled_loss (its code is shown
    in the prompt's markdown only), and no output before it shows the count it asks for."""
    cells = json.loads(NOTEBOOK.read_text())["cells"]
    before = cells[: next(i for i, c in enumerate(cells) if c.get("id") == "ex1")]
    code = "".join("".join(c["source"]) for c in before if c["cell_type"] == "code")
    shown = json.dumps([c.get("outputs", []) for c in before])
    assert "scaled_loss" not in code and "w.exp()" not in code
    assert f" {scaled_loss_nodes(50)} " not in shown and f"[{scaled_loss_nodes(50)}" not in shown
    assert "You may build" not in cell_source(NB, "ex1-md")


def test_ex1_solution_reads_the_count_from_the_code_without_building_a_graph():
    solution = (NOTEBOOK.parent / "solutions" / "03_looped_nodes.py").read_text()
    code = "\n".join(line for line in solution.splitlines() if not line.lstrip().startswith("#"))
    assert "count_nodes" not in code and "graph_nodes" not in code and "scaled_loss(" not in code
    namespace = {"ex": vl}
    exec(solution, namespace)
    assert namespace["answer"] == scaled_loss_nodes(50)


def test_vectorized_refuses_a_divisor_summed_by_a_builtin_over_python_numbers():
    hidden = [
        lambda w, x, y, v: (v * (x @ w - y) ** 2).sum() / sum(v.tolist()),
        lambda w, x, y, v: (v * (x @ w - y) ** 2).sum() / __import__("math").fsum(v.tolist()),
        lambda w, x, y, v: (v * (x @ w - y) ** 2).sum() / float(sum(v.numpy())),
    ]
    for fn in hidden:
        fb = vl.check_vectorized_loss(fn)
        assert fb.status == "wrong" and "inside a builtin" in fb.message, fb
    # one number turned into Python is no loop: a divisor summed by torch, then read with .item(), passes
    assert vl.check_vectorized_loss(lambda w, x, y, v: (v * (x @ w - y) ** 2).sum() / v.sum().item()).passed


@pytest.mark.parametrize("answer", ["254", 25.5, True, [254]])
def test_ex1_malformed(answer):
    fb = vl.check_looped_nodes(answer, n=50)
    assert fb.status == "malformed" and "whole number" in fb.message


def test_ex1_unanswered():
    assert vl.check_looped_nodes(..., n=50).status == "unanswered"


# ---------------------------------------------------------------- exercise 2: vectorize a loop


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
        (vl._reference_weighted_loss_loop, "graph grows with N"),
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


_FRESH_PROCESS = """
import torch
from autograd_lab.exercises import vectorized_vs_looped as ex
def solution(w, x, y, weights):
    return (weights * (x @ w - y) ** 2).sum() / weights.sum()
def with_einsum(w, x, y, weights):
    return torch.einsum("n,n->", weights, (x @ w - y) ** 2) / weights.sum()
print(ex.check_vectorized_loss(solution).passed, ex.check_vectorized_loss(with_einsum).passed)
"""


def test_ex2_passes_a_right_answer_in_a_fresh_process():
    """The first operation under a dispatch mode imports and sets up code outside torch's folder (millions of traced
    lines); a check run in a fresh kernel, before anything else warmed that up, must not read it as work per sample.
    Notebook 03 runs no dispatch mode before exercise 2; the autograder runs the worked solutions in a fresh process."""
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-c", _FRESH_PROCESS], capture_output=True, text=True, timeout=300)
    assert done.stdout.split() == ["True", "True"], done.stdout + done.stderr[-2000:]


def in_float32(w, x, y, weights):
    return (weights.float() * (x.float() @ w.float() - y.float()) ** 2).sum() / weights.float().sum()


def test_ex2_holds_a_float32_gradient_to_its_terms_where_an_entry_cancels():
    """Seed 526 draws, at N = 33, a gradient entry whose terms cancel to a small share of their size: float32
    rounds it by a share of its terms, and the answer computed in float32 still passes there."""
    w, x, y, weights = vl._data(33, 3, 526)
    leaf = w.clone().requires_grad_(True)
    (grad,) = torch.autograd.grad(vl._reference_weighted_loss_loop(leaf, x, y, weights), leaf)
    _, grad_size = vl._sizes(w, x, y, weights)
    assert float((grad.abs() / grad_size).min()) < 1e-3
    problem, _ = vl._compare_with_loop(in_float32, w, x, y, weights)
    assert problem is None, problem


def test_ex2_sizes_bound_the_loss_and_every_gradient_entry():
    for seed in range(20):
        w, x, y, weights = vl._data(6, 5, seed)
        leaf = w.clone().requires_grad_(True)
        loss = vl._reference_weighted_loss_loop(leaf, x, y, weights)
        (grad,) = torch.autograd.grad(loss, leaf)
        size, grad_size = vl._sizes(w, x, y, weights)
        assert float(loss.detach()) <= float(size) and bool((grad.abs() <= grad_size).all())


def test_ex2_draws_weights_that_keep_the_usual_slips_apart():
    """Weights between 1 and 2 that rise with the error: dividing by N and leaving the weights out are then never
    within rounding of the loop, nor of each other (on every draw tried, at the first case's N)."""
    n, dim = vl._CASES[0]
    for seed in range(300):
        w, x, y, weights = vl._data(n, dim, seed)
        assert 1 <= float(weights.min()) and float(weights.max()) <= 2
        order = (x @ w - y).abs().argsort()
        assert bool((weights[order].diff() >= 0).all())
        values = [float(vl._reference_weighted_loss_loop(w, x, y, weights))]
        values += [float(row.variant(w, x, y, weights)) for row in vl._LOSS_DIAGNOSES]
        gaps = [abs(a - b) / max(abs(a), abs(b)) for i, a in enumerate(values) for b in values[i + 1:]]
        assert min(gaps) > 1e-3, (seed, values)


def test_ex2_reference_equals_the_loop_and_the_solution():
    gen = torch.Generator().manual_seed(5)
    w, x = torch.randn(3, generator=gen), torch.randn(6, 3, generator=gen)
    y, weights = torch.randn(6, generator=gen), torch.rand(6, generator=gen)
    torch.testing.assert_close(vl._reference_weighted_loss_loop(w, x, y, weights), solution(w, x, y, weights))


@pytest.mark.parametrize("row", vl._LOSS_DIAGNOSES, ids=lambda row: row.name)
def test_every_wrong_loss_row_names_its_own_loss(row):
    fb = vl.check_vectorized_loss(row.variant)
    assert fb.status == "wrong" and row.says() in fb.message, fb


def test_ex2_right_answer_passes():
    fb = vl.check_vectorized_loss(solution)
    assert fb.passed and "for any N" in fb.message
    # an equivalent form passes too
    assert vl.check_vectorized_loss(lambda w, x, y, v: torch.dot(v, (x @ w - y).pow(2)) / v.sum()).passed


@pytest.mark.parametrize(
    "answer, hint",
    [
        (lambda w, x, y, v: (v * (x @ w - y) ** 2).mean(), "divided by N"),
        (lambda w, x, y, v: (v * (x @ w - y) ** 2).sum(), "forgot the final division"),
        (lambda w, x, y, v: ((x @ w - y) ** 2).mean(), "ignores the weights"),
        (lambda w, x, y, v: ((x @ w - y) ** 2).sum() / v.sum(), "multiplied by its own weight"),
        (lambda w, x, y, v: (v * (x @ w - y)).sum() / v.sum(), "squared before it is weighted"),
        (lambda w, x, y, v: (v * (x @ w - y) ** 3).sum() / v.sum(), "match it term by term"),
        (vl._reference_weighted_loss_loop, "graph grows with N"),
        (lambda w, x, y, v: v * (x @ w - y) ** 2 / v.sum(), "one number"),
        (lambda w, x, y, v: torch.tensor(solution(w, x, y, v).item()), "no grad_fn"),
        (lambda w, x, y, v: solution(w.detach(), x, y, v) + 0 * w.sum(), "different gradient"),
        (lambda w, x, y, v: x * w, "returned shape"),
        (lambda w, x, y, v: torch.mm(w, x), "raised RuntimeError"),
        (lambda w, x, y, v: None, "returns nothing yet"),
    ],
)
def test_ex2_each_mistake_gets_its_hint(answer, hint):
    fb = vl.check_vectorized_loss(answer)
    assert fb.status == "wrong" and hint in fb.message, fb


def test_ex2_malformed_and_unanswered():
    assert vl.check_vectorized_loss(...).status == "unanswered"
    fb = vl.check_vectorized_loss(solution(torch.ones(3), torch.ones(2, 3), torch.ones(2), torch.ones(2)))
    assert fb.status == "malformed" and "the function" in fb.message
    fb = vl.check_vectorized_loss(lambda w, x, y, v: solution(w, x, y, v).item())
    assert fb.status == "malformed" and "return a tensor" in fb.message


# ---------------------------------------------------------------- exceptions: which ones a check turns into feedback


@pytest.mark.parametrize("signal", [SystemExit, NotAnError])
def test_a_stop_raised_by_learner_code_is_feedback(signal):
    # Documented policy (never_raises): everything a learner's code raises becomes feedback, SystemExit included;
    # only KeyboardInterrupt, the learner's own request to stop the cell, passes through.
    assert vl.check_vectorized_loss(raises(signal())).status == "malformed"


def test_an_interrupt_passes_through():
    with pytest.raises(KeyboardInterrupt):
        vl.check_vectorized_loss(raises(KeyboardInterrupt()))
