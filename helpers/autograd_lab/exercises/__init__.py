"""Answer checks for the exercises.

Each check takes the learner's answer and returns a ``Feedback``: right, wrong
(with a hint that teaches), not answered yet, or malformed (with what shape the
answer should have). A check never raises on a learner's answer; grading code
calls ``feedback.assert_passed()``, which raises ``AssertionError`` with the
same hint the learner sees.

The checks for each notebook live in a module of this package named after it
(``leaf_tensors``, ``grad_fn_chains``, ...).
"""

from __future__ import annotations

import functools
import html
import itertools
import math
import numbers
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

__all__ = [
    "Feedback",
    "correct",
    "wrong",
    "unanswered",
    "malformed",
    "is_unanswered",
    "as_number",
    "as_int",
    "as_names",
    "describe_error",
    "close",
    "never_raises",
]

_STYLE = {
    "correct": ("#e6f4ea", "#1e7e34", "Correct"),
    "wrong": ("#fdecea", "#b02a37", "Not yet"),
    "unanswered": ("#f1f3f5", "#495057", "Your turn"),
    "malformed": ("#fff4e5", "#a05a00", "Check the form of your answer"),
}


@dataclass(frozen=True)
class Feedback:
    """What a check says about an answer. ``passed`` is True only for a right answer."""

    status: str  # "correct", "wrong", "unanswered" or "malformed"
    message: str

    @property
    def passed(self) -> bool:
        return self.status == "correct"

    def __bool__(self):
        return self.passed

    def assert_passed(self):
        """For graders: raise ``AssertionError`` carrying the learner's feedback unless the answer is right."""
        if not self.passed:
            raise AssertionError(f"{_STYLE[self.status][2]}: {self.message}")
        return self

    def __repr__(self):
        return f"{_STYLE[self.status][2]}: {self.message}"

    def _repr_html_(self):
        bg, fg, title = _STYLE[self.status]
        body = html.escape(self.message).replace("\n", "<br>")
        return (
            f'<div class="al-feedback al-{self.status}" style="background:{bg};border-left:4px solid {fg};'
            f'padding:6px 10px;margin:4px 0"><b style="color:{fg}">{title}:</b> {body}</div>'
        )


def correct(message: str) -> Feedback:
    return Feedback("correct", message)


def wrong(message: str) -> Feedback:
    return Feedback("wrong", message)


def unanswered(what: str) -> Feedback:
    return Feedback("unanswered", f"replace the ... with {what}, then run the cell again.")


def malformed(message: str) -> Feedback:
    return Feedback("malformed", message)


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
        import torch

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


def describe_error(err: BaseException) -> str:
    """``"TypeError: first line of the message"``: how feedback names an exception a learner's code raised.

    Never raises: an exception whose ``__str__`` raises (or returns no string) is named by its class alone.
    """
    try:
        text = str(err)
        first = text.splitlines()[0] if text else ""
    except Exception:  # noqa: BLE001 -- a learner's exception class can break __str__ any way it likes
        first = ""
    return f"{type(err).__name__}: {first}".rstrip(": ")


def close(a, b, *, rtol: float = 1e-5, atol: float = 1e-7) -> bool:
    """Are two numbers (or equal-shaped tensors) the same up to float32 rounding? Non-finite never matches."""
    import torch

    a = torch.as_tensor(a, dtype=torch.float64).reshape(-1)
    b = torch.as_tensor(b, dtype=torch.float64).reshape(-1)
    if a.shape != b.shape or not (torch.isfinite(a).all() and torch.isfinite(b).all()):
        return False
    return bool(torch.allclose(a, b, rtol=rtol, atol=atol))


def never_raises(check):
    """Wrap a check so that nothing a learner's answer does escapes as an exception.

    An exception inside the check becomes ``malformed`` feedback naming the error. ``KeyboardInterrupt``,
    ``SystemExit`` and the other ``BaseException`` subclasses (``GeneratorExit``, ``CancelledError``)
    propagate: they are requests to stop, not mistakes in an answer.
    """

    @functools.wraps(check)
    def guarded(*args, **kwargs):
        try:
            return check(*args, **kwargs)
        except Exception as err:  # noqa: BLE001 -- a learner's code can raise anything
            return malformed(
                f"checking your answer raised {describe_error(err)}. Look at what your code does with the "
                "inputs the exercise describes, then run the cell again."
            )

    return guarded
