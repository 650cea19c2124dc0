"""A class on JupyterHub, end to end, on this machine (loopback only), in real browsers.

The hub of tools/hub starts (its local spawner, its shared-password log-in). The instructor prepares
notebook 01 with the classroom kit (``python -m tools classroom student``: the nbgrader source derived from the
notebook and its solution files, then generate_assignment), logs in and releases it with the formgrader's
Release button. Two students log in through the hub's login page, each in a browser of their own (all
three log in first, so that their servers start while the kit works); each fetches the assignment in
JupyterLab's Assignment List (nbgrader's extension), opens it from there, types answers into the answer
cells, saves and submits with the list's Submit button. Alice answers every
exercise right; Bob answers the first one wrong (the requires_grad tensors taken for the leaves) and the
others right. The instructor collects with the formgrader's Collect button, autogrades and generates the
feedback with the kit (``python -m tools classroom nbgrader``), releases the feedback with the formgrader's
button, and each student fetches it in the Assignment List.

Checked: each student's saved notebook holds what they typed; the gradebook scores each autograder cell
as the answers deserve (full marks for right answers, none for Bob's wrong one); each student's own
feedback page carries their score, and Bob's carries the hint the check gives for his answer, computed
here by calling the same check; the formgrader shows both scores to the instructor. The hub's fixture
then checks that no process it started is left and removes every file (tests/hub/conftest.py).
"""

from __future__ import annotations

import html
import importlib
import importlib.util
import re
import time
from pathlib import Path

import nbformat
import pytest

pytestmark = [pytest.mark.hub, pytest.mark.timeout(900)]

REPO = Path(__file__).resolve().parents[2]
from tools.classroom import layout  # noqa: E402 (the repository root is on sys.path: conftest.py)

NOTEBOOK = REPO / "notebooks" / "01_leaf_tensors.ipynb"
ASSIGNMENT = NOTEBOOK.stem
CHECKS = "autograd_lab.exercises.leaf_tensors"  # the module the notebook imports as `ex`
WRONG = {"ex-leaves": 'answer = {"w", "h"}'}  # Bob's answer to the first exercise: two tensors that require grad
WAIT_S = 120  # a user's server starting, a fetch, a save, a submit, on a busy two-core machine
LAB = ".jp-LabShell"


def wait_until(condition, what: str, timeout_s: float = WAIT_S):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.2)
    raise AssertionError(f"timed out after {timeout_s:.0f} s waiting for {what}")


def text_of(page_html: str) -> str:
    """What a reader sees of an HTML page: tags dropped, entities decoded, spaces normalised."""
    text = re.sub(r"<(script|style)\b.*?</\1>", " ", page_html, flags=re.S)
    return re.sub(r"\s+", " ", html.unescape(re.sub(r"<[^>]+>", " ", text)))


def log_in(browser, hub, user: str):
    """A fresh browser (its own cookies) on the hub's login page; submitting starts the user's server."""
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    context.set_default_timeout(WAIT_S * 1000)
    page = context.new_page()
    page.goto(f"{hub.url}/hub/login")
    page.fill("#username_input", user)
    page.fill("#password_input", hub.passwords[user])
    page.click("#login_submit")
    hub.pages[user] = page
    return page


# ------------------------------------------------------------------------------------------ instructor


def formgrader_action(page, hub, column: str, expect: str):
    """Click one of the formgrader's buttons in the assignment's row; its report must say it succeeded."""
    page.goto(f"{hub.url}/user/{hub.instructor}/formgrader/manage_assignments")
    row = page.locator("#main-table tr", has_text=ASSIGNMENT)
    row.locator(f"td.{column} a").click()
    modal = page.locator("#success-modal, #error-modal").first
    modal.wait_for(state="visible")
    report = modal.inner_text()
    assert expect in report, f"the formgrader's {column} did not succeed:\n{report}"
    return row


def formgrader_scores(page, hub) -> dict[str, str]:
    """Each student's total score as the formgrader's Manage Students page shows it ("3 / 3")."""
    page.goto(f"{hub.url}/user/{hub.instructor}/formgrader/manage_students")
    rows = page.locator("table tbody tr", has=page.locator("td.score"))
    wait_until(lambda: rows.count() >= len(hub.students), "a row per student in Manage Students")
    return {
        rows.nth(i).locator("td.id").inner_text(): rows.nth(i).locator("td.score").inner_text()
        for i in range(rows.count())
    }


# --------------------------------------------------------------------------------------------- students


def open_assignment_list(page):
    page.wait_for_selector(LAB)
    page.get_by_role("menuitem", name="Nbgrader").click()
    page.get_by_role("menuitem", name="Assignment List").click()
    return page.locator("#nbgrader-assignment-list")


def fetch_and_open(page):
    """Fetch the released assignment in the Assignment List and open its notebook from there."""
    panel = open_assignment_list(page)
    released = panel.locator("#released_assignments_list .list_item", has_text=ASSIGNMENT)
    released.get_by_role("button", name="Fetch").click()
    fetched = panel.locator("#fetched_assignments_list > .list_item", has_text=ASSIGNMENT)
    fetched.locator("a.assignment-notebooks-link").click()
    fetched.locator(".nested_list_item a", has_text=ASSIGNMENT).click()
    page.locator(".jp-NotebookPanel .jp-Notebook-cell").first.wait_for()
    return panel


def answered(release_source: str, lines: str) -> str:
    """The answer cell as the learner leaves it: their lines go just above the check call."""
    kept = release_source.rstrip().splitlines()
    return "\n".join([*kept[:-1], lines, kept[-1]])


def type_answers(page, path: Path, answers: dict[str, str]) -> dict[str, str]:
    """Type each answer into its cell in JupyterLab (cell id -> lines), save; return the sources expected."""
    released = nbformat.read(path, as_version=4)
    index = {cell.get("id"): i for i, cell in enumerate(released.cells)}
    expected = {}
    for cell_id, lines in answers.items():
        expected[cell_id] = answered(released.cells[index[cell_id]].source, lines)
        editor = page.locator(".jp-NotebookPanel .jp-Notebook-cell").nth(index[cell_id]).locator(".cm-content")
        editor.click()
        page.keyboard.press("Control+a")
        page.keyboard.insert_text(expected[cell_id])  # as a paste: the editor adds no indentation or brackets
        page.keyboard.press("Escape")
    page.keyboard.press("Control+s")

    def saved():
        cells = {c.get("id"): c.source for c in nbformat.read(path, as_version=4).cells}
        return all(cells.get(i) == source for i, source in expected.items())

    wait_until(saved, f"{path.name} saved with the answers typed")
    return expected


def show_assignment_list(page):
    page.locator(".lm-TabBar-tab", has_text="Assignments").click()
    return page.locator("#nbgrader-assignment-list")


def submit(page):
    panel = show_assignment_list(page)
    fetched = panel.locator("#fetched_assignments_list > .list_item", has_text=ASSIGNMENT)
    fetched.get_by_role("button", name="Submit").click()
    panel.locator("#submitted_assignments_list .list_item", has_text=ASSIGNMENT).first.wait_for()


def fetch_feedback(page, home: Path) -> str:
    """Fetch the released feedback in the Assignment List; return the page the student received."""
    panel = show_assignment_list(page)
    panel.locator("#refresh_assignments_list").click()
    submitted = panel.locator("#submitted_assignments_list .list_item", has_text=ASSIGNMENT).first
    submitted.get_by_role("button", name=re.compile("Fetch Feedback", re.I)).click()
    found = wait_until(lambda: sorted(home.glob(f"{ASSIGNMENT}/feedback/*/{ASSIGNMENT}.html")), "the feedback")
    return found[-1].read_text()


# ------------------------------------------------------------------------------------------- the class


def exercises():
    return layout.exercises(nbformat.read(NOTEBOOK, as_version=4), NOTEBOOK.parent, NOTEBOOK.name)


def typed_part(solution: str) -> str:
    """What a learner types of a worked solution: its code, not the comment lines that explain it."""
    return "\n".join(line for line in solution.splitlines() if not line.lstrip().startswith("#")).strip()


def answers_of(student: str) -> dict[str, str]:
    """Alice answers with every worked solution; Bob too, but for his wrong first answer."""
    right = {ex.solution_id: typed_part(ex.region) for ex in exercises()}
    return {**right, **WRONG} if student == "bob" else right


def expected_hint(cell_id: str) -> str:
    """The feedback the check gives a wrong answer, from the check itself (the notebook's `ex`)."""
    (ex,) = [e for e in exercises() if e.solution_id == cell_id]
    namespace = {"ex": importlib.import_module(CHECKS)}
    exec(WRONG[cell_id], namespace)
    with pytest.raises(AssertionError) as failure:
        eval(ex.check_call, namespace).assert_passed()
    return str(failure.value)


def test_a_class_releases_answers_submits_and_gets_grades_and_feedback(hub, chromium, phase):
    s = hub.settings
    teacher_name, students = hub.instructor, hub.students
    kit = ["-m", "tools", "classroom"]  # run from the repository (cwd=REPO)
    # Everyone logs in first: the three servers start while the instructor's kit works.
    teacher = log_in(chromium, hub, teacher_name)
    pages = {name: log_in(chromium, hub, name) for name in students}
    handout = str(hub.root / "handout")  # the kit's flat copy of the release; the class gets it from the exchange
    hub.run_as(teacher_name, *kit, "student", "--course", str(s.course), "--out", handout, str(NOTEBOOK))
    phase("all log in; the instructor prepares the assignment (kit)")

    teacher.wait_for_selector(LAB)
    formgrader_action(teacher, hub, "release", f"Successfully released '{ASSIGNMENT}'")
    phase("instructor releases (formgrader)")

    for name, page in pages.items():
        fetch_and_open(page)
        formgrader = page.request.get(f"{hub.url}/user/{name}/formgrader/manage_assignments")
        assert formgrader.status == 404, f"{name} reaches the formgrader ({formgrader.status})"
    hub.note_processes()
    phase("students fetch and open it (Assignment List)")

    typed = {}
    for name, page in pages.items():
        path = s.home(name) / ASSIGNMENT / NOTEBOOK.name
        typed[name] = type_answers(page, path, answers_of(name))
        submit(page)
    phase("students answer, save, submit")

    formgrader_action(teacher, hub, "collect", f"Successfully collected submissions of '{ASSIGNMENT}'")
    for name in students:
        collected = nbformat.read(s.course / "submitted" / name / ASSIGNMENT / NOTEBOOK.name, as_version=4)
        cells = {c.get("id"): c.source for c in collected.cells}
        assert {i: cells.get(i) for i in typed[name]} == typed[name], f"{name}'s collected notebook differs"
    phase("instructor collects (formgrader)")

    hub.run_as(teacher_name, *kit, "nbgrader", "--course", str(s.course), "autograde", ASSIGNMENT, timeout=600)
    hub.run_as(teacher_name, *kit, "nbgrader", "--course", str(s.course), "generate_feedback", ASSIGNMENT)
    phase("instructor autogrades, generates feedback (kit)")

    check_grades(s.course, hub)
    shown = formgrader_scores(teacher, hub)
    formgrader_action(teacher, hub, "release-feedback", f"Successfully released feedback of '{ASSIGNMENT}'")
    phase("instructor sees the scores, releases feedback (formgrader)")

    feedback = {name: text_of(fetch_feedback(page, s.home(name))) for name, page in pages.items()}
    phase("students fetch their feedback")
    check_feedback(feedback, shown, s.course)
    for page in [teacher, *pages.values()]:
        page.context.close()


def grades(course: Path, students) -> dict[str, dict[str, tuple[float, float]]]:
    """student -> autograder cell id -> (score, max score), from the course's gradebook."""
    from nbgrader.api import Gradebook

    with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gb:
        out = {}
        for name in students:
            nb = gb.find_submission_notebook(ASSIGNMENT, ASSIGNMENT, name)
            out[name] = {g.name: (g.score, g.max_score) for g in nb.grades}
    return out


def check_grades(course: Path, hub):
    got = grades(course, hub.students)
    for name in hub.students:
        wrong = set(WRONG) if name == "bob" else set()
        for ex in exercises():
            score, top = got[name].get(ex.test_id, (None, None))
            assert top and top > 0, f"{ex.test_id} carries no points in {name}'s grades: {got[name]}"
            want = 0 if ex.solution_id in wrong else top
            assert score == want, f"{name}'s {ex.test_id}: {score} of {top}, expected {want}\n{hub.log_tail()}"


def total(course: Path, name: str) -> tuple[float, float]:
    cells = grades(course, [name])[name].values()
    return sum(score for score, _ in cells), sum(top for _, top in cells)


SCORE = re.compile(r"\(Score: ([\d.]+) / ([\d.]+)\)")  # the feedback page's first one is the notebook's total


def check_feedback(feedback: dict[str, str], shown: dict[str, str], course: Path):
    for name, text in feedback.items():
        score, top = total(course, name)
        found = SCORE.search(text)
        assert found and (float(found[1]), float(found[2])) == (score, top), (
            f"{name}'s feedback does not show the score {score:g} / {top:g}: {text[:400]}"
        )
        assert shown.get(name) == f"{score:g} / {top:g}", f"the formgrader shows {shown}, not {name}'s {score:g}"
    for cell_id in WRONG:
        for line in expected_hint(cell_id).splitlines():
            line = re.sub(r"\s+", " ", line).strip()
            assert line in feedback["bob"], f"Bob's feedback lacks {line!r}"
            assert line not in feedback["alice"], f"Alice's feedback has Bob's {line!r}"
    assert "Not yet" not in feedback["alice"] and "Your turn" not in feedback["alice"]
