"""Checks for notebook 07, accumulation in practice.

- ``check_token_factor(factor)``: the learner's ``factor(n_micro, n_all, k, world, accelerate)``, the number a
  micro-batch's token-mean loss (a Hugging Face model's ``outputs.loss``) is multiplied by before its backward. The
  check runs it for real on fresh padded micro-batches (k = 3, a full update and a short one): in a hand-written
  accumulation loop on 1, 2 and 3 ranks and inside accelerate's ``accumulate()`` and ``backward()`` on this
  process for 1 and 2 ranks, each rank's ``.grad`` then averaged as DDP's all-reduce averages it, and compares
  every update's gradient with the full batch's token mean. The hint is read from the factor's values against
  the right ones. tests/exercises runs the right factor and the wrong ones on two real ranks, by hand and in
  accelerate, and finds what the check finds.
- ``check_scheduled_loop(train_epoch)``: the learner's fix of a loop over padded token micro-batches whose
  scheduler steps once per micro-batch and whose loss is the mean of the micro-batch means. The loop runs for
  two epochs on small problems whose micro-batches differ in size and padding, with a recording optimizer and
  scheduler. The check first refuses, as notebook 04's does (:mod:`.loops`), a loop that does not accumulate
  (one forward over a whole group, one backward over several micro-batches); then it compares where the
  optimizer stepped, how the scheduler stepped and the learning rate each update used, and last the weights
  with training on each group as one batch, naming the loss scalings that plausible wrong loops use.
"""

from __future__ import annotations

import copy
import functools
import math
import warnings

import torch
from torch import nn

from . import trust
from .answers import as_number, close, plain, read_function
from .diagnoses import Diagnosis, hint_for
from .feedback import Feedback, correct, describe_error, malformed, never_raises, wrong
from .isolation import kept_as_found
from .loops import pass_mistake, record_passes, thrown_away_mistake

__all__ = ["check_token_factor", "check_scheduled_loop", "lr_factor"]


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


def _padded(g, size):
    """``size`` sequences of ``_LENGTH`` positions as (tokens, labels), 1 to ``_LENGTH`` of each real tokens."""
    tokens = torch.randint(_VOCAB, (size, _LENGTH), generator=g)
    labels = torch.randint(_VOCAB, (size, _LENGTH), generator=g)
    labels[torch.arange(_LENGTH) >= torch.randint(1, _LENGTH + 1, (size, 1), generator=g)] = _IGNORE
    return tokens, labels


def _problem(n, sizes, seed):
    """A model and ``n`` micro-batches of padded sequences, ``sizes[i % len(sizes)]`` sequences in the i-th."""
    g = torch.Generator().manual_seed(seed)
    batches = [_padded(g, sizes[i % len(sizes)]) for i in range(n)]
    trust.seed_cpu(seed)
    return _model(), batches


def _token_loss(weights, tokens, labels):
    """The summed cross-entropy over the real tokens, and their number, for the model's weights as a list."""
    logits = nn.functional.embedding(tokens, weights[0]) @ weights[1].T + weights[2]
    loss = nn.functional.cross_entropy(logits.flatten(0, 1), labels.flatten(), ignore_index=_IGNORE,
                                       reduction="sum")
    return loss, (labels != _IGNORE).sum()


def _reference_weights(model, batches, k, divisor=lambda own, tokens, size, k: tokens, zero_each=False):
    """The weights after ``_EPOCHS`` epochs of SGD steps at the scheduled learning rates, one per group, each
    micro-batch's summed loss divided by ``divisor(its real tokens, the group's, the group's size, k)``, by default
    the group's real tokens; ``zero_each``: only the group's last micro-batch counts (``.grad`` wiped before every
    backward)."""
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
                total = total + loss / divisor(own, group_tokens, len(group), k)
            grads = torch.autograd.grad(total, params)
            weights = [w - _LR * lr_factor(update) * g for w, g in zip(weights, grads)]
            update += 1
    return weights


def _same(model, weights, rtol=1e-4) -> bool:
    return all(close(p.detach(), w, rtol=rtol, atol=1e-6) for p, w in zip(model.parameters(), weights))


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


def _weights_dividing_by(divisor):
    return functools.partial(_reference_weights, divisor=divisor)


# The weights plausible wrong loops end with, each a variant of the reference: (model, batches, k) -> weights.
_WEIGHT_DIAGNOSES = (
    Diagnosis("the mean of the micro-batch means", _weights_dividing_by(lambda own, tokens, size, k: own * size),
              "you divided each micro-batch's token mean by the number of micro-batches in its group: a micro-batch "
              "with few real tokens then weighs as much as a full one (the bug Hugging Face transformers fixed in "
              "2024). Sum the token losses and divide by the real tokens of the whole group, counted before its first "
              "backward()."),
    Diagnosis("each token mean over k", _weights_dividing_by(lambda own, tokens, size, k: own * k),
              "you divided each micro-batch's token mean by k: micro-batches with few real tokens weigh as much as "
              "full ones, and a short last group counts less. Divide the summed loss by the group's real tokens."),
    Diagnosis("the token means added up", _weights_dividing_by(lambda own, tokens, size, k: own),
              "each micro-batch's token mean went into backward() undivided: the group's gradient is a sum of means, "
              "several times too large. Divide the summed loss by the group's real tokens."),
    Diagnosis("the summed loss undivided", _weights_dividing_by(lambda own, tokens, size, k: 1),
              "the summed token loss went into backward() undivided: divide it by the real tokens of the group."),
    Diagnosis(".grad zeroed before every backward()", functools.partial(_reference_weights, zero_each=True),
              "at each step .grad held only the group's last micro-batch: zero_grad() before every backward() wipes "
              "what the group accumulated. Zero it after optimizer.step()."),
)


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
    if not _same(model, _reference_weights(start, batches, k)):
        # a row names the mistake of weights already found wrong: ten times the tolerance, since the learner's
        # loop adds its micro-batches in another order than the variant, and big wrong steps grow the rounding
        hint = hint_for(_WEIGHT_DIAGNOSES, lambda variant: _same(model, variant(start, batches, k), rtol=1e-3))
        return hint or ("the steps and the learning rates are right, but the weights differ from training on each "
                        "group as one batch (its summed token loss divided by its real tokens): look at how the loss "
                        "is divided and at zero_grad().")
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


# --------------------------------------------------------------------------- 3. the token factor


_FACTOR_SIGNATURE = "factor(n_micro, n_all, k, world, accelerate)"
_FACTOR_K = 3
_FACTOR_GROUPS = (3, 2)  # micro-batches of each update on every rank: a full group of k, then a short one
_HAND_WORLDS, _ACCELERATE_WORLDS = (1, 2, 3), (1, 2)


class _NotANumber(Exception):
    """The learner's factor returned something that is not one finite number."""

    def __init__(self, value, args):
        super().__init__(value)
        self.value, self.args_given = value, args


class _FactorRaised(Exception):
    """The learner's factor raised ``error`` when called with ``args``."""

    def __init__(self, error, args):
        super().__init__(error)
        self.error, self.args_given = error, args


class _Factor:
    """The learner's factor, called as a loop calls it: each call under ``kept_as_found`` (whatever the function
    does to torch's modes stays inside it), its value read as a plain float, every call noted in ``calls``."""

    def __init__(self, function):
        self.function, self.calls = function, []

    def __call__(self, n_micro, n_all, k, world, accelerate):
        args = (n_micro, n_all, k, world, accelerate)
        try:
            with kept_as_found():
                value = self.function(*args)
        except Exception as err:  # noqa: BLE001 -- the learner's function can raise anything
            raise _FactorRaised(err, args) from None
        number = as_number(plain(value) if isinstance(value, torch.Tensor) else value)
        if number is None or not math.isfinite(number):
            raise _NotANumber(value, args)
        self.calls.append((args, number))
        return number


def _right_factor(n_micro, n_all, k, world, accelerate):
    """The reference: the mean times ``n_micro`` is the summed loss; / ``n_all``, x ``world`` for DDP's mean, x ``k``
    for ``accelerator.backward``'s division."""
    return n_micro * world / n_all * (k if accelerate else 1)


def _factor_problem(seed, world):
    """A model, and per update (a full group of k micro-batches, then a short one) each rank's micro-batches of
    1 to 3 padded sequences."""
    g = torch.Generator().manual_seed(seed)
    updates = [[_unequal_group(g, size) for _ in range(world)] for size in _FACTOR_GROUPS]
    trust.seed_cpu(seed)
    return _model(), updates


def _unequal_group(g, size):
    """``size`` micro-batches of 1 to 3 padded sequences, drawn again until they do not all hold as many real
    tokens: where they all do, n_micro / n_all is the same for each, so a factor that ignores n_micro would weigh
    them rightly there, and its values could not show that it ignores n_micro."""
    while True:
        group = [_padded(g, int(torch.randint(1, 4, (), generator=g))) for _ in range(size)]
        if len({_real(labels) for _, labels in group}) > 1:
            return group


def _real(labels) -> int:
    return int((labels != _IGNORE).sum())


def _mean_loss(model, tokens, labels):
    """The micro-batch's loss as a Hugging Face model returns it: the mean over its real tokens."""
    logits = model(tokens)
    return nn.functional.cross_entropy(logits.flatten(0, 1), labels.flatten(), ignore_index=_IGNORE)


def _flat_grad(model):
    return torch.cat([p.grad.reshape(-1) for p in model.parameters()]).detach().clone()


def _full_batch(start, update):
    """The update's gradient from one batch of all its sequences, on all ranks: their token mean."""
    model = copy.deepcopy(start)
    tokens = torch.cat([t for rank in update for t, _ in rank])
    labels = torch.cat([lbl for rank in update for _, lbl in rank])
    _mean_loss(model, tokens, labels).backward()
    return _flat_grad(model)


def _by_hand(factor, start, updates):
    """Each update's gradient from a hand-written accumulation loop on every rank, then the mean over the ranks
    that DDP's all-reduce takes."""
    found = []
    for update in updates:
        n_all, world = sum(_real(lbl) for rank in update for _, lbl in rank), len(update)
        per_rank = []
        for micro_batches in update:
            model = copy.deepcopy(start)
            for tokens, labels in micro_batches:
                (_mean_loss(model, tokens, labels) * factor(_real(labels), n_all, _FACTOR_K, world, False)).backward()
            per_rank.append(_flat_grad(model))
        found.append(torch.stack(per_rank).mean(0))
    return found


def _in_accelerate(factor, start, updates):
    """Each update's gradient from accelerate's ``accumulate()`` and ``backward()`` on this process, for every rank
    of the problem, then DDP's mean over the ranks. accelerate's state (process-wide) is put back afterwards."""
    from accelerate import Accelerator
    from accelerate.state import AcceleratorState, GradientState, PartialState

    kept = [(state, dict(state._shared_state)) for state in (PartialState, AcceleratorState, GradientState)]
    for state, _ in kept:
        state._shared_state.clear()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # accelerate's own notices are no part of the answer
            accelerator = Accelerator(gradient_accumulation_steps=_FACTOR_K, cpu=True)
            found = []
            for update in updates:
                n_all, world = sum(_real(lbl) for rank in update for _, lbl in rank), len(update)
                per_rank = []
                for micro_batches in update:
                    model = accelerator.prepare(copy.deepcopy(start))
                    for tokens, labels in micro_batches:
                        with accelerator.accumulate(model):
                            accelerator.backward(_mean_loss(model, tokens, labels)
                                                 * factor(_real(labels), n_all, _FACTOR_K, world, True))
                    per_rank.append(_flat_grad(model))
                found.append(torch.stack(per_rank).mean(0))
            return found
    finally:
        for state, shared in kept:
            state._shared_state.clear()
            state._shared_state.update(shared)


def _same_gradient(found, ref) -> bool:
    return close(found, ref, rtol=1e-4, atol=1e-6)


def _near(value, target) -> bool:
    return value is not None and math.isclose(value, target, rel_tol=1e-6)


def _shared(values):
    """The one value all of ``values`` share (up to float rounding), or None."""
    values = list(values)
    return values[0] if values and all(_near(v, values[0]) for v in values) else None


def _ignores_n_micro(given: dict) -> bool:
    """Do calls that differ only in ``n_micro`` get the same factor?"""
    by_rest: dict = {}
    for args, value in given.items():
        by_rest.setdefault(args[1:], []).append((args[0], value))
    pairs = [found for found in by_rest.values() if len({n for n, _ in found}) > 1]
    return bool(pairs) and all(_shared(v for _, v in found) is not None for found in pairs)


# The factors plausible wrong answers use, each a variant of the reference (same signature).
_FACTOR_DIAGNOSES = (
    Diagnosis("1 / k", lambda n_micro, n_all, k, world, accelerate: 1 / k,
              "your factor is 1 / k: each micro-batch's mean then weighs the same, whatever its real tokens (a "
              "micro-batch with 2 real tokens counts as much as one with 12), and a short last group counts less. "
              "Weigh each mean by its micro-batch's real tokens, n_micro, over the update's, n_all."),
    Diagnosis("the rule for a summed loss", lambda n_micro, n_all, k, world, accelerate: world / n_all * k**accelerate,
              "that is section 2's rule for a summed loss, world / n_all (times k in accelerate). This loss is a mean, "
              "already divided by its micro-batch's own real tokens: multiply it by n_micro first, to get the summed "
              "loss back."),
    Diagnosis("DDP's mean forgotten", lambda n_micro, n_all, k, world, accelerate: n_micro / n_all * k**accelerate,
              "in your own loop each update's gradient came out 1 / world of the full batch's: DDP averages .grad "
              "over the world ranks, so multiply by world."),
    Diagnosis("k in the own loop too", lambda n_micro, n_all, k, world, accelerate: k * n_micro * world / n_all,
              "in your own loop each update's gradient came out k times the full batch's: loss.backward() divides by "
              "nothing. Only accelerator.backward() divides by k, so multiply by k only there."),
    Diagnosis("accelerate's division forgotten", lambda n_micro, n_all, k, world, accelerate: n_micro * world / n_all,
              "right in your own loop, but inside accelerate each update's gradient came out 1 / k of the full "
              "batch's: accelerator.backward() divides the loss by gradient_accumulation_steps, k, even in a short "
              "group. Multiply by k there."),
)


def _factor_hint(calls) -> str:
    """What the learner's factor got wrong: the first row whose factor gives the learner's value in every call
    made, else what its values show against the right ones."""
    hint = hint_for(_FACTOR_DIAGNOSES, lambda variant: all(_near(value, variant(*args)) for args, value in calls))
    if hint is not None:
        return hint
    if _ignores_n_micro(dict(calls)):
        return ("your factor does not depend on n_micro: each micro-batch's mean, already divided by its own real "
                "tokens, then counts alike whatever its size. Weigh it by its real tokens over the update's, "
                "n_micro / n_all.")
    if all(_near(value, _right_factor(*args)) for args, value in calls if not args[4]):
        return ("right in your own loop; inside accelerate the gradient differs from the full batch's. "
                "accelerator.backward() divides the loss by k, so the factor there is your loop's times k.")
    return ("each update's gradient differs from the full batch's token mean. The loss is a micro-batch's mean: turn "
            "it back into a sum (times n_micro), divide by the update's real tokens on all ranks (n_all), and "
            "multiply by every divisor still to come.")


@never_raises
def check_token_factor(factor) -> Feedback:
    """Exercise 1: the learner's ``factor(n_micro, n_all, k, world, accelerate)``, run by hand and in accelerate."""
    problem = read_function(factor, f"your function {_FACTOR_SIGNATURE}", _FACTOR_SIGNATURE, 5)
    if problem is not None:
        return problem
    torch.set_num_threads(1)  # tiny tensors: one thread is fastest (the check puts the count back)
    watched = _Factor(factor)
    runs = [(world, False) for world in _HAND_WORLDS] + [(world, True) for world in _ACCELERATE_WORLDS]
    try:
        for world, accelerate in runs:  # data and model drawn afresh each time: no factor can be fitted to them
            start, updates = _factor_problem(trust.fresh_seed(), world)
            found = (_in_accelerate if accelerate else _by_hand)(watched, start, updates)
            if not all(_same_gradient(g, _full_batch(start, u)) for g, u in zip(found, updates)):
                return wrong(_factor_hint(watched.calls))
    except _NotANumber as err:
        return malformed(f"{_FACTOR_SIGNATURE} must return one finite number; for {err.args_given} it returned "
                         f"{type(err.value).__name__} {err.value!r:.60}.")
    except _FactorRaised as raised:
        return malformed(f"your factor raised {describe_error(raised.error)} for {_FACTOR_SIGNATURE.split('(')[0]}"
                         f"{raised.args_given}.")
    return correct("the mean times n_micro is the micro-batch's summed loss; divided by the update's real tokens on "
                   "all ranks, times world for DDP's mean and times k for accelerator.backward()'s division, every "
                   "update's gradient was the full batch's token mean: by hand on 1, 2 and 3 ranks, and in "
                   "accelerate's accumulate() and backward() for 1 and 2, the short last group included.")


trust.record(__name__)  # last: every name above is defined (see .trust)
