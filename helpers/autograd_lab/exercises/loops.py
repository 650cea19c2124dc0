"""Watching a learner's training loop: how often it ran the model, on how much, and how many micro-batches
each gradient computation went through.

Three checks share it (notebooks 04, 05 and 07): a loop that computes the right gradient but does not
accumulate -- one forward pass over a whole group, or one ``backward()`` over the losses of several
micro-batches, which keeps all their graphs alive -- must not pass. ``record_passes(model)`` watches the
loop; ``pass_mistake`` and ``wide_pass_mistake`` turn what it saw into the hint.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field

import torch
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode, _get_current_dispatch_mode_stack

from . import isolation, trust
from .feedback import wrong

__all__ = ["PassLog", "pass_mistake", "record_passes", "thrown_away_mistake", "unwatched_mistake", "wide_pass_hint",
           "wide_pass_mistake"]


@dataclass
class PassLog:
    """What ``record_passes`` saw a training loop do with a model.

    ``forward_sizes``: the batch size of each forward pass that built a graph (gradients enabled);
    ``untracked_forwards``: forward passes that built none (``torch.no_grad()``, inference mode);
    ``outputs_per_backward``: for each gradient computation (a ``backward()`` or a ``torch.autograd.grad``
    call) that went through the model's outputs, how many of those forward outputs it went through. A true
    accumulation loop gives 1 each time: one graph alive at a time. More than 1 means several micro-batches'
    graphs were kept alive for one gradient computation. ``pass_kinds``: for each of them, "backward()" when
    it accumulated into the first parameter's ``.grad``, else "torch.autograd.grad call" (which returns the
    gradients instead). ``backwarded_forwards``: how many of the forward passes with gradients some gradient
    computation went through (a pass whose output is thrown away does not count); ``widest_use``: the most samples
    any computation on the model's parameters saw with gradients on, however it was spelled (``model(x)``,
    ``type(model).forward(model, x)``, ``F.linear(x, model.weight, model.bias)``, under
    ``torch._C.DisableTorchFunction()`` or on a deep copy of the model). A backward whose gradient at the outputs
    is zero everywhere (a loss multiplied by 0) is no pass through them.
    """

    forward_sizes: list = field(default_factory=list)
    untracked_forwards: int = 0
    backwarded_forwards: int = 0
    widest_use: int = 0
    outputs_per_backward: list = field(default_factory=list)
    pass_kinds: list = field(default_factory=list)
    unwatched: str | None = None  # what the learner's code switched off of the watching, if anything
    _reached: set = field(default_factory=set, repr=False)  # the forward passes the running backward reached
    _accumulated: bool = field(default=False, repr=False)

    @property
    def most_outputs_per_backward(self) -> int:
        return max(self.outputs_per_backward, default=0)

    @property
    def widest_pass_kind(self) -> str:
        """How the gradient computation that went through the most outputs was called ("backward()" if none)."""
        if not self.outputs_per_backward:
            return "backward()"
        return self.pass_kinds[self.outputs_per_backward.index(self.most_outputs_per_backward)]


def _unwatched(watch, handles) -> str | None:
    """What a learner's code switched off of the watching (None when nothing): the mode popped from the dispatch
    stack, or a hook removed from the model."""
    if watch not in _get_current_dispatch_mode_stack():
        torch._C._push_on_torch_dispatch_stack(watch)  # back on, so that leaving it below pops it
        return "it took the check's watcher off torch's dispatch mode stack"
    if id(watch) in isolation.TAKEN_OFF:  # taken off, and put back when the learner's call returned
        isolation.TAKEN_OFF.discard(id(watch))
        return "it took the check's watcher off torch's dispatch mode stack"
    if any(h.id not in h.hooks_dict_ref() for h in handles if h.hooks_dict_ref() is not None):
        return "it removed a hook of the check from the model"
    return None


def _queue_at_end_of_backward(callback):
    """Run ``callback`` when the gradient computation now running ends (``backward()`` and ``autograd.grad``)."""
    torch.autograd.Variable._execution_engine.queue_callback(callback)


def _carries(grad) -> bool:
    """Does a gradient reaching a forward's output carry anything (a finite, nonzero value somewhere)?"""
    with torch.no_grad():
        return bool(grad is not None and (grad != 0).any())


def _output_tensors(out) -> list:
    """The tensors of a model's output: a tensor, or tuples, lists, dicts and dataclasses of them (a Hugging Face
    ``ModelOutput`` is a dict)."""
    if isinstance(out, torch.Tensor):
        return [out]
    if isinstance(out, Mapping):
        values = list(out.values())
    elif dataclasses.is_dataclass(out) and not isinstance(out, type):
        values = [getattr(out, f.name) for f in dataclasses.fields(out)]
    elif isinstance(out, (list, tuple)):
        values = list(out)
    else:
        return []
    return [t for v in values for t in _output_tensors(v)]


def _batch_size(args, kwargs) -> int:
    """The first dimension of the first tensor argument (positional, then keyword); 1 when there is none."""
    for x in [*args, *kwargs.values()]:
        if isinstance(x, torch.Tensor):
            return len(x) if x.dim() else 1
    return 1


@contextlib.contextmanager
def record_passes(model: nn.Module, *, hooks: bool = True):
    """Record the forward and backward passes of ``model`` while the block runs; yields a ``PassLog``.

    A gradient computation is delimited by autograd itself (a callback queued for its end), so one
    ``torch.autograd.grad`` call over several micro-batches' losses is seen as one, like one ``backward()``.
    ``hooks=False`` puts nothing on the model (no forward or gradient hook a loop could look for) and records
    only what the dispatcher sees: ``widest_use`` and ``unwatched``.
    """
    log = PassLog()
    backwarded: set = set()  # the forward passes some backward reached
    first = next((p for p in model.parameters() if p.requires_grad), None)

    def end_of_pass():
        if log._reached:  # the first output's callback closes the pass; the others find nothing left
            log.outputs_per_backward.append(len(log._reached))
            log.pass_kinds.append("backward()" if log._accumulated else "torch.autograd.grad call")
            log._reached, log._accumulated = set(), False

    def after_forward(module, args, kwargs, out):
        tracked = [t for t in _output_tensors(out) if t.requires_grad]
        if not tracked:
            log.untracked_forwards += 1
            return
        log.forward_sizes.append(_batch_size(args, kwargs))
        forward = len(log.forward_sizes)

        def output_reached(grad):  # any tensor of this forward's output reached: the forward counts once
            if not _carries(grad):  # a loss multiplied by 0 sends nothing back: no micro-batch pass
                return
            if forward not in backwarded:  # reached by some backward at least once
                backwarded.add(forward)
                log.backwarded_forwards += 1
            log._reached.add(forward)
            _queue_at_end_of_backward(end_of_pass)

        for t in tracked:
            t.register_hook(output_reached)

    def after_accumulation(param):
        if log._reached:  # a pass through the outputs (not, say, a penalty's own backward) reached .grad
            log._accumulated = True

    handles = [model.register_forward_hook(after_forward, with_kwargs=True)] if hooks else []
    if first is not None and hooks:
        handles.append(first.register_post_accumulate_grad_hook(after_accumulation))
    watch = _SampleUses(model, log)
    try:
        with watch:
            yield log
            log.unwatched = _unwatched(watch, handles)
    finally:
        for handle in handles:
            handle.remove()


class _SampleUses(TorchDispatchMode):
    """Notes in ``log.widest_use`` the most samples an operation on ``model``'s parameters saw with gradients on.

    It watches at the dispatcher, below every Python-level route around it (``torch._C.DisableTorchFunction()``,
    ``F.linear`` on the weights, a deep copy of the model): every operation reaches it. A tensor computed from
    the parameters alone (``model.weight.T``, a copy of the model's weights) counts as a parameter; it is known
    by its storage, which views and ``.data`` share. In an operation that mixes them with other tensors, the
    other tensors' first dimension is the number of samples (tensors shaped like the parameter, and another
    module's parameters, are no samples)."""

    def __init__(self, model, log):
        super().__init__()
        self.log = log
        self.own = {_storage(p) for p in model.parameters()}

    def _is_own(self, t):
        return _storage(t) in self.own

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        if not torch.is_grad_enabled():
            return out
        tensors = _tensors_in((args, kwargs))
        own = [t for t in tensors if self._is_own(t)]
        if own:
            shapes = {tuple(t.shape) for t in own}
            others = [t for t in tensors if not self._is_own(t) and tuple(t.shape) not in shapes
                      and not (t.is_leaf and t.requires_grad)]  # another module's parameter is no sample
            if others:
                self.log.widest_use = max([self.log.widest_use] + [len(t) if t.dim() else 1 for t in others])
            else:
                self.own.update(_storage(t) for t in _tensors_in(out))
        return out


def _tensors_in(tree) -> list:
    """The tensors in an operator's arguments or results: tensors, lists and tuples of them, keyword dicts (an
    operator's schema nests nothing else). torch's general tree walk, which also knows named tuples and registered
    classes, costs more than most of the operations watched."""
    found, todo = [], [tree]
    while todo:
        item = todo.pop()
        if isinstance(item, torch.Tensor):
            found.append(item)
        elif isinstance(item, (list, tuple)):
            todo.extend(item)
        elif isinstance(item, Mapping):
            todo.extend(item.values())
    return found


def _storage(t) -> int | None:
    try:
        return t.untyped_storage().data_ptr() or None
    except Exception:  # noqa: BLE001 -- a tensor without storage (sparse, nested) is nobody's parameter
        return None


def wide_pass_hint(kind: str) -> str:
    """How to fix one gradient computation (``kind``, as ``PassLog.pass_kinds`` names it) that went through the
    forward outputs of several micro-batches."""
    if kind == "backward()":
        return ("Call backward() on each micro-batch's scaled loss right after its forward pass; .grad does the "
                "adding.")
    return ("Assigning the result to .grad or adding it there afterwards does not undo that: compute the gradient "
            "once per micro-batch, right after its forward pass, with backward() on its scaled loss (.grad does "
            "the adding) or with torch.autograd.grad on it, adding each result into .grad.")


def pass_mistake(setting: str, log, *, micro_batches: int, largest: int, forwards: int, loss_sizes=None):
    """A loop that runs the model too often, on too much, or keeps several graphs alive for one gradient
    computation: the wrong ``Feedback`` naming it, or None.

    ``log``: the ``PassLog`` of one epoch (``record_passes``); ``micro_batches``: how many the epoch had;
    ``largest``: the most samples a micro-batch holds; ``forwards``: the forward passes with gradients that
    epoch; ``loss_sizes``: how many samples each loss call compared, when the loss was watched (None if not).
    Notebooks 04's and 07's loop checks use it.
    """
    if log.unwatched:
        return unwatched_mistake(setting, log)
    widest = max(log.forward_sizes + [log.widest_use])
    if widest > largest:
        return wrong(
            f"{setting}, your model ran on {widest} samples at once, more than a micro-batch holds "
            f"({largest}): a forward pass over concatenated micro-batches is full-batch training and keeps the "
            "whole group's activations. Run model(x) on each micro-batch on its own and backward() its scaled loss."
        )
    if forwards != micro_batches:
        extra = (" (forward passes under torch.no_grad() do not count: they build no graph)"
                 if log.untracked_forwards else "")
        return wrong(
            f"{setting}, your function ran the model {forwards} times with gradients on{extra}; an epoch "
            "of accumulation runs it once per micro-batch (model(x) for each (x, y) in micro_batches)."
        )
    return wide_pass_mistake(setting, log, largest=largest, loss_sizes=loss_sizes)


def unwatched_mistake(setting: str, log):
    """A loop that switched off what watches it: the wrong ``Feedback`` naming what it did, or None."""
    if not log.unwatched:
        return None
    return wrong(f"{setting}, your function ran, but {log.unwatched}: the check cannot see how it trains, so it "
                 "cannot give it marks. A training loop needs no such step; take it out.")


def thrown_away_mistake(setting: str, log):
    """Forward passes with gradients whose output no gradient computation went through: the wrong ``Feedback``
    naming them, or None. (A forward pass for logging belongs under torch.no_grad().) The checks ask it last,
    once the numbers are right: a loop that merely forgot backward() is better told by its zero gradient."""
    unused = len(log.forward_sizes) - log.backwarded_forwards
    if unused <= 0:
        return None
    return wrong(
        f"{setting}, {unused} of your {len(log.forward_sizes)} forward passes with gradients on never reached a "
        "backward(): their graphs were built and thrown away, and the gradient came from elsewhere. Run model(x) "
        "once per micro-batch and backward() that micro-batch's scaled loss; a forward pass only for looking at "
        "the output goes under torch.no_grad()."
    )


def wide_pass_mistake(setting: str, log, *, largest: int | None = None, loss_sizes=None):
    """One gradient computation that went through the forward outputs of several micro-batches: the wrong
    ``Feedback`` naming it, or None. ``loss_sizes`` (with ``largest``, the most samples a micro-batch holds)
    tells a concatenation of outputs from losses added up, when the loss was watched."""
    many, kind = log.most_outputs_per_backward, log.widest_pass_kind
    if many <= 1:
        return None
    before = "backward()" if kind == "backward()" else "the call"
    if loss_sizes and largest is not None and max(loss_sizes) > largest:
        how = f"you concatenated the outputs of {many} micro-batches into one loss"
    elif loss_sizes is None:
        how = (f"one {kind} went through the forward passes of {many} micro-batches (their losses added up, "
               f"or their outputs concatenated, before {before})")
    else:
        how = f"one {kind} went through the losses of {many} micro-batches (added up before {before})"
    return wrong(
        f"{setting}, {how}. The gradient can come out right, but each of those micro-batches keeps its graph, "
        f"saved activations included, alive until that {kind}: the memory is the whole group's and "
        f"accumulation saves nothing. {wide_pass_hint(kind)}"
    )


trust.record(__name__)  # last: every name above is defined (see .trust)
