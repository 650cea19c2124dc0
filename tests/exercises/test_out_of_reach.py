"""The function checks (04's loop, 05's update and model, 07's loop, 08's Function) against a graded student who
tries to get the points without the work, and against learner code that changes the kernel.

Each gaming route must fail to score; after every check the kernel's modes are as they were; nothing a learner's
code raises escapes, KeyboardInterrupt apart (it stops the cell, as the learner asked).
"""

import sys

import pytest
import torch
import torch.nn.functional as F
from test_accumulation_in_practice_checks import make_loop as loop07
from test_accumulation_in_practice_checks import token_loss_sum
from test_accumulation_pitfalls_checks import buggy as update05
from test_accumulation_pitfalls_checks import right_update as right05
from test_gradient_accumulation_checks import loop as loop04
from torch import nn
from torch.overrides import TorchFunctionMode

from autograd_lab.exercises import accumulation_in_practice as ex07
from autograd_lab.exercises import accumulation_pitfalls as ex05
from autograd_lab.exercises import beyond_backward as ex08
from autograd_lab.exercises import gradient_accumulation as ex04


class _Silu(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * torch.sigmoid(x)

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        s = torch.sigmoid(x)
        return g * (s + x * s * (1 - s))


def _layer_norm_model():
    return nn.Sequential(nn.Linear(ex05.IN_FEATURES, ex05.HIDDEN), nn.LayerNorm(ex05.HIDDEN), nn.Tanh(),
                         nn.Linear(ex05.HIDDEN, 1))


# (check, a right answer, a wrong one): every function check of the course
CHECKS = {
    "04": (ex04.check_training_loop, loop04(), loop04(zero="every micro-batch")),
    "05-update": (ex05.check_accumulated_update, right05, update05(scale="none")),
    "07": (ex07.check_scheduled_loop, loop07(), loop07(scale="mean of means")),
}


def _wrapped(answer, before):
    """The answer with ``before()`` run first on every call (functions), or on the first call (04, 07)."""
    def run(*args, **kwargs):
        before()
        return answer(*args, **kwargs)
    return run


class _Yes(TorchFunctionMode):
    """A mode that answers every comparison with True."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        if func in (torch.allclose, torch.equal):
            return True
        if func is torch.isclose:
            return torch.ones(torch.broadcast_shapes(args[0].shape, args[1].shape), dtype=torch.bool)
        return func(*args, **(kwargs or {}))


_KEPT = []


def _rude():
    """What a learner's code might leave changed. (The inference-mode guard is entered first: when it is finally
    dropped it restores the modes it saw, so entered last it would turn grad mode off again long after the check.)"""
    guard = torch.inference_mode()
    guard.__enter__()
    _KEPT.append(guard)
    torch.set_grad_enabled(False)
    torch.set_default_dtype(torch.float64)
    torch.set_anomaly_enabled(True)


def _state():
    return (torch.is_grad_enabled(), torch.get_default_dtype(), torch.is_anomaly_enabled(),
            torch.is_inference_mode_enabled(), torch._C._len_torch_function_stack(), torch.get_default_device(),
            torch.allclose, torch.equal, torch.Tensor.backward)


# =========================================================================== the kernel left as found


@pytest.mark.parametrize("name", list(CHECKS))
def test_a_check_leaves_the_kernel_as_it_found_it(name):
    check, right, _ = CHECKS[name]
    before = _state()
    check(_wrapped(right, _rude))
    assert _state() == before
    _KEPT.clear()
    assert not torch.is_inference_mode_enabled()


def test_the_model_and_silu_checks_leave_the_kernel_as_found():
    before = _state()

    def make():
        _rude()
        torch.set_grad_enabled(True)  # so that the model can still be built with parameters
        return _layer_norm_model()

    ex05.check_normalized_model(make)

    class Rude(_Silu):
        @staticmethod
        def backward(ctx, g):
            torch.set_default_dtype(torch.float64)
            torch.set_anomaly_enabled(True)
            return _Silu.backward(ctx, g)

    assert ex08.check_silu_backward(Rude).passed
    assert _state() == before
    _KEPT.clear()


# =========================================================================== comparisons out of reach


def _replace_comparisons():
    torch.allclose = lambda *a, **k: True
    torch.equal = lambda *a, **k: True
    torch.isclose = lambda a, b, **k: torch.ones(torch.broadcast_shapes(a.shape, b.shape), dtype=torch.bool)


@pytest.mark.parametrize("name", list(CHECKS))
def test_replacing_torch_allclose_does_not_pass_a_wrong_answer_and_is_undone(name):
    check, _, wrong_answer = CHECKS[name]
    real = torch.allclose, torch.equal, torch.isclose
    fb = check(_wrapped(wrong_answer, _replace_comparisons))
    assert not fb.passed, fb
    assert (torch.allclose, torch.equal, torch.isclose) == real


@pytest.mark.parametrize("name", list(CHECKS))
def test_a_mode_that_says_yes_to_every_comparison_does_not_pass_and_is_popped(name):
    check, _, wrong_answer = CHECKS[name]
    depth = torch._C._len_torch_function_stack()
    fb = check(_wrapped(wrong_answer, lambda: _Yes().__enter__()))
    assert not fb.passed, fb
    assert torch._C._len_torch_function_stack() == depth


# =========================================================================== the reference out of reach


def _harvest(depth=3):
    """Every tensor the learner's code can reach through the locals of the frames above it."""
    found, seen = [], set()

    def walk(obj, level):
        if id(obj) in seen or level > depth:
            return
        seen.add(id(obj))
        if isinstance(obj, torch.Tensor):
            found.append(obj.detach().reshape(-1).double())
        elif isinstance(obj, nn.Module):
            found.extend(p.detach().reshape(-1).double() for p in obj.parameters())
        elif isinstance(obj, dict):
            for v in list(obj.values()):
                walk(v, level + 1)
        elif isinstance(obj, (list, tuple)):
            for v in obj:
                walk(v, level + 1)
        elif hasattr(obj, "__dict__") and not isinstance(obj, type) and not callable(obj):
            walk(vars(obj), level + 1)

    frame = sys._getframe(2)
    while frame is not None:
        for value in list(frame.f_locals.values()):
            walk(value, 0)
        frame = frame.f_back
    return found


def _reachable(found, expected):
    return any(f.shape == e.shape and torch.allclose(f, e, rtol=1e-5, atol=1e-7) for f in found for e in expected)


def test_04_the_full_batch_reference_is_not_on_the_stack():
    found = []

    def peek(model, loss_fn, optimizer, micro_batches, k):
        found.extend(_harvest())  # a loop that only looks around: it never steps

    assert not ex04.check_training_loop(peek).passed
    batches, model = ex04._data(ex04._SCENARIOS[0][1], 0)
    ref, ref_model = ex04._reference(model, batches, ex04._SCENARIOS[0][0])
    expected = [g.double() for g in ref.grads[0]] + [p.detach().reshape(-1).double() for p in ref_model.parameters()]
    assert found and not _reachable(found, expected)


def test_05_the_full_batch_model_is_not_on_the_stack():
    found = []

    def peek(model, opt, x, y, k):
        found.extend(_harvest())
        return right05(model, opt, x, y, k)

    assert ex05.check_accumulated_update(peek).passed
    reference = ex05._train(ex05._mlp, lambda params: torch.optim.SGD(params, lr=0.1, momentum=0.9),
                            ex05.full_batch_reference, ex05._N, 2, 0)
    expected = [p.detach().reshape(-1).double() for p in reference.parameters()]
    assert found and not _reachable(found, expected)


def test_07_the_expected_weights_are_not_on_the_stack():
    found = []
    right = loop07()

    def peek(model, optimizer, scheduler, micro_batches, k):
        found.extend(_harvest())
        return right(model, optimizer, scheduler, micro_batches, k)

    assert ex07.check_scheduled_loop(peek).passed
    n, k, sizes = ex07._SCENARIOS[0]
    start, batches = ex07._problem(n, sizes, 0)
    expected = [w.reshape(-1).double() for w in ex07._reference_weights(start, batches, k)]
    assert found and not _reachable(found, expected)


# =========================================================================== forwards counted however spelled


def full_batch_functional_04(model, loss_fn, optimizer, micro_batches, k):
    """The whole group through F.linear (no module call), throwaway model(x) calls to match the count."""
    n = len(micro_batches)
    for start in range(0, n, k):
        group = micro_batches[start:start + k]
        x = torch.cat([x for x, _ in group])
        y = torch.cat([y for _, y in group])
        for xb, _ in group:
            model(xb)  # thrown away
        F.mse_loss(F.linear(x, model.weight, model.bias), y).backward()
        optimizer.step()
        optimizer.zero_grad()


def full_batch_through_forward_04(model, loss_fn, optimizer, micro_batches, k):
    """The issue's route: the whole group through model.forward, throwaway model(x) calls beside it."""
    n = len(micro_batches)
    for start in range(0, n, k):
        group = micro_batches[start:start + k]
        x = torch.cat([x for x, _ in group])
        y = torch.cat([y for _, y in group])
        for xb, _ in group[1:]:
            model(xb)
        loss_fn(model.forward(x), y).backward()
        optimizer.step()
        optimizer.zero_grad()


def full_batch_functional_05(model, opt, x, y, k):
    """The full-batch reference computed by hand through F.linear, with k throwaway forwards of the pieces."""
    opt.zero_grad()
    for xb in x.tensor_split(k):
        model(xb)
    first, last = model[0], model[-1]
    out = F.linear(torch.tanh(F.linear(x, first.weight, first.bias)), last.weight, last.bias)
    (F.mse_loss(out, y) + ex05.LAM * ex05.penalty(model)).backward()
    nn.utils.clip_grad_value_(model.parameters(), ex05.MAX_VALUE)
    opt.step()


def full_batch_through_forward_05(model, opt, x, y, k):
    opt.zero_grad()
    for xb in x.tensor_split(k)[1:]:
        model(xb)
    (F.mse_loss(model.forward(x), y) + ex05.LAM * ex05.penalty(model)).backward()
    nn.utils.clip_grad_value_(model.parameters(), ex05.MAX_VALUE)
    opt.step()


def full_batch_07(model, optimizer, scheduler, micro_batches, k):
    """Each group's tokens concatenated and run through the embedding's functional form, throwaways beside."""
    n = len(micro_batches)
    for start in range(0, n, k):
        group = micro_batches[start:start + k]
        tokens = torch.cat([t for t, _ in group])
        labels = torch.cat([lab for _, lab in group])
        for t, _ in group:
            model(t)
        logits = model[1](F.embedding(tokens, model[0].weight))
        loss = F.cross_entropy(logits.flatten(0, 1), labels.flatten(), ignore_index=-100)
        loss.backward()
        optimizer.step()
        scheduler.step()
        optimizer.zero_grad()


@pytest.mark.parametrize("check, answer", [
    (ex04.check_training_loop, full_batch_functional_04),
    (ex04.check_training_loop, full_batch_through_forward_04),
    (ex05.check_accumulated_update, full_batch_functional_05),
    (ex05.check_accumulated_update, full_batch_through_forward_05),
    (ex07.check_scheduled_loop, full_batch_07),
], ids=["04-functional", "04-model.forward", "05-functional", "05-model.forward", "07-functional"])
def test_a_full_batch_beside_throwaway_forwards_does_not_score(check, answer):
    fb = check(answer)
    assert fb.status == "wrong" and "samples at once" in fb.message, fb


def test_token_loss_of_the_07_tests_is_the_one_the_check_uses():
    model, batches = ex07._problem(3, (2,), 0)
    tokens, labels = batches[0]
    weights = list(model.parameters())
    assert torch.allclose(token_loss_sum(model, tokens, labels), ex07._token_loss(weights, tokens, labels)[0])


def test_04_forwards_thrown_away_beside_a_hand_written_gradient_do_not_score():
    def hand_written(model, loss_fn, optimizer, micro_batches, k):
        n = len(micro_batches)
        for start in range(0, n, k):
            group = micro_batches[start:start + k]
            x = torch.cat([x for x, _ in group])
            y = torch.cat([y for _, y in group])
            for xb, _ in group:
                model(xb)  # the count matches; no graph reaches backward()
            with torch.no_grad():
                err = 2 * (x @ model.weight.T + model.bias - y) / len(x)
                model.weight.grad = err.T @ x
                model.bias.grad = err.sum(0)
            optimizer.step()
            optimizer.zero_grad()

    fb = ex04.check_training_loop(hand_written)
    assert fb.status == "wrong" and "never reached a backward()" in fb.message, fb


# =========================================================================== nothing escapes, but an interrupt


@pytest.mark.parametrize("name", list(CHECKS))
def test_sys_exit_in_a_learners_loop_is_feedback(name):
    check, right, _ = CHECKS[name]
    fb = check(_wrapped(right, lambda: sys.exit(1)))
    assert fb.status == "malformed" and "SystemExit" in fb.message, fb


@pytest.mark.parametrize("name", list(CHECKS))
def test_an_interrupt_in_a_learners_loop_stops_the_check(name):
    check, right, _ = CHECKS[name]

    def interrupt():
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        check(_wrapped(right, interrupt))
    assert torch.is_grad_enabled()


# =========================================================================== the classic mistakes named


def test_04_stepping_on_the_very_first_micro_batch_is_named():
    fb = ex04.check_training_loop(loop04(step_when=lambda i, n, k: i % k == 0 or i + 1 == n))
    assert fb.status == "wrong" and "right after the first micro-batch" in fb.message, fb


def test_07_stepping_on_the_very_first_micro_batch_is_named():
    fb = ex07.check_scheduled_loop(loop07(step="first"))
    assert fb.status == "wrong" and "right after the very first micro-batch" in fb.message, fb


@pytest.mark.parametrize("how", ["value", "norm"])
def test_05_the_notebooks_max_norm_instead_of_the_exercises_bound_is_named(how):
    fb = ex05.check_accumulated_update(update05(how=how, bound=0.2))
    assert fb.status == "wrong" and "the notebook's comparison table" in fb.message, fb
