"""The student release opens and runs in JupyterLab, failing only where the student has work to do.

The release of the first notebook with exercises (made by ``nbgrader generate_assignment`` through
tools/classroom) is opened in JupyterLab and run with *Run All Cells*, as a
student would. Every cell before the first exercise's autograder cell runs without error; that cell
fails with the check's own instruction ("Your turn: replace the ... with ..."), and Run All stops
there, as it does at any failing cell. (tests/tools/test_autograde.py runs releases to the end with nbgrader.)

A learner of the course itself reveals a worked solution as the reveal cell under each exercise says: that is
test_notebooks_in_lab.py's ``reveal_solution``, in the learner's copy.
"""

from __future__ import annotations

import pytest
from test_notebooks_in_lab import RUN_TIMEOUT, first_exercise

from tools.classroom.course import generate  # the repository root is on sys.path: conftest.py

pytestmark = pytest.mark.browser


def test_student_release_runs_in_jupyterlab_until_the_first_exercise(lab, tmp_path):
    pytest.importorskip("nbgrader", reason="the classroom extra is not installed")
    path, first = first_exercise()
    (release,) = generate([path], tmp_path / "course", lab.server.root / "student")

    lab.open(f"student/{release.name}")
    lab.js("() => window.alTest.startRun()")
    lab.wait("() => window.alTest.finished()", timeout_s=RUN_TIMEOUT, what="Run All Cells")
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
