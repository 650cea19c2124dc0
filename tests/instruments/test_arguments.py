"""The instruments' argument checks: a count is an int of any integer type but never a bool, seconds are a
finite positive number; a refusal names the argument."""

import math
from fractions import Fraction

import numpy as np
import pytest
import torch

from autograd_lab.arguments import check_int, check_seconds, integer, is_number


@pytest.mark.parametrize("value", [3, np.int64(3), np.int8(3), torch.tensor(3), torch.tensor([3])], ids=str)
def test_any_integer_type_is_an_int(value):
    assert integer(value) == 3 and type(check_int("k", value)) is int


@pytest.mark.parametrize("value", [True, np.bool_(True), torch.tensor(True), 3.0, torch.tensor(3.0), "3", None],
                         ids=str)
def test_bools_floats_and_text_are_not_ints(value):
    assert integer(value) is None
    with pytest.raises(TypeError, match="k must be an int") as info:
        check_int("k", value, type_error=TypeError)
    a_bool = value is True or str(getattr(value, "dtype", "")) in ("bool", "torch.bool")
    assert ("got a bool" in str(info.value)) == a_bool


def test_a_range_is_checked_and_named():
    assert check_int("port", 80, "a port", low=1, high=65535) == 80
    for value in (0, 70_000):
        with pytest.raises(ValueError, match="port must be a port, got"):
            check_int("port", value, "a port", low=1, high=65535)
    with pytest.raises(ValueError, match="port must be a port"):  # the wrong type is a ValueError unless told
        check_int("port", "80", "a port", low=1, high=65535)


def test_numbers_are_real_and_not_bools():
    assert all(is_number(v) for v in (1, 1.5, Fraction(1, 2), np.float32(1), np.int64(1)))
    assert not any(is_number(v) for v in (True, np.bool_(True), "1", None, 1j))


@pytest.mark.parametrize("value, error", [(0, ValueError), (-1, ValueError), (math.nan, ValueError),
                                          (math.inf, ValueError), (True, TypeError), ("1", TypeError)])
def test_seconds_are_finite_and_positive(value, error):
    with pytest.raises(error, match="timeout"):
        check_seconds("timeout", value)
    assert check_seconds("timeout", 2) == 2.0


def test_seconds_past_the_limit_suggest_milliseconds():
    with pytest.raises(ValueError, match="milliseconds by mistake"):
        check_seconds("min_run_time", 200, at_most=60)
