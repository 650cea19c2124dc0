"""What a check says about an answer: ``Feedback``, right, wrong (with a hint that teaches), not answered
yet, or malformed (with the form the answer should have).

A check never raises on a learner's answer (``never_raises``); grading code calls
``feedback.assert_passed()``, which raises ``AssertionError`` with the same hint the learner sees.
"""

from __future__ import annotations

import functools
import html
from dataclasses import dataclass

from . import trust
from .isolation import kept_as_found

__all__ = ["Feedback", "correct", "describe_error", "malformed", "never_raises", "unanswered", "wrong"]

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


def _replaced_before(names: list) -> Feedback:
    shown = ", ".join(names[:6]) + (f" and {len(names) - 6} more" if len(names) > 6 else "")
    cannot = any(n.endswith("(before the checks were imported)") for n in names)
    what_now = ("Restart the kernel and run the notebook from the top without that cell." if cannot else
                "The check has put the originals back: run your answer's cell again, without the replacement.")
    return wrong(f"before this check ran, a cell replaced what the check judges with: {shown}. A check only "
                 f"judges an answer with torch and its own code as they are. {what_now}")


def never_raises(check):
    """Wrap a check so that nothing a learner's answer does escapes as an exception, and the kernel is left as
    the check found it (:func:`.isolation.kept_as_found`: grad mode, default dtype and the rest).

    An exception inside the check becomes ``malformed`` feedback naming it: any ``Exception``, and also
    ``SystemExit`` (``exit()`` or ``sys.exit()`` in a learner's loop would otherwise end the check as if the
    cell had failed) and the other ``BaseException`` subclasses a learner's code can raise. Only
    ``KeyboardInterrupt`` propagates: the learner pressed interrupt, and the cell must stop.

    Before the check runs, what it relies on is compared with what was there when the checks were imported
    (:mod:`.trust`): anything a cell replaced since is put back, and the answer is not judged this time.
    """

    @functools.wraps(check)
    def guarded(*args, **kwargs):
        changed = trust.replaced()
        if changed:
            trust.restore()
            return _replaced_before(changed)
        try:
            with kept_as_found():
                return check(*args, **kwargs)
        except KeyboardInterrupt:
            raise
        except SystemExit as err:
            return malformed(
                f"your code raised SystemExit (exit() or sys.exit(), code {err.code!r:.40}), which ends a script, "
                "not a function. Return from your function instead, then run the cell again."
            )
        except BaseException as err:  # noqa: BLE001 -- a learner's code can raise anything
            return malformed(
                f"checking your answer raised {describe_error(err)}. Look at what your code does with the "
                "inputs the exercise describes, then run the cell again."
            )

    return guarded


trust.record(__name__)  # last: every name above is defined (see .trust)
