"""Exercises as a committed notebook lays them out: an answer cell, its reveal cell, the solution file it loads.

* The *answer cell* ends with the check call (``answer = ...`` then ``ex.check_leaves(answer)``); its
  stored output is the "Your turn" feedback.
* The *reveal cell* right after it (tag ``solution-reveal``) is two comment lines, the second
  ``# %load solutions/01_leaves.py``: uncommented and run, IPython replaces the cell with that file, the
  worked solution (``notebooks/solutions/``), which ends with the same check call. *Run All* therefore
  never shows a solution nor overwrites the learner's answer.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from pathlib import Path

from .cells import (
    BEGIN,
    END,
    REVEAL_TAG,
    ClassroomError,
    is_answer_cell,
    is_reveal_cell,
    is_solution_cell,
    is_test_cell,
    last_line,
    source_of,
)

REVEAL_SOURCE = (  # one line of instructions, short enough for a projector, then the line to uncomment
    '# Worked solution: after trying, delete the "# " before %load and run: the cell fills with it. '
    'Run again to check.\n'
    "# %load {path}"
)
LOAD_LINE = re.compile(r"^#\s*%load\s+(\S+\.py)\s*$", re.M)


@dataclass
class Exercise:
    solution_id: str  # the answer cell's id: in the nbgrader source it is the solution cell
    test_id: str
    check_call: str  # the answer cell's last line, e.g. "ex.check_leaves(answer)"
    answer_name: str | None  # the variable the check reads ("answer"), when it is a plain name
    scaffold: str  # the answer cell's lines before the check call (what the learner starts from)
    solution_file: Path
    region: str  # the worked solution: the solution file without its final check call


def reveal_source(solution: str) -> str:
    """The reveal cell for a solution file named relative to the notebook, e.g. 'solutions/01_leaves.py'."""
    return REVEAL_SOURCE.format(path=solution)


def _answer_name(call: str) -> str | None:
    node = ast.parse(call, mode="eval").body
    first = node.args[0] if isinstance(node, ast.Call) and node.args else None
    return first.id if isinstance(first, ast.Name) else None


def exercise_of(answer, reveal, root: Path, where: str = "") -> Exercise:
    """Read one exercise: its answer cell, its reveal cell and the solution file that cell loads."""
    where = f"{where} cell {answer.get('id')!r}"
    if reveal is None or not is_reveal_cell(reveal):
        raise ClassroomError(f"{where}: an answer cell must be followed by its reveal cell (tag {REVEAL_TAG!r})")
    load = LOAD_LINE.search(source_of(reveal))
    if load is None or source_of(reveal).strip() != reveal_source(load.group(1)):
        raise ClassroomError(
            f"{where}: its reveal cell must read exactly {reveal_source('solutions/NN_x.py')!r} "
            "(tools/classroom annotate rewrites a reveal cell with a %load line into that form)"
        )
    path = root / load.group(1)
    if not path.is_file():
        raise ClassroomError(f"{where}: its reveal cell loads {load.group(1)}, which does not exist")
    call = last_line(source_of(answer))
    solution = path.read_text().rstrip()
    if last_line(solution) != call:
        raise ClassroomError(f"{where}: {load.group(1)} must end with the answer cell's check call {call!r}")
    if not answer.get("id"):
        raise ClassroomError(f"{where}: cells need ids (nbformat 4.5); re-save the notebook with nbformat >= 5.1")
    scaffold = source_of(answer).rstrip()[: -len(call)].rstrip()
    region = solution[: -len(call)].rstrip()
    return Exercise(answer.id, f"{answer.id}-test", call, _answer_name(call), scaffold, path, region)


def exercises(nb, root: Path, where: str = "") -> list[Exercise]:
    """The exercises of a committed notebook whose solution files lie under ``root`` (its folder)."""
    cells = nb.cells
    return [
        exercise_of(cell, cells[i + 1] if i + 1 < len(cells) else None, root, where)
        for i, cell in enumerate(cells)
        if is_answer_cell(cell)
    ]


def structure_problems(nb, root: Path, where: str = "notebook") -> list[str]:
    """What keeps a committed notebook from the layout above (empty when it follows it)."""
    problems = []
    for i, cell in enumerate(nb.cells):
        before = nb.cells[i - 1] if i else None
        if is_reveal_cell(cell) and (before is None or not is_answer_cell(before)):
            problems.append(f"{where} cell {cell.get('id')!r}: a reveal cell must follow an answer cell")
        if is_solution_cell(cell) or is_test_cell(cell) or "nbgrader" in cell.metadata:
            problems.append(f"{where} cell {cell.get('id')!r}: nbgrader cells belong in the derived source only")
        if cell.cell_type == "markdown" and (BEGIN in source_of(cell) or END in source_of(cell)):
            problems.append(
                f"{where} cell {cell.get('id')!r}: markdown mentions '{BEGIN}'/'{END}', which nbgrader "
                "would take for a solution region; reword it"
            )
    try:
        exercises(nb, root, where)
    except ClassroomError as err:
        problems.append(str(err))
    return problems
