"""The nbgrader source of a committed notebook: each answer cell becomes a solution cell, each reveal cell a
locked autograder test cell.

The solution cell holds the answer cell's lines before the check call, then the solution file between
``### BEGIN SOLUTION`` and ``### END SOLUTION``, then the check call. The test cell (id
``<answer cell id>-test``, 1 point) makes the very same call raise the learner's feedback:
``_autograded = ex.check_leaves(answer).assert_passed()`` (an assignment: it shows nothing when it passes;
a trailing ``;`` would not, under nbval, which runs cells outside IPython's history). Grading and the
feedback a learner reads therefore cannot disagree.
"""

from __future__ import annotations

import copy
from pathlib import Path

import nbformat

from .annotation import annotate
from .cells import BEGIN, END, TEST_MARK, ClassroomError, is_reveal_cell
from .layout import exercises

TEST_SOURCE = (
    TEST_MARK + " (nbgrader, locked): the check above must pass; when it fails, its hint is the feedback.\n"
    "_autograded = {call}.assert_passed()"
)
DEFAULT_POINTS = 1
SCHEMA = 3  # nbgrader's cell metadata schema


def _solution_meta(grade_id: str) -> dict:
    return {"grade": False, "grade_id": grade_id, "locked": False, "schema_version": SCHEMA, "solution": True,
            "task": False}


def _test_meta(grade_id: str, points) -> dict:
    return {"grade": True, "grade_id": grade_id, "locked": True, "points": points, "schema_version": SCHEMA,
            "solution": False, "task": False}


def source_notebook(nb, root: Path, where: str = "notebook"):
    """The nbgrader source of a committed notebook: answers as solution cells, reveal cells as locked tests."""
    nb = copy.deepcopy(nb)
    annotate(nb, where)
    found = {ex.solution_id: ex for ex in exercises(nb, root, where)}
    cells = []
    for cell in nb.cells:
        if is_reveal_cell(cell):
            continue
        cells.append(cell)
        ex = found.get(cell.get("id"))
        if ex is None:
            continue
        parts = [ex.scaffold, f"### {BEGIN}", ex.region, f"### {END}", ex.check_call]
        cell.source = "\n".join(p for p in parts if p)
        cell.metadata["nbgrader"] = _solution_meta(ex.solution_id)
        test = nbformat.v4.new_code_cell(TEST_SOURCE.format(call=ex.check_call))
        test.id = ex.test_id
        test.metadata["nbgrader"] = _test_meta(ex.test_id, DEFAULT_POINTS)
        test.metadata["slideshow"] = {"slide_type": "skip"}
        cells.append(test)
    ids = [c.get("id") for c in cells]
    dup = sorted({i for i in ids if ids.count(i) > 1})
    if dup:
        raise ClassroomError(f"{where}: duplicate cell ids {dup} (a test id is <answer cell id>-test)")
    nb.cells = cells
    return nb
