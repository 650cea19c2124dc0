"""Feedback: what every exercise check returns."""

import pytest

from autograd_lab.exercises import (
    Feedback,
    correct,
    describe_error,
    is_unanswered,
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


class BrokenMessage(Exception):
    def __str__(self):
        raise RuntimeError("no message either")


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
