"""Feedback: what every exercise check returns."""

import pytest

from autograd_lab.exercises import Feedback, correct, is_unanswered, malformed, unanswered, wrong


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
