"""The student release opens and runs in JupyterLab, failing only where the student has work to do.

The release of the first notebook with exercises (made by ``nbgrader generate_assignment`` through
tools/classroom) is opened in JupyterLab and run with *Restart Kernel and Run All Cells*, as a
student would. Every cell before the first exercise's autograder cell runs without error; that cell
fails with the check's own instruction ("Your turn: replace the ... with ..."), and Run All stops
there, as it does at any failing cell. (tests/tools/test_autograde.py runs releases to the end with nbgrader.)

A learner of the course itself reveals a worked solution as the reveal cell under each exercise says
(``reveal_solution``, used on the learner's copy too: test_learner_copy.py). The same notebook is run whole:
the answer cell shows "Your turn" and nothing shows a solution. Then, with real key presses, the "# " before
``%load`` in the first reveal cell is deleted and the cell run (Shift+Enter): JupyterLab replaces the cell's
content with the solution file (IPython's ``%load`` asks the front end to) and leaves the answer cell above as
it was. Run again, the solution's own check says "Correct".
"""

from __future__ import annotations

import os
from pathlib import Path

import nbformat
import pytest

pytestmark = pytest.mark.browser

REPO = Path(__file__).resolve().parents[2]
NOTEBOOKS = sorted((REPO / "notebooks").glob("[0-9][0-9]_*.ipynb"))
RUN_TIMEOUT = float(os.environ.get("AUTOGRAD_LAB_RUN_TIMEOUT", 300))

from tools.classroom.course import generate  # noqa: E402 (the repository root is on sys.path: conftest.py)
from tools.classroom.layout import exercises  # noqa: E402


def first_exercise():
    """The first notebook with exercises, and its first exercise."""
    for path in NOTEBOOKS:
        found = exercises(nbformat.read(path, as_version=4), path.parent, path.name)
        if found:
            return path, found[0]
    pytest.skip("no notebook has exercises")


def test_student_release_runs_in_jupyterlab_until_the_first_exercise(lab, tmp_path):
    pytest.importorskip("nbgrader", reason="the classroom extra is not installed")
    path, first = first_exercise()
    (release,) = generate([path], tmp_path / "course", lab.server.root / "student")

    lab.open(f"student/{release.name}")
    lab.js("() => window.alTest.startRun()")
    lab.wait("() => window.alTest.finished()", timeout_s=RUN_TIMEOUT, what="Restart Kernel and Run All Cells")
    cells = lab.js("() => window.alTest.cells()")
    ids = [c["id"] for c in cells]
    assert first.test_id in ids, f"the release has no autograder cell {first.test_id}"
    stop = ids.index(first.test_id)
    for cell in cells[:stop]:
        errors = [f"{o['ename']}: {o['evalue']}" for o in cell["outputs"] if o["type"] == "error"]
        raises = "raises-exception" in cell["tags"]
        assert raises or not errors, f"{release.name} cell {cell['id']!r} fails before any exercise: {errors}"
        if cell["source"].strip():
            assert cell["executionCount"] is not None, f"{release.name} cell {cell['id']!r} did not run"
    failed = [o for o in cells[stop]["outputs"] if o["type"] == "error"]
    assert failed and failed[0]["ename"] == "AssertionError", f"{first.test_id} should fail in the release: {failed}"
    assert failed[0]["evalue"].startswith("Your turn: replace the ..."), failed[0]["evalue"]


def run_cell_with_keys(lab, cell_id: str, edit=None):
    """Click into a cell's editor, optionally edit it with key presses, and run it with Shift+Enter."""
    before = lab.js("(id) => window.alTest.cell(id).executionCount", cell_id)
    lab.js("(id) => window.alTest.scrollToCell(id)", cell_id)
    lab.page.locator(f'[data-al-cell-id="{cell_id}"] .jp-InputArea-editor').click()
    if edit:
        edit(lab.page.keyboard)
    lab.page.keyboard.press("Shift+Enter")
    lab.wait(
        "([id, n]) => window.alTest.ranAgain(id, n)", [cell_id, before], timeout_s=60, what=f"cell {cell_id} to run"
    )


def uncomment_last_line(keyboard):
    keyboard.press("Control+End")  # the end of the cell: the "# %load ..." line
    keyboard.press("Home")
    keyboard.press("Delete")  # "#"
    keyboard.press("Delete")  # " "


def test_reveal_cell_loads_the_solution_and_its_check_passes(lab):
    path, first = first_exercise()
    lab.open(path.relative_to(REPO).as_posix())
    lab.js("() => window.alTest.startRun()")
    lab.wait("() => window.alTest.finished()", timeout_s=RUN_TIMEOUT, what="Restart Kernel and Run All Cells")
    reveal_solution(lab, first)


def reveal_solution(lab, first):
    """In the open notebook, after Run All: the exercise's reveal cell, used as its instruction says with real
    key presses, loads the worked solution (from solutions/ beside the notebook); run, its check says "Correct"."""
    reveal_id = f"{first.solution_id}-reveal"
    answer = lab.js("(id) => window.alTest.cell(id)", first.solution_id)
    assert lab.js("(id) => window.alTest.outputText(id)", first.solution_id).startswith("Your turn")
    reveal = lab.js("(id) => window.alTest.cell(id)", reveal_id)
    assert reveal and not reveal["outputs"], "the reveal cell shows nothing until it is used"

    lab.focus_cell = reveal_id
    run_cell_with_keys(lab, reveal_id, uncomment_last_line)
    lab.wait(
        "([id, text]) => window.alTest.cell(id).source.includes(text)",
        [reveal_id, first.region.splitlines()[-1]],
        timeout_s=30,
        what="%load to put the solution into the reveal cell",
    )
    loaded = lab.js("(id) => window.alTest.cell(id).source", reveal_id)
    assert loaded.rstrip().endswith(first.check_call) and first.region.strip() in loaded
    assert lab.js("(id) => window.alTest.cell(id).source", first.solution_id) == answer["source"], "the answer stays"

    run_cell_with_keys(lab, reveal_id)
    # The execution count can change a moment before the check's output is in the cell's model.
    lab.wait("(id) => window.alTest.outputText(id).length > 0", reveal_id, timeout_s=30,
             what="the check's feedback under the reveal cell")
    shown = lab.js("(id) => window.alTest.outputText(id)", reveal_id)
    assert shown.startswith("Correct"), shown
