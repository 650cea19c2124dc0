"""The stepper renders per-step gradients as data: a learner's real .grad is never read or written."""

import torch

from autograd_lab import stepper


class WatchedTensor(torch.Tensor):
    """A leaf that counts every write to its .grad."""

    writes = 0

    @property
    def grad(self):
        return torch.Tensor.grad.__get__(self)

    @grad.setter
    def grad(self, value):
        type(self).writes += 1
        torch.Tensor.grad.__set__(self, value)


def by_hand(loss):
    """Backward run node by node, logged as the notebook's loop logs it (inputs before users here)."""
    log, pending = [], [(loss.grad_fn, torch.ones_like(loss))]
    while pending:
        node, grad_output = pending.pop(0)
        if hasattr(node, "variable"):
            log.append((node, grad_output, ()))
            continue
        grads = node(grad_output)
        grads = grads if isinstance(grads, tuple) else (grads,)
        log.append((node, grad_output, grads))
        pending += [(child, g) for (child, _), g in zip(node.next_functions, grads) if child is not None]
    return log


def test_draw_step_shows_deposits_without_touching_the_real_grad():
    w = torch.tensor(1.0).as_subclass(WatchedTensor).requires_grad_()
    loss = (w * 3.0) ** 2
    log = by_hand(loss)
    w.grad = torch.tensor(123.0)  # what the learner's .grad holds
    WatchedTensor.writes = 0
    for step in range(len(log) + 1):
        text = stepper.draw_step(loss, log, step, params={"w": w}).text
        assert ("grad 18." in text) == (step == len(log)) and "123" not in text
    assert WatchedTensor.writes == 0 and w.grad.item() == 123.0
    assert "adds 18. into w.grad (now 18.)" in stepper.describe_step(log, len(log), params={"w": w})
