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

import html
from dataclasses import dataclass

__all__ = ["Feedback", "correct", "wrong", "unanswered", "malformed", "is_unanswered"]

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
