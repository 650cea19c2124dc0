"""A check's diagnoses as data: each plausible mistake is a row, never new heuristic code.

A :class:`Diagnosis` names a misconception, holds the variant of the reference that reproduces it, and the
hint that names it for the learner. A check runs the learner's answer and the rows' variants on the same
fresh inputs; :func:`diagnose` returns the first row whose variant behaves as the answer did, and the check
says its hint. Rows are tried in order, so a narrower mistake (clipping inside the loop *by norm*) is listed
before a broader one (clipping inside the loop). A new misconception is one more row and its test.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

__all__ = ["Diagnosis", "diagnose", "hint_for"]


@dataclass(frozen=True)
class Diagnosis:
    """One misconception: ``variant`` does what a learner who holds it would write (the reference with that one
    mistake, same signature as an answer), ``hint`` says what is wrong and what to do: a string, or a function of
    the ``facts`` the check passes (the numbers of this run, e.g. ``k``), for a hint that quotes them."""

    name: str
    variant: Any
    hint: str | Callable[..., str]

    def says(self, **facts) -> str:
        return self.hint(**facts) if callable(self.hint) else self.hint


def diagnose(rows: Iterable[Diagnosis], matches: Callable[[Any], bool]) -> Diagnosis | None:
    """The first row whose variant ``matches`` the answer's behaviour (the check's own comparison, given the
    variant), or None when no known mistake explains it."""
    for row in rows:
        if matches(row.variant):
            return row
    return None


def hint_for(rows: Iterable[Diagnosis], matches: Callable[[Any], bool], **facts) -> str | None:
    """The hint of the first matching row (its words filled with ``facts``), or None."""
    row = diagnose(rows, matches)
    return None if row is None else row.says(**facts)
