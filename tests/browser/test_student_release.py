"""The student release opens and runs in JupyterLab, failing only where the student has work to do.

The release of the first notebook with exercises (made by ``nbgrader generate_assignment`` through
tools/classroom.py) is opened in JupyterLab and run with *Restart Kernel and Run All Cells*, as a
student would. Every cell before the first exercise's autograder cell runs without error; that cell
fails with the check's own instruction ("Your turn: replace the ... with ..."), and Run All stops
there, as it does at any failing cell. (tests/test_classroom.py runs every release to the end with nbgrader.)
"""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path

import nbformat
import pytest

pytestmark = pytest.mark.browser

REPO = Path(__file__).resolve().parents[2]
NOTEBOOKS = sorted((REPO / "notebooks").glob("[0-9][0-9]_*.ipynb"))
RUN_TIMEOUT = float(os.environ.get("AUTOGRAD_LAB_RUN_TIMEOUT", 300))

_spec = importlib.util.spec_from_file_location("classroom_tool", REPO / "tools" / "classroom.py")
classroom = sys.modules.get("classroom_tool") or importlib.util.module_from_spec(_spec)
if "classroom_tool" not in sys.modules:
    sys.modules["classroom_tool"] = classroom
    _spec.loader.exec_module(classroom)


def test_student_release_runs_in_jupyterlab_until_the_first_exercise(lab, tmp_path):
    pytest.importorskip("nbgrader", reason="the classroom extra is not installed")
    path = next((p for p in NOTEBOOKS if classroom.exercises(nbformat.read(p, as_version=4))), None)
    if path is None:
        pytest.skip("no notebook has exercises")
    (release,) = classroom.generate([path], tmp_path / "course", lab.server.root / "student")
    source = nbformat.read(path, as_version=4)
    classroom.annotate(source, path.name)
    first = classroom.exercises(source)[0]

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
