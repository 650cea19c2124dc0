"""Checks for notebook 07, accumulation in practice.

- ``check_updates_per_epoch(answer)``: how many optimizer (and scheduler) steps one epoch and three
  epochs take for 50 micro-batches and k = 8; groups never span an epoch's end.
- ``check_scheduled_loop(train_epoch)``: the learner's fix of a loop whose learning-rate scheduler
  steps once per micro-batch. The loop runs on small problems with a recording optimizer and
  scheduler; the check first refuses, as notebook 04's check does (:mod:`.loops`), a loop that does not accumulate (one
  forward over a whole group, one backward over several micro-batches), then compares the learning
  rate each update used, the step counts and order, and the weights with a reference.
"""

from __future__ import annotations

import math
import warnings

import torch
from torch import nn

from .answers import as_int, is_unanswered, read_function
from .feedback import Feedback, correct, describe_error, malformed, never_raises, unanswered, wrong
from .loops import pass_mistake, record_passes

__all__ = ["check_updates_per_epoch", "check_scheduled_loop", "UPDATES_TASK", "lr_factor"]

UPDATES_TASK = {"n": 50, "k": 8, "epochs": 3}


# --------------------------------------------------------------------------- 1. updates per epoch


def _as_pair(answer):
    """Two whole numbers from a tuple, list, array or tensor of two; None for anything else."""
    if hasattr(answer, "shape") and hasattr(answer, "tolist"):  # an array or tensor of two numbers
        answer = answer.tolist()
    if not isinstance(answer, (tuple, list)) or len(answer) != 2:
        return None
    first, second = as_int(answer[0]), as_int(answer[1])
    return None if first is None or second is None else (first, second)


@never_raises
def check_updates_per_epoch(answer, n: int = UPDATES_TASK["n"], k: int = UPDATES_TASK["k"],
                            epochs: int = UPDATES_TASK["epochs"]) -> Feedback:
    """Exercise 1: ``(updates in one epoch, updates in `epochs` epochs)`` for ``n`` micro-batches per epoch."""
    if is_unanswered(answer):
        return unanswered("a pair (updates per epoch, updates in 3 epochs), e.g. (5, 15)")
    pair = _as_pair(answer)
    if pair is None:
        return malformed(f"give a pair of whole numbers, e.g. (5, 15), not {type(answer).__name__} {answer!r}.")
    per_epoch, total = pair
    right = math.ceil(n / k)
    if pair == (right, epochs * right):
        return correct(f"ceil({n} / {k}) = {right} updates per epoch: {n // k} full groups and one of {n % k}. "
                       f"A group ends at the epoch's end, so {epochs} epochs take {epochs} x {right} = "
                       f"{epochs * right}: the num_training_steps to give a schedule.")
    if per_epoch == n // k:
        return wrong(f"{n} / {k} rounded down leaves out the last group of {n % k} micro-batches. A loop that drops "
                     "it loses data every epoch; the correct loop steps on it too.")
    if per_epoch in (n, n * epochs) or total == n * epochs:
        return wrong("that counts micro-batches. The optimizer, and the scheduler with it, steps once per group "
                     f"of k = {k}.")
    if per_epoch == right and total == math.ceil(epochs * n / k):
        return wrong(f"{total} = ceil({epochs * n} / {k}) lets a group run on from one epoch into the next. The "
                     "loop starts a fresh group each epoch, and the short last group is an update of its own.")
    if per_epoch == right:
        return wrong(f"{right} per epoch is right. How many epochs are there, and does a group ever span two?")
    return wrong(f"group the {n} micro-batches of an epoch in k = {k}: how many groups, counting a shorter "
                 "last one?")


# --------------------------------------------------------------------------- 2. fix the scheduled loop

_SIGNATURE = "train_epoch(model, optimizer, scheduler, micro_batches, k)"
_LR = 0.1
# (number of micro-batches, k, samples per micro-batch)
_SCENARIOS = [(7, 3, 4), (8, 4, 3), (5, 1, 2), (3, 5, 4)]


def lr_factor(update: int) -> float:
    """A warm-up of 2 updates, then a decay: the schedule of exercise 2 (and of the notebook)."""
    return (update + 1) / 2 if update < 2 else 2 / (update + 1)


class _Recorder:
    """The events of one run: ("step", lr used) for each optimizer step, ("sched",) for each scheduler step."""

    def __init__(self, model):
        events = self.events = []

        class Optimizer(torch.optim.SGD):
            def step(self, closure=None):
                events.append(("step", self.param_groups[0]["lr"]))
                return super().step(closure)

        class Scheduler(torch.optim.lr_scheduler.LambdaLR):
            def step(self, epoch=None):
                if getattr(self, "_ready", False):
                    events.append(("sched",))
                return super().step(epoch)

        self.optimizer = Optimizer(model.parameters(), lr=_LR)
        self.scheduler = Scheduler(self.optimizer, lr_factor)
        self.scheduler._ready = True

    def lrs(self):
        return [e[1] for e in self.events if e[0] == "step"]

    def count(self, kind):
        return sum(e[0] == kind for e in self.events)


def _problem(n, size, seed):
    g = torch.Generator().manual_seed(seed)
    w = torch.randn(3, 1, generator=g)
    batches = []
    for _ in range(n):
        x = torch.randn(size, 3, generator=g)
        batches.append((x, x @ w + 0.1 * torch.randn(size, 1, generator=g)))
    torch.manual_seed(seed)
    return nn.Linear(3, 1), batches


def _reference_weights(model, batches, k):
    """Each group's mean gradient, one SGD step at the scheduled learning rate per group."""
    weights = [p.detach().clone() for p in model.parameters()]
    for update, start in enumerate(range(0, len(batches), k)):
        group = batches[start:start + k]
        x = torch.cat([b[0] for b in group])
        y = torch.cat([b[1] for b in group])
        params = [w.clone().requires_grad_() for w in weights]
        loss = nn.functional.mse_loss(x @ params[0].T + params[1], y)
        grads = torch.autograd.grad(loss, params)
        weights = [w - _LR * lr_factor(update) * g for w, g in zip(weights, grads)]
    return weights


def _run(train_epoch, n, k, size, seed):
    model, batches = _problem(n, size, seed)
    expected = _reference_weights(model, batches, k)
    rec = _Recorder(model)
    with warnings.catch_warnings(), record_passes(model) as passes:
        warnings.simplefilter("ignore")  # PyTorch's order warning: the feedback names the mistake itself
        train_epoch(model, rec.optimizer, rec.scheduler, batches, k)
    same = all(torch.allclose(p.detach(), e, rtol=1e-4, atol=1e-6) for p, e in zip(model.parameters(), expected))
    return rec, same, passes


def _explain_schedule(rec, n, k):
    updates, sched = math.ceil(n / k), rec.count("sched")
    setting = f"(n = {n} micro-batches, k = {k})"
    if rec.count("step") != updates:
        return (f"the optimizer stepped {rec.count('step')} times {setting}; it should step once per group: "
                f"{updates} times, the shorter last group included.")
    if sched == n and n != updates:
        return (f"the scheduler stepped {sched} times, once per micro-batch {setting}: the schedule ran k times "
                "too fast. Step it right after optimizer.step(), once per update.")
    if sched != updates:
        return (f"the scheduler stepped {sched} times {setting}; the schedule counts updates, so it should step "
                f"{updates} times, each time right after optimizer.step().")
    if rec.events[0] == ("sched",):
        return ("the scheduler stepped before the first optimizer.step(): the first update used the second value "
                "of the schedule (PyTorch warns about this order). Step the optimizer first.")
    expected = [_LR * lr_factor(u) for u in range(updates)]
    if not all(math.isclose(a, b, rel_tol=1e-6) for a, b in zip(rec.lrs(), expected)):
        return f"the updates used learning rates {rec.lrs()}; the schedule gives {expected}."
    return None


@never_raises
def check_scheduled_loop(train_epoch) -> Feedback:
    """Exercise 2: the learner's ``train_epoch(model, optimizer, scheduler, micro_batches, k)``."""
    problem = read_function(train_epoch, f"your function {_SIGNATURE}", _SIGNATURE, 5)
    if problem is not None:
        return problem
    for seed, (n, k, size) in enumerate(_SCENARIOS):
        try:
            rec, same, passes = _run(train_epoch, n, k, size, seed)
        except Exception as err:  # noqa: BLE001 -- the learner's loop can raise anything
            return malformed(f"your loop raised {describe_error(err)} (n = {n} micro-batches, k = {k}).")
        # Notebook 04's checks first: a loop that does not accumulate (a forward pass over a whole group, or one
        # backward() over several micro-batches' losses) gets the full-batch numbers and must not pass.
        fb = pass_mistake(f"With n = {n} micro-batches and k = {k}", passes, micro_batches=n, largest=size,
                          forwards=len(passes.forward_sizes))
        if fb is not None:
            return fb
        problem = _explain_schedule(rec, n, k)
        if problem is None and not same:
            problem = (f"the steps and the learning rates are right, but the weights differ from one SGD step per "
                       f"group on the group's mean gradient (n = {n}, k = {k}): look at the loss scaling and at "
                       "zero_grad().")
        if problem:
            return wrong(problem)
    return correct("one scheduler step right after each optimizer step, the short last group included: every "
                   "update used the learning rate the schedule gives for it, for every n and k tried.")
