"""What each cell of a course notebook is to the kit: answer, reveal, check or widget cell, and nbgrader's
solution and test cells; the error for a notebook the kit cannot use."""

from __future__ import annotations

import re

REVEAL_TAG = "solution-reveal"  # the cell after an answer cell: the commented %load of its worked solution
CHECK_TAG = "check"  # a cell that only holds checks for CI: collapsed, skipped in slides and handouts
CHECK_CALL = re.compile(r"^\w+\.check_\w+\(.*\)$")  # the last line of an answer cell: ex.check_leaves(answer)
BEGIN, END = "BEGIN SOLUTION", "END SOLUTION"  # nbgrader's delimiters (ClearSolutions matches them anywhere in a line)
TEST_MARK = "# Autograder test"  # the first line of the locked test cells the kit writes
FENCE = re.compile(r"^\s*(```|~~~)")  # a markdown code fence: no heading and no formula inside


class ClassroomError(Exception):
    """A notebook the kit cannot use as it stands (the message says which cell and why)."""


def source_of(cell) -> str:
    return cell.source if isinstance(cell.source, str) else "".join(cell.source)


def tags_of(cell) -> list:
    return cell.metadata.get("tags", [])


def last_line(source: str) -> str:
    lines = [line for line in source.strip().splitlines() if line.strip()]
    return lines[-1].strip() if lines else ""


def is_answer_cell(cell) -> bool:
    return cell.cell_type == "code" and bool(CHECK_CALL.match(last_line(source_of(cell))))


def is_reveal_cell(cell) -> bool:
    return cell.cell_type == "code" and REVEAL_TAG in tags_of(cell)


def is_check_cell(cell) -> bool:
    return cell.cell_type == "code" and CHECK_TAG in tags_of(cell)


def is_solution_cell(cell) -> bool:
    """A cell with nbgrader's solution delimiters: in a derived source notebook, never in a committed one."""
    return cell.cell_type == "code" and BEGIN in source_of(cell)


def is_test_cell(cell) -> bool:
    return cell.cell_type == "code" and source_of(cell).startswith(TEST_MARK)


def is_widget_cell(cell) -> bool:
    meta = cell.metadata.get("autograd_lab")
    return cell.cell_type == "code" and isinstance(meta, dict) and "twin" in meta
