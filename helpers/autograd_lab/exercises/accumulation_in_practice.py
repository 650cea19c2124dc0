"""Checks for notebook 07, accumulation in practice.

- ``check_updates_per_epoch(answer)``: how many optimizer (and scheduler) steps one epoch and three
  epochs take for 50 micro-batches and k = 8; groups never span an epoch's end.
- ``check_scheduled_loop(train_epoch)``: the learner's fix of a loop over padded token micro-batches whose
  scheduler steps once per micro-batch and whose loss is the mean of the micro-batch means. The loop runs for
  two epochs on small problems whose micro-batches differ in size and padding, with a recording optimizer and
  scheduler. The check first refuses, as notebook 04's does (:mod:`.loops`), a loop that does not accumulate
  (one forward over a whole group, one backward over several micro-batches); then it compares where the
  optimizer stepped, how the scheduler stepped and the learning rate each update used, and last the weights
  with training on each group as one batch, naming the loss scalings that plausible wrong loops use.
"""

from __future__ import annotations

import math
import warnings

import torch
from torch import nn

from . import trust
from .answers import as_int, close, is_unanswered, read_function
from .feedback import Feedback, correct, describe_error, malformed, never_raises, unanswered, wrong
from .isolation import kept_as_found
from .loops import pass_mistake, record_passes, thrown_away_mistake

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


# --------------------------------------------------------------------------- 2. fix the loop


_SIGNATURE = "train_epoch(model, optimizer, scheduler, micro_batches, k)"
_LR = 0.5
_EPOCHS = 2
_VOCAB, _LENGTH, _IGNORE = 7, 5, -100
# (micro-batches per epoch, k, the sequences of each micro-batch in turn): unequal micro-batches inside a group,
# a short last group, k = 1, and one group shorter than k
_SCENARIOS = [(7, 3, (2, 1, 3)), (8, 4, (1, 3, 2)), (5, 1, (2, 3)), (3, 5, (3, 1, 2))]


def lr_factor(update: int) -> float:
    """A warm-up of 2 updates, then a decay: the schedule of exercise 2."""
    return (update + 1) / 2 if update < 2 else 2 / (update + 1)


class _Recorder:
    """Where a loop stepped: ("step", lr used, forwards so far) per optimizer step, ("sched", forwards so far) per
    scheduler step; ``forwards()`` counts the forward passes of the epoch so far."""

    def __init__(self, model, forwards):
        events = self.events = []

        class Optimizer(torch.optim.SGD):
            def step(self, closure=None):
                events.append(("step", self.param_groups[0]["lr"], forwards()))
                return super().step(closure)

        class Scheduler(torch.optim.lr_scheduler.LambdaLR):
            def step(self, epoch=None):
                if getattr(self, "_ready", False):
                    events.append(("sched", forwards()))
                return super().step(epoch)

        self.optimizer = Optimizer(model.parameters(), lr=_LR)
        self.scheduler = Scheduler(self.optimizer, lr_factor)
        self.scheduler._ready = True


def _model():
    return nn.Sequential(nn.Embedding(_VOCAB, 4), nn.Linear(4, _VOCAB))


def _problem(n, sizes, seed):
    """A model and ``n`` micro-batches of padded sequences, ``sizes[i % len(sizes)]`` sequences in the i-th."""
    g = torch.Generator().manual_seed(seed)
    batches = []
    for i in range(n):
        size = sizes[i % len(sizes)]
        tokens = torch.randint(_VOCAB, (size, _LENGTH), generator=g)
        labels = torch.randint(_VOCAB, (size, _LENGTH), generator=g)
        labels[torch.arange(_LENGTH) >= torch.randint(1, _LENGTH + 1, (size, 1), generator=g)] = _IGNORE
        batches.append((tokens, labels))
    torch.manual_seed(seed)
    return _model(), batches


def _token_loss(weights, tokens, labels):
    """The summed cross-entropy over the real tokens, and their number, for the model's weights as a list."""
    logits = nn.functional.embedding(tokens, weights[0]) @ weights[1].T + weights[2]
    loss = nn.functional.cross_entropy(logits.flatten(0, 1), labels.flatten(), ignore_index=_IGNORE,
                                       reduction="sum")
    return loss, (labels != _IGNORE).sum()


# how each micro-batch's summed loss is divided: the right rule, and the ones plausible wrong loops use
_SCALINGS = {
    "right": lambda own, group_tokens, group_size, k: group_tokens,
    "mean of means": lambda own, group_tokens, group_size, k: own * group_size,
    "mean / k": lambda own, group_tokens, group_size, k: own * k,
    "mean": lambda own, group_tokens, group_size, k: own,
    "sum": lambda own, group_tokens, group_size, k: 1,
}


def _reference_weights(model, batches, k, scaling, zero_each=False):
    """The weights after ``_EPOCHS`` epochs of SGD steps at the scheduled learning rates, one per group, each
    micro-batch's summed loss divided as ``scaling`` says; ``zero_each``: only the group's last micro-batch
    counts (``.grad`` wiped before every backward)."""
    weights = [p.detach().clone() for p in model.parameters()]
    update = 0
    for _ in range(_EPOCHS):
        for start in range(0, len(batches), k):
            group = batches[start:start + k]
            group_tokens = sum((labels != _IGNORE).sum() for _, labels in group)
            params = [w.clone().requires_grad_() for w in weights]
            total = 0
            for tokens, labels in group[-1:] if zero_each else group:
                loss, own = _token_loss(params, tokens, labels)
                total = total + loss / _SCALINGS[scaling](own, group_tokens, len(group), k)
            grads = torch.autograd.grad(total, params)
            weights = [w - _LR * lr_factor(update) * g for w, g in zip(weights, grads)]
            update += 1
    return weights


def _same(model, weights) -> bool:
    return all(close(p.detach(), w, rtol=1e-4, atol=1e-6) for p, w in zip(model.parameters(), weights))


def _run(train_epoch, n, k, sizes, seed):
    """Run the learner's loop for ``_EPOCHS`` epochs: (the model after, the recorder, and each epoch's events and
    pass log). The expected weights are computed afterwards, from the problem regenerated from its seed."""
    model, batches = _problem(n, sizes, seed)
    log = {"passes": None}
    rec = _Recorder(model, lambda: len(log["passes"].forward_sizes) if log["passes"] else 0)
    epochs = []
    for _ in range(_EPOCHS):
        # forwards are counted on the embedding, which every call of the model goes through (model.forward too)
        with warnings.catch_warnings(), record_passes(model[0]) as passes, kept_as_found():
            warnings.simplefilter("ignore")  # PyTorch's order warning: the feedback names the mistake itself
            log["passes"] = passes
            before = len(rec.events)
            train_epoch(model, rec.optimizer, rec.scheduler, batches, k)
        epochs.append((rec.events[before:], passes))
    return model, rec, epochs


def _explain_steps(steps, n, k):
    """Where the optimizer stepped in one epoch, against the end of every group: the wrong feedback's text."""
    at = [e[2] for e in steps]                 # after how many micro-batches of the epoch
    expected = [min(end, n) for end in range(k, n + k, k)]
    setting = f"(n = {n} micro-batches, k = {k})"
    if at == expected:
        return None
    if not at:
        return f"your loop never called optimizer.step() {setting}: step once at the end of every group."
    if k > 1 and at and at[0] == 1:
        return (f"your loop stepped the optimizer right after the very first micro-batch {setting}: a condition "
                "like i % k == 0 is true at i = 0, so the first update used one micro-batch, not k. Step when "
                "(i + 1) % k == 0, and after the epoch's last micro-batch.")
    if n not in at:
        return (f"your loop never stepped after the epoch's last micro-batch {setting}: the last group's gradient "
                "stays in .grad and leaks into the next epoch. Step at the last micro-batch too.")
    if len(at) != len(expected):
        return (f"the optimizer stepped {len(at)} times {setting}; it should step once per group: "
                f"{len(expected)} times, the shorter last group included.")
    return (f"the optimizer stepped after micro-batches {at} (counted from 1) {setting}; the groups end after "
            f"{expected}.")


def _explain_schedule(events, n, k, first_update):
    """How the scheduler stepped in one epoch: the wrong feedback's text, or None."""
    steps, scheds = [e for e in events if e[0] == "step"], [e for e in events if e[0] == "sched"]
    updates = math.ceil(n / k)
    setting = f"(n = {n} micro-batches, k = {k})"
    if len(scheds) == n and n != updates:
        return (f"the scheduler stepped {n} times, once per micro-batch {setting}, for {updates} updates: the "
                f"schedule ran n / ceil(n / k) = {n / updates:.3g} times too fast. Step it right after "
                "optimizer.step(), once per update.")
    if len(scheds) != updates:
        return (f"the scheduler stepped {len(scheds)} times {setting}; the schedule counts updates, so it should "
                f"step {updates} times, each time right after optimizer.step().")
    if any(e[0] == "sched" and (i == 0 or events[i - 1][0] != "step") for i, e in enumerate(events)):
        return ("the scheduler stepped before optimizer.step(): the update then used the next value of the schedule "
                "(PyTorch warns about this order). Step the scheduler right after the optimizer.")
    used = [e[1] for e in steps]
    expected = [_LR * lr_factor(first_update + u) for u in range(updates)]
    if not all(math.isclose(a, b, rel_tol=1e-6) for a, b in zip(used, expected)):
        return f"the updates used learning rates {used}; the schedule gives {expected}."
    return None


_SCALING_HINTS = {
    "mean of means": "you divided each micro-batch's token mean by the number of micro-batches in its group: a "
                     "micro-batch with few real tokens then weighs as much as a full one (the bug Hugging Face "
                     "transformers fixed in 2024). Sum the token losses and divide by the real tokens of the whole "
                     "group, counted before its first backward().",
    "mean / k": "you divided each micro-batch's token mean by k: micro-batches with few real tokens weigh as much "
                "as full ones, and a short last group counts less. Divide the summed loss by the group's real "
                "tokens.",
    "mean": "each micro-batch's token mean went into backward() undivided: the group's gradient is a sum of "
            "means, several times too large. Divide the summed loss by the group's real tokens.",
    "sum": "the summed token loss went into backward() undivided: divide it by the real tokens of the group.",
}


def _explain_weights(start, model, batches, k):
    for scaling, hint in _SCALING_HINTS.items():
        if _same(model, _reference_weights(start, batches, k, scaling)):
            return hint
    if _same(model, _reference_weights(start, batches, k, "right", zero_each=True)):
        return ("at each step .grad held only the group's last micro-batch: zero_grad() before every backward() "
                "wipes what the group accumulated. Zero it after optimizer.step().")
    return ("the steps and the learning rates are right, but the weights differ from training on each group as "
            "one batch (its summed token loss divided by its real tokens): look at how the loss is divided and "
            "at zero_grad().")


def _scenario_problem(train_epoch, seed, n, k, sizes):
    """The first problem the learner's loop shows in one scenario, as the wrong feedback's text, or None."""
    model, rec, epochs = _run(train_epoch, n, k, sizes, seed)
    for epoch, (events, passes) in enumerate(epochs):
        setting = f"In epoch {epoch + 1}, with n = {n} micro-batches and k = {k}"
        fb = pass_mistake(setting, passes, micro_batches=n, largest=max(sizes),
                          forwards=len(passes.forward_sizes))
        if fb is not None:
            return fb.message
        steps = [e for e in events if e[0] == "step"]
        problem = _explain_steps(steps, n, k) or _explain_schedule(events, n, k, epoch * math.ceil(n / k))
        if problem:
            return problem
    start, batches = _problem(n, sizes, seed)  # fresh: the learner's code never saw these
    if not _same(model, _reference_weights(start, batches, k, "right")):
        return _explain_weights(start, model, batches, k)
    for epoch, (_, passes) in enumerate(epochs):
        fb = thrown_away_mistake(f"In epoch {epoch + 1}, with n = {n} micro-batches and k = {k}", passes)
        if fb is not None:
            return fb.message
    return None


@never_raises
def check_scheduled_loop(train_epoch) -> Feedback:
    """Exercise 2: the learner's ``train_epoch(model, optimizer, scheduler, micro_batches, k)``."""
    problem = read_function(train_epoch, f"your function {_SIGNATURE}", _SIGNATURE, 5)
    if problem is not None:
        return problem
    for n, k, sizes in _SCENARIOS:
        try:  # data and model from a seed drawn afresh: no loop can be fitted to them
            problem = _scenario_problem(train_epoch, trust.fresh_seed(), n, k, sizes)
        except Exception as err:  # noqa: BLE001 -- the learner's loop can raise anything
            return malformed(f"your loop raised {describe_error(err)} (n = {n} micro-batches, k = {k}).")
        if problem:
            return wrong(problem)
    return correct("every group's summed token loss divided by its real tokens, and one scheduler step right after "
                   "each optimizer step, the short last group included: every update used the schedule's learning "
                   "rate and the weights follow training on each group as one batch, for every n and k tried, "
                   "over two epochs.")


trust.record(__name__)  # last: every name above is defined (see .trust)
