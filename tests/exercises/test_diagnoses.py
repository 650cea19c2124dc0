"""The shared shape of a check's diagnoses: the first row that reproduces the answer wins, and its hint is
filled with the facts of the run."""

from autograd_lab.exercises.diagnoses import Diagnosis, diagnose, hint_for

ROWS = [
    Diagnosis("doubled", lambda x: 2 * x, "you doubled it"),
    Diagnosis("off-by-k", lambda x: x + 1, lambda k: f"you added one, not {k}"),
    Diagnosis("doubled-again", lambda x: 2 * x, "never reached: the row above explains it first"),
]


def answer_matches(answer):
    return lambda variant: all(variant(x) == answer(x) for x in (1, 2, 5))


def test_first_matching_row_wins():
    assert diagnose(ROWS, answer_matches(lambda x: x * 2)).name == "doubled"


def test_hint_filled_with_facts():
    assert hint_for(ROWS, answer_matches(lambda x: 1 + x), k=3) == "you added one, not 3"


def test_no_row_explains_it():
    assert diagnose(ROWS, answer_matches(lambda x: x - 7)) is None
    assert hint_for(ROWS, answer_matches(lambda x: x - 7), k=3) is None
