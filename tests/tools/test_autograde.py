"""Grading with the classroom kit: every worked solution passes its check, and nbgrader's round trip.

- **The nbgrader round trip** (``nbgrader generate_assignment``, ``autograde`` twice, ``generate_feedback``):
  the reference submission gets full marks, with no cell failing; a learner's submission -- the student
  release as handed out, every other exercise answered wrongly and the rest left as released -- gets fewer
  marks; each wrong answer's test cell fails with exactly the feedback the learner sees under the answer
  ("Not yet: <hint>"), and that hint is in nbgrader's feedback page; each unanswered exercise fails with
  "Your turn: replace the ..."; no cell outside the exercises fails (except cells tagged
  ``raises-exception``), so the release runs with the solutions missing. The two submissions run in two
  nbgrader processes at once (one course copy each); only the notebooks whose tests are selected are graded.

Every notebook goes round the trip in ``make test-hub``. ``make test`` grades both submissions of one notebook,
``IN_MAKE_TEST`` (its exercises ask for a set, a number and a function); the other round-trip tests carry the
``autograde`` mark. That every worked solution passes its check, each notebook's in its context, is the part of
tests/notebooks/test_reveal_cells.py and of the browser tests (tests/browser/test_notebooks_in_lab.py), in the
learner's copy.
"""

from __future__ import annotations

import html
import importlib.util
import json
import shutil
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import nbformat
import pytest

from tools.classroom.cells import source_of
from tools.classroom.course import code_stub, generate, nbgrader
from tools.classroom.layout import exercises

if importlib.util.find_spec("nbgrader") is None:
    pytest.skip("the classroom extra is not installed: pip install -e '.[classroom]'", allow_module_level=True)

REPO = Path(__file__).resolve().parents[2]
NOTEBOOKS = {p.stem: p for p in sorted((REPO / "notebooks").glob("[0-9][0-9]_*.ipynb"))}
REFERENCE, LEARNER = "reference", "learner"


def exercises_of(path: Path):
    return exercises(nbformat.read(path, as_version=4), path.parent, path.name)


# ------------------------------------------------------------------------- which notebooks make test grades


WITH_EXERCISES = [aid for aid, path in NOTEBOOKS.items() if exercises_of(path)]
# make test's round trips: one notebook, graded in full and as a learner answers it.
IN_MAKE_TEST = ["01_leaf_tensors"]

def learner_state(index: int, ex) -> str:
    """What the learner submission does with the index-th exercise of a notebook."""
    if ex.answer_name is None or index % 2 == 1:
        return "blank"
    return "wrong"


# The learner's wrong answer: the reference answer, changed until the check calls it wrong (not
# malformed). Written into the submission's solution cell after the reference lines.
WRONG_ANSWER = '''
def _classroom_variants(a):
    import functools
    import torch
    if isinstance(a, bool):
        return [not a]
    if isinstance(a, (int, float)):
        return [a + 1, -a - 1, 2 * a + 1]
    if isinstance(a, str):
        return [a + "x", a[::-1], ""]
    if isinstance(a, torch.Tensor):
        return [a * 2 + 1, a + 1, a.detach() * 0]
    if isinstance(a, (set, frozenset)):
        items = sorted(a, key=repr)
        return [type(a)(items[:i] + items[i + 1:]) for i in range(len(items))] + [type(a)()]
    if isinstance(a, (list, tuple)):
        out = [list(reversed(a)), list(a[:-1]), list(a[1:])]
        for i, x in enumerate(a):
            out += [list(a[:i]) + [v] + list(a[i + 1:]) for v in _classroom_variants(x)[:1]]
        try:
            return [type(a)(v) for v in out]
        except TypeError:
            return out
    if isinstance(a, dict):  # one value swapped for another of the answer's values, then each value changed
        out = [{**a, k: a[j]} for k in a for j in a if a[j] != a[k]][:3]
        out += [{**a, k: v} for k in a for v in _classroom_variants(a[k])[:1]]
        return out + [dict(list(a.items())[:-1])]
    if callable(a):  # a function: change what it returns, what it is given, or do nothing at all
        def wrap(i):
            @functools.wraps(a)
            def changed(*args, **kwargs):
                result = a(*args, **kwargs)
                variants = _classroom_variants(result)
                return variants[i % len(variants)] if variants else result
            return changed

        @functools.wraps(a)
        def shifted(*args, **kwargs):
            return a(*[x + 1 if isinstance(x, int) and not isinstance(x, bool) else x for x in args], **kwargs)

        @functools.wraps(a)
        def idle(*args, **kwargs):
            return None

        return [wrap(i) for i in range(3)] + [shifted, idle]
    return []


_classroom_reference, _classroom_pick = __NAME__, {}
for __NAME__ in _classroom_variants(_classroom_reference):
    try:
        _classroom_status = (__CALL__).status
    except Exception:
        continue
    _classroom_pick.setdefault(_classroom_status, __NAME__)
if not ({"wrong", "malformed"} & set(_classroom_pick)):
    raise RuntimeError("classroom test: no wrong answer found for this exercise")
__NAME__ = _classroom_pick.get("wrong", _classroom_pick.get("malformed"))
'''


def submission(release, exercises, states: dict[str, str], stub: str):
    """The release with each solution cell's stub replaced as ``states`` says (by solution cell id)."""
    nb = nbformat.from_dict(json.loads(json.dumps(release)))
    by_id = {ex.solution_id: ex for ex in exercises}
    for cell in nb.cells:
        ex = by_id.get(cell.get("id"))
        if ex is None:
            continue
        assert stub in source_of(cell), f"the stub is missing from the release of solution cell {ex.solution_id}"
        state = states[ex.solution_id]
        if state == "blank":
            continue
        answer = ex.region
        if state == "wrong":
            answer += "\n" + WRONG_ANSWER.replace("__NAME__", ex.answer_name).replace("__CALL__", ex.check_call)
        cell.source = source_of(cell).replace(stub, answer)
    return nb


def _selected(request, student: str) -> list[str]:
    """The notebooks whose round-trip tests for ``student``'s submission this session runs (``-k 01_leaf``)."""
    tests = READS[student]
    chosen = {item.callspec.params["aid"] for item in request.session.items
              if getattr(item, "originalname", None) in tests and item.module is request.module}
    return [aid for aid in WITH_EXERCISES if aid in chosen]


def _submit(course: Path, copy: Path, student: str, wanted: dict[str, dict[str, str]], released, found, stub):
    shutil.copytree(course, copy, ignore=shutil.ignore_patterns("submitted", "autograded", "feedback"))
    for aid, states in wanted.items():
        nb = submission(released[aid], found[aid], states, stub)
        dest = copy / "submitted" / student / aid / f"{aid}.ipynb"
        dest.parent.mkdir(parents=True)
        nbformat.write(nb, dest)


@pytest.fixture(scope="module")
def graded(request, tmp_path_factory):
    """The selected notebooks' release, the submissions autograded, and the learner's feedback."""
    root = tmp_path_factory.mktemp("classroom")
    wanted = {student: _selected(request, student) for student in (REFERENCE, LEARNER)}
    ids = [aid for aid in WITH_EXERCISES if aid in wanted[REFERENCE] or aid in wanted[LEARNER]]
    released = {p.stem: nbformat.read(p, as_version=4)
                for p in generate([NOTEBOOKS[aid] for aid in ids], root / "course", None)}
    found = {aid: exercises_of(NOTEBOOKS[aid]) for aid in ids}
    states = {
        REFERENCE: {aid: {ex.solution_id: "reference" for ex in found[aid]} for aid in wanted[REFERENCE]},
        LEARNER: {aid: {ex.solution_id: learner_state(i, ex) for i, ex in enumerate(found[aid])}
                  for aid in wanted[LEARNER]},
    }
    copies = {student: root / f"course-{student}" for student in states if states[student]}
    for student, copy in copies.items():
        _submit(root / "course", copy, student, states[student], released, found, code_stub())

    def grade(student):
        nbgrader(["autograde", "*", "--student", student], copies[student])
        if student == LEARNER:
            nbgrader(["generate_feedback", "*", "--student", student], copies[student])

    with ThreadPoolExecutor(2) as pool:
        list(pool.map(grade, copies))

    from nbgrader.api import Gradebook

    scores = {}
    for student, copy in copies.items():
        with Gradebook(f"sqlite:///{copy / 'gradebook.db'}") as gb:
            for aid in states[student]:
                sub = gb.find_submission_notebook(aid, aid, student)
                scores[student, aid] = (sub.score, sub.max_score, {g.name: (g.score, g.max_score) for g in sub.grades})
    return {"copies": copies, "scores": scores, "states": states[LEARNER], "exercises": found}


def autograded(graded, student, aid):
    return nbformat.read(graded["copies"][student] / "autograded" / student / aid / f"{aid}.ipynb", as_version=4)


def errors(cell) -> list[str]:
    return [f"{o.ename}: {o.evalue}" for o in cell.get("outputs", []) if o.output_type == "error"]


def shown_feedback(cell) -> str:
    """The text/plain a check's Feedback displays in a cell ("Not yet: ...")."""
    texts = [
        "".join(o.data["text/plain"]) for o in cell.get("outputs", []) if o.output_type == "execute_result"
    ]
    return texts[-1] if texts else ""


def raising_cells(aid) -> set:
    """Cells tagged ``raises-exception``: their error is part of the lesson."""
    nb = nbformat.read(NOTEBOOKS[aid], as_version=4)
    return {c.get("id") for c in nb.cells if "raises-exception" in c.metadata.get("tags", [])}


READS = {  # the tests that read each submission's grading
    REFERENCE: {"test_reference_solutions_get_full_marks"},
    LEARNER: {"test_wrong_answers_get_fewer_marks_and_the_hint",
              "test_release_fails_only_in_exercise_cells_with_a_clear_message"},
}


def round_trip(in_make_test: list[str]) -> list:
    """One parameter per notebook with exercises; those make test does not grade carry the autograde mark."""
    return [pytest.param(aid, marks=[pytest.mark.slow] + ([] if aid in in_make_test else [pytest.mark.autograde]))
            for aid in WITH_EXERCISES]


@pytest.mark.parametrize("aid", round_trip(IN_MAKE_TEST))
def test_reference_solutions_get_full_marks(graded, aid):
    score, max_score, cells = graded["scores"][REFERENCE, aid]
    assert max_score > 0 and score == max_score, f"{aid}: reference scored {score}/{max_score}: {cells}"
    assert sorted(cells) == sorted(ex.test_id for ex in graded["exercises"][aid]), "every solution file is graded"
    tagged = raising_cells(aid)
    for cell in autograded(graded, REFERENCE, aid).cells:
        if cell.get("id") not in tagged:
            assert not errors(cell), f"{aid}: cell {cell.get('id')!r} failed in the reference run: {errors(cell)}"


@pytest.mark.parametrize("aid", round_trip(IN_MAKE_TEST))
def test_wrong_answers_get_fewer_marks_and_the_hint(graded, aid):
    score, max_score, cells = graded["scores"][LEARNER, aid]
    assert score < max_score, f"{aid}: the learner's submission got full marks"
    by_id = {c.get("id"): c for c in autograded(graded, LEARNER, aid).cells}
    feedback_path = graded["copies"][LEARNER] / "feedback" / LEARNER / aid / f"{aid}.html"
    feedback = html.unescape(feedback_path.read_text())
    for ex in graded["exercises"][aid]:
        state = graded["states"][aid][ex.solution_id]
        assert cells[ex.test_id][0] == 0, f"{aid}: {state} answer in {ex.test_id} got {cells[ex.test_id]}"
        shown = shown_feedback(by_id[ex.solution_id])
        failed = errors(by_id[ex.test_id])
        assert failed and failed[0] == f"AssertionError: {shown}", (
            f"{aid}: the grader's message for {ex.test_id} differs from the learner's feedback:\n"
            f"  shown:  {shown!r}\n  graded: {failed}"
        )
        if state == "wrong":
            assert shown.startswith(("Not yet: ", "Check the form of your answer: ")), shown
            hint = shown.split(": ", 1)[1].splitlines()[0]
            assert hint in feedback, f"{aid}: the hint for {ex.test_id} is not in the feedback page"
        else:
            assert shown.startswith("Your turn: replace the ..."), shown


@pytest.mark.parametrize("aid", round_trip(IN_MAKE_TEST))
def test_release_fails_only_in_exercise_cells_with_a_clear_message(graded, aid):
    tests = {ex.test_id for ex in graded["exercises"][aid]}
    tagged = raising_cells(aid)
    for cell in autograded(graded, LEARNER, aid).cells:
        if cell.cell_type != "code":
            continue
        if source_of(cell).strip():
            assert cell.execution_count is not None, f"{aid}: cell {cell.get('id')!r} did not run"
        if cell.get("id") in tests:
            assert errors(cell), f"{aid}: {cell.get('id')} passed without an answer"
        elif cell.get("id") not in tagged:
            assert not errors(cell), f"{aid}: cell {cell.get('id')!r} fails in the student release: {errors(cell)}"

