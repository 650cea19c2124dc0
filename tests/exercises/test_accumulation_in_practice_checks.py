"""Notebook 07's exercise checks (accumulation in practice) against answers a learner could plausibly write.

For each exercise: wrong answers that must not pass and must get a hint naming their mistake; right answers
written differently from the worked solution that must pass; odd answers that must not make a check raise.
"""

import math
from fractions import Fraction

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from autograd_lab.exercises import accumulation_in_practice as ex


def _wrong_with(fb, words):
    return fb.status == "wrong" and words in fb.message


# =========================================================================== exercise 1: updates per epoch

@pytest.mark.parametrize("answer", [
    (7, 21), [7, 21], (7.0, 21.0), (np.int64(7), torch.tensor(21)), torch.tensor([7, 21]), np.array([7, 21]),
    (math.ceil(50 / 8), 3 * math.ceil(50 / 8)), (-(-50 // 8), Fraction(21)),
])
def test_updates_right_answers_pass(answer):
    assert ex.check_updates_per_epoch(answer).passed


@pytest.mark.parametrize("answer, words", [
    ((6, 18), "rounded down"),                  # 50 // 8: the tail group dropped
    ((50, 150), "counts micro-batches"),        # the scheduler stepped per micro-batch
    ((7, 19), "one epoch into the next"),       # ceil(150 / 8): groups across epochs
    ((7, 7), "How many epochs"),                # forgot the epochs
    ((8, 24), "counting a shorter"),            # some other count
])
def test_updates_wrong_answers_get_their_hint(answer, words):
    fb = ex.check_updates_per_epoch(answer)
    assert _wrong_with(fb, words), fb


@pytest.mark.parametrize("answer", ["7, 21", 7, (7,), (7, 21, 3), (7.5, 21), {7, 21}, {"a": 7}, object(),
                                    (float("nan"), 21), torch.tensor([[7, 21], [1, 2]])])
def test_updates_malformed_answers_are_told_the_form(answer):
    fb = ex.check_updates_per_epoch(answer)
    assert fb.status == "malformed", fb


def test_updates_placeholder_and_other_settings():
    assert ex.check_updates_per_epoch(...).status == "unanswered"
    assert ex.check_updates_per_epoch(None).status == "unanswered"
    assert ex.check_updates_per_epoch((4, 8), n=32, k=8, epochs=2).passed       # no tail: 32 / 8 exactly
    assert not ex.check_updates_per_epoch((7, 21), n=32, k=8, epochs=2).passed


# =========================================================================== exercise 2: the scheduled loop

def _share(micro_batches, i, k, x):
    group = micro_batches[i // k * k:i // k * k + k]
    return len(x) / sum(len(xg) for xg, _ in group)


def solution(model, optimizer, scheduler, micro_batches, k):
    n = len(micro_batches)
    for i, (x, y) in enumerate(micro_batches):
        (F.mse_loss(model(x), y) * _share(micro_batches, i, k, x)).backward()
        if (i + 1) % k == 0 or i + 1 == n:
            optimizer.step()
            scheduler.step()
            optimizer.zero_grad()


def by_groups(model, optimizer, scheduler, micro_batches, k):
    """Written differently: cut the epoch into groups, sum-reduce, one step each."""
    for start in range(0, len(micro_batches), k):
        group = micro_batches[start:start + k]
        total = sum(len(x) for x, _ in group)
        for x, y in group:
            (F.mse_loss(model(x), y, reduction="sum") / total).backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=False)
        scheduler.step()


def counts_updates(model, optimizer, scheduler, micro_batches, k):
    """Written differently: a counter of micro-batches since the last step."""
    pending = []
    for number, (x, y) in enumerate(micro_batches, start=1):
        pending.append((x, y))
        if len(pending) == k or number == len(micro_batches):
            total = sum(len(xp) for xp, _ in pending)
            for xp, yp in pending:
                (F.mse_loss(model(xp), yp) * len(xp) / total).backward()
            optimizer.step()
            scheduler.step()
            model.zero_grad()
            pending = []


def grad_per_micro_batch(model, optimizer, scheduler, micro_batches, k):
    """Written differently: torch.autograd.grad once per micro-batch, each result added into .grad."""
    params, n = list(model.parameters()), len(micro_batches)
    for i, (x, y) in enumerate(micro_batches):
        grads = torch.autograd.grad(F.mse_loss(model(x), y) * _share(micro_batches, i, k, x), params)
        for p, g in zip(params, grads):
            p.grad = g if p.grad is None else p.grad + g
        if (i + 1) % k == 0 or i + 1 == n:
            optimizer.step()
            scheduler.step()
            optimizer.zero_grad()


def logs_without_gradients(model, optimizer, scheduler, micro_batches, k):
    """Written differently: a gradient-free forward over each micro-batch, for a log, besides the solution's."""
    solution(model, optimizer, scheduler, micro_batches, k)
    with torch.no_grad():
        [F.mse_loss(model(x), y).item() for x, y in micro_batches]


@pytest.mark.parametrize("loop", [solution, by_groups, counts_updates, grad_per_micro_batch, logs_without_gradients])
def test_scheduled_loop_right_answers_pass(loop):
    fb = ex.check_scheduled_loop(loop)
    assert fb.passed, fb


def make_loop(*, sched="update", opt="group", scale="share", zero=True):
    def train_epoch(model, optimizer, scheduler, micro_batches, k):
        n = len(micro_batches)
        for i, (x, y) in enumerate(micro_batches):
            factor = _share(micro_batches, i, k, x) if scale == "share" else 1 / k
            (F.mse_loss(model(x), y) * factor).backward()
            end = (i + 1) % k == 0 or i + 1 == n if opt == "group" else True
            if sched == "micro-batch":
                scheduler.step()
            if end:
                if sched == "before":
                    scheduler.step()
                optimizer.step()
                if sched == "update" or (sched == "full groups" and (i + 1) % k == 0):
                    scheduler.step()
                if zero:
                    optimizer.zero_grad()
        if sched == "epoch":
            scheduler.step()
    return train_epoch


@pytest.mark.parametrize("loop, words", [
    (make_loop(sched="micro-batch"), "once per micro-batch"),       # the exercise's loop, unchanged
    (make_loop(sched="before"), "before the first optimizer.step()"),
    (make_loop(sched="full groups"), "should step"),                # forgets the tail group's scheduler step
    (make_loop(sched="epoch"), "should step"),
    (make_loop(sched="never"), "should step"),
    (make_loop(opt="every"), "optimizer stepped"),
    (make_loop(scale="k"), "loss scaling"),                         # / k: the short tail group weighs too little
    (make_loop(zero=False), "zero_grad()"),
])
def test_scheduled_loop_wrong_answers_get_their_hint(loop, words):
    fb = ex.check_scheduled_loop(loop)
    assert _wrong_with(fb, words), fb


def _groups(micro_batches, k):
    return [micro_batches[s:s + k] for s in range(0, len(micro_batches), k)]


def full_batch(model, optimizer, scheduler, micro_batches, k):
    """Not accumulation: each group's micro-batches concatenated into one forward pass."""
    for group in _groups(micro_batches, k):
        x, y = torch.cat([x for x, _ in group]), torch.cat([y for _, y in group])
        F.mse_loss(model(x), y).backward()
        optimizer.step()
        scheduler.step()
        optimizer.zero_grad()


def summed_losses(model, optimizer, scheduler, micro_batches, k):
    """Not accumulation: one backward() over the group's summed micro-batch losses."""
    for group in _groups(micro_batches, k):
        total = sum(len(x) for x, _ in group)
        sum(F.mse_loss(model(x), y, reduction="sum") / total for x, y in group).backward()
        optimizer.step()
        scheduler.step()
        optimizer.zero_grad()


def concatenated_outputs(model, optimizer, scheduler, micro_batches, k):
    """Not accumulation: the group's outputs concatenated into one loss."""
    for group in _groups(micro_batches, k):
        out = torch.cat([model(x) for x, _ in group])
        F.mse_loss(out, torch.cat([y for _, y in group])).backward()
        optimizer.step()
        scheduler.step()
        optimizer.zero_grad()


def grad_summed(model, optimizer, scheduler, micro_batches, k):
    """Not accumulation: one torch.autograd.grad over the group's summed losses, assigned to .grad."""
    params = list(model.parameters())
    for group in _groups(micro_batches, k):
        total = sum(len(x) for x, _ in group)
        grads = torch.autograd.grad(sum(F.mse_loss(model(x), y, reduction="sum") / total for x, y in group), params)
        for p, g in zip(params, grads):
            p.grad = g
        optimizer.step()
        scheduler.step()


def grad_logging_forward(model, optimizer, scheduler, micro_batches, k):
    """A logging forward with gradients on builds a second graph per micro-batch."""
    n = len(micro_batches)
    for i, (x, y) in enumerate(micro_batches):
        (F.mse_loss(model(x), y) * _share(micro_batches, i, k, x)).backward()
        F.mse_loss(model(x), y).item()
        if (i + 1) % k == 0 or i + 1 == n:
            optimizer.step()
            scheduler.step()
            optimizer.zero_grad()


NOT_ACCUMULATING = {
    "full batch": (full_batch, "ran on 12 samples at once"),
    "summed losses": (summed_losses, "one backward() went through the forward passes of 3 micro-batches"),
    "concatenated outputs": (concatenated_outputs, "one backward() went through the forward passes of 3"),
    "summed losses, autograd.grad": (grad_summed, "one torch.autograd.grad call went through the forward passes"),
}


@pytest.mark.parametrize("name", list(NOT_ACCUMULATING))
def test_scheduled_loop_that_does_not_accumulate_fails_with_its_hint(name):
    loop, words = NOT_ACCUMULATING[name]
    fb = ex.check_scheduled_loop(loop)
    assert _wrong_with(fb, words), fb


@pytest.mark.parametrize("name", list(NOT_ACCUMULATING))
def test_scheduled_loop_that_does_not_accumulate_has_the_right_schedule_and_weights(name):
    """Why it needs the pass checks: by its steps, learning rates and weights alone, it is right."""
    loop, _ = NOT_ACCUMULATING[name]
    for seed, (n, k, size) in enumerate(ex._SCENARIOS):
        rec, same, _ = ex._run(loop, n, k, size, seed)
        assert ex._explain_schedule(rec, n, k) is None and same


def test_scheduled_loop_with_a_logging_forward_on_gradients_is_told_so():
    fb = ex.check_scheduled_loop(grad_logging_forward)
    assert _wrong_with(fb, "ran the model 14 times with gradients on"), fb


def test_scheduled_loop_own_scheduler_is_caught():
    """A loop that builds its own scheduler (a constant one) follows no schedule it was given."""
    def own(model, optimizer, scheduler, micro_batches, k):
        mine = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda update: 1.0)
        solution(model, optimizer, mine, micro_batches, k)
    assert not ex.check_scheduled_loop(own).passed


def test_scheduled_loop_odd_answers_never_raise():
    assert ex.check_scheduled_loop(...).status == "unanswered"
    assert ex.check_scheduled_loop(3).status == "malformed"
    assert ex.check_scheduled_loop(lambda model, optimizer: None).status == "malformed"

    def raises(model, optimizer, scheduler, micro_batches, k):
        raise ValueError("oops")
    fb = ex.check_scheduled_loop(raises)
    assert fb.status == "malformed" and "ValueError: oops" in fb.message


def test_lr_factor_warms_up_then_decays():
    factors = [ex.lr_factor(u) for u in range(6)]
    assert factors[0] < factors[1] == max(factors) and factors[2:] == sorted(factors[2:], reverse=True)
