"""The classroom kit: nbgrader assignments, live slides and HTML handouts from the course notebooks.

One source serves the learner and the class: a committed notebook lays its exercises out as a learner
meets them, and the kit derives the rest. One module a job:

    cells.py       what each cell is to the kit (answer, reveal, check, widget; nbgrader's solution and test)
    layout.py      the exercises of a committed notebook: answer cell, reveal cell, solution file
    slides.py      the slide type of each cell
    annotation.py  the metadata a committed notebook carries (annotate), written in place or checked
    source.py      the nbgrader source derived from a committed notebook: solution cells, locked test cells
    course.py      the nbgrader course directory, the student release, any nbgrader command run there
    maths.py       formulas drawn as inline SVG (matplotlib's mathtext), for pages that work offline
    handouts.py    each executed notebook as one self-contained HTML page, with a contents page
    cli.py         the command line: ``python -m tools classroom annotate|student|handouts|nbgrader``

nbgrader_config.py holds the course's nbgrader settings; handout/ the handout page's template.
The names below are the kit's public face (each defined in its module); the handouts are
``handouts.handouts``.
"""

from .annotation import annotate, annotate_file
from .cells import ClassroomError
from .cli import main
from .course import code_stub, generate, nbgrader
from .layout import Exercise, exercises, reveal_source, structure_problems
from .source import source_notebook

__all__ = [
    "ClassroomError",
    "Exercise",
    "annotate",
    "annotate_file",
    "code_stub",
    "exercises",
    "generate",
    "main",
    "nbgrader",
    "reveal_source",
    "source_notebook",
    "structure_problems",
]
