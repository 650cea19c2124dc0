"""Notebook 04's exercise checks (gradient accumulation) against answers a learner could plausibly write.

For every exercise: (a) wrong answers, each of which must not pass and must get a hint naming its actual
mistake -- in particular loops that do not accumulate at all (one backward() over a group's summed losses,
outputs concatenated into one loss) although their gradient is right; (b) right answers written differently
from the worked solution, which must pass; (c) answers and learner code that must not make a check raise.
"""

from fractions import Fraction

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from learner_code import BrokenMessage
from torch import nn

from autograd_lab.exercises import gradient_accumulation as ex04

SEED = lambda i, n, k: (i - 1) % k == 0  # noqa: E731  -- the seed's step condition
PLUS_ONE = lambda i, n, k: (i + 1) % k == 0  # noqa: E731
CORRECT = lambda i, n, k: (i + 1) % k == 0 or i + 1 == n  # noqa: E731


def _is_wrong_with(fb, words):
    return fb.status == "wrong" and words in fb.message


# =========================================================================== exercise 1: the training loop


def _group(micro_batches, i, k):
    start = (i // k) * k
    return micro_batches[start:start + k]


def _share(x, micro_batches, i, k):
    return len(x) / sum(len(xg) for xg, _ in _group(micro_batches, i, k))


def _end_of_group(i, n, k):
    return (i + 1) % k == 0 or i + 1 == n


def _first_size_assumed(x, micro_batches, i, k):
    """The group's samples counted as if every micro-batch but its last held as many as the epoch's first."""
    group = _group(micro_batches, i, k)
    return len(x) / (len(micro_batches[0][0]) * (len(group) - 1) + len(group[-1][0]))


def loop(*, step_when=_end_of_group, scale="share", zero="after step", logging=None, call="model(x)"):
    """A learner's train_epoch: one backward per micro-batch, with a chosen step condition, scaling and reset."""

    def train_epoch(model, loss_fn, optimizer, micro_batches, k):
        n = len(micro_batches)
        if zero == "before loop":
            optimizer.zero_grad()
        for i, (x, y) in enumerate(micro_batches):
            if zero == "group start" and i % k == 0:
                model.zero_grad()
            if zero == "every micro-batch":
                optimizer.zero_grad()
            loss = loss_fn(model(x) if call == "model(x)" else model.forward(x), y)
            if logging == "no_grad":
                with torch.no_grad():
                    model(x)
            elif logging == "inference_mode":
                with torch.inference_mode():
                    model(x)
            factor = {"share": _share(x, micro_batches, i, k), "k": 1 / k, "none": 1.0,
                      "k twice": 1 / k**2, "group": 1 / len(_group(micro_batches, i, k)),
                      "fixed 4": len(x) / (4 * len(_group(micro_batches, i, k))),
                      "first size": _first_size_assumed(x, micro_batches, i, k)}[scale]
            (loss * factor).backward()
            if step_when(i, n, k):
                optimizer.step()
                if zero in ("after step", "before loop", "every micro-batch"):
                    optimizer.zero_grad(set_to_none=zero == "after step")

    return train_epoch


def enumerate_from_one(model, loss_fn, optimizer, micro_batches, k):
    n = len(micro_batches)
    for i, (x, y) in enumerate(micro_batches, start=1):
        group = micro_batches[(i - 1) // k * k:(i - 1) // k * k + k]
        F.mse_loss(model(x), y, reduction="sum").div(sum(len(xg) for xg, _ in group)).backward()
        if i % k == 0 or i == n:
            optimizer.step()
            optimizer.zero_grad()


def by_groups(model, loss_fn, optimizer, micro_batches, k):
    """Cut the epoch into groups first, then accumulate each group."""
    groups = [micro_batches[s:s + k] for s in range(0, len(micro_batches), k)]
    for group in groups:
        total = sum(len(x) for x, _ in group)
        for x, y in group:
            (loss_fn(model(x), y) * len(x) / total).backward()
        optimizer.step()
        optimizer.zero_grad()


def summed_losses(model, loss_fn, optimizer, micro_batches, k):
    """Not accumulation: one backward() over the group's summed losses keeps every graph alive."""
    for group in (micro_batches[s:s + k] for s in range(0, len(micro_batches), k)):
        total = sum(len(x) for x, _ in group)
        sum(loss_fn(model(x), y) * len(x) / total for x, y in group).backward()
        optimizer.step()
        optimizer.zero_grad()


def concatenated_outputs(model, loss_fn, optimizer, micro_batches, k):
    """Not accumulation: the micro-batch outputs go into one loss."""
    for group in (micro_batches[s:s + k] for s in range(0, len(micro_batches), k)):
        outputs = [model(x) for x, _ in group]
        loss_fn(torch.cat(outputs), torch.cat([y for _, y in group])).backward()
        optimizer.step()
        optimizer.zero_grad()


def concatenated_inputs(model, loss_fn, optimizer, micro_batches, k):
    for group in (micro_batches[s:s + k] for s in range(0, len(micro_batches), k)):
        x = torch.cat([x for x, _ in group])
        loss_fn(model(x), torch.cat([y for _, y in group])).backward()
        optimizer.step()
        optimizer.zero_grad()


def leaves_the_tail_in_grad(model, loss_fn, optimizer, micro_batches, k):
    """Right updates, but no reset after the last (tail) step: it leaks into the next epoch."""
    n = len(micro_batches)
    for i, (x, y) in enumerate(micro_batches):
        (loss_fn(model(x), y) * _share(x, micro_batches, i, k)).backward()
        if (i + 1) % k == 0:
            optimizer.step()
            optimizer.zero_grad()
        elif i + 1 == n:
            optimizer.step()


def divide_at_step(model, loss_fn, optimizer, micro_batches, k):
    """Sum-reduce each micro-batch, count the samples as they come, divide .grad once before the step."""
    n, seen = len(micro_batches), 0
    for i, (x, y) in enumerate(micro_batches):
        (loss_fn(model(x), y) * len(x)).backward()  # the micro-batch's sum of squared errors
        seen += len(x)
        if _end_of_group(i, n, k):
            for p in model.parameters():
                p.grad /= seen
            optimizer.step()
            optimizer.zero_grad()
            seen = 0


def no_backward(model, loss_fn, optimizer, micro_batches, k):
    for i, (x, y) in enumerate(micro_batches):
        loss_fn(model(x), y)
        if _end_of_group(i, len(micro_batches), k):
            optimizer.step()
            optimizer.zero_grad()


def own_optimizer(model, loss_fn, optimizer, micro_batches, k):
    mine = torch.optim.SGD(model.parameters(), lr=0.1)
    loop()(model, loss_fn, mine, micro_batches, k)


def hard_coded_k(model, loss_fn, optimizer, micro_batches, k):
    loop()(model, loss_fn, optimizer, micro_batches, 10)


def hard_coded_n(model, loss_fn, optimizer, micro_batches, k):
    loop(step_when=lambda i, n, k: (i + 1) % k == 0 or i + 1 == 25)(model, loss_fn, optimizer, micro_batches, k)


def grad_logging_forward(model, loss_fn, optimizer, micro_batches, k):
    """A logging forward with gradients on builds a second graph per micro-batch."""
    for i, (x, y) in enumerate(micro_batches):
        (loss_fn(model(x), y) * _share(x, micro_batches, i, k)).backward()
        print_me = loss_fn(model(x), y).item()  # noqa: F841
        if _end_of_group(i, len(micro_batches), k):
            optimizer.step()
            optimizer.zero_grad()


def _add_into_grad(params, grads):
    for p, g in zip(params, grads):
        p.grad = g if p.grad is None else p.grad + g


def grad_summed_assigned(model, loss_fn, optimizer, micro_batches, k):
    """Not accumulation: one torch.autograd.grad over the group's summed losses, assigned to .grad."""
    params = list(model.parameters())
    for group in (micro_batches[s:s + k] for s in range(0, len(micro_batches), k)):
        total = sum(len(x) for x, _ in group)
        grads = torch.autograd.grad(sum(loss_fn(model(x), y) * len(x) / total for x, y in group), params)
        for p, g in zip(params, grads):
            p.grad = g
        optimizer.step()


def grad_summed_added(model, loss_fn, optimizer, micro_batches, k):
    """Not accumulation: the same, added into .grad (kept at zeros by zero_grad(set_to_none=False))."""
    params = list(model.parameters())
    optimizer.zero_grad(set_to_none=False)
    for group in (micro_batches[s:s + k] for s in range(0, len(micro_batches), k)):
        losses = [loss_fn(model(x), y) * len(x) / sum(len(xg) for xg, _ in group) for x, y in group]
        _add_into_grad(params, torch.autograd.grad(torch.stack(losses).sum(), params))
        optimizer.step()
        optimizer.zero_grad(set_to_none=False)


def grad_per_micro_batch(model, loss_fn, optimizer, micro_batches, k):
    """Accumulation by hand: torch.autograd.grad once per micro-batch, each result added into .grad."""
    params, n = list(model.parameters()), len(micro_batches)
    for i, (x, y) in enumerate(micro_batches):
        _add_into_grad(params, torch.autograd.grad(loss_fn(model(x), y) * _share(x, micro_batches, i, k), params))
        if _end_of_group(i, n, k):
            optimizer.step()
            optimizer.zero_grad()


WRONG_LOOPS = {
    "seed's (i - 1) % k": (loop(step_when=lambda i, n, k: (i - 1) % k == 0, scale="k"), "(i - 1) % k == 0"),
    "i % k == 0": (loop(step_when=lambda i, n, k: i % k == 0), "i % k == 0 is true at i = 0"),
    "one late": (loop(step_when=lambda i, n, k: (i % k == 0 and i > 0) or i + 1 == n), "one micro-batch late"),
    "(i + 1) % k drops the tail": (loop(step_when=lambda i, n, k: (i + 1) % k == 0), "never reach an optimizer step"),
    "no scaling": (loop(scale="none"), "10 times the full-batch one"),
    "tail divided by k": (loop(scale="k"), "group's real size"),
    "scaled twice": (loop(scale="k twice"), "divided by k twice"),
    "no zero_grad": (loop(zero="never"), "zero_grad"),
    "tail left in .grad": (leaves_the_tail_in_grad, "the next epoch's first update adds it"),
    "short micro-batch weighed as others": (loop(scale="group"), "len(x) / (samples in its group)"),
    "tuned to 4 samples": (loop(scale="fixed 4"), "len(x) / (samples in its group)"),
    "summed losses, one backward": (summed_losses, "one backward() went through the losses of 10 micro-batches"),
    "concatenated outputs": (concatenated_outputs, "concatenated the outputs of 10 micro-batches"),
    "concatenated inputs": (concatenated_inputs, "40 samples at once"),
    "never steps": (loop(step_when=lambda i, n, k: False), "never called optimizer.step()"),
    "its own optimizer": (own_optimizer, "never called optimizer.step()"),
    "no backward": (no_backward, "zero gradient"),
    "k hard-coded to 10": (hard_coded_k, "full-batch training steps after 4, 8, 12"),
    "n hard-coded to 25": (hard_coded_n, "never reach an optimizer step"),
    "logging forward with gradients": (grad_logging_forward, "ran the model 50 times with gradients on"),
    "zero_grad at the top of every micro-batch": (loop(zero="every micro-batch"), "wipes what you accumulated"),
    "every micro-batch assumed as large as the first": (loop(scale="first size"),
                                                         "hold 4, 2, 5, 3 samples"),
    "summed losses, one autograd.grad, assigned to .grad": (
        grad_summed_assigned, "one torch.autograd.grad call went through the losses of 10 micro-batches"),
    "summed losses, one autograd.grad, added into .grad": (
        grad_summed_added, "one torch.autograd.grad call went through the losses of 10 micro-batches"),
}


@pytest.mark.parametrize("name", list(WRONG_LOOPS))
def test_04_wrong_loops_fail_with_the_hint_for_their_mistake(name):
    fn, words = WRONG_LOOPS[name]
    fb = ex04.check_training_loop(fn)
    assert _is_wrong_with(fb, words), fb.message


def test_04_autograd_grad_loop_hint_says_to_compute_once_per_micro_batch():
    fb = ex04.check_training_loop(grad_summed_assigned)
    assert _is_wrong_with(fb, "once per micro-batch") and "does not undo that" in fb.message, fb.message


def test_04_non_accumulating_loops_have_the_right_gradient_and_still_fail():
    """The reason they need their own detection: compared by numbers alone, they are full-batch training."""
    for fn in (summed_losses, concatenated_outputs, grad_summed_assigned, grad_summed_added):
        batches, model = ex04._data((4,) * 25, 0)
        ref, _ = ex04._reference(model, batches, 10)
        run = ex04._run_learner(fn, (4,) * 25, 0, 10)
        assert run.steps.positions == ref.positions
        assert all(ex04._near(g, r) for g, r in zip(run.steps.grads[0], ref.grads[0]))
        assert run.passes.most_outputs_per_backward == 10
        assert not ex04.check_training_loop(fn).passed


RIGHT_LOOPS = {
    "worked solution's form": loop(),
    "zero_grad at the start of each group": loop(zero="group start"),
    "zero_grad before the loop and after each step, keeping zeros": loop(zero="before loop"),
    "enumerate from 1, sum-reduced loss": enumerate_from_one,
    "groups cut first": by_groups,
    "extra logging forward under no_grad": loop(logging="no_grad"),
    "extra logging forward in inference mode": loop(logging="inference_mode"),
    "torch.autograd.grad per micro-batch, added into .grad": grad_per_micro_batch,
    "model.forward(x) instead of model(x)": loop(call="model.forward(x)"),
    "sum-reduced, divided once at the step by the samples counted": divide_at_step,
}


@pytest.mark.parametrize("name", list(RIGHT_LOOPS))
def test_04_right_loops_written_differently_pass(name):
    fb = ex04.check_training_loop(RIGHT_LOOPS[name])
    assert fb.passed, fb.message


def _raises(exc):
    def train_epoch(model, loss_fn, optimizer, micro_batches, k):
        raise exc

    return train_epoch


@pytest.mark.parametrize("answer", [
    _raises(StopIteration()), _raises(RecursionError("deep")), _raises(BrokenMessage()), _raises(AssertionError()),
    lambda *args: (_ for _ in ()).throw(ValueError("generator")), print, type, nn.Linear(3, 1), "train_epoch",
    torch.zeros(2, device="meta"),
], ids=["StopIteration", "RecursionError", "broken-str", "AssertionError", "generator", "print", "type", "module",
        "string", "meta"])
def test_04_loop_check_never_raises(answer):
    fb = ex04.check_training_loop(answer)
    assert fb.status in ("wrong", "malformed")


# =========================================================================== exercise 1: more loops


def _loop(condition, scale="group", zero_grad=True):
    """A learner's train_epoch built from a step condition and a loss scaling."""

    def train_epoch(model, loss_fn, optimizer, micro_batches, k):
        n = len(micro_batches)
        for i, (x, y) in enumerate(micro_batches):
            start = (i // k) * k
            group = micro_batches[start:start + k]
            if scale == "samples":
                loss = loss_fn(model(x), y) * len(x) / sum(len(g) for g, _ in group)
            elif scale == "group":
                loss = loss_fn(model(x), y) / len(group)
            elif scale == "k":
                loss = loss_fn(model(x), y) / k
            else:
                loss = loss_fn(model(x), y)
            loss.backward()
            if condition(i, n, k):
                optimizer.step()
                if zero_grad:
                    optimizer.zero_grad()

    return train_epoch


def test_training_loop_check_passes_a_correct_loop():
    fb = ex04.check_training_loop(_loop(CORRECT, "samples"))
    assert fb.passed, fb.message


@pytest.mark.parametrize("fn, words", [
    (_loop(SEED, "k"), "(i - 1) % k == 0"),
    (_loop(PLUS_ONE, "k"), "never reach an optimizer step"),
    (_loop(CORRECT, "k"), "group's real size"),
    (_loop(CORRECT, "none"), "10 times the full-batch one"),
    (_loop(CORRECT, "group", zero_grad=False), "zero_grad"),
    (_loop(CORRECT, "group"), "len(x) / (samples in its group)"),
    (_loop(lambda i, n, k: False, "group"), "never called optimizer.step()"),
])
def test_training_loop_check_explains_each_mistake(fn, words):
    fb = ex04.check_training_loop(fn)
    assert fb.status == "wrong" and words in fb.message, fb.message


def test_training_loop_check_reports_a_crash_and_bad_forms():
    def boom(model, loss_fn, optimizer, micro_batches, k):
        raise RuntimeError("oops")

    fb = ex04.check_training_loop(boom)
    assert fb.status == "wrong" and "RuntimeError: oops" in fb.message

    def whole_batch(model, loss_fn, optimizer, micro_batches, k):
        x = torch.cat([x for x, _ in micro_batches])
        y = torch.cat([y for _, y in micro_batches])
        loss_fn(model(x), y).backward()
        optimizer.step()

    assert "samples at once" in ex04.check_training_loop(whole_batch).message
    assert ex04.check_training_loop(...).status == "unanswered"
    assert ex04.check_training_loop(None).status == "unanswered"
    assert ex04.check_training_loop(42).status == "malformed"
    assert ex04.check_training_loop(lambda model: None).status == "malformed"


# ================================================================== exercise 2: step counts


@pytest.mark.parametrize("answer", [
    (7, 6, 7), [7, 6, 7], np.array([7, 6, 7]), torch.tensor([7, 6, 7]), (np.int64(7), torch.tensor(6), 7.0),
    (Fraction(7), 6, 7),
], ids=["tuple", "list", "numpy", "tensor", "mixed", "fraction"])
def test_04_step_counts_right_in_any_number_type(answer):
    assert ex04.check_step_counts(answer).passed


@pytest.mark.parametrize("answer, words", [
    ((8, 6, 7), "(i - 1) % 8 == 0 holds at i = 1, 9, 17"),
    ((6, 6, 7), "(i - 1) % 8 == 0 holds at i = 1, 9, 17"),  # counted as if it stepped only at full groups
    ((7, 7, 7), "the last 2 micro-batches form no full group"),
    ((7, 6, 6), "ceil(50 / 8)"),  # floor instead of ceil
])
def test_04_step_counts_wrong_get_their_hint(answer, words):
    assert _is_wrong_with(ex04.check_step_counts(answer), words)


@pytest.mark.parametrize("answer", [
    "7,6,7", (7.5, 6, 7), (True, 6, 7), [7, 6], (float("nan"), 6, 7), torch.tensor([[7, 6, 7]]),
    torch.zeros(3, device="meta"), torch.tensor([7, 6, 7]).to_sparse(), {7, 6}, 7, object(),
])
def test_04_step_counts_malformed_never_raises(answer):
    assert ex04.check_step_counts(answer).status == "malformed"


def test_step_counts_check():
    assert ex04.check_step_counts((7, 6, 7)).passed
    assert ex04.check_step_counts(...).status == "unanswered"
    for bad in ([7, 6], (7.5, 6, 7), "7,6,7", (True, 6, 7)):
        assert ex04.check_step_counts(bad).status == "malformed"
    fb = ex04.check_step_counts((8, 6, 7))
    assert fb.status == "wrong" and "(i - 1) % 8 == 0 holds at i = 1, 9, 17" in fb.message
    fb = ex04.check_step_counts((7, 7, 7))
    assert fb.status == "wrong" and "the last 2 micro-batches form no full group" in fb.message
    fb = ex04.check_step_counts((7, 6, 6))
    assert fb.status == "wrong" and "ceil(50 / 8)" in fb.message
