"""Feedback, what every exercise check returns, and the readers of an answer that the checks share."""

import math
from fractions import Fraction

import numpy as np
import pytest
import torch
from learner_code import BrokenMessage

from autograd_lab.exercises.answers import close, close_in_norm, is_unanswered, read_function, read_number
from autograd_lab.exercises.feedback import (
    Feedback,
    correct,
    describe_error,
    malformed,
    never_raises,
    unanswered,
    wrong,
)


def test_only_a_right_answer_passes():
    assert correct("yes").passed and bool(correct("yes"))
    for fb in (wrong("no"), unanswered("a number"), malformed("a list")):
        assert not fb.passed and not bool(fb)


def test_assert_passed_carries_the_hint_for_graders():
    assert correct("fine").assert_passed().passed
    with pytest.raises(AssertionError, match="Not yet: think about the leaf"):
        wrong("think about the leaf").assert_passed()


def test_feedback_renders_as_text_and_html_without_raw_markup():
    fb = wrong("use <b> tags? no")
    assert repr(fb) == "Not yet: use <b> tags? no"
    assert "&lt;b&gt;" in fb._repr_html_() and "al-wrong" in fb._repr_html_()


def test_placeholders_count_as_unanswered():
    assert is_unanswered(...) and is_unanswered(None)
    assert not is_unanswered(0) and not is_unanswered([])
    assert "replace the ..." in unanswered("a list of names").message
    assert isinstance(unanswered("x"), Feedback)


class NotAString(Exception):
    def __str__(self):
        return 42


def test_describe_error_names_the_first_line_of_the_message():
    assert describe_error(ValueError("bad shape\nmore detail")) == "ValueError: bad shape"
    assert describe_error(StopIteration()) == "StopIteration"


@pytest.mark.parametrize("err", [BrokenMessage(), NotAString()], ids=["__str__ raises", "__str__ not a string"])
def test_describe_error_falls_back_to_the_class_name_when_the_message_breaks(err):
    assert describe_error(err) == type(err).__name__


@pytest.mark.parametrize("err", [BrokenMessage(), NotAString()], ids=["__str__ raises", "__str__ not a string"])
def test_never_raises_reports_an_exception_whose_message_breaks(err):
    @never_raises
    def check(answer):
        raise err

    fb = check(3)
    assert fb.status == "malformed" and f"raised {type(err).__name__}." in fb.message, fb


# ---------------------------------------------------------------- reading an answer


@pytest.mark.parametrize("answer", [3, 3.0, Fraction(3), np.int64(3), np.float32(3), np.array([3.0]), torch.tensor(3),
                                    torch.tensor([[3.0]])], ids=str)
def test_a_number_is_read_in_any_numeric_type(answer):
    assert read_number(answer, "a number", "7.5") == (3.0, None)
    assert read_number(answer, "a number", "7", whole=True) == (3, None)


@pytest.mark.parametrize("answer", ["3", True, [3], torch.tensor([3.0, 4.0]), torch.tensor(True), 3j], ids=str)
def test_what_is_not_one_number_is_malformed_and_says_so(answer):
    value, fb = read_number(answer, "a number", "7.5")
    assert value is None and fb.status == "malformed" and "one number such as 7.5" in fb.message


def test_a_whole_number_is_asked_for_where_one_is_wanted():
    value, fb = read_number(2.5, "a count", "3", whole=True)
    assert value is None and fb.status == "malformed" and "whole number such as 3" in fb.message


def test_the_placeholder_is_unanswered_and_nan_is_left_to_the_exercise():
    for placeholder in (..., None):
        value, fb = read_number(placeholder, "a number: the value of x.grad", "7.5")
        assert value is None and fb.status == "unanswered" and "a number: the value of x.grad" in fb.message
    value, fb = read_number(float("nan"), "a number", "7.5")
    assert math.isnan(value) and fb is None


def test_a_function_answer_must_take_the_arguments_it_is_called_with():
    signature = "f(a, b)"
    assert read_function(lambda a, b: None, "your f", signature, 2) is None
    assert read_function(print, "your f", signature, 2) is None  # no signature to read: the call decides
    assert read_function(..., "your f", signature, 2).status == "unanswered"
    fb = read_function(3, "your f", signature, 2)
    assert fb.status == "malformed" and "the function itself, f(a, b), not int" in fb.message
    fb = read_function(lambda a: None, "your f", signature, 2)
    assert fb.status == "malformed" and "must take 2 arguments: f(a, b)" in fb.message



def test_close_holds_a_sum_whose_terms_cancel_to_its_terms_sizes():
    """1000 - 999.99 is 0.01, a difference of two terms of size 1000: float32 rounds it by a share of 1000."""
    terms = torch.tensor([1000.0, -999.99], dtype=torch.float64)
    exact, rounded = terms.sum(), terms.float().sum().double()
    assert not close(rounded, exact)  # held to its own size, the rounding looks like a mistake
    assert close(rounded, exact, size=terms.abs().sum())
    assert not close(exact + 1.0, exact, size=terms.abs().sum())  # one term off by 0.1% still shows
    assert not close(float("nan"), 0.0, size=1.0)


def test_close_in_norm_measures_the_whole_vector():
    """An entry near 0 strays by a rounding of the vector's largest terms: on the whole vector, that is rounding."""
    reference = torch.tensor([3.0, -4.0, 1e-9], dtype=torch.float64)
    rounded = reference + torch.tensor([0.0, 0.0, 3e-7], dtype=torch.float64)
    assert not close(rounded, reference, rtol=1e-4, atol=1e-7)
    assert close_in_norm(rounded, reference, rtol=1e-4, atol=1e-7)
    assert not close_in_norm(reference * 1.001, reference, rtol=1e-4, atol=1e-7)
    assert not close_in_norm(torch.tensor([float("inf"), 0.0, 0.0]), reference)
    assert not close_in_norm(reference[:2], reference)
