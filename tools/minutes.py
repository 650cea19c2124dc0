"""How long a notebook takes, counted the same way for every notebook (`python -m tools minutes`).

The rule: prose at 200 words a minute, code at 10 lines a minute, 5 minutes for each exercise. A word is what
stays between spaces once HTML tags and link targets are taken out; a line of code is a line that is neither
blank nor a comment; an exercise is a code cell that calls an `ex.check_...` function and is not a reveal cell
(`%load`). A part whose heading says "optional", "going deeper" or "appendix" is counted apart, down to the
next heading of the same or a higher level.

The course map (README.md and notebook 00) and each notebook's "Time: about N minutes" line may not promise
less than this count rounded up; tests/notebooks/test_time_promises.py holds them to it.
"""

from __future__ import annotations

import json
import math
import re
import sys
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path

WORDS_A_MINUTE = 200
LINES_A_MINUTE = 10
MINUTES_AN_EXERCISE = 5
OPTIONAL_HEADING = re.compile(r"optional|going deeper|appendix", re.IGNORECASE)
HEADING = re.compile(r"^(#+)\s+(.*)")
NOT_WORDS = re.compile(r"<[^>]+>|\(http[^)]*\)")
EXERCISE_CALL = re.compile(r"\bex\.check_\w+\(")


@dataclass(frozen=True)
class Count:
    """A notebook's reading time in minutes (exact fractions), its optional part apart."""

    core: Fraction
    optional: Fraction
    exercises: int

    @property
    def core_minutes(self) -> int:
        return math.ceil(self.core)

    @property
    def optional_minutes(self) -> int:
        return math.ceil(self.optional)


def cell_minutes(cell: dict) -> tuple[Fraction, bool]:
    """The minutes one cell takes, and whether it is an exercise."""
    source = "".join(cell["source"]) if isinstance(cell["source"], list) else cell["source"]
    if cell["cell_type"] == "markdown":
        return Fraction(len(NOT_WORDS.sub(" ", source).split()), WORDS_A_MINUTE), False
    lines = [line for line in source.splitlines() if line.strip() and not line.strip().startswith("#")]
    exercise = bool(EXERCISE_CALL.search(source)) and "%load" not in source
    return Fraction(len(lines), LINES_A_MINUTE) + (MINUTES_AN_EXERCISE if exercise else 0), exercise


def count(notebook: dict) -> Count:
    """Count a notebook given as its JSON (a dict with "cells")."""
    core = optional = Fraction(0)
    exercises, optional_level = 0, None
    for cell in notebook["cells"]:
        if cell["cell_type"] == "markdown":
            heading = HEADING.match("".join(cell["source"]))
            if heading:
                level = len(heading.group(1))
                if optional_level is not None and level <= optional_level:
                    optional_level = None
                if OPTIONAL_HEADING.search(heading.group(2)):
                    optional_level = level
        minutes, exercise = cell_minutes(cell)
        exercises += exercise
        if optional_level is None:
            core += minutes
        else:
            optional += minutes
    return Count(core, optional, exercises)


def count_file(path: Path) -> Count:
    return count(json.loads(Path(path).read_text(encoding="utf-8")))


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
