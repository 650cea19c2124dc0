"""Checks for notebook 04, gradient accumulation.

- ``check_training_loop(train_epoch)``: the learner's fixed accumulation loop, run against
  full-batch training on random data; differences are explained (step positions, the
  tail, the loss scaling, a missing ``zero_grad``).
- ``check_step_counts(answer)``: how many optimizer steps three loops take for n = 50, k = 8.
- ``check_token_weights(answer)``: the weight of each micro-batch's mean loss when the
  micro-batches hold different numbers of real tokens.
"""

from __future__ import annotations

import copy
import inspect
import math
from numbers import Real

import torch
from torch import nn

from . import Feedback, correct, is_unanswered, malformed, unanswered, wrong

__all__ = ["check_training_loop", "check_step_counts", "check_token_weights", "STEP_COUNT_TASK", "TOKEN_COUNTS"]

# --------------------------------------------------------------------------- 1. fix the seed's loop

# (number of micro-batches, k, samples per micro-batch, samples in the last micro-batch)
_SCENARIOS = [
    (25, 10, 4, 4),  # the seed's setting: a tail group of 5
    (12, 4, 4, 4),  # no tail
    (7, 3, 4, 4),  # a tail group of 1
    (3, 5, 4, 4),  # fewer micro-batches than k: one short update
    (10, 4, 4, 1),  # the last micro-batch is short, as a DataLoader without drop_last gives it
]
_LR = 0.1

_SIGNATURE = "train_epoch(model, loss_fn, optimizer, micro_batches, k)"


def _data(n, size, last, seed):
    g = torch.Generator().manual_seed(seed)
    w_true = torch.randn(3, 1, generator=g)
    batches = []
    for i in range(n):
        m = last if i == n - 1 else size
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


def _reference(model, batches, k):
    """Full-batch training: one update per group of k consecutive micro-batches (the last group may be short)."""
    model = copy.deepcopy(model)
    opt = torch.optim.SGD(model.parameters(), lr=_LR)
    positions, grads = [], []
    for start in range(0, len(batches), k):
        group = batches[start:start + k]
        x = torch.cat([x for x, _ in group])
        y = torch.cat([y for _, y in group])
        nn.MSELoss()(model(x), y).backward()
        positions.append(start + len(group))
        grads.append(_flat_grad(model))
        opt.step()
        opt.zero_grad()
    return positions, grads, model


def _run_learner(fn, model, batches, k):
    """Run the learner's loop on a copy, recording after how many forward passes each step ran."""
    model = copy.deepcopy(model)
    opt = torch.optim.SGD(model.parameters(), lr=_LR)
    forwards = [0]
    model.register_forward_pre_hook(lambda *_: forwards.__setitem__(0, forwards[0] + 1))
    positions, grads = [], []
    real_step = opt.step

    def step(*args, **kwargs):
        positions.append(forwards[0])
        grads.append(_flat_grad(model))
        return real_step(*args, **kwargs)

    opt.step = step
    fn(model, nn.MSELoss(), opt, list(batches), k)
    leftover = any(p.grad is not None and bool(p.grad.abs().sum() > 0) for p in model.parameters())
    return positions, grads, leftover, forwards[0], model


def _close(a, b):
    return torch.allclose(a, b, rtol=1e-4, atol=1e-6)


def _ratio(a, b):
    return float(a @ b) / float(b @ b)


def _explain(n, k, size, last, positions, grads, leftover, forwards, ref_positions, ref_grads):
    setting = f"With n = {n} micro-batches and k = {k}"
    if forwards != n:
        return wrong(
            f"{setting}, your function ran the model {forwards} times; an epoch of accumulation runs it once per "
            "micro-batch (model(x) for each (x, y) in micro_batches)."
        )
    if not positions:
        return wrong(f"{setting}, your loop never called optimizer.step(): the accumulated gradient is never used.")
    if positions != ref_positions:
        shown = ", ".join(map(str, positions))
        want = ", ".join(map(str, ref_positions))
        if positions == ref_positions[:-1]:
            r = n - ref_positions[-2]
            return wrong(
                f"{setting}, your loop steps after micro-batches {shown} (counted from 1) and then stops: the last "
                f"{r} micro-batch{'es' * (r != 1)} never reach an optimizer step. Their gradient stays in .grad "
                "and leaks into the next epoch. Step also when i + 1 == len(micro_batches)."
            )
        hint = ""
        if positions and positions[0] == 2 and k != 2:
            hint = (" Your first step comes after only 2 micro-batches: that is the seed's (i - 1) % k == 0, "
                    "which is true at i = 1. With i counted from 0, micro-batch i completes a group when (i + 1) % k == 0.")
        elif positions and positions[0] == k + 1:
            hint = " Each step comes one micro-batch late: with i counted from 0, use (i + 1) % k == 0."
        return wrong(
            f"{setting}, your loop steps after micro-batches {shown} (counted from 1); full-batch training steps "
            f"after {want}: after every k-th micro-batch and after the last one.{hint}"
        )
    # Right positions: compare the gradient each step used with the full-batch gradient of its group.
    for j, (g, g_ref) in enumerate(zip(grads, ref_grads)):
        if _close(g, g_ref):
            continue
        first, last_mb = (ref_positions[j - 1] if j else 0) + 1, ref_positions[j]
        members = last_mb - first + 1
        if j > 0 and _close(g - grads[j - 1], g_ref):
            return wrong(
                f"{setting}, update {j + 1} used its own gradient plus the previous update's: .grad is not reset "
                "after optimizer.step(). Call optimizer.zero_grad() right after each step."
            )
        c = _ratio(g, g_ref)
        tail = j == len(ref_grads) - 1 and members < k
        sizes_differ = last != size and last_mb == n
        if math.isclose(c, k, rel_tol=1e-3) or (tail and math.isclose(c, members, rel_tol=1e-3)):
            return wrong(
                f"{setting}, update {j + 1} used a gradient {c:.3g} times the full-batch one: each micro-batch "
                "loss must be divided by the number of micro-batches in its group before backward(), so the "
                "gradients add up to the mean over the group."
            )
        if tail and math.isclose(c, members / k, rel_tol=1e-3):
            return wrong(
                f"{setting}, the last update (micro-batches {first} to {last_mb}, a group of {members}) used "
                f"{c:.3g} times the full-batch gradient: you divided its losses by k = {k}, but the group holds "
                f"only {members} micro-batch{'es' * (members != 1)}. Divide by the group's real size, "
                "min(k, n - (i // k) * k)."
            )
        if math.isclose(c, 1 / k, rel_tol=1e-3):
            return wrong(
                f"{setting}, update {j + 1} used a gradient 1/{k} of the full-batch one: the loss is divided by k "
                "twice (or by k and then by the number of samples again)."
            )
        if sizes_differ:
            return wrong(
                f"{setting}, the last micro-batch holds {last} sample{'s' * (last != 1)} where the others hold "
                f"{size}, and the last update's gradient is off (relative error "
                f"{float((g - g_ref).norm() / g_ref.norm()):.3g}). Dividing each micro-batch mean by the number of "
                "micro-batches weighs a short micro-batch's samples too much: multiply each micro-batch loss by "
                "len(x) / (samples in its group) instead."
            )
        return wrong(
            f"{setting}, update {j + 1} used a gradient that differs from the full-batch gradient of micro-batches "
            f"{first} to {last_mb} (relative error {float((g - g_ref).norm() / g_ref.norm()):.3g}). "
            "Compute loss_fn(model(x), y) for each micro-batch, scale it, call backward(), and step only at the "
            "end of a group."
        )
    if leftover:
        return wrong(
            f"{setting}, the updates are right, but .grad still holds a gradient when the epoch ends: reset it "
            "after the last step too (optimizer.zero_grad()), or it leaks into the next epoch."
        )
    return None


def check_training_loop(train_epoch) -> Feedback:
    """Run the learner's ``train_epoch(model, loss_fn, optimizer, micro_batches, k)`` against full-batch training."""
    if is_unanswered(train_epoch):
        return unanswered(f"your fixed function (answer = train_epoch), with the signature {_SIGNATURE}")
    if not callable(train_epoch):
        return malformed(f"answer should be a function {_SIGNATURE}; got {type(train_epoch).__name__}.")
    try:
        inspect.signature(train_epoch).bind(None, None, None, None, None)
    except TypeError:
        return malformed(f"answer should take five arguments: {_SIGNATURE}.")
    except ValueError:  # a builtin without a signature: just try it
        pass
    for seed, (n, k, size, last) in enumerate(_SCENARIOS):
        batches, model = _data(n, size, last, seed)
        ref_positions, ref_grads, ref_model = _reference(model, batches, k)
        try:
            positions, grads, leftover, forwards, trained = _run_learner(train_epoch, model, batches, k)
        except Exception as err:  # the learner's code: report, never raise
            return wrong(f"With n = {n} micro-batches and k = {k}, your function raised "
                         f"{type(err).__name__}: {err}")
        fb = _explain(n, k, size, last, positions, grads, leftover, forwards, ref_positions, ref_grads)
        if fb is not None:
            return fb
        for p, q in zip(trained.parameters(), ref_model.parameters()):
            if not _close(p.detach(), q.detach()):
                return wrong(
                    f"With n = {n} micro-batches and k = {k}, each update used the right gradient, yet the final "
                    "parameters differ from full-batch training: use the optimizer you are given, and step it "
                    "once per group."
                )
    tried = ", ".join(f"(n={n}, k={k})" for n, k, *_ in _SCENARIOS)
    return correct(
        f"your loop matches full-batch training step for step on {len(_SCENARIOS)} random problems {tried}, "
        "a short tail group and a short last micro-batch included, and leaves .grad empty at the end."
    )


# --------------------------------------------------------------------------- 2. predict the step counts

STEP_COUNT_TASK = {"n": 50, "k": 8}


def _count(condition, n, k):
    return sum(1 for i in range(n) if condition(i, n, k))


_LOOPS = {
    "the seed's loop, (i - 1) % k == 0": lambda i, n, k: (i - 1) % k == 0,
    "the (i + 1) % k == 0 loop": lambda i, n, k: (i + 1) % k == 0,
    "the correct loop, (i + 1) % k == 0 or i + 1 == n": lambda i, n, k: (i + 1) % k == 0 or i + 1 == n,
}


def check_step_counts(answer, n: int = STEP_COUNT_TASK["n"], k: int = STEP_COUNT_TASK["k"]) -> Feedback:
    """``answer``: (steps of the seed's loop, steps of the (i + 1) loop, steps of the correct loop) for n, k."""
    form = "a tuple of three ints: (seed's loop, (i + 1) loop, correct loop), e.g. (3, 2, 3)"
    if is_unanswered(answer):
        return unanswered(form)
    if not isinstance(answer, (tuple, list)) or len(answer) != 3 or not all(
        isinstance(a, int) and not isinstance(a, bool) for a in answer
    ):
        return malformed(f"answer should be {form}.")
    expected = [_count(cond, n, k) for cond in _LOOPS.values()]
    if list(answer) == expected:
        return correct(
            f"{expected[0]}, {expected[1]} and {expected[2]} steps. The seed's loop takes as many steps as the "
            "correct one here, but at the wrong places: its first update uses only 2 micro-batches."
        )
    hints = []
    names = list(_LOOPS)
    for name, got, want in zip(names, answer, expected):
        if got == want:
            continue
        if name.startswith("the seed"):
            hints.append(f"{name}: i runs 0..{n - 1}; (i - 1) % {k} == 0 holds at i = 1, {1 + k}, {1 + 2 * k}, ... "
                         "(not at i = 0, where (0 - 1) % k is k - 1 in Python). Count them.")
        elif name.startswith("the (i + 1)"):
            hints.append(f"{name}: it steps after each full group of {k} only, at i = {k - 1}, {2 * k - 1}, ...; "
                         f"the last {n % k} micro-batches form no full group.")
        else:
            hints.append(f"{name}: one step per group of {k} consecutive micro-batches, the last group possibly "
                         f"shorter: ceil({n} / {k}).")
    return wrong(f"with n = {n}, k = {k}: " + " ".join(hints))


# --------------------------------------------------------------------------- 3. weights for token counts

TOKEN_COUNTS = (3, 12, 5)


def check_token_weights(answer, counts=TOKEN_COUNTS) -> Feedback:
    """``answer``: the factor for each micro-batch's mean token loss so their sum is the full batch's mean."""
    form = f"a list of {len(counts)} numbers, one factor per micro-batch, e.g. [0.5, 0.25, 0.25]"
    if is_unanswered(answer):
        return unanswered(form)
    if isinstance(answer, torch.Tensor):
        answer = answer.tolist()
    if not isinstance(answer, (tuple, list)) or len(answer) != len(counts) or not all(
        isinstance(a, Real) and not isinstance(a, bool) for a in answer
    ):
        return malformed(f"answer should be {form}.")
    total = sum(counts)
    expected = [c / total for c in counts]
    if all(math.isclose(a, e, rel_tol=1e-6, abs_tol=1e-9) for a, e in zip(answer, expected)):
        return correct(
            "each micro-batch's mean is weighted by its share of the real tokens, n_i / N. "
            "Equivalently: sum each micro-batch's token losses and divide by num_items_in_batch = "
            f"{total}, the total counted before the loop."
        )
    k = len(counts)
    if all(math.isclose(a, 1 / k, rel_tol=1e-6) for a in answer):
        return wrong(
            f"1/{k} each is dividing by k: a micro-batch with {min(counts)} real tokens then weighs as much as one "
            f"with {max(counts)}, so each of its tokens counts {max(counts) / min(counts):.3g} times as much. This "
            "was the October 2024 bug in Hugging Face transformers. Weigh each mean by its share of the tokens."
        )
    if all(math.isclose(a, 1 / total, rel_tol=1e-6) for a in answer):
        return wrong(
            f"1/{total} each would fit token losses that are summed per micro-batch; here each micro-batch "
            "loss is already a mean over its own tokens, so multiply it back by its token count first."
        )
    if not math.isclose(sum(answer), 1.0, rel_tol=1e-6):
        return wrong(
            f"your factors add up to {sum(answer):.4g}; for a mean over all tokens they must add up to 1 "
            "(the full batch's mean is a weighted average of the micro-batch means)."
        )
    return wrong(
        "the factors add up to 1 but are not in the right proportion: a micro-batch's share of the "
        f"full-batch mean is its share of the real tokens, {' / '.join(map(str, counts))} out of {total}."
    )
