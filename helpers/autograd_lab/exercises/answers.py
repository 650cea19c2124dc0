"""Reading a learner's answer: a number in any numeric type, a whole number, a collection of names, a function.

The readers are lenient about form (``3``, ``3.0``, ``np.int64(3)`` and ``tensor(3)`` are the same
number) and strict about meaning (a bool is not a number). ``read_number`` and ``read_function`` also
give the feedback for an answer that is not there yet or not of the asked form, so that each check
starts with the answer itself.
"""

from __future__ import annotations

import inspect
import itertools
import math
import numbers
from collections.abc import Iterable, Mapping

import torch

from . import trust
from .feedback import Feedback, malformed, unanswered

__all__ = [
    "as_int",
    "as_names",
    "as_number",
    "close",
    "close_in_norm",
    "equal",
    "is_unanswered",
    "plain",
    "read_function",
    "read_number",
]

# Bound when the checker is imported: a learner's code that replaces torch.allclose (or torch.equal) while a check
# runs cannot change how the check compares. (``isolation.kept_as_found`` puts the originals back afterwards.)
_allclose, _equal, _isfinite, _as_tensor = torch.allclose, torch.equal, torch.isfinite, torch.as_tensor


_Tensor, _no_subclass_functions = torch.Tensor, torch._C.DisableTorchFunctionSubclass
_tensor_clone, _as_subclass = torch._C.TensorBase.clone, torch._C.TensorBase.as_subclass
_DEFAULT_DISPATCH = torch.Tensor.__torch_dispatch__  # a tensor class that does not intercept dispatch


def plain(value) -> torch.Tensor | None:
    """A tensor the learner's code produced, as a plain ``torch.Tensor`` of its own: detached, its values copied,
    any subclass stripped (so its ``__torch_function__`` cannot answer the comparisons that judge it). None for
    what has no plain values to copy: not a tensor, or a subclass that computes its values in
    ``__torch_dispatch__`` (a wrapper around something else)."""
    if not isinstance(value, _Tensor):
        return None
    kind = type(value)
    if kind is not _Tensor and getattr(kind, "__torch_dispatch__", _DEFAULT_DISPATCH) is not _DEFAULT_DISPATCH:
        return None
    with _no_subclass_functions():
        base = _as_subclass(value, _Tensor)
        out = _tensor_clone(base.detach())
    return out if type(out) is _Tensor else None


def is_unanswered(answer) -> bool:
    """An answer still at its placeholder: ``...`` (Ellipsis) or None."""
    return answer is Ellipsis or answer is None


def as_number(answer) -> float | None:
    """A learner's numeric answer as a float, or None when it is not one number.

    Accepts Python ints, floats and fractions, numpy scalars and one-element arrays,
    and one-element tensors (any shape, any dtype but bool). NaN comes back as NaN:
    the caller decides what a non-finite answer means.
    """
    if isinstance(answer, bool) or answer is None:
        return None
    try:
        if isinstance(answer, torch.Tensor):
            if answer.numel() != 1 or answer.dtype == torch.bool or answer.is_sparse or answer.is_meta:
                return None
            return float(answer.detach().cpu().reshape(()))
    except Exception:  # an unusual tensor (meta, sparse, a subclass) is not a number here
        return None
    if isinstance(answer, numbers.Real):
        return float(answer)
    size = getattr(answer, "size", None)  # numpy arrays and scalars without importing numpy
    if size == 1 and hasattr(answer, "item") and getattr(answer, "dtype", None) is not None:
        if getattr(answer.dtype, "kind", "") not in "iuf":
            return None
        return float(answer.item())
    return None


def as_int(answer) -> int | None:
    """A learner's answer as an int when it is a whole number (``3``, ``3.0``, ``np.int64(3)``, ``tensor(3)``)."""
    value = as_number(answer)
    if value is None or not math.isfinite(value) or value != int(value):
        return None
    return int(value)


def as_names(answer, limit: int = 100) -> list | None:
    """A learner's collection of names as a list, in the order given, or None when it is not one.

    A set, frozenset, list, tuple, dict keys view, generator or other iterator counts;
    a string, a mapping, a tensor or array does not, and neither does one of more than
    ``limit`` items (an endless generator is read no further). The items are not checked.
    """
    if isinstance(answer, (str, bytes, Mapping)) or hasattr(answer, "shape") or not isinstance(answer, Iterable):
        return None
    items = list(itertools.islice(iter(answer), limit + 1))
    return items if len(items) <= limit else None


def close(a, b, *, rtol: float = 1e-5, atol: float = 1e-7, size=None) -> bool:
    """Are two numbers (or equal-shaped tensors) the same up to float32 rounding? Non-finite never matches.

    ``rtol`` is relative to ``|b|``, or to ``size`` where given: for ``b`` a sum whose terms can cancel (a gradient
    entry near 0), rounding moves it by a share of its terms' sizes, not of its own, and ``size`` (shaped like
    ``b``, or one number for all) is the same sum taken over its terms' absolute values."""
    a = _as_tensor(a, dtype=torch.float64).reshape(-1)
    b = _as_tensor(b, dtype=torch.float64).reshape(-1)
    if a.shape != b.shape or not (_isfinite(a).all() and _isfinite(b).all()):
        return False
    if size is None:
        return bool(_allclose(a, b, rtol=rtol, atol=atol))
    size = _as_tensor(size, dtype=torch.float64).reshape(-1)
    return bool(((a - b).abs() <= atol + rtol * size.abs()).all())


def close_in_norm(a, b, *, rtol: float = 1e-4, atol: float = 1e-7) -> bool:
    """Are two equal-shaped tensors (gradients, parameters) the same up to float32 rounding, measured on the whole
    vector: ``|a - b| <= atol + rtol |b|`` in norm? Summing in another order moves each entry by a rounding error of
    the largest terms, so an entry near 0 cannot be held to its own size. Non-finite never matches."""
    a = _as_tensor(a, dtype=torch.float64).reshape(-1)
    b = _as_tensor(b, dtype=torch.float64).reshape(-1)
    if a.shape != b.shape or not (_isfinite(a).all() and _isfinite(b).all()):
        return False
    return float((a - b).norm()) <= atol + rtol * float(b.norm())


def equal(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Are two tensors equal in shape and every value (``torch.equal``, as bound when the checker was imported)?"""
    return bool(_equal(a, b))


def read_number(answer, asked: str, example: str = "7.5", *, whole: bool = False):
    """A learner's number answer as ``(value, None)``, or ``(None, feedback)`` for one that is not there yet
    (``asked`` says what to write in place of the ...) or is not one number (a whole one with ``whole``).

    NaN and infinity come back as values: what a non-finite answer means is the exercise's to say.
    """
    if is_unanswered(answer):
        return None, unanswered(asked)
    if whole:
        value = as_int(answer)
        if value is None:
            return None, malformed(f"give a whole number such as {example} (an int, without quotes), not "
                                   f"{type(answer).__name__} {answer!r:.60}.")
        return value, None
    value = as_number(answer)
    if value is None:
        return None, malformed(f"give one number such as {example} (a float or an int, without quotes), not "
                               f"{type(answer).__name__}.")
    return value, None


def read_function(answer, asked: str, signature: str, arguments: int) -> Feedback | None:
    """None when ``answer`` is a function that takes ``arguments`` positional arguments; else the feedback:
    unanswered at the placeholder (``asked`` says what to give), malformed for anything else (``signature``
    shows how it is called)."""
    if is_unanswered(answer):
        return unanswered(asked)
    if not callable(answer):
        return malformed(f"give the function itself, {signature}, not {type(answer).__name__}.")
    try:
        inspect.signature(answer).bind(*[None] * arguments)
    except TypeError:
        return malformed(f"the function must take {arguments} arguments: {signature}.")
    except ValueError:  # a builtin without a signature to read: the call will tell
        pass
    return None


trust.record(__name__)  # last: every name above is defined (see .trust)
