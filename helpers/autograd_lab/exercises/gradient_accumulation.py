"""Checks for notebook 04, gradient accumulation.

- ``check_training_loop(train_epoch)``: the learner's fixed accumulation loop, run for two epochs
  against full-batch training on random data, with micro-batches of unequal sizes among them;
  differences are explained (step positions, the tail, the loss scaling, a missing or misplaced
  ``zero_grad``, a loop that does not really accumulate): each usual mistake is a row of ``_LOOP_DIAGNOSES``,
  a loop that makes it, and names the learner's loop when it departs from full-batch training where, and as,
  the learner's does (:mod:`.diagnoses`). The loop may call ``model(x)`` or
  ``model.forward(x)``: both are watched. The first problems hand it a list; the last ones a stream (a
  generator, whose length is known only at its end): a loop that calls ``len()`` on it, indexes it, or reads it
  whole before it trains (``list(micro_batches)``, a first pass to count) gets a hint naming that.
- ``check_step_counts(answer)``: for each optimizer step of the copied loop over two epochs (n = 41, k = 8),
  how many micro-batches' gradients ``.grad`` holds, the tail the first epoch leaves included.
"""

from __future__ import annotations

import copy
import functools
import itertools
from dataclasses import dataclass, field

import torch
from torch import nn

from . import trust
from .answers import as_int, close_in_norm, is_unanswered, read_function
from .diagnoses import Diagnosis, hint_for
from .feedback import Feedback, correct, describe_error, malformed, never_raises, unanswered, wrong
from .isolation import kept_as_found
from .loops import pass_mistake, record_passes, thrown_away_mistake

__all__ = ["check_training_loop", "check_step_counts", "STEP_COUNT_TASK"]

# --------------------------------------------------------------------------- 1. fix the widely copied loop

# (k, the samples of each micro-batch, handed as a stream): an epoch of len(sizes) micro-batches. The lists come
# first, so that a loop's own mistakes are named before what it does with a stream.
_SCENARIOS = (
    (10, (4,) * 25, False),  # the notebook's setting: a tail group of 5
    (4, (4,) * 12, False),  # no tail
    (3, (4,) * 7, False),  # a tail group of 1
    (5, (4,) * 3, False),  # fewer micro-batches than k: one short update
    (4, (4,) * 9 + (1,), False),  # the last micro-batch is short, as a DataLoader without drop_last gives it
    (2, (5,) * 8 + (3,), False),  # other sizes: nothing may be tuned to 4 samples
    (1, (3,) * 4, False),  # k = 1: every micro-batch is a full batch
    (4, (4, 2, 5, 3, 6, 1, 4, 4, 2, 5, 3), False),  # unequal sizes inside every group, not only at the end
    (3, (1, 4, 4, 2, 6, 3, 5, 2), False),  # the first micro-batch is the smallest: nothing may assume its size
    (4, (4,) * 9 + (1,), True),  # a stream: its length is known only when it ends, here inside a group
    (3, (2, 5, 1, 4, 4, 3, 6, 2, 5, 1, 3), True),  # a stream of unequal micro-batches, a tail group of 2
    (5, (3, 1, 4), True),  # a stream that ends before the first group is full
)
_EPOCHS = 2  # the second epoch shows whether a gradient left in .grad leaks into it
_LR = 0.1

_SIGNATURE = "train_epoch(model, loss_fn, optimizer, micro_batches, k)"


def _data(sizes, seed):
    """Micro-batches of the given sizes from y = x @ w_true + noise, and a model to start from."""
    g = torch.Generator().manual_seed(seed)
    w_true = torch.randn(3, 1, generator=g)
    batches = []
    for m in sizes:
        x = torch.randn(m, 3, generator=g)
        y = x @ w_true + 0.3 * torch.randn(m, 1, generator=g)
        batches.append((x, y))
    model = nn.Linear(3, 1)
    with torch.no_grad():
        model.weight.copy_(torch.randn(1, 3, generator=g))
        model.bias.copy_(torch.randn(1, generator=g))
    return batches, model


def _flat_grad(model):
    return torch.cat([
        (p.grad if p.grad is not None else torch.zeros_like(p)).detach().reshape(-1).clone()
        for p in model.parameters()
    ])


def _flat_params(model):
    return torch.nn.utils.parameters_to_vector(model.parameters()).detach().clone()


@dataclass
class _Steps:
    """Each optimizer step of a run: after how many micro-batches of its epoch, the gradient it used, and the
    parameters that gradient was taken at."""

    positions: list = field(default_factory=list)  # one list per epoch
    grads: list = field(default_factory=list)  # one list per epoch
    params: list = field(default_factory=list)  # one list per epoch

    def new_epoch(self):
        for kept in (self.positions, self.grads, self.params):
            kept.append([])

    def note(self, position, model):
        """A step after ``position`` micro-batches of the epoch, before the optimizer moves ``model``."""
        self.positions[-1].append(position)
        self.grads[-1].append(_flat_grad(model))
        self.params[-1].append(_flat_params(model))


class _RecordingLoss(nn.MSELoss):
    """MSELoss that notes how many samples each call compares."""

    def __init__(self):
        super().__init__()
        self.sizes = []

    def forward(self, input, target):
        self.sizes.append(len(input) if input.dim() else 1)
        return super().forward(input, target)


def _full_batch(model, loss_fn, optimizer, micro_batches, k):
    """Full-batch training, the reference: one update per group of k consecutive micro-batches, all of the group's
    samples in one forward pass and one backward() (the last group may be short)."""
    for start in range(0, len(micro_batches), k):
        group = micro_batches[start:start + k]
        loss_fn(model(torch.cat([x for x, _ in group])), torch.cat([y for _, y in group])).backward()
        optimizer.step()
        optimizer.zero_grad()


def _run_ours(loop, model, batches, k):
    """Run one of the course's own loops (the reference, or a row's variant) for the check's epochs on a copy of
    ``model``, unwatched: its steps, each placed after the micro-batches whose samples its losses have compared, and
    the model it trained."""
    model = copy.deepcopy(model)
    opt = torch.optim.SGD(model.parameters(), lr=_LR)
    loss_fn, steps, real_step = _RecordingLoss(), _Steps(), opt.step
    ends = list(itertools.accumulate(len(x) for x, _ in batches))

    def step():
        steps.note(ends.index(sum(loss_fn.sizes[before:])) + 1, model)
        real_step()

    opt.step = step
    for _ in range(_EPOCHS):
        steps.new_epoch()
        before = len(loss_fn.sizes)
        loop(model, loss_fn, opt, batches, k)
    return steps, model


def _reference(model, batches, k):
    """Full-batch training's steps and trained model."""
    return _run_ours(_full_batch, model, batches, k)


@dataclass
class _LearnerRun:
    steps: _Steps
    forwards: list  # forward passes that built a graph, per epoch
    passes: object  # the PassLog of both epochs
    loss_sizes: list
    model: nn.Module
    read_ahead: int = 0  # on a stream: the most micro-batches taken from it before the model had run on them


def _forward_through_call(model: nn.Module) -> nn.Module:
    """Make ``model.forward(x)`` run as ``model(x)`` does, hooks included, so that a loop is watched the same
    whichever of the two it calls. (The model's class is swapped for a subclass of the same name.)"""
    base = type(model)

    class Watched(base):
        _in_call = 0

        def __call__(self, *args, **kwargs):
            self._in_call += 1
            try:
                return super().__call__(*args, **kwargs)
            finally:
                self._in_call -= 1

        def forward(self, *args, **kwargs):
            if self._in_call:
                return base.forward(self, *args, **kwargs)
            return self(*args, **kwargs)

    Watched.__name__, Watched.__qualname__ = base.__name__, base.__qualname__
    model.__class__ = Watched
    return model


@dataclass
class _Reading:
    """How far a loop read a stream ahead of its training: the most micro-batches it had taken from the stream
    before the model had run on them."""

    ahead: int = 0


def _stream(batches, passes, before, reading):
    """The epoch's micro-batches one at a time, as a data pipeline hands them: a generator (no ``len()``, no
    indexing, read once). ``before``: the forward passes of earlier epochs in ``passes``."""
    for taken, (x, y) in enumerate(batches, start=1):
        reading.ahead = max(reading.ahead, taken - (len(passes.forward_sizes) - before))
        yield x.clone(), y.clone()


def _run_learner(fn, sizes, seed, k, stream=False):
    """Run the learner's loop for two epochs on the scenario's data, recording after how many micro-batches each
    step ran. Nothing of the reference exists yet: ``_judge`` computes it afterwards from the same seed."""
    batches, model = _data(sizes, seed)
    model = _forward_through_call(model)
    opt = torch.optim.SGD(model.parameters(), lr=_LR)
    loss_fn = _RecordingLoss()
    steps, forwards = _Steps(), []
    real_step = opt.step
    reading = _Reading()
    with record_passes(model) as passes:

        def step(*args, **kwargs):
            steps.note(len(passes.forward_sizes) - sum(forwards), model)
            return real_step(*args, **kwargs)

        opt.step = step
        for _ in range(_EPOCHS):
            steps.new_epoch()
            epoch = (_stream(batches, passes, sum(forwards), reading) if stream
                     else [(x.clone(), y.clone()) for x, y in batches])
            with kept_as_found():
                fn(model, loss_fn, opt, epoch, k)
            forwards.append(len(passes.forward_sizes) - sum(forwards))
    return _LearnerRun(steps, forwards, passes, loss_fn.sizes, model, reading.ahead)


def _ratio(a, b):
    return float(a @ b) / float(b @ b)


@dataclass(frozen=True)
class _Problem:
    """One scenario of the check and its full-batch reference."""

    k: int
    sizes: tuple  # the samples of each micro-batch
    seed: int  # what its data and starting model are drawn from
    ref: _Steps
    stream: bool = False  # handed as a generator, not a list

    @property
    def n(self):
        return len(self.sizes)

    @property
    def setting(self):
        return _setting(self.n, self.k, self.stream)

    @property
    def largest(self):
        return max(self.sizes)

    def group_sizes(self, j):
        """The samples of each micro-batch of update j (0-based) of an epoch."""
        return self.sizes[j * self.k:(j + 1) * self.k]

    @functools.cached_property
    def _start(self):
        return _data(self.sizes, self.seed)

    def expected(self, steps: _Steps, epoch: int, j: int):
        """The gradient update j of ``epoch`` must use: full-batch training's gradient for its group, taken at the
        parameters ``steps`` had when it stepped there. Not the reference run's own gradient at that update: after
        a few steps two runs' parameters differ by rounding, which moves their gradients apart too, most where a
        gradient is small (near a minimum); at the same parameters only the order of the sums differs."""
        batches, model = self._start
        group = batches[j * self.k:(j + 1) * self.k]
        model = copy.deepcopy(model)
        torch.nn.utils.vector_to_parameters(steps.params[epoch][j], model.parameters())
        nn.MSELoss()(model(torch.cat([x for x, _ in group])), torch.cat([y for _, y in group])).backward()
        return _flat_grad(model)


def _setting(n, k, stream):
    if stream:
        return f"With a stream of n = {n} micro-batches (a generator) and k = {k}"
    return f"With n = {n} micro-batches and k = {k}"


_ON_A_STREAM = (
    "Work on each micro-batch as it comes: count the micro-batches (and samples) since the last step as they "
    "arrive, step when a group of k is complete, and once more when the loop ends if anything was accumulated "
    "since the last step; to weigh micro-batches of any size, sum-reduce each loss and divide .grad by the "
    "samples counted, right before the step (section 2's divide at step)."
)


def _stream_error(setting, err):
    """The feedback for a loop that treated a stream as a list (``len()``, indexing, slicing), or None when the
    error is about something else."""
    said = describe_error(err)
    if not isinstance(err, (TypeError, AttributeError)) or "'generator'" not in said:
        return None
    return wrong(
        f"{setting}, your function raised {said}. Micro-batches that come as a stream have no len() and cannot "
        f"be indexed or sliced: how many there are is known only when the stream ends. {_ON_A_STREAM}"
    )


def _explain_stream(p: _Problem, run: _LearnerRun):
    """A loop that read a stream whole (or once to count, then again) before it trained on it."""
    if not p.stream or run.read_ahead <= p.k + 1:
        return None
    return wrong(
        f"{p.setting}, your loop took {run.read_ahead} micro-batches from the stream before running the model on "
        "them (list(micro_batches), or a first pass to count them?): a stream is read once, as it comes, and a "
        f"real one may not fit in memory whole; read twice, a generator is empty the second time. {_ON_A_STREAM}"
    )


def _explain_passes(p: _Problem, run: _LearnerRun):
    """A loop that runs the model too often, on too much, or keeps several graphs alive for one backward()."""
    return pass_mistake(p.setting, run.passes, micro_batches=p.n, largest=p.largest, forwards=run.forwards[0],
                        loss_sizes=run.loss_sizes)


def _near(g, g_ref) -> bool:
    """Equal up to float32 rounding, measured on the whole vector (``close_in_norm``): a relative 1e-4, as
    check_accumulation holds float32 to; every mistake the check names is off by far more. An update's gradient is
    held to full-batch training's at the same parameters (``_Problem.expected``), so that only the order of the
    sums differs between the two."""
    return close_in_norm(g, g_ref, rtol=1e-4, atol=1e-7)


def _relative_error(g, g_ref):
    return f"{float((g - g_ref).norm() / g_ref.norm()):.3g}"


def _departure(steps: _Steps, p: _Problem):
    """Where a run first departs from full-batch training: (epoch, None) where its steps come elsewhere in that
    epoch, (epoch, j) where update j of that epoch used another gradient than full-batch training's at the same
    parameters (``_Problem.expected``), or None where it does not depart."""
    for epoch in range(_EPOCHS):
        if steps.positions[epoch] != p.ref.positions[epoch]:
            return epoch, None
        for j, g in enumerate(steps.grads[epoch]):
            if not _near(g, p.expected(steps, epoch, j)):
                return epoch, j
    return None


def _departs_alike(p: _Problem, steps: _Steps, at, variant) -> bool:
    """Does the ``variant`` loop, run on the same problem, depart from full-batch training where ``steps`` does, and
    as they do (the same steps, or the same first step, or the same gradient there)?"""
    batches, model = _data(p.sizes, p.seed)
    mine, _ = _run_ours(variant, model, batches, p.k)
    if _departure(mine, p) != at:
        return False
    epoch, j = at
    if j is None:
        ours, theirs, want = mine.positions[epoch], steps.positions[epoch], p.ref.positions[epoch]
        return ours == theirs or ours[:1] == theirs[:1] != want[:1]
    return _near(steps.grads[epoch][j], mine.grads[epoch][j])


def _facts(p: _Problem, steps: _Steps, at) -> dict:
    """What the hints quote about the departure ``at``: the steps, and for a gradient the update, its micro-batches
    (counted from 1) and the gradient's ratio to the full-batch one."""
    want = p.ref.positions[0]
    facts = dict(p=p, shown=", ".join(map(str, steps.positions[0])), want=", ".join(map(str, want)),
                 r=p.n - (want[-2] if len(want) > 1 else 0))
    epoch, j = at
    if j is not None:
        g, g_ref, ends = steps.grads[epoch][j], p.expected(steps, epoch, j), p.ref.positions[epoch]
        first = (ends[j - 1] if j else 0) + 1
        facts.update(j=j, first=first, last_mb=ends[j], members=ends[j] - first + 1, c=_ratio(g, g_ref),
                     error=_relative_error(g, g_ref))
    return facts


def _stepped_elsewhere(p, shown, want, **_):
    return (f"{p.setting}, your loop steps after micro-batches {shown} (counted from 1); full-batch training steps "
            f"after {want}: after every k-th micro-batch and after the last.")


def _loop_with(step_when=None, scale=lambda size, samples, members, k: size / samples, reset="after step"):
    """The accumulation loop with one mistake: a train_epoch that steps where ``step_when(i, n, k)`` says (else after
    each group of k and the last micro-batch), multiplies each loss by ``scale(its samples, its group's samples, its
    group's micro-batches, k)`` and resets .grad "after step", "after a full group's step", "before every backward"
    or "never"."""

    def train_epoch(model, loss_fn, optimizer, micro_batches, k):
        batches = list(micro_batches)  # the course's own loop: it may hold the epoch whole
        n = len(batches)
        for i, (x, y) in enumerate(batches):
            group = batches[i // k * k:(i // k + 1) * k]
            if reset == "before every backward":
                optimizer.zero_grad()
            (loss_fn(model(x), y) * scale(len(x), sum(len(g) for g, _ in group), len(group), k)).backward()
            if step_when(i, n, k) if step_when else (i + 1) % k == 0 or i + 1 == n:
                optimizer.step()
                if reset == "after step" or (reset == "after a full group's step" and len(group) == k):
                    optimizer.zero_grad()

    return train_epoch


# The usual mistakes of exercise 1, each as the loop that makes it. A row names the learner's loop when its loop
# departs from full-batch training at the same step, and in the same way (see _departs_alike). Where the steps come
# elsewhere, the hint completes the sentence that shows them (_stepped_elsewhere); else it is the whole message.
_LOOP_DIAGNOSES = (
    Diagnosis("the last group never stepped: (i + 1) % k == 0 alone",
              _loop_with(step_when=lambda i, n, k: (i + 1) % k == 0),
              lambda r, **_: (
                  f"The last {r} micro-batch{'es' * (r != 1)} never reach an optimizer step: their gradient stays in "
                  ".grad and leaks into the next epoch. Step also after the last micro-batch, when the loop ends with "
                  "gradients accumulated since the last step.")),
    Diagnosis("the copied recipe's (i - 1) % k == 0", _loop_with(step_when=lambda i, n, k: (i - 1) % k == 0),
              "Your first step comes after only 2 micro-batches: that is the copied recipe's (i - 1) % k == 0, which "
              "is true at i = 1. With i counted from 0, micro-batch i completes a group when (i + 1) % k == 0."),
    Diagnosis("i % k == 0, true at i = 0", _loop_with(step_when=lambda i, n, k: i % k == 0),
              "Your first step comes right after the first micro-batch: i % k == 0 is true at i = 0. With i counted "
              "from 0, micro-batch i completes a group when (i + 1) % k == 0."),
    Diagnosis("every step one micro-batch late",
              _loop_with(step_when=lambda i, n, k: (i % k == 0 and i > 0) or i + 1 == n),
              "Each step comes one micro-batch late: with i counted from 0, use (i + 1) % k == 0."),
    Diagnosis("no zero_grad between steps", _loop_with(reset="never"),
              lambda p, j, **_: (
                  f"{p.setting}, update {j + 1} used its own gradient plus the previous update's: .grad is not reset "
                  "between optimizer steps. Call optimizer.zero_grad() right after each step (or before the first "
                  "backward() of each group).")),
    Diagnosis("zero_grad before every backward()", _loop_with(reset="before every backward"),
              lambda p, j, last_mb, **_: (
                  f"{p.setting}, update {j + 1} used only the gradient of its last micro-batch ({last_mb}): .grad is "
                  "reset between the backward() calls of a group. A zero_grad() at the top of every micro-batch "
                  "wipes what you accumulated; reset once per group, right after optimizer.step().")),
    Diagnosis("the losses not scaled", _loop_with(scale=lambda size, samples, members, k: 1.0),
              lambda p, j, c, **_: (
                  f"{p.setting}, update {j + 1} used a gradient {c:.3g} times the full-batch one: each micro-batch "
                  "loss must be divided by the number of micro-batches in its group before backward(), so the "
                  "gradients add up to the mean over the group.")),
    Diagnosis("divided by k, also in a short last group", _loop_with(scale=lambda size, samples, members, k: 1 / k),
              lambda p, c, first, last_mb, members, **_: (
                  f"{p.setting}, the last update (micro-batches {first} to {last_mb}, a group of {members}) used "
                  f"{c:.3g} times the full-batch gradient: you divided its losses by k = {p.k}, but the group holds "
                  f"only {members} micro-batch{'es' * (members != 1)}. Divide by the group's real size, or sum-reduce "
                  "each loss and divide .grad, right before the step, by the samples counted since the last one: that "
                  "stays right when micro-batches differ in size, and needs no len().")),
    Diagnosis("divided by k twice", _loop_with(scale=lambda size, samples, members, k: 1 / k**2),
              lambda p, j, **_: (
                  f"{p.setting}, update {j + 1} used a gradient 1/{p.k} of the full-batch one: the loss is divided by "
                  "k twice (or by k and then by the number of samples again).")),
    Diagnosis("no reset after the epoch's last step", _loop_with(reset="after a full group's step"),
              lambda p, **_: (
                  f"{p.setting}, the updates are right, but .grad still holds a gradient when the epoch ends, and the "
                  "next epoch's first update adds it to its own: reset it after the last step too "
                  "(optimizer.zero_grad()), or at the start of each group.")),
)


def _explain_steps(p: _Problem, run: _LearnerRun):
    """The first step where the loop departs from full-batch training, named by the first row of _LOOP_DIAGNOSES that
    departs there alike, or else by what is read off that step."""
    steps = run.steps
    if not steps.positions[0]:
        return wrong(f"{p.setting}, your loop never called optimizer.step() (the optimizer it is given): the "
                     "accumulated gradient is never used.")
    at = _departure(steps, p)
    if at is None:
        return None
    epoch, j = at
    if j is not None and float(steps.grads[epoch][j].norm()) == 0:
        return wrong(f"{p.setting}, update {j + 1} used a zero gradient: no backward() reached the model between the "
                     "last reset of .grad and optimizer.step().")
    facts = _facts(p, steps, at)
    hint = hint_for(_LOOP_DIAGNOSES, lambda variant: _departs_alike(p, steps, at, variant), **facts)
    if at == (0, None):
        return wrong(_stepped_elsewhere(**facts) + (f" {hint}" if hint else ""))
    if hint is not None:
        return wrong(hint)
    if j is None:
        return wrong(f"{p.setting}, the first epoch is right, but the second steps after micro-batches "
                     f"{', '.join(map(str, steps.positions[1]))}: does your function keep state between calls?")
    if epoch == 1:
        return wrong(f"{p.setting}, the first epoch is right, but update {j + 1} of the second epoch used another "
                     f"gradient than full-batch training (relative error {facts['error']}).")
    sizes = p.group_sizes(j)
    if len(set(sizes)) > 1:
        return wrong(
            f"{p.setting}, the micro-batches of update {j + 1} hold {', '.join(map(str, sizes))} samples, and its "
            f"gradient is off (relative error {facts['error']}): each micro-batch mean must count by its share of the "
            "group's samples, whatever the sizes of the others (dividing by the number of micro-batches, or assuming "
            "they hold as many samples as the first, weighs them wrongly). Multiply each micro-batch loss by len(x) / "
            "(samples in its group), or sum-reduce it and divide .grad once, before the step, by the samples you "
            "counted."
        )
    return wrong(
        f"{p.setting}, update {j + 1} used a gradient that differs from the full-batch gradient of micro-batches "
        f"{facts['first']} to {facts['last_mb']} (relative error {facts['error']}). Compute loss_fn(model(x), y) for "
        "each micro-batch, scale it, call backward(), and step only at the end of a group."
    )


def _explain(p: _Problem, run: _LearnerRun):
    """The first mistake found, or None. (Not an ``or`` chain: a wrong Feedback is falsy.)"""
    for explain in (lambda: _explain_stream(p, run), lambda: _explain_passes(p, run), lambda: _explain_steps(p, run),
                    lambda: thrown_away_mistake(p.setting, run.passes)):
        fb = explain()
        if fb is not None:
            return fb
    return None


def _judge(train_epoch, seed, k, sizes, stream=False):
    """One scenario: the learner's loop first, then the full-batch reference on the same data regenerated from
    the seed, so that while the learner's code runs no frame above it holds the reference (or the last one)."""
    try:
        run = _run_learner(train_epoch, sizes, seed, k, stream)
    except Exception as err:  # the learner's code: report, never raise
        setting = _setting(len(sizes), k, stream)
        told = _stream_error(setting, err) if stream else None
        return told if told is not None else wrong(f"{setting}, your function raised {describe_error(err)}")
    batches, model = _data(sizes, seed)
    ref, ref_model = _reference(model, batches, k)
    problem = _Problem(k, sizes, seed, ref, stream)
    fb = _explain(problem, run)
    if fb is not None:
        return fb
    # all parameters as one vector, as _near measures a gradient: each step rounds an entry by a share of the
    # step's largest terms, so an entry near 0 (a bias) cannot be held to its own size
    if not _near(_flat_params(run.model), _flat_params(ref_model)):
        return wrong(
            f"{problem.setting}, each update used the right gradient, yet the final parameters differ from "
            "full-batch training: use the optimizer you are given, and step it once per group."
        )
    return None


@never_raises
def check_training_loop(train_epoch) -> Feedback:
    """Run the learner's ``train_epoch(model, loss_fn, optimizer, micro_batches, k)`` against full-batch training."""
    problem = read_function(train_epoch, f"your fixed function (answer = train_epoch), with the signature "
                            f"{_SIGNATURE}", _SIGNATURE, 5)
    if problem is not None:
        return problem
    for k, sizes, stream in _SCENARIOS:
        fb = _judge(train_epoch, trust.fresh_seed(), k, sizes, stream)  # data drawn afresh: nothing fits in advance
        if fb is not None:
            return fb
    tried = ", ".join(f"(n={len(sizes)}, k={k}{', a stream' * stream})" for k, sizes, stream in _SCENARIOS)
    return correct(
        f"your loop matches full-batch training step for step on {len(_SCENARIOS)} random problems {tried}, "
        f"short tail groups, micro-batches of unequal sizes and streams whose length is known only at their end "
        f"included, over {_EPOCHS} epochs (nothing left in .grad leaks into the next), with one graph alive at a "
        "time: each backward() covers one micro-batch."
    )


# --------------------------------------------------------------------------- 2. what each step adds up

STEP_COUNT_TASK = {"n": 41, "k": 8}  # an n and k the notebook never prints
_COUNT_EPOCHS = 2  # the second epoch's first step shows what the first left in .grad
_MOST_COUNTS = 1000  # far more items than any answer: a longer list is not read item by item


def _copied_steps(n, k):
    """The micro-batch indices i at which the copied loop steps in one epoch: (i - 1) % k == 0."""
    return [i for i in range(n) if (i - 1) % k == 0]


def _held_at_each_step(n, k, epochs=_COUNT_EPOCHS):
    """How many micro-batches' gradients .grad holds at each step of the copied loop, over ``epochs`` epochs with
    nothing that resets .grad between them."""
    held, counts = 0, []
    for _ in range(epochs):
        for i in range(n):
            held += 1
            if (i - 1) % k == 0:
                counts.append(held)
                held = 0
    return counts


def _as_list(answer):
    """A tuple, list, numpy array or 1-d tensor of at most ``_MOST_COUNTS`` items as a list of its items; anything
    else as None."""
    if isinstance(answer, torch.Tensor):
        if answer.dim() != 1 or answer.is_sparse or answer.is_meta or len(answer) > _MOST_COUNTS:
            return None
        return list(answer.detach().cpu().unbind(0))
    if not isinstance(answer, (tuple, list)) and not (getattr(answer, "ndim", None) == 1 and hasattr(answer, "tolist")):
        return None  # (the second: numpy, without importing it)
    return list(answer) if len(answer) <= _MOST_COUNTS else None


def _counts(answer):
    """The learner's counts as a list of ints, or None: one list, or one list for each epoch (a 2-d array or
    tensor, a list of lists) read epoch after epoch."""
    if isinstance(answer, torch.Tensor) and answer.dim() == 2 and not (answer.is_sparse or answer.is_meta):
        answer = answer.reshape(-1)
    elif getattr(answer, "ndim", None) == 2 and hasattr(answer, "reshape") and not isinstance(answer, torch.Tensor):
        answer = answer.reshape(-1)  # numpy, without importing it
    items = _as_list(answer)
    if items and all(_as_list(item) is not None for item in items):  # one list per epoch
        items = [x for item in items for x in _as_list(item)]
    counts = [as_int(a) for a in items] if items is not None and len(items) <= _MOST_COUNTS else [None]
    return None if None in counts else counts


def _micro_batches(count):
    return f"{count} micro-batch{'es' * (count != 1)}"


# A belief about exercise 2, as the counts it gives; it names the first count that is off where it gives that count.
_COUNT_DIAGNOSES = (
    Diagnosis(".grad emptied between epochs", lambda n, k: _held_at_each_step(n, k, epochs=1) * _COUNT_EPOCHS,
              lambda steps, left, **_: (
                  f"but nothing resets .grad between epochs: the {_micro_batches(left)} after the last step "
                  f"(i = {steps[-1]}) of the epoch before are still in it, and backward() adds to them.")),
)


def _step_count_hint(counts, expected, n, k):
    """The first thing that is off in a list of per-step counts, said with the copied loop's steps."""
    steps = _copied_steps(n, k)
    shown = ", ".join(map(str, steps[:3])) + (", ..." if len(steps) > 3 else "")
    if len(counts) != len(expected):
        return (f"the copied loop steps where (i - 1) % {k} == 0, at i = {shown} (i runs 0..{n - 1}; not at i = 0, "
                f"where (0 - 1) % k is k - 1 in Python): {len(steps)} steps an epoch, {len(expected)} in "
                f"{_COUNT_EPOCHS} epochs, and your list has {len(counts)} counts.")
    j = next(j for j, (got, want) in enumerate(zip(counts, expected)) if got != want)
    per_epoch, left = len(steps), n - 1 - steps[-1]
    if j == 0:
        return (f"the first step comes at i = {steps[0]} (counted from 0), so .grad then holds "
                f"{_micro_batches(steps[0] + 1)}, each divided by k.")
    if j % per_epoch:
        return f"step {j + 1}: between two steps of one epoch, k = {k} micro-batches run, each adding to .grad."
    said = (f"step {j + 1}, the first of epoch {j // per_epoch + 1}, comes at i = {steps[0]} again, after "
            f"{_micro_batches(steps[0] + 1)} of its own; ")
    return said + (hint_for(_COUNT_DIAGNOSES, lambda variant: variant(n, k)[j] == counts[j], steps=steps, left=left)
                   or f".grad also still holds the {_micro_batches(left)} the epoch before left after its last step.")


@never_raises
def check_step_counts(answer, n: int = STEP_COUNT_TASK["n"], k: int = STEP_COUNT_TASK["k"]) -> Feedback:
    """``answer``: for each optimizer step of the copied loop over two epochs of n micro-batches, in order, how many
    micro-batches' gradients .grad holds."""
    form = ("a list of ints, one for each optimizer.step() of the two epochs in order: how many micro-batches' "
            "gradients .grad holds")
    if is_unanswered(answer):
        return unanswered(form)
    counts = _counts(answer)
    if counts is None:
        return malformed(f"answer should be {form}.")
    expected = _held_at_each_step(n, k)
    if not expected:  # not the notebook's task: a loop that never steps
        return correct("the copied loop never steps.") if not counts else wrong(f"with n = {n}, k = {k} the copied "
                                                                                "loop never steps.")
    if counts != expected:
        return wrong(f"with n = {n}, k = {k}: " + _step_count_hint(counts, expected, n, k))
    per_epoch = len(expected) // _COUNT_EPOCHS
    epochs = "; ".join(", ".join(map(str, expected[e * per_epoch:(e + 1) * per_epoch])) for e in range(_COUNT_EPOCHS))
    steps = _copied_steps(n, k)
    left = n - 1 - steps[-1]
    if not left:
        return correct(f"{epochs}.")
    return correct(
        f"{epochs}. The copied loop leaves the last {_micro_batches(left)} of an epoch in .grad, and nothing resets "
        f"it: the next epoch's first step adds them to its own {steps[0] + 1}, each divided by k, and they count "
        "in an update of the wrong epoch."
    )


trust.record(__name__)  # last: every name above is defined (see .trust)
