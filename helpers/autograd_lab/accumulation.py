"""Does accumulating over k micro-batches give the full-batch step? A checker for your own model and loss.

The accumulation loops themselves are written out in notebook 04; this module
only checks them on a learner's own model, and names the cause when they differ.

``check_accumulation(model, loss_fn, inputs, targets, k)`` answers one question
about *your* model and loss: does accumulating over ``k`` micro-batches give the
gradient (and, with ``optimizer=``, the optimizer step) of the full batch? It
works on deep copies of the model and fresh copies of the batch, so your model,
its ``.grad``, your batch, your grad mode and the global random states (torch's
and Python's) are left as they were. When the two disagree it re-runs variants
(BatchNorm or dropout switched off, the micro-batch losses weighted otherwise) to
name the likely cause, judged by what the model and loss do, not by their classes::

    report = check_accumulation(model, nn.MSELoss(), x, y, k=4)
    print(report)          # a short text report
    report.agree           # True when both steps match (also: bool(report))
    report.max_diff        # largest |accumulated - full| over all gradient entries
    report.causes          # likely causes, most likely first (empty when they agree)

The model may take a tensor, a tuple of arguments or a dict of keyword arguments
(a tokenizer's batch), and return a tensor or an output object: for a Hugging
Face model, ``check_accumulation(model, None, batch, k=4)`` takes ``out.loss``.

How each micro-batch loss is scaled before ``backward()`` is ``scale``:
``"size"`` multiplies it by n_i / N (right for a mean-reduced loss, whatever the
split), ``"k"`` divides it by k (the common recipe, right only for equal
micro-batches), ``"none"`` leaves it alone (right only for a loss that already
divides by the full batch's count, e.g. ``reduction="sum"`` then ``/ N``).
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import inspect
import itertools
import math
import random
import re
import textwrap
from collections.abc import Mapping
from dataclasses import dataclass, field

import torch
from torch import nn

from .arguments import check_int
from .graphmodel import visit

__all__ = ["AccumulationReport", "SCALES", "check_accumulation"]

SCALES = ("size", "k", "none")
_SCALE_WORDS = {"size": "multiplied by n_i / N", "k": "divided by k", "none": "not scaled"}

# Module families whose training-mode forward pass mixes or randomises samples.
_FAMILIES = {
    "BatchNorm": (nn.modules.batchnorm._BatchNorm,),
    "dropout": (nn.modules.dropout._DropoutNd,),
}

# Tolerances. float32 and float64 models: a relative 1e-4 holds sums of thousands of terms taken in another order
# (float32 rounds at about 1e-7 a term), and an absolute 1e-5 holds the entries near zero that cancel.
# Lower-precision models (bfloat16, float16): a few units of the dtype's rounding, relative to the size of
# the values compared, since the full batch and the micro-batches round their sums in a different order.
_FLOAT32_ATOL, _FLOAT32_RTOL = 1e-5, 1e-4
_LOW_PRECISION_EPS_FACTOR = 4
_NAMES_SHOWN = 3  # non-finite gradients named in a report line
# Run-to-run noise: when the full batch run twice differs from itself, differences up to this many times its own
# count as that noise (two noisy runs are compared, and a largest difference varies from draw to draw).
_NOISE_FACTOR = 4


# --------------------------------------------------------------------------- the report


def _fmt(x: float) -> str:
    return f"{x:.3g}"


@dataclass
class AccumulationReport:
    """What ``check_accumulation`` found. ``bool(report)`` is ``report.agree``."""

    agree: bool
    k: int
    sizes: tuple
    scale: str
    max_diff: float  # largest |accumulated - full| over all gradient entries
    worst: str  # the parameter where it occurs
    rel_diff: float  # ||accumulated - full|| / ||full|| over all gradients
    grads_agree: bool
    causes: list = field(default_factory=list)
    buffers_differ: list = field(default_factory=list)  # buffers (e.g. BatchNorm running stats) that differ
    optimizer: str | None = None
    params_agree: bool | None = None  # after one optimizer step; None without optimizer=
    params_max_diff: float | None = None
    not_finite: list = field(default_factory=list)  # gradients holding NaN or inf: then there is no verdict
    notes: list = field(default_factory=list)  # what an agreement does not promise (e.g. dropout's draws)
    run_to_run: float | None = None  # largest |full - full again| over the gradients, when the two differ
    nondeterministic: list = field(default_factory=list)  # the likely kernels then ("index_add (IndexAddBackward0)")

    def __bool__(self):
        return self.agree

    def _gradient_line(self):
        if self.not_finite:
            shown = "; ".join(self.not_finite[:_NAMES_SHOWN])
            more = len(self.not_finite) - _NAMES_SHOWN
            return f"  gradients:  NOT FINITE -- NaN or inf in {shown}" + (f" and {more} more" if more > 0 else "")
        if self.grads_agree and self.run_to_run is not None:
            return (f"  gradients:  AGREE with the full batch as closely as it agrees with itself (largest difference "
                    f"{_fmt(self.max_diff)}; the full batch run twice: {_fmt(self.run_to_run)})")
        if self.grads_agree:
            return "  gradients:  AGREE with the full batch (differences within float rounding)"
        return (
            f"  gradients:  DIFFER -- largest difference {_fmt(self.max_diff)} in '{self.worst}' "
            f"(relative difference {_fmt(self.rel_diff)})"
        )

    def _verdict_line(self):
        if self.not_finite:
            return "  verdict:    none -- gradients that are not numbers cannot be compared"
        return "  verdict:    " + ("the accumulated step IS the full-batch step" if self.agree
                                   else "the accumulated step is NOT the full-batch step")

    def __str__(self):
        sizes = ", ".join(map(str, self.sizes))
        lines = [
            f"Accumulation check: k = {self.k} micro-batches of sizes ({sizes}), "
            f"each micro-batch loss {_SCALE_WORDS[self.scale]}",
            self._gradient_line(),
        ]
        if self.buffers_differ:
            lines.extend(textwrap.wrap(f"buffers:    DIFFER -- {', '.join(self.buffers_differ)}", width=110,
                                       initial_indent="  ", subsequent_indent=" " * 16))  # a long list, wrapped
        if self.optimizer is not None and not self.not_finite:
            if self.params_agree:
                lines.append(f"  after one {self.optimizer} step: parameters AGREE")
            else:
                lines.append(
                    f"  after one {self.optimizer} step: parameters DIFFER by up to {_fmt(self.params_max_diff)}"
                )
        for i, cause in enumerate(self.causes):
            lines.append(("  likely cause: " if i == 0 else "  and:          ") + cause)
        lines.append(self._verdict_line())
        lines += [f"  note:       {note}" for note in self.notes]
        return "\n".join(lines)

    __repr__ = __str__


# --------------------------------------------------------------------------- checking inputs


def _check_callables(model, loss_fn, optimizer):
    if isinstance(model, type):
        raise TypeError(f"model is the class {model.__name__}, not a model: build one first, "
                        f"e.g. model = {model.__name__}(...), and pass that.")
    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be a torch.nn.Module, got {type(model).__name__}.")
    if isinstance(loss_fn, type):
        raise TypeError(f"loss_fn is the class {loss_fn.__name__}, not a loss: pass an instance, "
                        f"loss_fn={loss_fn.__name__}() (with the parentheses).")
    if loss_fn is not None and not callable(loss_fn):
        raise TypeError(f"loss_fn must be callable as loss_fn(model(inputs), targets) (or None for the loss the "
                        f"model's output holds, out.loss), got {type(loss_fn).__name__}.")
    if optimizer is not None and (isinstance(optimizer, torch.optim.Optimizer) or not callable(optimizer)):
        raise TypeError("optimizer must be a factory taking the parameters, e.g. lambda p: torch.optim.SGD(p, lr=0.1).")


def _leaves(value, where: str):
    """(where, tensor) for every tensor in ``value``: a tensor, or tuples, lists and dicts of them."""
    if isinstance(value, torch.Tensor):
        yield where, value
    elif isinstance(value, Mapping):
        for key, v in value.items():
            yield from _leaves(v, f"{where}[{key!r}]")
    elif isinstance(value, (list, tuple)):
        for i, v in enumerate(value):
            yield from _leaves(v, f"{where}[{i}]")


def _copied(value):
    """``value`` with every tensor in it cloned and detached from the caller's graph (tuples, lists and dicts rebuilt
    around the copies, as ``_split_batch`` builds them; anything else as it is). The model only ever sees such
    copies: one that changes its input in place (``x.mul_(2.0)``) then changes neither the caller's batch nor the
    next run's."""
    if isinstance(value, torch.Tensor):
        return value.detach().clone().requires_grad_(value.requires_grad)
    if isinstance(value, Mapping):
        return {key: _copied(v) for key, v in value.items()}
    if isinstance(value, (list, tuple)):
        parts = [_copied(v) for v in value]
        return type(value)(parts) if type(value) in (list, tuple) else tuple(parts)
    return value


def _batch_size(inputs, targets) -> int:
    """N, the number of samples: the first dimension of the targets, else of the first batched input."""
    for name, value in (("targets", targets), ("inputs", inputs)):
        for _, t in _leaves(value, name):
            if t.dim() == 0 and isinstance(value, torch.Tensor):
                raise ValueError(f"{name} is a 0-dimensional tensor; its first dimension must be the batch.")
            if t.dim():
                return t.shape[0]
    raise ValueError("inputs hold no tensor with a batch dimension: pass the whole batch, e.g. a tensor of shape "
                     "(N, ...), a tuple of them, or a dict such as {'input_ids': ids, 'attention_mask': mask}.")


def _check_structure(inputs, targets):
    if not any(True for _ in _leaves(inputs, "inputs")):
        raise TypeError(
            "inputs must be a torch.Tensor holding the whole batch, a tuple of tensors (the model's positional "
            "arguments) or a dict of them (its keyword arguments, e.g. a tokenizer's batch); got "
            f"{type(inputs).__name__} with no tensor in it (build one with torch.tensor(...)).")
    if targets is not None and not any(True for _ in _leaves(targets, "targets")):
        raise TypeError(f"targets must be a torch.Tensor holding the whole batch (or None when the loss comes from "
                        f"the model's output, e.g. labels passed in inputs), got {type(targets).__name__}.")


def _check_batch(model, inputs, targets) -> int:
    """The batch checked; returns N, the number of samples."""
    _check_structure(inputs, targets)
    n = _batch_size(inputs, targets)
    for name, value in (("inputs", inputs), ("targets", targets)):
        for where, t in _leaves(value, name):
            if t.is_meta or t.layout != torch.strided:
                raise TypeError(f"{where} must be an ordinary dense tensor with values; got a "
                                f"{'meta' if t.is_meta else str(t.layout).replace('torch.', '')} tensor "
                                "(for a sparse one, pass .to_dense()).")
            if (t.is_floating_point() or t.is_complex()) and not bool(torch.isfinite(t).all()):
                bad = int((~torch.isfinite(t)).sum())
                raise ValueError(f"{where} hold {bad} NaN or inf value{'s' * (bad != 1)}: the gradients would not "
                                 "be numbers, so there is nothing to compare. Clean the batch first.")
    firsts = [t.shape[0] for _, t in _leaves(inputs, "inputs") if t.dim()]
    if n not in firsts:
        held = f"{firsts[0]} samples" if firsts else "no batch dimension"
        raise ValueError(f"inputs hold {held} but targets hold {n}; they must match.")
    if not any(p.requires_grad for p in model.parameters()):
        raise ValueError("the model has no parameter that requires grad: there is no gradient to compare.")
    for name, p in model.named_parameters():
        if p.is_floating_point() and not bool(torch.isfinite(p).all()):
            raise ValueError(f"the model's parameter '{name}' holds NaN or inf: its gradients cannot be compared.")
    return n


def _split_batch(value, sizes, n) -> list:
    """``value`` cut into micro-batches of ``sizes`` along the first dimension: every tensor whose first dimension
    is the batch's (N), inside tuples, lists and dicts; anything else (a mask of another shape, a flag, an int)
    is passed to every micro-batch unchanged."""
    k = len(sizes)
    if isinstance(value, torch.Tensor):
        return list(value.split(list(sizes))) if value.dim() and value.shape[0] == n else [value] * k
    if isinstance(value, Mapping):
        parts = {key: _split_batch(v, sizes, n) for key, v in value.items()}
        return [{key: part[i] for key, part in parts.items()} for i in range(k)]
    if isinstance(value, (list, tuple)):
        parts = [_split_batch(v, sizes, n) for v in value]
        return [type(value)(part[i] for part in parts) if type(value) in (list, tuple) else
                tuple(part[i] for part in parts) for i in range(k)]
    return [value] * k


def _call_model(model, x):
    """The model on one batch: a tensor as its input, a tuple as its positional arguments, a dict as keywords."""
    if isinstance(x, Mapping):
        return model(**x)
    if isinstance(x, (list, tuple)):
        return model(*x)
    return model(x)


def _check_options(scale, atol, rtol, seed) -> int:
    """The loss scaling, the tolerances and the seed, checked; the seed as an int."""
    if scale not in SCALES:
        raise ValueError(f"scale must be one of {', '.join(repr(s) for s in SCALES)}; got {scale!r}.")
    for name, value in (("atol", atol), ("rtol", rtol)):
        if value is not None and not (isinstance(value, (int, float)) and not isinstance(value, bool)
                                      and math.isfinite(value) and value >= 0):
            raise ValueError(f"{name} must be a finite number >= 0 (or None for the dtype's default), got {value!r}.")
    return check_int("seed (the random seed both runs start from)", seed, type_error=TypeError)


def _split(k, sizes, n):
    k = check_int("k (the number of micro-batches)", k, type_error=TypeError)
    if k < 1:
        raise ValueError(f"k = {k}: the number of micro-batches must be at least 1.")
    if k > n:
        raise ValueError(f"k = {k} micro-batches need at least {k} samples, but the batch holds {n}.")
    if sizes is None:
        return k, tuple(len(chunk) for chunk in torch.arange(n).tensor_split(k))
    try:
        sizes = tuple(check_int("sizes", s, type_error=TypeError) for s in sizes)
    except TypeError:
        raise TypeError(f"sizes must be a sequence of {k} ints (samples per micro-batch), got {sizes!r}.") from None
    if len(sizes) != k or any(s < 1 for s in sizes) or sum(sizes) != n:
        raise ValueError(f"sizes {sizes} must be {k} positive ints adding up to the batch size {n}.")
    return k, sizes


def _output_loss(out):
    """The loss a model computed itself (``out.loss``, ``out["loss"]``, as Hugging Face models do with labels)."""
    loss = out.get("loss") if isinstance(out, Mapping) else getattr(out, "loss", None)
    if loss is None:
        raise ValueError(
            f"loss_fn=None takes the loss from the model's output, but this {type(out).__name__} holds none: a "
            "Hugging Face model computes it only when given labels (put 'labels' in the inputs dict), or pass a "
            "loss_fn, e.g. lambda out, y: F.cross_entropy(out.logits.flatten(0, 1), y.flatten()).")
    return loss


def _takes_one_argument(loss_fn) -> bool:
    try:
        inspect.signature(loss_fn).bind(None)
        return True
    except (TypeError, ValueError):
        return False


def _loss_of(loss_fn, out, y, has_targets: bool):
    """The loss of one batch: loss_fn(out, y), loss_fn(out) when there are no targets, or the output's own loss."""
    if loss_fn is None:
        return _output_loss(out)
    try:
        if has_targets or not _takes_one_argument(loss_fn):
            return loss_fn(out, y)
        return loss_fn(out)
    except (TypeError, AttributeError) as err:
        if isinstance(out, torch.Tensor):
            raise
        raise TypeError(
            f"loss_fn failed on the model's output, a {type(out).__name__} rather than a tensor ({err}). loss_fn "
            "receives the output as the model returns it: take what the loss needs from it, e.g. "
            "lambda out, y: out.loss (a loss the model computed from labels) or "
            "lambda out, y: F.cross_entropy(out.logits.flatten(0, 1), y.flatten()).") from err


def _scalar_loss(loss):
    if loss is None:
        raise TypeError("loss_fn returned None: it must return the loss tensor (a model's out.loss is None when it "
                        "was given no labels).")
    if not isinstance(loss, torch.Tensor):
        raise TypeError(f"loss_fn must return a tensor, got {type(loss).__name__}.")
    if loss.numel() != 1:
        raise ValueError(
            f"loss_fn returned a tensor of shape {tuple(loss.shape)}, not a scalar: reduce it first "
            "(e.g. reduction='mean' or .mean()), since backward() needs one number."
        )
    if not loss.requires_grad:
        raise ValueError(
            "the loss does not depend on any parameter that requires grad (it has no grad_fn): the model or loss "
            "cuts it off the graph (.detach(), .item(), torch.no_grad() or torch.tensor(...) inside them). Compute "
            "the loss from the model's output with tensor operations only.")
    return loss.reshape(())


# --------------------------------------------------------------------------- tolerances


@dataclass(frozen=True)
class _Noise:
    """How far the full batch, run twice from the same weights and seed, lands from itself: the largest
    difference of the gradients, of the floating-point buffers and of the parameters after the step."""

    grads: float
    buffers: float = 0.0
    params: float = 0.0


@dataclass(frozen=True)
class _Tolerance:
    """How close counts as equal. ``scaled``: ``atol`` is relative to the largest reference value. ``noise``: the
    run-to-run differences of a model whose backward is not repeatable; differences up to ``_NOISE_FACTOR`` times
    them count as equal too, each kind (grads, buffers, params) against its own."""

    atol: float
    rtol: float
    scaled: bool = False
    noise: _Noise | None = None

    @classmethod
    def for_model(cls, model, atol, rtol):
        """The given tolerances, or defaults that follow the precision of the model's parameters."""
        dtypes = [p.dtype for p in model.parameters() if p.is_floating_point()]
        eps = max((torch.finfo(d).eps for d in dtypes), default=0.0)
        if eps <= torch.finfo(torch.float32).eps:
            return cls(_FLOAT32_ATOL if atol is None else atol, _FLOAT32_RTOL if rtol is None else rtol)
        rounding = _LOW_PRECISION_EPS_FACTOR * eps
        return cls(rounding if atol is None else atol, rounding if rtol is None else rtol, scaled=atol is None)

    def all_close(self, values, reference, kind: str = "grads"):
        """Do two dicts of tensors (same keys) agree entry by entry? ``kind``: what they are (for the noise)."""
        scale = max((float(r.detach().abs().max()) for r in reference.values() if r.numel()), default=0.0)
        atol = self.atol * scale if self.scaled else self.atol
        if self.noise is not None:
            atol = max(atol, _NOISE_FACTOR * getattr(self.noise, kind))
        return all(torch.allclose(values[n].double(), reference[n].double(), atol=atol, rtol=self.rtol)
                   for n in reference)

    def buffers_differ(self, values, reference):
        out = []
        for n, y in reference.items():
            x = values[n]
            same = self.all_close({n: x}, {n: y}, "buffers") if x.is_floating_point() else torch.equal(x, y)
            if not same:
                out.append(f"{n} (full batch {y.item()}, accumulated {x.item()})"
                           if x.numel() == 1 and not x.is_floating_point() else n)
        return out


# --------------------------------------------------------------------------- running both steps


@dataclass(frozen=True)
class _Setup:
    """What every run of one check shares: the learner's objects and the random seed."""

    model: nn.Module
    loss_fn: object  # None: the loss the model's output holds
    inputs: object  # a tensor, or tuples, lists and dicts holding tensors
    targets: object  # the same, or None
    n: int  # samples in the batch
    make_optimizer: object
    seed: int
    devices: tuple

    def micro_batches(self, sizes):
        """(inputs, targets) of each micro-batch of ``sizes``, each a fresh copy: a model that changes its input in
        place then changes neither the caller's batch nor another micro-batch's (a value passed to every
        micro-batch unchanged is one tensor until it is copied)."""
        for x, y in zip(_split_batch(self.inputs, sizes, self.n), _split_batch(self.targets, sizes, self.n)):
            yield _copied(x), _copied(y)

    def batch(self):
        """(inputs, targets) of the whole batch, a fresh copy."""
        return _copied(self.inputs), _copied(self.targets)

    def loss(self, model, x, y):
        return _scalar_loss(_loss_of(self.loss_fn, _call_model(model, x), y, self.targets is not None))


@dataclass(frozen=True)
class _Variant:
    """One way to run the batch: its split, each micro-batch loss's weight, the families put in eval mode."""

    sizes: tuple
    weights: tuple
    eval_families: tuple = ()


@dataclass
class _Outcome:
    """What one run leaves behind."""

    grads: dict
    buffers: dict
    params: dict | None  # after one optimizer step; None without an optimizer
    optimizer: str | None


@dataclass
class _Comparison:
    full: _Outcome
    accumulated: _Outcome

    def agree(self, tol: _Tolerance) -> bool:
        a, f = self.accumulated, self.full
        if _not_finite(a.grads, "") or _not_finite(f.grads, ""):
            return False
        ok = tol.all_close(a.grads, f.grads) and not tol.buffers_differ(a.buffers, f.buffers)
        return ok and (f.params is None or tol.all_close(a.params, f.params, "params"))


def _devices(model, inputs):
    tensors = [t for _, t in _leaves(inputs, "inputs")]
    devs = {t.device for t in itertools.chain(model.parameters(), model.buffers(), tensors)}
    return tuple(d.index if d.index is not None else torch.cuda.current_device() for d in devs if d.type == "cuda")


def _weights(scale, sizes):
    n = sum(sizes)
    return tuple(s / n if scale == "size" else 1 / len(sizes) if scale == "k" else 1.0 for s in sizes)


def _switch_off(model, family):
    """BatchNorm: its modules to eval mode (running statistics). Dropout: every other module to eval mode and
    every dropout's p to 0 -- attention code often reads a module's ``training`` or a dropout's ``p`` itself."""
    batchnorm = _FAMILIES["BatchNorm"]
    for mod in model.modules():
        if family == "BatchNorm" and isinstance(mod, batchnorm):
            mod.eval()
        elif family == "dropout" and not isinstance(mod, batchnorm):
            mod.training = False
            if isinstance(mod, _FAMILIES["dropout"]):
                mod.p = 0.0


def _prepared_copy(model, eval_families):
    m = copy.deepcopy(model)
    for p in m.parameters():
        p.grad = None
    for fam in eval_families:
        _switch_off(m, fam)
    return m


def _single_sample_batchnorm(model, sizes, err):
    if min(sizes) > 1 or not any(isinstance(m, _FAMILIES["BatchNorm"]) and m.training for m in model.modules()):
        return err
    return ValueError(
        f"micro-batches of 1 sample ({sizes.count(1)} of the {len(sizes)}) cannot go through BatchNorm in training "
        "mode: it normalises each feature over the micro-batch, and a single sample has no spread (torch says: "
        f"{str(err).splitlines()[0] if str(err) else type(err).__name__}). This is BatchNorm's accumulation pitfall "
        "at its extreme: use fewer micro-batches than samples, a per-sample normalisation (LayerNorm, GroupNorm), "
        "or BatchNorm in eval mode."
    )


def _micro_batch_losses(m, setup: _Setup, sizes):
    """Each micro-batch's loss on ``m``, one at a time (the caller backwards each before the next is made)."""
    with torch.random.fork_rng(devices=list(setup.devices)):
        torch.manual_seed(setup.seed)
        for x, y in setup.micro_batches(sizes):
            try:
                yield setup.loss(m, x, y)
            except (RuntimeError, ValueError) as err:
                raise _single_sample_batchnorm(m, sizes, err) from err


def _backward_micro_batches(m, setup: _Setup, variant: _Variant):
    for loss, w in zip(_micro_batch_losses(m, setup, variant.sizes), variant.weights):
        (loss * w).backward()


def _grads_of(m) -> dict:
    return {n: (p.grad.detach().clone() if p.grad is not None else torch.zeros_like(p))
            for n, p in m.named_parameters() if p.requires_grad}


def _each_micro_batch_grads(setup: _Setup, sizes, families) -> list:
    """The gradient of each micro-batch's own (unscaled) loss, the random numbers drawn as in an accumulated run."""
    m = _prepared_copy(setup.model, families)
    out = []
    for loss in _micro_batch_losses(m, setup, sizes):
        loss.backward()
        out.append(_grads_of(m))
        for p in m.parameters():
            p.grad = None
    return out


def _optimizer_step(params, make_optimizer):
    opt = make_optimizer(list(params.values()))
    if not isinstance(opt, torch.optim.Optimizer):
        raise TypeError(f"optimizer(params) must return a torch.optim.Optimizer, got {type(opt).__name__}.")
    opt.step()
    return {n: p.detach().clone() for n, p in params.items()}, type(opt).__name__


def _run(setup: _Setup, variant: _Variant) -> _Outcome:
    """Backward every micro-batch of ``variant`` with its weight on a copy of the model; then one optimizer step."""
    m = _prepared_copy(setup.model, variant.eval_families)
    _backward_micro_batches(m, setup, variant)
    params = {n: p for n, p in m.named_parameters() if p.requires_grad}
    grads = _grads_of(m)
    buffers = {n: b.detach().clone() for n, b in m.named_buffers()}
    if setup.make_optimizer is None:
        return _Outcome(grads, buffers, None, None)
    stepped, name = _optimizer_step(params, setup.make_optimizer)
    return _Outcome(grads, buffers, stepped, name)


def _items_that_count(loss_fn, targets):
    """Per-item weights of a torch class-index loss that averages over the items that count (class weights,
    ``ignore_index``), or None when the loss is a plain mean over its items (or not such a loss)."""
    if not isinstance(loss_fn, (nn.CrossEntropyLoss, nn.NLLLoss)) or loss_fn.reduction != "mean":
        return None
    if not isinstance(targets, torch.Tensor) or targets.is_floating_point() or targets.is_complex() \
            or targets.dtype == torch.bool:
        return None
    keep = targets != loss_fn.ignore_index
    if loss_fn.weight is None:
        per_item = keep.to(torch.float64)
        return None if bool(keep.all()) else per_item
    try:
        w = loss_fn.weight.detach().to(torch.float64).cpu()[targets.where(keep, 0).cpu()]
    except (IndexError, RuntimeError):  # targets out of range: the loss itself will say so
        return None
    per_item = torch.where(keep.cpu(), w, torch.zeros_like(w))
    return per_item if float(per_item.sum()) > 0 else None


def _compare(setup: _Setup, sizes, scale, families=()) -> _Comparison:
    """The full batch against the micro-batches of ``sizes``, each loss weighted by ``scale`` (one of SCALES, or
    the weights themselves), with ``families`` switched off on both sides."""
    weights = _weights(scale, sizes) if isinstance(scale, str) else tuple(scale)
    full = _Variant((sum(sizes),), (1.0,), families)
    return _Comparison(_run(setup, full), _run(setup, _Variant(sizes, weights, families)))


# --------------------------------------------------------------------------- measuring the differences


def _not_finite(grads, side):
    return [f"'{n}'" + (f" ({side})" if side else "") for n, g in grads.items()
            if (g.is_floating_point() or g.is_complex()) and not bool(torch.isfinite(g).all())]


def _flat(grads):
    return torch.cat([g.detach().double().reshape(-1).cpu() for g in grads.values()])


@dataclass(frozen=True)
class _Differences:
    max_diff: float
    worst: str
    rel_diff: float
    ratio: float  # the accumulated gradient projected on the full one, as a multiple of it


def _differences(accumulated, full) -> _Differences:
    diffs = {name: float((accumulated[name].double() - full[name].double()).abs().max()) for name in full}
    worst = max(diffs, key=diffs.get)
    fa, ff = _flat(accumulated), _flat(full)
    denom = float(ff.norm())
    rel = float((fa - ff).norm()) / denom if denom > 0 else float("inf") if float(fa.norm()) > 0 else 0.0
    ratio = float(fa @ ff) / float(ff @ ff) if denom > 0 else float("nan")
    return _Differences(diffs[worst], worst, rel, ratio)


# --------------------------------------------------------------------------- naming the cause


def _scale_cause(scale, fixed_by, sizes, ratio):
    k = len(sizes)
    equal = len(set(sizes)) == 1
    if scale == "none":
        return (
            f"missing /k scaling: each micro-batch loss went into backward() unscaled, so the k = {k} gradients "
            f"add up to about {_fmt(ratio)} times the full-batch gradient; divide each loss by k"
            + ("" if equal else " (or, as the micro-batches differ in size, multiply it by n_i / N)")
        )
    if scale == "k" and fixed_by == "size" and not equal:
        return (
            f"unequal micro-batches: dividing each micro-batch mean by k gives the samples of a small micro-batch "
            f"more weight than those of a large one (sizes {', '.join(map(str, sizes))}); multiply each "
            "micro-batch loss by n_i / N instead, or sum-reduce and divide by N"
        )
    if fixed_by == "none":
        return (
            "the loss is a sum over samples (reduction='sum'), or already divided by the whole batch's count: "
            f"it needs no scaling, and scaling it again makes the gradient about {_fmt(ratio)} times the "
            "full-batch one; use scale='none'"
        )
    return f"loss scaling: scale={fixed_by!r} instead of {scale!r} makes the micro-batch gradients add up right"


_IGNORED = -100  # the label torch's losses and Hugging Face models skip by default


def _label_counts(setup: _Setup, sizes, shares):
    """Each micro-batch's number of labels that count, when some labels tensor (the targets, or inputs['labels'])
    counted as != -100 -- as they stand, or shifted by one as a causal language model compares them -- gives
    the shares the gradients showed; else None."""
    labels = setup.targets if isinstance(setup.targets, torch.Tensor) else (
        setup.inputs.get("labels") if isinstance(setup.inputs, Mapping) else None)
    if not isinstance(labels, torch.Tensor) or labels.is_floating_point() or labels.dtype == torch.bool:
        return None
    for keep in (labels != _IGNORED, (labels != _IGNORED)[..., 1:] if labels.dim() > 1 else None):
        if keep is None or labels.shape[0] != setup.n:
            continue
        counts = [int(c.sum()) for c in keep.split(list(sizes))]
        total = sum(counts)
        if total and all(abs(c / total - s) <= 1e-3 for c, s in zip(counts, shares)):
            return counts
    return None


def _counted_cause(setup: _Setup, sizes, shares):
    """A loss averaged over the items that count: what counts, each micro-batch's count (when it can be found)
    and the fix."""
    per_item = _items_that_count(setup.loss_fn, setup.targets)
    if per_item is not None:
        loss_fn, what = setup.loss_fn, []
        if loss_fn.weight is not None:
            what.append("class weights")
        if bool((setup.targets == loss_fn.ignore_index).any()):
            what.append(f"targets equal to ignore_index = {loss_fn.ignore_index} are skipped")
        counts, head = [float(c.sum()) for c in per_item.split(list(sizes))], f" ({' and '.join(what)})"
    else:
        counts = _label_counts(setup, sizes, shares)
        head = (" (padding, labels set to -100, masked tokens)" if counts is None
                else f" (labels other than {_IGNORED}, {' + '.join(map(str, counts))} of them)")
    if counts is not None:
        weighed = (f"each micro-batch's mean divides by its own count ({', '.join(_fmt(c) for c in counts)}), not "
                   "by its number of samples")
        found = f" ({_fmt(sum(counts))} here; num_items_in_batch in Hugging Face transformers)"
    else:
        weighed = (f"the full batch weighs the micro-batches by their shares of those items "
                   f"({', '.join(f'{s:.3f}' for s in shares)}), not by their shares of the samples")
        found = " (num_items_in_batch in Hugging Face transformers)"
    return (
        f"a loss averaged over the items that count{head}: {weighed}, so a share of the samples (n_i / N) or "
        "1 / k weighs the items unequally. As in notebook 04: compute each micro-batch loss with "
        f"reduction='sum' and divide it by the full batch's count, found before the loop{found}"
    )


def _weights_cause(weights):
    return ("the micro-batch losses add up to the full-batch gradient only when weighted "
            f"{', '.join(_fmt(w) for w in weights)} (none of n_i / N, 1 / k or 1): check how the loss is reduced")


_FAMILY_CAUSE = {
    "BatchNorm": (
        "BatchNorm (batch statistics): in training mode each micro-batch is normalised with its own mean and "
        "variance, not the full batch's, and the running statistics are updated once per micro-batch"
    ),
    "dropout": (
        "dropout: the random masks drawn for the micro-batches are not the ones drawn for the full batch "
        "(the random numbers are consumed in another order)"
    ),
}

_NOT_FINITE_CAUSE = (
    "the loss or the model gives NaN or inf on this batch (a log of 0, a division by zero, an overflow in low "
    "precision, ...): fix that first; accumulation cannot be judged on values that are not numbers"
)

_DROPOUT_AGREES = (
    "dropout is on (training mode), and here the micro-batches drew the same masks as the full batch: an "
    "accident of how this random generator hands out numbers, not a promise. Accumulation with dropout agrees "
    "only in distribution; another device, seed or layer order can draw other masks."
)

_MIXING_CAUSE = (
    "something in the model or loss mixes the samples of a batch (a loss normalised by a batch statistic, "
    "a contrastive loss, a module that keeps state) or is random in a way this check cannot switch off"
)


def _changed_in_place(setup: _Setup) -> list:
    """Where one forward pass and loss change the batch they are given in place (names such as "inputs[0]"). The
    caller's batch is never handed to the model, so it is the untouched reference for the copy that was; one
    forward pass without grad is enough, and draws its random numbers from a forked generator."""
    x, y = setup.batch()
    m = _prepared_copy(setup.model, ())
    with torch.no_grad(), torch.random.fork_rng(devices=list(setup.devices)):
        torch.manual_seed(setup.seed)
        _loss_of(setup.loss_fn, _call_model(m, x), y, setup.targets is not None)
    return [where for name, after, before in (("inputs", x, setup.inputs), ("targets", y, setup.targets))
            for (where, a), (_, b) in zip(_leaves(after, name), _leaves(before, name)) if not torch.equal(a, b)]


def _in_place_note(changed) -> str:
    who = ("the model changes its input" if any(w.startswith("inputs") for w in changed)
           else "the loss changes its targets")
    return (
        f"{who} in place ({', '.join(changed)} differ after one forward pass; e.g. x.mul_(...), x += ... or "
        "x[...] = ... on a tensor it was given): each run gets a fresh copy here, so the comparison above stands, "
        "but a training loop that reuses the batch (another epoch, micro-batches that are views of it, a step "
        "taken again) computes on values already changed. Compute out of place instead (x = x * 2.0)."
    )


def _random_in_training(setup: _Setup, families=()) -> bool:
    """Whether the full-batch loss changes with the random seed (dropout, or anything else that draws numbers),
    with ``families`` switched off: judged by the effect, so a dropout with p = 0 is no dropout."""
    if not any(m.training for m in setup.model.modules()):
        return False
    m = _prepared_copy(setup.model, families)
    losses = []
    with torch.no_grad(), torch.random.fork_rng(devices=list(setup.devices)):
        for seed in (setup.seed, setup.seed + 1):
            torch.manual_seed(seed)
            x, y = setup.batch()  # a fresh copy each time: an input changed in place would pass for randomness
            losses.append(_loss_of(setup.loss_fn, _call_model(m, x), y,
                                   setup.targets is not None).detach().double().reshape(-1)[:1].cpu())
    return not torch.allclose(losses[0], losses[1], rtol=1e-6, atol=0.0)


def _present_families(setup: _Setup) -> tuple[list, bool]:
    """The families whose training-mode behaviour this check can switch off, and whether randomness is left
    that it cannot (a random draw outside dropout)."""
    present = [fam for fam in ("BatchNorm",)
               if any(isinstance(m, _FAMILIES[fam]) and m.training for m in setup.model.modules())]
    if not _random_in_training(setup):
        return present, False
    left = _random_in_training(setup, ("dropout",))
    return present + ([] if left else ["dropout"]), left


def _fitted_weights(micro, full):
    """The weights w_i with sum_i w_i g_i closest to the full-batch gradient g (least squares), or None when the
    gradients have too few entries to tell."""
    g = _flat(full)
    columns = torch.stack([_flat(m) for m in micro], dim=1)
    if columns.shape[0] <= 2 * columns.shape[1]:
        return None
    return tuple(float(w) for w in torch.linalg.lstsq(columns, g.unsqueeze(1)).solution.reshape(-1))


def _weighted(micro, weights):
    return {n: sum(w * m[n].double() for w, m in zip(weights, micro)) for n in micro[0]}


def _weighting(setup: _Setup, sizes, scale, families, tol, ratio):
    """With ``families`` off: the scaling (a name from SCALES, or weights) that makes the micro-batch gradients
    add up to the full batch's, and its cause; None when no weighting does."""
    full = _run(setup, _Variant((sum(sizes),), (1.0,), families)).grads
    micro = _each_micro_batch_grads(setup, sizes, families)
    reference = {n: g.double() for n, g in full.items()}
    for s in ([scale] if families else []) + [s for s in SCALES if s != scale]:
        if tol.all_close(_weighted(micro, _weights(s, sizes)), reference):
            return s, (None if s == scale else _scale_cause(scale, s, sizes, ratio))
    fitted = _fitted_weights(micro, full)
    if fitted is None or not tol.all_close(_weighted(micro, fitted), reference):
        return None
    if min(fitted) > 0 and abs(sum(fitted) - 1) < 1e-3:
        return fitted, _counted_cause(setup, sizes, fitted)
    return fitted, _weights_cause(fitted)


def _diagnose(setup: _Setup, sizes, scale, tol, ratio, grads_agree, buffers_differ):
    """Find the smallest change (families switched off, another weighting of the micro-batch losses) that makes
    both sides agree; every cause it takes is listed."""
    present, random_left = _present_families(setup)
    for r in range(len(present) + 1):
        for families in itertools.combinations(present, r):
            causes = [_FAMILY_CAUSE[f] for f in families]
            if grads_agree:  # only buffers or the optimizer step differ: scaling is not the question
                if families and _compare(setup, sizes, scale, families).agree(tol):
                    return causes
                continue
            found = _weighting(setup, sizes, scale, families, tol, ratio)
            if found is not None and _compare(setup, sizes, found[0], families).agree(tol):
                return causes + [found[1]] * (found[1] is not None)
    if grads_agree and not buffers_differ:
        return [
            "the optimizer: the summed gradient is right, but the step differs (an optimizer whose step depends "
            "on more than the gradient at that moment, or on its own state)"
        ]
    return [_FAMILY_CAUSE[f] for f in present] + [_MIXING_CAUSE]


def _first_report(setup: _Setup, sizes, scale, tol) -> tuple[AccumulationReport, float, _Comparison]:
    """The report of the comparison as asked (before any cause is looked for), the gradients' ratio, and the
    comparison itself."""
    first = _compare(setup, sizes, scale)
    full, acc = first.full, first.accumulated
    d = _differences(acc.grads, full.grads)
    report = AccumulationReport(
        agree=False, k=len(sizes), sizes=sizes, scale=scale, max_diff=d.max_diff, worst=d.worst,
        rel_diff=d.rel_diff, grads_agree=False, optimizer=full.optimizer,
        not_finite=_not_finite(full.grads, "full batch") + _not_finite(acc.grads, "accumulated"),
    )
    if report.not_finite:
        return report, d.ratio, first
    if full.params is not None:
        report.params_max_diff = max(float((acc.params[n] - full.params[n]).abs().max()) for n in full.params)
    _set_verdict(report, first, tol)
    return report, d.ratio, first


def _set_verdict(report: AccumulationReport, first: _Comparison, tol: _Tolerance) -> None:
    """The report's verdicts (gradients, buffers, parameters, all) on ``first``, judged with ``tol``."""
    full, acc = first.full, first.accumulated
    report.grads_agree = tol.all_close(acc.grads, full.grads)
    report.buffers_differ = tol.buffers_differ(acc.buffers, full.buffers)
    if full.params is not None:
        report.params_agree = tol.all_close(acc.params, full.params, "params")
    report.agree = report.grads_agree and not report.buffers_differ and report.params_agree is not False


# --------------------------------------------------------------------------- run-to-run noise


def _largest_difference(a: dict, b: dict) -> float:
    return max((float((a[n].double() - b[n].double()).abs().max()) for n in b
                if b[n].is_floating_point() and b[n].numel()), default=0.0)


def _run_to_run(setup: _Setup, full: _Outcome) -> _Noise | None:
    """The full batch run once more, from the same weights and seed: how far it lands from ``full``, or None when
    it lands exactly there (a repeatable backward)."""
    again = _run(setup, _Variant((setup.n,), (1.0,)))
    noise = _Noise(_largest_difference(again.grads, full.grads), _largest_difference(again.buffers, full.buffers),
                   _largest_difference(again.params, full.params) if full.params is not None else 0.0)
    return noise if (noise.grads, noise.buffers, noise.params) != (0.0, 0.0, 0.0) else None


# grad_fn names (a pattern) whose CUDA backward kernels may add with atomic operations, so that the order of the
# additions, and with it the last bits of the sum, changes from run to run; and what a learner wrote to get them.
_ATOMIC_BACKWARDS = (
    (r"IndexAdd|IndexSelect", "index_add (index_add_, or index_select's backward)"),
    (r"Index|IndexPut|Put", "index_put_ with accumulate=True (the backward of indexing with a tensor, x[idx])"),
    (r"Gather|ScatterAdd|ScatterReduce", "scatter_add (scatter_add_, scatter_reduce, or gather's backward)"),
    (r"Embedding|EmbeddingBag", "embedding backward (nn.Embedding, nn.EmbeddingBag)"),
    (r"Upsample\w*", "interpolate's backward"),
    (r"Adaptive(Avg|Max)Pool\w*|AvgPool3D|MaxPool3D\w*|FractionalMaxPool\w*", "pooling backward"),
    (r"(Reflection|Replication)Pad\w*", "reflection or replication padding's backward"),
    (r"NllLoss2D|CtcLoss|GridSampler\w*", "nll_loss over a map, ctc_loss or grid_sample"),
    (r"Convolution|CudnnConvolution", "convolution backward (cuDNN may pick such kernels unless "
                                      "torch.backends.cudnn.deterministic = True)"),
)


def _likely_kernels(setup: _Setup) -> list:
    """The operations in the full batch's graph whose backward may not repeat itself: the kernels of
    ``_ATOMIC_BACKWARDS`` (with the grad_fn names found) and custom autograd Functions."""
    x, y = setup.batch()
    m = _prepared_copy(setup.model, ())
    with torch.random.fork_rng(devices=list(setup.devices)):
        torch.manual_seed(setup.seed)
        nodes = visit([setup.loss(m, x, y).grad_fn])[0]
    names = {re.sub(r"\d+$", "", type(fn).__name__): type(fn).__name__ for fn in nodes}
    found = []
    for pattern, kernel in _ATOMIC_BACKWARDS:
        hits = sorted(full for short, full in names.items() if re.fullmatch(f"(?:{pattern})Backward", short))
        if hits:
            found.append(f"{kernel} in {', '.join(hits)}")
    custom = sorted({type(fn).__name__ for fn in nodes if isinstance(fn, torch.autograd.function.BackwardCFunction)})
    if custom:
        found.append(f"custom autograd Functions, whose backward is yours, in {', '.join(custom)}")
    return found


def _noise_note(report: AccumulationReport) -> str:
    kernels = ("; ".join(report.nondeterministic) if report.nondeterministic else
               "none of the usual suspects is in the graph (index_add, scatter_add, embedding backward, ...)")
    verdict = ("that noise is the only difference, so the verdict holds to that precision"
               if report.agree else "the difference above is larger than that noise")
    return (f"the full batch run twice, from the same weights and seed, differs from itself by up to "
            f"{_fmt(report.run_to_run)}: {verdict}. Some backward adds in an order that changes from run to run; on "
            f"a GPU, kernels that add with atomic operations do. Likely here: {kernels}. "
            "torch.use_deterministic_algorithms(True) makes such runs repeat (and raises where an operation has no "
            "deterministic kernel).")


@contextlib.contextmanager
def _callers_state_kept(devices):
    """Grad mode on inside, whatever the caller left on (the check backwards its losses; a kernel may have run
    torch.set_grad_enabled(False) or be inside torch.inference_mode()); outside, the caller's modes and torch's and
    Python's global random states as they were, also when the check raises (the learner's model may draw from
    either)."""
    python_state = random.getstate()
    try:
        with torch.random.fork_rng(devices=list(devices)), torch.inference_mode(False), torch.enable_grad():
            yield
    finally:
        random.setstate(python_state)


@contextlib.contextmanager
def _full_float32():
    """TF32 off while the check runs (matrix products and cuDNN convolutions), the caller's settings back after.

    On a GPU cuDNN convolutions use TF32 by default: about 10 bits of mantissa, so a right accumulation loop
    differs from the full batch far beyond float32 rounding, and a tolerance wide enough for that would pass
    real mistakes too. Yields whether TF32 had been on (the report says it was switched off)."""
    matmul, cudnn = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    precision = torch.get_float32_matmul_precision()
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    torch.set_float32_matmul_precision("highest")
    try:
        yield matmul or cudnn or precision != "highest"
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = matmul, cudnn
        torch.set_float32_matmul_precision(precision)


_TF32_NOTE = ("TF32 was switched off while the check ran (torch.backends.cudnn.allow_tf32 and the matmul "
              "precision), and your settings were put back: with TF32, even a right loop differs from the full batch "
              "by about 1e-3 relative. A training run with TF32 on accumulates just as well, to that precision.")


def _judged_with_noise(setup: _Setup, report: AccumulationReport, first: _Comparison, tol: _Tolerance) -> _Tolerance:
    """When the full batch does not repeat itself: the report judged again at the precision it does (and says so),
    and the tolerance that allows for that noise, for the search of a cause; else ``tol`` unchanged."""
    noise = _run_to_run(setup, first.full)
    if noise is None:
        return tol
    tol = dataclasses.replace(tol, noise=noise)
    _set_verdict(report, first, tol)
    report.run_to_run, report.nondeterministic = noise.grads, _likely_kernels(setup)
    report.notes.append(_noise_note(report))
    return tol


def _judged(setup: _Setup, sizes, scale, tol) -> AccumulationReport:
    """The comparison as asked, the causes when it fails, and the notes on what the verdict does not promise."""
    report, ratio, first = _first_report(setup, sizes, scale, tol)
    if not report.not_finite and not report.agree:
        tol = _judged_with_noise(setup, report, first, tol)
    if report.not_finite:
        report.causes = [_NOT_FINITE_CAUSE]
    elif not report.agree:
        report.causes = _diagnose(setup, sizes, scale, tol, ratio, report.grads_agree, report.buffers_differ)
    elif "dropout" in _present_families(setup)[0]:
        report.notes.append(_DROPOUT_AGREES)
    changed = _changed_in_place(setup)
    if changed:
        report.notes.append(_in_place_note(changed))
    return report


def check_accumulation(
    model: nn.Module,
    loss_fn,
    inputs,
    targets=None,
    k: int | None = None,
    *,
    sizes=None,
    scale: str = "size",
    optimizer=None,
    atol: float | None = None,
    rtol: float | None = None,
    seed: int = 0,
) -> AccumulationReport:
    """Compare one full-batch step with one step accumulated over ``k`` micro-batches.

    model: yours. inputs: the whole batch, as the model takes it: a tensor (``model(x)``), a tuple of
        positional arguments (``model(*inputs)``) or a dict of keyword arguments (``model(**inputs)``, e.g.
        ``{"input_ids": ids, "attention_mask": mask, "labels": labels}``). Every tensor whose first dimension
        is the batch's is cut into micro-batches together; anything else is passed to each one unchanged.
    loss_fn: yours (an instance such as ``nn.MSELoss()``, or a function of the model's output as it returns
        it, e.g. ``lambda out, y: out.loss``); the loss is ``loss_fn(model(x), y)``, or ``loss_fn(model(x))``
        when there are no targets, and must be a scalar. ``None``: the loss the output holds (``out.loss``).
    targets: the whole batch's targets (first dimension = samples), or None when the loss needs none
        (labels in inputs). NaN or inf in inputs or targets is an error.
    k: the number of micro-batches (any integer: Python, numpy or a one-element integer tensor); by default
        the batch is cut into k nearly equal consecutive parts (``sizes=`` sets the parts, e.g.
        ``sizes=(7, 3)`` with k = 2).
    scale: how each micro-batch loss is scaled before ``backward()``: "size" (times n_i / N),
        "k" (divided by k) or "none".
    optimizer: optionally a factory such as ``lambda params: torch.optim.Adam(params, lr=1e-3)``;
        then one step is taken from the same state on both sides and the parameters compared too.
    atol, rtol: how close counts as equal (``torch.allclose``). By default 1e-5 and 1e-4 for float32 and
        float64 models; for bfloat16 and float16 models a few units of the dtype's rounding, relative to
        the size of the gradients.
    seed: both runs start from this random seed (dropout then draws reproducibly); torch's and Python's
        global random states are restored afterwards, also when the check raises.

    Works on deep copies: your model and its ``.grad`` are not touched. The model is run on fresh copies of
    the inputs and targets (cloned tensors in the same tuples and dicts), a new one for every run, so your
    batch is not touched either, even by a model that changes its input in place. Such a model gets a note in
    the report ("the model changes its input in place ..."): the comparison stands, since every run starts
    from your batch, but a training loop that reuses the batch would feed it values already changed. The passes
    run with grad enabled whatever your grad mode (``torch.no_grad()``, ``torch.set_grad_enabled(False)``,
    ``torch.inference_mode()``), and your mode is as it was afterwards. Raises TypeError or ValueError for bad
    input (k < 1, k larger than the batch, a loss that is not a scalar, a loss class instead of an instance,
    ...). Gradients that come out NaN or inf give a report with no verdict.
    Causes are found by what the model and loss do: dropout by whether the loss changes with the seed (p = 0 is
    no dropout), a loss over the items that count by the weights that make the micro-batch gradients add up.
    When the two steps differ, the full batch is run once more from the same weights and seed: if it differs
    from itself (a backward whose additions come in another order each run, as atomic additions on a GPU do),
    differences up to a few times that much count as equal, the report says by how much it differs from itself
    (``report.run_to_run``) and names the likely operations (``report.nondeterministic``: index_add,
    scatter_add, embedding backward, ... and custom autograd Functions found in the graph).
    TF32 (matrix products and cuDNN convolutions on a GPU) is off while the check runs, and your settings are
    put back after; the report notes it when it was on.
    """
    _check_callables(model, loss_fn, optimizer)
    if k is None:
        raise TypeError("check_accumulation needs k, the number of micro-batches, e.g. k=4.")
    n = _check_batch(model, inputs, targets)
    seed = _check_options(scale, atol, rtol, seed)
    k, sizes = _split(k, sizes, n)
    setup = _Setup(model, loss_fn, inputs, targets, n, optimizer, seed, _devices(model, inputs))
    tol = _Tolerance.for_model(model, atol, rtol)
    with _callers_state_kept(setup.devices), _full_float32() as tf32_was_on:
        report = _judged(setup, sizes, scale, tol)
    if tf32_was_on and setup.devices:  # the CUDA devices the model or batch is on; on the CPU TF32 changes nothing
        report.notes.append(_TF32_NOTE)
    return report
