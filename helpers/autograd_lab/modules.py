"""Which module made each backward node: a record of a model's forward pass, read by the graph drawing.

``record_modules(model)`` puts a forward pre-hook and a forward hook on every submodule. Each hook makes one
tiny probe node, whose sequence number (autograd numbers the nodes it creates, in order, per thread) marks
where that module's call begins and ends. A backward node made by the forward pass then belongs to the
innermost call whose bounds enclose its own number: exactly the module whose ``forward`` created it, however
deep. ``AccumulateGrad`` nodes (numbered apart) belong to the module that owns their parameter.

    with record_modules(model):
        loss = loss_fn(model(x), y)
    draw_graph(loss, params=model)    # nodes labelled by module; depth=1 collapses to the top modules

Standard PyTorch hooks only; the record holds names and numbers, never tensors.
"""

from __future__ import annotations

import bisect
import weakref
from collections import deque

import torch

__all__ = ["ModuleCalls", "calls_for", "record_modules"]

MAX_CALLS = 200_000  # module calls a record keeps (the oldest go first): bounded memory for a long-lived hook


def _sequence_number() -> int | None:
    """The sequence number autograd gives the next node it creates here (None when no graph is recorded)."""
    if not torch.is_grad_enabled() or torch.is_inference_mode_enabled():
        return None
    probe = torch.empty(0, requires_grad=True).view(0)
    return probe.grad_fn._sequence_nr()


class ModuleCalls:
    """The calls of ``model``'s modules seen so far: (first number, last number, qualified name, class)."""

    def __init__(self, model: torch.nn.Module):
        self.names = {id(m): name for name, m in model.named_modules()}
        self.kinds = {name: type(m).__name__ for name, m in model.named_modules()}
        self._calls: deque = deque(maxlen=MAX_CALLS)
        self._open: dict = {}
        self._hooks = []
        for module in model.modules():
            self._hooks.append(module.register_forward_pre_hook(self._enter))
            self._hooks.append(module.register_forward_hook(self._leave))

    def _enter(self, module, args):
        start = _sequence_number()
        if start is not None:
            self._open.setdefault(id(module), []).append(start)

    def _leave(self, module, args, output):
        stack = self._open.get(id(module))
        end = _sequence_number()
        if stack and end is not None:
            self._calls.append((stack.pop(), end, self.names[id(module)]))

    def remove(self) -> None:
        """Take the hooks off the model; what was recorded stays readable."""
        for hook in self._hooks:
            hook.remove()
        self._hooks.clear()

    def __enter__(self) -> ModuleCalls:
        return self

    def __exit__(self, *exc) -> None:
        self.remove()

    def lookup(self):
        """A function: backward node -> the qualified name of the module whose forward created it ("" for the
        model's own forward), or None when no recorded call made it. The calls are sorted once per graph."""
        calls = sorted(self._calls)
        starts = [c[0] for c in calls]

        def module_of(fn) -> str | None:
            number = fn._sequence_nr()
            for i in range(bisect.bisect_left(starts, number) - 1, -1, -1):
                start, end, name = calls[i]
                if start < number < end:
                    return name  # the latest call begun before it that encloses it: the innermost
            return None

        return module_of


_RECORDS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def record_modules(model: torch.nn.Module) -> ModuleCalls:
    """Record which of ``model``'s modules makes each backward node, from now on (a ``with`` block takes the
    hooks off at its end). ``draw_graph(loss, params=model)`` then labels the nodes by module."""
    if not isinstance(model, torch.nn.Module):
        raise TypeError(f"record_modules expects an nn.Module (your model), got {type(model).__name__}. "
                        "For example: with record_modules(model): loss = loss_fn(model(x), y)")
    old = _RECORDS.get(model)
    if old is not None:
        old.remove()
    _RECORDS[model] = calls = ModuleCalls(model)
    return calls


def calls_for(params) -> ModuleCalls | None:
    """The record of ``params`` when it is a model whose forward was recorded, else None."""
    if isinstance(params, torch.nn.Module):
        return _RECORDS.get(params)
    return None
