"""The instruments' argument checks: each refuses a bad value at the boundary, naming the argument.

A learner's typo (a float for a count, ``True`` for a number, milliseconds for seconds) is caught here
with a message that says what the argument must be, before anything runs.
"""

from __future__ import annotations

import math
import operator
from numbers import Real

__all__ = ["check_int", "check_seconds", "integer", "is_bool", "is_number"]


def is_bool(value) -> bool:
    """Whether ``value`` is a truth value: a Python bool, numpy's ``bool_``, a bool tensor."""
    dtype = getattr(value, "dtype", None)
    return isinstance(value, bool) or str(dtype) in ("bool", "torch.bool")


def is_number(value) -> bool:
    """A real number (an int, a float, a fraction, a numpy scalar), never a bool (to Python, True is 1)."""
    return isinstance(value, Real) and not is_bool(value)


def integer(value) -> int | None:
    """``value`` as an int when it is a whole-number type: a Python int, a numpy integer, a one-element integer
    tensor (whatever ``operator.index`` reads); None for anything else, a bool and a float such as 2.0 included."""
    if is_bool(value):
        return None
    try:
        return operator.index(value)
    except TypeError:
        return None


def check_int(name: str, value, form: str = "an int", *, low=None, high=None, type_error=ValueError) -> int:
    """``value`` as an int from ``low`` to ``high`` (either bound may be None), else an error naming ``name``.

    The message reads "``name`` must be ``form``, got ...". A value of the wrong type raises ``type_error``,
    one out of range ``ValueError``.
    """
    number = integer(value)
    got = "a bool" if is_bool(value) else repr(value)
    if number is None:
        raise type_error(f"{name} must be {form}, got {got}.")
    if (low is not None and number < low) or (high is not None and number > high):
        raise ValueError(f"{name} must be {form}, got {got}.")
    return number


def check_seconds(name: str, value, at_most: float = math.inf) -> float:
    """``value`` as a finite, positive number of seconds (at most ``at_most``), or an error naming ``name``."""
    if not is_number(value):
        raise TypeError(f"{name} must be a number of seconds, e.g. 0.2; got {type(value).__name__} {value!r}.")
    if not math.isfinite(value) or value <= 0:
        raise ValueError(f"{name} must be a finite, positive number of seconds, e.g. 0.2; got {value!r}.")
    if value > at_most:
        raise ValueError(f"{name} is in seconds and at most {at_most:g} here; got {value!r} "
                         "(milliseconds by mistake?).")
    return float(value)
