"""How long a notebook takes, counted the same way for every notebook (`python -m tools minutes`).

The rule counts what a learner does, who reads, runs every cell, reads what it prints, predicts where asked,
plays with each widget and does the exercises:

- prose at 150 words a minute (a word is what stays between spaces once HTML tags and link targets are out);
- code at 10 lines a minute (a line that is neither blank nor a comment; a reveal cell, ``%load``, is counted
  with its exercise);
- printed output at 20 lines a minute, from the stored outputs (so run the notebook before counting); a graph
  or a chart is 1 minute;
- 2 minutes for each "Predict" in the prose (stop, think, write the prediction down);
- 3 minutes for each widget;
- 8 minutes for each exercise (a code cell that calls an `ex.check_...` function), 12 when its worked solution
  (the file its reveal cell loads) has more than 8 lines that are neither blank nor a comment.

A part whose heading says "optional", "going deeper" or "appendix" is counted apart, down to the next heading of
the same or a higher level.

The course map (README.md and notebook 00) and each notebook's "Time: about N minutes" line state this count
rounded up; tests/notebooks/test_time_promises.py holds them to it.
"""

from __future__ import annotations

import json
import math
import re
import sys
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path

WORDS_A_MINUTE = 150
LINES_A_MINUTE = 10
OUTPUT_LINES_A_MINUTE = 20
MINUTES_A_PICTURE = 1
MINUTES_A_PREDICTION = 2
MINUTES_A_WIDGET = 3
MINUTES_AN_EXERCISE = 8
MINUTES_A_LONG_EXERCISE = 12
LONG_SOLUTION_LINES = 8  # a worked solution longer than this makes its exercise a long one
OPTIONAL_HEADING = re.compile(r"optional|going deeper|appendix", re.IGNORECASE)
HEADING = re.compile(r"^(#+)\s+(.*)")
NOT_WORDS = re.compile(r"<[^>]+>|\(http[^)]*\)")
EXERCISE_CALL = re.compile(r"\bex\.check_\w+\(")
PREDICT = re.compile(r"\bPredict\b")
LOAD = re.compile(r"^#?\s*%load\s+(?:-y\s+)?(\S+)", re.M)  # the %load line, not "%load" in the instructions
WIDGET = "application/vnd.jupyter.widget-view+json"
PICTURES = ("image/svg+xml", "image/png", "image/jpeg")


@dataclass(frozen=True)
class Count:
    """A notebook's time in minutes (exact fractions), its optional part apart."""

    core: Fraction
    optional: Fraction
    exercises: int

    @property
    def core_minutes(self) -> int:
        return math.ceil(self.core)

    @property
    def optional_minutes(self) -> int:
        return math.ceil(self.optional)


def _source(cell: dict) -> str:
    return "".join(cell["source"]) if isinstance(cell["source"], list) else cell["source"]


def _code_lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.strip() and not line.strip().startswith("#")]


def solution_lines(folder: Path | None, source: str) -> int:
    """The lines of the worked solution a reveal cell loads (0 when it loads none, or the file is not there)."""
    found = LOAD.search(source)
    if not found or folder is None or not (folder / found.group(1)).is_file():
        return 0
    return len(_code_lines((folder / found.group(1)).read_text(encoding="utf-8")))


def output_minutes(cell: dict) -> Fraction:
    """The minutes a code cell's stored outputs take to read: text by lines, a picture or a widget whole."""
    minutes = Fraction(0)
    for out in cell.get("outputs", []):
        data = out.get("data", {})
        if WIDGET in data:
            minutes += MINUTES_A_WIDGET
        elif any(kind in data for kind in PICTURES):
            minutes += MINUTES_A_PICTURE
        else:
            text = out.get("text") or data.get("text/plain", "")
            text = "".join(text) if isinstance(text, list) else str(text)
            minutes += Fraction(len([line for line in text.splitlines() if line.strip()]), OUTPUT_LINES_A_MINUTE)
    return minutes


def cell_minutes(cell: dict, solution: int = 0) -> tuple[Fraction, bool]:
    """The minutes one cell takes, and whether it is an exercise (``solution``: its worked solution's lines)."""
    source = _source(cell)
    if cell["cell_type"] == "markdown":
        words = Fraction(len(NOT_WORDS.sub(" ", source).split()), WORDS_A_MINUTE)
        return words + MINUTES_A_PREDICTION * len(PREDICT.findall(source)), False
    if cell["cell_type"] != "code" or "%load" in source:
        return Fraction(0), False
    exercise = bool(EXERCISE_CALL.search(source))
    minutes = Fraction(len(_code_lines(source)), LINES_A_MINUTE) + output_minutes(cell)
    if exercise:
        minutes += MINUTES_A_LONG_EXERCISE if solution > LONG_SOLUTION_LINES else MINUTES_AN_EXERCISE
    return minutes, exercise


def count(notebook: dict, folder: Path | None = None) -> Count:
    """Count a notebook given as its JSON (a dict with "cells"); ``folder`` holds it, for its worked solutions."""
    cells = notebook["cells"]
    solutions = [solution_lines(folder, _source(c)) for c in cells if c["cell_type"] == "code"]
    solutions = iter([s for s in solutions if s])
    core = optional = Fraction(0)
    exercises, optional_level = 0, None
    for cell in cells:
        if cell["cell_type"] == "markdown":
            heading = HEADING.match(_source(cell))
            if heading:
                level = len(heading.group(1))
                if optional_level is not None and level <= optional_level:
                    optional_level = None
                if OPTIONAL_HEADING.search(heading.group(2)):
                    optional_level = level
        is_exercise = cell["cell_type"] == "code" and "%load" not in _source(cell) \
            and bool(EXERCISE_CALL.search(_source(cell)))
        minutes, exercise = cell_minutes(cell, next(solutions, 0) if is_exercise else 0)
        exercises += exercise
        if optional_level is None:
            core += minutes
        else:
            optional += minutes
    return Count(core, optional, exercises)


def count_file(path: Path) -> Count:
    path = Path(path)
    return count(json.loads(path.read_text(encoding="utf-8")), path.parent)


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) > 1 or (argv and argv[0] in ("-h", "--help")):
        print("usage: python -m tools minutes [FOLDER]  (default: notebooks)\n\n" + __doc__)
        return 0 if argv and argv[0] in ("-h", "--help") else 2
    folder = Path(argv[0] if argv else "notebooks")
    if not folder.is_dir():
        print(f"minutes: {folder} is not a folder of notebooks; give the folder, e.g. notebooks", file=sys.stderr)
        return 2
    total_core = total_optional = Fraction(0)
    for path in sorted(folder.glob("*.ipynb")):
        c = count_file(path)
        total_core, total_optional = total_core + c.core, total_optional + c.optional
        print(f"{path.name:45s} core {c.core_minutes:4d} min  optional {c.optional_minutes:3d} min  "
              f"exercises {c.exercises}")
    print(f"course: core {math.ceil(total_core)} min, optional {math.ceil(total_optional)} min (rounded up)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
