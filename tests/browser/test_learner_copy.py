"""The learner's own copy (``make lab``, ``autograd-lab``) works in JupyterLab as the course's notebooks do.

The copy is made by the course's own command (autograd_lab.course) in the test server's root, beside the
served notebooks/, and the test opens the copy's first notebook with exercises, not notebooks/:

- before anything runs, no code cell shows an output or an execution count: a prediction is made unseen;
- *Restart Kernel and Run All Cells* runs it as test_notebooks_in_lab.py checks any notebook (no error, every
  widget and graph drawn, a graph wherever the committed notebook has one);
- the first widget, its controls moved as a learner does, shows its twin cell's output;
- saved by JupyterLab after the run, the notebook still reads as the course's version (``course.fingerprint``):
  running cells is not a change, so the next ``make lab`` may update it;
- the first reveal cell, used with real key presses, loads the worked solution from the copy's solutions/,
  and its check says "Correct" (test_student_release.py's ``reveal_solution``).
"""

from __future__ import annotations

import pytest
from test_notebooks_in_lab import RUN_TIMEOUT, _stored_graph_cells, check_widget, run_problems
from test_student_release import first_exercise, reveal_solution

from autograd_lab import course

pytestmark = pytest.mark.browser


@pytest.fixture(scope="module")
def learner_copy(lab_server):
    folder = lab_server.root / course.DEFAULT_FOLDER
    course.update(folder)  # from the course the package reads: in the repository, notebooks/
    return folder


def test_the_learners_copy_runs_its_widgets_move_and_a_solution_reveals(lab, learner_copy):
    committed, first = first_exercise()
    path = f"{learner_copy.name}/{committed.name}"
    lab.open(path)
    shown = [c for c in lab.js("() => window.alTest.cells()") if c["outputs"] or c["executionCount"] is not None]
    assert not shown, f"{path}: {len(shown)} code cell(s) show an output before anything ran, first {shown[0]['id']!r}"

    lab.js("() => window.alTest.startRun()")
    lab.wait("() => window.alTest.finished()", timeout_s=RUN_TIMEOUT, what="Restart Kernel and Run All Cells")
    run = lab.js("() => window.alTest.run")
    assert run["error"] is None, f"{path}: Restart Kernel and Run All Cells failed: {run['error']}"
    cells = lab.js("() => window.alTest.cells()")
    problems = run_problems(cells, _stored_graph_cells(committed), run["statuses"])
    assert not problems, f"{path} after Restart Kernel and Run All Cells:\n- " + "\n- ".join(problems)
    lab.phase("run all")

    widget = next((cell for cell in cells if cell["lab"]), None)
    assert widget, f"{path} has no widget cell to move (autograd_lab metadata): test the copy on another notebook"
    check_widget(lab, widget, {})
    lab.phase("widget")

    lab.js("() => window.jupyterapp.commands.execute('docmanager:save')")  # resolves once the file is written
    saved = learner_copy / committed.name
    assert '"execution_count": 1' in saved.read_text(), f"{path}: saving did not write the run's outputs"
    assert course.fingerprint(saved) == course.fingerprint(committed), (
        f"{path}: saved by JupyterLab after a run, it no longer reads as the course's version: the next make lab "
        "would count running its cells as a change")
    lab.phase("save")
    reveal_solution(lab, first)
    lab.phase("reveal")
