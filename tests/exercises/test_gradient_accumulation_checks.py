"""Notebook 04's exercise checks (gradient accumulation) against answers a learner could plausibly write.

For every exercise: (a) wrong answers, each of which must not pass and must get a hint naming its actual
mistake -- in particular loops that do not accumulate at all (one backward() over a group's summed losses,
outputs concatenated into one loss) although their gradient is right; (b) right answers written differently
from the worked solution, which must pass; (c) answers and learner code that must not make a check raise.
"""

import inspect
import itertools
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from learner_code import BrokenMessage
from notebook_cells import run_cells
from torch import nn

from autograd_lab.exercises import gradient_accumulation as ex04
from autograd_lab.exercises import trust
from autograd_lab.exercises.diagnoses import diagnose

SEED = lambda i, n, k: (i - 1) % k == 0  # noqa: E731  -- the seed's step condition
PLUS_ONE = lambda i, n, k: (i + 1) % k == 0  # noqa: E731
CORRECT = lambda i, n, k: (i + 1) % k == 0 or i + 1 == n  # noqa: E731


NB = "04_gradient_accumulation"


def _is_wrong_with(fb, words):
    return fb.status == "wrong" and words in fb.message


def _notebook_recipes():
    """The notebook's data, copied recipe and full-batch training, from its own cells."""
    return run_cells(NB, "recipe-data", "recipe-seed", "recipe-ref", torch=torch, nn=nn)


def _recording(optimizer, model):
    """``optimizer`` with each step noting the gradient it used, in the list returned beside it."""
    grads, real_step = [], optimizer.step

    def step():
        grads.append(torch.cat([p.grad.reshape(-1) for p in model.parameters()]).clone())
        real_step()

    optimizer.step = step
    return optimizer, grads


def test_the_full_batch_reference_is_the_notebooks_full_batch_training_on_fresh_problems():
    """The check's reference beside the notebook's own full_batch_training, for two epochs from the same start on
    data drawn afresh, micro-batches of unequal sizes and a short last group: the same gradient at every step, and
    the same parameters at the end."""
    full_batch_training = _notebook_recipes()["full_batch_training"]
    seed = trust.fresh_seed()
    for k, sizes in ((4, (4, 2, 5, 3, 6, 1, 4, 4, 2, 5, 3)), (3, (2,) * 7)):
        batches, model = ex04._data(sizes, seed)
        ref, ref_model = ex04._reference(model, batches, k)
        opt, grads = _recording(torch.optim.SGD(model.parameters(), lr=ex04._LR), model)
        for _ in range(ex04._EPOCHS):
            full_batch_training(model, opt, batches, k)
        torch.testing.assert_close(grads, ref.grads[0] + ref.grads[1], msg=f"k = {k}, seed {seed}")
        torch.testing.assert_close(list(model.parameters()), list(ref_model.parameters()), msg=f"seed {seed}")


def test_the_step_counts_reference_is_the_notebooks_copied_recipe_over_two_epochs():
    """What .grad holds at each step of two epochs with nothing reset between them, counted from the groups the
    notebook's own copied_recipe records, beside the check's count, at the exercise's n and k and at others."""
    recipes = _notebook_recipes()
    for n, k in ((ex04.STEP_COUNT_TASK["n"], ex04.STEP_COUNT_TASK["k"]), (25, 10), (9, 2), (3, 5), (10, 1), (1, 5)):
        model, optimizer = recipes["fresh_model"](seed=trust.fresh_seed() % 2**32)
        micro_batches = recipes["make_micro_batches"](n, seed=trust.fresh_seed() % 2**32)
        held, counts = 0, []
        for epoch in range(2):
            groups, pending = recipes["copied_recipe"](model, optimizer, micro_batches, k)
            if epoch == 0:
                assert [group[-1] for group in groups] == ex04._copied_steps(n, k), (n, k)
            counts += [held + len(groups[0])] + [len(g) for g in groups[1:]] if groups else []
            held = len(pending) + (0 if groups else held)
        assert counts == ex04._held_at_each_step(n, k), (n, k)


def test_the_notebooks_own_copied_loop_gets_the_hint_that_names_it():
    """Exercise 1's starting cell, the copied loop as the learner receives it, has the signature the check calls and
    is diagnosed as the copied recipe."""
    train_epoch = run_cells(NB, "ex1", torch=torch, ex=ex04)["train_epoch"]
    assert f"{train_epoch.__name__}{inspect.signature(train_epoch)}" == ex04._SIGNATURE
    assert _is_wrong_with(ex04.check_training_loop(train_epoch), "the copied recipe's (i - 1) % k == 0")


# =========================================================================== exercise 1: the training loop


def _numbered(micro_batches):
    """(i, x, y, last) for each micro-batch of a list or a stream, one micro-batch read ahead to know the last."""
    it = iter(micro_batches)
    ahead, i = next(it, None), 0
    while ahead is not None:
        x, y = ahead
        ahead = next(it, None)
        yield i, x, y, ahead is None
        i += 1


def _groups(micro_batches, k):
    """The micro-batches in groups of k (the last may be short), each group read from the stream only when the one
    before it is done: its items are (i, x, y, last)."""
    group = []
    for item in _numbered(micro_batches):
        group.append(item)
        if len(group) == k or item[3]:
            yield group
            group = []


def _end_of_group(i, n, k):
    return (i + 1) % k == 0 or i + 1 == n


def loop(*, step_when=_end_of_group, scale="share", zero="after step", logging=None, call="model(x)"):
    """A learner's train_epoch that works on a stream: it holds one group's micro-batches (data, not graphs) to
    know their sizes, and runs one backward per micro-batch, with a chosen step condition, scaling and reset.
    ``step_when(i, n, k)`` gets n = i + 1 at the last micro-batch, else None (a stream tells its end only there)."""

    def train_epoch(model, loss_fn, optimizer, micro_batches, k):
        first = None  # the epoch's first micro-batch's samples
        if zero == "before loop":
            optimizer.zero_grad()
        for group in _groups(micro_batches, k):
            total = sum(len(x) for _, x, _, _ in group)
            for i, x, y, last in group:
                first = len(x) if first is None else first
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
                factor = {"share": len(x) / total, "k": 1 / k, "none": 1.0, "k twice": 1 / k**2,
                          "group": 1 / len(group), "fixed 4": len(x) / (4 * len(group)),
                          # every micro-batch of the group but its last counted as large as the epoch's first
                          "first size": len(x) / (first * (len(group) - 1) + len(group[-1][1]))}[scale]
                (loss * factor).backward()
                if step_when(i, i + 1 if last else None, k):
                    optimizer.step()
                    if zero in ("after step", "before loop", "every micro-batch"):
                        optimizer.zero_grad(set_to_none=zero == "after step")

    return train_epoch


def enumerate_from_one(model, loss_fn, optimizer, micro_batches, k):
    """Counted from 1, sum-reduced, the last step after the loop: nothing is read ahead."""
    seen = 0
    for i, (x, y) in enumerate(micro_batches, start=1):
        F.mse_loss(model(x), y, reduction="sum").backward()
        seen += len(x)
        if i % k == 0:
            for p in model.parameters():
                p.grad.div_(seen)
            optimizer.step()
            optimizer.zero_grad()
            seen = 0
    if seen:
        for p in model.parameters():
            p.grad.div_(seen)
        optimizer.step()
        optimizer.zero_grad()


def by_groups(model, loss_fn, optimizer, micro_batches, k):
    """Cut the stream into groups as it comes (itertools.islice), then accumulate each group."""
    stream = iter(micro_batches)
    while group := list(itertools.islice(stream, k)):
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
    for group in _groups(micro_batches, k):
        total = sum(len(x) for _, x, _, _ in group)
        for _, x, y, _ in group:
            (loss_fn(model(x), y) * len(x) / total).backward()
        optimizer.step()
        if len(group) == k:
            optimizer.zero_grad()


def divide_at_step(model, loss_fn, optimizer, micro_batches, k):
    """The worked solution's way: sum-reduce each micro-batch, count the samples as they come, divide .grad once
    before the step, and step once more after the loop when the stream ended inside a group."""

    def step(samples):
        for p in model.parameters():
            p.grad /= samples
        optimizer.step()
        optimizer.zero_grad()

    samples = 0
    for i, (x, y) in enumerate(micro_batches):
        (loss_fn(model(x), y) * len(x)).backward()  # the micro-batch's sum of squared errors
        samples += len(x)
        if (i + 1) % k == 0:
            step(samples)
            samples = 0
    if samples:
        step(samples)


def counted_in_group(model, loss_fn, optimizer, micro_batches, k):
    """No index at all: micro-batches and samples counted since the last step, the mean loss weighed at the end."""
    in_group, samples = 0, 0
    for x, y in micro_batches:
        (loss_fn(model(x), y) * len(x)).backward()
        in_group, samples = in_group + 1, samples + len(x)
        if in_group == k:
            torch._foreach_div_([p.grad for p in model.parameters()], samples)
            optimizer.step()
            optimizer.zero_grad()
            in_group, samples = 0, 0
    if in_group:
        torch._foreach_div_([p.grad for p in model.parameters()], samples)
        optimizer.step()
        optimizer.zero_grad()


def looks_one_ahead(model, loss_fn, optimizer, micro_batches, k):
    """next() one micro-batch ahead to know the last; the gradient divided at the step."""
    it = iter(micro_batches)
    current, i, samples = next(it, None), 0, 0
    while current is not None:
        x, y = current
        current = next(it, None)
        F.mse_loss(model(x), y, reduction="sum").backward()
        samples += len(x)
        if (i + 1) % k == 0 or current is None:
            for p in model.parameters():
                p.grad *= 1 / samples
            optimizer.step()
            optimizer.zero_grad()
            samples = 0
        i += 1


def decays_by_hand(model, loss_fn, optimizer, micro_batches, k):
    """divide_at_step's loop, each step followed by a weight decay of its own: every update's gradient is right at
    the parameters it was taken at, and only the parameters show that the steps are not plain SGD's."""
    step = optimizer.step

    def step_and_decay():
        step()
        with torch.no_grad():
            for p in model.parameters():
                p.mul_(0.99)

    optimizer.step = step_and_decay
    try:
        divide_at_step(model, loss_fn, optimizer, micro_batches, k)
    finally:
        optimizer.step = step


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
    for group in _groups(micro_batches, k):
        total = sum(len(x) for _, x, _, _ in group)
        for _, x, y, _ in group:
            (loss_fn(model(x), y) * len(x) / total).backward()
            print_me = loss_fn(model(x), y).item()  # noqa: F841
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
    params = list(model.parameters())
    for group in _groups(micro_batches, k):
        total = sum(len(x) for _, x, _, _ in group)
        for _, x, y, _ in group:
            _add_into_grad(params, torch.autograd.grad(loss_fn(model(x), y) * len(x) / total, params))
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
    "a weight decay of its own after each step": (decays_by_hand, "yet the final parameters differ"),
    "every micro-batch assumed as large as the first": (loop(scale="first size"),
                                                         "hold 4, 2, 5, 3 samples"),
    "summed losses, one autograd.grad, assigned to .grad": (
        grad_summed_assigned, "one torch.autograd.grad call went through the losses of 10 micro-batches"),
    "summed losses, one autograd.grad, added into .grad": (
        grad_summed_added, "one torch.autograd.grad call went through the losses of 10 micro-batches"),
}


def list_based(model, loss_fn, optimizer, micro_batches, k):
    """The old worked solution: right on a list, but it asks the epoch for its len() and slices its groups."""
    n = len(micro_batches)
    for i, (x, y) in enumerate(micro_batches):
        group = micro_batches[(i // k) * k:(i // k) * k + k]
        (loss_fn(model(x), y) * len(x) / sum(len(xg) for xg, _ in group)).backward()
        if (i + 1) % k == 0 or i + 1 == n:
            optimizer.step()
            optimizer.zero_grad()


def sliced_without_len(model, loss_fn, optimizer, micro_batches, k):
    """No len(), but each group taken as a slice of the epoch."""
    start = 0
    while group := micro_batches[start:start + k]:
        total = sum(len(x) for x, _ in group)
        for x, y in group:
            (loss_fn(model(x), y) * len(x) / total).backward()
        optimizer.step()
        optimizer.zero_grad()
        start += k


def listed_first(model, loss_fn, optimizer, micro_batches, k):
    """Right, once the whole stream is in a list: it holds the epoch before it trains on any of it."""
    list_based(model, loss_fn, optimizer, list(micro_batches), k)


def counted_first(model, loss_fn, optimizer, micro_batches, k):
    """A first pass to note the sizes, then the training pass: right on a list; a generator is empty the second time."""
    sizes = [len(x) for x, _ in micro_batches]
    for i, (x, y) in enumerate(micro_batches):
        (loss_fn(model(x), y) * len(x) / sum(sizes[(i // k) * k:(i // k) * k + k])).backward()
        if (i + 1) % k == 0 or i + 1 == len(sizes):
            optimizer.step()
            optimizer.zero_grad()


def mean_of_means_on_a_stream(model, loss_fn, optimizer, micro_batches, k):
    """Stream-ready, but the group's gradient divided by its micro-batches, not its samples: a mean of means."""
    in_group = 0
    for x, y in micro_batches:
        loss_fn(model(x), y).backward()
        in_group += 1
        if in_group == k:
            torch._foreach_div_([p.grad for p in model.parameters()], in_group)
            optimizer.step()
            optimizer.zero_grad()
            in_group = 0
    if in_group:
        torch._foreach_div_([p.grad for p in model.parameters()], in_group)
        optimizer.step()
        optimizer.zero_grad()


def no_step_after_the_stream(model, loss_fn, optimizer, micro_batches, k):
    """Stream-ready, divided at the step, but nothing steps the group the stream ends in."""
    samples = 0
    for i, (x, y) in enumerate(micro_batches):
        (loss_fn(model(x), y) * len(x)).backward()
        samples += len(x)
        if (i + 1) % k == 0:
            torch._foreach_div_([p.grad for p in model.parameters()], samples)
            optimizer.step()
            optimizer.zero_grad()
            samples = 0


WRONG_LOOPS.update({
    "len() of a stream": (list_based, "have no len()"),
    "a stream sliced": (sliced_without_len, "cannot be indexed or sliced"),
    "a stream put in a list first": (listed_first, "took 10 micro-batches from the stream"),
    "a stream counted, then read again": (counted_first, "a generator is empty the second time"),
    "a stream, a mean of micro-batch means": (mean_of_means_on_a_stream, "len(x) / (samples in its group)"),
    "a stream, no step when it ends": (no_step_after_the_stream, "never reach an optimizer step"),
})


def test_04_a_loop_that_treats_the_stream_as_a_list_is_told_so_by_name():
    """The len()/index hint names the stream, says its length is known only at its end, and how to do without."""
    for fn in (list_based, sliced_without_len):
        fb = ex04.check_training_loop(fn)
        assert fb.status == "wrong" and "a stream of n =" in fb.message, fb.message
        assert "known only when the stream ends" in fb.message and "divide .grad" in fb.message, fb.message


def test_04_the_stream_problems_hand_a_generator_and_the_list_problems_come_first():
    streams = [stream for _, _, stream in ex04._SCENARIOS]
    assert any(streams) and not all(streams)
    assert streams == sorted(streams)  # every list problem before every stream: a loop's own mistake is named first
    seen = []

    def look(model, loss_fn, optimizer, micro_batches, k):
        seen.append(type(micro_batches).__name__)
        divide_at_step(model, loss_fn, optimizer, micro_batches, k)

    assert ex04.check_training_loop(look).passed
    assert set(seen[-2 * sum(streams):]) == {"generator"} and set(seen[:-2 * sum(streams)]) == {"list"}
    tails = [sizes for k, sizes, stream in ex04._SCENARIOS if stream and len(sizes) % k]
    assert tails and any(len(set(sizes)) > 1 for sizes in tails)  # a stream that ends inside a group, unequal sizes


def test_04_holding_one_group_of_a_stream_is_not_reading_it_whole():
    """The read-ahead hint is for a loop that holds the stream whole, not one that holds a group and peeks one more."""
    fb = ex04.check_training_loop(loop())  # a group of k held, and one micro-batch read ahead to know the last
    assert fb.passed, fb.message
    run = ex04._run_learner(loop(), (4,) * 10, 0, 4, stream=True)
    assert run.read_ahead == 4 + 1
    run = ex04._run_learner(listed_first, (4,) * 10, 0, 4, stream=True)
    assert run.read_ahead == 10


def test_04_the_worked_solution_passes():
    namespace = {"ex": ex04}
    exec((Path(__file__).parents[2] / "notebooks" / "solutions" / "04_training_loop.py").read_text(), namespace)
    assert ex04.check_training_loop(namespace["train_epoch"]).passed


@pytest.mark.parametrize("name", list(WRONG_LOOPS))
def test_04_wrong_loops_fail_with_the_hint_for_their_mistake(name):
    fn, words = WRONG_LOOPS[name]
    fb = ex04.check_training_loop(fn)
    assert _is_wrong_with(fb, words), fb.message


@pytest.mark.parametrize("row", ex04._LOOP_DIAGNOSES, ids=lambda row: row.name)
def test_04_every_loop_row_names_its_own_loop(row):
    """Each row's loop, run as a learner's answer, is refused, and where it first departs from full-batch training
    that row is the first to explain it: no row hides behind an earlier one."""
    assert not ex04.check_training_loop(row.variant).passed
    for k, sizes, _ in ex04._SCENARIOS:
        seed = trust.fresh_seed()
        batches, model = ex04._data(sizes, seed)
        problem = ex04._Problem(k, sizes, seed, ex04._reference(model, batches, k)[0])
        steps, _ = ex04._run_ours(row.variant, model, batches, k)
        at = ex04._departure(steps, problem)
        if at is not None:
            break
    else:
        raise AssertionError(f"{row.name}: the loop never departs from full-batch training")
    assert diagnose(ex04._LOOP_DIAGNOSES, lambda variant: ex04._departs_alike(problem, steps, at, variant)) is row


def test_04_each_update_is_held_to_the_full_batch_gradient_at_its_own_parameters():
    """``_Problem.expected`` is full-batch training's gradient where a run stands: for the reference run it is the
    gradient that run used, bit for bit, and for a right loop, whose parameters drift from the reference run's by
    rounding, it is taken at the loop's own parameters, not at the reference's."""
    k, sizes = 4, (4, 2, 5, 3, 6, 1, 4, 4, 2, 5, 3)
    seed = trust.fresh_seed()
    batches, model = ex04._data(sizes, seed)
    problem = ex04._Problem(k, sizes, seed, ex04._reference(model, batches, k)[0])
    ref = problem.ref
    assert all(torch.equal(problem.expected(ref, epoch, j), g)
               for epoch in range(ex04._EPOCHS) for j, g in enumerate(ref.grads[epoch]))
    steps, _ = ex04._run_ours(divide_at_step, model, batches, k)
    moved = steps.params[1][0] + 1e-3  # as if the loop stood elsewhere: the gradient it must use moves along
    steps.params[1][0] = moved
    assert not torch.equal(problem.expected(steps, 1, 0), ref.grads[1][0])
    batches, start = ex04._data(sizes, seed)
    torch.nn.utils.vector_to_parameters(moved, start.parameters())
    group = batches[:k]
    F.mse_loss(start(torch.cat([x for x, _ in group])), torch.cat([y for _, y in group])).backward()
    assert torch.equal(problem.expected(steps, 1, 0), ex04._flat_grad(start))


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
    "a group held, one micro-batch read ahead": loop(),
    "zero_grad at the start of each group": loop(zero="group start"),
    "zero_grad before the loop and after each step, keeping zeros": loop(zero="before loop"),
    "enumerate from 1, sum-reduced loss": enumerate_from_one,
    "groups cut first": by_groups,
    "extra logging forward under no_grad": loop(logging="no_grad"),
    "extra logging forward in inference mode": loop(logging="inference_mode"),
    "torch.autograd.grad per micro-batch, added into .grad": grad_per_micro_batch,
    "model.forward(x) instead of model(x)": loop(call="model.forward(x)"),
    "sum-reduced, divided once at the step by the samples counted": divide_at_step,
    "no index: micro-batches and samples counted since the last step": counted_in_group,
    "next() one micro-batch ahead to know the last": looks_one_ahead,
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


def test_training_loop_check_passes_lists_then_names_len_on_a_stream():
    """A loop right on every list problem, that asks for len(): it gets as far as the first stream."""
    fb = ex04.check_training_loop(_loop(CORRECT, "samples"))
    assert fb.status == "wrong" and "a stream of n =" in fb.message and "has no len()" in fb.message, fb.message


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


# ================================================================== exercise 2: what each step adds up

RIGHT_COUNTS = [2, 8, 8, 8, 8, 9, 8, 8, 8, 8]


def test_04_step_count_task_is_one_the_notebook_never_prints():
    """n = 41 is beyond the widget's n slider (1-40), and the notebook never runs a second epoch of the copied loop."""
    assert ex04.STEP_COUNT_TASK == {"n": 41, "k": 8}


def test_04_the_counts_need_the_tail_of_the_first_epoch_not_only_the_printed_formula():
    """(n - 2) % k, the formula the notebook prints, gives the tail (7); the answer is where it goes: into the second
    epoch's first step, with that step's own 2."""
    n, k = ex04.STEP_COUNT_TASK["n"], ex04.STEP_COUNT_TASK["k"]
    assert ex04._held_at_each_step(n, k) == RIGHT_COUNTS
    assert RIGHT_COUNTS[5] == (n - 2) % k + 2 != (n - 2) % k


@pytest.mark.parametrize("answer", [
    RIGHT_COUNTS, tuple(RIGHT_COUNTS), np.array(RIGHT_COUNTS), torch.tensor(RIGHT_COUNTS),
    [np.int64(2), torch.tensor(8), 8.0, Fraction(8), 8, 9, 8, 8, 8, 8],
    ([2, 8, 8, 8, 8], [9, 8, 8, 8, 8]), np.array(RIGHT_COUNTS).reshape(2, 5), torch.tensor(RIGHT_COUNTS).reshape(2, 5),
], ids=["list", "tuple", "numpy", "tensor", "mixed", "one list per epoch", "numpy 2x5", "tensor 2x5"])
def test_04_step_counts_right_in_any_number_type(answer):
    assert ex04.check_step_counts(answer).passed


@pytest.mark.parametrize("answer, words", [
    ([2, 8, 8, 8, 8, 2, 8, 8, 8, 8], "nothing resets .grad between epochs: the 7 micro-batches after the last step"),
    ([2, 8, 8, 8, 8, 7, 8, 8, 8, 8], ".grad also still holds the 7 micro-batches"),
    ([1, 8, 8, 8, 8, 8, 8, 8, 8, 8], "the first step comes at i = 1 (counted from 0), so .grad then holds 2"),
    ([8, 8, 8, 8, 8, 9, 8, 8, 8, 8], "the first step comes at i = 1"),  # the (i + 1) loop's steps
    ([2, 8, 8, 8, 8], "5 steps an epoch, 10 in 2 epochs, and your list has 5 counts"),  # one epoch only
    ([2, 8, 8, 8, 8, 7, 9, 8, 8, 8, 8, 7], "(0 - 1) % k is k - 1"),  # the tail counted as a step of its own
    ((5, 5, 6), "at i = 1, 9, 17, ..."),  # three loops' step positions, not .grad counts
    ([2, 8, 8, 7, 8, 9, 8, 8, 8, 8], "step 4: between two steps of one epoch, k = 8 micro-batches run"),
    ([], "your list has 0 counts"),
])
def test_04_step_counts_wrong_get_their_hint(answer, words):
    assert _is_wrong_with(ex04.check_step_counts(answer), words), ex04.check_step_counts(answer).message


@pytest.mark.parametrize("row", ex04._COUNT_DIAGNOSES, ids=lambda row: row.name)
def test_04_every_step_count_belief_is_named(row):
    n, k = ex04.STEP_COUNT_TASK["n"], ex04.STEP_COUNT_TASK["k"]
    steps = ex04._copied_steps(n, k)
    fb = ex04.check_step_counts(row.variant(n, k))
    assert _is_wrong_with(fb, row.says(steps=steps, left=n - 1 - steps[-1])), fb


@pytest.mark.parametrize("answer", [
    "2,8,8", (5.5, 8), (True, 8), (float("nan"), 8), torch.tensor([[[2, 8]]]), torch.zeros(3, device="meta"),
    torch.tensor(RIGHT_COUNTS).to_sparse(), {2, 8}, 5, object(), torch.zeros(10**6), list(range(10**6)),
    [[2, 8], "x"],
])
def test_04_step_counts_malformed_never_raises(answer):
    assert ex04.check_step_counts(answer).status == "malformed"


def test_step_counts_check():
    fb = ex04.check_step_counts(RIGHT_COUNTS)
    assert fb.passed and "leaves the last 7 micro-batches of an epoch in .grad" in fb.message, fb.message
    assert ex04.check_step_counts(...).status == "unanswered"
    assert "e.g." not in ex04.check_step_counts(...).message  # no example of the answer's shape
    assert not any(str(c) in ex04.check_step_counts(...).message for c in (9, 41))


def test_step_counts_check_at_other_n_and_k():
    assert ex04.check_step_counts([1] * 20, n=10, k=1).passed  # k = 1: every micro-batch is a step, no tail
    assert ex04.check_step_counts([2, 2, 2, 2, 3, 2, 2, 2], n=9, k=2).passed  # one left over, into epoch 2
    assert ex04.check_step_counts([2, 3], n=3, k=5).passed  # one step an epoch
    assert ex04.check_step_counts([], n=1, k=5).passed  # never a step
    assert not ex04.check_step_counts([1], n=1, k=5).passed


def test_04_the_worked_step_count_solution_passes():
    namespace = {"ex": ex04}
    exec((Path(__file__).parents[2] / "notebooks" / "solutions" / "04_step_counts.py").read_text(), namespace)
    assert namespace["answer"] == RIGHT_COUNTS and ex04.check_step_counts(namespace["answer"]).passed


def test_04_the_worked_loop_solution_leaves_a_parameter_without_grad_alone():
    """Its divide_and_step divides only the .grad that exists: a frozen or unused layer keeps None, no TypeError."""
    namespace = {"ex": ex04}
    exec((Path(__file__).parents[2] / "notebooks" / "solutions" / "04_training_loop.py").read_text(), namespace)
    model = nn.ModuleList([nn.Linear(3, 1), nn.Linear(3, 1), nn.Linear(3, 1)])
    used, frozen, unused = model
    frozen.requires_grad_(False)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    batches = [(torch.randn(4, 3), torch.randn(4, 1)) for _ in range(3)]
    namespace["train_epoch"](used, F.mse_loss, optimizer, batches, 2)  # the loss never reaches the other two
    (F.mse_loss(used(batches[0][0]), batches[0][1]) * 4).backward()
    namespace["divide_and_step"](model, optimizer, 4)
    assert frozen.weight.grad is None and unused.weight.grad is None
